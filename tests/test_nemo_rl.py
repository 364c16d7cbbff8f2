"""scenarios.nemo_rl: a NeMo-RL GRPO config as asyncrl plans it, on the settings of NeMo-RL's performance recipes."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from asyncrl.scenarios.files.errors import ScenarioError
from asyncrl.scenarios.spec.loading import validate_scenario

from asyncrl.frameworks.nemo_rl.importer import plan_from_nemo_rl
from tests.test_published import ROOT, published

LENGTHS = {
    "prompt_tokens": {"kind": "fixed", "value": 128},
    "completion_tokens": {"kind": "lognormal", "median": 600, "sigma": 1.0},
}

# examples/configs/recipes/llm/performance/grpo-qwen3-32b-8n8g-async-1off.yaml over grpo-qwen3-32b-4n8g.yaml (9dbd9adc9)
QWEN3_32B_ASYNC: dict[str, Any] = {
    "grpo": {
        "num_prompts_per_step": 64,
        "num_generations_per_prompt": 32,
        "async_grpo": {"enabled": True, "max_trajectory_age_steps": 1, "in_flight_weight_updates": True},
    },
    "policy": {
        "max_total_sequence_length": 4096,
        "train_micro_batch_size": 1,
        "megatron_cfg": {"tensor_model_parallel_size": 4, "pipeline_model_parallel_size": 4},
        "generation": {
            "colocated": {"enabled": False, "resources": {"num_nodes": 4, "gpus_per_node": 8}},
            "vllm_cfg": {"tensor_parallel_size": 4, "gpu_memory_utilization": 0.8},
        },
    },
    "cluster": {"gpus_per_node": 8, "num_nodes": 8},
}


def plan(config: dict[str, Any]) -> dict[str, Any]:
    return plan_from_nemo_rl(config, name="run", model={"preset": "qwen3-8b"}, device="h100", **LENGTHS).scenario


def test_the_async_recipe_splits_its_nodes_and_streams_at_the_trajectory_age() -> None:
    scenario = plan(QWEN3_32B_ASYNC)
    assert scenario["cluster"] == {
        "generation_devices": 32,  # generation.colocated.resources: 4 nodes of 8
        "training_devices": 32,  # the other 4 of the cluster's 8 nodes
        "devices_per_engine": 4,
        "gpu_memory_utilization": 0.8,
    }
    assert scenario["schedule"] == {"kind": "streaming", "max_staleness": 1, "in_flight_updates": True}
    assert scenario["workload"]["prompts_per_step"] == 64 and scenario["workload"]["samples_per_prompt"] == 32
    assert scenario["workload"]["completion_tokens"]["max_tokens"] == 4096 - 128  # the sequence cap less the prompt
    # 2,048 samples / grpo_math_1B's train_global_batch_size of 512; previous log-probs and the reference (KL 0.01)
    assert scenario["algorithm"] == {"loss": "grpo", "updates_per_step": 4, "extra_forward_passes": 2}
    assert scenario["learner"] == {
        "pipeline_stages": 4,  # PP 4: a minibatch of m micro-batches takes m + 3 of a stage's slots
        "backend": "megatron",  # Megatron-core: its share of the weights stays on each device
        "sharding": "zero1",  # Megatron's distributed optimizer
        "model_parallel": 16,  # TP 4 × PP 4 × CP 1
        "activation_checkpointing": False,
        "micro_batch_tokens": 4096,  # sequence packing: 4,096 × train_micro_batch_size 1
    }
    validate_scenario(scenario)  # a scenario asyncrl runs as it is


def test_a_colocated_recipe_is_a_sync_run_on_every_device_with_the_defaults_left_out() -> None:
    config = {
        "grpo": {"num_prompts_per_step": 32, "num_generations_per_prompt": 16},
        "policy": {"max_total_sequence_length": 1024},
    }
    scenario = plan(config)
    assert scenario["cluster"]["colocated"] and scenario["cluster"]["generation_devices"] == 1  # one node of one GPU
    assert scenario["cluster"]["gpu_memory_utilization"] == 0.6  # grpo_math_1B's vLLM share
    assert scenario["schedule"] == {"kind": "sync"}
    assert scenario["learner"]["micro_batch_tokens"] == 4096  # 1,024 × the default train_micro_batch_size of 4
    assert scenario["algorithm"]["updates_per_step"] == 1  # 512 samples, a global batch of 512


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"policy": {"train_global_batch_size": 300}}, "policy.train_global_batch_size: 300 does not divide"),
        ({"cluster": {"num_nodes": 4}}, "policy.generation.colocated.resources: 32 generation devices leave none"),
        ({"grpo": {"num_prompts_per_step": 0}}, "grpo.num_prompts_per_step: expected a positive integer"),
    ],
)
def test_settings_that_cannot_be_planned_name_their_key(change: dict[str, Any], message: str) -> None:
    config = _merged(QWEN3_32B_ASYNC, change)
    with pytest.raises(ScenarioError, match=message):
        plan(config)


def test_the_benchmark_lengths_reproduce_the_published_mean() -> None:
    module = published()
    from published_nemo_rl import completion_for  # benchmarks/ is on the path once published.py is loaded

    assert module is not None
    lengths = completion_for(3123, 1.0, 3968)
    mu, cap = math.log(lengths["median"]), 3968
    from asyncrl.frameworks.verl.log_lengths import capped_mean

    assert capped_mean(mu, 1.0, cap) == pytest.approx(3123, abs=1)
    assert lengths["median"] > cap  # more than half stop at the cap, as a reasoning model's under 4K do
    # a narrow lognormal far below its cap: the median is about the mean (exp(σ²/2) = 1.00005 at σ = 0.01)
    assert completion_for(500, 0.01, 4000)["median"] == pytest.approx(500, abs=0.1)


def test_every_nemo_rl_case_plans_and_predicts_both_runs() -> None:
    module = published()
    path = ROOT / "benchmarks" / "published" / "nemo-rl-h100.yaml"
    cases = module.predict_file(path, 4)
    assert len(cases) == 3
    for runs in cases:
        assert [item.run for item in runs] == ["sync", "async"]
        assert all(item.catalogue_s > 0 and item.calibrated_s is None for item in runs)
        for item in runs:  # the interval `simulate` prints, about the prediction; no calibrated one
            low, high = item.catalogue_range
            assert low < item.catalogue_s < high and item.calibrated_range is None
        assert runs[1].speedup_catalogue_range is not None and runs[0].speedup_catalogue_range is None


def _merged(base: dict[str, Any], change: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in change.items():
        merged[key] = (
            _merged(base[key], value) if isinstance(value, dict) and isinstance(base.get(key), dict) else value
        )
    return merged


RECIPES = ROOT / "tests" / "data" / "nemo_rl" / "recipes" / "llm" / "performance"


def test_from_nemo_rl_on_a_published_recipe_writes_each_fields_source(tmp_path: Path, capsys: Any) -> None:
    from asyncrl.scenarios.spec.loading import load_scenario

    from asyncrl.cli import main

    out = tmp_path / "llama.yaml"
    recipe = RECIPES / "grpo-llama3.1-8b-instruct-2n8g-async-1off.yaml"  # over 2n8g.yaml, over grpo_math_1B.yaml
    lengths = ["--lengths", "{kind: lognormal, median: 656, sigma: 1}", "--prompt-lengths", "{kind: fixed, value: 128}"]
    assert main(["from-nemo-rl", str(recipe), "--device", "h100", *lengths, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "model.preset                          <- policy.model_name = meta-llama/Llama-3.1-8B-Instruct" in printed
    scenario = load_scenario(str(out))
    assert (scenario.cluster.generation_devices, scenario.cluster.training_devices) == (8, 8)  # 1 of 2 nodes
    assert scenario.schedule.kind == "streaming" and scenario.learner.model_parallel == 1  # the async recipe's PP 1
    assert scenario.learner.activation_checkpointing and scenario.learner.micro_batch_tokens == 4096  # ${mul:...}
    lines = [line for line in out.read_text().splitlines()[1:] if line.strip() and not line.endswith(":")]
    assert all("# <- " in line for line in lines)  # every field says where it came from


def test_from_nemo_rl_asks_for_what_the_config_does_not_say(tmp_path: Path, capsys: Any) -> None:
    from asyncrl.cli import main

    recipe = RECIPES / "grpo-llama3.1-8b-instruct-2n8g.yaml"
    assert main(["from-nemo-rl", str(recipe), "--out", str(tmp_path / "x.yaml")]) == 2
    errors = capsys.readouterr().err
    assert "--device: NeMo-RL's config does not say which GPU" in errors
    assert "--lengths: NeMo-RL's config gives only the cap" in errors and "--prompt-lengths:" in errors
    assert not (tmp_path / "x.yaml").exists()


def test_from_nemo_rl_names_a_missing_defaults_file(tmp_path: Path, capsys: Any) -> None:
    from asyncrl.cli import main

    (tmp_path / "recipe.yaml").write_text("defaults: ../nowhere.yaml\n")
    assert main(["from-nemo-rl", str(tmp_path / "recipe.yaml"), "--device", "h100"]) == 2
    assert "nowhere.yaml: no such file" in capsys.readouterr().err
