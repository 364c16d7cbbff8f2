"""A model section from a checkpoint's config.json: the same figures as the preset of the same shape."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from asyncrl.scenarios.costs.catalog import MODEL_PRESETS
from asyncrl.scenarios.spec.loading import ScenarioError, load_scenario, validate_scenario
from asyncrl.scenarios.spec.model_config import figures_from_config

# (preset, transformers model_type, tie_word_embeddings) as the published checkpoints have them
DENSE = [
    ("llama-3.1-8b", "llama", False),
    ("qwen2.5-1.5b", "qwen2", True),
    ("qwen2.5-7b", "qwen2", False),
    ("qwen3-8b", "qwen3", False),
    ("tiny", "llama", False),
]
QWEN3_MOE = {  # Qwen3-30B-A3B's config.json, the keys the count reads
    "model_type": "qwen3_moe",
    "hidden_size": 2048,
    "num_hidden_layers": 48,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "vocab_size": 151936,
    "intermediate_size": 6144,
    "moe_intermediate_size": 768,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "tie_word_embeddings": False,
}


def dense_config(preset: str, family: str, tied: bool) -> dict[str, Any]:
    p = MODEL_PRESETS[preset]
    return {
        "model_type": family,
        "hidden_size": p.hidden,
        "num_hidden_layers": p.layers,
        "num_attention_heads": p.heads,
        "num_key_value_heads": p.kv_heads,
        "head_dim": p.head_dim,
        "vocab_size": p.vocab,
        "intermediate_size": p.intermediate,
        "tie_word_embeddings": tied,
    }


def checkpoint(folder: Path, config: dict[str, Any]) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def with_model(model: dict[str, Any]) -> dict[str, Any]:
    data = load_scenario("quickstart").model_dump(mode="json")
    return {**data, "model": model}


@pytest.mark.parametrize(("preset", "family", "tied"), DENSE, ids=[case[0] for case in DENSE])
def test_a_dense_checkpoint_gives_its_presets_figures(tmp_path: Path, preset: str, family: str, tied: bool) -> None:
    folder = checkpoint(tmp_path / "ckpt", dense_config(preset, family, tied))
    from_path = validate_scenario(with_model({"path": str(folder)})).model
    from_preset = validate_scenario(with_model({"preset": preset})).model
    for name in ("params", "active_params", "layers", "hidden", "heads", "kv_heads", "head_dim", "vocab"):
        assert getattr(from_path, name) == getattr(from_preset, name), name


def test_a_mixture_of_experts_checkpoint_counts_all_experts_and_the_active_ones(tmp_path: Path) -> None:
    model = validate_scenario(with_model({"path": str(checkpoint(tmp_path / "moe", QWEN3_MOE))})).model
    assert model.params == MODEL_PRESETS["qwen3-30b-a3b"].params == 30_532_122_624
    # by hand: per layer attention 18,874,368 + q/k norms 256 + norms 4,096 + router 262,144 + 8 of 128 experts
    # 3·2048·768 each (37,748,736); × 48 layers; embeddings and head 2·151,936·2,048; final norm 2,048
    assert model.active_params == 48 * (18_874_368 + 256 + 4_096 + 262_144 + 37_748_736) + 622_329_856 + 2_048
    assert (model.layers, model.kv_heads, model.head_dim) == (48, 4, 128)


def test_figures_given_in_the_scenario_win_over_the_checkpoints(tmp_path: Path) -> None:
    folder = checkpoint(tmp_path / "ckpt", dense_config("qwen2.5-7b", "qwen2", False))
    model = validate_scenario(with_model({"path": str(folder), "layers": 14})).model
    assert model.layers == 14 and model.params == MODEL_PRESETS["qwen2.5-7b"].params


def test_a_config_without_a_figure_names_the_key(tmp_path: Path) -> None:
    config = dense_config("tiny", "llama", False)
    del config["hidden_size"]
    with pytest.raises(ScenarioError, match="hidden_size"):
        validate_scenario(with_model({"path": str(checkpoint(tmp_path / "ckpt", config))}))
    with pytest.raises(ScenarioError, match="hidden_size"):
        figures_from_config(config)


def test_a_path_without_a_config_still_asks_for_a_preset(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ScenarioError, match=r"give a preset, a model\.path with a config\.json"):
        validate_scenario(with_model({"path": str(tmp_path / "empty")}))
