"""The executor's local runtime: real processes, a real model, the simulator's schedule rules."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from asyncrl.executor.processes.runtime import execute
from asyncrl.scenarios.record.record import EVENT_COLUMNS
from asyncrl.scenarios.spec.loading import load_scenario

FAST = ["run.steps=4", "workload.completion_tokens.max_tokens=48", "workload.prompts_per_step=2"]


def trained_staleness(events: pd.DataFrame) -> pd.DataFrame:
    rows = events[(events["kind"] == "generate") & (events["step"] >= 0)]
    per_sample = rows.groupby(["group", "sample"]).agg(step=("step", "first"), version=("version", "min"))
    return per_sample.assign(staleness=per_sample["step"] - per_sample["version"])


@pytest.mark.slow
@pytest.mark.parametrize(
    "overrides",
    [
        ["schedule.kind=sync"],
        ["schedule.kind=pipelined", "schedule.off_policy_steps=2"],
        ["schedule.max_staleness=1"],
        ["schedule.max_staleness=1", "schedule.in_flight_updates=true", "schedule.queue_policy=drop_oldest"],
    ],
    ids=["sync", "pipelined-2", "streaming", "streaming-in-flight"],
)
def test_every_schedule_runs_and_respects_its_versions(tmp_path: Path, overrides: list[str]) -> None:
    scenario = load_scenario("cpu-timing", [*FAST, *overrides])
    result = execute(scenario, tmp_path / "run")
    summary = result.summary
    assert summary.backend == "executor" and summary.status == "complete"
    assert summary.steps == 4 and summary.samples.trained == 4 * scenario.batch_samples
    events = pd.read_parquet(tmp_path / "run" / "events.parquet")
    assert list(events.columns) == list(EVENT_COLUMNS)
    assert len(pd.read_parquet(tmp_path / "run" / "metrics.parquet")) == 4
    staleness = trained_staleness(events)
    bound = scenario.staleness_bound
    if scenario.schedule.kind == "streaming":
        assert staleness["staleness"].max() <= bound
    else:  # batch k generated with exactly version max(0, k - N)
        assert (staleness["staleness"] == staleness["step"].clip(upper=bound)).all()
    train = events[events["kind"] == "train"].set_index("step")["start"]
    trained = events[(events["kind"] == "generate") & (events["step"] >= 0)]
    assert (trained["end"].to_numpy() <= train.loc[trained["step"]].to_numpy() + 1e-6).all()
    check_metrics_staleness(pd.read_parquet(tmp_path / "run" / "metrics.parquet"), trained, staleness)


def check_metrics_staleness(metrics: pd.DataFrame, trained: pd.DataFrame, per_rollout: pd.DataFrame) -> None:
    """The learner's figures weigh every token at its own version; the rollout figures count each rollout
    once, at its oldest version."""
    metrics = metrics.set_index("step")
    token_staleness = (trained["step"] - trained["version"]) * trained["tokens"]
    by_step = token_staleness.groupby(trained["step"]).sum() / trained.groupby("step")["tokens"].sum()
    pd.testing.assert_series_equal(metrics["staleness_mean"], by_step, check_names=False)
    rollouts = per_rollout.groupby("step")["staleness"]
    pd.testing.assert_series_equal(metrics["rollout_staleness_mean"], rollouts.mean(), check_names=False)
    pd.testing.assert_series_equal(metrics["rollout_staleness_max"], rollouts.max().astype(float), check_names=False)
    assert (metrics["staleness_max"] == metrics["rollout_staleness_max"]).all()  # both the oldest token


@pytest.mark.slow
def test_a_killed_worker_ends_the_run_with_an_error_when_no_restart_is_allowed(tmp_path: Path) -> None:
    scenario = load_scenario("cpu-timing", ["run.steps=50", *FAST[1:]])

    def kill_an_actor(step: int, row: dict) -> None:
        if step == 1:
            for child in multiprocessing.active_children():
                if child.name.startswith("asyncrl-actor"):
                    child.kill()

    with pytest.raises(RuntimeError, match=r"actor 0 exited with code -9 \(no restarts; --max-restarts 0\)"):
        execute(scenario, tmp_path / "run", on_step=kill_an_actor, max_restarts=0)
    summary = pd.read_json(tmp_path / "run" / "summary.json", typ="series")
    assert summary["status"] == "failed"
    assert 2 <= summary["steps"] < 50


@pytest.mark.slow
def test_resume_trains_each_step_once(tmp_path: Path) -> None:
    out = tmp_path / "run"
    first = load_scenario("cpu-timing", [*FAST, "run.steps=4", "run.checkpoint_every=2"])

    def stop_after_step_2(step: int, row: dict) -> None:
        if step == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        execute(first, out, on_step=stop_after_step_2)
    assert pd.read_json(out / "summary.json", typ="series")["status"] == "interrupted"
    result = execute(first, out, resume=True)
    assert result.metrics["step"].tolist() == [0, 1, 2, 3]
    events = pd.read_parquet(out / "events.parquet")
    assert sorted(events.loc[events["kind"] == "train", "step"]) == [0, 1, 2, 3]
    trained = events[(events["kind"] == "generate") & (events["step"] >= 0)]
    assert not trained.duplicated(["group", "sample", "version"]).any()
    assert result.summary.samples.trained == 4 * first.batch_samples


@pytest.mark.slow
def test_the_reward_rises_on_cpu_learn_with_generation_and_training_overlapping(tmp_path: Path) -> None:
    # Streaming, staleness bound 1, real processes: batches depend on timing, so this run is not
    # bit-reproducible, but the climb is wide: 0.07 over the first 20 steps to about 0.5 by step
    # 120 in the runs measured while writing this test.
    scenario = load_scenario("cpu-learn", ["run.steps=120"])
    rewards = execute(scenario, tmp_path / "run").metrics["reward_mean"]
    assert rewards.tail(20).mean() > rewards.head(20).mean() + 0.15


@pytest.mark.slow
def test_online_dpo_throughput_counts_the_samples_of_its_pairs(tmp_path: Path) -> None:
    # Online DPO trains on each group's best and worst sample: the summary's loss_samples_per_s counts those,
    # samples_per_s every sample a step consumed.
    scenario = load_scenario("cpu-timing", [*FAST, "schedule.kind=sync", "algorithm.loss=online_dpo"])
    result = execute(scenario, tmp_path / "run")
    summary, metrics = result.summary, result.metrics
    trained = float(metrics["samples"].sum())
    assert trained == 2 * metrics["pairs"].sum() and trained < metrics["samples_consumed"].sum()
    assert summary.throughput.loss_samples_per_s == pytest.approx(trained / summary.wall_time_s)
    assert summary.throughput.samples_per_s == pytest.approx(4 * scenario.batch_samples / summary.wall_time_s)


@pytest.mark.slow
def test_a_bf16_run_executes_on_cpu(tmp_path: Path) -> None:
    # Engines generate in bf16, the learner trains fp32 weights under bf16 autocast, weights travel as bf16.
    scenario = load_scenario("cpu-timing", [*FAST, "schedule.kind=sync", "model.dtype=bf16"])
    result = execute(scenario, tmp_path / "run")
    assert result.summary.status == "complete" and result.summary.dtype == "bf16"
    assert result.summary.samples.trained == 4 * scenario.batch_samples
    metrics = result.metrics
    assert metrics["loss"].notna().all() and (metrics["grad_norm"] > 0).all()
    assert "peak_memory_bytes" not in metrics  # a CUDA figure
    syncs = pd.read_parquet(tmp_path / "run" / "events.parquet").query("kind == 'sync'")
    assert sorted(syncs["version"].unique()) == [1, 2, 3]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("model.dtype=fp8", "model.dtype: the executor runs fp32 or bf16, not fp8"),
        ("model.preset=qwen3-30b-a3b", "model.preset: model family 'qwen3_moe' is not supported"),
        ("model.path=/nonexistent", "model.path: /nonexistent is not a directory"),
        ("workload.task=nope", "workload.task: unknown task 'nope'"),
    ],
)
def test_what_the_executor_cannot_run_is_a_one_line_error(tmp_path: Path, capsys, override: str, message: str) -> None:
    from asyncrl.cli import main

    assert main(["execute", "cpu-timing", "--set", override, "--out", str(tmp_path / "run"), "--quiet"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and message in captured.err
    assert not (tmp_path / "run").exists()
