"""Device memory of the two pools, each term against figures worked by hand, and the refusals it drives."""

from __future__ import annotations

from pathlib import Path

import pytest
from asyncrl.analysis.summaries.sizing import read_sizing
from asyncrl.analysis.tables import speedup_lines
from asyncrl.scenarios.costs import memory
from asyncrl.scenarios.record.record import Simulated, validate_summary
from asyncrl.scenarios.spec.loading import ScenarioError, load_scenario
from asyncrl.simulator.sweep import Variant, speedup_variants

from asyncrl.cli import main
from tests.test_analysis import hand_summary

LLAMA_8B = 8_030_261_248  # llama-3.1-8b preset: 32 layers, hidden 4096, 8 KV heads of 128, vocab 128,256
H100 = 80e9


def quickstart(*overrides: str):
    return load_scenario("quickstart", list(overrides))


# ── training pool: model states ─────────────────────────────────────────────────


@pytest.mark.parametrize(
    ("devices", "per_device"),
    [
        # bf16 weights 2 B, fp32 gradients 4 B, fp32 master 4 B + Adam's two fp32 moments 8 B = 18 B per weight,
        # all of it divided by the training devices under fsdp
        (1, {"weights": 16_060_522_496, "gradients": 32_121_044_992, "optimizer": 96_363_134_976}),
        (8, {"weights": 2_007_565_312, "gradients": 4_015_130_624, "optimizer": 12_045_391_872}),
        (16, {"weights": 1_003_782_656, "gradients": 2_007_565_312, "optimizer": 6_022_695_936}),
    ],
)
def test_fsdp_shards_weights_gradients_and_adam_states(devices: int, per_device: dict[str, int]) -> None:
    parts = memory.learner_memory(quickstart(f"cluster.training_devices={devices}")).parts
    assert {name: parts[name] for name in per_device} == pytest.approx(per_device)


def test_zero1_shards_only_the_optimizer_and_ddp_nothing() -> None:
    zero1 = memory.learner_memory(quickstart("learner.sharding=zero1")).parts  # 8 training devices
    # weights 2 · 8,030,261,248 and gradients 4 · 8,030,261,248 whole; optimizer 12 · 8,030,261,248 / 8
    assert [zero1["weights"], zero1["gradients"], zero1["optimizer"]] == pytest.approx(
        [16_060_522_496, 32_121_044_992, 12_045_391_872]
    )
    ddp = memory.learner_memory(quickstart("learner.sharding=ddp")).parts
    assert ddp["weights"] + ddp["gradients"] + ddp["optimizer"] == pytest.approx(18 * LLAMA_8B)  # 144.5 GB
    zero2 = memory.learner_memory(quickstart("learner.sharding=zero2")).parts
    assert zero2["weights"] + zero2["gradients"] + zero2["optimizer"] == pytest.approx(2 * LLAMA_8B + 16 * LLAMA_8B / 8)


def test_precisions_and_offload_change_the_model_states() -> None:
    lean = ("cluster.training_devices=1", "learner.grad_dtype=bf16", "learner.master_weights=none")
    # bf16 gradients, no master copy, plain SGD: 2 + 2 + 0 bytes per weight on one device
    parts = memory.learner_memory(quickstart(*lean, "learner.optimizer=sgd")).parts
    assert [parts["weights"], parts["gradients"], parts["optimizer"]] == pytest.approx([2 * LLAMA_8B, 2 * LLAMA_8B, 0])
    assert memory.learner_memory(quickstart(*lean)).parts["optimizer"] == pytest.approx(8 * LLAMA_8B)  # Adam alone
    # fp32 weights are their own master copy: 4 + 4 + 8
    fp32 = memory.learner_memory(quickstart("cluster.training_devices=1", "learner.param_dtype=fp32")).parts
    assert [fp32["weights"], fp32["gradients"], fp32["optimizer"]] == pytest.approx(
        [4 * LLAMA_8B, 4 * LLAMA_8B, 8 * LLAMA_8B]
    )
    # offloaded to CPU: nothing left on the device; the gradients stay, 4 · 8,030,261,248 / 8
    parts = memory.learner_memory(quickstart("learner.optimizer_offload=true", "learner.param_offload=true")).parts
    assert parts["optimizer"] == parts["weights"] == 0 and parts["gradients"] == pytest.approx(4 * LLAMA_8B / 8)


# ── training pool: activations and logits ───────────────────────────────────────


def test_activations_with_and_without_checkpointing() -> None:
    tokens, layers, hidden = 16_384, 32, 4096
    # checkpointed: each layer's bf16 input (2 · 4096 · 32 = 262,144 B per token) and one layer recomputed
    # (34 · 4096 = 139,264 B per token): 401,408 B · 16,384 tokens = 6,576,668,672 B
    assert memory.activation_bytes(tokens, layers, hidden, 2, checkpointing=True) == 6_576_668_672
    # every layer's activations: 34 · 4096 · 32 = 4,456,448 B per token · 16,384 = 73,014,444,032 B
    assert memory.activation_bytes(tokens, layers, hidden, 2, checkpointing=False) == 73_014_444_032
    # fp32 activations are twice the 16-bit figures Korthikanti et al. give
    assert memory.activation_bytes(tokens, layers, hidden, 4, checkpointing=False) == 2 * 73_014_444_032


def test_logits_and_the_micro_batch_the_learner_holds() -> None:
    scenario = quickstart()
    assert memory.micro_batch_tokens(scenario) == 16_384  # the budget: longer than 256 + 8,192
    assert memory.learner_memory(scenario).parts["logits"] == 16_384 * 128_256 * 4  # fp32: 8,405,385,216 B
    # moe-streaming's longest rollout, 512 + 16,384 tokens, is longer than the budget: it is one micro-batch
    assert memory.micro_batch_tokens(load_scenario("moe-streaming")) == 16_896
    assert memory.logits_bytes(10, None) == 0  # a model given without its vocabulary


def test_an_8b_policy_on_one_h100_does_not_fit_and_on_eight_does() -> None:
    one = memory.learner_memory(quickstart("cluster.training_devices=1"))
    # 18 · 8,030,261,248 = 144,544,702,464 + activations 6,576,668,672 + logits 8,405,385,216
    assert one.needed == pytest.approx(159_526_756_352) and not one.fits
    eight = memory.learner_memory(quickstart())
    assert eight.needed == pytest.approx(144_544_702_464 / 8 + 6_576_668_672 + 8_405_385_216) and eight.fits
    assert one.available == eight.available == H100


# ── generation pool ─────────────────────────────────────────────────────────────

FIXED_LENGTHS = (
    "workload.prompt_tokens={kind: fixed, value: 256}",
    "workload.completion_tokens={kind: fixed, value: 1024}",
)


def test_engine_holds_weights_and_the_kv_cache_of_its_rollouts() -> None:
    kv_per_rollout = 1280 * 2 * 32 * 8 * 128 * 2  # 1,280 tokens · K and V · 32 layers · 8 heads · 128 · bf16
    assert kv_per_rollout == 167_772_160
    crowded = memory.engine_memory(quickstart(*FIXED_LENGTHS, "schedule.max_concurrency=512"))
    assert crowded.parts == pytest.approx({"weights": 16_060_522_496, "KV cache": 512 * kv_per_rollout})
    assert crowded.available == pytest.approx(0.9 * H100) and not crowded.fits  # 101.96 GB > 72 GB
    split = memory.engine_memory(
        quickstart(*FIXED_LENGTHS, "schedule.max_concurrency=512", "cluster.devices_per_engine=2")
    )
    assert split.needed == pytest.approx((16_060_522_496 + 512 * kv_per_rollout) / 2) and split.fits  # 50.98 GB


def test_the_concurrency_that_fits_is_decided_in_one_place() -> None:
    # 72 GB - 16,060,522,496 B of weights = 55,939,477,504 B free; / 167,772,160 B = 333.4 rollouts, under the
    # 1,024 vLLM batches by default on an 80 GB H100 (256 on an A100, whatever its memory)
    assert quickstart(*FIXED_LENGTHS).memory_concurrency == 333
    assert quickstart(*FIXED_LENGTHS, "hardware.device=a100-80g").memory_concurrency == 256
    assert memory.engine_max_batch("h100", H100) == 1024 and memory.engine_max_batch("l40s", 48e9) == 256
    # vLLM's gpu_memory_utilization: 0.5 of 80 GB = 40 GB - 16,060,522,496 = 23,939,477,504 B; / 167,772,160 = 142.7
    assert quickstart(*FIXED_LENGTHS, "cluster.gpu_memory_utilization=0.5").memory_concurrency == 142
    # 10,000-token rollouts: 1,310,720,000 B each; 55,939,477,504 / 1,310,720,000 = 42.7
    long = quickstart(
        "workload.completion_tokens={kind: fixed, value: 9744}", "workload.prompt_tokens={kind: fixed, value: 256}"
    )
    assert long.memory_concurrency == 42
    assert memory.rollouts_that_fit(LLAMA_8B * 2, 131_072, H100, 1, 10_000, 0.9) == 42
    assert memory.engine_memory(long).fits  # what fits by default always fits


@pytest.mark.parametrize("name", ["cpu-timing", "cpu-pareto", "cpu-light", "cpu-learn", "quickstart", "moe-streaming"])
def test_shipped_scenarios_fit(name: str) -> None:
    assert memory.memory_problem(load_scenario(name)) == ""


# ── the command line ────────────────────────────────────────────────────────────


def test_simulate_refuses_a_learner_that_does_not_fit(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    args = ["simulate", "moe-streaming", "--set", "cluster.training_devices=1", "--out", str(out), "--quiet"]
    assert main(args) == 2
    captured = capsys.readouterr()
    # 30,532,122,624 weights · (2 + 4 + 12) B = 549.6 GB, + activations 4.5 + logits 10.3 (16,896 · 151,936 · 4 B)
    assert captured.err == (
        "asyncrl: error: training pool: needs 564.3 GB per device, has 141 GB (h200): weights 61.1, gradients 122.1, "
        "optimizer 366.4, activations 4.5, logits 10.3 — add training devices or set learner.optimizer_offload\n"
    )
    assert captured.out == "" and not out.exists()


def test_speedup_and_execute_refuse_too(capsys) -> None:
    assert main(["speedup", "quickstart", "--set", "cluster.training_devices=1", "--quiet"]) == 2
    assert capsys.readouterr().err.startswith("asyncrl: error: training pool: needs 159.5 GB per device, has 80 GB")
    crowded = ["--set", "schedule.max_concurrency=512", *[part for item in FIXED_LENGTHS for part in ("--set", item)]]
    assert main(["simulate", "quickstart", *crowded, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("asyncrl: error: generation pool: needs 102 GB per device, has 72 GB (90% of 80 GB, h100)")
    assert err.count("\n") == 1 and "lower schedule.max_concurrency" in err
    # tiny model on two CPU cores, but a 100M-token micro-batch: its logits alone are 100M · 2,048 · 4 B = 819 GB
    assert main(["execute", "cpu-timing", "--set", "learner.micro_batch_tokens=100000000", "--quiet"]) == 2
    assert capsys.readouterr().err.startswith("asyncrl: error: training pool: needs")


@pytest.mark.slow
def test_size_keeps_the_rows_that_do_not_fit_in_the_csv_with_their_reason(tmp_path: Path, capsys) -> None:
    out = tmp_path / "size.csv"
    args = ["size", "quickstart", "--devices", "16", "--steps", "3", "--splits", "3", "--max-staleness", "1"]
    assert main([*args, "--out", str(out), "--quiet"]) == 0
    printed = capsys.readouterr().out
    table = read_sizing(out)
    excluded = table[~table["fits"]]
    # tp1 tries 1, 8 and 15 generation devices, tp2 2, 8 and 14: 15:1 and 14:2 leave 1 and 2 training devices
    assert sorted(excluded["training_devices"]) == [1, 2]
    assert excluded["samples_per_s"].isna().all() and excluded["dropped"].isna().all()
    one = excluded[excluded["training_devices"] == 1]["reason"].item()
    assert one.startswith("training pool: needs 159.5 GB per device, has 80 GB (h100)")
    two = excluded[excluded["training_devices"] == 2]["reason"].item()
    # 144,544,702,464 / 2 + 6,576,668,672 + 8,405,385,216 = 87,254,405,120 B
    assert two.startswith("training pool: needs 87.3 GB per device")
    assert (table[table["fits"]]["reason"] == "").all() and table["fits"].iloc[: len(table) - 2].all()
    assert (
        f"excluded 2 of {len(table)} rows" in printed and "training pool on 1-2 devices needs 87.3-159.5 GB" in printed
    )
    assert "15:1" not in printed.split("excluded")[0]  # not ranked


def test_a_baseline_that_does_not_fit_shows_its_reason_instead_of_figures(tmp_path: Path) -> None:
    scenario = quickstart("run.steps=3")
    written = speedup_variants(scenario)[0]
    tight = Variant("sync, one trainer", quickstart("schedule.kind=sync", "cluster.training_devices=1"))
    figures = {
        "throughput.samples_per_s": 10.0,
        "step_time_s.mean": 1.0,
        "staleness.mean": 0.5,
        "staleness.max": 1,
        "utilization.generation": 0.5,
        "utilization.training": 0.5,
        "samples.dropped": 0,
        "samples.trained": 1200,
        "wall_time_s": 120.0,
    }
    summary = validate_summary(hand_summary(**figures))
    lines = speedup_lines(scenario, [Simulated(written, summary), Simulated(tight, None)]).splitlines()
    assert lines[3].split()[-2] == "1.00x"  # then device-hours per 1,000 samples
    assert lines[4].split()[-9:] == ["-"] * 9  # seven figures, the speedup and device-hours
    assert lines[5].startswith("sync, one trainer: not simulated, training pool: needs 159.5 GB per device")


def test_a_wrong_learner_key_names_the_field(capsys) -> None:
    assert main(["simulate", "quickstart", "--set", "learner.sharding=zero4", "--quiet"]) == 2
    assert capsys.readouterr().err.startswith("asyncrl: error: learner.sharding: Input should be")
    with pytest.raises(ScenarioError, match=r"learner\.offload: not a setting here"):
        quickstart("learner.offload=true")
