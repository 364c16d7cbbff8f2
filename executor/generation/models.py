"""Causal language models for the executor: random ones from a preset, or trained ones from disk.

``build_model`` turns the architecture figures of ``scenarios.costs.catalog.MODEL_PRESETS`` into a transformers config and
a randomly initialised model (no hub access: configs only). ``load_model`` reads a local safetensors checkpoint.

Whether the input embedding and the output head share their weights is not a preset figure; it is inferred from the
preset's parameter count (tied when the untied count exceeds it by exactly ``vocab * hidden``), so every preset builds a
model of exactly ``preset.params`` parameters when the vocabulary is not overridden.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import (
    AutoModelForCausalLM,
    GPTNeoXConfig,
    LlamaConfig,
    PreTrainedModel,
    Qwen2Config,
    Qwen3Config,
)

from ...scenarios.costs.catalog import MODEL_PRESETS, ModelPreset
from .compat import PretrainedConfig

SUPPORTED_FAMILIES = ("llama", "qwen2", "qwen3", "gpt_neox")
PYTHIA_ROTARY_FRACTION = 0.25  # GPT-NeoX (Pythia) rotates a quarter of each head's dimensions


def build_model(
    preset: str,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    vocab_size: int | None = None,
) -> PreTrainedModel:
    """A randomly initialised causal LM with the preset's architecture, in eval mode.

    ``vocab_size`` overrides the preset's vocabulary (a task's tokenizer may have fewer tokens).
    """
    figures = MODEL_PRESETS[preset]
    config = build_config(figures, vocab_size=vocab_size)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)  # fp32, then cast: transformers < 4.56 names no ``dtype``
    return model.to(dtype).eval()


def build_config(figures: ModelPreset, vocab_size: int | None = None) -> PretrainedConfig:
    """The transformers config of a preset's architecture family."""
    if figures.family not in SUPPORTED_FAMILIES:
        raise ValueError(f"model family {figures.family!r} is not supported; use one of {SUPPORTED_FAMILIES}")
    vocab = figures.vocab if vocab_size is None else vocab_size
    tied = _embeddings_are_tied(figures)
    if figures.family == "gpt_neox":
        return _gpt_neox_config(figures, vocab, tied)
    config_class = {"llama": LlamaConfig, "qwen2": Qwen2Config, "qwen3": Qwen3Config}[figures.family]
    return config_class(
        vocab_size=vocab,
        hidden_size=figures.hidden,
        intermediate_size=figures.intermediate,
        num_hidden_layers=figures.layers,
        num_attention_heads=figures.heads,
        num_key_value_heads=figures.kv_heads,
        head_dim=figures.head_dim,
        tie_word_embeddings=tied,
    )


def _gpt_neox_config(figures: ModelPreset, vocab: int, tied: bool) -> GPTNeoXConfig:
    if figures.heads != figures.kv_heads or figures.heads * figures.head_dim != figures.hidden:
        raise ValueError("gpt_neox needs kv_heads == heads and heads * head_dim == hidden")
    return GPTNeoXConfig(
        vocab_size=vocab,
        hidden_size=figures.hidden,
        intermediate_size=figures.intermediate,
        num_hidden_layers=figures.layers,
        num_attention_heads=figures.heads,
        rotary_pct=PYTHIA_ROTARY_FRACTION,
        tie_word_embeddings=tied,
    )


def _embeddings_are_tied(figures: ModelPreset) -> bool:
    """True when the preset's parameter count only adds up with one shared embedding matrix."""
    untied = _untied_param_count(figures)
    return untied - figures.params == figures.vocab * figures.hidden


def _untied_param_count(figures: ModelPreset) -> int:
    """Parameters of the preset's architecture with separate input embedding and output head."""
    h, layers, vocab = figures.hidden, figures.layers, figures.vocab
    q_width, kv_width = figures.heads * figures.head_dim, figures.kv_heads * figures.head_dim
    embeddings = 2 * vocab * h
    if figures.family == "gpt_neox":  # biased qkv/dense/MLP, LayerNorms with bias
        attention = h * 3 * q_width + 3 * q_width + q_width * h + h
        mlp = 2 * h * figures.intermediate + figures.intermediate + h
        return embeddings + layers * (attention + mlp + 4 * h) + 2 * h
    attention = h * (q_width + 2 * kv_width) + q_width * h
    if figures.family == "qwen2":  # biased q, k and v projections
        attention += q_width + 2 * kv_width
    if figures.family == "qwen3":  # RMSNorm on queries and keys per head
        attention += 2 * figures.head_dim
    mlp = 3 * h * figures.intermediate
    return embeddings + layers * (attention + mlp + 2 * h) + h


def load_model(path: Path, trust_remote_code: bool = False) -> PreTrainedModel:
    """A causal LM from a local directory of safetensors weights, in eval mode."""
    model = AutoModelForCausalLM.from_pretrained(
        path,
        local_files_only=True,
        use_safetensors=True,
        trust_remote_code=trust_remote_code,
    )
    return model.eval()
