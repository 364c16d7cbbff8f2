"""The coordinator: the executor's side of ``scenarios.rules.state``, in the learner process.

    actors ──StepFinished / Loaded──► receiver thread ─► on_messages ┐
       ▲                                                            ▼
       │                  engine_lost / engine_restored ─►  ScheduleState (queue, live groups, engines)
       │                     (executor.processes.restarts)                    │
       └──── StartGroups / LoadWeights ◄─ dispatch ◄────────────────┴── take_batch / publish (learner)

It holds one ``ScheduleState``, the very class the simulator holds, tells it
what happened (a sample finished, a group completed, an actor loaded weights,
the learner took a batch or published a version) and carries out what its
``dispatch`` answers: weights to send, groups to start. Around that it keeps
what only a real run has: the rollouts and rewards of each group, the weight
tensors of the versions still loadable, and the run's event rows. When an actor
dies (``executor.processes.restarts``), the groups it held unfinished are recorded as
``lost`` rows and go out again under their own ids (the work source hands back
the same requests), and its time down is a ``restart`` row.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ...scenarios.record.record import event_row
from ...scenarios.rules.actions import Load, Regenerate
from ...scenarios.rules.policy import FinishedGroup
from ...scenarios.rules.state import ScheduleState
from ...scenarios.spec.scenario import Scenario
from ..tasks.work import WorkSource
from .messages import (
    ActorFailed,
    EngineSteps,
    FinishedRollout,
    Loaded,
    LoadWeights,
    Result,
    RolloutDone,
    StartGroup,
    StartGroups,
    StepFinished,
)
from .weights import send_weights

WAIT_S = 0.2  # the learner re-checks the workers' health this often while it waits

SendWeights = Callable[[torch.Tensor, int], Any]  # (flat weights, actor rank) -> a handle with is_completed()


class WorkerFailed(RuntimeError):
    """An actor process died or reported an error."""


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
        commands: list[Any],
        clock: Callable[[], float],
        first_group: int = 0,
        first_version: int = 0,
        send: SendWeights = send_weights,
    ) -> None:
        self.scenario = scenario
        self.source = source
        self.commands = commands  # one queue per actor: put()
        self.clock = clock
        self.group_size = scenario.workload.samples_per_prompt
        # A resumed run counts the groups of the steps already trained as live.
        self.state = ScheduleState(scenario, len(commands), first_group=first_group, first_version=first_version)
        self.records: dict[int, GroupRecord] = {}
        self.rows: list[dict[str, Any]] = []
        self.engine_steps: list[dict[str, Any]] = []  # what each engine step did (engine_steps.parquet)
        self.failure: str | None = None
        self.tracebacks: dict[int, str] = {}  # per actor, what it reported before it died
        self._down_since: dict[int, float] = {}  # engines down, since when
        self._weights: dict[int, torch.Tensor] = {}
        self._send = send
        self._sends: dict[int, list[Any]] = {}  # per engine, weights on their way
        self._lock = threading.Condition()

    # Learner side.

    def publish(self, version: int, flat_weights: torch.Tensor) -> None:
        """A new version exists: keep it for actors that will load it, and let them react."""
        with self._lock:
            self._weights[version] = flat_weights
            for old in self.state.publish(version):
                self._weights.pop(old, None)
            self._dispatch()

    def take_batch(self, step: int, healthy: Callable[[], None]) -> list[GroupRecord]:
        """Block until the state forms step ``step``'s batch; ``healthy`` raises if a worker died."""
        with self._lock:
            while True:
                self._raise_failure()
                batch = self.try_take(step)
                if batch:
                    return batch
                self._lock.wait(WAIT_S)
                healthy()

    def try_take(self, step: int) -> list[GroupRecord]:
        """Step ``step``'s batch if the state can form it now (empty if not); drops what it drops."""
        with self._lock:
            taken = self.state.take(step)
            self._drop(taken.dropped)
            if taken.batch or taken.dropped:
                self._dispatch()  # the queue shrank, or fewer groups are live
            return [self.records.pop(item.group) for item in taken.batch]

    def versions_kept(self) -> dict[int, torch.Tensor]:
        """The flat weights of every version an actor may still load (for checkpoints)."""
        with self._lock:
            return dict(self._weights)

    def restore_versions(self, weights: dict[int, torch.Tensor]) -> None:
        with self._lock:
            self._weights.update(weights)
            self.state.keep_versions(list(weights))

    # Receiver side: one message from an actor.

    def on_message(self, message: Result) -> None:
        self.on_messages([message])

    def on_messages(self, messages: list[Result]) -> None:
        """Apply what the actors reported, then dispatch once (as the simulator does per instant)."""
        with self._lock:
            for message in messages:
                if isinstance(message, RolloutDone):
                    self._rollout_done(message.actor, message.group, message.rollout)
                elif isinstance(message, StepFinished):
                    for done in message.done:
                        self._rollout_done(done.actor, done.group, done.rollout)
                elif isinstance(message, Loaded):  # the state counted the version as the actor's already
                    self._row(message.actor, "sync", message.start, message.end, version=message.version)
                elif isinstance(message, EngineSteps):
                    worker = f"engine-{message.actor}"
                    self.engine_steps.extend({"worker": worker, **step._asdict()} for step in message.steps)
                elif isinstance(message, ActorFailed):  # its death follows; executor.processes.restarts decides
                    self.tracebacks[message.actor] = f":\n{message.traceback}"
            self._dispatch()
            self._lock.notify_all()

    # A death and a restart (``executor.processes.restarts``).

    def engine_lost(self, engine: int, died_at: float) -> None:
        """``engine``'s actor died at ``died_at``: the groups it held unfinished are lost (``lost`` rows, to its
        death) and go out again."""
        with self._lock:
            now = died_at
            lost = [r for r in self.records.values() if r.actor == engine and len(r.rollouts) < self.group_size]
            for record in lost:
                self.rows.extend(self._lost_rows(record, now))
                record.rollouts, record.start = [], now
            self.state.engine_lost(engine, [record.group for record in lost])
            self._sends.pop(engine, None)  # abandoned with its weight group
            self._down_since[engine] = now
            self._dispatch()
            self._lock.notify_all()

    def engine_restored(self, engine: int, died_at: float) -> None:
        """``engine``'s replacement is up: its time down is a ``restart`` row, and it takes work again."""
        with self._lock:
            self._down_since.pop(engine, None)
            self._row(engine, "restart", died_at, self.clock())
            self.state.engine_restored(engine)
            self._dispatch()
            self._lock.notify_all()

    def down(self) -> set[int]:
        with self._lock:
            return set(self.state.down)

    def fail(self, message: str) -> None:
        """End the run: the learner raises ``WorkerFailed(message)`` at its next wait."""
        with self._lock:
            self.failure = message
            self._lock.notify_all()

    # What the state says to do.

    def _dispatch(self) -> None:
        """Send the weights and start the groups that ``ScheduleState.dispatch`` asks for."""
        for action in self.state.dispatch():
            if isinstance(action, Load):
                self.commands[action.engine].put(LoadWeights(action.version))
                sending = self._send(self._weights[action.version], action.engine + 1)
                self._sends.setdefault(action.engine, []).append(sending)
                continue
            starts = []
            for group, batch in zip(action.groups, action.batches, strict=True):
                requests = self.source.requests(group)  # a regenerated group's own, as first drawn
                if isinstance(action, Regenerate):
                    self.records[group].actor, self.records[group].start = action.engine, self.clock()
                else:
                    self.records[group] = GroupRecord(group, action.engine, batch, self.clock(), requests[0].prompt)
                starts.append(StartGroup(group, requests))
            self.commands[action.engine].put(StartGroups(tuple(starts)))
        for engine, sends in self._sends.items():
            self._sends[engine] = [work for work in sends if not work.is_completed()]

    def _rollout_done(self, actor: int, group: int, rollout: FinishedRollout) -> None:
        self.state.samples_finished(actor)
        record = self.records[group]
        record.rollouts.append(rollout)
        if len(record.rollouts) < self.group_size:
            return
        record.rollouts.sort(key=lambda r: r.sample)
        record.rewards = [self.source.reward(group, r.sample, r) for r in record.rollouts]
        self._drop(self.state.group_finished(group, record.version))

    def _drop(self, items: tuple[FinishedGroup, ...]) -> None:
        """Record groups the state dropped: their rollouts were generated and will never be trained."""
        now = self.clock()
        for item in items:
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
        finished rollouts with step -1, samples still generating as ``unfinished`` spans cut at
        ``now`` (their token counts never came back)."""
        with self._lock:
            rows = list(self.rows)
            if cut_unfinished:
                rows.extend(event_row(engine, "restart", since, now) for engine, since in self._down_since.items())
                for record in self.records.values():
                    rows.extend(self._generate_rows(record, step=-1))
                    done = {rollout.sample for rollout in record.rollouts}
                    rows.extend(
                        event_row(record.actor, "unfinished", record.start, now, group=record.group, sample=sample)
                        for sample in range(self.group_size)
                        if sample not in done
                    )
            return rows

    def _generate_rows(self, record: GroupRecord, step: int) -> list[dict[str, Any]]:
        return [
            event_row(
                record.actor,
                "generate",
                segment.start,
                segment.end,
                step=step,
                version=segment.version,
                group=record.group,
                sample=rollout.sample,
                tokens=segment.tokens,
            )
            for rollout in record.rollouts
            for segment in rollout.segments
        ]

    def _lost_rows(self, record: GroupRecord, now: float) -> list[dict[str, Any]]:
        """One ``lost`` row per sample of a group lost with its engine: finished ones to their end, with
        their tokens; the others to ``now`` (their tokens never came back), or nothing for a group handed to
        the engine after it died (before its death was seen)."""
        finished = {rollout.sample: rollout for rollout in record.rollouts}
        rows = []
        for sample in range(self.group_size):
            rollout = finished.get(sample)
            end, tokens = (rollout.end, len(rollout.tokens)) if rollout else (max(now, record.start), 0)
            version = min(rollout.versions) if rollout and rollout.versions else -1
            rows.append(
                event_row(
                    record.actor,
                    "lost",
                    record.start,
                    end,
                    version=version,
                    group=record.group,
                    sample=sample,
                    tokens=tokens,
                )
            )
        return rows

    def _row(self, worker: int | str, kind: str, start: float, end: float, **columns: int) -> None:
        self.rows.append(event_row(worker, kind, start, end, **columns))
