"""When a simulated run has reached its steady state, so a sweep can stop simulating it.

    step:   0 ......... W | window | window | window |  ← k steps done
                warm-up     └──────── steady span ───────┘

After a warm-up of ``W`` steps, the steps since are cut into windows of ``K``
steps, counted back from the latest one (a partial window next to the warm-up
is left out). The run has converged after step ``k`` when both hold:

1. the last two windows agree: their mean step times within ``step_time``
   (relative) of each other, their mean staleness within ``staleness`` (steps);
2. the extrapolation is known as closely: the steps not simulated are
   extrapolated at the steady-state means, so their share of the run's steps,
   ``(steps − k) / steps``, times twice the standard error of those means (of
   the window means over the whole windows since the warm-up, at least three)
   is within ``step_time`` of the mean step time and within ``staleness`` steps.

The first alone stops noisy runs (heavy-tailed lengths, periodic schedules)
on a chance agreement; the second makes a noisy run go on until its mean is
pinned down well enough for what is left to extrapolate. Window means, not
single steps, carry the noise estimate, because the step times of an
asynchronous schedule are strongly correlated from one step to the next (a
long step is often followed by a short one). A schedule whose step times
repeat every p steps (a pipelined-2 run generating in waves of three batches:
one long step, two short) is judged on windows of whole periods
(``Tolerance.in_periods_of``): a window of 10 steps cuts a period of 3, so
its mean depends on where it starts, and such a run never converged.

Pure functions on plain sequences: the learner loop in ``simulator.simulation``
asks ``steady_span`` after every step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

MIN_WINDOWS = 3  # the fewest whole windows a standard error is estimated from


@dataclass(frozen=True)
class Tolerance:
    """How close a run's recent figures must agree before it counts as converged."""

    warmup: int = 10  # steps never used: the pipeline filling, staleness ramping up (steps)
    window: int = 10  # steps per window (steps)
    step_time: float = 0.01  # agreement of mean step times (relative)
    staleness: float = 0.02  # agreement of mean staleness (steps, absolute)

    def __post_init__(self) -> None:
        if self.warmup < 0 or self.window < 1 or self.step_time <= 0 or self.staleness <= 0:
            raise ValueError(f"not a usable tolerance: {self}")

    def in_periods_of(self, period: int) -> Tolerance:
        """This tolerance with windows of whole periods (the window rounded up to a multiple of ``period``):
        the step times of a schedule that repeats every ``period`` steps (``Schedule.step_period``) have
        window means that differ by phase, so windows that cut a period never agree."""
        window = -(-self.window // period) * period
        return self if window == self.window else replace(self, window=window)

    @property
    def min_steps(self) -> int:
        """The fewest steps after which a run can count as converged."""
        return self.warmup + MIN_WINDOWS * self.window


def steady_span(
    step_times: Sequence[float], staleness: Sequence[float], tolerance: Tolerance, steps: int
) -> int | None:
    """The first step of the steady span (whole windows up to the latest step) if the run has converged, else None.

    ``step_times[i]`` is step ``i``'s duration (s), ``staleness[i]`` the mean staleness of its batch (steps);
    ``steps`` is how many steps the whole run has.
    """
    done, size = len(step_times), tolerance.window
    windows = (done - tolerance.warmup) // size
    if windows < MIN_WINDOWS:
        return None
    first = done - windows * size
    times = np.asarray(step_times[first:done], dtype=np.float64).reshape(windows, size).mean(axis=1)
    stale = np.asarray(staleness[first:done], dtype=np.float64).reshape(windows, size).mean(axis=1)
    if not _windows_agree(times, stale, tolerance):
        return None
    share = max(0, steps - done) / steps  # of the run's steps, those the extrapolation stands for
    if share * 2 * _standard_error(times) > tolerance.step_time * times.mean():
        return None
    if share * 2 * _standard_error(stale) > tolerance.staleness:
        return None
    return first


def _windows_agree(times: np.ndarray, stale: np.ndarray, tolerance: Tolerance) -> bool:
    """The last two windows' mean step times and mean staleness agree within the tolerance."""
    last, before = times[-1], times[-2]
    if abs(last - before) > tolerance.step_time * max(last, before):
        return False
    return abs(stale[-1] - stale[-2]) <= tolerance.staleness


def _standard_error(window_means: np.ndarray) -> float:
    """Standard error of the mean of ``window_means`` (the sample standard deviation over √count)."""
    return float(window_means.std(ddof=1) / np.sqrt(len(window_means)))
