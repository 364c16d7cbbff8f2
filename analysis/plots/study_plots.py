"""PNG figures of an ``asyncrl study``: reward over time, robustness to staleness, the reward–KL frontier.

    curves.csv  ─► reward_curves  reward (mean of the last 10 steps) against wall time (s) or learner step:
                                   a panel per loss × correction, a line per schedule (mean over seeds), and
                                   the held-out evaluation's reward as markers where the runs evaluated
    summary.csv ─► robustness     steps to target against mean staleness: a line per loss × correction,
                                   95% CI bars over the seeds that reached the target
                └─► frontier       final reward (95% CI) against KL to the initial policy at the end:
                                   a point per schedule × loss × correction

Drawn like ``analysis.plots.plots``, on ``analysis.plots.canvas`` (Agg canvas, no pyplot; matplotlib imported here
and in the other plot modules only). Against wall time, each seed's curve is interpolated onto a common grid up
to the earliest end of the seeds, then averaged, so the line stops where a seed's run did.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from ..summaries.study import WINDOW
from .canvas import WIDTH_IN, new_figure, save_png

GRID_POINTS = 200
KIND_MARKERS = {"sync": "o", "pipelined": "s", "streaming": "^"}
REWARD_LABEL = f"reward (mean of the last {WINDOW} steps)"


def study_plots(curves: pd.DataFrame, summary: pd.DataFrame, target: float, title: str, out: Path) -> list[Path]:
    """Every figure of a study, written under ``out``; the paths."""
    quality = quality_label(curves)
    return [
        save_png(reward_curves_figure(curves, target, "end", title), out / "reward_wall.png"),
        save_png(reward_curves_figure(curves, target, "step", title), out / "reward_step.png"),
        save_png(robustness_figure(summary, target, title, quality), out / "robustness.png"),
        save_png(frontier_figure(summary, title, quality), out / "frontier.png"),
    ]


def quality_label(curves: pd.DataFrame) -> str:
    """What the study's reward is: the held-out evaluation's where the runs evaluated, else the training batch's."""
    if "eval_reward" in curves and curves["eval_reward"].notna().any():
        return "held-out evaluation"
    return f"training batch, mean of {WINDOW} steps"


def mean_curve(cell_curves: pd.DataFrame, x: str) -> tuple[np.ndarray, np.ndarray]:
    """The seeds' smoothed reward averaged: by step, or on a common wall-time grid (``x`` = ``end``)."""
    smoothed = []
    for _, rows in cell_curves.groupby("cell", sort=False):
        rows = rows.sort_values("step")
        reward = rows["reward_mean"].astype(float).rolling(WINDOW, min_periods=1).mean()
        smoothed.append((rows[x].to_numpy(float), reward.to_numpy(float)))
    if x == "step":
        frame = pd.concat([pd.Series(y, index=xs) for xs, y in smoothed], axis=1).dropna()
        return frame.index.to_numpy(float), frame.mean(axis=1).to_numpy(float)
    horizon = min(xs[-1] for xs, _ in smoothed)
    grid = np.linspace(0.0, horizon, GRID_POINTS)
    start = max(xs[0] for xs, _ in smoothed)
    grid = grid[grid >= start]
    return grid, np.mean([np.interp(grid, xs, y) for xs, y in smoothed], axis=0)


def mean_evaluation(cell_curves: pd.DataFrame, x: str) -> tuple[np.ndarray, np.ndarray] | None:
    """The held-out evaluation's reward at each evaluated step, mean over seeds, against ``x``; None without one."""
    if "eval_reward" not in cell_curves:
        return None
    rows = cell_curves.dropna(subset=["eval_reward"])
    if rows.empty:
        return None
    by_step = rows.groupby("step").agg(x=(x, "mean"), y=("eval_reward", "mean")).sort_index()
    return by_step["x"].to_numpy(float), by_step["y"].to_numpy(float)


def schedule_styles(schedules: Sequence[str], in_flight: Sequence[bool]) -> dict[str, dict[str, Any]]:
    """A colour per schedule (grid order), dashed with in-flight updates."""
    return {
        schedule: {"color": f"C{index % 10}", "ls": "--" if flight else "-"}
        for index, (schedule, flight) in enumerate(zip(schedules, in_flight, strict=True))
    }


def reward_curves_figure(curves: pd.DataFrame, target: float, x: str, title: str) -> Figure:
    """A panel per loss × correction; in each, the mean smoothed reward of every schedule against ``x``."""
    panels = list(curves.groupby(["loss", "correction"], sort=False))
    schedules = curves.drop_duplicates("schedule")
    styles = schedule_styles(list(schedules["schedule"]), list(schedules["in_flight_updates"].astype(bool)))
    columns = min(4, len(panels))
    rows = math.ceil(len(panels) / columns)
    figure = new_figure(WIDTH_IN, 1.2 + 3.2 * rows)
    axes = np.atleast_1d(figure.subplots(rows, columns, sharey=True, squeeze=False)).ravel()
    for ax, ((loss, correction), panel) in zip(axes, panels, strict=False):
        for schedule, cells in panel.groupby("schedule", sort=False):
            xs, ys = mean_curve(cells, x)
            ax.plot(xs, ys, lw=1.4, **styles[schedule])
            evaluated = mean_evaluation(cells, x)
            if evaluated is not None:
                ax.plot(*evaluated, lw=0.8, marker="o", ms=3, color=styles[schedule]["color"])
        ax.axhline(target, color="grey", lw=1, ls=":")
        ax.set_title(f"{loss}, {correction}", fontsize=10)
        ax.grid(alpha=0.3)
    for ax in axes[len(panels) :]:
        ax.set_visible(False)
    for ax in axes[::columns]:
        ax.set_ylabel(REWARD_LABEL)
    # One label for the figure: under each of four panels the long label ran into its neighbours'.
    figure.supxlabel("wall time (s, from the start of generation)" if x == "end" else "learner step")
    handles = [Line2D([], [], lw=1.4, **style) for style in styles.values()]
    handles.append(Line2D([], [], color="grey", lw=1, ls=":"))
    labels = [*styles, f"target {target:g}"]
    if "eval_reward" in curves and curves["eval_reward"].notna().any():
        handles.append(Line2D([], [], color="grey", lw=0.8, marker="o", ms=3))
        labels.append("held-out evaluation (sampled)")
    figure.legend(handles, labels, loc="outside right upper", frameon=False, fontsize=9)
    against = "wall time" if x == "end" else "learner step"
    figure.suptitle(f"Reward against {against}, mean over seeds: {title}")
    return figure


def robustness_figure(summary: pd.DataFrame, target: float, title: str, quality: str = "") -> Figure:
    """Steps to target against measured mean staleness, a line per loss × correction, 95% CI bars."""
    figure = new_figure(WIDTH_IN * 0.7, 5.0)
    ax = figure.subplots()
    for index, ((loss, correction), rows) in enumerate(summary.groupby(["loss", "correction"], sort=False)):
        rows = rows.dropna(subset=["steps_to_target", "staleness_mean"]).sort_values("staleness_mean")
        if not len(rows):
            continue
        ax.errorbar(
            rows["staleness_mean"],
            rows["steps_to_target"],
            yerr=rows["steps_to_target_ci"].fillna(0),
            marker="o",
            ms=4,
            capsize=3,
            lw=1.2,
            color=f"C{index % 10}",
            label=f"{loss}, {correction}",
        )
    ax.set_xlabel("mean staleness of trained tokens (learner steps)")
    ax.set_ylabel(f"learner steps to reward ≥ {target:g} ({quality or f'mean of {WINDOW} steps'})")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    _legend(ax)
    ax.set_title(f"Robustness: steps to target against staleness (seeds that reached it; 95% CI)\n{title}")
    return figure


def frontier_figure(summary: pd.DataFrame, title: str, quality: str = "") -> Figure:
    """Final reward (95% CI) against KL at the end: a colour per loss × correction, a marker per schedule kind."""
    figure = new_figure(WIDTH_IN * 0.7, 5.0)
    ax = figure.subplots()
    for index, ((loss, correction), rows) in enumerate(summary.groupby(["loss", "correction"], sort=False)):
        rows = rows.dropna(subset=["kl_final", "final_reward"])
        colour = f"C{index % 10}"
        for row in rows.itertuples():
            ax.errorbar(
                row.kl_final,
                row.final_reward,
                yerr=0 if math.isnan(row.final_reward_ci) else row.final_reward_ci,
                marker=KIND_MARKERS.get(row.kind, "o"),
                mfc="white" if row.in_flight_updates else colour,
                color=colour,
                ms=6,
                capsize=2,
                lw=1,
            )
            ax.annotate(
                row.schedule, (row.kl_final, row.final_reward), fontsize=7, xytext=(4, 3), textcoords="offset points"
            )
        ax.plot([], [], color=colour, marker="o", ls="", label=f"{loss}, {correction}")
    for kind, marker in KIND_MARKERS.items():
        ax.plot([], [], color="black", marker=marker, mfc="black", ls="", label=kind)
    ax.plot([], [], color="black", marker="^", mfc="white", ls="", label="streaming, in-flight updates")
    ax.set_xlabel(f"KL to the initial policy, mean of the last {WINDOW} steps (nats)")
    last = "the last evaluation" if quality.startswith("held-out") else f"mean of the last {WINDOW} steps"
    ax.set_ylabel(f"final reward ({last})")
    ax.grid(alpha=0.3)
    _frontier_limits(ax, summary.dropna(subset=["kl_final", "final_reward"]))
    _legend(ax)
    ax.set_title(f"Reward against KL at the end of the run (mean over seeds; 95% CI)\n{title}")
    return figure


#: The least span of rewards the frontier shows: autoscaled onto points a hundredth apart, noise looked like a trend.
MIN_REWARD_SPAN = 0.2


def _frontier_limits(ax: Axes, rows: pd.DataFrame) -> None:
    """KL from 0 (it is never negative), and a reward span of at least MIN_REWARD_SPAN around the points."""
    if rows.empty:
        return
    ax.set_xlim(0, max(float(rows["kl_final"].max()) * 1.15, 1e-3))
    ci = rows["final_reward_ci"].fillna(0).to_numpy(dtype=float)
    low = float((rows["final_reward"].to_numpy(dtype=float) - ci).min())
    high = float((rows["final_reward"].to_numpy(dtype=float) + ci).max())
    span = max(high - low, MIN_REWARD_SPAN) * 1.15
    middle = (low + high) / 2
    ax.set_ylim(middle - span / 2, middle + span / 2)


def _legend(ax: Axes) -> None:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(frameon=False, fontsize=8)
