"""Every group and sample a simulated run started: the live state engines read and write.

    Simulation ──start(group ...)──► Rollouts ◄── engines: finish / un-finish samples
                                        │  live lists ──pack_settled (after each step)──► Packed
                                        └──► columns() (once, at the end) ──► Recorder.events, summary

Sample ``s`` belongs to group ``s // samples_per_prompt``; ids are handed out in
start order. Engines set a sample's end when it finishes and clear it again when
an interrupt undoes a finish they had applied ahead (``Engine.settle``).

Memory: the live state is Python lists (what the compiled hot loop reads fastest),
about 120 bytes a rollout. A group that is finished and trained (or dropped) can
no longer change, and the groups are settled mostly in start order, so after each
learner step the settled groups at the front of the lists move to ``Packed``:
fixed-width numpy columns, 15 bytes a rollout. The lists hold the groups from
the oldest unsettled one on (``base``), so what a run holds as objects is its
window of live groups, whatever its length; the lists are indexed by
``group - base`` and ``sample - sample_base``.

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
from .packed import DROPPED, GROUP_COLUMNS, SAMPLE_COLUMNS, Columns, Packed, PackedGroups


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


PACK_AT_LEAST = 1 << 16  # settled samples worth a pack: fewer wait (a large array goes back to the system when freed)


class Rollouts:
    """The live groups and samples as lists, and the settled ones packed away (module docstring)."""

    def __init__(self, group_size: int, max_samples: int | None = None) -> None:
        self.group_size = group_size
        self.max_samples = max_samples  # the memory budget (``simulator.budget``): more started is an error
        self.base = 0  # groups packed away: the lists start at group ``base``
        self.sample_base = 0  # base * group_size
        self.packed = Packed()
        self._settled = 0  # settled groups at the front of the lists (counted, not packed yet)
        # Per live group.
        self.engine: list[int] = []
        self.start: list[float] = []
        self.version: list[int] = []
        self.prompt: list[int] = []  # prompt tokens
        self.join: list[float] = []  # the engine's progress when the group joined it
        self.loads_seen: list[int] = []  # loads its engine had made before the group started
        self.remaining: list[int] = []  # samples not finished yet
        self.step: list[int] = []  # learner step that trained it, -1 if none, DROPPED if dropped
        self.prefill_start: list[float] = []  # its prefill's span (s)
        self.prefill_end: list[float] = []
        # Per live sample.
        self.tokens: list[int] = []  # completion tokens
        self.end: list[float] = []  # NaN until finished

    def start_group(
        self, engine: int, now: float, version: int, prompt: int, join: float, loads_seen: int, lengths: list[int]
    ) -> None:
        """Record the next group (its id is the number of groups before it)."""
        started = self.sample_base + len(self.end) + len(lengths)
        if self.max_samples is not None and started > self.max_samples:
            raise over_budget(started, self.max_samples)
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

    def prefilled(self, start: float, end: float) -> None:
        """The prefill of the group started last."""
        self.prefill_start.append(start)
        self.prefill_end.append(end)

    def lose(self, group: int, now: float, progress: float) -> None:
        """``group`` was lost with its engine at ``now`` (its engine's ``progress``): none of its samples
        is finished any more, and until it starts again it counts as waiting since then."""
        first, at = group * self.group_size - self.sample_base, group - self.base
        self.end[first : first + self.group_size] = [math.nan] * self.group_size
        self.remaining[at] = self.group_size
        self.start[at], self.join[at] = now, progress

    def restart_group(
        self, group: int, engine: int, now: float, version: int, join: float, loads_seen: int
    ) -> list[int]:
        """Start ``group`` again (after ``lose``), on ``engine``; returns its samples' lengths, as drawn first."""
        at = group - self.base
        self.engine[at], self.start[at], self.version[at] = engine, now, version
        self.join[at], self.loads_seen[at] = join, loads_seen
        first = group * self.group_size - self.sample_base
        return self.tokens[first : first + self.group_size]

    def prefilled_again(self, group: int, start: float, end: float) -> None:
        """The prefill of ``group``, started again after its engine was lost."""
        self.prefill_start[group - self.base], self.prefill_end[group - self.base] = start, end

    def trained(self, groups: list[int], step: int) -> None:
        for group in groups:
            self.step[group - self.base] = step

    def dropped(self, group: int) -> None:
        self.step[group - self.base] = DROPPED

    def version_of(self, group: int) -> int:
        return self.version[self._live(group)]

    def prompt_of(self, group: int) -> int:
        return self.prompt[self._live(group)]

    def group_tokens(self, group: int) -> list[int]:
        """The completion lengths of ``group``'s samples."""
        first = self._live(group) * self.group_size
        return self.tokens[first : first + self.group_size]

    def _live(self, group: int) -> int:
        """``group``'s index in the live lists (a packed group is settled: nothing reads it during the run)."""
        assert group >= self.base, f"group {group} is packed (groups below {self.base} are)"
        return group - self.base

    def pack_settled(self) -> None:
        """Pack the settled groups at the front of the lists (finished, and trained or dropped), once
        there are ``PACK_AT_LEAST`` samples of them."""
        settled, remaining, step = self._settled, self.remaining, self.step
        while settled < len(step) and step[settled] != -1 and not remaining[settled]:
            settled += 1
        self._settled = settled
        if settled * self.group_size >= PACK_AT_LEAST:
            self._pack(settled)

    def close(self) -> None:
        """The run has ended: pack every group (``columns`` reads them)."""
        self._pack(len(self.step))

    def _pack(self, groups: int) -> None:
        if not groups:
            return
        samples = groups * self.group_size
        lists: dict[str, list] = {}
        for name in GROUP_COLUMNS:
            values = getattr(self, name)
            lists[name] = values[:groups]
            del values[:groups]
        for name in SAMPLE_COLUMNS:
            values = getattr(self, name)
            lists[name] = values[:samples]
            del values[:samples]
        self.packed.add(lists)
        del self.remaining[:groups]
        self.base += groups
        self.sample_base += samples
        self._settled = 0

    def columns(self) -> Columns:
        """Every group and sample, as arrays (after ``close``)."""
        return self.packed.columns()

    def pieces(self) -> list[PackedGroups]:
        """The groups as packed, piece by piece (after ``close``): for a record written in pieces."""
        return self.packed.pieces

    @property
    def samples(self) -> int:
        """Samples started."""
        return self.sample_base + len(self.end)

    def __len__(self) -> int:
        """Groups started."""
        return self.base + len(self.step)
