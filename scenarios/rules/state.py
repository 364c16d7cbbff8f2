"""The schedule state both backends hold: what the policy reads, and what it says to do.

    backend event                      ScheduleState                         backend acts
    ─────────────                      ─────────────                         ────────────
    engine finished samples ──► samples_finished ─┐
    a group's last sample   ──► group_finished ───┤  (queue overflow: dropped groups)
    learner wants step k    ──► take(k) ──────────┼─► dispatch() ──► [Load(engine, v), Start(engine, groups)]
                                                  │  (taken and dropped groups)
    learner made version v  ──► publish(v) ───────┤  (versions nobody needs any more)
    an engine died          ──► engine_lost ──────┤  (its unfinished groups: Regenerate actions later)
    its replacement is up   ──► engine_restored ──┘

``scenarios.rules.policy`` is the rulebook and ``scenarios.rules.actions`` the answers; this class applies it to one run's state
(latest version, live groups, the queue of finished groups, each engine's
version and load, the weight versions still needed). The simulator and the
executor's coordinator each hold one and call the same methods, so no queue or
dispatch bookkeeping is written twice. No SimPy, torch or Ray here.

**Dispatch** is what a router in front of several inference engines does: the
admissible groups of a burst are handed out one at a time to the least-loaded
engine that can take one (in-flight samples, ties to the lower index), so a
burst of 4 groups on 2 empty engines is split 2 + 2. A group (the
``samples_per_prompt`` completions of one prompt) stays on one engine: its
samples share the prompt's KV prefix, and the group's rollouts finish on one
engine's clock. Group ids are the start order (so batch k's groups have the
ids of batch k in exact schedules), and the Start actions come in that order:
a backend that applies them in order draws lengths and prompts in id order.

**Lost engines** (``scenarios.spec.failures``): an engine that dies is down until ``engine_restored``; the
groups it held unfinished go out again, before any new group, as ``Regenerate`` actions, under their
own ids (a backend reuses the group's prompt and lengths). A restored engine holds no weights
(``NO_VERSION``) until a Load.
"""

from __future__ import annotations

import heapq
import itertools

from ..compiled import mypyc_attr
from ..spec import failures
from ..spec.failures import NO_VERSION
from ..spec.scenario import Scenario
from . import policy
from .actions import Action, Dispatch, Load, LoadEmpty, Regenerate, Start, Taken
from .engine_index import EngineIndex, EngineLoad
from .policy import FinishedGroup


# Compiled (``asyncrl.scenarios.compiled``), yet open to subclasses: the conformance test traces it.
@mypyc_attr(allow_interpreted_subclasses=True)
class ScheduleState:
    """Latest version, live groups, the queue and the engines; methods apply ``scenarios.rules.policy``.

    ``first_group`` and ``first_version`` let a resumed run start where the
    checkpoint left off (groups of the steps already trained count as live).
    An ``EngineIndex`` (``scenarios.rules.engine_index``) keeps ``dispatch`` from scanning every engine on every
    event: the state files an engine there whenever its load or version changes.
    """

    def __init__(self, scenario: Scenario, engines: int, first_group: int = 0, first_version: int = 0) -> None:
        self.use_scenario(scenario)
        self.first_version = first_version
        self.latest_version = first_version  # the newest version synced to the engines
        self.live_groups = first_group  # started and not dropped: the next group's live index
        self.next_group = first_group  # id of the next group to start
        self.queue: list[FinishedGroup] = []
        self.engines = [EngineLoad(version=first_version) for _ in range(engines)]
        self.kept_versions: set[int] = set()  # published and still loadable
        self._batch_of_group: dict[int, int] = {}  # started, not finished
        self._queued_per_batch: dict[int, int] = {}
        self._group_size = scenario.workload.samples_per_prompt
        self._capacity = scenario.engine_concurrency
        self._exact = policy.exact_versions(scenario)
        self._in_flight_updates = scenario.schedule.in_flight_updates
        self.down: set[int] = set()  # engines lost and not restored yet
        self.lost: list[int] = []  # groups lost with their engine, not started again yet, in id order
        self.index = EngineIndex(self.engines, self.down, self._capacity, self._group_size, first_version)

    def use_scenario(self, scenario: Scenario) -> None:
        """The scenario the policy reads; a simulation that ends a run early replaces it with one of fewer
        steps, so what is worked out from it once is worked out again here. (A method, not a property
        setter: compiled, a property misreads on a subclass the tests trace, ``asyncrl.scenarios.compiled``.)"""
        self.scenario = scenario
        self._may_overflow = policy.may_overflow(scenario)  # else no finished group ever pushes one out
        self._limit_reads: tuple[int, int, int] | None = None  # (live, queued, latest) the key was worked out for
        self._limit_key: tuple[int, ...] | None = None  # policy.admission_key of the cached limits
        self._limit_cache: dict[int, int] = {}  # version -> policy.admission_limit

    # What happened.

    def samples_finished(self, engine: int, count: int = 1) -> None:
        """``count`` samples on ``engine`` finished (their slots are free again)."""
        state = self.engines[engine]
        had_room = self._capacity - state.in_flight >= self._group_size
        state.in_flight -= count
        if not had_room or state.in_flight == 0:  # otherwise no index changes
            self.index.file(engine)

    def group_finished(self, group: int, version: int) -> tuple[FinishedGroup, ...]:
        """The last sample of ``group`` finished; queue it. Returns the groups a full queue pushed out."""
        dropped: tuple[FinishedGroup, ...] = ()
        if self.overflows():
            dropped = tuple(self.queue[: policy.overflow(self.scenario, queued_groups=len(self.queue))])
            self._forget(dropped)
        batch = self._batch_of_group.pop(group)
        self.queue.append(FinishedGroup(group=group, batch=batch, version=version))
        self._queued_per_batch[batch] = self._queued_per_batch.get(batch, 0) + 1
        return dropped

    def overflows(self) -> bool:
        """Whether a group finishing now pushes queued groups out (``policy.overflow``)."""
        return self._may_overflow and policy.overflow(self.scenario, queued_groups=len(self.queue)) > 0

    def publish(self, version: int) -> list[int]:
        """The learner made ``version``; returns the versions no engine may load any more (``version``
        itself when it is not synced to the engines: ``policy.reaches_engines``)."""
        if not policy.reaches_engines(self.scenario, version, self.first_version):
            return [version]
        self.latest_version = version
        self.kept_versions.add(version)
        oldest_needed = version - self.scenario.staleness_bound
        stale = sorted(v for v in self.kept_versions if v < oldest_needed)
        self.kept_versions.difference_update(stale)
        return stale  # the indexes do not depend on the latest version: ``_loads`` compares against it

    def engine_lost(self, engine: int, groups: list[int]) -> None:
        """``engine`` died with ``groups`` (started on it, not finished): they wait to be generated again;
        it takes nothing until ``engine_restored``."""
        state = self.engines[engine]
        state.in_flight, state.version = 0, NO_VERSION
        self.down.add(engine)
        self.lost = sorted([*self.lost, *groups])
        self.index.file(engine)

    def engine_restored(self, engine: int) -> None:
        """The replacement of a lost engine is up, with no weights yet: the next dispatch loads it."""
        self.down.discard(engine)
        self.index.file(engine)

    def keep_versions(self, versions: list[int]) -> None:
        """Versions a resumed run brought back from its checkpoint."""
        self.kept_versions.update(versions)

    def take(self, step: int) -> Taken:
        """Step ``step``'s batch if the policy can form it now, and the groups it drops."""
        if not self.may_be_ready(step):
            return Taken()
        choice = policy.select_batch(self.scenario, self.queue, step)
        batch = tuple(self.queue[pos] for pos in choice.take)
        dropped = tuple(self.queue[pos] for pos in choice.drop)
        self._forget(dropped)
        self._remove(batch)
        return Taken(batch=batch, dropped=dropped)

    # What to do.

    def dispatch(self) -> list[Action]:
        """Lost groups first (with the loads they need), then loads for engines whose weights should
        change, in engine order, then starts for the admissible groups."""
        return self.dispatch_grouped().actions()

    def dispatch_grouped(self) -> Dispatch:
        """``dispatch``'s decision with the loads of engines holding nothing grouped by version (``LoadEmpty``):
        on a large cluster most engines may be idle, and a publish moves them all."""
        regenerate = self._regenerate() if self.lost else []
        loads, load_empty = self._loads()
        return Dispatch(regenerate, loads, load_empty, self._split())

    def _loads(self) -> tuple[list[Load], list[LoadEmpty]]:
        """The weight loads due now: ``policy.sync_target`` once per (version, empty) class of the engines behind
        the latest version (a load changes no other engine's target, so they are decided together). Engines
        with samples in flight load one by one, in engine order; the empty ones of a class together."""
        moving: list[tuple[tuple[int, bool], int, tuple[int, ...]]] = []  # (class, target, its engines)
        latest, any_load = self.latest_version, self._in_flight_updates
        for key, engines in self.index.classes.items():
            version, empty = key
            if version >= latest or not (empty or any_load):
                continue
            target = self.sync_target(next(iter(engines)))
            if target is not None and target in self.kept_versions:
                moving.append((key, target, tuple(sorted(engines))))
        if not moving:  # (most dispatches)
            return [], []
        loads: list[Load] = []
        load_empty: list[LoadEmpty] = []
        for key, target, members in moving:
            if key[1]:
                self.index.move_empty(key, target, members)
                load_empty.append(LoadEmpty(members, target))
                continue
            for index in members:
                self.engines[index].version = target
                self.index.file(index)
                loads.append(Load(index, target))
        loads.sort(key=lambda load: load.engine)
        return loads, load_empty

    def sync_target(self, engine: int) -> int | None:
        """The version ``engine`` should load now, or None (``policy.sync_target`` on its state)."""
        state = self.engines[engine]
        return policy.sync_target(
            self.scenario,
            engine_version=state.version,
            latest_version=self.latest_version,
            live_groups=self.live_groups,
            in_flight=state.in_flight,
        )

    def admissible(self, engine: int) -> int:
        """Groups the policy lets ``engine`` start now, room aside."""
        return max(0, self._limit_at(self.engines[engine].version) - self.live_groups)

    def _limit_at(self, version: int) -> int:
        return policy.admission_limit(
            self.scenario,
            engine_version=version,
            live_groups=self.live_groups,
            queued_groups=len(self.queue),
            latest_version=self.latest_version,
        )

    def _split(self) -> list[Start]:
        """Hand admissible groups one at a time to the least-loaded engine that can take one."""
        limits = self._limits()  # fixed while groups start
        live, engines_of = self.live_groups, self.engines
        takers: list[tuple[int, int]] = []
        for version, engines in self.index.room.items():
            room = limits[version] - live  # groups engines of this version may still take
            if room <= 0:
                continue
            empty = self.index.classes.get((version, True))
            if empty is not None and len(empty) > room:
                # Empty engines all carry load 0 and are taken lowest index first, each once before any twice:
                # at most ``room`` of them can get a group (most engines of a large cluster are empty).
                takers.extend((engines_of[index].in_flight, index) for index in engines - empty)
                takers.extend((0, index) for index in heapq.nsmallest(room, empty))
            else:
                takers.extend((engines_of[index].in_flight, index) for index in engines)
        if not takers:
            return []
        heapq.heapify(takers)
        chosen: list[int] = []  # the engine of each group, in start order
        group_size, capacity = self._group_size, self._capacity
        while takers:
            load, index = takers[0]
            engine = self.engines[index]
            if self.live_groups + len(chosen) >= limits[engine.version]:
                heapq.heappop(takers)  # admission only tightens as groups start
                continue
            chosen.append(index)
            load += group_size
            engine.in_flight = load
            if capacity - load >= group_size:
                heapq.heapreplace(takers, (load, index))
            else:
                heapq.heappop(takers)
        return self._starts(chosen)

    def _limits(self) -> dict[int, int]:
        """``_limit_at`` of every version an engine with room holds. ``policy.admission_limit`` is a pure function
        of the version, the scenario and what ``policy.admission_key`` names, so the limits are kept until one
        of those changes (most dispatches follow a finish that changed neither). The key itself is worked out
        again only when what it reads has changed (a new scenario drops it: ``use_scenario``)."""
        reads = (self.live_groups, len(self.queue), self.latest_version)
        if reads != self._limit_reads:
            self._limit_reads = reads
            key = policy.admission_key(
                self.scenario, live_groups=reads[0], queued_groups=reads[1], latest_version=reads[2]
            )
            if key != self._limit_key:
                self._limit_key, self._limit_cache = key, {}
        cache = self._limit_cache
        for version in self.index.room:
            if version not in cache:
                cache[version] = self._limit_at(version)
        return cache

    def _starts(self, chosen: list[int]) -> list[Start]:
        """Number the chosen groups in start order; one Start per run of groups on the same engine."""
        starts: list[Start] = []
        for index, run in itertools.groupby(chosen):  # each Start built once (a burst may give one engine many)
            groups: list[int] = []
            batches: list[int] = []
            for _ in run:
                group, batch = self.next_group, policy.batch_of(self.live_groups, self.scenario)
                self.next_group += 1
                self.live_groups += 1
                self._batch_of_group[group] = batch
                groups.append(group)
                batches.append(batch)
            starts.append(Start(index, tuple(groups), tuple(batches)))
        for index in set(chosen):
            self.index.file(index)
        return starts

    def _regenerate(self) -> list[Load | Regenerate]:
        """Hand lost groups, oldest first, to the least-loaded engine that may generate them again
        (``failures.may_regenerate``), loading an idle engine when none may; the rest wait."""
        actions: list[Load | Regenerate] = []
        waiting = []
        for group in self.lost:
            batch = self._batch_of_group[group]
            engine = self._regenerator(batch, actions)
            if engine is None:
                waiting.append(group)
                continue
            self.engines[engine].in_flight += self._group_size
            self.index.file(engine)
            last = actions[-1] if actions else None
            if isinstance(last, Regenerate) and last.engine == engine:
                actions[-1] = Regenerate(engine, (*last.groups, group), (*last.batches, batch))
            else:
                actions.append(Regenerate(engine, (group,), (batch,)))
        self.lost = waiting
        return actions

    def _regenerator(self, batch: int, actions: list[Load | Regenerate]) -> int | None:
        """The engine to generate a lost group of ``batch`` again, after a Load appended to ``actions`` if
        it needs one; None while none can."""
        bound, exact, size = self.scenario.staleness_bound, self._exact, self._group_size
        up = [index for index in range(len(self.engines)) if index not in self.down]
        fits = [
            index
            for index in up
            if self._capacity - self.engines[index].in_flight >= size
            and failures.may_regenerate(
                exact=exact,
                engine_version=self.engines[index].version,
                batch=batch,
                bound=bound,
                draining=policy.draining(
                    self.scenario, engine_version=self.engines[index].version, latest_version=self.latest_version
                ),
            )
        ]
        if fits:
            return min(fits, key=lambda index: (self.engines[index].in_flight, index))
        version = failures.regeneration_version(
            exact=exact, batch=batch, bound=bound, latest_version=self.latest_version
        )
        idle = [index for index in up if self.engines[index].in_flight == 0]
        if not idle or version not in self.kept_versions:
            return None
        engine = idle[0]
        self.engines[engine].version = version
        actions.append(Load(engine, version))
        return engine

    # Bookkeeping.

    def may_be_ready(self, step: int) -> bool:
        """Cheap precondition for ``select_batch`` (``take`` does nothing without it)."""
        if self._exact:
            return self._queued_per_batch.get(step, 0) >= self.scenario.batch_groups
        return len(self.queue) >= self.scenario.batch_groups

    def _remove(self, groups: tuple[FinishedGroup, ...]) -> None:
        if not groups:
            return
        leaving = {item.group for item in groups}  # one pass, in queue order (a group is queued once)
        self.queue = [item for item in self.queue if item.group not in leaving]
        for item in groups:
            self._queued_per_batch[item.batch] -= 1

    def _forget(self, groups: tuple[FinishedGroup, ...]) -> None:
        """Drop queued groups: they leave the queue and no longer count as live."""
        self._remove(groups)
        self.live_groups -= len(groups)
