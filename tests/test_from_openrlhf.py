"""from-openrlhf on OpenRLHF's own example launch scripts (tests/data/openrlhf/, copied unchanged from
OpenRLHF/OpenRLHF at the tags they name): the 0.8 flags, the 0.9 ones and 0.10's dotted ones, bash arrays
expanded; every flag mapped or listed with why; the values worked by hand from the scripts; every field of the
scenario says which flag it came from."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from asyncrl.scenarios.spec.loading import load_scenario

from asyncrl.cli import main
from asyncrl.frameworks.common.launch_script import read_launch_script
from asyncrl.frameworks.common.provenance import ImportPlan, unsourced
from asyncrl.frameworks.openrlhf.flags import NO_COUNTERPART, Flags, outside_the_step, parse_flags
from asyncrl.frameworks.openrlhf.importer import plan_from_openrlhf

EXAMPLES = Path(__file__).parent / "data" / "openrlhf"
SCRIPTS = sorted(EXAMPLES.glob("*.sh"))
LENGTHS = {"kind": "lognormal", "median": 800, "sigma": 1.0}


def planned(script: Path) -> ImportPlan:
    flags, written = parse_flags(read_launch_script(script, ("openrlhf",)).arguments)
    plan = ImportPlan(scenario={}, framework="OpenRLHF")
    return plan_from_openrlhf(
        Flags(flags, written, plan), name=script.stem, device="h100", completion_tokens=LENGTHS, preset="llama-3.1-8b"
    )


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda path: path.stem)
def test_every_flag_of_an_example_is_mapped_or_listed_with_why(script: Path) -> None:
    flags, _ = parse_flags(read_launch_script(script, ("openrlhf",)).arguments)
    plan = planned(script)
    assert len(flags) > 25
    left = sorted(
        name for name in flags if name not in plan.read and name not in NO_COUNTERPART and not outside_the_step(name)
    )
    assert left == [], f"{script.name}: flags neither mapped nor listed: {left}"
    assert unsourced(plan) == []


def test_the_hybrid_engine_is_colocated_sync() -> None:
    scenario = planned(EXAMPLES / "v0.9.9-train_ppo_ray_hybrid_engine.sh").scenario
    # --actor_num_gpus_per_node 8, --vllm_num_engines 4 × --vllm_tensor_parallel_size 2, --colocate_all_models
    assert scenario["cluster"] == {
        "generation_devices": 8,
        "training_devices": 8,
        "devices_per_engine": 2,
        "gpu_memory_utilization": 0.5,  # --vllm_gpu_memory_utilization
        "colocated": True,
    }
    assert scenario["schedule"] == {"kind": "sync"}
    assert (scenario["workload"]["prompts_per_step"], scenario["workload"]["samples_per_prompt"]) == (1024, 1)
    algorithm = scenario["algorithm"]
    assert algorithm["updates_per_step"] == 1024 // 128 and algorithm["loss"] == "ppo"  # gae: a critic
    assert (algorithm["correction"], algorithm["truncation_cap"]) == ("tis", 5.0)  # --enable_vllm_is_correction
    learner = scenario["learner"]
    assert (learner["sharding"], learner["micro_batch_tokens"], learner["activation_checkpointing"]) == (
        "zero3",
        16384,
        True,
    )


def test_the_08_async_example_is_one_step_off_on_separate_pools() -> None:
    plan = planned(EXAMPLES / "v0.8.11-train_reinforce_baseline_llama_ray_async.sh")
    scenario = plan.scenario
    assert scenario["cluster"] == {
        "generation_devices": 2,
        "training_devices": 4,
        "devices_per_engine": 1,
        "gpu_memory_utilization": 0.95,  # OpenRLHF's default
    }
    assert scenario["schedule"] == {"kind": "pipelined", "off_policy_steps": 1}  # --async_train, queue of one batch
    workload = scenario["workload"]
    assert workload["prompt_tokens"]["max_tokens"] == 1024 and workload["completion_tokens"]["max_tokens"] == 1024
    assert scenario["algorithm"]["updates_per_step"] == 128 * 8 // 128 and "loss" not in scenario["algorithm"]
    unmapped = {key for key, _, _ in plan.unmapped}
    assert "--advantage_estimator" in unmapped  # reinforce_baseline: no asyncrl loss
    assert "--ref_num_nodes × --ref_num_gpus_per_node" in unmapped  # the reference's own GPU, outside the plan


def test_the_010_dotted_flags_in_bash_arrays() -> None:
    scenario = planned(EXAMPLES / "3c3be623-train_reinforce_baseline_ray_agent_async.sh").scenario
    # --train.colocate_all with --train.async_enable colocates only DeepSpeed: the 2 × 2 engines get their own GPUs
    assert scenario["cluster"] == {
        "generation_devices": 4,
        "training_devices": 4,
        "devices_per_engine": 2,
        "gpu_memory_utilization": 0.95,  # --vllm.gpu_memory_utilization
    }
    assert scenario["schedule"] == {  # vLLM's pause for the update frees the running requests' KV cache
        "kind": "streaming",
        "max_staleness": 1,
        "in_flight_updates": True,
        "kv_on_update": "recompute",
    }
    workload = scenario["workload"]
    assert (
        workload["completion_tokens"]["max_tokens"] == 64000
        and workload["prompt_tokens"]["max_tokens"] == 74240 - 64000
    )
    assert scenario["learner"]["model_parallel"] == 2 and scenario["learner"]["micro_batch_tokens"] == 16192


def test_a_pasted_command_gives_what_its_script_gives(tmp_path: Path, capsys) -> None:
    script = EXAMPLES / "v0.8.11-train_reinforce_baseline_llama_ray_async.sh"
    words = ["python3", "-m", "openrlhf.cli.train_ppo_ray", *read_launch_script(script, ("openrlhf",)).arguments]
    common = ["--device", "h100", "--preset", "llama-3.1-8b", "--lengths", "{kind: lognormal, median: 800, sigma: 1}"]
    from_script, from_words = tmp_path / "script.yaml", tmp_path / "words.yaml"
    assert main(["from-openrlhf", str(script), *common, "--name", "x", "--out", str(from_script)]) == 0
    assert main(["from-openrlhf", *common, "--name", "x", "--out", str(from_words), "--", *words]) == 0
    printed = capsys.readouterr().out
    assert "cluster.generation_devices            <- --vllm_num_engines = 2" in printed
    assert load_scenario(from_script) == load_scenario(from_words)
    lines = [line for line in from_words.read_text().splitlines() if not line.startswith("#") and ": " in line]
    assert lines and all("# <- " in line for line in lines)
    assert yaml.safe_load(from_words.read_text())["schedule"]["kind"] == "pipelined"


def test_colocated_engines_must_fill_the_actors_gpus(tmp_path: Path, capsys) -> None:
    flags = ["--pretrain", "x", "--actor_num_gpus_per_node", "8", "--vllm_num_engines", "2", "--colocate_all_models"]
    args = ["from-openrlhf", "--device", "h100", "--preset", "qwen2.5-7b", "--lengths", "{kind: fixed, value: 9}"]
    assert main([*args, "--out", str(tmp_path / "x.yaml"), "--", *flags]) == 2
    assert capsys.readouterr().err == (
        "asyncrl: error: --colocate_all_models: vllm_num_engines × vllm_tensor_parallel_size = 2 must equal the "
        "actor's 8 GPUs (as OpenRLHF asserts)\n"
    )
    assert not (tmp_path / "x.yaml").exists()
