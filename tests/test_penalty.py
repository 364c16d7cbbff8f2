"""The staleness penalty: its fit to a study's runs, its file, and the time to target it predicts.

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
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from asyncrl.analysis.penalty import failed_runs, fit_penalty, read_cells
from asyncrl.scenarios.loading import dump_scenario
from asyncrl.scenarios.penalty import (
    Penalty,
    PenaltyError,
    PenaltyFit,
    fit_steps,
    read_penalty,
    time_at_step,
    write_penalty,
)
from asyncrl.scenarios.profile import save_profile
from asyncrl.simulator.convergence import Tolerance
from asyncrl.simulator.sweep import _summary_of
from asyncrl.simulator.target import steady_step_s
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from asyncrl.cli import main
from tests.conftest import profile, small_scenario

GRID_S = [0.0, 0.5, 1.0, 2.0, 3.0]
GRID_D = [0.0, 0.1, 0.3]


def _fit(steps_at_zero: float = 100.0, per_staleness: float = 0.25, per_dropped: float | None = None, **fields):
    values = {"loss": "grpo", "correction": "clip", "points": 6, "censored": 0, "residual_rel": 0.0} | fields
    return PenaltyFit(steps_at_zero=steps_at_zero, per_staleness=per_staleness, per_dropped=per_dropped, **values)


def _grid(s0: float, a: float, b: float, noise: float = 0.0, seed: int = 0) -> tuple[list, list, np.ndarray]:
    rng = np.random.default_rng(seed)
    s, d = (np.array(axis) for axis in zip(*[(si, di) for si in GRID_S for di in GRID_D], strict=True))
    steps = s0 * (1 + a * s + b * d) * (1 + noise * rng.standard_normal(len(s)))
    return list(s), list(d), steps


# ── the fit ─────────────────────────────────────────────────────────────────────


def test_fit_is_exact_on_noise_free_data() -> None:
    s, d, steps = _grid(120.0, 0.3, 0.8)
    fit = fit_steps(s, d, steps, [True] * len(s))
    assert (fit.steps_at_zero, fit.per_staleness, fit.per_dropped) == pytest.approx((120.0, 0.3, 0.8), rel=1e-9)
    assert fit.residual_rel == pytest.approx(0.0, abs=1e-12)


def test_fit_recovers_a_known_penalty_through_noise() -> None:
    s, d, _ = _grid(200.0, 0.2, 0.5)
    s, d, steps = s * 4, d * 4, np.concatenate([_grid(200.0, 0.2, 0.5, noise=0.01, seed=seed)[2] for seed in range(4)])
    fit = fit_steps(s, d, steps, [True] * len(s))
    assert fit.steps_at_zero == pytest.approx(200.0, rel=0.02)
    assert fit.per_staleness == pytest.approx(0.2, abs=0.01)
    assert fit.per_dropped == pytest.approx(0.5, abs=0.1)
    assert 0.005 < fit.residual_rel < 0.02  # the 1% noise, seen in the residual


@settings(max_examples=60, deadline=None)
@given(s0=st.floats(10, 10_000), a=st.floats(0, 5), b=st.floats(0, 5))
def test_fit_recovers_any_noise_free_penalty(s0: float, a: float, b: float) -> None:
    s, d, steps = _grid(s0, a, b)
    fit = fit_steps(s, d, steps, [True] * len(s))
    assert fit.steps_at_zero == pytest.approx(s0, rel=1e-6)
    assert fit.per_staleness == pytest.approx(a, rel=1e-6, abs=1e-9)
    assert fit.per_dropped == pytest.approx(b, rel=1e-6, abs=1e-9)


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(st.floats(1, 1_000), min_size=4, max_size=12),
    seed=st.integers(0, 2**16),
)
def test_any_fit_has_non_negative_slopes_and_never_beats_a_constant_by_less(steps: list[float], seed: int) -> None:
    rng = np.random.default_rng(seed)
    s, d = rng.uniform(0, 4, len(steps)), rng.uniform(0, 0.5, len(steps))
    s[:2] = [0.0, 1.0]  # two staleness values at least
    try:
        fit = fit_steps(s, d, steps, [True] * len(steps))
    except ValueError as error:  # the one refusal left: a line through the points that starts below 0 steps
        assert "steps at zero staleness" in str(error)
        assume(False)
    assert fit.per_staleness >= 0 and (fit.per_dropped or 0.0) >= 0
    model = _fit(fit.steps_at_zero, fit.per_staleness, fit.per_dropped)
    fitted = np.array([model.steps(si, di) for si, di in zip(s, d, strict=True)])
    constant = np.full(len(steps), np.mean(steps))  # the fit with both slopes at 0 is one the search tries
    assert np.sum((fitted - steps) ** 2) <= np.sum((constant - steps) ** 2) * (1 + 1e-9) + 1e-9


@settings(max_examples=100, deadline=None)
@given(
    s0=st.floats(1, 1e4),
    a=st.floats(0, 10),
    b=st.none() | st.floats(0, 10),
    low=st.floats(0, 50),
    more=st.floats(0, 50),
    dropped=st.floats(0, 1),
)
def test_steps_never_fall_as_staleness_or_drops_grow(s0, a, b, low, more, dropped) -> None:
    fit = _fit(s0, a, b)
    assert fit.steps(low, dropped) <= fit.steps(low + more, dropped)
    assert fit.steps(low, 0.0) <= fit.steps(low, dropped)
    assert fit.steps(0.0, 0.0) == pytest.approx(s0)


def test_a_slope_the_data_call_negative_is_held_at_zero() -> None:
    fit = fit_steps([0, 1, 2, 3], [0, 0, 0, 0], [100, 98, 97, 95], [True] * 4)  # staleness "helps": noise
    assert fit.per_staleness == 0.0
    assert fit.steps_at_zero == pytest.approx(97.5)  # the mean, the best fit with no slope


def test_the_dropped_slope_is_left_out_when_drops_do_not_vary_on_their_own() -> None:
    constant = fit_steps([0, 1, 2], [0.1, 0.1, 0.1], [100, 120, 140], [True] * 3)
    assert constant.per_dropped is None
    assert (constant.steps_at_zero, constant.per_staleness) == pytest.approx((100.0, 0.2))
    along = fit_steps([0, 1, 2], [0.0, 0.1, 0.2], [100, 126, 152], [True] * 3)  # d = s / 10: cannot be told apart
    assert along.per_dropped is None
    assert (along.steps_at_zero, along.per_staleness) == pytest.approx((100.0, 0.26))


def test_censored_runs_are_lower_bounds_worked_by_hand() -> None:
    # Reached: 100 steps at s = 0, 120 at s = 1 (S0 = 100, a = 0.2). A run at s = 2 stopped after 200 steps
    # without reaching the target: the line predicts 140 < 200, so the bound binds and the fit is least squares
    # through (0, 100), (1, 120), (2, 200): slope 50, intercept 90 (prediction 190 < 200: still binding).
    binding = fit_steps([0, 1, 2], [0, 0, 0], [100, 120, 200], [True, True, False])
    assert (binding.steps_at_zero, binding.per_staleness) == pytest.approx((90.0, 50 / 90))
    # Stopped after 130 steps: the line's 140 already exceeds it; the run changes nothing.
    loose = fit_steps([0, 1, 2], [0, 0, 0], [100, 120, 130], [True, True, False])
    assert (loose.steps_at_zero, loose.per_staleness) == pytest.approx((100.0, 0.2))
    assert loose.residual_rel == pytest.approx(0.0, abs=1e-12)  # the residual is over the points only


POINTS_S, POINTS = [0.0, 1.0, 2.0, 3.0], [100.0, 115.0, 135.0, 140.0]


def _censored_cost(fit, s: list[float], steps: list[float], reached: list[bool]) -> float:
    model = _fit(fit.steps_at_zero, fit.per_staleness)
    gaps = [steps_i - model.steps(s_i) for s_i, steps_i in zip(s, steps, strict=True)]
    return sum(gap**2 if hit else max(0.0, gap) ** 2 for gap, hit in zip(gaps, reached, strict=True))


@settings(max_examples=40, deadline=None)
@given(shares=st.lists(st.floats(0.01, 1), min_size=1, max_size=5), seed=st.integers(0, 2**16))
def test_bounds_the_fit_already_meets_change_nothing(shares: list[float], seed: int) -> None:
    alone = fit_steps(POINTS_S, [0.0] * 4, POINTS, [True] * 4)
    at = list(np.random.default_rng(seed).uniform(0, 6, len(shares)))
    bounds = [
        _fit(alone.steps_at_zero, alone.per_staleness).steps(s) * share for s, share in zip(at, shares, strict=True)
    ]
    both = fit_steps(POINTS_S + at, [0.0] * (4 + len(at)), POINTS + bounds, [True] * 4 + [False] * len(at))
    assert (both.steps_at_zero, both.per_staleness) == pytest.approx((alone.steps_at_zero, alone.per_staleness))


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(bounds=st.lists(st.floats(1, 1_000), min_size=1, max_size=5), seed=st.integers(0, 2**16))
def test_a_censored_fit_is_the_least_cost_fit(bounds: list[float], seed: int) -> None:
    rng = np.random.default_rng(seed)
    s = POINTS_S + list(rng.uniform(0, 6, len(bounds)))
    steps, reached = POINTS + bounds, [True] * 4 + [False] * len(bounds)
    try:
        fit = fit_steps(s, [0.0] * len(s), steps, reached)
    except ValueError as error:  # bounds far above the points near staleness 0: no line from S0 > 0 fits
        assert "steps at zero staleness" in str(error)
        assume(False)
    best = _censored_cost(fit, s, steps, reached)
    for _ in range(20):  # no nearby model with a slope ≥ 0 costs less
        nudged = _fit(fit.steps_at_zero * (1 + rng.normal(0, 0.01)), max(0.0, fit.per_staleness + rng.normal(0, 0.01)))
        assert best <= _censored_cost(nudged, s, steps, reached) * (1 + 1e-9) + 1e-9


def test_one_staleness_value_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"have 1 staleness value \(1\); need 2"):
        fit_steps([1, 1, 2], [0, 0, 0], [100, 110, 300], [True, True, False])


# ── the study table ─────────────────────────────────────────────────────────────


def _cells(rows: list[dict]) -> pd.DataFrame:
    base = {
        "task": "add",
        "target": 0.5,
        "status": "complete",
        "steps": 300,
        "dropped_fraction": 0.0,
        "cell": "c",
        "seed": 0,
    }
    return pd.DataFrame([base | row for row in rows])


def _run(loss: str, correction: str, staleness: float, to_target: float | None, **fields) -> dict:
    """One run of a study table; ``to_target`` None: it did not reach the target."""
    reached = to_target is not None
    return {
        "loss": loss,
        "correction": correction,
        "staleness_mean": staleness,
        "reached": reached,
        "steps_to_target": to_target if reached else math.nan,
        **fields,
    }


def test_fit_penalty_fits_each_pair_counts_censored_runs_and_leaves_failed_ones_out() -> None:
    cells = _cells(
        [
            _run("grpo", "clip", 0.0, 100.0),
            _run("grpo", "clip", 1.0, 125.0),
            _run("grpo", "clip", 2.0, 150.0),
            _run("grpo", "clip", 3.0, None, steps=160),  # below the line's 175: changes nothing
            _run("grpo", "clip", 2.0, 10.0, status="failed"),  # would spoil the fit if it counted
            _run("rloo", "tis", 0.0, 80.0),
            _run("rloo", "tis", 2.0, 96.0),
        ]
    )
    penalty = fit_penalty(cells, source="cells.csv")
    assert (penalty.target, penalty.task, penalty.source) == (0.5, "add", "cells.csv")
    grpo, rloo = penalty.fits
    assert (grpo.pair, grpo.points, grpo.censored) == ("grpo/clip", 3, 1)
    assert (grpo.steps_at_zero, grpo.per_staleness, grpo.per_dropped) == pytest.approx((100.0, 0.25, None))
    assert (rloo.pair, rloo.steps_at_zero, rloo.per_staleness) == ("rloo/tis", pytest.approx(80.0), pytest.approx(0.1))


def test_an_older_table_s_ok_is_complete_and_interrupted_runs_are_left_out() -> None:
    cells = _cells(
        [
            _run("grpo", "clip", 0.0, 100.0, status="ok"),  # cells.csv before the statuses were the runs' words
            _run("grpo", "clip", 2.0, 150.0, status=" ok"),
            _run("grpo", "clip", 1.0, 10.0, status="interrupted"),
            _run("grpo", "clip", 1.0, 10.0, status="failed"),
        ]
    )
    (fit,) = fit_penalty(cells).fits
    assert (fit.points, fit.steps_at_zero, fit.per_staleness) == (2, pytest.approx(100.0), pytest.approx(0.25))
    assert failed_runs(cells) == 2


def test_a_pair_reached_at_one_staleness_is_an_error_naming_it() -> None:
    cells = _cells([_run("grpo", "clip", 0.0, 100.0), _run("grpo", "clip", 2.0, None)])
    with pytest.raises(PenaltyError, match=r"^loss grpo, correction clip: .* 1 staleness value \(0\); need 2$"):
        fit_penalty(cells)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"drop": "staleness_mean"}, "missing columns staleness_mean"),
        ({"row": {"status": "done"}}, "status: row 1 (cell c, seed 0): 'done' is not complete, interrupted or failed"),
        ({"row": {"reached": "maybe"}}, "reached: row 1 (cell c, seed 0): 'maybe' is not true or false"),
        ({"row": {"staleness_mean": -1.0}}, "staleness_mean: row 1 (cell c, seed 0): -1.0 is not a number ≥ 0"),
        (
            {"row": {"dropped_fraction": 1.5}},
            "dropped_fraction: row 1 (cell c, seed 0): 1.5 is not a number ≥ 0 and ≤ 1",
        ),
        ({"row": {"steps_to_target": math.nan}}, "steps_to_target: row 1 (cell c, seed 0): nan is not a number > 0"),
        ({"row": {"target": 0.7}}, "target: the runs have 2 (0.7, 0.5); fit a table of one target"),
    ],
)
def test_a_bad_study_table_is_one_error_naming_the_column(change: dict, message: str) -> None:
    rows = [_run("grpo", "clip", 0.0, 100.0) | change.get("row", {}), _run("grpo", "clip", 1.0, 120.0)]
    cells = _cells(rows).drop(columns=[change["drop"]] if "drop" in change else [])
    with pytest.raises(PenaltyError) as error:
        fit_penalty(cells)
    assert str(error.value).endswith(message)


# ── the file ────────────────────────────────────────────────────────────────────


def test_the_penalty_file_round_trips(tmp_path: Path) -> None:
    penalty = Penalty(
        target=0.5, task="add", source="cells.csv", fits=[_fit(), _fit(correction="tis", per_dropped=0.5)]
    )
    path = write_penalty(penalty, tmp_path / "penalty.json")
    assert read_penalty(path) == penalty
    assert json.loads(path.read_text())["fits"][0] == {
        "loss": "grpo",
        "correction": "clip",
        "steps_at_zero": 100.0,
        "per_staleness": 0.25,
        "per_dropped": None,
        "points": 6,
        "censored": 0,
        "residual_rel": 0.0,
    }
    assert read_penalty(path).fit_for("grpo", "tis").per_dropped == 0.5


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"target": 0.5', "penalty.json:1:15: not valid JSON: Expecting ',' delimiter"),
        (
            '{"target": 0.5, "task": "add", "source": "", "fits": []}',
            "penalty.json: fits: List should have at least 1 item",
        ),
        (
            '{"target": 0.5, "task": "add", "source": "", "fits": [{"loss": "grpo"}]}',
            "penalty.json: fits.0.correction: Field required",
        ),
    ],
)
def test_a_bad_penalty_file_is_one_error_naming_the_field(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "penalty.json").write_text(text)
    with pytest.raises(PenaltyError) as error:
        read_penalty(tmp_path / "penalty.json")
    assert message in str(error.value)


def test_two_fits_of_one_pair_and_a_missing_pair_are_errors() -> None:
    with pytest.raises(ValueError, match="grpo/clip is fitted twice"):
        Penalty(target=0.5, task="add", source="", fits=[_fit(), _fit()])
    penalty = Penalty(target=0.5, task="add", source="", fits=[_fit(), _fit(loss="rloo")])
    with pytest.raises(
        PenaltyError, match=r"no penalty fit for loss grpo, correction tis .*the file has grpo/clip, rloo/clip$"
    ):
        penalty.fit_for("grpo", "tis")


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
    summary = _summary_of(scenario, Tolerance(), penalty=_fit(steps_at_zero=300.0, per_staleness=0.0))
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
    penalty = Penalty(target=0.5, task="add", source="synthetic", fits=[_fit(), _fit(loss="rloo")])
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
            '{"target": 0.5, "task": "add", "source": "", "fits": [' + _fit(loss="rloo").model_dump_json() + "]}",
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
    cells = _cells(
        [_run("grpo", "clip", s, 100.0 * (1 + 0.25 * s)) for s in (0.0, 1.0, 2.0)]
        + [_run("grpo", "clip", 2.0, 1.0, status="failed")]
    )
    cells.to_csv(tmp_path / "cells.csv", index=False)
    assert main(["penalty", str(tmp_path / "cells.csv")]) == 0
    out = capsys.readouterr().out
    assert "grpo        clip       100                0.25                -       3         0  0.0%" in out
    assert "left out 1 failed run" in out
    penalty = read_penalty(tmp_path / "penalty.json")
    assert penalty.source == str(tmp_path / "cells.csv")
    assert penalty.fit_for("grpo", "clip").steps_at_zero == pytest.approx(100.0)
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
        (201.34, 0.2698, 0.8180), abs=5e-3
    )
    assert (grpo.points, grpo.censored) == (7, 4)
    # made with S0 = 200, a = 0.3, b = 0.8 and 3% noise: the fit lands near them
    assert grpo.steps_at_zero == pytest.approx(200, rel=0.05) and grpo.per_staleness == pytest.approx(0.3, abs=0.05)
