"""The ``asyncrl sweep`` table: one row per grid point, for the terminal, as JSON and as a tidy CSV.

    simulator.sweep.simulate_grid ─► (point, summary or None) in grid order ─► sweep_records ─► CSV, JSON, plot
                                                                           └─► sweep_lines (terminal)

The CSV has one column per varied key (named by its dotted key, holding the
value as YAML read it), then the figures as plain numbers (utilizations as
fractions, device-hours and USD per 1,000 trained samples), then ``status``
(``ok``, or ``invalid`` for a point the scenario rejects) and ``reason`` (the
one-line validation error). An invalid point keeps its row, figures left empty.
Nothing here simulates: the rows come from summaries the sweep already produced.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ...scenarios.files.writing import written
from ...scenarios.record.record import RunSummary, Simulated
from ...scenarios.spec.loading import ScenarioError
from ..tables import (
    FIGURE_HEADER,
    cost_cells,
    cost_header,
    device_hours_per_1k,
    figure_cells,
    format_table,
)

if TYPE_CHECKING:
    from ...scenarios.spec.scenario import Scenario

#: Figure columns of the CSV, and how an axis showing one is labelled (with its unit).
METRICS: dict[str, str] = {
    "samples_per_s": "throughput (trained samples/s)",
    "tokens_per_s": "throughput (trained completion tokens/s)",
    "step_s": "mean learner step (s)",
    "staleness_mean": "mean staleness (steps)",
    "staleness_max": "max staleness (steps)",
    "generation_utilization": "generation utilization (fraction of engine-time)",
    "training_utilization": "training utilization (fraction of wall time)",
    "dropped": "dropped rollouts (samples)",
    "wall_time_s": "wall time (s)",
    "device_hours_per_1k_samples": "device-hours per 1,000 trained samples (device·h)",
    "cost_per_1k_samples_usd": "cost per 1,000 trained samples (USD)",
}
PRICED_ONLY = "cost_per_1k_samples_usd"
STATUS_COLUMNS = ("status", "reason")


class Point(Protocol):
    """One grid point: the varied values, and its scenario (None, with a reason, if rejected)."""

    @property
    def values(self) -> Mapping[str, Any]: ...

    @property
    def scenario(self) -> Scenario | None: ...

    @property
    def reason(self) -> str: ...


SweepResult = Simulated[Point]


def figure_columns(priced: bool) -> list[str]:
    """The figure columns, the cost one only with a price per device-hour."""
    return [column for column in METRICS if priced or column != PRICED_ONLY]


def check_metric(metric: str, priced: bool) -> None:
    """A ScenarioError naming ``metric`` (the argument) unless it is a figure column the sweep writes."""
    columns = figure_columns(priced)
    if metric not in columns:
        hint = " (it needs --price-per-device-hour)" if metric == PRICED_ONLY else f" (one of: {', '.join(columns)})"
        raise ScenarioError(f"metric: {metric} is not a figure of the sweep{hint}")


def sweep_record(
    keys: Sequence[str], point: Point, summary: RunSummary | None, price_per_device_hour: float | None
) -> dict[str, Any]:
    """One CSV row: the point's values, its figures (None when skipped), status and reason."""
    values = {key: point.values[key] for key in keys}
    columns = figure_columns(price_per_device_hour is not None)
    if summary is None or point.scenario is None:
        return values | dict.fromkeys(columns) | {"status": "invalid", "reason": point.reason}
    hours = device_hours_per_1k(point.scenario, summary)
    figures = [
        summary.throughput.samples_per_s,
        summary.throughput.tokens_per_s,
        summary.step_time_s.mean,
        summary.staleness.mean,
        summary.staleness.max,
        summary.utilization.generation,
        summary.utilization.training,
        summary.samples.dropped,
        summary.wall_time_s,
        hours,
        *([hours * price_per_device_hour] if price_per_device_hour is not None else []),
    ]
    return values | dict(zip(columns, figures, strict=True)) | {"status": "ok", "reason": ""}


def sweep_records(
    keys: Sequence[str], results: Sequence[SweepResult], price_per_device_hour: float | None = None
) -> list[dict[str, Any]]:
    """Every grid point's row, in grid order."""
    return [sweep_record(keys, point, summary, price_per_device_hour) for point, summary in results]


def write_sweep_csv(out: Path, records: Sequence[Mapping[str, Any]]) -> Path:
    """The rows as a tidy CSV; a skipped point's figures are empty cells."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with written(out) as temporary, temporary.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(records[0]))
        writer.writeheader()
        writer.writerows(records)
    return out


def short_names(keys: Sequence[str]) -> list[str]:
    """Each key's last part (``sigma``), or the whole dotted key where two last parts coincide."""
    leaves = [key.rsplit(".", 1)[-1] for key in keys]
    return [leaf if leaves.count(leaf) == 1 else key for key, leaf in zip(keys, leaves, strict=True)]


def sweep_lines(
    scenario: Scenario, keys: Sequence[str], results: Sequence[SweepResult], price_per_device_hour: float | None
) -> str:
    """The grid in its order: the varied values, the figures, device-hours (and cost); then the points skipped."""
    header = [*short_names(keys), *FIGURE_HEADER, *cost_header(price_per_device_hour)]
    blank = ["-"] * (len(header) - len(keys))
    rows = []
    for point, summary in results:
        values = [point.values[key] for key in keys]
        if summary is None or point.scenario is None:
            rows.append([*values, *blank])
        else:
            rows.append([*values, *figure_cells(summary), *cost_cells(point.scenario, summary, price_per_device_hour)])
    lines = [
        f"{scenario.name}: {len(results)} grid points, {scenario.run.steps} steps simulated per point, in grid order",
        format_table(header, rows),
    ]
    skipped = [point for point, summary in results if summary is None]
    if skipped:
        lines.append(f"skipped {len(skipped)} of {len(results)} grid points (invalid scenarios):")
        names = short_names(keys)
        for point in skipped:
            where = " ".join(f"{name}={point.values[key]}" for name, key in zip(names, keys, strict=True))
            lines.append(f"  {where}: {point.reason}")
    return "\n".join(lines)
