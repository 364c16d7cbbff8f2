"""A simulated run's predicted wall time to a target reward, under a staleness penalty (``scenarios.staleness.penalty``).

    simulated step ends ──┐
    summary: staleness (token mean), dropped / generated ─► fit.steps(s, d) ─► time at which that many steps ended

Past the last simulated step, each further step takes the run's steady step time: for a run a sweep ended once
converged (``Simulation.steady``), the mean step of its steady span, the same steps the summary extrapolates
with (so the time at ``run.steps`` is the summary's wall time); for a run simulated to the end, the mean step of
its second half (the first holds the warm-up: the pipeline filling, the staleness ramping up).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..scenarios.record.record import RunSummary
from ..scenarios.staleness.penalty import PenaltyFit, TimeToTarget, predict_time_to_target
from .simulation import Simulation

if TYPE_CHECKING:
    import pandas as pd


def step_ends(sim: Simulation) -> np.ndarray:
    """When each learner step of a simulation that has run ended (s), in step order."""
    return np.asarray([train.end for train in sorted(sim.recorder.trains)], dtype=np.float64)


def step_ends_of_events(events: pd.DataFrame) -> np.ndarray:
    """When each learner step ended (s), from a run's event table."""
    return events.loc[events["kind"] == "train"].sort_values("step")["end"].to_numpy(dtype=np.float64)


def steady_step_s(ends: np.ndarray, steady: tuple[int, int] | None = None) -> float:
    """The mean step time of the steady span ``[first, last)`` of steps, or of the second half of the run."""
    first, last = steady if steady is not None else (len(ends) // 2, len(ends))
    if last <= first:
        return 0.0
    begin = float(ends[first - 1]) if first > 0 else 0.0
    return (float(ends[last - 1]) - begin) / (last - first)


def dropped_fraction(summary: RunSummary) -> float:
    """Dropped samples over generated ones (0 when none were generated)."""
    samples = summary.samples
    return samples.dropped / samples.generated if samples.generated else 0.0


def time_to_target(
    fit: PenaltyFit, summary: RunSummary, ends: np.ndarray, steady: tuple[int, int] | None = None
) -> TimeToTarget:
    """The run's predicted time to target: the fit at its token-mean staleness and dropped fraction."""
    staleness = summary.staleness.token_mean
    return predict_time_to_target(fit, staleness, dropped_fraction(summary), ends, steady_step_s(ends, steady))
