"""A generation engine: continuous batching without an event per token.

    time ──►   prefill/sync pause │ decode at rate d(b, C) │ pause │ decode ...
    progress   (tokens each in-flight rollout has advanced, shared by all of them)

Every rollout in an engine advances one token per decode step, so one number,
``progress``, tracks them all: a rollout that joins at progress ``p`` with
``n`` tokens to go finishes when progress reaches ``p + n``. Between batch
changes the decode-step time is constant (evaluated at the batch's mid-segment
context), so the next finish is one SimPy timeout away, and a rollout costs
a heap push, a heap pop and at most one event: none at all for a *quiet*
finish, one that completes no group and cannot let the engine start one,
which is applied ahead at its own time and undone if an interrupt comes first
(``_plan_quiet_finishes``, ``settle``). Prefill and weight loading pause
decoding: they accumulate in ``pause`` and elapse before progress moves again.
"""

from __future__ import annotations

import heapq
import math
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
        self._planned: list[tuple[float, float, int]] = []  # quiet finishes applied ahead: (time, progress, sample)
        self._plan_start = (0.0, 0.0, 0.0)  # (progress, clock, pause) before them
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
        ends, remaining, prompts, joins = (
            sim.recorder.sample_end,
            sim.remaining,
            sim.recorder.group_prompt,
            sim.recorder.group_join,
        )
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
                    finish_at = self._plan_quiet_finishes()
                    yield timeout(finish_at - env.now)
                    self._planned = []  # the quiet finishes before it are now in the past
                    # The timer landed exactly on a finish someone may see: retire every rollout ending there.
                    now, mark, batch, offset = env.now, heap[0][0], len(heap), self._context_offset
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
                self.settle(env.now)

    def _plan_quiet_finishes(self) -> float:
        """Retire the finishes nobody else can see; return the time of the next one someone can.

        A finish is *quiet* when it is the only one at its moment, completes no
        group, and leaves the engine unable to start a group (no room gained, or
        admission refused until a poke). It changes nothing but this engine's
        batch size, so it is applied right away, at its own (future) time, without
        a SimPy event. An interrupt before those times undoes them (``settle``).
        Every simulated rollout passes through this loop, so it keeps what it
        reads in locals and inlines ``_segment_step_s``.
        """
        sim, heap = self.sim, self.in_flight
        self._planned = planned = []
        self._plan_start = (self.progress, self._clock, self._pause)
        size, capacity = sim.group_size, self._capacity
        table = self._decode_step
        compute_base, compute_per_context = table.first, table.first_per_context
        memory_base, memory_per_context = table.second, table.second_per_context
        ends, remaining, prompts, joins = (
            sim.recorder.sample_end,
            sim.remaining,
            sim.recorder.group_prompt,
            sim.recorder.group_join,
        )
        progress, offset, clock, pause, batch = self.progress, self._context_offset, self._clock, self._pause, len(heap)
        # A finish at batch ``crossing`` or below leaves room for a group, which is seen (the engine
        # may start one) unless the engine already had room and was refused admission until a
        # poke; then only the crossing itself is (other engines' fair share counts engines with room).
        crossing = capacity - size + 1
        floor = 2 if self.blocked_with_room else max(2, crossing)
        if self._in_flight_updates and sim.latest_version > self.version:
            floor = capacity + 1  # new weights are due: nothing is quiet
        heappop, plan = heapq.heappop, planned.append
        while True:
            # Time to the next finish, at the decode-step time of this segment's mid context.
            mark, sample = heap[0]
            tokens = mark - progress
            context = batch * (progress + tokens * 0.5) + offset
            compute = compute_base[batch] + compute_per_context * context
            memory = memory_base[batch] + memory_per_context * context
            step_s = compute if compute > memory else memory
            finish_at = clock + pause + tokens * step_s
            if batch <= floor or batch == crossing:
                break
            group = sample // size
            second = heap[1][0]
            third = heap[2][0]
            if remaining[group] == 1 or (second if second < third else third) <= mark + _EPS:
                break
            heappop(heap)
            plan((finish_at, mark, sample))
            ends[sample] = finish_at
            remaining[group] -= 1
            offset -= prompts[group] - joins[group]
            progress = mark
            clock = finish_at
            pause = 0.0
            batch -= 1
        self.progress, self._context_offset, self._clock, self._pause, self._step_s = (
            progress,
            offset,
            clock,
            pause,
            step_s,
        )
        return finish_at

    def settle(self, now: float) -> None:
        """Bring the engine to ``now``: undo quiet finishes planned after it, then account the time."""
        planned = self._planned
        if planned and planned[-1][0] > now:
            sim, size = self.sim, self.sim.group_size
            while planned and planned[-1][0] > now:
                _, mark, sample = planned.pop()
                heapq.heappush(self.in_flight, (mark, sample))
                sim.recorder.sample_end[sample] = math.nan
                group = sample // size
                sim.remaining[group] += 1
                self._context_offset += sim.recorder.group_prompt[group] - sim.recorder.group_join[group]
            if planned:  # resume just after the last finish that did happen
                self._clock, self.progress, self._pause = planned[-1][0], planned[-1][1], 0.0
            else:
                self.progress, self._clock, self._pause = self._plan_start
            self._step_s = self._segment_step_s()
        self._planned = []
        self.advance(now)

    def _segment_step_s(self) -> float:
        """Decode-step time from now to the next finish, at the segment's mid context."""
        batch = len(self.in_flight)
        tokens = self.in_flight[0][0] - self.progress
        return self._decode_step(batch, batch * (self.progress + tokens * 0.5) + self._context_offset)

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
        heappush, heap, progress = heapq.heappush, self.in_flight, self.progress
        for _ in range(starting):
            group, prompt, lengths = sim.start_group(self)
            self._pause += sim.costs.prefill(prompt)
            sample = group * group_size
            for length in lengths:
                heappush(heap, (progress + length, sample))
                sample += 1
            self._context_offset += group_size * (prompt - progress)
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
