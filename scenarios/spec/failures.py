"""Engine failures: when an engine is lost (``run.failures``), and the rules for the work it held.

    run.failures ─► failure_plan(spec, engines, seed) ─► Failure(time, engine), in time order
                       simulator: the engine loses its rollouts at that moment, is down for the restart
                       executor:  the coordinator kills the engine's process then (SIGKILL, or ray.kill)

    an engine dies ─► ScheduleState.engine_lost(engine, groups it held unfinished)
                          those groups wait to be generated again, under their own ids and batches
                     ─► dispatch: Regenerate(engine, groups) on an engine that ``may_regenerate`` them,
                          first a Load(engine, ``regeneration_version``) on an idle one if none may
                     ─► ScheduleState.engine_restored(engine): it loads weights and takes work again

The rules, written once for both backends:

* **What is generated again**: every group the dead engine had started and not finished, whole (a
  group's samples share one engine: its prompt's KV prefix), under its own group id, so it keeps its
  prompt, its lengths and its batch; its finished samples are thrown away with the rest. Groups it
  had finished are in the queue, not on the engine, and are not touched. A group is never started
  twice at once and never lost: it is trained once, or dropped by the schedule's own rules.
* **With which weights**: exact schedules (sync, pipelined) generate the group again with its
  prescribed version, ``max(0, batch − bound)``, so its staleness is what it would have been;
  streaming takes any engine whose weights are at least that old (AReaL's admission floor) and, if it
  must load, loads the latest, so a regenerated group is as fresh as a new one. Either way its
  staleness counts from the versions of its new tokens, as any group's does; streaming drops it if
  it ends up too stale, as any group.
* **Before new work**: lost groups go out before any new group (the learner is waiting for them).

No SimPy, torch or Ray here.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal, NamedTuple

import numpy as np
from pydantic import Field

from ..files.limits import NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt
from .sections import Section

#: The version of an engine that has no weights yet (a restarted engine before its first load).
NO_VERSION = -1
#: The stream of ``run.seed`` the random engine of each failure is drawn from.
_FAILURE_STREAM = 0xFA11


class FailureSpec(Section):
    """When engines fail; a failure kills one engine, which restarts and loads the latest weights."""

    at_s: list[PositiveFloat] = Field(
        default_factory=list, description="moments an engine fails, in seconds of the run's clock"
    )
    every_s: PositiveFloat | None = Field(
        None,
        description="an engine fails every this many seconds (the first at this time); unset: only at_s (with "
        "neither, nothing fails: a sweep's baseline point)",
    )
    engine: NonNegativeInt | Literal["random"] = Field(
        "random", description="which engine fails: its index, or `random` (drawn for each failure from run.seed)"
    )
    engines_lost: PositiveInt = Field(
        1,
        description="engines each failure takes down together, from `engine` on (a node's: its devices / "
        "cluster.devices_per_engine)",
    )
    restart_s: NonNegativeFloat | None = Field(
        None,
        description="seconds from a failure until the engine's replacement can load weights (process start, "
        "model load); unset: the cost model's (a profile's engine_start_s, or the analytic estimate); the "
        "executor restarts as fast as it can and, when this is set, holds the replacement back until then",
    )

    @property
    def plans_any(self) -> bool:
        """Whether anything fails (a sweep's baseline point, ``every_s: null``, plans nothing)."""
        return bool(self.at_s) or self.every_s is not None


class Failure(NamedTuple):
    """One planned failure: ``engine`` dies at ``time`` (seconds of the run's clock)."""

    time: float
    engine: int


def failure_plan(spec: FailureSpec | None, engines: int, seed: int) -> Iterator[Failure]:
    """The failures ``spec`` plans, in time order (endless with ``every_s``: stop where the run ends).

    ``at_s`` and the multiples of ``every_s`` merge in time order; the n-th failure's engine is
    ``spec.engine``, or with ``random`` a draw from ``(seed, n)``, the same in both backends; it takes
    ``engines_lost`` engines down at once, that one and the next (wrapping round), one Failure each.
    """
    if spec is None:
        return
    moments = sorted(spec.at_s)
    period = spec.every_s
    count, next_periodic = 0, period
    while moments or next_periodic is not None:
        if next_periodic is not None and (not moments or next_periodic < moments[0]):
            time, next_periodic = next_periodic, next_periodic + period if period is not None else None
        else:
            time = moments.pop(0)
        first = _engine(spec, engines, seed, count)
        for offset in range(spec.engines_lost):
            yield Failure(time, (first + offset) % engines)
        count += 1


def _engine(spec: FailureSpec, engines: int, seed: int, count: int) -> int:
    if spec.engine != "random":
        return spec.engine
    return int(np.random.default_rng([seed, _FAILURE_STREAM, count]).integers(engines))


def prescribed_version(batch: int, bound: int) -> int:
    """The version exact schedules generate batch ``batch`` with (``policy.lowest_version`` of its groups)."""
    return max(0, batch - bound)


def may_regenerate(*, exact: bool, engine_version: int, batch: int, bound: int, draining: bool = False) -> bool:
    """Whether an engine holding ``engine_version`` may generate again a lost group of batch ``batch``.

    Exact schedules: only with the batch's prescribed version. Streaming: with any version at least that
    old (the group's admission floor), unless the engine is draining (``refresh: drain``).
    """
    if engine_version == NO_VERSION:
        return False
    floor = prescribed_version(batch, bound)
    if exact:
        return engine_version == floor
    return engine_version >= floor and not draining


def regeneration_version(*, exact: bool, batch: int, bound: int, latest_version: int) -> int:
    """The version an idle engine loads to generate again a lost group of batch ``batch`` when no engine
    holding weights it may use has room: the prescribed one (exact schedules), else the latest."""
    return prescribed_version(batch, bound) if exact else latest_version
