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
        self._capacity = sim.scenario.engine_concurrency
        self._in_flight_updates = getattr(sim.scenario.schedule, "in_flight_updates", False)
        self._decode_step = sim.costs.decode_step_table(self._capacity)
        self.process = sim.env.process(self._run())

    def _run(self) -> Generator[simpy.Event, None, None]:
        """Ask the policy (load weights? start groups?), then decode until it must be asked again.

        The inner loop is the one every simulated rollout passes through, so it
        keeps what it reads in locals. It hands back to the policy when the engine
        is empty, when a finish left room for a group it may be allowed to start,
        or when new weights should reach rollouts in flight.
        """
        env, sim, heap = self.sim.env, self.sim, self.in_flight
        size, capacity, in_flight_updates = sim.group_size, self._capacity, self._in_flight_updates
        table = self._decode_step
        compute_base, compute_per_context = table.first, table.first_per_context
        memory_base, memory_per_context = table.second, table.second_per_context
        ends, remaining, prompts, joins = sim.recorder.sample_end, sim.remaining, sim.prompt_of, sim.join_progress
        heappop, timeout = heapq.heappop, env.timeout
        while True:
            self.poked = False
            if sim.latest_version > self.version:  # sync_target is None otherwise; skip the call
                target = policy.sync_target(
                    sim.scenario,
                    engine_version=self.version,
                    latest_version=sim.latest_version,
                    live_groups=sim.live_groups,
                    in_flight=len(heap),
                )
                if target is not None:
                    self._load(target)
                    continue
            if not self.blocked_with_room and capacity - len(heap) >= size:
                self._start_groups()
            if not heap:
                self.wake = env.event()
                yield self.wake
                self.wake = None
                self.advance(env.now)
                continue
            try:
                while True:
                    # Time to the next finish, at the decode-step time of this segment's mid context.
                    progress, offset, batch = self.progress, self._context_offset, len(heap)
                    mark = heap[0][0]
                    tokens = mark - progress
                    context = batch * (progress + tokens * 0.5) + offset
                    compute = compute_base[batch] + compute_per_context * context
                    memory = memory_base[batch] + memory_per_context * context
                    self._step_s = step_s = compute if compute > memory else memory
                    yield timeout(self._pause + tokens * step_s)
                    # The timer landed exactly on that finish: retire every rollout ending there.
                    now = env.now
                    self._clock, self._pause, self.progress = now, 0.0, mark
                    had_room = capacity - batch >= size
                    limit = mark + _EPS
                    while heap and heap[0][0] <= limit:
                        sample = heappop(heap)[1]
                        ends[sample] = now
                        group = sample // size
                        offset -= prompts[group] - joins[group]
                        remaining[group] -= 1
                        if not remaining[group]:
                            sim.group_finished(group, now)
                    self._context_offset = offset if heap else 0.0  # no drift across busy periods
                    has_room = capacity - len(heap) >= size
                    if has_room and not had_room:
                        sim.engines_with_room += 1
                    if not heap or (has_room and not self.blocked_with_room):
                        break
                    if in_flight_updates and sim.latest_version > self.version:
                        break
            except simpy.Interrupt:
                self.advance(env.now)

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

    def _load(self, version: int) -> None:
        self.advance(self.sim.env.now)
        start = self.sim.env.now + self._pause
        duration = self.sim.costs.weight_sync()
        self._pause += duration
        self.version = version
        self.blocked_with_room = False
        self.loads.append((self.progress, start + duration, version))
        self.sim.recorder.sync(self.index, start, start + duration, version)

    def _start_groups(self) -> None:
        """Start as many groups as the policy allows, up to this engine's fair share.

        Called only with room for a group and not ``blocked_with_room``: once refused,
        admission reopens only when this engine loads weights or the simulation pokes
        it (a publish, a learner take, a drop); groups that others start or finish
        only close it further, so asking again before then is futile.
        """
        sim = self.sim
        group_size = sim.group_size
        room = (self._capacity - len(self.in_flight)) // group_size
        admissible = sim.admissible(self)
        self.blocked_with_room = admissible == 0
        starting = min(room, sim.fair_share(admissible))
        for _ in range(starting):
            group, prompt, lengths = sim.start_group(self)
            self._pause += sim.costs.prefill(prompt)
            first = group * group_size
            for offset, length in enumerate(lengths):
                heapq.heappush(self.in_flight, (self.progress + length, first + offset))
            self._context_offset += group_size * (prompt - self.progress)
        if starting == room:
            sim.engines_with_room -= 1

    def poke(self) -> None:
        """Re-evaluate now: something the policy reads has changed."""
        self.blocked_with_room = False
        if self.process is self.sim.env.active_process:
            return  # already running: it re-evaluates at the top of its loop
        if self.wake is not None:
            if not self.wake.triggered:
                self.wake.succeed()
        elif not self.poked and self.in_flight:
            self.poked = True
            self.process.interrupt()
