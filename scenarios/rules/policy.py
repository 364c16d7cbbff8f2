"""The schedule rules, written once: pure functions both backends call.

    engine:   sync_target()        ─► load a newer version now?
              admissible_groups()  ─► how many groups may start now, with the weights it holds?
    queue:    overflow()     ─► a finished group arrives at a full queue: drop how many oldest?
    learner:  select_batch() ─► which finished groups form step k's batch, which are too stale

Groups are numbered in the order they start, counting only *live* groups
(started and not dropped). Live group ``i`` belongs to batch ``i // B`` and
must be trained with staleness at most the schedule's bound η (0 for sync,
N for pipelined, ``max_staleness`` for streaming), so it may start only once
the engine holds a version ≥ ``i // B − η``:

* ``sync`` and ``pipelined`` generate batch k with *exactly* version
  max(0, k − η); the learner trains batch k at step k, so staleness is
  exactly min(k, η).
* ``streaming`` starts a group with whatever version ≥ that floor the engine
  holds (AReaL's admission rule); the learner takes the oldest finished groups
  first and drops any that would exceed η, so the bound holds even for a
  straggler that finishes after younger groups filled the batches before it.
  Without in-flight updates an engine loads new weights only when empty:
  ``refresh: lazy`` lets it run on until its weights are too old to start
  anything, then it drains; ``refresh: drain`` stops it admitting as soon as it
  is ``refresh_every`` versions behind, so it drains and loads.
* ``sync_every: k`` (verl's ``trigger_parameter_sync_step``): the learner's
  versions reach the engines only every k steps, so engines hold multiples of k.
* ``staleness_threshold: t`` (verl's rule instead of AReaL's): an engine holding
  version v may start groups up to ⌊(v + k·(1 + t))·B⌋, a share t of a sync window
  ahead of the batches the learner trains before the next sync; ``max_staleness``
  then only drops stragglers.

Each rule that differs between kinds asks the schedule (``scenarios/spec/schedules.py``: one class per
kind, no branching on ``kind``). No SimPy, torch or Ray here: the state is a handful of integers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from ..spec.scenario import Scenario


class FinishedGroup(NamedTuple):
    """A finished group waiting in the queue for the learner (one is made per finished group: a named tuple
    is several times cheaper to make than a frozen dataclass)."""

    group: int  # group id: the order in which groups started
    batch: int  # the step it was started for: batch_of(its live index at start)
    version: int  # oldest policy version among its tokens


@dataclass(frozen=True)
class BatchChoice:
    """What the learner does with the queue at one step: positions into the queue."""

    take: tuple[int, ...]  # groups that form the batch (empty: keep waiting)
    drop: tuple[int, ...]  # groups too stale to ever train


def batch_of(group: int, scenario: Scenario) -> int:
    """The learner step that a live group is meant for."""
    return group // scenario.batch_groups


def lowest_version(group: int, scenario: Scenario) -> int:
    """The oldest weights a live group may be generated with."""
    return max(0, batch_of(group, scenario) - scenario.staleness_bound)


def exact_versions(scenario: Scenario) -> bool:
    """Sync and pipelined generate each batch with one prescribed version."""
    return scenario.schedule.exact_versions


def admissible_groups(
    scenario: Scenario, *, engine_version: int, live_groups: int, queued_groups: int, latest_version: int = 0
) -> int:
    """How many more groups an engine holding ``engine_version`` may start now.

    Live group ``i`` needs ``lowest_version(i) ≤ engine_version``, i.e.
    ``i < (engine_version + η + 1) · B``; exact schedules also need the engine
    to hold precisely the next group's prescribed version. ``live_groups``
    counts groups started and not dropped; ``queued_groups`` finished groups
    not yet trained (a full queue under ``block`` stops generation);
    ``latest_version`` the learner's (``refresh: drain`` stops an engine that
    has fallen ``refresh_every`` versions behind it).
    """
    limit = admission_limit(
        scenario,
        engine_version=engine_version,
        live_groups=live_groups,
        queued_groups=queued_groups,
        latest_version=latest_version,
    )
    return max(0, limit - live_groups)


def admission_limit(
    scenario: Scenario, *, engine_version: int, live_groups: int, queued_groups: int, latest_version: int = 0
) -> int:
    """The live-group count up to which an engine holding ``engine_version`` may start groups now.

    It stays put while groups start (each one only raises ``live_groups``
    towards it), so a dispatcher handing out a burst computes it once per
    version; ``admissible_groups`` is the room left under it.
    """
    if exact_versions(scenario):
        if engine_version != lowest_version(live_groups, scenario):
            return live_groups
    else:
        queue_full = scenario.schedule.blocks(queued_groups, scenario.queue_capacity)
        if queue_full or draining(scenario, engine_version=engine_version, latest_version=latest_version):
            return live_groups
    window_end = scenario.schedule.admission_end(engine_version, scenario.batch_groups)
    run_end = scenario.run.steps * scenario.batch_groups  # no group beyond what the run trains
    return min(window_end, run_end)


def admission_key(scenario: Scenario, *, live_groups: int, queued_groups: int, latest_version: int) -> tuple[int, ...]:
    """All that ``admission_limit`` reads besides the engine's version: where two states' keys are equal, so
    are their limits at every version, so a dispatcher keeps the limits it worked out until the key changes.

    Exact schedules read the live groups (the next group's prescribed version). Streaming reads only whether
    the queue blocks and the latest version, and the live groups where admission is closed (a full queue,
    or ``refresh: drain``, whose closed limit is the live count itself).
    """
    schedule = scenario.schedule
    if schedule.exact_versions:
        return (live_groups,)
    closed = schedule.blocks(queued_groups, scenario.queue_capacity)
    return (int(closed), latest_version, live_groups if closed or schedule.may_drain else -1)


def reaches_engines(scenario: Scenario, version: int, first_version: int = 0) -> bool:
    """Whether a newly published version is synced to the engines: every ``sync_every`` steps (and the
    first weights of a run, always)."""
    return scenario.schedule.reaches_engines(version, first_version)


def draining(scenario: Scenario, *, engine_version: int, latest_version: int) -> bool:
    """``refresh: drain``: an engine this far behind starts nothing more; once empty it loads."""
    return scenario.schedule.draining(engine_version, latest_version)


def sync_target(
    scenario: Scenario, *, engine_version: int, latest_version: int, live_groups: int, in_flight: int
) -> int | None:
    """The version an engine should load now, or None to keep its weights."""
    if in_flight == 0 and live_groups >= scenario.run.steps * scenario.batch_groups:
        return None  # nothing left to generate with them
    if exact_versions(scenario):
        wanted = lowest_version(live_groups, scenario)
        if engine_version < wanted <= latest_version and in_flight == 0:
            return wanted
        return None
    if latest_version <= engine_version:
        return None
    if scenario.schedule.in_flight_updates or in_flight == 0:
        return latest_version
    return None


def overflow(scenario: Scenario, *, queued_groups: int) -> int:
    """How many of the oldest queued groups a newly finished group pushes out."""
    return scenario.schedule.overflow(queued_groups, scenario.queue_capacity)


def may_overflow(scenario: Scenario) -> bool:
    """Whether ``overflow`` can ever push a group out (``queue_policy: drop_oldest``): a constant of the
    scenario, which a caller may check once instead of asking ``overflow`` at every finished group."""
    return scenario.schedule.may_overflow


def select_batch(scenario: Scenario, queue: Sequence[FinishedGroup], step: int) -> BatchChoice:
    """Choose step ``step``'s batch from the finished groups, in queue order.

    Exact schedules take the groups of batch ``step`` once all of them are in.
    Streaming drops groups staler than the bound, then takes the oldest
    versions first (ties in queue order) once a full batch is fresh enough.
    """
    size = scenario.batch_groups
    if exact_versions(scenario):
        mine = tuple(pos for pos, item in enumerate(queue) if item.batch == step)
        return BatchChoice(take=mine if len(mine) == size else (), drop=())
    bound = scenario.staleness_bound
    drop = tuple(pos for pos, item in enumerate(queue) if step - item.version > bound)
    fresh = [pos for pos, item in enumerate(queue) if step - item.version <= bound]
    if len(fresh) < size:
        return BatchChoice(take=(), drop=drop)
    fresh.sort(key=lambda pos: queue[pos].version)  # stable: ties keep queue order
    return BatchChoice(take=tuple(sorted(fresh[:size])), drop=drop)
