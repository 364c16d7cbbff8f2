"""The staleness penalty: its fit to a study's runs (by hand, through noise, on any penalty; censored runs),
the study table it is fitted from, and its file (the time to target it predicts: tests/test_time_to_target.py).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from asyncrl.analysis.fits.penalty import failed_runs, fit_penalty
from asyncrl.scenarios.staleness.penalty import (
    Penalty,
    PenaltyError,
    PenaltyFit,
    fit_steps,
    read_penalty,
    write_penalty,
)
from hypothesis import assume, given, settings
from hypothesis import strategies as st

GRID_S = [0.0, 0.5, 1.0, 2.0, 3.0]
GRID_D = [0.0, 0.1, 0.3]


def fit_of(steps_at_zero: float = 100.0, per_staleness: float = 0.25, per_dropped: float | None = None, **fields):
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
    model = fit_of(fit.steps_at_zero, fit.per_staleness, fit.per_dropped)
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
    fit = fit_of(s0, a, b)
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
    model = fit_of(fit.steps_at_zero, fit.per_staleness)
    gaps = [steps_i - model.steps(s_i) for s_i, steps_i in zip(s, steps, strict=True)]
    return sum(gap**2 if hit else max(0.0, gap) ** 2 for gap, hit in zip(gaps, reached, strict=True))


@settings(max_examples=40, deadline=None)
@given(shares=st.lists(st.floats(0.01, 1), min_size=1, max_size=5), seed=st.integers(0, 2**16))
def test_bounds_the_fit_already_meets_change_nothing(shares: list[float], seed: int) -> None:
    alone = fit_steps(POINTS_S, [0.0] * 4, POINTS, [True] * 4)
    at = list(np.random.default_rng(seed).uniform(0, 6, len(shares)))
    bounds = [
        fit_of(alone.steps_at_zero, alone.per_staleness).steps(s) * share for s, share in zip(at, shares, strict=True)
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
        nudged = fit_of(
            fit.steps_at_zero * (1 + rng.normal(0, 0.01)), max(0.0, fit.per_staleness + rng.normal(0, 0.01))
        )
        assert best <= _censored_cost(nudged, s, steps, reached) * (1 + 1e-9) + 1e-9


def test_one_staleness_value_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"have 1 staleness value \(1\); need 2"):
        fit_steps([1, 1, 2], [0, 0, 0], [100, 110, 300], [True, True, False])


# ── the study table ─────────────────────────────────────────────────────────────


def cells_of(rows: list[dict]) -> pd.DataFrame:
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


def run_of(loss: str, correction: str, staleness: float, to_target: float | None, **fields) -> dict:
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
    cells = cells_of(
        [
            run_of("grpo", "clip", 0.0, 100.0),
            run_of("grpo", "clip", 1.0, 125.0),
            run_of("grpo", "clip", 2.0, 150.0),
            run_of("grpo", "clip", 3.0, None, steps=160),  # below the line's 175: changes nothing
            run_of("grpo", "clip", 2.0, 10.0, status="failed"),  # would spoil the fit if it counted
            run_of("rloo", "tis", 0.0, 80.0),
            run_of("rloo", "tis", 2.0, 96.0),
        ]
    )
    penalty = fit_penalty(cells, source="cells.csv")
    assert (penalty.target, penalty.task, penalty.source) == (0.5, "add", "cells.csv")
    grpo, rloo = penalty.fits
    assert (grpo.pair, grpo.points, grpo.censored) == ("grpo/clip", 3, 1)
    assert (grpo.steps_at_zero, grpo.per_staleness, grpo.per_dropped) == pytest.approx((100.0, 0.25, None))
    assert (rloo.pair, rloo.steps_at_zero, rloo.per_staleness) == ("rloo/tis", pytest.approx(80.0), pytest.approx(0.1))


def test_an_older_table_s_ok_is_complete_and_interrupted_runs_are_left_out() -> None:
    cells = cells_of(
        [
            run_of("grpo", "clip", 0.0, 100.0, status="ok"),  # cells.csv before the statuses were the runs' words
            run_of("grpo", "clip", 2.0, 150.0, status=" ok"),
            run_of("grpo", "clip", 1.0, 10.0, status="interrupted"),
            run_of("grpo", "clip", 1.0, 10.0, status="failed"),
        ]
    )
    (fit,) = fit_penalty(cells).fits
    assert (fit.points, fit.steps_at_zero, fit.per_staleness) == (2, pytest.approx(100.0), pytest.approx(0.25))
    assert failed_runs(cells) == 2


def test_a_pair_reached_at_one_staleness_is_an_error_naming_it() -> None:
    cells = cells_of([run_of("grpo", "clip", 0.0, 100.0), run_of("grpo", "clip", 2.0, None)])
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
    rows = [run_of("grpo", "clip", 0.0, 100.0) | change.get("row", {}), run_of("grpo", "clip", 1.0, 120.0)]
    cells = cells_of(rows).drop(columns=[change["drop"]] if "drop" in change else [])
    with pytest.raises(PenaltyError) as error:
        fit_penalty(cells)
    assert str(error.value).endswith(message)


# ── the file ────────────────────────────────────────────────────────────────────


def test_the_penalty_file_round_trips(tmp_path: Path) -> None:
    penalty = Penalty(
        target=0.5, task="add", source="cells.csv", fits=[fit_of(), fit_of(correction="tis", per_dropped=0.5)]
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
        "form": "linear",
        "per_staleness_squared": 0.0,
        "form_error": None,
        "form_errors": {},
        "reach_limit": None,
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
        Penalty(target=0.5, task="add", source="", fits=[fit_of(), fit_of()])
    penalty = Penalty(target=0.5, task="add", source="", fits=[fit_of(), fit_of(loss="rloo")])
    with pytest.raises(
        PenaltyError, match=r"no penalty fit for loss grpo, correction tis .*the file has grpo/clip, rloo/clip$"
    ):
        penalty.fit_for("grpo", "tis")


@pytest.mark.parametrize("form", ["linear", "quadratic"])
def test_log_steps_hundreds_of_e_folds_apart_start_the_fit_without_overflow(form: str) -> None:
    """Two schedules whose steps differ by e^600 (``cpu-study --target 0.2`` once made such a table): the fit's
    starting rate is capped, so the fit runs instead of raising OverflowError in math.expm1."""
    from asyncrl.scenarios.staleness.penalty_forms import fit_form

    staleness = [0.0, 0.0, 1.0, 1.0, 2.0, 2.0]
    fit = fit_form(form, staleness, [0.0] * 6, [1.0, 1.0, 1e261, 1e261, 1e261, 1e261], [True] * 6)  # type: ignore[arg-type]
    assert np.isfinite(fit.log_likelihood) and fit.per_staleness >= 0 and np.isfinite(fit.steps_at_zero)


def test_two_schedules_of_many_seeds_do_not_make_a_quadratic() -> None:
    # Each seed measures its own mean staleness (1.97, 1.98, ...): two schedules show ten values, yet a curve through
    # them is a curve through two points. Counted by schedule, the quadratic is not a candidate (it needs three).
    from asyncrl.scenarios.staleness.penalty_forms import fit_form, select_form

    s = [0.0] * 5 + [1.96, 1.97, 1.98, 1.99, 2.0]
    steps = [80, 84, 78, 82, 81, 90, 95, 88, 92, 91]
    schedules = ["sync"] * 5 + ["streaming-2"] * 5
    choice = select_form(s, [0.0] * 10, steps, [True] * 10, schedules)
    assert choice.errors["quadratic"] is None and choice.fit.form != "quadratic"
    with pytest.raises(ValueError, match=r"come from 2 schedules \(sync, streaming-2\); need 3$"):
        fit_form("quadratic", s, [0.0] * 10, steps, [True] * 10, groups=schedules)


def test_an_interval_censored_reach_is_fitted_inside_its_interval() -> None:
    # Every run crossed the target between its evaluations at 70 and 80 steps, at staleness 0 and 1. Read as exact,
    # S0 is 80 (the evaluation that saw it); as the interval it is, the fit's S0 lies inside (70, 80].
    from asyncrl.scenarios.staleness.normal_tails import log_interval_probability
    from asyncrl.scenarios.staleness.penalty_forms import fit_form

    s, steps, low = [0.0, 0.0, 1.0, 1.0], [80.0] * 4, [70.0] * 4
    exact = fit_form("linear", s, [0.0] * 4, steps, [True] * 4)
    interval = fit_form("linear", s, [0.0] * 4, steps, [True] * 4, low=low)
    assert exact.steps_at_zero == pytest.approx(80.0, rel=1e-3)
    assert 70.0 < interval.steps_at_zero <= 80.0 and interval.steps_at_zero < exact.steps_at_zero - 1
    # log(Φ(b) − Φ(a)), both tails, against the difference written out: Φ(1) − Φ(−1) = 0.682689, Q(5) − Q(6).
    values = log_interval_probability(np.array([-1.0, 5.0]), np.array([1.0, 6.0]))
    assert values[0] == pytest.approx(math.log(0.6826894921), rel=1e-9)
    assert values[1] == pytest.approx(math.log(2.8665157e-7 - 9.8658765e-10), rel=1e-6)


def test_no_time_to_target_past_the_last_staleness_where_most_seeds_reached() -> None:
    # sync 3/3 and streaming-4 2/3 reached the target; streaming-8 0/3. A staleness past streaming-4's (4.0) by more
    # than 10% gets no prediction, where the censored fit alone would give streaming-8 a finite one.
    from asyncrl.analysis.fits.penalty import fit_penalty
    from asyncrl.scenarios.staleness.penalty import predict_time_to_target

    rows = [
        *(run_of("grpo", "clip", 0.0, v, schedule="sync") for v in (80.0, 84.0, 82.0)),
        *(run_of("grpo", "clip", 4.0, v, schedule="streaming-4") for v in (100.0, 104.0, None)),
        *(run_of("grpo", "clip", 8.0, None, schedule="streaming-8") for _ in range(3)),
    ]
    fit = fit_penalty(cells_of(rows)).fit_for("grpo", "clip")
    assert fit.reach_limit == pytest.approx(4.0)
    refused = predict_time_to_target(fit, 7.9, 0.0, [1.0] * 10, 1.0)
    assert refused.refused and math.isinf(refused.time_s) and "past 4.00" in refused.refused
    assert predict_time_to_target(fit, 4.3, 0.0, [1.0] * 10, 1.0).refused is None  # within the 10% margin
    mostly = fit_penalty(cells_of(rows[:6])).fit_for("grpo", "clip")
    assert mostly.reach_limit is None  # no schedule mostly failed: nothing to refuse
