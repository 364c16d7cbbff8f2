"""The main job's pieces end to end, on one scenario and a few steps (calibration runs of two)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")

from asyncrl.scenarios.spec.loading import load_scenario

from asyncrl.cli import main
from asyncrl.experiments.demo import ScenarioOutcome, load_notes


@pytest.mark.slow
def test_demo_calibrates_predicts_executes_compares_and_reports(tmp_path: Path, capsys) -> None:
    out = tmp_path / "demo"
    argv = ["demo", "--out", str(out), "--scenario", "cpu-timing", "--steps", "3", "--calibration-steps", "2"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "predicted speedup" in printed and "cpu-timing (streaming)" in printed
    runs = out / "cpu-timing"
    profile = load_scenario("cpu-timing", [f"hardware.profile={runs / 'profile.yaml'}"]).hardware.cost_profile()
    assert profile is not None and profile.train_padding == "longest" and profile.train_token_s > 0
    for kind in ("streaming", "sync"):  # calibrated from short runs of the scenario, with the next seed
        calibration = load_scenario(runs / f"calibration-{kind}" / "scenario.yaml")
        assert calibration.run.steps == 2 and calibration.run.seed == 1
    assert "fitted to calibration-streaming, calibration-sync" in (runs / "fit.txt").read_text()
    for run in ("predicted-sync", "predicted-streaming", "measured-sync", "measured-streaming"):
        summary = json.loads((out / "cpu-timing" / run / "summary.json").read_text())
        assert summary["steps"] == 3
    report = (out / "report" / "index.html").read_text()
    assert "cpu-timing/timeline.png" in report and "cpu-timing/sync-vs-async/timeline.png" in report
    assert (out / "report" / "cpu-timing" / "sync-vs-async" / "timeline.png").stat().st_size > 0


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--profile", "p.yaml", "--calibration", "run"], "--calibration"),
        (["--calibration", "bench", "--calibration-steps", "4"], "--calibration-steps"),
        (["--calibration-steps", "1"], "--calibration-steps"),
    ],
)
def test_calibration_flags_that_do_not_apply_are_one_line_and_exit_2(
    flags: list[str], named: str, tmp_path: Path, capsys
) -> None:
    assert main(["demo", "--out", str(tmp_path / "demo"), "--scenario", "cpu-timing", *flags]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"asyncrl: error: {named}:") and error.count("\n") == 1
    assert not (tmp_path / "demo").exists()


def test_a_measured_run_that_shared_the_host_with_other_processes_gets_a_note() -> None:
    busy = ScenarioOutcome("cpu-timing", None, {}, {}, others={"sync": 0.35, "streaming": 0.02})  # type: ignore[arg-type]
    assert load_notes([busy, ScenarioOutcome("cpu-light", None, {}, {})]) == [  # type: ignore[arg-type]
        "note: other processes took 0.35 cores during cpu-timing's measured sync run: its figures carry that load"
    ]
