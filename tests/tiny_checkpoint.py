"""A tiny checkpoint built in code and saved locally: a word-level tokenizer and a two-layer Llama.

Nothing is downloaded: the tokenizer is a ``tokenizers`` WordLevel model over a given word list
(whitespace-split, special tokens ``<pad> <bos> <eos> <unk>``), wrapped as a
``PreTrainedTokenizerFast``; the model is ``LlamaForCausalLM`` from a small config. Both are saved
with ``save_pretrained``, so ``AutoTokenizer`` and ``AutoModelForCausalLM`` load the directory.

    python -m tests.tiny_checkpoint runs/tiny-ckpt      (what docs/executor.md's task-mode example uses)
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

SPECIAL = ("<pad>", "<bos>", "<eos>", "<unk>")
#: Words of the arithmetic task of tests/tasks_example.py, and a few of a chat template.
WORDS = (*"0123456789", "+", "=", "what", "is", "answer", "user:", "assistant:")
#: A chat template in the usual Jinja form: each message as "role: content", then the assistant's turn.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{{ message['role'] }}: {{ message['content'] }} {% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)


def save_word_tokenizer(path: Path, words: Sequence[str] = WORDS, chat_template: str | None = None) -> Path:
    """A word-level tokenizer over ``words`` (split on whitespace), saved to ``path``."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: index for index, token in enumerate([*SPECIAL, *dict.fromkeys(words)])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>", unk_token="<unk>"
    )
    if chat_template is not None:
        tokenizer.chat_template = chat_template
    tokenizer.save_pretrained(path)
    return path


def save_tiny_checkpoint(path: Path, seed: int = 0) -> Path:
    """The word tokenizer (with a chat template) and a two-layer Llama over its vocabulary, saved to ``path``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    save_word_tokenizer(path, chat_template=CHAT_TEMPLATE)
    config = LlamaConfig(
        vocab_size=len(SPECIAL) + len(WORDS),
        hidden_size=64,
        intermediate_size=256,  # the tiny preset's architecture, with this vocabulary
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    torch.manual_seed(seed)
    LlamaForCausalLM(config).save_pretrained(path)
    return path


if __name__ == "__main__":
    print(f"wrote {save_tiny_checkpoint(Path(sys.argv[1] if len(sys.argv) > 1 else 'runs/tiny-ckpt'))}")
