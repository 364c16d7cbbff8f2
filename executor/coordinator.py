"""The coordinator: the executor's side of ``scenarios.policy``, in the learner process.

    actors ──results──► receiver thread ─► on_message ─► queue of finished groups ─► take_batch (learner)
       ▲                                      │                                        │
       └────────── commands ◄── dispatch ◄────┴──────────── publish(version) ◄─────────┘

It holds the state the policy functions read (latest version, live groups,
the queue, each actor's version and rollouts in flight) and acts on their
answers exactly as the simulator does: load weights when ``sync_target`` says
so, start as many groups as ``admissible_groups`` allows (split evenly over
actors with room), drop what ``overflow`` and ``select_batch`` drop. It also
keeps the run's event rows.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.queues import Queue
from typing import Any

import torch

from executor.actor import FinishedRollout
from executor.weights import send_weights
from executor.work import WorkSource
from scenarios import policy
from scenarios.policy import FinishedGroup
from scenarios.scenario import Scenario

WAIT_S = 0.2  # the learner re-checks the workers' health this often while it waits


class WorkerFailed(RuntimeError):
    """An actor process died or reported an error."""


@dataclass
class ActorState:
    version: int = 0
    in_flight: int = 0  # samples started and not reported back
    loading: bool = False


@dataclass
class GroupRecord:
    """A group from start to training: who generated it, its rollouts and rewards."""

    group: int
    actor: int
    batch: int
    start: float
    prompt: list[int]
    rollouts: list[FinishedRollout] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)

    @property
    def version(self) -> int:
        """Oldest policy version among its tokens."""
        return min((min(r.versions) for r in self.rollouts if r.versions), default=0)


class Coordinator:
    def __init__(
        self,
        scenario: Scenario,
        source: WorkSource,
        commands: list[Queue],
        clock: Callable[[], float],
        first_group: int = 0,
        first_version: int = 0,
    ) -> None:
        self.scenario = scenario
        self.source = source
        self.commands = commands
        self.clock = clock
        self.group_size = scenario.workload.samples_per_prompt
        self.actors = [ActorState(version=first_version) for _ in commands]
        self.latest_version = first_version
        self.live_groups = first_group  # a resumed run counts the groups of the steps already trained
        self.next_group = first_group
        self.queue: list[FinishedGroup] = []
        self.records: dict[int, GroupRecord] = {}
        self.rows: list[dict[str, Any]] = []
        self.failure: str | None = None
        self._weights: dict[int, torch.Tensor] = {}
        self._sends: list[Any] = []
        self._lock = threading.Condition()

    # Learner side.

    def publish(self, version: int, flat_weights: torch.Tensor) -> None:
        """A new version exists: keep it for actors that will load it, and let them react."""
        with self._lock:
            self._weights[version] = flat_weights
            self.latest_version = version
            oldest_needed = version - self.scenario.staleness_bound
            for old in [v for v in self._weights if v < oldest_needed]:
                del self._weights[old]
            self._dispatch()

    def take_batch(self, step: int, healthy: Callable[[], None]) -> list[GroupRecord]:
        """Block until the policy forms step ``step``'s batch; ``healthy`` raises if a worker died."""
        with self._lock:
            while True:
                self._raise_failure()
                choice = policy.select_batch(self.scenario, self.queue, step)
                taken = [self.queue[pos] for pos in choice.take]
                if choice.drop:
                    self._drop([self.queue[pos] for pos in choice.drop])
                if taken:
                    for item in taken:
                        self.queue.remove(item)
                    self._dispatch()
                    return [self.records.pop(item.group) for item in taken]
                if choice.drop:
                    self._dispatch()
                self._lock.wait(WAIT_S)
                healthy()

    def versions_kept(self) -> dict[int, torch.Tensor]:
        """The flat weights of every version an actor may still load (for checkpoints)."""
        with self._lock:
            return dict(self._weights)

    def restore_versions(self, weights: dict[int, torch.Tensor]) -> None:
        with self._lock:
            self._weights.update(weights)

    # Receiver side: one message from an actor.

    def on_message(self, message: tuple[Any, ...]) -> None:
        kind = message[0]
        with self._lock:
            if kind == "group":
                self._group_finished(message[1], message[2], message[3])
            elif kind == "loaded":
                _, actor, version, start, end = message
                self.actors[actor].version, self.actors[actor].loading = version, False
                self._row(actor, "sync", start, end, version=version)
            elif kind == "error":
                self.failure = f"actor {message[1]} failed:\n{message[2]}"
            self._dispatch()
            self._lock.notify_all()

    # Policy decisions.

    def _dispatch(self) -> None:
        """Ask the policy, for every actor, whether to load weights or start groups."""
        for index, actor in enumerate(self.actors):
            if actor.loading:
                continue
            target = policy.sync_target(
                self.scenario,
                engine_version=actor.version,
                latest_version=self.latest_version,
                live_groups=self.live_groups,
                in_flight=actor.in_flight,
            )
            if target is not None and target in self._weights:
                actor.loading = True
                self.commands[index].put(("load", target))
                self._sends.append(send_weights(self._weights[target], index + 1))
                continue
            self._start_groups(index, actor)
        self._sends = [work for work in self._sends if not work.is_completed()]

    def _start_groups(self, index: int, actor: ActorState) -> None:
        room = (self.scenario.engine_concurrency - actor.in_flight) // self.group_size
        if room <= 0:
            return
        admissible = policy.admissible_groups(
            self.scenario, engine_version=actor.version, live_groups=self.live_groups, queued_groups=len(self.queue)
        )
        with_room = sum(1 for a in self.actors if self.scenario.engine_concurrency - a.in_flight >= self.group_size)
        share = admissible if admissible <= 1 else -(-admissible // max(1, with_room))
        for _ in range(min(room, share)):
            group = self.next_group
            batch = policy.batch_of(self.live_groups, self.scenario)
            self.next_group += 1
            self.live_groups += 1
            requests = self.source.requests(group)
            self.records[group] = GroupRecord(group, index, batch, self.clock(), requests[0].prompt)
            self.commands[index].put(("start", group, requests))
            actor.in_flight += self.group_size

    def _group_finished(self, actor: int, group: int, rollouts: list[FinishedRollout]) -> None:
        self.actors[actor].in_flight -= self.group_size
        record = self.records[group]
        record.rollouts = rollouts
        record.rewards = [self.source.reward(group, r.sample, r) for r in rollouts]
        pushed_out = policy.overflow(self.scenario, queued_groups=len(self.queue))
        if pushed_out:
            self._drop(self.queue[:pushed_out])
        self.queue.append(FinishedGroup(group=group, batch=record.batch, version=record.version))

    def _drop(self, items: list[FinishedGroup]) -> None:
        now = self.clock()
        for item in items:
            self.queue.remove(item)
            record = self.records.pop(item.group)
            self.source.forget(item.group)
            self.rows.extend(self._generate_rows(record, step=-1))
            for rollout in record.rollouts:
                self._row(
                    "queue",
                    "drop",
                    now,
                    now,
                    version=record.version,
                    group=item.group,
                    sample=rollout.sample,
                    tokens=len(rollout.tokens),
                )
        self.live_groups -= len(items)

    def _raise_failure(self) -> None:
        if self.failure:
            raise WorkerFailed(self.failure)

    # Event rows.

    def generate_rows(self, record: GroupRecord, step: int) -> None:
        """Record one row per (rollout, version it saw); ``step`` trained it (-1: none)."""
        with self._lock:
            self.rows.extend(self._generate_rows(record, step))

    def train_row(self, step: int, start: float, end: float, tokens: int) -> None:
        with self._lock:
            self._row("learner", "train", start, end, step=step, version=step, tokens=tokens)

    def event_rows(self, now: float, cut_unfinished: bool) -> list[dict[str, Any]]:
        """Every row so far; with ``cut_unfinished``, also the groups not trained by ``now``:
        finished ones with step -1, still generating ones as ``unfinished`` spans cut at ``now``
        (their token counts never came back)."""
        with self._lock:
            rows = list(self.rows)
            if cut_unfinished:
                for record in self.records.values():
                    if record.rollouts:
                        rows.extend(self._generate_rows(record, step=-1))
                    else:
                        rows.extend(
                            _event_row(record.actor, "unfinished", record.start, now, group=record.group, sample=sample)
                            for sample in range(self.group_size)
                        )
            return rows

    def _generate_rows(self, record: GroupRecord, step: int) -> list[dict[str, Any]]:
        return [
            _event_row(record.actor, "generate", start, end, step, version, record.group, rollout.sample, tokens)
            for rollout in record.rollouts
            for version, start, end, tokens in rollout.segments
        ]

    def _row(self, worker: int | str, kind: str, start: float, end: float, **columns: int) -> None:
        self.rows.append(_event_row(worker, kind, start, end, **columns))


def _event_row(
    worker: int | str,
    kind: str,
    start: float,
    end: float,
    step: int = -1,
    version: int = -1,
    group: int = -1,
    sample: int = -1,
    tokens: int = 0,
) -> dict[str, Any]:
    """One row of the run's event table (``scenarios.record.EVENT_COLUMNS``)."""
    return {
        "worker": f"engine-{worker}" if isinstance(worker, int) else worker,
        "role": "training" if kind == "train" else "generation",
        "kind": kind,
        "start": start,
        "end": end,
        "step": step,
        "version": version,
        "group": group,
        "sample": sample,
        "tokens": tokens,
    }
