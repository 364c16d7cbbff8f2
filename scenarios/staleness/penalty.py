"""The staleness penalty: how many learner steps a run needs to reach a target reward, given how stale its
samples are and how many it drops; the file ``asyncrl penalty`` writes and the simulator reads.

    study table (executor runs) ─► fit_steps per (loss, correction) ─► Penalty ─► penalty.json
    penalty.json ─► read_penalty ─► fit_for(loss, correction) ─► steps(s, d) ─► time_at_step ─► time to target

The model, one per (loss, correction), in the form the runs support (``scenarios.staleness.penalty_forms``: linear,
exponential or quadratic in staleness, chosen by leave-one-schedule-out error, fitted by a censored likelihood):

    linear        steps(s, d) = S0 · (1 + a·s + b·d)        S0 > 0,  a, b, c ≥ 0
    exponential   steps(s, d) = S0 · exp(a·s + b·d)
    quadratic     steps(s, d) = S0 · (1 + a·s + c·s² + b·d)

``fit_steps`` below is the linear form by least squares, the model before the forms (kept for its callers).

``s`` is the token-weighted mean staleness of the trained samples (steps), ``d`` the fraction of the generated
samples that were dropped; ``S0`` is the steps to target on-policy with nothing dropped. It is linear in
(S0, S0·a, S0·b), so least squares fits it exactly; it is monotone (staleness and drops never make a run reach
the target sooner: a fit whose slope comes out negative is refitted with that slope at 0), and it extrapolates
as a straight line, never below S0. ``b`` is fitted only when the dropped fraction varies, and apart from the
staleness, among the runs that reached the target (``penalty_forms.dropped_identifiable``: its spread and the
design's conditioning); otherwise it is None and ``steps`` ignores ``d``.

A run that ended at its last step without reaching the target is *censored*: it says only that
``steps(s, d) ≥ steps run``. Such a run is a lower bound, not a point: it adds the squared shortfall
``max(0, steps run − steps(s, d))²`` to the least-squares sum, so it pushes the fit up where the model says it
should have reached the target already, and never pulls it down. The fit minimizes that convex sum by
majorization (each round replaces every bound by the larger of it and the current prediction, and refits),
then solves once more on the bounds still binding, which makes the minimum exact.

The file (JSON)::

    {"target": 0.5, "task": "add", "source": "runs/study/cells.csv",
     "fits": [{"loss": "grpo", "correction": "clip", "steps_at_zero": 100.0, "per_staleness": 0.25,
               "per_dropped": 0.5, "points": 12, "censored": 1, "residual_rel": 0.04}]}

``points`` counts the runs that reached the target, ``censored`` those that did not, and ``residual_rel``
is the root mean square of (fitted − observed) / observed over the points; ``form`` names the winning form,
``form_error`` its leave-one-schedule-out error (RMS of log(predicted/observed), null with fewer than two
schedules to leave out) and ``form_errors`` every candidate's. A file without ``form`` is linear.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import numpy as np
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from ..files.limits import NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt
from ..files.textfile import dumps, parse_json, read_text
from ..spec.loading import ScenarioError, describe_validation_error
from .penalty_forms import Form, dropped_identifiable, form_steps

MAX_PENALTY_FILE_BYTES = 1 << 20
MAX_ROUNDS = 10_000  # majorization rounds of a censored fit (it converges in far fewer)
TOLERANCE = 1e-12  # relative change of the coefficients that ends the rounds


class PenaltyError(ScenarioError):
    """A penalty file or study table that cannot be used; the command line prints it as one line."""


# ── the file ────────────────────────────────────────────────────────────────────


class PenaltyFit(BaseModel):
    """``steps(s, d) = steps_at_zero · (1 + per_staleness·s + per_dropped·d)`` for one (loss, correction)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    loss: str = Field(min_length=1, description="algorithm.loss of the runs fitted")
    correction: str = Field(min_length=1, description="algorithm.correction of the runs fitted")
    steps_at_zero: PositiveFloat = Field(description="S0: steps to target on-policy, nothing dropped (steps)")
    per_staleness: NonNegativeFloat = Field(
        description="a: relative extra steps per step of mean staleness (exponential: the rate in the exponent)"
    )
    per_dropped: NonNegativeFloat | None = Field(
        description="b: relative extra steps per unit of dropped fraction; null when the runs could not tell it"
    )
    points: PositiveInt = Field(description="runs that reached the target (fitted as points)")
    censored: NonNegativeInt = Field(description="runs that did not reach it (fitted as lower bounds)")
    residual_rel: NonNegativeFloat = Field(description="RMS of (fitted − observed) / observed over the points")
    form: Form = Field("linear", description="the form of the penalty in staleness the runs supported")
    per_staleness_squared: NonNegativeFloat = Field(0.0, description="c: the quadratic form's s² coefficient")
    form_error: NonNegativeFloat | None = Field(
        None,
        description="the form's leave-one-schedule-out error, RMS of log(predicted/observed); null: too few "
        "schedules to leave one out",
    )
    form_errors: dict[str, NonNegativeFloat | None] = Field(
        default_factory=dict, description="every candidate form's leave-one-schedule-out error (null: not fitted)"
    )
    reach_limit: NonNegativeFloat | None = Field(
        None,
        description="the highest mean staleness of a schedule where most seeds reached the target, where a schedule "
        "of higher staleness saw most seeds not reach it: past it (by more than REACH_MARGIN) no time to target is "
        "predicted, for the fit's 'reaches later' cannot tell 'never reaches'; null: no schedule mostly failed",
    )

    @property
    def pair(self) -> str:
        return f"{self.loss}/{self.correction}"

    def steps(self, staleness: float, dropped: float = 0.0) -> float:
        """Learner steps to the target at mean staleness ``staleness`` (steps) and dropped fraction ``dropped``."""
        values = form_steps(
            self.form,
            self.steps_at_zero,
            self.per_staleness,
            self.per_staleness_squared,
            self.per_dropped or 0.0,
            staleness,
            dropped,
        )
        return float(values)


class Penalty(BaseModel):
    """A penalty file: one fit per (loss, correction), all to the same target reward on the same task."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    target: float = Field(description="the reward the runs had to reach")
    task: str = Field(description="the task the runs learned")
    source: str = Field(description="the study table the fits come from")
    fits: list[PenaltyFit] = Field(min_length=1)

    @model_validator(mode="after")
    def _one_fit_per_pair(self) -> Penalty:
        pairs = [fit.pair for fit in self.fits]
        repeated = next((pair for pair in pairs if pairs.count(pair) > 1), None)
        if repeated:
            raise ValueError(f"fits: {repeated} is fitted twice")
        return self

    def fit_for(self, loss: str, correction: str) -> PenaltyFit:
        """The fit for this (loss, correction); a PenaltyError listing the pairs the file has if there is none."""
        for fit in self.fits:
            if (fit.loss, fit.correction) == (loss, correction):
                return fit
        pairs = ", ".join(fit.pair for fit in self.fits)
        raise PenaltyError(
            f"no penalty fit for loss {loss}, correction {correction} (algorithm.loss, algorithm.correction); "
            f"the file has {pairs}"
        )


def write_penalty(penalty: Penalty, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    from ..files.writing import write_text

    write_text(path, dumps(penalty.model_dump(mode="json"), indent=2) + "\n")
    return path


def read_penalty(path: Path) -> Penalty:
    """A penalty file; PenaltyError (one line, naming the file and the field) if it is missing or malformed."""
    try:
        data = parse_json(read_text(path, MAX_PENALTY_FILE_BYTES, "a penalty file"), path)
    except json.JSONDecodeError as exc:
        raise PenaltyError(f"{path}:{exc.lineno}:{exc.colno}: not valid JSON: {exc.msg}") from None
    except ValueError as exc:
        raise PenaltyError(str(exc)) from None
    try:
        return Penalty.model_validate(data)
    except ValidationError as exc:
        raise PenaltyError(f"{path}: {describe_validation_error(exc)}") from None


# ── the fit ─────────────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class StepsFit:
    """What ``fit_steps`` found: the model's three numbers and how well it fits the points."""

    steps_at_zero: float
    per_staleness: float
    per_dropped: float | None  # None: not fitted (the dropped fraction did not vary on its own)
    residual_rel: float


def fit_steps(
    staleness: Sequence[float], dropped: Sequence[float], steps: Sequence[float], reached: Sequence[bool]
) -> StepsFit:
    """Fit ``steps(s, d)`` to runs: ``steps[i]`` is run i's steps to target where ``reached[i]``, else the steps it
    ran without reaching it (a lower bound). ValueError when the reached runs have fewer than 2 staleness values."""
    s, d, y = (np.asarray(values, dtype=np.float64) for values in (staleness, dropped, steps))
    hit = np.asarray(reached, dtype=bool)
    distinct = np.unique(s[hit])
    if len(distinct) < 2:
        seen = ", ".join(f"{value:g}" for value in distinct) or "none"
        raise ValueError(f"the runs that reached the target have {len(distinct)} staleness value ({seen}); need 2")
    design = np.column_stack([np.ones_like(s), s, d])
    with_dropped = dropped_identifiable(s[hit], d[hit])
    if not with_dropped:
        design = design[:, :2]
    coef = _censored_least_squares(design[hit], y[hit], design[~hit], y[~hit])
    if coef[0] <= 0:
        raise ValueError(f"the fit puts the steps at zero staleness at {coef[0]:.3g}; the runs do not fit the model")
    fitted = design[hit] @ coef
    residual = float(np.sqrt(np.mean(((fitted - y[hit]) / y[hit]) ** 2)))
    per_dropped = float(coef[2] / coef[0]) if with_dropped else None
    return StepsFit(float(coef[0]), float(coef[1] / coef[0]), per_dropped, residual)


def _censored_least_squares(
    points: np.ndarray, values: np.ndarray, bounded: np.ndarray, bounds: np.ndarray
) -> np.ndarray:
    """Coefficients (intercept first, slopes ≥ 0) minimizing Σ (value − fit)² + Σ max(0, bound − fit)²."""
    coef = _slopes_non_negative(points, values)
    if len(bounds) == 0:
        return coef
    design = np.vstack([points, bounded])
    for _ in range(MAX_ROUNDS):  # majorize: a bound the fit already exceeds becomes the fit itself
        refit = _slopes_non_negative(design, np.concatenate([values, np.maximum(bounds, bounded @ coef)]))
        done = np.allclose(refit, coef, rtol=TOLERANCE, atol=TOLERANCE * np.abs(coef).max())
        coef = refit
        if done:
            break
    binding = bounds > bounded @ coef
    exact = _slopes_non_negative(np.vstack([points, bounded[binding]]), np.concatenate([values, bounds[binding]]))
    costs = [_censored_cost(candidate, points, values, bounded, bounds) for candidate in (exact, coef)]
    return exact if costs[0] <= costs[1] else coef


def _censored_cost(
    coef: np.ndarray, points: np.ndarray, values: np.ndarray, bounded: np.ndarray, bounds: np.ndarray
) -> float:
    shortfall = np.maximum(0.0, bounds - bounded @ coef)
    return float(np.sum((values - points @ coef) ** 2) + np.sum(shortfall**2))


def _slopes_non_negative(design: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Least squares with every coefficient but the intercept ≥ 0: the best of the fits that leave some slopes
    at 0 and fit the others freely, among those whose free slopes come out ≥ 0 (exact for so few slopes)."""
    slopes = range(1, design.shape[1])
    best, best_cost = np.zeros(design.shape[1]), np.inf
    for count in range(len(slopes) + 1):
        for free in itertools.combinations(slopes, count):
            columns = [0, *free]
            coef = np.zeros(design.shape[1])
            coef[columns] = np.linalg.lstsq(design[:, columns], values, rcond=None)[0]
            if (coef[1:] < 0).any():
                continue
            cost = float(np.sum((values - design @ coef) ** 2))
            if cost < best_cost:
                best, best_cost = coef, cost
    return best


# ── time to target ──────────────────────────────────────────────────────────────


def time_at_step(step_ends: Sequence[float] | np.ndarray, steps: float, steady_step_s: float) -> float:
    """Wall time (s) at which ``steps`` learner steps have finished: ``step_ends[i]`` is when step i + 1 ended;
    a fraction of a step is that fraction of its time; past the last step, each step takes ``steady_step_s``."""
    ends = np.concatenate([[0.0], np.asarray(step_ends, dtype=np.float64)])
    done = len(ends) - 1
    if steps <= done:
        return float(np.interp(steps, np.arange(done + 1), ends))
    return float(ends[-1] + (steps - done) * steady_step_s)


#: A figure that is infinite when the target is never reached: written as JSON's null, read back as infinity.
Never = Annotated[float, BeforeValidator(lambda value: math.inf if value is None else value)]


class TimeToTarget(BaseModel):
    """A run's predicted time to the target: the fit's steps at the run's staleness and dropped fraction, and
    the wall time at which that many steps have finished (``summary.json``'s ``time_to_target``)."""

    model_config = ConfigDict(frozen=True)

    time_s: Never = Field(description="wall time when the target is reached; null in JSON when never (s)")
    steps: Never = Field(description="learner steps to the target; null in JSON when never (steps)")
    staleness: float = Field(description="the run's token-weighted mean staleness (steps)")
    dropped_fraction: float = Field(description="dropped / generated samples (fraction)")
    extrapolated: bool = Field(
        description="the target lies past the steps simulated: those past them took the steady step time"
    )
    steady_step_s: float = Field(description="the steady step time (s)")
    as_written_vs_this: float | None = Field(
        default=None,
        description="sweeps only: this run's time to target over the scenario as written's (the first variant's)",
    )
    refused: str | None = Field(
        default=None,
        description="why no time is predicted (the run's staleness is past the fit's reach_limit); time_s and steps "
        "are then null",
    )


#: How far past a fit's ``reach_limit`` a run's staleness may lie and still be predicted (relative): the seeds of one
#: schedule measure mean staleness a few percent apart, and a simulation of it lands among them.
REACH_MARGIN = 0.1


def predict_time_to_target(
    fit: PenaltyFit,
    staleness: float,
    dropped_fraction: float,
    step_ends: Sequence[float] | np.ndarray,
    steady_step_s: float,
) -> TimeToTarget:
    """Steps to target from the fit, then the wall time at which the run has finished them; none (``refused``) past
    the fit's ``reach_limit``."""
    refused = _past_reach(fit, staleness)
    steps = math.inf if refused else fit.steps(staleness, dropped_fraction)
    return TimeToTarget(
        time_s=math.inf if refused else time_at_step(step_ends, steps, steady_step_s),
        steps=steps,
        staleness=staleness,
        dropped_fraction=dropped_fraction,
        extrapolated=not refused and steps > len(step_ends),
        steady_step_s=steady_step_s,
        refused=refused,
    )


def _past_reach(fit: PenaltyFit, staleness: float) -> str | None:
    """Why no time is predicted at ``staleness`` (past the fit's ``reach_limit`` by more than ``REACH_MARGIN``)."""
    limit = fit.reach_limit
    if limit is None or staleness <= limit * (1 + REACH_MARGIN) + 1e-9:
        return None
    return (
        f"staleness {staleness:.2f} is past {limit:.2f}, the highest at which most of the study's seeds reached the "
        "target; above it most did not"
    )
