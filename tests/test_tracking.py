"""execute --log: each step's metrics and the summary go to TensorBoard (read back with its own event
reader) or W&B; a tracker that is not installed is a one-line error before anything runs."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pandas as pd
import pytest
from asyncrl.executor.tracking import step_figures, summary_figures

from asyncrl.cli import main


def test_figures_of_a_row_and_of_a_summary() -> None:
    row = {"step": 3, "start": 1.0, "end": 2.5, "loss": -0.1, "reward_mean": float("nan"), "flag": True}
    assert step_figures(row) == {"start": 1.0, "end": 2.5, "loss": -0.1}
    summary = {
        "backend": "executor",
        "steps": 4,
        "throughput": {"samples_per_s": 2.0},
        "staleness": {"mean": 0.5, "histogram": {"0": 3}},
    }
    assert summary_figures(summary) == {"steps": 4.0, "throughput.samples_per_s": 2.0, "staleness.mean": 0.5}


@pytest.mark.slow
def test_a_short_cpu_run_logged_to_tensorboard_reads_back(tmp_path: Path, capsys) -> None:
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "run"
    assert main(["execute", "cpu-timing", "--steps", "4", "--quiet", "--log", "tensorboard", "--out", str(out)]) == 0
    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    metrics = pd.read_parquet(out / "metrics.parquet")
    for column in ("loss", "reward_mean", "staleness_mean", "end"):
        logged = events.Scalars(f"metrics/{column}")
        assert [event.step for event in logged] == metrics["step"].tolist() == [0, 1, 2, 3]
        assert [event.value for event in logged] == pytest.approx(metrics[column].tolist(), rel=1e-6)
    summary = json.loads((out / "summary.json").read_text())
    (wall,) = events.Scalars("summary/wall_time_s")
    assert wall.value == pytest.approx(summary["wall_time_s"], rel=1e-6) and wall.step == 3
    assert {"summary/throughput.samples_per_s", "summary/staleness.mean", "summary/samples.trained"} <= tags
    assert set(events.Tags()["tensors"]) == {"scenario/text_summary", "summary/text_summary"}  # both as text


def test_a_wandb_run_offline_needs_no_network(tmp_path: Path, capsys, monkeypatch) -> None:
    pytest.importorskip("wandb")
    monkeypatch.delenv("WANDB_MODE", raising=False)  # offline is the default
    out = tmp_path / "run"
    assert main(["execute", "cpu-timing", "--steps", "3", "--quiet", "--log", "wandb", "--out", str(out)]) == 0
    (log,) = (out / "wandb").glob("offline-run-*/run-*.wandb")
    record = log.read_bytes()  # W&B's own record file: the logged keys are in it as written
    assert b"metrics/loss" in record and b"metrics/reward_mean" in record and b"summary/wall_time_s" in record


@pytest.mark.parametrize("tracker", ["tensorboard", "wandb"])
def test_a_missing_tracker_is_one_line_before_the_run(tracker: str, tmp_path: Path, capsys, monkeypatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == tracker else real(name, *a))
    out = tmp_path / "run"
    assert main(["execute", "cpu-timing", "--steps", "2", "--quiet", "--log", tracker, "--out", str(out)]) == 2
    assert capsys.readouterr().err == (
        f"asyncrl: error: --log: {tracker} is not installed (pip install {tracker}, or 'asyncrl[tracking]')\n"
    )
    assert not out.exists()
