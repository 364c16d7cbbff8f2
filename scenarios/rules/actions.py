"""What the schedule state tells a backend (``ScheduleState.dispatch``, ``take``): plain values, no behaviour.

dispatch() ─► [Load(engine, version), Start(engine, groups, batches), Regenerate(engine, groups, batches)]
dispatch_grouped() ─► Dispatch: the same, with the loads of engines that hold nothing as one LoadEmpty per version
take(k)    ─► Taken(batch, dropped)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from .policy import FinishedGroup


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
class LoadEmpty:
    """Tell each of ``engines``, none with anything in flight, to load weights ``version``: one ``Load`` each.

    On a large cluster most engines may be idle, and every one of them loads each new version; a backend
    that can apply those loads together (the simulator does, ``simulator.dormant``) takes them as one.
    """

    engines: tuple[int, ...]
    version: int


class Dispatch(NamedTuple):
    """One dispatch's answer in parts, in the order a backend applies them."""

    regenerate: list[Load | Regenerate]  # lost groups started again, each after the Load it needs
    loads: list[Load]  # engines with samples in flight (in-flight updates), in engine order
    load_empty: list[LoadEmpty]  # engines with nothing in flight, by the version they load
    starts: list[Start]

    def actions(self) -> list[Action]:
        """The same as a list of single actions: regenerations, every Load in engine order, then starts."""
        loads = self.loads + [Load(engine, load.version) for load in self.load_empty for engine in load.engines]
        loads.sort(key=lambda load: load.engine)
        return [*self.regenerate, *loads, *self.starts]


@dataclass(frozen=True)
class Taken:
    """The learner's answer for one step: the batch (empty: keep waiting) and what was dropped."""

    batch: tuple[FinishedGroup, ...] = ()
    dropped: tuple[FinishedGroup, ...] = ()
