"""How long a worker was busy: the length of the union of its spans, for one worker or for thousands at once.

    spans (worker, start, end) ─► sorted by worker, then start ─► merged into blocks ─► block lengths, added

The event table's summary (``scenarios.summarize``) and the simulator's straight from its arrays
(``simulator.summary``) both add busy seconds here, so the two agree to the last bit.
"""

from __future__ import annotations

import itertools

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


def busy_seconds(workers: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> float:
    """Seconds each worker had any span open, added over workers (``union_length`` of each worker's spans,
    the intervals merged for all workers at once: a plan on a large cluster has thousands of engines)."""
    order = np.lexsort((starts, workers))
    workers, starts, ends = workers[order], starts[order], ends[order]
    if len(workers) == 0:
        return 0.0
    first = np.concatenate([[True], workers[1:] != workers[:-1]])  # each worker's first span
    reach = running_max(ends, first)  # the latest end so far, within each worker
    opens = first.copy()
    opens[1:] |= starts[1:] > reach[:-1]
    blocks = np.flatnonzero(opens)
    lengths = np.maximum.reduceat(ends, blocks) - starts[blocks]
    bounds = [*np.flatnonzero(first[blocks]).tolist(), len(blocks)]  # each worker's blocks
    total = 0.0
    for lo, hi in itertools.pairwise(bounds):
        total += float(lengths[lo:hi].sum())  # per worker, then over workers: as union_length adds them
    return total


def running_max(values: np.ndarray, restart: np.ndarray) -> np.ndarray:
    """The maximum of ``values`` so far, starting afresh where ``restart`` is set: exact, in one pass. Each value
    is replaced by its rank among all of them, offset by its segment's number times their count, so a running
    maximum of those keys never reaches back across a restart; the ranks then map back to the values."""
    count = len(values)
    segment = np.cumsum(restart, dtype=np.int64) * count
    order = np.argsort(values, kind="stable")
    rank = np.empty(count, dtype=np.int64)
    rank[order] = np.arange(count)
    return values[order][np.maximum.accumulate(segment + rank) - segment]
