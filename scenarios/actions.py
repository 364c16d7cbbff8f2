"""What the schedule state tells a backend (``ScheduleState.dispatch``, ``take``): plain values, no behaviour.

dispatch() ─► [Load(engine, version), Start(engine, groups, batches), Regenerate(engine, groups, batches)]
take(k)    ─► Taken(batch, dropped)
"""

from __future__ import annotations

from dataclasses import dataclass

from asyncrl.scenarios.policy import FinishedGroup


@dataclass(frozen=True)
class Load:
    """Tell ``engine`` to load weights ``version`` before it starts anything it is told after this.

    An engine takes its commands in order, so the state counts the version as
    the engine's from the moment the load is decided: groups started on it in
    the same dispatch are generated with the new weights, once they are in.
    """

    engine: int
    version: int


@dataclass(frozen=True)
class Start:
    """Start these groups on ``engine``, in this order; ``batches[i]`` is the step ``groups[i]`` is for."""

    engine: int
    groups: tuple[int, ...]
    batches: tuple[int, ...]


@dataclass(frozen=True)
class Regenerate:
    """Start again on ``engine`` these groups, lost with the engine that held them; ``batches[i]`` is the
    step ``groups[i]`` is for (as when it first started)."""

    engine: int
    groups: tuple[int, ...]
    batches: tuple[int, ...]


Action = Load | Start | Regenerate


@dataclass(frozen=True)
class Taken:
    """The learner's answer for one step: the batch (empty: keep waiting) and what was dropped."""

    batch: tuple[FinishedGroup, ...] = ()
    dropped: tuple[FinishedGroup, ...] = ()
