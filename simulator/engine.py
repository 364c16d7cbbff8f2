"""A generation engine: continuous batching without an event per token.

    time ──►   prefill/sync pause │ decode at rate d(b, C) │ pause │ decode ...
    progress   (tokens each in-flight rollout has advanced, shared by all of them)

Every rollout in an engine advances one token per decode step, so one number,
``progress``, tracks them all: a rollout that joins at progress ``p`` with
``n`` tokens to go finishes when progress reaches ``p + n``. Between batch
changes the decode-step time is constant (evaluated at the batch's mid-segment
context), so the next finish is one SimPy timeout away, and a rollout costs
a heap push, a heap pop and at most one event. Prefill and weight loading pause
decoding: they accumulate in ``pause`` and elapse before progress moves again.
"""

from __future__ import annotations

import heapq
from collections.abc import Generator
from typing import TYPE_CHECKING

import simpy

from scenarios import policy

if TYPE_CHECKING:
    from simulator.simulation import Simulation

_EPS = 1e-9


class Engine:
    """One generation engine: pulls groups, decodes them, reports finished groups."""

    def __init__(self, sim: Simulation, index: int) -> None:
        self.sim = sim
        self.index = index
        self.version = 0
        self.in_flight: list[tuple[float, int]] = []  # heap of (finish progress, sample id)
        self.progress = 0.0
        self._clock = 0.0  # wall time up to which progress is accounted
        self._pause = 0.0  # seconds of prefill / weight loading still to elapse
        self._step_s = 0.0  # decode-step time of the current segment
        self._context_offset = 0.0  # context tokens in flight = b · progress + offset
        self.loads: list[tuple[float, float, int]] = []  # (progress, wall time, version) of each load
        self.wake: simpy.Event | None = None  # set while idle with nothing in flight
        self.blocked_with_room = False  # could hold another group but the policy said wait
        self.poked = False
        self.process = sim.env.process(self._run())

    def _run(self) -> Generator[simpy.Event, None, None]:
        env, sim = self.sim.env, self.sim
        while True:
            self.poked = False
            target = policy.sync_target(
                sim.scenario,
                engine_version=self.version,
                latest_version=sim.latest_version,
                live_groups=sim.live_groups,
                in_flight=len(self.in_flight),
            )
            if target is not None:
                self._load(target)
                continue
            self._start_groups()
            if not self.in_flight:
                self.wake = env.event()
                yield self.wake
                self.wake = None
                self.advance(env.now)
                continue
            try:
                yield env.timeout(self._time_to_next_finish())
            except simpy.Interrupt:
                self.advance(env.now)
                continue
            self.advance(env.now)
            self.progress = self.in_flight[0][0]  # the timer landed exactly on this finish
            self._finish_due()

    def advance(self, now: float) -> None:
        """Account the wall time since the last update: pauses first, then decoding."""
        elapsed = now - self._clock
        self._clock = now
        if self._pause:
            used = min(self._pause, elapsed)
            self._pause -= used
            elapsed -= used
        if self.in_flight and elapsed > 0:
            self.progress += elapsed / self._step_s

    def _time_to_next_finish(self) -> float:
        batch = len(self.in_flight)
        tokens = self.in_flight[0][0] - self.progress
        context_mid = batch * (self.progress + tokens / 2) + self._context_offset
        self._step_s = self.sim.costs.decode_step(batch, context_mid)
        return self._pause + tokens * self._step_s

    def _load(self, version: int) -> None:
        self.advance(self.sim.env.now)
        start = self.sim.env.now + self._pause
        duration = self.sim.costs.weight_sync()
        self._pause += duration
        self.version = version
        self.loads.append((self.progress, start + duration, version))
        self.sim.recorder.sync(self.index, start, start + duration, version)

    def _start_groups(self) -> None:
        """Start as many groups as the policy allows, up to this engine's fair share."""
        sim = self.sim
        group_size = sim.group_size
        room = (sim.scenario.engine_concurrency - len(self.in_flight)) // group_size
        if room == 0:
            return
        admissible = policy.admissible_groups(
            sim.scenario, engine_version=self.version, live_groups=sim.live_groups, queued_groups=len(sim.queue)
        )
        self.blocked_with_room = admissible == 0
        for _ in range(min(room, sim.fair_share(admissible))):
            group, prompt, lengths = sim.start_group(self)
            self._pause += sim.costs.prefill(prompt)
            first = group * group_size
            for offset, length in enumerate(lengths):
                heapq.heappush(self.in_flight, (self.progress + length, first + offset))
            self._context_offset += group_size * (prompt - self.progress)

    def _finish_due(self) -> None:
        sim, now, heap = self.sim, self.sim.env.now, self.in_flight
        limit = self.progress + _EPS
        while heap and heap[0][0] <= limit:
            _, sample = heapq.heappop(heap)
            group = sim.sample_finished(sample, now)
            self._context_offset -= sim.prompt_of[group] - sim.join_progress[group]
        if not heap:
            self._context_offset = 0.0  # no drift across busy periods

    def poke(self) -> None:
        """Re-evaluate now: something the policy reads has changed."""
        if self.wake is not None:
            if not self.wake.triggered:
                self.wake.succeed()
        elif not self.poked and self.in_flight:
            self.poked = True
            self.process.interrupt()
