"""The time to target a staleness penalty predicts: interpolated along a run, extrapolated at its steady step,
and printed by simulate, speedup and size; and the ``penalty`` command that fits one.

The hand-worked scenario (``_hand_worked``): one engine, batches of 2 groups × 2 samples of exactly 100
tokens, a flat profile with no prefill and no weight-sync cost, so generating a batch takes 100 × 10 ms
= 1 s, and training one takes 4 × 110 tokens × (2/440 s) / 2 devices = 1 s. Over 4 steps:

    pipelined N=1   batch k+1 generates while step k trains: steps end at 2, 3, 4, 5 s;
                    staleness 0, 1, 1, 1 (token mean 0.75); steady step (second half) 1 s
    sync            generate, then train: steps end at 2, 4, 6, 8 s; staleness 0; steady step 2 s

With S0 = 100 steps and a = 0.25 per step of staleness, pipelined needs 100 · (1 + 0.25 · 0.75) = 118.75
steps: 5 s + (118.75 − 4) · 1 s = 119.75 s; sync needs 100 steps: 8 s + 96 · 2 s = 200 s. Samples/s:
16 / 5 against 16 / 8, 1.60x; at equal quality 200 / 119.75 = 1.67x.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from asyncrl.analysis.fits.penalty import fit_penalty, read_cells
from asyncrl.scenarios.costs.profile import save_profile
from asyncrl.scenarios.spec.loading import dump_scenario
from asyncrl.scenarios.staleness.penalty import (
    Penalty,
    read_penalty,
    time_at_step,
    write_penalty,
)
from asyncrl.simulator.convergence import Tolerance
from asyncrl.simulator.sweep import _summary_of
from asyncrl.simulator.target import steady_step_s

from asyncrl.cli import main
from tests.conftest import profile, small_scenario
from tests.test_penalty import cells_of, fit_of, run_of

# ── time to target ──────────────────────────────────────────────────────────────


def test_time_at_step_interpolates_within_the_run_and_extends_past_it_at_the_steady_step() -> None:
    ends = [2.0, 3.0, 4.0, 5.0]
    assert time_at_step(ends, 0, 1.0) == 0.0
    assert time_at_step(ends, 0.5, 1.0) == pytest.approx(1.0)  # half of the first step's 2 s
    assert time_at_step(ends, 2.25, 1.0) == pytest.approx(3.25)
    assert time_at_step(ends, 4, 7.0) == pytest.approx(5.0)
    assert time_at_step(ends, 10.5, 7.0) == pytest.approx(5.0 + 6.5 * 7.0)


def test_steady_step_is_the_second_half_or_the_steady_span() -> None:
    ends = np.array([2.0, 3.0, 5.0, 8.0, 9.0])
    assert steady_step_s(ends) == pytest.approx((9.0 - 3.0) / 3)  # steps 3 to 5
    assert steady_step_s(ends, (1, 3)) == pytest.approx((5.0 - 2.0) / 2)  # steps 2 and 3
    assert steady_step_s(ends, (0, 2)) == pytest.approx(3.0 / 2)


def test_a_run_ended_once_converged_reaches_run_steps_at_its_extrapolated_wall_time() -> None:
    scenario = small_scenario(
        schedule={"kind": "pipelined", "off_policy_steps": 1, "max_concurrency": 4}, run={"steps": 300, "seed": 0}
    )
    summary = _summary_of(scenario, Tolerance(), penalty=fit_of(steps_at_zero=300.0, per_staleness=0.0))
    assert summary.extrapolated and summary.steps_simulated < 300
    reached = summary.time_to_target
    assert reached.extrapolated and reached.steps == pytest.approx(300.0)
    assert reached.time_s == pytest.approx(summary.wall_time_s, rel=1e-9)


# ── the command line ────────────────────────────────────────────────────────────


def _hand_worked(tmp_path: Path) -> tuple[Path, Path]:
    """The module docstring's scenario (pipelined N=1, 4 steps) and a penalty file with S0 = 100, a = 0.25."""
    save_profile(profile(prefill_token_s=0.0, train_token_s=2 / 440, weight_sync_s=0.0), tmp_path / "profile.yaml")
    scenario = small_scenario(
        hardware={"device": "cpu", "profile": str(tmp_path / "profile.yaml")},
        schedule={"kind": "pipelined", "off_policy_steps": 1, "max_concurrency": 4},
        run={"steps": 4, "seed": 0},
    )
    (tmp_path / "scenario.yaml").write_text(dump_scenario(scenario))
    penalty = Penalty(target=0.5, task="add", source="synthetic", fits=[fit_of(), fit_of(loss="rloo")])
    return tmp_path / "scenario.yaml", write_penalty(penalty, tmp_path / "penalty.json")


@pytest.mark.slow
def test_speedup_at_equal_quality_worked_by_hand(tmp_path: Path, capsys) -> None:
    scenario, penalty = _hand_worked(tmp_path)
    assert main(["speedup", str(scenario), "--penalty", str(penalty), "--quiet", "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    written, sync = figures["pipelined (as written)"], figures["sync, same split"]
    assert written["time_to_target"]["steps"] == pytest.approx(118.75)
    assert written["time_to_target"]["staleness"] == pytest.approx(0.75)
    assert written["time_to_target"]["time_s"] == pytest.approx(119.75)
    assert sync["time_to_target"]["steps"] == pytest.approx(100.0)
    assert sync["time_to_target"]["time_s"] == pytest.approx(200.0)
    assert sync["time_to_target"]["as_written_vs_this"] == pytest.approx(200 / 119.75)
    assert written["throughput"]["samples_per_s"] / sync["throughput"]["samples_per_s"] == pytest.approx(1.6)

    assert main(["speedup", str(scenario), "--penalty", str(penalty), "--quiet"]) == 0
    lines = capsys.readouterr().out.splitlines()
    header, sync_row = lines[1], next(line for line in lines if line.startswith("sync, same split "))
    assert header.index("as written vs this") < header.index("at equal quality") < header.index("dev-h/1k")
    assert "1.60x" in sync_row and "1.67x" in sync_row
    assert "  pipelined (as written)  119.8 s (118.8 steps at staleness 0.75, 0% dropped)" in lines
    assert "  sync, same split        200.0 s (100.0 steps at staleness 0.00, 0% dropped)" in lines


@pytest.mark.slow
def test_simulate_prints_the_time_to_target_and_keeps_it_out_of_the_run_record(tmp_path: Path, capsys) -> None:
    scenario, penalty = _hand_worked(tmp_path)
    out = tmp_path / "run"
    assert main(["simulate", str(scenario), "--penalty", str(penalty), "--out", str(out), "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "time to target  119.8 s (118.8 steps at staleness 0.75, 0% dropped); steps past the 4 simulated" in printed
    assert f"reward 0.5 on add, steps from the grpo/clip fit in {penalty}" in printed
    assert "time_to_target" not in json.loads((out / "summary.json").read_text())
    assert main(["simulate", str(scenario), "--penalty", str(penalty), "--out", str(out), "--quiet", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["time_to_target"]["time_s"] == pytest.approx(119.75)


@pytest.mark.slow
def test_without_a_penalty_one_line_says_time_to_target_is_not_predicted(tmp_path: Path, capsys) -> None:
    scenario, _ = _hand_worked(tmp_path)
    not_predicted = "time to target: not predicted (give --penalty FILE from `asyncrl study`)"
    for command in (["simulate", str(scenario), "--out", str(tmp_path / "run")], ["speedup", str(scenario)]):
        assert main([*command, "--quiet"]) == 0
        out = capsys.readouterr().out
        assert out.count(not_predicted) == 1 and "equal quality" not in out


@pytest.mark.slow
def test_size_with_a_penalty_ranks_by_time_to_target(tmp_path: Path, capsys) -> None:
    _, penalty = _hand_worked(tmp_path)
    args = ["size", "quickstart", "--devices", "16", "--steps", "3", "--splits", "2", "--max-staleness", "1"]
    assert main([*args, "--out", str(tmp_path / "size.csv"), "--quiet", "--penalty", str(penalty)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("soonest to target first") and "to target s" in lines[1]
    rows = pd.read_csv(tmp_path / "size.csv")
    assert list(rows.columns[-2:]) == ["steps_to_target", "time_to_target_s"]
    ranked = rows[rows["fits"]].iloc[1:]  # under the baseline
    assert ranked["time_to_target_s"].is_monotonic_increasing
    assert lines[-2] == f"time to target: reward 0.5 on add, steps from the grpo/clip fit in {penalty}"


@pytest.mark.parametrize(
    ("penalty_text", "message"),
    [
        (None, "--penalty: file not found: "),
        ("{not json", "--penalty: "),
        (
            '{"target": 0.5, "task": "add", "source": "", "fits": [' + fit_of(loss="rloo").model_dump_json() + "]}",
            "--penalty: no penalty fit for loss grpo, correction clip (algorithm.loss, algorithm.correction); "
            "the file has rloo/clip",
        ),
    ],
)
@pytest.mark.parametrize("command", [["simulate"], ["speedup"], ["size", "--devices", "16"]])
def test_penalty_errors_are_one_line_exit_2(tmp_path: Path, capsys, penalty_text, message, command) -> None:
    path = tmp_path / "penalty.json"
    if penalty_text is not None:
        path.write_text(penalty_text)
    assert main([command[0], "quickstart", *command[1:], "--penalty", str(path), "--quiet"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and error.startswith(f"asyncrl: error: {message}")


def test_the_penalty_command_fits_a_study_table(tmp_path: Path, capsys) -> None:
    cells = cells_of(
        [run_of("grpo", "clip", s, 100.0 * (1 + 0.25 * s)) for s in (0.0, 1.0, 2.0)]
        + [run_of("grpo", "clip", 2.0, 1.0, status="failed")]
    )
    cells.to_csv(tmp_path / "cells.csv", index=False)
    assert main(["penalty", str(tmp_path / "cells.csv")]) == 0
    out = capsys.readouterr().out
    assert "grpo        clip  linear       100  0.25  -            -       3         0  0.0%" in out
    assert "left out 1 failed run" in out
    penalty = read_penalty(tmp_path / "penalty.json")
    assert penalty.source == str(tmp_path / "cells.csv")
    assert penalty.fit_for("grpo", "clip").steps_at_zero == pytest.approx(100.0, rel=1e-4)
    assert read_cells(tmp_path / "cells.csv").shape == cells.shape


def test_the_penalty_command_refuses_a_missing_table_in_one_line(tmp_path: Path, capsys) -> None:
    assert main(["penalty", str(tmp_path / "missing.csv")]) == 2
    assert capsys.readouterr().err == f"asyncrl: error: file not found: {tmp_path / 'missing.csv'}\n"


def test_the_readme_synthetic_study_fits_as_the_readme_says() -> None:
    cells = read_cells(Path(__file__).parent / "data" / "study-synthetic.csv")
    penalty = fit_penalty(cells, source="tests/data/study-synthetic.csv")
    assert [fit.pair for fit in penalty.fits] == ["grpo/clip", "grpo/tis", "online_dpo/none"]
    grpo = penalty.fit_for("grpo", "clip")
    assert (grpo.steps_at_zero, grpo.per_staleness, grpo.per_dropped) == pytest.approx(
        (201.26, 0.2741, 0.8107), abs=5e-3
    )  # the censored likelihood's fit (README and docs/study.md show it once regenerated)
    assert (grpo.points, grpo.censored) == (7, 4)
    # made with S0 = 200, a = 0.3, b = 0.8 and 3% noise: the fit lands near them
    assert grpo.steps_at_zero == pytest.approx(200, rel=0.05) and grpo.per_staleness == pytest.approx(0.3, abs=0.05)
