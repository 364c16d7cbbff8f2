"""asyncrl from-verl: a verl trainer config (laid out like verl's shipped ppo_trainer.yaml) becomes a
scenario; the recipes' splits become schedules; what is missing is asked for, all at once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from asyncrl.scenarios.spec.loading import load_scenario

from asyncrl.cli import main
from asyncrl.frameworks.verl.importer import guess_preset, lookup, read_config

CONFIG = Path(__file__).parent / "data" / "verl_ppo_trainer.yaml"
LENGTHS = "{kind: lognormal, median: 300, sigma: 0.8}"
ONE_STEP_OFF = [
    "actor_rollout_ref.hybrid_engine=false",
    "+rollout.nnodes=1",
    "+rollout.n_gpus_per_node=4",
    "trainer.n_gpus_per_node=4",
]
FULLY_ASYNC = [
    *ONE_STEP_OFF,
    "+async_training.staleness_threshold=0.5",
    "+async_training.trigger_parameter_sync_step=2",
    "+async_training.require_batches=2",
    "+async_training.partial_rollout=false",
    "+async_training.use_rollout_log_probs=true",
    "actor_rollout_ref.actor.ppo_mini_batch_size=16",
    "data.train_batch_size=0",
]


def from_verl(tmp_path: Path, *args: str) -> tuple[int, Path]:
    out = tmp_path / "plan.yaml"
    code = main(["from-verl", str(CONFIG), *args, "--out", str(out), "--force"])  # a test's second plan replaces it
    return code, out


def test_the_defaults_plan_a_colocated_sync_run(tmp_path: Path, capsys) -> None:
    code, out = from_verl(tmp_path, "--device", "h100", "--preset", "qwen2.5-7b", "--lengths", LENGTHS)
    assert code == 0
    data = yaml.safe_load(out.read_text())
    assert data["name"] == "gsm8k"  # trainer.experiment_name
    assert data["cluster"] == {
        "generation_devices": 8,
        "training_devices": 8,
        "devices_per_engine": 2,
        "colocated": True,
        "gpu_memory_utilization": 0.5,  # rollout.gpu_memory_utilization
        "enforce_eager": False,  # rollout.enforce_eager: CUDA graphs
        "free_cache_engine": True,  # rollout.free_cache_engine: the engine sleeps while the learner trains
    }
    assert data["schedule"] == {"kind": "sync", "max_concurrency": 1024}  # rollout.max_num_seqs (the KV cache holds it)
    workload = data["workload"]
    assert (workload["prompts_per_step"], workload["samples_per_prompt"]) == (1024, 1)
    assert workload["prompt_tokens"] == {"kind": "fixed", "value": 512, "max_tokens": 512}
    assert workload["completion_tokens"] == {"kind": "lognormal", "median": 300, "sigma": 0.8, "max_tokens": 512}
    algorithm = data["algorithm"]
    assert algorithm["loss"] == "ppo" and algorithm["updates_per_step"] == 4  # 1 epoch × 1024 / 256
    assert algorithm["extra_forward_passes"] == 2  # old log-probs 1, critic values 1
    assert algorithm["extra_training_passes"] == 1  # the critic's update
    assert algorithm["learning_rate"] == 1e-6 and algorithm["clip_eps"] == 0.2 and algorithm["kl_coef"] == 0.0
    printed = capsys.readouterr().out
    assert "workload.prompts_per_step" in printed and "<- data.train_batch_size = 1024" in printed
    assert "actor_rollout_ref.actor.strategy = fsdp" in printed  # listed: no counterpart
    unmapped = printed.split("no counterpart in a scenario")[-1]
    assert "lora_rank" not in unmapped and "param_offload" not in unmapped  # off or mapped: nothing to list
    assert main(["simulate", str(out), "--steps", "2", "--quiet", "--out", str(tmp_path / "run")]) == 0


def test_overrides_as_verl_takes_them(tmp_path: Path, capsys) -> None:
    overrides = [
        "actor_rollout_ref.model.path=Qwen/Qwen2.5-7B-Instruct",
        "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.rollout.n=8",
        "trainer.nnodes=2",
        "actor_rollout_ref.actor.ppo_epochs=2",
        "actor_rollout_ref.actor.use_kl_loss=true",
        "trainer.total_training_steps=50",
        "actor_rollout_ref.actor.grad_clip=0.5",
        "algorithm.lam=0.95",
        "algorithm.norm_adv_by_std_in_grpo=false",
    ]
    code, out = from_verl(tmp_path, *overrides, "--device", "h200", "--lengths", LENGTHS)
    assert code == 0
    scenario = load_scenario(out)
    assert scenario.model.preset == "qwen2.5-7b" and scenario.hardware.device == "h200"
    assert scenario.cluster.generation_devices == 16 and scenario.cluster.colocated
    assert scenario.workload.samples_per_prompt == 8 and scenario.algorithm.loss == "grpo"
    assert scenario.algorithm.updates_per_step == 8  # 2 epochs × 4 mini-batches
    assert scenario.algorithm.extra_forward_passes == 2  # old log-probs 1, reference 1
    assert scenario.algorithm.extra_training_passes == 1  # the second epoch
    assert scenario.algorithm.kl_coef == 0.001 and scenario.run.steps == 50
    algorithm = scenario.algorithm  # the loss settings of the same names; gamma is verl's default, 1.0
    assert (algorithm.grad_clip, algorithm.gamma, algorithm.gae_lambda) == (0.5, 1.0, 0.95)
    assert algorithm.normalise_std is False  # Dr. GRPO


def test_one_step_off_policy_recipe_is_pipelined_on_a_split(tmp_path: Path, capsys) -> None:
    code, out = from_verl(tmp_path, *ONE_STEP_OFF, "--device", "h100", "--preset", "qwen2.5-1.5b", "--lengths", LENGTHS)
    assert code == 0
    scenario = load_scenario(out)
    assert (scenario.cluster.generation_devices, scenario.cluster.training_devices) == (4, 4)
    assert not scenario.cluster.colocated
    assert scenario.schedule.kind == "pipelined" and scenario.schedule.off_policy_steps == 1


def test_fully_async_recipe_is_streaming(tmp_path: Path, capsys) -> None:
    code, out = from_verl(tmp_path, *FULLY_ASYNC, "--device", "h100", "--preset", "qwen2.5-1.5b", "--lengths", LENGTHS)
    assert code == 0
    scenario = load_scenario(out)
    schedule = scenario.schedule
    assert schedule.kind == "streaming" and not schedule.in_flight_updates
    # verl's rules: weights every trigger_parameter_sync_step = 2 steps, a staleness_threshold of 0.5 of a sync
    # window ahead; without partial rollout each sync drains the engine. No sample is dropped in verl: the bound
    # ⌈2 × 1.5⌉ + 2 = 5 only catches a straggler a sync window late.
    assert (schedule.sync_every, schedule.staleness_threshold) == (2, 0.5)
    assert (schedule.refresh, schedule.refresh_every, schedule.max_staleness) == ("drain", 2, 5)
    assert scenario.workload.prompts_per_step == 32  # require_batches × ppo_mini_batch_size
    assert scenario.queue_capacity == 96  # verl's max_queue_size: ⌊32 × 1.5 × 2⌋ prompts
    assert schedule.max_concurrency == 16 * scenario.workload.samples_per_prompt  # 16 prompts per replica
    assert scenario.algorithm.extra_forward_passes == 1  # rollout log-probs: none recomputed; the critic's values
    assert scenario.algorithm.extra_training_passes == 1  # the critic's update
    assert "verl drops no sample" in capsys.readouterr().out
    partial = from_verl(tmp_path, *FULLY_ASYNC, "+async_training.partial_rollout=true", "--device", "h100",
                        "--preset", "qwen2.5-1.5b", "--lengths", LENGTHS)  # fmt: skip
    assert partial[0] == 0 and load_scenario(partial[1]).schedule.in_flight_updates


def test_lengths_from_a_file_are_empirical_relative_to_the_scenario(tmp_path: Path, capsys) -> None:
    lengths = tmp_path / "logs" / "lengths.txt"
    lengths.parent.mkdir()
    lengths.write_text("100\n300\n900\n")
    out = tmp_path / "plans" / "p.yaml"
    args = ["from-verl", str(CONFIG), "--device", "h100", "--preset", "qwen2.5-7b", "--lengths", str(lengths)]
    assert main([*args, "--out", str(out)]) == 0
    assert yaml.safe_load(out.read_text())["workload"]["completion_tokens"]["path"] == "../logs/lengths.txt"
    completion = load_scenario(out).workload.completion_tokens
    assert completion.observed.tolist() == [100, 300, 900] and completion.cap == 512  # verl's response cap


def test_what_verl_cannot_say_is_asked_for_all_at_once(tmp_path: Path, capsys) -> None:
    code, out = from_verl(tmp_path)
    assert code == 2 and not out.exists()
    errors = capsys.readouterr().err.splitlines()
    assert [line.split(":")[2].strip() for line in errors] == ["--preset", "--device", "--lengths"]
    assert "~/models/deepseek-llm-7b-chat is not a model preset" in errors[0]


def test_a_split_the_scenario_rejects_is_one_line(tmp_path: Path, capsys) -> None:
    args = ["actor_rollout_ref.rollout.tensor_model_parallel_size=3", "--device", "h100", "--preset", "qwen2.5-7b"]
    code, out = from_verl(tmp_path, *args, "--lengths", LENGTHS)
    assert code == 2 and not out.exists()
    assert capsys.readouterr().err == (
        "asyncrl: error: cluster.devices_per_engine: 3 does not divide generation_devices (8)\n"
    )


def test_reading_verl_values() -> None:
    config = read_config(CONFIG, [])
    assert lookup(config, "actor_rollout_ref.rollout.n") == 1  # verl quotes the key: 'n'
    assert lookup(config, "actor_rollout_ref.rollout.response_length") == 512  # ${oc.select:...,512}
    assert lookup(config, "critic.ppo_epochs") == 1 and lookup(config, "actor_rollout_ref.ref.strategy") == "fsdp"
    assert lookup(config, "actor_rollout_ref.rollout.name") is None  # ??? : unset
    assert lookup(yaml.safe_load("a: {n: 3}"), "a.n") == 3
    assert guess_preset("Qwen/Qwen3-30B-A3B-Instruct-2507") == "qwen3-30b-a3b"
    assert guess_preset("/ckpt/Meta-Llama-3.1-8B-Instruct/") == "llama-3.1-8b"
    assert guess_preset("deepseek-llm-7b-chat") is None


@pytest.mark.parametrize(("text", "message"), [("no-such-file.txt", "--lengths: 'no-such-file.txt' is neither a file")])
def test_bad_lengths_are_one_line(text: str, message: str, tmp_path: Path, capsys) -> None:
    code, _ = from_verl(tmp_path, "--device", "h100", "--preset", "qwen2.5-7b", "--lengths", text)
    error = capsys.readouterr().err
    assert code == 2 and error.startswith(f"asyncrl: error: {message}") and error.count("\n") == 1


def test_a_checkpoint_on_this_machine_gives_the_model_without_a_preset(tmp_path: Path, capsys) -> None:
    """Qwen2.5-32B has no preset; its config.json (the keys the count reads) is the model section."""
    checkpoint = tmp_path / "Qwen2.5-32B-Instruct"
    checkpoint.mkdir()
    config = {
        "model_type": "qwen2",
        "hidden_size": 5120,
        "num_hidden_layers": 64,
        "num_attention_heads": 40,
        "num_key_value_heads": 8,
        "vocab_size": 152064,
        "intermediate_size": 27648,
        "tie_word_embeddings": False,
    }
    (checkpoint / "config.json").write_text(json.dumps(config))
    code, out = from_verl(
        tmp_path, f"actor_rollout_ref.model.path={checkpoint}", "--device", "h100", "--lengths", LENGTHS
    )
    assert code == 0
    assert yaml.safe_load(out.read_text())["model"] == {"path": str(checkpoint), "dtype": "bf16"}
    assert "model.path" in capsys.readouterr().out
    model = load_scenario(out).model
    assert (model.layers, model.hidden, model.kv_heads, model.head_dim) == (64, 5120, 8, 128)
    # by hand: 64 layers × 487,605,248 (attention 62,921,728 with q/k/v biases, MLP 424,673,280, norms 10,240)
    # + embeddings and head 2 × 152,064 × 5,120 + final norm 5,120
    assert model.params == 64 * 487_605_248 + 2 * 152_064 * 5_120 + 5_120 == 32_763_876_352
