"""The hostile-input round (issue 22), records damaged: ``--resume`` of another scenario's run (its summary was
deleted, or it was accepted and relabelled), a stray ``study.json`` (the cells' other files were deleted)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from asyncrl.cli import main
from asyncrl.experiments.study import StudyOptions
from asyncrl.experiments.study_cells import build_cells
from tests.refusals import refused

USER_TEXT = "the user's notes\n"


@pytest.fixture
def finished(tmp_path: Path, capsys) -> Path:
    """A finished cpu-timing run with a checkpoint folder, as far as ``--resume`` looks before loading it."""
    out = tmp_path / "run"
    assert main(["simulate", "cpu-timing", "--steps", "2", "--quiet", "--out", str(out)]) == 0
    (out / "checkpoint" / "learner").mkdir(parents=True)
    capsys.readouterr()
    return out


@pytest.mark.parametrize(
    ("scenario", "overrides", "differs"),
    [
        ("cpu-light", [], "differs from it in "),
        ("cpu-pareto", [], "name, "),
        ("cpu-timing", ["schedule.max_staleness=3"], "differs from it in schedule.max_staleness "),
    ],
)
def test_resume_of_another_scenarios_run_is_refused_before_touching_it(
    scenario: str, overrides: list[str], differs: str, finished: Path, capsys
) -> None:
    pytest.importorskip("torch")
    summary = (finished / "summary.json").read_text()
    message = refused(capsys, "execute", scenario, *overrides, "--quiet", "--resume", str(finished))
    assert message.startswith(f"--resume: {finished} is a run of cpu-timing, and this scenario differs")
    assert differs in message and "only run.checkpoint_every and run.steps may change" in message
    assert (finished / "summary.json").read_text() == summary  # left as it was


def test_resume_may_change_the_steps_and_checkpoint_interval(finished: Path, capsys) -> None:
    pytest.importorskip("torch")
    message = refused(
        capsys, "execute", "cpu-timing", "--steps", "9", "run.checkpoint_every=3", "--quiet", "--resume", str(finished)
    )
    assert message.endswith("optimizer.pt is missing; the checkpoint is incomplete")  # past the scenario check


def test_a_stray_study_json_does_not_make_a_directory_a_study(tmp_path: Path, capsys) -> None:
    out = tmp_path / "mine"
    notes = out / "cells" / "x" / "results.txt"
    notes.parent.mkdir(parents=True)
    notes.write_text(USER_TEXT)
    (out / "study.json").write_text('{"mine": true}\n')
    message = refused(capsys, "study", "cpu-study", "--schedules", "sync", "--seeds", "0", "--out", str(out))
    assert message == f"--out: {out} holds files that are not a study's; choose an empty directory"
    assert notes.read_text() == USER_TEXT


def test_a_cells_directory_holding_other_files_is_refused_before_any_cell_runs(tmp_path: Path, capsys) -> None:
    pytest.importorskip("torch")
    options = StudyOptions("cpu-study", schedules="sync", losses="grpo", seeds="0", out=tmp_path / "study")
    cell = build_cells(options)[0]
    notes = cell.out / "results.txt"
    notes.parent.mkdir(parents=True)
    notes.write_text(USER_TEXT)
    settings = {"scenario": "cpu-study", "schedules": ["sync"], "losses": ["grpo"], "seeds": [0], "cells": []}
    (options.out / "study.json").write_text(json.dumps(settings))
    args = ["study", "cpu-study", "--schedules", "sync", "--losses", "grpo", "--seeds", "0", "--quiet"]
    message = refused(capsys, *args, "--out", str(options.out))
    assert message == f"--out: {cell.out} holds files that are not a run record; move them, or choose another --out"
    assert notes.read_text() == USER_TEXT
