"""Calibration: by default short runs of the scenario, fitted; with ``--bench`` micro-benchmarks, whose repeats
are interleaved across figures after a discarded warm-up round."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

pytest.importorskip("torch")

from asyncrl.executor.calibrate import interleaved
from asyncrl.scenarios.costs.profile import load_profile
from asyncrl.scenarios.spec.loading import load_scenario

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


@pytest.mark.slow
def test_calibrate_bench_writes_a_profile_and_reports_its_noise(tmp_path: Path, capsys) -> None:
    out = tmp_path / "profile.yaml"
    argv = ["calibrate", "cpu-timing", "--bench", "--repeats", "1", "--batch-sizes", "1,4", "--out", str(out)]
    argv.append("--quiet")
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "median of 1" in printed and "noise:" in printed
    profile = load_profile(out)
    assert set(profile.decode_step_s) == {1, 4}
    assert profile.train_padding == "longest"


@pytest.mark.slow
def test_calibrate_by_default_fits_a_profile_to_short_runs_of_the_scenario(tmp_path: Path, capsys) -> None:
    out = tmp_path / "profile.yaml"
    argv = ["calibrate", "cpu-timing", "--calibration-steps", "2", "--out", str(out), "--quiet"]
    assert main([*argv, "--set", "workload.completion_tokens.max_tokens=64"]) == 0
    printed = capsys.readouterr().out
    assert "fitted to calibration-streaming, calibration-sync" in printed and "profile vs run" in printed
    assert f"in {tmp_path / 'profile-runs'}/" in printed
    profile = load_profile(out)
    assert profile.train_token_s > 0 and profile.train_padding == "longest"
    for kind in ("streaming", "sync"):
        run = load_scenario(tmp_path / "profile-runs" / f"calibration-{kind}" / "scenario.yaml")
        assert run.schedule.kind == kind and run.run.steps == 2 and run.run.seed == 1  # the next seed


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--repeats", "3"], "--repeats"),
        (["--batch-sizes", "1,4"], "--batch-sizes"),
        (["--bench", "--calibration-steps", "4"], "--calibration-steps"),
        (["--calibration-steps", "1"], "--calibration-steps"),
        (["--bench", "--from-run", "runs/x"], "--bench"),
    ],
)
def test_a_flag_the_calibration_does_not_take_is_one_line_and_exit_2(
    flags: list[str], named: str, tmp_path: Path, capsys
) -> None:
    assert main(["calibrate", "cpu-timing", *flags, "--out", str(tmp_path / "profile.yaml")]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"asyncrl: error: {named}:") and error.count("\n") == 1
    assert not any(tmp_path.iterdir())
