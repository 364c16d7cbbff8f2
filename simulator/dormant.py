"""Engines with nothing in flight, whose weight loads are applied together: a plan's cost follows the work.

    publish(v) ─► ScheduleState: LoadEmpty(engines, v) ─► Dormant.load: one numpy pass over those engines
                                                              │ (their clock, pause, ready time, version)
    Start / Regenerate / Load on one of them, a failure ──────┴► Dormant.wake: its state back on the Engine

The batch of a step is the same whatever the cluster's size, but every idle engine loads each new version:
on 1,024 devices most of several hundred engines hold nothing, and loading them one ``Engine.load`` at a
time cost more than simulating the rollouts. An engine that holds nothing and is told to load becomes
*dormant*: its clock, the pause still to elapse, the time its last load ends and its version live in
arrays here, and each later load of a group of dormant engines is a handful of array operations, whatever
their number. The first command that gives it work (or a failure, or the run's end) wakes it: the values
go back on the ``Engine``, which goes on as if it had applied every load itself.

The array operations are ``Engine.advance``, ``Engine.wake_up`` and ``Engine.load`` for an engine with
nothing in flight at rate 1 (an idle engine runs alone), written elementwise in the same order, so every
time they produce is the same double the engine would have computed: the records do not change. A load on
a dormant engine is not added to its ``loads``, which only cut the rollouts in flight at a load
(``rollouts.cut_at_loads``); a rollout started later starts after all of them.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .engine import Engine


class Loaded(NamedTuple):
    """What one group load did, per engine of the group (arrays in the group's order)."""

    start: np.ndarray  # when each began to load (s)
    loaded: np.ndarray  # when its weights were in (s)
    ready: np.ndarray  # when it could decode again (s): after switching back to generation, if colocated


class Dormant:
    """The dormant engines' state, by engine index."""

    def __init__(self, engines: list[Engine], wake_s: float) -> None:
        count = len(engines)
        self.engines = engines
        self.wake_s = wake_s  # an idle engine's delay to act on a command (s)
        self.member = np.zeros(count, dtype=bool)
        self.asleep: set[int] = set()  # the same engines as ``member``, for one engine's question (cheaper)
        self.clock = np.zeros(count)
        self.pause = np.zeros(count)
        self.ready_at = np.zeros(count)
        self.version = np.zeros(count, dtype=np.int64)
        self.sync_s = np.asarray([engine.sync_s for engine in engines], dtype=np.float64)
        self.switch_s = np.asarray([engine.switch_s for engine in engines], dtype=np.float64)
        self.loads = 0  # loads applied here (one per engine and version)

    def load(self, engines: np.ndarray, version: int, now: float) -> Loaded:
        """Each of ``engines`` (nothing in flight) loads ``version`` at ``now``."""
        index = np.asarray(engines, dtype=np.int64)
        self.loads += len(index)
        joining = ~self.member[index]
        if joining.any():
            for engine in index[joining].tolist():
                self._enter(self.engines[engine])
        clock, pause = self.clock[index], self.pause[index]
        elapsed = now - clock  # Engine.advance: the pause elapses first (rate 1)
        pause = np.where(pause != 0.0, pause - np.minimum(pause, elapsed), pause)
        if self.wake_s:  # Engine.wake_up for an engine that is idle: its last load is over
            pause = np.where(now >= self.ready_at[index], pause + self.wake_s, pause)
        sync_s, switch_s = self.sync_s[index], self.switch_s[index]
        start = now + pause  # Engine.load
        loaded = start + sync_s
        ready = loaded + switch_s
        self.pause[index] = pause + (sync_s + switch_s)
        self.clock[index] = now
        self.ready_at[index] = ready
        self.version[index] = version
        return Loaded(start, loaded, ready)

    def wake(self, engine: Engine) -> Engine:
        """``engine``, its state back on it if it was dormant: call before anything reads or changes it."""
        index = engine.index
        if index not in self.asleep:
            return engine
        self.member[index] = False
        self.asleep.discard(index)
        engine.restore(
            float(self.clock[index]), float(self.pause[index]), float(self.ready_at[index]), int(self.version[index])
        )
        return engine

    def wake_all(self) -> None:
        for engine in self.engines:
            self.wake(engine)

    def _enter(self, engine: Engine) -> None:
        index = engine.index
        if engine.in_flight or engine.rate != 1.0:
            raise RuntimeError(f"engine {index} cannot go dormant: it has work or shares cores")
        self.member[index] = True
        self.asleep.add(index)
        self.clock[index], self.pause[index], self.ready_at[index], self.version[index] = engine.dormant_state()
