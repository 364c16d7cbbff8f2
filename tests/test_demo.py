"""The main job's pieces end to end, on one scenario and a few steps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")

from asyncrl.scenarios.loading import load_scenario

from asyncrl.cli import main


def test_demo_calibrates_predicts_executes_compares_and_reports(tmp_path: Path, capsys) -> None:
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), "--scenario", "cpu-timing", "--steps", "3"]) == 0
    printed = capsys.readouterr().out
    assert "predicted speedup" in printed and "cpu-timing (streaming)" in printed
    profile = load_scenario(
        "cpu-timing", [f"hardware.profile={out / 'cpu-timing' / 'profile.yaml'}"]
    ).hardware.cost_profile()
    assert profile is not None and profile.train_padding == "longest"
    for run in ("predicted-sync", "predicted-streaming", "measured-sync", "measured-streaming"):
        summary = json.loads((out / "cpu-timing" / run / "summary.json").read_text())
        assert summary["steps"] == 3
    report = (out / "report" / "index.html").read_text()
    assert "timeline.png" in report
    assert (out / "report-sync-vs-async" / "timeline.png").stat().st_size > 0
