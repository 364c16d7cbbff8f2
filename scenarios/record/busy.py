"""How long a worker was busy: the length of the union of its spans, for one worker or for thousands at once.

    spans (worker, start, end) ─► sorted by worker, then start ─► merged into blocks ─► block lengths, added

The event table's summary (``scenarios.record.summarize``) and the simulator's straight from its arrays
(``simulator.summary``) both add busy seconds here, so the two agree to the last bit.

The simulator measures the same spans cut to two windows (the whole run, its steady span), and sorts them
once (``SpanOrder``): an order that sorts spans also sorts them cut to any window, since cutting never
reverses two values; it only makes some equal, and spans of one worker that start together fall in one
block whichever comes first, so the seconds are the same to the bit (``tests/test_busy.py``).
"""

from __future__ import annotations

import itertools
from typing import NamedTuple

import numpy as np


def union_length(starts: np.ndarray, ends: np.ndarray) -> float:
    """Length of the union of intervals [starts[i], ends[i]]."""
    if len(starts) == 0:
        return 0.0
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], ends[order]
    reach = np.maximum.accumulate(ends)
    opens_block = np.concatenate([[True], starts[1:] > reach[:-1]])
    block_end = np.maximum.reduceat(ends, np.flatnonzero(opens_block))
    return float((block_end - starts[opens_block]).sum())


class SpanOrder(NamedTuple):
    """How ``busy_seconds`` sorts a set of spans: by worker, then start; and the sorted spans' ends in order.
    Valid for the same spans cut to any window (``np.clip``), which keeps both orders."""

    spans: np.ndarray  # indices of the spans, by worker then start
    ends: np.ndarray  # indices into the sorted spans, by end

    @classmethod
    def of(cls, workers: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> SpanOrder:
        spans = np.lexsort((starts, workers))
        return cls(spans, np.argsort(ends[spans], kind="stable"))


def busy_seconds(workers: np.ndarray, starts: np.ndarray, ends: np.ndarray, order: SpanOrder | None = None) -> float:
    """Seconds each worker had any span open, added over workers (``union_length`` of each worker's spans,
    the intervals merged for all workers at once: a plan on a large cluster has thousands of engines).
    ``order``: ``SpanOrder.of`` these spans, or of the same spans before they were cut to a window."""
    if order is None:
        order = SpanOrder.of(workers, starts, ends)
    workers, starts, ends = workers[order.spans], starts[order.spans], ends[order.spans]
    if len(workers) == 0:
        return 0.0
    first = np.concatenate([[True], workers[1:] != workers[:-1]])  # each worker's first span
    reach = running_max(ends, first, order.ends)  # the latest end so far, within each worker
    opens = first.copy()
    opens[1:] |= starts[1:] > reach[:-1]
    blocks = np.flatnonzero(opens)
    lengths = np.maximum.reduceat(ends, blocks) - starts[blocks]
    bounds = [*np.flatnonzero(first[blocks]).tolist(), len(blocks)]  # each worker's blocks
    total = 0.0
    for lo, hi in itertools.pairwise(bounds):
        total += float(lengths[lo:hi].sum())  # per worker, then over workers: as union_length adds them
    return total


def running_max(values: np.ndarray, restart: np.ndarray, order: np.ndarray | None = None) -> np.ndarray:
    """The maximum of ``values`` so far, starting afresh where ``restart`` is set: exact, in one pass. Each value
    is replaced by its rank among all of them, offset by its segment's number times their count, so a running
    maximum of those keys never reaches back across a restart; the ranks then map back to the values.
    ``order``: indices that sort ``values`` (any order of equal values will do), if known."""
    count = len(values)
    segment = np.cumsum(restart, dtype=np.int64) * count
    order = np.argsort(values, kind="stable") if order is None else order
    rank = np.empty(count, dtype=np.int64)
    rank[order] = np.arange(count)
    return values[order][np.maximum.accumulate(segment + rank) - segment]
