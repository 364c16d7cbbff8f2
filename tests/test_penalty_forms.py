"""The penalty's form chosen by leave-one-schedule-out error, fitted by a censored likelihood
(scenarios/staleness/penalty_forms.py), on synthetic study tables whose true penalty is known."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from asyncrl.analysis.fits.penalty import fit_penalty
from asyncrl.scenarios.staleness.penalty_forms import dropped_identifiable, fit_form, form_steps, select_form

STALENESS = [0.0, 1.0, 2.0, 4.0, 8.0]
SEEDS = 5
CAP = 200.0  # steps run: a run whose steps to target exceed it stops there, unfinished (censored)


def synthetic(form: str, a: float, c: float = 0.0, noise: float = 0.03, seed: int = 0):
    """Five seeds at each staleness, steps = the form's × exp(3% noise), censored at CAP; labels per staleness."""
    rng = np.random.default_rng(seed)
    s = np.repeat(STALENESS, SEEDS)
    steps = form_steps(form, 100.0, a, c, 0.0, s) * np.exp(noise * rng.standard_normal(len(s)))
    reached = steps <= CAP
    labels = [f"streaming-{value:g}" if value else "sync" for value in s]
    return s, np.zeros_like(s), np.where(reached, steps, CAP), reached, labels


@pytest.mark.parametrize(
    ("form", "a", "c"),
    [("exponential", 0.1, 0.0), ("quadratic", 0.02, 0.02)],
)
def test_selection_picks_the_true_form_and_recovers_it_through_censoring(form: str, a: float, c: float) -> None:
    # exponential: 100·e^0.8 = 222 > 200 at s = 8; quadratic: 100·(1 + 0.16 + 1.28) = 244: the runs at s = 8
    # mostly stop unfinished, yet the likelihood's lower bounds keep the curve above them.
    s, d, steps, reached, labels = synthetic(form, a, c)
    assert (~reached).sum() >= 3
    choice = select_form(s, d, steps, reached, labels)
    assert choice.fit.form == form and choice.folds == 5
    assert choice.error is not None and choice.error < 0.05  # about the 3% noise
    others = [error for name, error in choice.errors.items() if name != form and error is not None]
    assert all(error > choice.error for error in others)
    fitted = choice.fit
    assert fitted.steps_at_zero == pytest.approx(100.0, rel=0.03)
    assert float(fitted.steps(8.0)) == pytest.approx(float(form_steps(form, 100.0, a, c, 0.0, 8.0)), rel=0.06)
    if form == "exponential":
        assert fitted.per_staleness == pytest.approx(a, abs=0.01)


def test_a_linear_penalty_stays_linear() -> None:
    s, d, steps, reached, labels = synthetic("linear", 0.1)
    choice = select_form(s, d, steps, reached, labels)
    assert choice.fit.form == "linear"
    assert (choice.fit.steps_at_zero, choice.fit.per_staleness) == (
        pytest.approx(100.0, rel=0.03),
        pytest.approx(0.1, abs=0.01),
    )


def test_censored_runs_are_bounds_not_their_length() -> None:
    # Reached: 100 at s = 0, 110 at s = 1 and 120 at s = 2 (a = 0.1). One run at s = 8 stopped after 150 steps:
    # the line predicts 180, above the bound, so a likelihood hardly moves, where counting the run as taking
    # 150 steps would drag the slope down.
    fit = fit_form("linear", [0, 1, 2, 8], [0, 0, 0, 0], [100, 110, 120, 150], [True, True, True, False])
    assert (fit.steps_at_zero, fit.per_staleness) == (pytest.approx(100.0, rel=1e-3), pytest.approx(0.1, rel=1e-2))
    as_length = fit_form("linear", [0, 1, 2, 8], [0, 0, 0, 0], [100, 110, 120, 150], [True] * 4)
    assert as_length.per_staleness < 0.07


def test_a_schedule_whose_curve_equals_sync_s_gets_no_penalty() -> None:
    # Steps to target on the evaluation reward the same at every staleness (3% noise): no penalty to fit.
    s, _, steps, reached, labels = synthetic("linear", 0.0)
    cells = pd.DataFrame(
        {
            "loss": "grpo",
            "correction": "clip",
            "status": "complete",
            "reached": reached,
            "steps": CAP,
            "steps_to_target": steps,
            "staleness_mean": s,
            "dropped_fraction": 0.0,
            "target": 0.5,
            "task": "sort",
            "schedule": labels,
        }
    )
    (fit,) = fit_penalty(cells).fits
    assert fit.steps(8.0) == pytest.approx(fit.steps_at_zero, rel=0.02)  # no extra steps at 8 steps stale
    assert fit.form_error is not None and fit.form_error < 0.05
    assert fit.steps_at_zero == pytest.approx(100.0, rel=0.03)


@pytest.mark.slow
def test_the_dropped_fraction_needs_spread_and_a_well_conditioned_design() -> None:
    s = [0.0, 1.0, 2.0, 4.0, 8.0, 0.0, 2.0, 8.0]
    # A fraction that varies by 0.1-0.3% between runs tells nothing (the b = 14.5 came from that).
    assert not dropped_identifiable(s, [0.001, 0.002, 0.003, 0.001, 0.002, 0.003, 0.001, 0.002])
    assert not dropped_identifiable(s, [value / 40 for value in s])  # moves with the staleness: cannot be told apart
    assert dropped_identifiable(s, [0.0, 0.1, 0.0, 0.2, 0.1, 0.3, 0.0, 0.2])
    tiny = [0.001, 0.002, 0.003, 0.001, 0.002, 0.003, 0.001, 0.002]
    steps = [100.0 * (1 + 0.1 * si) * (1 + 5 * di) for si, di in zip(s, tiny, strict=True)]  # 0.5-1.5% "effect"
    choice = select_form(s, tiny, steps, [True] * 8)
    assert choice.fit.per_dropped is None and math.isclose(choice.fit.per_staleness, 0.1, rel_tol=0.05)
    spread = [0.0, 0.1, 0.0, 0.2, 0.1, 0.3, 0.0, 0.2]
    steps = [100.0 * (1 + 0.1 * si + 0.5 * di) for si, di in zip(s, spread, strict=True)]
    assert select_form(s, spread, steps, [True] * 8).fit.per_dropped == pytest.approx(0.5, rel=0.01)


@pytest.mark.slow
def test_kl_to_behaviour_is_scored_as_a_covariate_but_never_chosen() -> None:
    # Steps follow each run's KL to the behaviour policy exactly (100·(1 + 10·kl)); the KL varies between seeds
    # at one staleness, so staleness explains the steps only roughly. kl_linear scores better; linear still wins.
    rng = np.random.default_rng(3)
    s = np.repeat(STALENESS, SEEDS)
    kl = 0.01 * s * rng.uniform(0.5, 1.5, len(s))
    steps = 100.0 * (1 + 10 * kl)
    labels = [f"s{value:g}" for value in s]
    choice = select_form(s, np.zeros_like(s), steps, [True] * len(s), labels, kl_to_behaviour=kl)
    assert choice.errors["kl_linear"] is not None and choice.errors["kl_linear"] < 0.01
    assert choice.errors["kl_linear"] < choice.errors["linear"]
    assert choice.fit.form in ("linear", "exponential", "quadratic")
