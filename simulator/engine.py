"""A generation engine: continuous batching without an event per token.

    time ──►   prefill/sync pause │ decode at rate d(b, C) │ pause │ decode ...
    progress   (tokens each in-flight rollout has advanced, shared by all of them)

Every rollout in an engine advances one token per decode step, so one number, ``progress``, tracks them all: a
rollout that joins at progress ``p`` with ``n`` tokens to go finishes when progress reaches ``p + n``. Between batch
changes the decode-step time is constant (evaluated at the batch's mid-segment context), so the next finish is one
SimPy timeout away, and a rollout costs a heap push, a heap pop and at most one event: none at all for a *quiet*
finish, one that completes no group and cannot let the engine start one, which is applied ahead at its own time and
undone if an interrupt comes first (``_plan_quiet_finishes``, ``settle``). Prefill and weight loading pause
decoding: they accumulate in ``pause`` and elapse before progress moves again (so their spans, which the simulation
records, never overlap), as does a load's KV recompute (``_recompute_s``).

Where engines and the learner share a CPU host's cores (``simulator.host``), the engine computes at ``rate`` ≤ 1:
wall time ``t`` does ``rate · t`` seconds of its work (pauses and decode steps alike); at a new rate it settles at
the old one, then replans. An idle engine given work acts on it ``wake_s`` later (``wake_up``: the delivery).

An idle engine told to load weights may go *dormant* (``simulator.dormant``): the simulation applies its loads with
other idle engines' and hands its state back (``restore``) before it next gets work.

The engine decides nothing about the schedule. It tells its ``Listener`` (the simulation) when samples finish; the
simulation asks ``ScheduleState.dispatch`` and hands the engine weights to load (``load``) and groups to start
(``start``), then ``replan`` makes it account for them. When other events are due at the same instant, the
simulation decides only once they are in (one decision per instant, as the coordinator dispatches once per drain of
its queue): the engine waits for that decision before it plans.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Generator
from typing import NamedTuple, Protocol

import simpy

from ..scenarios.spec.failures import NO_VERSION
from ..scenarios.spec.scenario import Scenario
from .costs import CostModel
from .host import Host
from .rollouts import Rollouts, WeightLoad

_EPS = 1e-9


class Prefill(NamedTuple):
    """When a started group's prompt prefill runs on its engine."""

    start: float  # (s)
    end: float  # (s)


class Listener(Protocol):
    def finished(self, engine: Engine, samples: int, groups: list[int]) -> simpy.Event | None:
        """``samples`` rollouts on ``engine`` finished by now, completing ``groups``; may hand it work.
        Returns the event of this instant's decision when it comes later (other reports are due at
        this instant): the engine waits for it before it plans."""

    def retired(self, engine: Engine, samples: int) -> None:
        """``samples`` rollouts on ``engine`` finished earlier, found out only now (no decision due)."""


class Engine:
    """One generation engine: decodes the groups it is given, reports finished samples."""

    def __init__(
        self,
        env: simpy.Environment,
        index: int,
        scenario: Scenario,
        costs: CostModel,
        rollouts: Rollouts,
        listener: Listener,
        host: Host,
        ahead: set[Engine] | None = None,
    ) -> None:
        self.env = env
        self.index = index
        self.costs = costs
        self.rollouts = rollouts
        self.listener = listener
        self.version = 0
        self.in_flight: list[tuple[float, int]] = []  # heap of (finish progress, sample id)
        self.progress = 0.0
        self._clock = 0.0  # wall time up to which progress is accounted
        self._pause = 0.0  # seconds of work (prefill, weight loading, a wake) still to elapse before decoding
        self._ready_at = 0.0  # when the last weight load ends
        self._step_s = 0.0  # decode-step time of the current segment
        self._context_offset = 0.0  # context tokens in flight = b · progress + offset
        self.loads: list[WeightLoad] = []  # each weight load, in order
        # Set while idle, or waiting for its instant's decision. An engine starts idle, and its SimPy process
        # starts with its first work (``replan``), waiting for this wake as an idle one would: on a large
        # cluster many engines never get any.
        self.wake: simpy.Event | None = env.event()
        self._interrupted = False
        self.refused = False  # planning with room left after a dispatch: finishes that add room are quiet
        self._group_size = scenario.workload.samples_per_prompt
        self._capacity = scenario.engine_concurrency
        self._planned: list[tuple[float, float, int]] = []  # quiet finishes applied ahead: (time, progress, sample)
        self._ahead = set() if ahead is None else ahead  # shared: the engines refused with finishes planned ahead
        self._reported = 0  # how many of them the listener has been told of (those already past)
        self._plan_start = (0.0, 0.0, 0.0)  # (progress, clock, pause) before them
        self._decode_step = table = costs.decode_step_table(self._capacity)
        self._step_terms = (table.first, table.first_per_context, table.second, table.second_per_context, table.floor)
        # What the loops read and write of every live rollout, from ``rollouts.base`` / ``sample_base`` on (``Rollouts``).
        self._lists = (rollouts.end, rollouts.remaining, rollouts.prompt, rollouts.join)
        self._retire_s = costs.retire()  # a pause after each decode step in which rollouts finish
        self.sync_s, self.switch_s = costs.weight_sync(index), costs.switch_to_generation()  # each load's (s)
        self.host = host
        self.rate = 1.0  # speed, 0-1: below 1 while the host's cores are oversubscribed
        self.is_engine = True
        self._threads = scenario.cluster.devices_per_engine
        self._recompute = scenario.schedule.kv_on_update == "recompute"
        self.process: simpy.Process | None = None

    # What the simulation tells it.

    def prepare(self, now: float) -> None:
        """Bring a busy engine to ``now`` before the simulation changes its work."""
        if self.process is not self.env.active_process and self.wake is None:
            self.settle(now)

    def idle(self, now: float) -> bool:
        """Nothing in flight and no weights still loading: work handed to it now must first reach it."""
        return not self.in_flight and now >= self._ready_at

    def wake_up(self, seconds: float) -> None:
        """Act on the work handed to it now ``seconds`` later (the command's delivery, the actor's loop)."""
        self.advance(self.env.now)
        self._pause += seconds * self.rate

    def load(self, version: int) -> tuple[float, float, float]:
        """Load weights ``version`` once the pauses already due have elapsed, then switch back to generating
        (colocated: the learner state leaves); (start, weights loaded, ready to decode)."""
        now = self.env.now
        self.advance(now)
        slowness = 1.0 / self.rate
        start = now + self._pause * slowness
        sync_s, switch_s = self.sync_s, self.switch_s
        loaded = start + sync_s * slowness
        ready = loaded + switch_s * slowness
        self._pause += sync_s + switch_s + self._recompute_s()
        self._ready_at = ready
        self.version = version
        self.loads.append(WeightLoad(self.progress, ready, version))
        return start, loaded, ready

    def _recompute_s(self) -> float:
        """``kv_on_update: recompute``: one prefill of every in-flight rollout's context (prompt and tokens so far)
        after the load; decoding pays it, as the executor's engine recomputes at its next step."""
        if not self._recompute or not self.in_flight:
            return 0.0
        context = len(self.in_flight) * self.progress + self._context_offset
        return self.costs.prefill(round(context), 1)

    def dormant_state(self) -> tuple[float, float, float, int]:
        """(clock, pause still due, when its last load ends, version): all that changes while it holds
        nothing and loads weights (``simulator.dormant`` keeps them meanwhile)."""
        return self._clock, self._pause, self._ready_at, self.version

    def restore(self, clock: float, pause: float, ready_at: float, version: int) -> None:
        """Take back the state ``dormant_state`` gave, after the loads applied to it meanwhile."""
        self._clock, self._pause, self._ready_at, self.version = clock, pause, ready_at, version

    def start(self, group: int, prompt: int, lengths: list[int]) -> Prefill:
        """Prefill ``group``'s prompt, then decode its samples alongside the others; when the prefill runs."""
        now, heap = self.env.now, self.in_flight
        self.advance(now)
        if not heap:
            self.host.busy(self, self._threads)
        slowness = 1.0 / self.rate
        prefill_start = now + self._pause * slowness
        self._pause += self.costs.prefill(prompt, len(lengths))
        size, progress, push = self._group_size, self.progress, heapq.heappush
        sample = group * size
        for length in lengths:
            push(heap, (progress + length, sample))
            sample += 1
        self._context_offset += size * (prompt - progress)
        return Prefill(prefill_start, now + self._pause * slowness)

    def fail(self, now: float) -> list[tuple[int, float]]:
        """The engine dies at ``now``: it drops everything it held and waits, without weights, for work.

        Returns each rollout it had in flight as (sample id, tokens generated so far); the quiet finishes
        it had planned past ``now`` are undone first, those before it reported (``settle``).
        """
        self.prepare(now)
        self.advance(now)
        joins, size, base = self.rollouts.join, self._group_size, self.rollouts.base
        lost = [(sample, max(0.0, self.progress - joins[sample // size - base])) for _, sample in self.in_flight]
        self.in_flight.clear()
        self._context_offset, self._pause, self._ready_at = 0.0, 0.0, now
        self.host.busy(self, 0)
        self.rate = 1.0
        self.version = NO_VERSION
        self.replan()
        return lost

    def rate_changed(self, rate: float) -> None:
        """The host's cores are shared differently: account the time so far at the old rate, replan at ``rate``."""
        self.prepare(self.env.now)
        self.rate = rate
        self.replan()

    def replan(self) -> None:
        """Re-evaluate now: the simulation changed this engine's weights, work or state."""
        if self.process is not None and self.process is self.env.active_process:
            return  # already running: it plans again before it next waits
        if self.wake is not None:
            if not self.wake.triggered:
                self.wake.succeed()
            if self.process is None:
                self.process = self.env.process(self._run())
        elif not self._interrupted and self.process is not None:
            self._interrupted = True
            self.process.interrupt()

    # Its own time.

    def _run(self) -> Generator[simpy.Event, None, None]:
        """Decode until the next finish someone can see, report it, repeat; idle when empty.

        The inner loop is the one every simulated rollout passes through, so it
        keeps what it reads in locals.
        """
        env, heap, listener, rollouts, size = self.env, self.in_flight, self.listener, self.rollouts, self._group_size
        ends, remaining, prompts, joins = self._lists
        heappop, timeout = heapq.heappop, env.timeout
        if self.wake is not None:  # started by its first work: the wake that work gave it
            yield self.wake
            self.wake = None
            self.advance(env.now)
        while True:
            if not heap:
                self.wake = env.event()
                yield self.wake
                self.wake = None
                self.advance(env.now)
                continue
            try:
                while heap:
                    delay = self._plan_quiet_finishes() - env.now
                    yield timeout(delay if delay > 0 else 0.0)  # a rate change can leave -1e-16 of rounding
                    retired = len(self._planned) - self._reported  # quiet finishes before it, now past
                    self._planned, self._reported = [], 0
                    self._ahead.discard(self)
                    # The timer landed exactly on a finish someone may see: retire every rollout ending there.
                    now, mark, offset = env.now, heap[0][0], self._context_offset
                    base, sample_base = rollouts.base, rollouts.sample_base
                    self._clock, self._pause, self.progress = now, self._retire_s, mark
                    limit = mark + _EPS
                    completed = []
                    while heap and heap[0][0] <= limit:
                        sample = heappop(heap)[1]
                        retired += 1
                        ends[sample - sample_base] = now
                        group = sample // size
                        at = group - base
                        offset -= prompts[at] - joins[at]
                        remaining[at] -= 1
                        if not remaining[at]:
                            completed.append(group)
                    self._context_offset = offset if heap else 0.0  # no drift across busy periods
                    if not heap:
                        self.host.busy(self, 0)
                        self.rate = 1.0  # a load while idle runs alone
                    decision = listener.finished(self, retired, completed)
                    if decision is not None:  # it may hand this engine work: plan once it has
                        self.wake = decision
                        yield decision
                        self.wake = None
            except simpy.Interrupt:
                self._interrupted = False
                self.settle(env.now)

    def _plan_quiet_finishes(self) -> float:
        """Retire the finishes nobody else can see; return the time of the next one someone can.

        A finish is *quiet* when it is the only one at its moment, completes no
        group, and cannot let the engine start a group: it gains no room, or the
        engine had room already and admission was exhausted when it last got
        work (after every dispatch it is; what reopens admission, the simulation
        learns first, and it settles the engine). A quiet finish changes nothing
        but this engine's batch size, so it is applied right away, at its own
        (future) time, without a SimPy event. An interrupt before those times
        undoes them (``settle``). Every simulated rollout passes through this
        loop, so it keeps what it reads in locals and inlines ``_segment_step_s``.
        """
        heap = self.in_flight
        planned: list[tuple[float, float, int]] = []
        self._planned = planned
        self._reported = 0
        self._plan_start = (self.progress, self._clock, self._pause)
        size, capacity = self._group_size, self._capacity
        compute_base, compute_per_context, memory_base, memory_per_context, launch_floor = self._step_terms
        ends, remaining, prompts, joins = self._lists
        base, sample_base = self.rollouts.base, self.rollouts.sample_base
        progress, offset, clock, pause, batch = self.progress, self._context_offset, self._clock, self._pause, len(heap)
        slowness = 1.0 / self.rate  # wall seconds per second of work
        # Finishes down to ``floor`` rollouts are quiet (the last one always completes its group).
        # Without room, the finish that brings room (batch ``capacity - size + 1`` → one fewer) is seen.
        self.refused = capacity - batch >= size  # room, and the last dispatch gave it nothing more
        floor = 1 if self.refused else max(1, capacity - size + 1)
        heappop, plan, retire_s = heapq.heappop, planned.append, self._retire_s
        while True:
            # Time to the next finish, at the decode-step time of this segment's mid context.
            mark, sample = heap[0]
            tokens = mark - progress
            context = batch * (progress + tokens * 0.5) + offset
            compute = compute_base[batch] + compute_per_context * context
            memory = memory_base[batch] + memory_per_context * context
            step_s = compute if compute > memory else memory
            if step_s < launch_floor[batch]:
                step_s = launch_floor[batch]
            finish_at = clock + (pause + tokens * step_s) * slowness
            if batch <= floor:
                break
            group = sample // size - base
            second = heap[1][0]  # the next finish after this one: heap[1] or heap[2]
            if batch > 2 and heap[2][0] < second:
                second = heap[2][0]
            if remaining[group] == 1 or second <= mark + _EPS:
                break
            heappop(heap)
            plan((finish_at, mark, sample))
            ends[sample - sample_base] = finish_at
            remaining[group] -= 1
            offset -= prompts[group] - joins[group]
            progress = mark
            clock = finish_at
            pause = retire_s
            batch -= 1
        self.progress, self._context_offset, self._clock, self._pause, self._step_s = (
            progress,
            offset,
            clock,
            pause,
            step_s,
        )
        if planned and self.refused:
            self._ahead.add(self)  # the simulation confirms them before a change that may reopen admission
        else:
            self._ahead.discard(self)
        return finish_at

    def settle(self, now: float) -> None:
        """Bring the engine to ``now``: undo quiet finishes planned after it, report those before it."""
        planned = self._planned
        if planned and planned[-1][0] > now:
            rollouts, size = self.rollouts, self._group_size
            while planned and planned[-1][0] > now:
                _, mark, sample = planned.pop()
                heapq.heappush(self.in_flight, (mark, sample))
                rollouts.end[sample - rollouts.sample_base] = math.nan
                at = sample // size - rollouts.base
                rollouts.remaining[at] += 1
                self._context_offset += rollouts.prompt[at] - rollouts.join[at]
            if planned:  # resume just after the last finish that did happen
                self._clock, self.progress, self._pause = planned[-1][0], planned[-1][1], self._retire_s
            else:
                self.progress, self._clock, self._pause = self._plan_start
            self._step_s = self._segment_step_s()
        self._planned = []
        self._ahead.discard(self)
        self.advance(now)
        if len(planned) > self._reported:
            self.listener.retired(self, len(planned) - self._reported)
        self._reported = 0

    def has_past(self, now: float) -> bool:
        """Whether quiet finishes planned ahead lie at or before ``now`` that the listener has not been told of."""
        planned, reported = self._planned, self._reported
        return reported < len(planned) and planned[reported][0] <= now

    def confirm(self, now: float) -> None:
        """Tell the listener of the quiet finishes up to ``now`` without disturbing the plan."""
        past = bisect.bisect_right(self._planned, (now, math.inf, math.inf))
        if past > self._reported:
            self.listener.retired(self, past - self._reported)
            self._reported = past

    def _segment_step_s(self) -> float:
        """Decode-step time from now to the next finish, at the segment's mid context."""
        batch = len(self.in_flight)
        tokens = self.in_flight[0][0] - self.progress
        return self._decode_step(batch, batch * (self.progress + tokens * 0.5) + self._context_offset)

    def advance(self, now: float) -> None:
        """Account the wall time since the last update: pauses first, then decoding."""
        elapsed = (now - self._clock) * self.rate  # seconds of work done since
        self._clock = now
        if self._pause:
            used = min(self._pause, elapsed)
            self._pause -= used
            elapsed -= used
        if self.in_flight and elapsed > 0:
            self.progress += elapsed / self._step_s
