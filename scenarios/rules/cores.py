"""Cores a CPU run's processes share: processor sharing, the rule both backends read.

    threads wanting a core:   engine-0 ████████████      ███████
                              engine-1    ████████████████████
                              learner        ██████████████
    demand (threads)          1  2  3 ..............  2  1
    speed of each (2 cores)   1  1  ⅔ ..............  1  1

On a CPU run every process (each engine, the learner) computes with its own
threads: an engine with ``devices_per_engine``, the learner with
``training_devices`` (``torch.set_num_threads``). While the busy processes
want more threads than the host has cores (``hardware.host_cores``), the
operating system time-slices them, and each runs at ``cores / demand`` of its
full speed; otherwise at full speed. An engine, whose decode steps last a
millisecond or two and which waits on messages between them, loses more than
its share: it runs ``1 + time_slicing`` times slower still (a measured
profile's figure; on two cores its oversubscribed steps took 10-54% longer than
their share). The learner's own excess is the profile's ``train_contention``, and an
engine's while the learner computes its ``engine_contention`` (``simulator.host``).
That is the whole rule: it says nothing of caches or memory bandwidth, which
the measurements did not show to matter consistently (docs/validation.md).

The simulator applies it forward: a busy engine or learner advances
``rate × elapsed`` seconds of its work (``simulator.host``). The fit applies
it backward: a step that took ``t`` seconds of wall time while the demand was
``d`` did ``t · min(1, cores / d)`` seconds of full-speed work, which is what
a profile charges (``full_speed_seconds``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..spec.scenario import Scenario


@dataclass(frozen=True)
class CoreShare:
    """How many cores the run's processes share, how many threads each busy one wants, and what time slicing
    costs beyond the share (``slicing``: a measured profile's ``time_slicing``)."""

    cores: int
    engine_threads: int
    learner_threads: int
    slicing: float = 0.0

    def rate(self, demand: int) -> float:
        """Speed of each busy process, 0-1, while ``demand`` threads want a core: its share."""
        return 1.0 if demand <= self.cores else self.cores / demand

    def engine_rate(self, demand: int) -> float:
        """Speed of a busy engine: its share, less the slicing's cost while the cores are oversubscribed."""
        return 1.0 if demand <= self.cores else self.cores / demand / (1 + self.slicing)


def core_share(scenario: Scenario, slicing: float = 0.0) -> CoreShare | None:
    """The scenario's core sharing, or None when every device is its own (``hardware.host_cores`` unset)."""
    cores = scenario.hardware.host_cores
    if cores is None:
        return None
    return CoreShare(cores, scenario.cluster.devices_per_engine, scenario.training_devices, slicing)


def full_speed_seconds(
    spans: np.ndarray, busy: list[tuple[np.ndarray, int]], share: CoreShare, engine: bool = False
) -> np.ndarray:
    """Seconds of full-speed work done in each of ``spans`` ((n, 2): start, end), an engine's or the learner's.

    ``busy`` lists each process's busy spans ((m, 2) arrays) with its threads;
    the demand at a moment is the threads of the processes busy then. Work is the
    integral of the rate (``share.engine_rate`` or ``share.rate``) over the span:
    exact, since the rate is constant between the busy spans' edges.
    """
    return _integral(spans, busy, share.engine_rate if engine else share.rate, idle=1.0)


def unshared_seconds(spans: np.ndarray, busy: list[tuple[np.ndarray, int]], share: CoreShare) -> np.ndarray:
    """Seconds of each of ``spans`` during which the busy threads did not outnumber the cores."""
    return _integral(spans, busy, lambda demand: float(demand <= share.cores), idle=1.0)


def busy_seconds(spans: np.ndarray, intervals: list[np.ndarray]) -> np.ndarray:
    """Seconds of each of ``spans`` during which at least one of ``intervals`` ((m, 2) arrays) is under way."""
    return _integral(spans, [(each, 1) for each in intervals], lambda demand: float(demand > 0), idle=0.0)


def _integral(
    spans: np.ndarray, busy: list[tuple[np.ndarray, int]], value: Callable[[int], float], idle: float
) -> np.ndarray:
    """∫ value(demand(t)) dt over each span, demand the summed weights of the ``busy`` intervals under way
    at t; ``idle`` is the value where none is (before the first edge and after the last)."""
    edges, deltas = [], []
    for intervals, threads in busy:
        if len(intervals):
            edges += [intervals[:, 0], intervals[:, 1]]
            deltas += [np.full(len(intervals), threads), np.full(len(intervals), -threads)]
    if not edges:
        return (spans[:, 1] - spans[:, 0]) * idle
    times, changes = np.concatenate(edges), np.concatenate(deltas)
    order = np.argsort(times, kind="stable")
    times, demand = times[order], np.cumsum(changes[order])
    values = np.array([value(int(d)) for d in demand[:-1]])
    done = np.concatenate([[0.0], np.cumsum(values * np.diff(times))])  # the integral up to each edge

    def integral_until(moments: np.ndarray) -> np.ndarray:
        inside = np.interp(moments, times, done)
        return inside + idle * (np.clip(moments - times[-1], 0, None) + np.clip(moments - times[0], None, 0))

    return integral_until(spans[:, 1]) - integral_until(spans[:, 0])
