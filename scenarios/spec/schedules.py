"""The schedules: one class per kind, each with its own rules and its own label.

    schedule: {kind: streaming, max_staleness: 2}  ─► Schedule (the union tagged by ``kind``)
        SyncSchedule | PipelinedSchedule | StreamingSchedule
            .staleness_bound    0 | N | η
            .exact_versions     each batch generated with one prescribed version (sync, pipelined)
            .label              ``sync`` | ``pipelined-2`` | ``streaming-2`` | ``streaming-2-inflight``
            .admission_end(), .draining(), .blocks(), .overflow(), .reaches_engines(), .queue_groups()
    "pipelined-2" ─► parse_label ─► ScheduleLabel(kind, bound, in_flight) ─► .fields / .overrides

A kind is registered once, as a member of ``Schedule`` (``SCHEDULES`` maps each kind to its class, and
the label parser reads it); ``scenarios.rules.policy`` (the rulebook both backends call) asks the schedule
instead of branching on ``kind``.

**The label** is what a user types to ``asyncrl study --schedules`` and what every table, figure title
and report prints: ``sync``; ``pipelined-N`` (N ≥ 1, ``off_policy_steps``); ``streaming-η`` or
``streaming-η-inflight`` (η ≥ 0, ``max_staleness``, with ``in_flight_updates``). It names the kind, the
staleness bound and in-flight updates; the finer streaming settings (refresh, sync_every, the queue,
verl's threshold) are not part of it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import cached_property
from typing import Annotated, Any, ClassVar, Literal, get_args

from pydantic import Field, ValidationError, model_validator

from ..files.limits import Concurrency, NonNegativeFloat, NonNegativeInt, PositiveInt
from .sections import Section

IN_FLIGHT_SUFFIX = "-inflight"
LABEL_FORMS = "sync, pipelined-N (N ≥ 1), streaming-η or streaming-η-inflight (η ≥ 0)"
_LABEL = re.compile(r"^([a-z]+)(?:-(\d+))?(-inflight)?$")  # kind, bound, in-flight: checked against SCHEDULES


class LabelError(ValueError):
    """A label that names no schedule; the message says why (the caller names its flag)."""


class UnknownLabel(LabelError):
    """A text not of any label's form (``LABEL_FORMS``)."""


class _ScheduleBase(Section):
    """What every schedule has, and the behaviour of the exact ones (each batch with one version)."""

    #: Each batch is generated with exactly one prescribed version (sync, pipelined).
    exact_versions: ClassVar[bool] = True
    #: Generation and training may time-share the same devices (``cluster.colocated``).
    may_colocate: ClassVar[bool] = False
    #: The field that holds the staleness bound (none: the bound is 0, and the label has none).
    bound_field: ClassVar[str | None] = None
    #: What a label whose bound the field refuses is told.
    bound_refused: ClassVar[str] = "the bound is out of range"

    max_concurrency: Concurrency | None = Field(
        None,
        description="rollouts in flight per engine; unset: the KV cache that fits next to the weights in "
        "`cluster.gpu_memory_utilization` of the engine's memory, for rollouts of mean length, at most vLLM's "
        "default `max_num_seqs` (1,024 on a device of 70 GiB or more that is not an A100, else 256)",
    )

    @cached_property
    def staleness_bound(self) -> int:
        """Most learner steps a trained sample may lag: 0, N (``off_policy_steps``) or η (``max_staleness``)."""
        return getattr(self, self.bound_field) if self.bound_field else 0

    @property
    def label(self) -> str:
        """``sync``, ``pipelined-N``, ``streaming-η`` or ``streaming-η-inflight`` (see the module docstring)."""
        return schedule_label(self.kind, self.staleness_bound, self.in_flight_updates)  # type: ignore[attr-defined]

    @property
    def step_period(self) -> int:
        """Learner steps after which the run's step times can repeat: exact schedules generate batch k
        with version k − η, so once generation outruns training the batches come in waves of η + 1 (a
        pipelined-2 run takes one long step and two short ones, over and over)."""
        return self.staleness_bound + 1

    def queue_groups(self, batch_groups: int) -> int:
        """Finished groups the queue holds before its policy applies: one batch."""
        return batch_groups

    def admission_end(self, engine_version: int, batch_groups: int) -> int:
        """The live-group count below which an engine holding ``engine_version`` may start groups:
        every group it can still train within the staleness bound."""
        return (engine_version + self.staleness_bound + 1) * batch_groups

    def blocks(self, queued_groups: int, capacity: int) -> bool:
        """A full queue stops generation (exact schedules never queue past their batch)."""
        return False

    def overflow(self, queued_groups: int, capacity: int) -> int:
        """How many of the oldest queued groups a newly finished group pushes out."""
        return 0

    @property
    def may_overflow(self) -> bool:
        """Whether ``overflow`` can ever be more than 0."""
        return False

    def draining(self, engine_version: int, latest_version: int) -> bool:
        """An engine this far behind the learner starts nothing more until it has loaded."""
        return False

    @property
    def may_drain(self) -> bool:
        """Whether ``draining`` can ever hold."""
        return False

    def reaches_engines(self, version: int, first_version: int = 0) -> bool:
        """Whether a newly published version is synced to the engines."""
        return True

    def resolved_fields(self, queue_capacity: int) -> dict[str, Any]:
        """Defaulted fields a run record writes out besides ``max_concurrency``."""
        return {}


class _ExactSchedule(_ScheduleBase):
    """Sync and pipelined: each batch generated with one version, synced at every step, never in flight."""

    in_flight_updates: ClassVar[bool] = False
    kv_on_update: ClassVar[str] = "keep"  # (no rollout is in flight at a load)
    sync_every: ClassVar[int] = 1


class SyncSchedule(_ExactSchedule):
    """Generate a batch with version v, train on it, sync, repeat."""

    may_colocate: ClassVar[bool] = True

    kind: Literal["sync"]


class PipelinedSchedule(_ExactSchedule):
    """Batch-level overlap: the batch trained at step k was generated with version k − N."""

    bound_field: ClassVar[str | None] = "off_policy_steps"
    bound_refused: ClassVar[str] = "a pipelined schedule is at least 1 step off-policy"

    kind: Literal["pipelined"]
    off_policy_steps: PositiveInt = Field(
        1, description="the batch trained at step k was generated with version k − N (N, in learner steps)"
    )


class StreamingSchedule(_ScheduleBase):
    """Continuous generation with admission control on staleness."""

    exact_versions: ClassVar[bool] = False
    bound_field: ClassVar[str | None] = "max_staleness"

    kind: Literal["streaming"]
    max_staleness: NonNegativeInt = Field(1, description="no trained sample is staler than this (η, in learner steps)")
    in_flight_updates: bool = Field(False, description="new weights reach unfinished rollouts")
    kv_on_update: Literal["keep", "recompute"] = Field(
        "keep",
        description="with in-flight updates, what an engine does with its unfinished rollouts' cached keys and "
        "values when new weights arrive: `keep` them (PipelineRL, NeMo-RL) or `recompute` them with the new "
        "weights, a prefill of every unfinished rollout's prompt and tokens so far before decoding goes on "
        "(AReaL's interruptible rollout; verl's and OpenRLHF's partial rollouts, aborted and resumed)",
    )
    queue_capacity: PositiveInt | None = Field(
        None,
        description="finished groups held for the learner; unset: one batch, or under verl's rule "
        "(`staleness_threshold`) the window generation may run ahead",
    )
    queue_policy: Literal["block", "drop_oldest"] = Field(
        "block", description="when the queue is full: `block` (generation waits) or `drop_oldest`"
    )
    refresh: Literal["lazy", "drain"] = Field(
        "lazy",
        description="without in-flight updates, when an engine takes new weights: `lazy` (once empty, or once "
        "its weights are too old to start anything) or `drain` (stop admitting once `refresh_every` versions "
        "behind, finish what runs, load)",
    )
    refresh_every: PositiveInt = Field(
        1, description="with `refresh: drain`: versions an engine may fall behind before it drains"
    )
    sync_every: PositiveInt = Field(
        1,
        description="learner steps between two weight syncs to the engines, which only hold versions that are "
        "multiples of it (verl: `async_training.trigger_parameter_sync_step`)",
    )
    staleness_threshold: NonNegativeFloat | None = Field(
        None,
        description="verl's admission rule instead of AReaL's: an engine at version v starts groups up to "
        "(v + `sync_every` · (1 + this)) batches, this share of a sync window ahead; `max_staleness` then only "
        "drops stragglers, and the queue holds that window (verl: `async_training.staleness_threshold`, "
        "docs/verl.md); unset: AReaL's rule (`max_staleness`)",
    )

    @model_validator(mode="after")
    def _refresh_needs_no_in_flight_updates(self) -> StreamingSchedule:
        if self.in_flight_updates and self.refresh == "drain":
            raise ValueError("refresh: drain is for engines without in_flight_updates (those load at once)")
        if self.kv_on_update == "recompute" and not self.in_flight_updates:
            raise ValueError(
                "kv_on_update: recompute needs in_flight_updates: true (else no rollout is in flight at a load)"
            )
        return self

    def queue_groups(self, batch_groups: int) -> int:
        """One batch, or under verl's rule (``staleness_threshold``) the whole window generation may run
        ahead (verl's max_queue_size); ``queue_capacity`` when given."""
        if self.queue_capacity is not None:
            return self.queue_capacity
        if self.staleness_threshold is None:
            return batch_groups
        return max(batch_groups, verl_window_groups(self, batch_groups))

    def admission_end(self, engine_version: int, batch_groups: int) -> int:
        """AReaL's window (within η of the engine's version), under verl's rule also at most
        ⌊k·(1 + t)·B⌋ groups past the engine's version (``verl_window_groups``)."""
        end = super().admission_end(engine_version, batch_groups)
        if self.staleness_threshold is None:
            return end
        return min(end, engine_version * batch_groups + verl_window_groups(self, batch_groups))

    def blocks(self, queued_groups: int, capacity: int) -> bool:
        return self.queue_policy == "block" and queued_groups >= capacity

    def overflow(self, queued_groups: int, capacity: int) -> int:
        if self.queue_policy != "drop_oldest":
            return 0
        return max(0, queued_groups + 1 - capacity)

    @property
    def may_overflow(self) -> bool:
        return self.queue_policy == "drop_oldest"

    def draining(self, engine_version: int, latest_version: int) -> bool:
        """``refresh: drain``: ``refresh_every`` versions behind, an engine starts nothing more; once empty it loads."""
        return self.refresh == "drain" and latest_version - engine_version >= self.refresh_every

    @property
    def may_drain(self) -> bool:
        return self.refresh == "drain"

    @property
    def step_period(self) -> int:
        """The versions reach the engines every ``sync_every`` steps (admission does not come in waves)."""
        return self.sync_every

    def reaches_engines(self, version: int, first_version: int = 0) -> bool:
        """Every ``sync_every`` steps (and the first weights of a run, always)."""
        return version == first_version or version % self.sync_every == 0

    def resolved_fields(self, queue_capacity: int) -> dict[str, Any]:
        return {"queue_capacity": queue_capacity}


Schedule = Annotated[SyncSchedule | PipelinedSchedule | StreamingSchedule, Field(discriminator="kind")]
#: Each schedule class by its ``kind``: the one registration, the members of ``Schedule``.
SCHEDULES: dict[str, type[_ScheduleBase]] = {
    get_args(cls.model_fields["kind"].annotation)[0]: cls for cls in get_args(get_args(Schedule)[0])
}


def verl_window_groups(schedule: StreamingSchedule, batch_groups: int) -> int:
    """Groups one sync window lets generation start under verl's rule: ⌊sync_every · (1 + threshold) · B⌋
    (verl's max_required_samples, in prompts)."""
    return math.floor(schedule.sync_every * (1 + (schedule.staleness_threshold or 0.0)) * batch_groups + 1e-9)


def schedule_label(kind: str, bound: int, in_flight: bool = False) -> str:
    """The label of a schedule given by its kind, staleness bound and in-flight updates: ``sync``,
    ``pipelined-2``, ``streaming-2``, ``streaming-2-inflight``."""
    if SCHEDULES[kind].bound_field is None:
        return kind
    return f"{kind}-{bound}" + (IN_FLIGHT_SUFFIX if in_flight else "")


@dataclass(frozen=True)
class ScheduleLabel:
    """A schedule as its label names it: the kind, the staleness bound, in-flight updates."""

    kind: str
    bound: int
    in_flight: bool = False

    @property
    def label(self) -> str:
        return schedule_label(self.kind, self.bound, self.in_flight)

    @property
    def fields(self) -> dict[str, Any]:
        """The schedule section the label stands for (the rest defaulted)."""
        cls = SCHEDULES[self.kind]
        fields: dict[str, Any] = {"kind": self.kind}
        if cls.bound_field is not None:
            fields[cls.bound_field] = self.bound
        if "in_flight_updates" in cls.model_fields:
            fields["in_flight_updates"] = self.in_flight
        return fields

    @property
    def overrides(self) -> list[str]:
        """The ``--set`` overrides that make a scenario's schedule this one."""
        return [f"schedule.{key}={str(value).lower()}" for key, value in self.fields.items()]


def parse_label(text: str) -> ScheduleLabel:
    """The schedule a label names; UnknownLabel where the text has no label's form, LabelError where the
    schedule refuses its bound (messages without a flag: the caller names its own)."""
    match = _LABEL.match(text)
    cls = SCHEDULES.get(match.group(1)) if match else None
    if match is None or cls is None or not _fits(cls, match.group(2), bool(match.group(3))):
        raise UnknownLabel(f"{text!r} is not a schedule")
    label = ScheduleLabel(match.group(1), int(match.group(2) or 0), bool(match.group(3)))
    try:
        cls.model_validate(label.fields)
    except ValidationError:
        raise LabelError(f"{text!r}: {cls.bound_refused}") from None
    return label


def _fits(cls: type[_ScheduleBase], bound: str | None, in_flight: bool) -> bool:
    """A label has a bound exactly when its schedule has one, and ``-inflight`` only where it can update in flight."""
    return (bound is None) == (cls.bound_field is None) and (not in_flight or "in_flight_updates" in cls.model_fields)
