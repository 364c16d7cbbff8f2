"""PNG figures of tables: the sizing sweep, a what-if sweep and the validation errors.

    size CSV      ─► sizing     (its tidy columns, via analysis.summaries.sizing.read_sizing)
    sweep rows    ─► sweep      (a figure against the first varied key, via analysis.summaries.sweep_table)
    validate rows ─► validation (each figure's error per drawn scenario, via analysis.summaries.validation)

Drawn like ``analysis.plots.plots`` (``analysis.plots.canvas``: Agg canvas, no pyplot); a ``*_figure`` function
builds the same figure without writing it, for the tests to read back.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ...scenarios.spec.loading import ScenarioError
from ...scenarios.spec.schedules import schedule_label
from ..summaries.sizing import read_sizing
from ..summaries.sweep_table import METRICS, short_names
from ..summaries.validation import FIGURES as VALIDATION_FIGURES
from .canvas import WIDTH_IN, new_figure, save_png

# ── sizing ──────────────────────────────────────────────────────────────────────


#: Each sizing line's marker and dash, so lines that lie on one another stay told apart.
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "*")
DASHES = ("-", "--", "-.", ":")
UNFIT_COLOUR = "#b00020"


def sizing(csv_path: Path, out: Path) -> Path:
    """Write ``sizing_figure(read_sizing(csv_path))`` to ``out`` as PNG."""
    return save_png(sizing_figure(read_sizing(csv_path), csv_path), out)


def sizing_figure(table: pd.DataFrame, source: Path | str = "the table") -> Figure:
    """Throughput and mean staleness against the generation:training split, one line per schedule and tp,
    each with its own marker and dash and nudged sideways a little (equal lines would hide each other); a
    split left out because it does not fit in memory is an ✕ on the axis."""
    unfit = table[~table["fits"] & ~table["colocated"]]
    table = table[table["fits"]]  # rows that do not fit in memory were not simulated
    splits, baselines = table[~table["colocated"]], table[table["colocated"]]
    if splits.empty:
        raise ScenarioError(f"{source}: no generation:training split rows to plot")
    figure = new_figure(WIDTH_IN, 5.2)
    axes = figure.subplots(1, 2)
    metrics = (("samples_per_s", "throughput (samples/s)"), ("staleness_mean", "mean staleness (steps)"))
    lines = list(splits.groupby(["schedule", "bound", "devices_per_engine"], sort=True))
    nudge = _nudge(splits, len(lines))
    for ax, (column, unit) in zip(axes, metrics, strict=True):
        for index, ((schedule, bound, tp), rows) in enumerate(lines):
            rows = rows.sort_values("generation_devices")
            ax.plot(
                rows["generation_devices"] + nudge * (index - (len(lines) - 1) / 2),
                rows[column],
                marker=MARKERS[index % len(MARKERS)],
                ls=DASHES[(index // len(MARKERS)) % len(DASHES)] if len(lines) > len(MARKERS) else "-",
                ms=5,
                alpha=0.85,
                color=f"C{index % 10}",
                label=f"{schedule_label(schedule, bound)} tp{tp}",
            )
        if len(unfit):
            ax.plot(
                unfit["generation_devices"],
                np.zeros(len(unfit)),
                ls="none",
                marker="x",
                ms=7,
                color=UNFIT_COLOUR,
                clip_on=False,
                label=f"left out: does not fit in memory ({len(unfit)})",
            )
        for _, baseline in baselines.iterrows():
            label = (
                f"{baseline['schedule']} colocated {baseline['generation_devices']} tp{baseline['devices_per_engine']}"
            )
            ax.axhline(baseline[column], color="#555555", ls="--", lw=1, label=f"{label} (baseline)")
        ax.set_ylabel(unit)
        ax.set_ylim(bottom=0)
        ax.set_title(unit.split(" (")[0], loc="left")
        ax.grid(alpha=0.3)
        _split_ticks(ax, splits)
    axes[0].legend(frameon=False, fontsize=8)
    figure.suptitle(f"Sizing: generation:training split of {_device_total(splits)} devices", fontsize=13)
    return figure


def _nudge(splits: pd.DataFrame, lines: int) -> float:
    """How far apart side by side the lines are drawn: a sixth of the closest splits' gap, shared out."""
    generation = np.unique(splits["generation_devices"].to_numpy(dtype=float))
    gap = float(np.min(np.diff(generation))) if len(generation) > 1 else 1.0
    return gap / 6 / max(lines - 1, 1)


def _split_ticks(ax: Axes, splits: pd.DataFrame) -> None:
    pairs = splits[["generation_devices", "training_devices"]].drop_duplicates().sort_values("generation_devices")
    span = max(1.0, float(pairs["generation_devices"].max() - pairs["generation_devices"].min()))
    shown: list[tuple[int, int]] = []
    for generation, training in zip(pairs["generation_devices"], pairs["training_devices"], strict=True):
        if not shown or generation - shown[-1][0] >= span / 9:  # labels at least a ninth of the axis apart
            shown.append((int(generation), int(training)))
    ax.set_xticks([g for g, _ in shown], [f"{g}:{t}" for g, t in shown])
    ax.set_xlabel("generation:training devices")


def _device_total(splits: pd.DataFrame) -> str:
    totals = (splits["generation_devices"] + splits["training_devices"]).unique()
    return str(int(totals[0])) if len(totals) == 1 else "various"


# ── what-if sweep ───────────────────────────────────────────────────────────────

MAX_VALUE_TICKS = 12  # a numeric x axis ticks each varied value up to this many
#: Units of common scenario keys, by their last part, for the sweep's x axis.
KEY_UNITS = {
    "generation_devices": "devices",
    "training_devices": "devices",
    "devices_per_engine": "devices",
    "median": "tokens",
    "max_tokens": "tokens",
    "value": "tokens",
    "scale": "tokens",
    "sigma": "σ of log length",
    "alpha": "Pareto tail index",
    "prompts_per_step": "groups per step",
    "samples_per_prompt": "samples per group",
    "max_staleness": "steps",
    "off_policy_steps": "steps",
    "steps": "learner steps",
    "max_concurrency": "rollouts per engine",
    "queue_capacity": "groups",
    "mfu": "fraction of peak FLOPs",
    "mbu": "fraction of peak bandwidth",
    "sync_latency_s": "s",
}


def sweep(table: pd.DataFrame, keys: Sequence[str], metric: str, scenario: str, out: Path) -> Path:
    """Write ``sweep_figure(...)`` to ``out`` as PNG."""
    return save_png(sweep_figure(table, keys, metric, scenario), out)


def sweep_figure(table: pd.DataFrame, keys: Sequence[str], metric: str, scenario: str) -> Figure:
    """``metric`` against the first varied key, one line per value of the second key, or with three
    or more keys one line per combination of all but the first; a skipped point is a gap in its line."""
    x_key, rest = keys[0], list(keys[1:])
    positions, ticks = _sweep_positions(table[x_key])
    figure = new_figure(8.0, 4.8)
    ax = figure.subplots()
    lines = table.groupby(rest, sort=False, dropna=False) if rest else [((), table)]
    names = short_names(keys)[1:]
    empty = []
    for index, (combination, rows) in enumerate(lines):
        values = combination if isinstance(combination, tuple) else (combination,)
        label = ", ".join(f"{name}={value}" for name, value in zip(names, values, strict=True)) or scenario
        y = pd.to_numeric(rows[metric], errors="coerce").astype(float)
        if y.isna().all():  # every point of the line skipped: no legend entry without points
            empty.append(label)
            continue
        x = rows[x_key].map(positions).astype(float)
        ax.plot(x, y, marker="o", ms=4, color=f"C{index % 10}", label=label)
    if empty:
        ax.text(0.01, 0.01, f"no point (skipped): {'; '.join(empty)}", transform=ax.transAxes, fontsize=8,
                color="#777777", va="bottom")  # fmt: skip
    if ticks:
        ax.set_xticks(range(len(ticks)), ticks)
    elif len(positions) <= MAX_VALUE_TICKS:
        ax.set_xticks(sorted(positions.values()), [f"{value:g}" for value in sorted(positions.values())])
    unit = KEY_UNITS.get(x_key.rsplit(".", 1)[-1])
    ax.set_xlabel(f"{x_key} ({unit})" if unit else x_key)
    ax.set_ylabel(METRICS[metric])
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    if rest and ax.get_lines():
        ax.legend(frameon=False, fontsize=9)
    ax.set_title(f"{scenario}: {METRICS[metric].split(' (')[0]} against {short_names(keys)[0]}")
    return figure


def _sweep_positions(column: pd.Series) -> tuple[dict[object, float], list[str]]:
    """Where each value of the x key sits: the value itself if every value is a number, else its rank
    in grid order (with those values as the tick labels)."""
    values = list(dict.fromkeys(column))
    if pd.api.types.is_numeric_dtype(column) and not pd.api.types.is_bool_dtype(column):
        return {value: float(value) for value in values}, []
    return {value: float(rank) for rank, value in enumerate(values)}, [str(value) for value in values]


# ── validate ────────────────────────────────────────────────────────────────────

#: The fidelity target drawn on each panel: ±10% for relative errors, ±0.25 steps of mean staleness.
TARGETS = {"%": 10.0, "steps": 0.25}


def validation(table: pd.DataFrame, title: str, out: Path) -> Path:
    return save_png(validation_figure(table, title), out)


def validation_figure(table: pd.DataFrame, title: str) -> Figure:
    """One panel per figure: the prediction's error for each scenario (bars), with the repeats' spread
    (whiskers from the smallest to the largest error) when there is one; the fidelity target dashed."""
    figure = new_figure(WIDTH_IN, 6.4)
    axes = figure.subplots(2, 3, sharex=True).ravel()
    positions = np.arange(len(table))
    names = [str(name)[-2:] for name in table["scenario"]]
    for ax, (key, label, unit) in zip(axes, VALIDATION_FIGURES, strict=True):
        scale = 100.0 if unit == "%" else 1.0
        value = pd.to_numeric(table[f"{key}_error"], errors="coerce").to_numpy(float) * scale
        low = pd.to_numeric(table[f"{key}_error_min"], errors="coerce").to_numpy(float) * scale
        high = pd.to_numeric(table[f"{key}_error_max"], errors="coerce").to_numpy(float) * scale
        ax.bar(positions, np.nan_to_num(value), color="#3a75b0", width=0.7)
        spread = np.vstack([value - low, high - value])
        if np.nan_to_num(spread).any():
            ax.errorbar(positions, value, yerr=np.nan_to_num(spread), fmt="none", ecolor="black", capsize=2, lw=1)
        ax.axhline(0, color="black", lw=0.8)
        for bound in (-TARGETS[unit], TARGETS[unit]):
            ax.axhline(bound, color="grey", lw=0.8, ls="--")
        ax.set_title(f"{label}", fontsize=10)
        ax.set_ylabel("error (% of measured)" if unit == "%" else "predicted - measured (steps)")
        ax.set_xticks(positions, names)
        ax.grid(axis="y", alpha=0.3)
    for ax in axes[3:]:
        ax.set_xlabel("scenario")
    figure.suptitle(title)
    return figure
