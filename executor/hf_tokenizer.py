"""A checkpoint's own tokenizer, from disk only: a local directory, or a hub name already in the local cache.

``cached_checkpoint`` finds a hub name's snapshot in the cache (never the network) for ``model.path``.

    "ckpt/"            ─► AutoTokenizer.from_pretrained("ckpt/", local_files_only=True)
    "Qwen/Qwen3-8B"    ─► the same, resolved from the local Hugging Face cache; never downloaded
    anything else      ─► ValueError: what was looked for, and how to get it there

``HfTokenizer`` wraps one for the executor's ``Tokenizer`` protocol (pad, bos, eos ids; encode
without special tokens; decode), and applies the checkpoint's chat template where it has one.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


def load_hf_tokenizer(name_or_path: str | Path, trust_remote_code: bool = False) -> PreTrainedTokenizerBase:
    """The tokenizer at a local path or in the local cache; a ValueError naming what is missing otherwise."""
    from transformers import AutoTokenizer

    path = Path(name_or_path)
    if not path.is_dir() and (path.is_absolute() or str(name_or_path).startswith((".", "~"))):
        raise ValueError(f"{name_or_path}: no such directory")
    try:
        return AutoTokenizer.from_pretrained(
            str(name_or_path), local_files_only=True, trust_remote_code=trust_remote_code
        )
    except (OSError, ValueError):
        where = "the directory has no tokenizer files" if path.is_dir() else "not in the local Hugging Face cache"
        raise ValueError(
            f"{name_or_path}: {where} (asyncrl never downloads: give a local directory, or fetch it into the "
            f"cache first, e.g. `hf download {name_or_path}`)"
        ) from None


def cached_checkpoint(name: str | Path) -> Path:
    """The local snapshot of a hub model already in the Hugging Face cache; a ValueError naming model.path else."""
    from huggingface_hub import try_to_load_from_cache

    try:
        config = try_to_load_from_cache(str(name), "config.json")
    except ValueError:  # not a valid repository id either
        config = None
    if not isinstance(config, str):
        raise ValueError(
            f"model.path: {name} is not a directory, and not in the local Hugging Face cache (asyncrl never "
            f"downloads: give a local checkpoint, or fetch it into the cache first, e.g. `hf download {name}`)"
        )
    return Path(config).parent


class HfTokenizer:
    """A transformers tokenizer behind the executor's ``Tokenizer`` protocol."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase) -> None:
        self.inner = tokenizer
        eos = tokenizer.eos_token_id
        if eos is None:
            raise ValueError("model.path: the tokenizer has no eos_token; the executor needs one to stop generation")
        self.eos_token_id: int = int(eos)
        self.pad_token_id: int = int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos)
        self.bos_token_id: int = int(tokenizer.bos_token_id if tokenizer.bos_token_id is not None else eos)

    @property
    def vocab_size(self) -> int:
        return len(self.inner)

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self.inner, "chat_template", None))

    def encode(self, text: str) -> list[int]:
        return list(self.inner.encode(text, add_special_tokens=False))

    def decode(self, ids: Iterable[int]) -> str:
        return str(self.inner.decode(list(ids), skip_special_tokens=True))

    def prompt_ids(self, prompt: str | list[dict[str, Any]]) -> list[int]:
        """Token ids the model is fed: the chat template with a generation prompt where the tokenizer has one,
        else BOS (if it has one) and the text. A list of messages needs a chat template."""
        if self.has_chat_template:
            messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
            ids = self.inner.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
            if isinstance(ids, dict) or hasattr(ids, "keys"):  # transformers 5 returns a BatchEncoding
                ids = ids["input_ids"]
            return [int(token) for token in ids]
        if not isinstance(prompt, str):
            raise ValueError("the tokenizer has no chat template; give each prompt as text")
        bos = [self.bos_token_id] if self.inner.bos_token_id is not None else []
        return [*bos, *self.encode(prompt)]
