"""Every group and sample a simulated run started: the live state engines read and write.

    Simulation ──start(group ...)──► Rollouts ◄── engines: finish / un-finish samples
                                        │
                                        └──► Recorder.events (once, at the end)

Sample ``s`` belongs to group ``s // samples_per_prompt``; lists are indexed by
group id or sample id, which are handed out in start order. Engines set a
sample's end when it finishes and clear it again when an interrupt undoes a
finish they had applied ahead (``Engine.settle``).

A rollout occupies ``[join, join + tokens]`` of its engine's progress (decode
steps). With in-flight updates its engine may load new weights inside that
span; ``cut_at_loads`` cuts it there into pieces of one policy version each,
for the event table (``Recorder``) and for a sweep's tallies
(``simulator.summary``) alike.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

from .budget import over_budget


class WeightLoad(NamedTuple):
    """One weight load of an engine."""

    progress: float  # the engine's progress (decode steps) when the new weights took over
    time: float  # wall time they took over (s)
    version: int  # the policy version loaded


class Piece(NamedTuple):
    """A stretch of one rollout generated under one policy version."""

    version: int
    tokens: int  # whole tokens: the pieces of a rollout add up to its tokens
    first: float  # engine progress where the piece starts
    last: float  # and where it ends
    end_time: float | None  # wall time of the load that ended it; None: the rollout's own end


def cut_at_loads(join: float, tokens: int, version: int, loads: Sequence[WeightLoad]) -> list[Piece]:
    """A rollout that joined its engine at progress ``join`` under ``version``, cut at its engine's ``loads``
    (those after it started, in order); a piece a load would leave empty is skipped."""
    finish, first, pieces = join + tokens, join, []
    for load in loads:
        if load.progress >= finish:
            break
        count = round(load.progress - join) - round(first - join)  # whole tokens by each mark: they add up
        if count > 0:
            pieces.append(Piece(version, count, first, load.progress, load.time))
            first = load.progress
        version = load.version
    pieces.append(Piece(version, round(finish - join) - round(first - join), first, finish, None))
    return pieces


class Rollouts:
    def __init__(self, group_size: int, max_samples: int | None = None) -> None:
        self.group_size = group_size
        self.max_samples = max_samples  # the memory budget (``simulator.budget``): more started is an error
        # Per group.
        self.engine: list[int] = []
        self.start: list[float] = []
        self.version: list[int] = []
        self.prompt: list[int] = []  # prompt tokens
        self.join: list[float] = []  # the engine's progress when the group joined it
        self.loads_seen: list[int] = []  # loads its engine had made before the group started
        self.remaining: list[int] = []  # samples not finished yet
        self.step: list[int] = []  # learner step that trained it, -1 if none
        # Per sample.
        self.tokens: list[int] = []  # completion tokens
        self.end: list[float] = []  # NaN until finished

    def start_group(
        self, engine: int, now: float, version: int, prompt: int, join: float, loads_seen: int, lengths: list[int]
    ) -> None:
        """Record the next group (its id is the number of groups before it)."""
        if self.max_samples is not None and len(self.end) + len(lengths) > self.max_samples:
            raise over_budget(len(self.end) + len(lengths), self.max_samples)
        self.engine.append(engine)
        self.start.append(now)
        self.version.append(version)
        self.prompt.append(prompt)
        self.join.append(join)
        self.loads_seen.append(loads_seen)
        self.remaining.append(self.group_size)
        self.step.append(-1)
        self.tokens.extend(lengths)
        self.end.extend([math.nan] * len(lengths))

    def lose(self, group: int, now: float, progress: float) -> None:
        """``group`` was lost with its engine at ``now`` (its engine's ``progress``): none of its samples
        is finished any more, and until it starts again it counts as waiting since then."""
        first = group * self.group_size
        self.end[first : first + self.group_size] = [math.nan] * self.group_size
        self.remaining[group] = self.group_size
        self.start[group], self.join[group] = now, progress

    def restart_group(
        self, group: int, engine: int, now: float, version: int, join: float, loads_seen: int
    ) -> list[int]:
        """Start ``group`` again (after ``lose``), on ``engine``; returns its samples' lengths, as drawn first."""
        self.engine[group], self.start[group], self.version[group] = engine, now, version
        self.join[group], self.loads_seen[group] = join, loads_seen
        first = group * self.group_size
        return self.tokens[first : first + self.group_size]

    def trained(self, groups: list[int], step: int) -> None:
        for group in groups:
            self.step[group] = step

    def __len__(self) -> int:
        """Groups started."""
        return len(self.start)
