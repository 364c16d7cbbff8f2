"""A checkpoint's own tokenizer behind the executor's protocol; finding it on disk is ``scenarios/spec/checkpoints.py``.

``HfTokenizer`` wraps one for the executor's ``Tokenizer`` protocol (pad, bos, eos ids; encode
without special tokens; decode), and applies the checkpoint's chat template where it has one.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


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
