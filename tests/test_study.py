"""asyncrl study end to end: three real executor cells (one held out and predicted) on the sort task, the files they make, and a rerun
that runs nothing; then which cells count as finished, and a cell run from scratch (a fake executor)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from asyncrl.scenarios.spec.loading import dump_scenario

from asyncrl.cli import main
from asyncrl.experiments.study import _finished
from asyncrl.experiments.study_cells import Cell, StudyOptions, build_cells
from asyncrl.experiments.study_runs import run_cell
from tests.test_analysis import hand_summary
from tests.test_study_tables import CELLS_CSV

pytest.importorskip("torch")
# On the training batch's reward (no evaluation): its 10-step mean is 0.058-0.071 at step 10 in every cell on an
# idle machine, so a target of 0.045 is reached at 10 steps whatever the load does to a streaming cell's
# staleness; three evaluations of 32 sampled answers in a row are not that steady at 15 steps.

STUDY = ["study", "cpu-study", "--schedules", "sync,streaming-1,streaming-2", "--losses", "grpo", "--seeds", "0"]
STEPS = ["--steps", "15", "--target", "0.045", "--holdout", "streaming-1", "--set", "run.eval_every=null", "--quiet"]


@pytest.mark.slow
def test_a_small_study_writes_its_tables_and_running_it_again_runs_nothing(tmp_path: Path, capsys) -> None:
    out = tmp_path / "study"
    assert main([*STUDY, *STEPS, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "3 cells, 15 learner steps each, task sort" in printed and "ran 3 cells" in printed
    names = ("cells.csv", "curves.csv", "summary.csv", "robustness.csv", "table.txt", "study.json", "penalty.json")
    for name in (*names, "holdout.csv"):
        assert (out / name).is_file(), name
    for name in ("reward_wall.png", "reward_step.png", "robustness.png", "frontier.png"):
        assert (out / name).stat().st_size > 10_000, name
    cells = pd.read_csv(out / "cells.csv")
    assert list(cells.columns) == CELLS_CSV
    assert list(cells["cell"]) == ["sync.grpo.clip.s0", "streaming-1.grpo.clip.s0", "streaming-2.grpo.clip.s0"]
    assert list(cells["staleness_bound"]) == [0, 1, 2] and (cells["status"] == "complete").all()
    assert (cells["steps"] == 15).all() and (cells["task"] == "sort").all() and (cells["wall_s"] > 0).all()
    assert cells.loc[0, "staleness_mean"] == 0  # sync trains on-policy
    curves = pd.read_csv(out / "curves.csv")
    figures = ["step", "end", "reward_mean", "kl", "staleness_mean", "eval_reward", "entropy"]
    assert len(curves) == 45 and list(curves.columns[-7:]) == figures
    summary = pd.read_csv(out / "summary.csv")
    assert list(summary["schedule"]) == ["sync", "streaming-1", "streaming-2"] and (summary["seeds"] == 1).all()
    assert summary["final_reward_ci"].isna().all()  # one seed: no interval
    assert json.loads((out / "study.json").read_text())["cells"] == list(cells["cell"])
    held = pd.read_csv(out / "holdout.csv")  # streaming-1 predicted from sync's and streaming-2's runs alone
    assert list(held["schedule"]) == ["streaming-1"] and (held["predicted_s"] > 0).all()
    assert held.loc[0, "measured_s"] == cells.loc[1, "wall_to_target_s"]
    assert "held out of the fit and the calibration" in printed and "streaming-1 grpo/clip: predicted" in printed

    times = {path: path.stat().st_mtime_ns for path in (out / "cells").glob("*/summary.json")}
    assert main([*STUDY, *STEPS, "--out", str(out)]) == 0  # the same command again: nothing to run
    printed = capsys.readouterr().out
    assert "3 already finished, kept" in printed and "ran " not in printed
    assert {path: path.stat().st_mtime_ns for path in times} == times
    assert list(pd.read_csv(out / "cells.csv")["status"]) == ["complete", "complete", "complete"]


def finished_run(cell: Cell, scenario_yaml: str) -> None:
    """What a finished executor run leaves, as far as the study looks."""
    cell.out.mkdir(parents=True)
    (cell.out / "summary.json").write_text(json.dumps(hand_summary(status="complete", steps=3)))
    pd.DataFrame({"step": [0], "end": [0.1], "reward_mean": [0.1], "kl": [0.0]}).to_parquet(
        cell.out / "metrics.parquet"
    )
    (cell.out / "scenario.yaml").write_text(scenario_yaml)


def test_a_finished_cell_is_kept_only_with_the_scenario_it_would_run_now(tmp_path: Path) -> None:
    options = StudyOptions("cpu-study", schedules="sync", losses="grpo", seeds="0", steps=3, out=tmp_path)
    cell = build_cells(options)[0]
    finished_run(cell, dump_scenario(cell.scenario.resolved()))
    assert _finished(cell)
    longer = build_cells(replace(options, steps=4))[0]
    assert longer.out == cell.out and not _finished(longer)  # other --steps: run again
    (cell.out / "summary.json").write_text(json.dumps(hand_summary(status="interrupted")))
    assert not _finished(cell)


def test_a_cell_runs_from_scratch_and_a_failure_is_one_line(tmp_path: Path, monkeypatch) -> None:
    import asyncrl.executor.processes.runtime as runtime

    calls = []

    def fake_execute(scenario, out: Path, device: str = "cpu") -> None:
        calls.append((out.exists(), device))
        raise RuntimeError("actor 0 exited with code 1\ntraceback follows")

    monkeypatch.setattr(runtime, "execute", fake_execute)
    out = tmp_path / "cells" / "sync.grpo.clip.s0"
    out.mkdir(parents=True)
    (out / "events.parquet").write_text("from an interrupted run")
    cell = build_cells(StudyOptions("cpu-study", schedules="sync", losses="grpo", seeds="0", out=tmp_path))[0]
    outcome = run_cell(cell.scenario, cell.out)
    assert calls == [(False, "cpu")]  # what the interrupted run left was removed first
    assert (outcome.cell, outcome.status) == ("sync.grpo.clip.s0", "failed")
    assert outcome.reason == "RuntimeError: actor 0 exited with code 1" and outcome.seconds >= 0
