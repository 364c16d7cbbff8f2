"""Weight loads and phase switches as the recorder keeps them: appended one by one or as blocks, read in order.

Recorder.sync / switch ──► SpanLog.rows   (a tuple each: cheap)
Recorder.syncs_of / switches_of ──► SpanLog.blocks (numpy arrays: dormant engines, ``simulator.dormant``)
SpanLog.columns() ──► Spans, ordered by decision, then rank within it (engine order)
"""

from __future__ import annotations

import itertools
from typing import NamedTuple

import numpy as np


class Spans(NamedTuple):
    """Sync or switch spans as columns, in the order they were decided; ``engine`` −1 for the learner."""

    engine: np.ndarray
    start: np.ndarray  # (s)
    end: np.ndarray  # (s)
    version: np.ndarray  # loaded (syncs), −1 (switches)


class Block(NamedTuple):
    """Spans appended together: their decision's number, then the columns (ranked by engine index)."""

    decision: int
    engine: np.ndarray
    start: np.ndarray  # (s)
    end: np.ndarray  # (s)
    version: int


_Row = tuple[int, int, int, float, float, int]  # one span: decision, rank in it, engine, start, end, version


class SpanLog:
    """Spans appended one by one (a tuple each: cheap) or as blocks; read back as columns, in order."""

    def __init__(self) -> None:
        self.rows: list[_Row] = []
        self.blocks: list[Block] = []

    def columns(self) -> Spans:
        """Ordered by decision, then rank (stable: as appended within a rank)."""
        flat = itertools.chain.from_iterable(self.rows)  # (fromiter: no shape to discover, unlike asarray)
        rows = np.fromiter(flat, dtype=np.float64, count=6 * len(self.rows)).reshape(-1, 6)
        sizes = [len(block.engine) for block in self.blocks]
        per_block = np.asarray([(block.decision, block.version) for block in self.blocks], dtype=np.float64)
        decision = np.concatenate([rows[:, 0], np.repeat(per_block[:, 0], sizes)]) if sizes else rows[:, 0]
        version = np.concatenate([rows[:, 5], np.repeat(per_block[:, 1], sizes)]) if sizes else rows[:, 5]
        rank = np.concatenate([rows[:, 1], *(b.engine for b in self.blocks)])
        order = np.lexsort((rank, decision))
        engine = np.concatenate([rows[:, 2], *(b.engine for b in self.blocks)]).astype(np.int64)
        start = np.concatenate([rows[:, 3], *(b.start for b in self.blocks)])
        end = np.concatenate([rows[:, 4], *(b.end for b in self.blocks)])
        return Spans(engine[order], start[order], end[order], version.astype(np.int64)[order])
