"""Which shape of staleness penalty the runs support: candidate forms, a censored likelihood, leave-one-schedule-out.

    runs (staleness s, dropped d, steps y, reached, schedule) ─► select_form ─► FormChoice (the winner, fitted on
                                                                               all runs, and every form's error)

The forms, each S0 > 0 and every slope ≥ 0, so steps never fall as staleness or drops grow:

    linear        steps = S0 · (1 + a·s + b·d)
    exponential   steps = S0 · exp(a·s + b·d)
    quadratic     steps = S0 · (1 + a·s + c·s² + b·d)

**Likelihood.** log steps = log f(s, d) + ε, ε ~ N(0, σ²): the error is relative, as the spread of steps to
target over seeds is. A run that reached the target at y contributes the normal density of log y, or, where the
study says between which step counts it crossed (``low``: the evaluation before the one it reached at; its
evaluations are ``run.eval_every`` apart, as far apart as the effects fitted), the probability of that interval,
P(log low < log Y ≤ log y) = Φ((log y − log f)/σ) − Φ((log low − log f)/σ) (*interval-censored*); a run that
stopped after y steps without reaching it is *right-censored* (Tobit): it contributes P(log Y ≥ log y) =
Φ((log f − log y)/σ), so it says only that the model's steps should lie above y (a model far below it pays, one
above it pays almost nothing), never that it took y steps. σ ≥ ``SIGMA_MIN`` keeps noise-free data finite. The
parameters (log S0, √a, √c, √b, log(σ − σ_min)) are found by Nelder–Mead from a few starts (``nelder_mead``):
small problems, no derivative needed, and square roots let a slope reach exactly 0.

**Selection.** Each form is fitted with one schedule's runs left out and predicts them (``schedule``: the
study's labels; the staleness value where there are none); its error is the root mean square over every left-out
run of log(predicted / observed) for a run that reached the target, and of the shortfall max(0, log(bound /
predicted)) for one that did not. The form with the smallest error wins, but a form later in ``FORMS`` (the
order of simplicity) must beat the best before it by more than ``SIMPLER_MARGIN`` (5%): quadratic contains linear,
and noise alone would hand it a few ties. A run whose crossing is an interval counts as exact anywhere inside it:
its error is how far outside the interval the prediction falls. A form that cannot be fitted in every fold is not
a candidate: quadratic needs three schedules among the runs that reached the target, the others two. Schedules,
not staleness values: each seed of one schedule measures a slightly different mean staleness, so two schedules'
seeds show ten values, and a quadratic through two schedules is a curve through two points and their noise.
Without two folds the error is unknown and ``linear`` stands.

**KL as covariate.** Where the study logged the learner's ``kl_to_behaviour`` (cells.csv's
``kl_to_behaviour_mean``), the linear form in that KL instead of staleness is scored the same way
(``kl_linear``): whether the policies' distance explains the extra steps better than the steps of staleness.
It is reported, never chosen: a plan knows its staleness, not the KL its run will show.

**The dropped fraction** enters only when the data can tell it from staleness (``dropped_identifiable``): its
range among the runs that reached the target is at least ``MIN_DROPPED_SPREAD``, and the design [1, s, d] with
standardized columns has a condition number at most ``MAX_CONDITION``. A fraction that moves by 0.1–0.3% between
seeds tells nothing, whatever a fit would make of it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from .normal_tails import log_interval_probability, log_normal_cdf

__all__ = [
    "FORMS",
    "Form",
    "FormChoice",
    "FormFit",
    "dropped_identifiable",
    "fit_form",
    "form_steps",
    "nelder_mead",
    "select_form",
]

Form = Literal["linear", "exponential", "quadratic"]
FORMS: tuple[Form, ...] = ("linear", "exponential", "quadratic")  # simplest first: ties go to the earlier
SIGMA_MIN = 1e-3  # the smallest spread of log steps the likelihood allows (0.1%)
MIN_DROPPED_SPREAD = 0.02  # the dropped fraction's range that can show an effect (2 percentage points)
MAX_CONDITION = 30.0  # the standardized design's condition number above which d is not told from s
STARTS = 3  # Nelder–Mead starts per fit
Values = Sequence[float] | np.ndarray  # numbers per run
Flags = Sequence[bool] | np.ndarray
SIMPLER_MARGIN = 0.05  # a later form of FORMS wins only with an error this much (relative) below the best so far


@dataclass(frozen=True)
class FormFit:
    """One form fitted by the censored likelihood."""

    form: Form
    steps_at_zero: float
    per_staleness: float  # a
    per_staleness_squared: float  # c (quadratic; 0 otherwise)
    per_dropped: float | None  # b; None when the dropped fraction is left out
    sigma: float  # spread of log steps
    log_likelihood: float

    def steps(self, staleness: np.ndarray | float, dropped: np.ndarray | float = 0.0) -> np.ndarray:
        return form_steps(
            self.form,
            self.steps_at_zero,
            self.per_staleness,
            self.per_staleness_squared,
            self.per_dropped or 0.0,
            staleness,
            dropped,
        )


@dataclass(frozen=True)
class FormChoice:
    """The winning form fitted on every run, its leave-one-schedule-out error, and every candidate's."""

    fit: FormFit
    error: float | None  # RMS log error of the winner over the left-out schedules; None: fewer than 2 folds
    errors: dict[str, float | None] = field(default_factory=dict)  # by form; None: not a candidate
    folds: int = 0


def form_steps(
    form: str,
    steps_at_zero: float,
    a: float,
    c: float,
    b: float,
    staleness: np.ndarray | float,
    dropped: np.ndarray | float = 0.0,
) -> np.ndarray:
    """Steps to target of ``form`` at staleness and dropped fraction (arrays or numbers)."""
    s, d = np.asarray(staleness, dtype=float), np.asarray(dropped, dtype=float)
    with np.errstate(over="ignore"):  # past the largest float: a target never reached, inf steps
        if form == "exponential":
            return steps_at_zero * np.exp(a * s + b * d)
        return steps_at_zero * (1.0 + a * s + c * s * s + b * d)


def dropped_identifiable(staleness: Values, dropped: Values) -> bool:
    """Whether the dropped fraction varies enough, and apart enough from the staleness, to be fitted."""
    s, d = np.asarray(staleness, dtype=float), np.asarray(dropped, dtype=float)
    if len(d) < 3 or np.ptp(d) < MIN_DROPPED_SPREAD or np.ptp(s) == 0:
        return False
    standardized = np.column_stack([np.ones_like(s), (s - s.mean()) / s.std(), (d - d.mean()) / d.std()])
    return bool(np.linalg.cond(standardized) <= MAX_CONDITION)


# ── the likelihood and its optimizer ────────────────────────────────────────────


def _unpack(form: Form, theta: np.ndarray, with_dropped: bool) -> tuple[float, float, float, float, float]:
    """(S0, a, c, b, σ) from the optimizer's free parameters."""
    values = list(theta)
    log_s0, root_a = values[0], values[1]
    root_c = values[2] if form == "quadratic" else 0.0
    root_b = values[3 if form == "quadratic" else 2] if with_dropped else 0.0
    sigma = SIGMA_MIN + math.exp(min(values[-1], 50.0))
    return math.exp(min(log_s0, 700.0)), root_a**2, root_c**2, root_b**2, sigma


def _negative_log_likelihood(form: Form, theta: np.ndarray, with_dropped: bool, data: tuple[np.ndarray, ...]) -> float:
    s, d, log_y, reached, log_low = data
    s0, a, c, b, sigma = _unpack(form, theta, with_dropped)
    with np.errstate(over="ignore", invalid="ignore"):
        log_f = np.log(form_steps(form, s0, a, c, b, s, d))
    if not np.all(np.isfinite(log_f)):
        return math.inf
    z = (log_y - log_f) / sigma
    exact = reached & np.isnan(log_low)
    interval = reached & ~np.isnan(log_low)
    points = 0.5 * np.sum(z[exact] ** 2) + np.count_nonzero(exact) * math.log(sigma)
    spans = -np.sum(log_interval_probability((log_low[interval] - log_f[interval]) / sigma, z[interval]))
    bounds = -np.sum(log_normal_cdf(-z[~reached]))
    return float(points + spans + bounds)


def nelder_mead(
    call: Callable[[np.ndarray], float],
    start: np.ndarray,
    step: float = 0.5,
    iterations: int = 4000,
    tolerance: float = 1e-12,
) -> tuple[np.ndarray, float]:
    """The minimum of ``call`` (a function of one vector) by the Nelder–Mead simplex, and its value."""
    n = len(start)
    simplex = np.vstack([start, *(start + step * np.eye(n)[i] for i in range(n))])
    values = np.array([call(point) for point in simplex])
    for _ in range(iterations):
        order = np.argsort(values)
        simplex, values = simplex[order], values[order]
        if abs(values[-1] - values[0]) <= tolerance * (abs(values[0]) + tolerance) and np.ptp(simplex, 0).max() < 1e-9:
            break
        centre = simplex[:-1].mean(axis=0)
        reflected = centre + (centre - simplex[-1])
        value = call(reflected)
        if value < values[0]:
            expanded = centre + 2.0 * (centre - simplex[-1])
            expanded_value = call(expanded)
            simplex[-1], values[-1] = (expanded, expanded_value) if expanded_value < value else (reflected, value)
        elif value < values[-2]:
            simplex[-1], values[-1] = reflected, value
        else:
            inside = value >= values[-1]
            contracted = centre + 0.5 * ((simplex[-1] if inside else reflected) - centre)
            contracted_value = call(contracted)
            if contracted_value < min(value, values[-1]):
                simplex[-1], values[-1] = contracted, contracted_value
            else:  # shrink toward the best point
                simplex[1:] = simplex[0] + 0.5 * (simplex[1:] - simplex[0])
                values[1:] = [call(point) for point in simplex[1:]]
    best = int(np.argmin(values))
    return simplex[best], float(values[best])


#: The steepest start of a form's rate, in e-folds of steps per unit of staleness: two runs' log steps a few
#: hundred apart (one that reached the target at its first evaluation, one at its last) would overflow expm1.
MAX_START_RATE = 50.0


def _starts(form: Form, s: np.ndarray, log_y: np.ndarray, reached: np.ndarray, with_dropped: bool) -> list[np.ndarray]:
    """Starting points: S0 at the reached runs' smallest staleness, a from the slope of their log steps."""
    hit_s, hit_y = s[reached], log_y[reached]
    low = hit_y[hit_s == hit_s.min()].mean()
    slope = max(0.0, float(np.polyfit(hit_s, hit_y, 1)[0])) if np.ptp(hit_s) > 0 else 0.0
    extra = [0.0] * ((form == "quadratic") + with_dropped)
    starts = []
    for scale in (1.0, 0.1, 3.0)[:STARTS]:
        rate = min(slope * scale, MAX_START_RATE)
        root_a = math.sqrt(rate if form == "exponential" else math.expm1(rate))
        starts.append(np.array([low, root_a, *extra, math.log(0.1)]))
    return starts


def _log_lows(low: Values | None, steps: np.ndarray) -> np.ndarray:
    """log of each run's lower step bound where it has one above 0 (−inf at 0: the crossing lies in (0, y]),
    NaN where it has none (an exact step count)."""
    if low is None:
        return np.full(len(steps), np.nan)
    lows = np.asarray(low, dtype=float)
    with np.errstate(divide="ignore"):
        return np.where(np.isfinite(lows) & (lows >= 0) & (lows < steps), np.log(np.maximum(lows, 0.0)), np.nan)


def _check_identifiable(form: Form, s: np.ndarray, hit: np.ndarray, groups: np.ndarray | None) -> None:
    """ValueError unless the runs that reached the target span enough schedules (where named) and staleness values
    for ``form``."""
    needed = 3 if form == "quadratic" else 2
    schedules = list(dict.fromkeys(groups[hit].tolist())) if groups is not None else []
    distinct = np.unique(s[hit])
    if groups is not None and len(schedules) < needed:
        seen = ", ".join(schedules) or "none"
        raise ValueError(
            f"the runs that reached the target come from {len(schedules)} schedule{'s' if len(schedules) != 1 else ''}"
            f" ({seen}); need {needed}"
        )
    if len(distinct) < needed:
        seen = ", ".join(f"{value:g}" for value in distinct) or "none"
        raise ValueError(
            f"the runs that reached the target have {len(distinct)} staleness value{'s' if len(distinct) != 1 else ''}"
            f" ({seen}); need {needed}"
        )


def fit_form(
    form: Form,
    staleness: Values,
    dropped: Values,
    steps: Values,
    reached: Flags,
    with_dropped: bool = False,
    groups: Sequence[str] | np.ndarray | None = None,
    low: Values | None = None,
) -> FormFit:
    """``form`` fitted by the censored likelihood (module docstring); ``groups`` names each run's schedule (each
    staleness value its own where None), ``low`` each reached run's lower step bound (None: exact step counts).
    ValueError when the runs that reached the target come from too few schedules for it (2; quadratic 3)."""
    s, d, y = (np.asarray(values, dtype=float) for values in (staleness, dropped, steps))
    hit = np.asarray(reached, dtype=bool)
    _check_identifiable(form, s, hit, np.asarray(list(groups)) if groups is not None else None)
    data = (s, d, np.log(y), hit, _log_lows(low, y))

    def objective(theta: np.ndarray) -> float:
        return _negative_log_likelihood(form, theta, with_dropped, data)

    best, best_value = None, math.inf
    for start in _starts(form, s, np.log(y), hit, with_dropped):
        theta, value = nelder_mead(objective, start)
        theta, value = nelder_mead(objective, theta, step=0.05)  # a restart where it stopped: no false convergence
        if value < best_value:
            best, best_value = theta, value
    assert best is not None
    s0, a, c, b, sigma = _unpack(form, best, with_dropped)
    return FormFit(form, s0, a, c, b if with_dropped else None, sigma, -best_value)


# ── selection ───────────────────────────────────────────────────────────────────


def _fold_error(
    fit: FormFit, s: np.ndarray, d: np.ndarray, y: np.ndarray, hit: np.ndarray, log_low: np.ndarray
) -> np.ndarray:
    """Per left-out run: log(predicted/observed) where it reached the target (0 inside its interval, the distance
    to the interval outside it), the shortfall below its bound where it did not."""
    log_predicted = np.log(fit.steps(s, d))
    log_ratio = log_predicted - np.log(y)
    outside = np.maximum(0.0, log_ratio) + np.minimum(0.0, log_predicted - log_low)  # 0 inside (low, y]
    reached = np.where(np.isnan(log_low), log_ratio, outside)
    return np.where(hit, reached, np.maximum(0.0, -log_ratio))


def select_form(
    staleness: Values,
    dropped: Values,
    steps: Values,
    reached: Flags,
    schedules: Sequence[str] | None = None,
    kl_to_behaviour: Values | None = None,
    low: Values | None = None,
) -> FormChoice:
    """The form with the smallest leave-one-schedule-out error, fitted on every run (module docstring).

    With ``kl_to_behaviour`` (each run's mean k3 KL of the learner to the behaviour policy) the linear form in that
    covariate instead of staleness is scored too, as ``kl_linear`` in ``errors``: a comparison only, since a plan
    knows its staleness but not its KL. ``low``: each reached run's lower step bound (interval-censored; None:
    exact). ValueError when no form can be fitted (the runs that reached the target come from one schedule)."""
    s, d, y = (np.asarray(values, dtype=float) for values in (staleness, dropped, steps))
    hit = np.asarray(reached, dtype=bool)
    groups = np.asarray(list(schedules) if schedules is not None else [f"{value:g}" for value in s])
    lows = np.full(len(y), np.nan) if low is None else np.asarray(low, dtype=float)
    runs = _Runs(d, y, hit, groups, lows, schedules is not None)
    with_dropped = dropped_identifiable(s[hit], d[hit])
    errors: dict[str, float | None] = {}
    folds = 0
    for form in FORMS:
        errors[form], used = _held_out_error(form, s, runs, with_dropped)
        folds = max(folds, used)
    if kl_to_behaviour is not None:
        kl = np.asarray(kl_to_behaviour, dtype=float)
        if np.all(np.isfinite(kl)):
            errors["kl_linear"] = _held_out_error("linear", kl, runs, with_dropped)[0]
    winner = _winner(errors)
    try:
        final = fit_form(winner, s, d, y, hit, with_dropped, schedules, lows)
    except ValueError:
        winner, final = "linear", fit_form("linear", s, d, y, hit, with_dropped, schedules, lows)
    return FormChoice(final, errors.get(winner), errors, folds if errors.get(winner) is not None else 0)


@dataclass(frozen=True)
class _Runs:
    """The runs' figures a fold splits, beside the covariate: dropped fraction, steps, reached, schedule, low."""

    dropped: np.ndarray
    steps: np.ndarray
    reached: np.ndarray
    groups: np.ndarray
    low: np.ndarray
    named: bool  # the groups are the study's schedules (else staleness values)


def _held_out_error(form: Form, x: np.ndarray, runs: _Runs, with_dropped: bool) -> tuple[float | None, int]:
    """RMS error of ``form`` in covariate ``x`` over each schedule left out in turn, and the folds it took;
    None when it cannot be fitted in some fold or fewer than two folds exist."""
    d, y, hit, groups, low = runs.dropped, runs.steps, runs.reached, runs.groups, runs.low
    residuals: list[np.ndarray] = []
    try:
        for group in dict.fromkeys(groups.tolist()):
            out = groups == group
            if len(np.unique(groups[~out & hit])) < 2 or len(np.unique(x[~out & hit])) < 2:
                continue  # no fold for any form: too few schedules left
            kept = groups[~out] if runs.named else None
            fit = fit_form(form, x[~out], d[~out], y[~out], hit[~out], with_dropped, kept, low[~out])
            residuals.append(_fold_error(fit, x[out], d[out], y[out], hit[out], _log_lows(low[out], y[out])))
    except ValueError:  # this form cannot be fitted in some fold: not a candidate
        return None, 0
    if len(residuals) < 2:
        return None, len(residuals)
    joined = np.concatenate(residuals)
    return float(np.sqrt(np.mean(joined**2))), len(residuals)


def _winner(errors: dict[str, float | None]) -> Form:
    """The simplest candidate unless a later form's error is more than ``SIMPLER_MARGIN`` below the best so far."""
    winner: Form = "linear"
    best: float | None = None
    for form in FORMS:  # kl_linear, where scored, is never a candidate
        error = errors.get(form)
        if error is not None and (best is None or error < best * (1.0 - SIMPLER_MARGIN)):
            winner, best = form, error
    return winner
