"""A model section from a checkpoint's config.json: the same figures as the preset of the same shape."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from asyncrl.scenarios.costs.catalog import MODEL_PRESETS
from asyncrl.scenarios.spec.loading import ScenarioError, load_scenario, validate_scenario
from asyncrl.scenarios.spec.model_config import figures_from_config
from hypothesis import given, settings
from hypothesis import strategies as st

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


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"num_attention_heads": 2000, "head_dim": None},
            r"num_attention_heads \(2000\) exceeds hidden_size \(64\) and no head_dim",
        ),
        ({"num_key_value_heads": -2}, r"no positive integer num_key_value_heads \(found -2\)"),
        ({"num_key_value_heads": 8}, r"num_key_value_heads \(8\) exceeds num_attention_heads \(4\)"),
        ({"num_key_value_heads": "2"}, r"no positive integer num_key_value_heads \(found '2'\)"),
        ({"vocab_size": 10**40}, r"no positive integer vocab_size \(found a 41-digit number\)"),
        ({"num_experts": -4, "num_experts_per_tok": 2}, r"no non-negative integer num_experts \(found -4\)"),
        ({"num_experts": 4, "num_experts_per_tok": 8}, r"num_experts_per_tok \(8\) exceeds num_experts \(4\)"),
    ],
)
def test_a_config_figure_out_of_range_names_its_own_key(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        figures_from_config({**dense_config("tiny", "llama", False), **change})


def test_a_config_nested_thousands_deep_or_holding_nan_is_one_line(tmp_path: Path) -> None:
    deep = tmp_path / "deep"
    deep.mkdir()
    (deep / "config.json").write_text('{"a":' * 5000 + "1" + "}" * 5000)
    with pytest.raises(ScenarioError, match="nested too deeply to read"):
        validate_scenario(with_model({"path": str(deep)}))
    nan = tmp_path / "nan"
    nan.mkdir()
    (nan / "config.json").write_text('{"hidden_size": NaN}')
    with pytest.raises(ScenarioError, match="holds NaN, which is not a number"):
        validate_scenario(with_model({"path": str(nan)}))


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size")
KEYS += ("intermediate_size", "num_experts", "num_experts_per_tok", "moe_intermediate_size", "tie_word_embeddings")


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(KEYS), JSON_VALUES | st.integers(min_value=-5, max_value=4096)))
def test_any_config_gives_figures_or_a_scenario_error(config: dict[str, Any]) -> None:
    """Whatever a config.json holds under the keys read, the answer is positive figures or a ScenarioError."""
    try:
        figures = figures_from_config({**dense_config("tiny", "llama", False), **config})
    except ScenarioError as error:
        assert "\n" not in str(error)
        return
    assert all(isinstance(value, int) and value > 0 for value in figures.values())
