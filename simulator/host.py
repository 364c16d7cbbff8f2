"""The host's cores, shared by the busy engines and the learner of a CPU run (``scenarios.rules.cores``).

    engine-0 ──busy(2 threads)──►┐                    engine:  min(1, cores / d / (1 + time_slicing)) / (1 + ε)
    engine-1 ──busy(1 thread)───►├─ Host: demand d ─► learner: min(1, cores / d) / (1 + κ)
    learner  ──busy(1 thread)───►┘                    ─► rate_changed(rate) to every busy worker

A worker tells the host when it starts and stops computing. When that changes
a busy worker's rate, the worker first accounts the time so far at the old
rate, then goes on at the new one (an engine replans its next finish, the
learner its step's end). While the cores are oversubscribed an engine runs
``1 + time_slicing`` times slower than its share (``scenarios.rules.cores``). Besides the sharing, the learner computes
``1 + train_contention`` times slower while an engine computes (a measured
profile's figure: on one CPU the two share caches and memory bandwidth), κ
above; and an engine computes ``1 + engine_contention`` times slower while the
learner computes (ε above; on two cores cpu-timing's decode steps took about
twice as long inside the learner's train spans as outside them).
Without ``hardware.host_cores`` and contention the host does nothing and every
rate stays 1: every device is its own.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Protocol

import simpy

from ..scenarios.compiled import mypyc_attr
from ..scenarios.rules.cores import CoreShare

_EPS = 1e-12  # seconds of work left that count as none (float residue of the interrupts)


class Worker(Protocol):
    rate: float  # the speed it computes at now, 0-1
    is_engine: bool  # engines slow the learner by the profile's contention while they compute

    def rate_changed(self, rate: float) -> None:
        """Account the time so far at ``self.rate``, then compute at ``rate``."""


class Host:
    """Processor sharing among the workers busy at each moment, and the contention of the learner and the engines."""

    def __init__(
        self, share: CoreShare | None, learner_contention: float = 0.0, engine_contention: float = 0.0
    ) -> None:
        self.share = share
        self.learner_contention = learner_contention
        self.engine_contention = engine_contention
        self.active = share is not None or learner_contention > 0 or engine_contention > 0
        self._demand = 0  # threads of the busy workers
        self._engines = 0  # busy engines
        self._learners = 0  # busy workers that are not engines (the learner)
        self._busy: dict[Worker, int] = {}

    def rate(self, worker: Worker) -> float:
        """The speed ``worker`` computes at now: its share of the cores, less contention for a learner
        while an engine computes and for an engine while the learner computes."""
        if worker.is_engine:
            shared = self.share.engine_rate(self._demand) if self.share is not None else 1.0
            return shared / (1 + self.engine_contention) if self._learners else shared
        shared = self.share.rate(self._demand) if self.share is not None else 1.0
        return shared / (1 + self.learner_contention) if self._engines else shared

    def busy(self, worker: Worker, threads: int) -> None:
        """``worker`` now computes with ``threads`` threads (0: it stopped); it has accounted its time up to now."""
        if not self.active:
            return
        previous = self._busy.pop(worker, 0)
        self._demand += threads - previous
        if worker.is_engine:
            self._engines += bool(threads) - bool(previous)
        else:
            self._learners += bool(threads) - bool(previous)
        if threads:
            self._busy[worker] = threads
        for member in list(self._busy):
            rate = self.rate(member)
            if member.rate != rate:
                member.rate_changed(rate)


@mypyc_attr(allow_interpreted_subclasses=True)  # compiled (``asyncrl.scenarios.compiled``), yet open to subclasses
class Computation:
    """A worker that runs one piece of work at a time, a known number of full-speed seconds (the learner's step)."""

    is_engine = False

    def __init__(self, env: simpy.Environment, host: Host, threads: int) -> None:
        self.env = env
        self.host = host
        self.threads = threads
        self.rate = 1.0
        self._process: simpy.Process | None = None  # set while it computes

    def run(self, seconds: float) -> Generator[simpy.Event, None, None]:
        """Compute ``seconds`` of full-speed work; slower while the host's cores are oversubscribed."""
        if not self.host.active:
            yield self.env.timeout(seconds)
            return
        self._process = self.env.active_process
        self.host.busy(self, self.threads)
        remaining = seconds
        while remaining > _EPS:
            start, rate = self.env.now, self.rate
            try:
                yield self.env.timeout(remaining / rate)
                remaining = 0.0
            except simpy.Interrupt:
                remaining -= (self.env.now - start) * rate
        self._process = None
        self.host.busy(self, 0)

    def rate_changed(self, rate: float) -> None:
        self.rate = rate
        process = self._process
        if process is not None and process is not self.env.active_process:
            process.interrupt()  # it accounts the time so far at the rate it started the wait with
