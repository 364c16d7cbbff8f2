"""What the run figures draw, computed from events.parquet without matplotlib: busy intervals, rates, queue depth.

    events ─► run_wall, busy_intervals (a worker's spans of one kind merged)    ─► plots.timeline
           ─► trained_rate, generated_rate (samples/s), queue_depth (groups)   ─► plots.throughput_and_queue
    window, horizon ─► window_bounds (the time range drawn); worker names ─► labelled_rows (those named)
    runs of many learner steps ─► auto_window: the first AUTO_WINDOW_STEPS of them, when no window is asked for

Every function takes the frames (or arrays) and returns numbers, so the tests check them without a figure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

#: A time window of the timeline in seconds: (start, end); end None runs to the last span.
Window = tuple[float, float | None]
LABELLED_ROWS = 32  # at most about this many worker names on one panel's axis
NICE_STEPS = (1, 2, 4, 5, 8, 10, 16, 20, 25, 32, 50, 64, 100, 128, 200, 256, 500, 1000, 10**9)


def busy_intervals(starts: np.ndarray, ends: np.ndarray) -> list[tuple[float, float]]:
    """The union of intervals [start, end] as (start, width) pairs, in time order."""
    if len(starts) == 0:
        return []
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], ends[order]
    reach = np.maximum.accumulate(ends)
    opens = np.flatnonzero(np.concatenate([[True], starts[1:] > reach[:-1]]))
    block_ends = np.maximum.reduceat(ends, opens)
    return [(float(start), float(end - start)) for start, end in zip(starts[opens], block_ends, strict=True)]


def run_wall(events: pd.DataFrame) -> float:
    """End of the last learner step (the summary's wall time), or of the last span if none trained."""
    train = events.loc[events["kind"] == "train", "end"]
    if len(train):
        return float(train.max())
    return float(events["end"].max()) if len(events) else 0.0


#: Learner steps a timeline draws when none is asked for: a run of 100 steps drawn whole is solid stripes.
AUTO_WINDOW_STEPS = 12


@dataclass(frozen=True)
class AutoWindow:
    """The span a timeline draws by itself: from 0 to the end of the ``shown``-th learner step of the slowest
    run, of the ``steps`` the longest run has."""

    window: Window
    shown: int
    steps: int

    def line(self) -> str:
        return (
            f"Shown: the first {self.shown} of {self.steps} learner steps, 0 s to {self.window[1]:,.4g} s "
            "(asyncrl report --window START:END draws another span)."
        )


def auto_window(runs: Sequence[pd.DataFrame], steps: int = AUTO_WINDOW_STEPS) -> AutoWindow | None:
    """The first ``steps`` learner steps of every run, when one of them has more; None when all fit."""
    ends = [np.sort(events.loc[events["kind"] == "train", "end"].to_numpy(dtype=float)) for events in runs]
    longest = max((len(end) for end in ends), default=0)
    if longest <= steps:
        return None
    until = max(float(end[min(steps, len(end)) - 1]) for end in ends if len(end))
    return AutoWindow((0.0, until * 1.01), steps, longest)


def window_bounds(window: Window | None, horizon: float) -> tuple[float, float]:
    """The x range drawn: the window (its open end at the horizon), else the whole run."""
    if window is None:
        return 0.0, horizon * 1.01 or 1.0
    start, end = window
    end = horizon * 1.01 if end is None else end
    return start, end if end > start else start + 1.0


def labelled_rows(names: list[str]) -> list[int]:
    """Rows whose worker is named on the axis: all when few; else the leading non-engine rows (the
    learner) and every k-th engine, k a round number."""
    if len(names) <= LABELLED_ROWS:
        return list(range(len(names)))
    first_engine = next((row for row, name in enumerate(names) if "engine" in name), 0)
    engines = len(names) - first_engine
    every = next(step for step in NICE_STEPS if engines / step <= LABELLED_ROWS)
    rows = list(range(first_engine)) + list(range(first_engine, len(names), every))
    if len(names) - 1 - rows[-1] > every / 2:
        rows.append(len(names) - 1)
    return rows


def trained_rate(events: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Step edges [0, end_1, …, end_n] and trained samples per second over each step (n values)."""
    train = events[events["kind"] == "train"].sort_values("end")
    trained = events[(events["kind"] == "generate") & (events["step"] >= 0)].drop_duplicates(["group", "sample"])
    per_step = trained.groupby("step").size().reindex(train["step"].to_numpy(), fill_value=0).to_numpy()
    edges = np.concatenate([[0.0], train["end"].to_numpy()])
    lengths = np.diff(edges)
    rates = np.divide(per_step, lengths, out=np.zeros(len(lengths)), where=lengths > 0)
    return edges, rates


def generated_rate(events: pd.DataFrame, bin_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Bin edges and finished rollouts per second in each bin (a rollout finishes at its last generate end)."""
    finished = events[events["kind"] == "generate"].groupby(["group", "sample"])["end"].max().to_numpy()
    wall = run_wall(events)
    edges = np.arange(0.0, wall + bin_s, bin_s) if wall > 0 else np.array([0.0, bin_s])
    counts, _ = np.histogram(finished, bins=edges)
    return edges, counts / bin_s


def queue_depth(events: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Times and finished groups waiting after each: from a group's last generate end to the start of the
    train step that consumes it (or to its drop, or to the end of the run if still queued)."""
    generated = events[events["kind"].isin(["generate", "unfinished"])]
    if generated.empty:
        return np.zeros(1), np.zeros(1)
    by_group = generated.groupby("group").agg(
        ready=("end", "max"), step=("step", "max"), unfinished=("kind", lambda kinds: (kinds == "unfinished").any())
    )
    by_group = by_group[~by_group["unfinished"]]
    train_start = events[events["kind"] == "train"].groupby("step")["start"].min()
    dropped_at = events[events["kind"] == "drop"].groupby("group")["start"].min()
    consumed = by_group["step"].map(train_start)
    consumed = consumed.fillna(pd.Series(by_group.index, index=by_group.index).map(dropped_at))
    consumed = consumed.fillna(run_wall(events)).clip(lower=by_group["ready"])
    times = np.concatenate([by_group["ready"].to_numpy(), consumed.to_numpy()])
    deltas = np.concatenate([np.ones(len(by_group)), -np.ones(len(by_group))])
    moments, where = np.unique(times, return_inverse=True)  # net change per moment: no false spikes
    net = np.bincount(where, weights=deltas, minlength=len(moments))
    return np.concatenate([[0.0], moments]), np.concatenate([[0.0], np.cumsum(net)])
