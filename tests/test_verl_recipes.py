"""from-verl on verl's own recipe launch scripts (tests/data/verl/, copied unchanged from volcengine/verl): each
script's key=value lines are read without running it, every key is mapped or listed with why, the mapped values
are the recipe's (worked by hand below), and every field of the written scenario says where it came from."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from asyncrl.scenarios.spec.loading import load_scenario

from asyncrl.cli import main
from asyncrl.frameworks.common.launch_script import read_launch_script
from asyncrl.frameworks.common.provenance import unsourced
from asyncrl.frameworks.verl.config import VERL_MODULES
from asyncrl.frameworks.verl.importer import guess_preset, lookup, plan_from_verl, read_verl
from asyncrl.frameworks.verl.keys import NO_COUNTERPART, outside_the_step, unmapped_table

RECIPES = Path(__file__).parent / "data" / "verl"
SCRIPTS = sorted(RECIPES.glob("*.sh"))
LENGTHS = {"kind": "lognormal", "median": 2000, "sigma": 1.0}
DOCS = Path(__file__).resolve().parent.parent / "docs" / "verl.md"


def script_keys(script: Path) -> set[str]:
    command = read_launch_script(script, VERL_MODULES)
    return {word.partition("=")[0].lstrip("+~") for word in command.arguments if "=" in word and word[0] != "-"}


def planned(script: Path):  # type: ignore[no-untyped-def]
    verl = read_verl(script, [])
    path = str(lookup(verl.config, "actor_rollout_ref.model.path"))
    preset = None if guess_preset(path) else "qwen2.5-1.5b"  # run_dapo.sh's Qwen2.5-0.5B has no preset near it
    return plan_from_verl(
        verl.config, name=script.stem, device="h100", completion_tokens=LENGTHS, preset=preset, given=verl.given
    )


def test_the_recipe_scripts_are_verls() -> None:
    assert {script.name for script in SCRIPTS} >= {
        "dapo_7b_math_fsdp2_16_16.sh",  # fully async, FSDP2
        "grpo_30b_a3b_base_math_megatron_96_32.sh",  # fully async, Megatron, MoE
        "dapo_7b_math_fsdp2_4_12.sh",  # one step off
        "run_dapo.sh",  # recipe/dapo's main, colocated
    }


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda path: path.stem)
def test_every_key_of_a_recipe_is_mapped_or_listed_with_why(script: Path) -> None:
    plan = planned(script)
    keys = script_keys(script)
    assert len(keys) > 40
    left = sorted(
        key for key in keys if key not in plan.read and key not in NO_COUNTERPART and not outside_the_step(key)
    )
    assert left == [], f"{script.name}: verl keys neither mapped nor listed: {left}"
    assert unsourced(plan) == []


def test_fully_async_16_16_as_the_recipe_sets_it() -> None:
    plan = planned(RECIPES / "dapo_7b_math_fsdp2_16_16.sh")
    scenario = plan.scenario
    # NNODES_ROLLOUT=2, NNODES_TRAIN=2 (their ${X:-2} defaults) × NGPUS_PER_NODE=8; gen_tp=4
    assert scenario["cluster"] == {
        "generation_devices": 16,
        "training_devices": 16,
        "devices_per_engine": 4,
        "gpu_memory_utilization": 0.8,  # rollout.gpu_memory_utilization=0.80
        "enforce_eager": False,  # verl's default: CUDA graphs
    }
    assert scenario["schedule"] | {"max_concurrency": None} == {
        "kind": "streaming",
        "max_staleness": 9,  # ⌈4 × 1.1⌉ + 4
        "sync_every": 4,
        "staleness_threshold": 0.1,
        "in_flight_updates": True,
        "kv_on_update": "recompute",  # partial rollout: aborted, sent again with its tokens so far
        "max_concurrency": None,
    }
    workload = scenario["workload"]
    assert (workload["prompts_per_step"], workload["samples_per_prompt"]) == (4 * 32, 16)  # require_batches × mini
    assert workload["completion_tokens"]["max_tokens"] == 1024 * 28 and workload["prompt_tokens"]["value"] == 2048
    learner = scenario["learner"]
    assert (learner["model_parallel"], learner["shard_devices"]) == (4, 8)  # sp_size=4, fsdp_size=8
    assert learner["micro_batch_tokens"] == (2048 + 28672) * 2  # actor_ppo_max_token_len
    assert scenario["run"]["steps"] == 512 * 400 // 128
    assert scenario["model"]["preset"] == "qwen2.5-7b"  # Qwen2.5-Math-7B's architecture
    assert "actor_rollout_ref.actor.fsdp_config.param_offload" not in {key for key, _, _ in plan.unmapped}  # False


def test_megatron_96_32_maps_its_parallel_sizes_and_cpu_optimizer() -> None:
    plan = planned(RECIPES / "grpo_30b_a3b_base_math_megatron_96_32.sh")
    scenario = plan.scenario
    assert scenario["cluster"]["generation_devices"] == 96 and scenario["cluster"]["training_devices"] == 32
    learner = scenario["learner"]
    assert learner["model_parallel"] == 2 * 1 * 2  # ACTOR_TP × ACTOR_PP × ACTOR_CP
    assert learner["optimizer_offload"] is True  # optimizer_cpu_offload=True: Adam's states on the CPU
    assert learner["activation_checkpointing"] is False  # no recompute_granularity in the script
    assert scenario["schedule"]["max_staleness"] == 4 + 6  # ⌈4 × 1.5⌉ + 4
    assert scenario["algorithm"]["kl_coef"] == 0.001 and scenario["algorithm"]["extra_forward_passes"] == 1
    assert learner["backend"] == "megatron" and learner["phase_offload"] == "both"  # Megatron's param/optimizer offload


def test_one_step_off_4_12_and_the_dapo_recipe() -> None:
    off = planned(RECIPES / "dapo_7b_math_fsdp2_4_12.sh").scenario
    assert off["cluster"] == {
        "generation_devices": 4,
        "training_devices": 12,
        "devices_per_engine": 2,
        "gpu_memory_utilization": 0.8,
        "enforce_eager": False,
    }
    assert off["schedule"]["kind"] == "pipelined" and off["workload"]["prompts_per_step"] == 512
    dapo = planned(RECIPES / "run_dapo.sh")
    assert dapo.scenario["cluster"]["colocated"] and dapo.scenario["cluster"]["generation_devices"] == 8
    assert dapo.scenario["workload"]["prompts_per_step"] == 2 * 8 * 2 * 4 * 2  # train_prompt_bsz, worked as the script
    assert "algorithm.filter_groups.enable" in {key for key, _, _ in dapo.unmapped}  # dynamic sampling: listed


def test_from_verl_on_a_launch_script_writes_each_fields_source(tmp_path: Path, capsys) -> None:
    out = tmp_path / "fa.yaml"
    script = RECIPES / "dapo_7b_math_fsdp2_16_16.sh"
    lengths = "{kind: lognormal, median: 2000, sigma: 1}"
    assert (
        main(
            ["from-verl", str(script), "trainer.nnodes=1", "--device", "h100", "--lengths", lengths, "--out", str(out)]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "cluster.training_devices              <- trainer.nnodes = 1" in printed  # the command line wins
    assert "(verl's default)" in printed and "HOME unset in the script" in printed
    text = out.read_text()
    assert text.startswith(f"# from {script}:") and "(verl.experimental.fully_async_policy.fully_async_main)" in text
    fields = [
        line for line in text.splitlines() if line.startswith("  ") or (": " in line and not line.startswith("#"))
    ]
    assert fields and all("# <- " in line for line in fields), [line for line in fields if "# <- " not in line]
    assert load_scenario(out).cluster.training_devices == 8
    assert yaml.safe_load(text)["schedule"]["sync_every"] == 4


def test_a_script_without_a_verl_command_is_one_line(tmp_path: Path, capsys) -> None:
    script = tmp_path / "train.sh"
    script.write_text("python3 -m openrlhf.cli.train_ppo_ray --pretrain x\n")
    assert main(["from-verl", str(script), "--device", "h100", "--lengths", "{kind: fixed, value: 9}"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"asyncrl: error: {script}: no `python -m verl… or python -m recipe…` command in the script (a verl config is a "
        ".yaml file)"
    ]


def test_docs_list_the_unmapped_settings_from_the_code() -> None:
    assert unmapped_table() in DOCS.read_text(encoding="utf-8"), (
        "paste `python -m asyncrl.frameworks.verl.keys` in docs/verl.md"
    )
