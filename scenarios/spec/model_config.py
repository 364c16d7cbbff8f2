"""A model section's architecture figures from a checkpoint's ``config.json`` (transformers' format).

    model.path: ckpt/ ─► ckpt/config.json ─► figures_from_config ─► params, active_params, layers, hidden,
                                                                     heads, kv_heads, head_dim, vocab

The weights are counted from the architecture, as transformers builds it, for the decoder-only families
RL runs train (Llama, Mistral, Qwen2, Qwen3 and their mixture-of-experts forms, Mixtral, Qwen2-MoE):

    embeddings  vocab · hidden, and the output head again unless ``tie_word_embeddings``
    per layer   attention: q and o (hidden · heads · head_dim each), k and v (hidden · kv_heads · head_dim
                each), their biases where the family has them (Qwen2: q, k, v; ``attention_bias``),
                Qwen3's q and k norms (head_dim each); two norms (hidden each);
                MLP: 3 · hidden · intermediate (gate, up, down), or for a mixture of experts a router
                (hidden · experts), every expert's 3 · hidden · moe_intermediate, and a shared expert
                with its gate where the family has one (Qwen2-MoE)
    final norm  hidden

``active_params`` counts the experts a token passes through (``num_experts_per_tok``) instead of all of
them, everything else once. The shipped presets' ``params`` are these counts to the weight
(``tests/test_model_config.py``). Only the file is read: no transformers import, no weights.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..files.errors import ScenarioError
from ..files.textfile import parse_json, shown_value

CONFIG_FILE = "config.json"
#: Families whose q, k and v projections carry a bias without saying so in the config.
QKV_BIAS = frozenset({"qwen2", "qwen2_moe"})
#: The largest figure read (hidden units, layers, vocabulary, experts): a config's are below 10^7.
MAX_FIGURE = 10**9
#: Families that normalise each head's queries and keys (a weight of head_dim each).
QK_NORM = frozenset({"qwen3", "qwen3_moe"})


def config_path(path: Path) -> Path | None:
    """``config.json`` of a local checkpoint directory, or of a hub name already in the local cache; None if
    there is none (a hub name not cached: the figures must come from a preset or be given)."""
    if (path / CONFIG_FILE).is_file():
        return path / CONFIG_FILE
    if path.exists():
        return None
    try:
        from .checkpoints import cached_checkpoint

        return cached_checkpoint(path) / CONFIG_FILE
    except (ImportError, ValueError):
        return None


def read_config(path: Path) -> dict[str, Any]:
    """The checkpoint's config, its text model's where it nests one (``text_config``); ScenarioError if unreadable."""
    try:
        config = parse_json(path.read_bytes(), f"model.path: {path}", strict=True)
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ScenarioError(f"model.path: {path} is not a readable config.json ({exc})") from None
    except ValueError as exc:  # nested too deeply, NaN or Infinity
        raise ScenarioError(str(exc)) from None
    if not isinstance(config, dict):
        raise ScenarioError(f"model.path: {path} holds no mapping")
    text = config.get("text_config")
    return {**config, **text} if isinstance(text, dict) else config


def figures_from_config(config: Mapping[str, Any], source: str = CONFIG_FILE) -> dict[str, int]:
    """The model section's figures of a transformers config; ScenarioError naming the key it lacks."""
    hidden, layers, heads = (
        _int(config, key, source) for key in ("hidden_size", "num_hidden_layers", "num_attention_heads")
    )
    kv_heads = _int(config, "num_key_value_heads", source, default=heads)
    if kv_heads > heads:
        raise ScenarioError(
            f"model.path: {source}: num_key_value_heads ({kv_heads}) exceeds num_attention_heads ({heads})"
        )
    if config.get("head_dim") is None and heads > hidden:
        raise ScenarioError(
            f"model.path: {source}: num_attention_heads ({heads}) exceeds hidden_size ({hidden}) and no head_dim "
            "is given"
        )
    head_dim = _int(config, "head_dim", source, default=hidden // heads)
    vocab = _int(config, "vocab_size", source)
    family = str(config.get("model_type", ""))
    attention = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim
    if family in QKV_BIAS or config.get("attention_bias"):
        attention += heads * head_dim + 2 * kv_heads * head_dim + (hidden if config.get("attention_bias") else 0)
    if family in QK_NORM:
        attention += 2 * head_dim
    mlp, active_mlp = _mlp(config, hidden, source)
    fixed_per_layer = attention + 2 * hidden
    embeddings = vocab * hidden * (1 if config.get("tie_word_embeddings", False) else 2)
    return {
        "params": embeddings + layers * (fixed_per_layer + mlp) + hidden,
        "active_params": embeddings + layers * (fixed_per_layer + active_mlp) + hidden,
        "layers": layers,
        "hidden": hidden,
        "heads": heads,
        "kv_heads": kv_heads,
        "head_dim": head_dim,
        "vocab": vocab,
    }


def _mlp(config: Mapping[str, Any], hidden: int, source: str) -> tuple[int, int]:
    """Weights of one layer's MLP: all of them, and those one token passes through."""
    key = "num_experts" if config.get("num_experts") is not None else "num_local_experts"
    experts = _int(config, key, source, default=0, zero=True)
    if not experts:
        dense = 3 * hidden * _int(config, "intermediate_size", source)
        return dense, dense
    intermediate = _int(config, "moe_intermediate_size", source, default=0, zero=True)
    per_expert = 3 * hidden * (intermediate or _int(config, "intermediate_size", source))
    router = hidden * experts
    shared = _int(config, "shared_expert_intermediate_size", source, default=0, zero=True)
    shared_weights = 3 * hidden * shared + hidden if shared else 0  # the shared expert and its gate
    active = _int(config, "num_experts_per_tok", source)
    if active > experts:
        raise ScenarioError(f"model.path: {source}: num_experts_per_tok ({active}) exceeds {key} ({experts})")
    return router + experts * per_expert + shared_weights, router + active * per_expert + shared_weights


def _int(config: Mapping[str, Any], key: str, source: str, default: int | None = None, zero: bool = False) -> int:
    """``config[key]``, a positive integer (or 0 where ``zero``); ``default`` where absent or null, if given."""
    value = config.get(key)
    if value is None and default is not None:
        return default
    least = 0 if zero else 1
    if not isinstance(value, int) or isinstance(value, bool) or value < least or value > MAX_FIGURE:
        kind = "non-negative" if zero else "positive"
        raise ScenarioError(
            f"model.path: {source} has no {kind} integer {key} (found {shown_value(value, MAX_FIGURE)})"
        )
    return value
