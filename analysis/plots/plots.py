"""PNG figures of run records: timelines, staleness, throughput and queue depth, device time, comparisons.

    events.parquet ─► analysis.records.event_series (intervals, rates, queue depth) ─► timeline, throughput_and_queue
    summary.json   ─► staleness_histogram, breakdown
    Comparison     ─► analysis.plots.comparison_plot: predicted_vs_measured (importable from here too)
    tables         ─► analysis.plots.table_plots: sizing, sweep, validation (importable from here too)

Each function draws one figure on ``analysis.plots.canvas`` (the Agg canvas, no pyplot, no global
backend switch) and writes it to ``out`` through this module's ``_save``; a ``*_figure`` function
builds the same figure without writing it (the tests read its bars, lines, labels and legend back).

Timelines stay legible with hundreds of workers: each worker's spans are
merged into busy intervals per kind first (an engine runs many rollouts at
once), drawn with one ``broken_barh`` call per worker and kind, in rows that
thin out as workers are added; workers sort naturally (engine-2 before engine-10).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from ...scenarios.record.record import RunSummary
from ..records.event_series import (
    Window,
    busy_intervals,
    generated_rate,
    labelled_rows,
    queue_depth,
    run_wall,
    trained_rate,
    window_bounds,
)
from ..records.trace import natural_key
from .canvas import DPI, WIDTH_IN
from .canvas import new_figure as _figure
from .canvas import save_png as _save
from .canvas import with_context as _with_context
from .comparison_plot import predicted_vs_measured as predicted_vs_measured
from .comparison_plot import predicted_vs_measured_figure as predicted_vs_measured_figure
from .table_plots import sizing as sizing
from .table_plots import sweep as sweep
from .table_plots import sweep_figure as sweep_figure
from .table_plots import validation as validation
from .table_plots import validation_figure as validation_figure

KIND_COLOURS = {
    "unfinished": "#a9c4e4",
    "generate": "#3a75b0",
    "sync": "#e08a2c",
    "switch": "#b5452a",
    "train": "#3f9b50",
}  # prefill spans sit inside generate spans and last milliseconds: the timeline leaves them out
IDLE_COLOUR = "#e9e9e9"
DROP_COLOUR = "#c0392b"
DROP_LABEL = "dropped (too stale)"
KIND_LABELS = {
    "sync": "sync (weight load)",
    "switch": "phase switch (colocated)",
    "unfinished": "unfinished at the end",
}
# (role, category, legend label, colour) of the breakdown's stacked bars, bottom to top.
BREAKDOWN_PARTS = (
    ("generation", "decode", "generation: decode", "#3a75b0"),
    ("generation", "prefill", "generation: prefill", "#7fa7d3"),
    ("generation", "tensor_parallel", "generation: tensor-parallel all-reduce", "#8a6bbf"),
    ("generation", "weight_sync", "generation: weight sync", "#e08a2c"),
    ("generation", "phase_switch", "generation: phase switch", "#b5452a"),
    ("generation", "idle", "generation: idle", "#d3dde9"),
    ("training", "compute", "training: compute", "#3f9b50"),
    ("training", "communication", "training: communication", "#9bcf8f"),
    ("training", "phase_switch", "training: phase switch", "#7a5c2e"),
    ("training", "idle", "training: idle", "#e2ece0"),
)
SECONDS_PER_HOUR = 3600.0
ROLE_ORDER = {"training": 0, "generation": 1}
ROW_IN_MAX = 0.24  # height of one worker row while few; rows thin out past this
PANEL_ROWS_IN = 7.5  # most inches the rows of one timeline panel take
PANEL_EXTRA_IN = 0.9  # title and axis of one panel
MIN_SPAN_PX = 2.5  # busy intervals are drawn at least this wide, so short syncs still show

LabelledEvents = tuple[str, pd.DataFrame]
Histogram = Mapping[str, int]


# ── timeline ────────────────────────────────────────────────────────────────────


def timeline_workers(events: pd.DataFrame) -> list[tuple[str, str]]:
    """(worker, role) with something to draw: training roles first, then generation, each in natural order."""
    spans = events[events["kind"].isin(KIND_COLOURS.keys())]
    roles = spans.groupby("worker", sort=False)["role"].first()
    workers = [(str(worker), str(role)) for worker, role in roles.items()]
    return sorted(workers, key=lambda pair: (ROLE_ORDER.get(pair[1], 2), natural_key(pair[0])))


def row_heights(workers: Sequence[tuple[str, str]]) -> list[float]:
    """Row height per worker in row units: 1, except training rows grow so a lone learner stays visible."""
    generation_rows = sum(1 for _, role in workers if role != "training")
    training_height = max(1.0, generation_rows / 20)
    return [training_height if role == "training" else 1.0 for _, role in workers]


def timeline_panel_height_in(row_units: float) -> float:
    return PANEL_EXTRA_IN + min(max(row_units, 1.0) * ROW_IN_MAX, PANEL_ROWS_IN)


def timeline_height_in(row_units: Sequence[float]) -> float:
    """Figure height for timeline panels holding these many row units each (plus the legend band)."""
    return 0.6 + sum(timeline_panel_height_in(units) for units in row_units)


def timeline(
    runs: Sequence[LabelledEvents],
    out: Path,
    window: Window | None = None,
    contexts: Sequence[str] | None = None,
) -> Path:
    """Write ``timeline_figure(runs, window, contexts)`` to ``out`` as PNG."""
    return _save(timeline_figure(runs, window, contexts), out)


def timeline_figure(
    runs: Sequence[LabelledEvents], window: Window | None = None, contexts: Sequence[str] | None = None
) -> Figure:
    """One panel per run, stacked on a shared time axis; one row per worker, spans coloured by kind, and a
    row of dropped rollouts (a tick at each drop) where any were dropped. ``window`` shows only that span
    of time; ``contexts`` (one per run, e.g. the scenario's essentials) go into the panel titles."""
    workers = [timeline_workers(events) for _, events in runs]
    drops = [events[events["kind"] == "drop"] for _, events in runs]
    units = [
        sum(row_heights(names)) + (1 if len(dropped) else 0) for names, dropped in zip(workers, drops, strict=True)
    ]
    figure = _figure(WIDTH_IN, timeline_height_in(units))
    axes = figure.subplots(
        len(runs), 1, sharex=True, squeeze=False, height_ratios=[timeline_panel_height_in(u) for u in units]
    )[:, 0]
    horizon = max((run_wall(events) for _, events in runs), default=0.0)
    start, end = window_bounds(window, horizon)
    min_width_s = (end - start) * MIN_SPAN_PX / (WIDTH_IN * DPI)
    contexts = contexts or [""] * len(runs)
    for ax, (label, events), names, dropped, context in zip(axes, runs, workers, drops, contexts, strict=True):
        _draw_timeline_panel(ax, label, events, names, min_width_s, context)
        if len(dropped):
            _draw_drops(ax, dropped)
    axes[-1].set_xlim(start, end)
    steps = max((int((events["kind"] == "train").sum()) for _, events in runs), default=0)
    shown = f", shown from {_s(start)} to {_s(end)} s of {_s(horizon)} s ({steps:,} learner steps)" if window else ""
    axes[-1].set_xlabel(f"time (s){shown}")
    kinds = [kind for kind in KIND_COLOURS if any((events["kind"] == kind).any() for _, events in runs)]
    handles = [Patch(color=KIND_COLOURS[kind], label=KIND_LABELS.get(kind, kind)) for kind in kinds]
    handles.append(Patch(facecolor=IDLE_COLOUR, edgecolor="#999999", label="idle"))
    if any(len(dropped) for dropped in drops):
        handles.append(Patch(color=DROP_COLOUR, label=DROP_LABEL))
    figure.legend(handles=handles, loc="outside upper right", ncols=len(handles), frameon=False)
    figure.suptitle("Timeline: busy spans per worker", x=0.01, ha="left", fontsize=13)
    return figure


def _s(seconds: float) -> str:
    return f"{seconds:,.0f}" if abs(seconds) >= 100 else f"{seconds:.3g}"


def _draw_drops(ax: Axes, dropped: pd.DataFrame) -> None:
    """A row under the workers with a tick at each drop, labelled with how many were dropped."""
    bottom = ax.get_ylim()[0]  # rows grow downwards: the current bottom edge
    row = (bottom + 0.15, bottom + 0.85)
    ax.vlines(dropped["start"].to_numpy(dtype=float), *row, colors=DROP_COLOUR, lw=0.8)
    ax.set_ylim(bottom + 1.0, 0.0)
    ticks, labels = list(ax.get_yticks()), _tick_texts(ax.get_yticklabels())
    ax.set_yticks([*ticks, bottom + 0.5], [*labels, f"dropped ({len(dropped):,})"])


def _tick_texts(labels: Sequence[object]) -> list[str]:
    return [label.get_text() for label in labels]  # type: ignore[attr-defined]


def _draw_timeline_panel(
    ax: Axes, label: str, events: pd.DataFrame, workers: list[tuple[str, str]], min_width_s: float, context: str = ""
) -> None:
    wall = run_wall(events)
    about = f" · {context}" if context else ""
    ax.set_title(f"{label}{about}: wall {wall:,.1f} s", loc="left", fontsize=11 if not context else 9.5)
    if not workers:
        ax.text(0.5, 0.5, "no spans recorded", transform=ax.transAxes, ha="center", va="center", color="#777777")
        ax.set_yticks([])
        return
    spans = events[events["kind"].isin(KIND_COLOURS.keys())].assign(
        start=events["start"].clip(upper=wall), end=events["end"].clip(upper=wall)
    )
    by_worker = dict(list(spans.groupby("worker", sort=False)))
    heights = row_heights(workers)
    tops = np.concatenate([[0.0], np.cumsum(heights)[:-1]])
    gap = 0.18 if len(workers) <= 64 else 0.0  # thin rows get no gap, or they would vanish
    for (worker, role), top, height in zip(workers, tops, heights, strict=True):
        margin = max(gap, 0.08 * height) if role == "training" else gap  # keeps a tall learner row apart
        band = (top + margin / 2, height - margin)
        ax.broken_barh([(0.0, wall)], band, facecolors=IDLE_COLOUR, linewidth=0)
        worker_spans = by_worker[worker]
        for kind, colour in KIND_COLOURS.items():
            of_kind = worker_spans[worker_spans["kind"] == kind]
            intervals = busy_intervals(of_kind["start"].to_numpy(), of_kind["end"].to_numpy())
            if intervals:
                widened = [(start, max(width, min_width_s)) for start, width in intervals]
                ax.broken_barh(widened, band, facecolors=colour, linewidth=0)
    ax.set_ylim(float(tops[-1] + heights[-1]), 0.0)
    ticks = labelled_rows([name for name, _ in workers])
    ax.set_yticks(
        [tops[row] + heights[row] / 2 for row in ticks],
        [workers[row][0] for row in ticks],
        fontsize=8 if len(workers) <= 24 else 7,
    )
    ax.tick_params(axis="y", length=0)
    ax.set_ylabel(f"worker ({len(workers)})")
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)


# ── staleness ───────────────────────────────────────────────────────────────────


def staleness_histogram(runs: Sequence[tuple[str, Histogram]], out: Path, context: str = "") -> Path:
    """Write ``staleness_figure(runs, context)`` to ``out`` as PNG."""
    return _save(staleness_figure(runs, context), out)


def staleness_figure(runs: Sequence[tuple[str, Histogram]], context: str = "") -> Figure:
    """Normalized staleness histograms of two or more runs overlaid as grouped bars."""
    figure = _figure(9.0, 5.0)
    ax = figure.subplots()
    shares = [(label, _shares(histogram)) for label, histogram in runs]
    values = sorted({value for _, share in shares for value in share}) or [0]
    width = 0.8 / max(len(shares), 1)
    for index, (label, share) in enumerate(shares):
        offsets = np.arange(len(values)) - 0.4 + width * (index + 0.5)
        heights = [share.get(value, 0.0) for value in values]
        mean = sum(value * part for value, part in share.items())
        ax.bar(offsets, heights, width * 0.95, label=f"{label} (mean {mean:.2f})", color=f"C{index}")
    ax.set_xticks(range(len(values)), [str(value) for value in values])
    ax.set_xlabel("staleness (learner steps between the policy that generated a sample and the one trained)")
    ax.set_ylabel("share of trained samples")
    ax.set_ylim(0, 1.05)
    ax.yaxis.set_major_formatter(lambda value, _: f"{value:.0%}")
    ax.legend(frameon=False)
    ax.grid(axis="y", alpha=0.3)
    ax.set_title(_with_context("Staleness of trained samples, normalized", context), fontsize=9.5 if context else None)
    return figure


def _shares(histogram: Histogram) -> dict[int, float]:
    total = sum(histogram.values())
    return {int(value): count / total for value, count in histogram.items()} if total else {}


# ── throughput and queue depth ──────────────────────────────────────────────────


def throughput_and_queue(runs: Sequence[LabelledEvents], out: Path, context: str = "") -> Path:
    """Write ``throughput_and_queue_figure(runs, context)`` to ``out`` as PNG."""
    return _save(throughput_and_queue_figure(runs, context), out)


def throughput_and_queue_figure(runs: Sequence[LabelledEvents], context: str = "") -> Figure:
    """Top: trained and generated samples per second over time; bottom: queue depth over time."""
    figure = _figure(WIDTH_IN, 7.5)
    top, bottom = figure.subplots(2, 1, sharex=True, height_ratios=[3, 2])
    horizon = max((run_wall(events) for _, events in runs), default=0.0)
    bin_s = max(horizon / 80, 1e-9)
    for index, (label, events) in enumerate(runs):
        colour = f"C{index}"
        edges, rates = trained_rate(events)
        if len(rates):
            top.step(edges, np.append(rates, rates[-1]), where="post", color=colour, lw=1.8, label=f"{label}: trained")
        edges, rates = generated_rate(events, bin_s)
        top.step(
            edges, np.append(rates, rates[-1]), where="post", color=colour, lw=1, ls="--", alpha=0.75,
            label=f"{label}: generated",
        )  # fmt: skip
        times, depth = queue_depth(events)
        bottom.step(times, depth, where="post", color=colour, lw=1.1, alpha=0.85, label=label)
    top.set_ylabel("throughput (samples/s)")
    top.set_title("Throughput (trained: per learner step; generated: finished rollouts per bin)", loc="left")
    top.legend(fontsize=9, ncols=2, framealpha=0.9, loc="upper right")
    bottom.set_ylabel("queue depth (groups)")
    bottom.set_title("Finished groups waiting for the learner", loc="left")
    bottom.set_xlabel("time (s)")
    bottom.set_xlim(0, horizon * 1.01 or 1.0)
    bottom.legend(fontsize=9, framealpha=0.9, loc="upper right")
    for ax in (top, bottom):
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    figure.suptitle(_with_context("Throughput and queue depth over time", context), fontsize=13)
    return figure


# ── where device time goes ──────────────────────────────────────────────────────


def breakdown(runs: Sequence[tuple[str, RunSummary]], out: Path, context: str = "") -> Path:
    """Write ``breakdown_figure(runs, context)`` to ``out`` as PNG."""
    return _save(breakdown_figure(runs, context), out)


def breakdown_figure(runs: Sequence[tuple[str, RunSummary]], context: str = "") -> Figure:
    """One stacked bar per run: its device-hours per learner step, split by role and what they went to.

    ``runs`` are (label, summary) pairs whose summaries have a ``breakdown``; the legend lists the
    categories some run spent time on."""
    figure = _figure(max(6.0, 1.6 * len(runs) + 4.5), 5.2)
    ax = figure.subplots()
    heights = {part: [_per_step_hours(summary, part[0], part[1]) for _, summary in runs] for part in BREAKDOWN_PARTS}
    bottom = np.zeros(len(runs))
    for part, values in heights.items():
        label = part[2] if any(values) else f"_{part[2]}"  # an underscore keeps a category no run has out of the legend
        ax.bar(range(len(runs)), values, 0.6, bottom=bottom, color=part[3], label=label)
        bottom += np.asarray(values)
    ax.set_xticks(range(len(runs)), [label for label, _ in runs])
    ax.set_ylabel("device-hours per learner step")
    ax.set_ylim(0, max(float(bottom.max(initial=0.0)), 1e-12) * 1.08)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(frameon=False, fontsize=8, loc="center left", bbox_to_anchor=(1.0, 0.5))
    title = "Where device time goes: device-hours per learner step, by role and activity"
    ax.set_title(_with_context(title, context), loc="left")
    return figure


def _per_step_hours(summary: RunSummary, role: str, category: str) -> float:
    seconds = summary.figure(("breakdown", role, category))
    return seconds / SECONDS_PER_HOUR / summary.steps if summary.steps else 0.0
