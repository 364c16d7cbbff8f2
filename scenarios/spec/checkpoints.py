"""A model's files on disk: a local checkpoint directory, or a hub name already in the local cache.

    "ckpt/"            ─► AutoTokenizer.from_pretrained("ckpt/", local_files_only=True)
    "Qwen/Qwen3-8B"    ─► the same, resolved from the local Hugging Face cache; never downloaded
    anything else      ─► ValueError: what was looked for, and how to get it there

``cached_checkpoint`` finds a hub name's snapshot in the cache (never the network) for ``model.path``.
The executor wraps the tokenizer (``executor/generation/hf_tokenizer.py``); ``asyncrl lengths`` counts a completion
log's tokens with it. transformers and huggingface_hub are imported on call only.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

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
