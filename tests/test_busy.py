"""Busy seconds of spans cut to a window, sorted once before the cut (``scenarios.record.busy.SpanOrder``).

The simulator's summary sorts a run's spans once and measures them cut to two windows; the seconds must be
the same double as sorting the cut spans afresh. Spans here start and end on a coarse grid, so cutting
them makes many starts and ends equal: the ties that could have told the two orders apart.
"""

from __future__ import annotations

import numpy as np
from asyncrl.scenarios.record.busy import SpanOrder, busy_seconds, running_max, union_length
from hypothesis import given, settings
from hypothesis import strategies as st

spans = st.lists(
    st.tuples(st.integers(0, 4), st.integers(0, 40), st.integers(0, 12)),  # worker, start, length (grid steps)
    min_size=0,
    max_size=60,
)
windows = st.tuples(st.integers(-5, 45), st.integers(0, 50))


def _arrays(rows: list[tuple[int, int, int]], step: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    workers = np.asarray([worker for worker, _, _ in rows], dtype=np.int64)
    starts = np.asarray([start * step for _, start, _ in rows], dtype=np.float64)
    ends = starts + np.asarray([length * step for _, _, length in rows], dtype=np.float64)
    return workers, starts, ends


@settings(max_examples=300, deadline=None)
@given(spans, windows, st.sampled_from([1.0, 0.1, 1 / 3]))
def test_an_order_sorted_before_the_cut_gives_the_same_seconds(
    rows: list[tuple[int, int, int]], window: tuple[int, int], step: float
) -> None:
    workers, starts, ends = _arrays(rows, step)
    begin, end = sorted(value * step for value in window)
    cut_starts, cut_ends = np.clip(starts, begin, end), np.clip(ends, begin, end)
    before_the_cut = SpanOrder.of(workers, starts, ends)
    assert busy_seconds(workers, cut_starts, cut_ends, before_the_cut) == busy_seconds(workers, cut_starts, cut_ends)


@settings(max_examples=200, deadline=None)
@given(spans, st.sampled_from([1.0, 0.1, 1 / 3]))
def test_busy_seconds_add_each_workers_union(rows: list[tuple[int, int, int]], step: float) -> None:
    workers, starts, ends = _arrays(rows, step)
    by_worker = sum(union_length(starts[workers == w], ends[workers == w]) for w in np.unique(workers))
    assert busy_seconds(workers, starts, ends) == by_worker


def test_a_running_maximum_takes_any_order_of_equal_values() -> None:
    values = np.asarray([3.0, 1.0, 3.0, 2.0, 3.0, 0.5])
    restart = np.asarray([True, False, False, True, False, False])
    stable = running_max(values, restart)
    ties_reversed = np.asarray([5, 1, 3, 4, 2, 0])  # sorts the values too, the three 3.0s in another order
    assert np.array_equal(values[ties_reversed], np.sort(values))
    assert np.array_equal(running_max(values, restart, ties_reversed), stable)
    assert stable.tolist() == [3.0, 3.0, 3.0, 2.0, 3.0, 3.0]
