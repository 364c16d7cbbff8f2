"""Settled groups of a run, packed into fixed-width numpy columns (``simulator.rollouts`` moves them here).

    Rollouts' live lists ──_pack (settled groups at their front)──► Packed.add: a chunk per column
                                                                     └─► columns(): one array per column

Apart from the compiled hot modules (``scenarios/compiled.py``): only numpy works on them.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

DROPPED = -2  # ``Rollouts.step`` of a dropped group: settled, trained by no step

#: The packed columns: per group, then per sample; their numpy types.
GROUP_COLUMNS = {
    "engine": np.int32,
    "start": np.float64,
    "version": np.int32,
    "prompt": np.int32,
    "join": np.float64,
    "loads_seen": np.int32,
    "step": np.int32,
    "prefill_start": np.float64,
    "prefill_end": np.float64,
}
SAMPLE_COLUMNS = {"tokens": np.int32, "end": np.float64}


class Columns(NamedTuple):
    """Every group and sample of a run, as arrays (``Rollouts.columns``); ``step`` is −1 for a dropped group."""

    engine: np.ndarray
    start: np.ndarray
    version: np.ndarray
    prompt: np.ndarray
    join: np.ndarray
    loads_seen: np.ndarray
    step: np.ndarray
    prefill_start: np.ndarray
    prefill_end: np.ndarray
    tokens: np.ndarray
    end: np.ndarray
    dropped: np.ndarray  # per group: bool

    @property
    def groups(self) -> int:
        return len(self.engine)


class PackedGroups(NamedTuple):
    """Groups ``first`` to ``first + columns.groups`` of a run, packed together."""

    first: int
    columns: Columns

    def parts(self, groups: int) -> list[PackedGroups]:
        """The piece cut into parts of at most ``groups`` groups (views, not copies)."""
        size = len(self.columns.end) // max(1, self.columns.groups)
        parts = []
        for lo in range(0, self.columns.groups, groups):
            hi = min(self.columns.groups, lo + groups)
            whole = self.columns._asdict()
            cut = {name: whole[name][lo:hi] for name in (*GROUP_COLUMNS, "dropped")}
            cut |= {name: whole[name][lo * size : hi * size] for name in SAMPLE_COLUMNS}
            parts.append(PackedGroups(self.first + lo, Columns(**cut)))
        return parts


class Packed:
    """Settled groups as pieces of fixed-width arrays, one piece per pack, in group order."""

    def __init__(self) -> None:
        self.pieces: list[PackedGroups] = []
        self.groups = 0  # groups packed

    def add(self, lists: dict[str, list]) -> None:
        """Pack the groups whose per-group and per-sample lists (``GROUP_COLUMNS``, ``SAMPLE_COLUMNS``) these are."""
        arrays = {
            name: np.asarray(lists[name], dtype=kind) for name, kind in {**GROUP_COLUMNS, **SAMPLE_COLUMNS}.items()
        }
        dropped = arrays["step"] == DROPPED
        arrays["step"][dropped] = -1
        columns = Columns(**arrays, dropped=dropped)
        self.pieces.append(PackedGroups(self.groups, columns))
        self.groups += columns.groups

    def columns(self) -> Columns:
        """Every group as one set of columns (a dropped group's step −1); the pieces become that one."""
        if len(self.pieces) == 1:
            return self.pieces[0].columns
        if not self.pieces:
            empty = {name: np.zeros(0, dtype=kind) for name, kind in {**GROUP_COLUMNS, **SAMPLE_COLUMNS}.items()}
            return Columns(**empty, dropped=np.zeros(0, dtype=bool))
        whole = Columns(
            *(np.concatenate(arrays) for arrays in zip(*(piece.columns for piece in self.pieces), strict=True))
        )
        self.pieces = [PackedGroups(0, whole)]  # held once
        return whole
