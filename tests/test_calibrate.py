"""Micro-benchmark calibration: repeats interleaved across figures, after a discarded warm-up round."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

pytest.importorskip("torch")

from asyncrl.executor.calibrate import interleaved
from asyncrl.scenarios.profile import load_profile

from asyncrl.cli import main


def test_repeats_go_round_robin_after_one_warm_up_round_and_the_median_is_kept() -> None:
    calls: list[str] = []
    readings = {"decode": iter([9.0, 1.0, 5.0, 3.0]), "train": iter([7.0, 2.0, 4.0, 100.0]), "sync": itertools.count()}

    def measure(name: str):
        def timed() -> float:
            calls.append(name)
            return float(next(readings[name]))

        return timed

    ticks: list[str] = []
    values = interleaved({name: measure(name) for name in ("decode", "train", "sync")}, 3, ticks.append)
    assert calls == ["decode", "train", "sync"] * 4  # warm-up round, then three rounds of every figure
    assert ticks == ["warm-up", "round 1/3", "round 2/3", "round 3/3"]
    # The warm-up readings (9, 7, 0) are discarded; the rest are kept in order.
    assert values == {"decode": [1.0, 5.0, 3.0], "train": [2.0, 4.0, 100.0], "sync": [1.0, 2.0, 3.0]}


def test_calibrate_writes_a_profile_and_reports_its_noise(tmp_path: Path, capsys) -> None:
    out = tmp_path / "profile.yaml"
    argv = ["calibrate", "cpu-timing", "--repeats", "1", "--batch-sizes", "1,4", "--out", str(out), "--quiet"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "median of 1" in printed and "noise:" in printed
    profile = load_profile(out)
    assert set(profile.decode_step_s) == {1, 4}
    assert profile.train_padding == "longest"
