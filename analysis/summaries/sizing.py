"""The ``asyncrl size`` table: ranked splits of a device budget, for the terminal and as a tidy CSV.

    simulator.sweep.simulate_sizing ─► (variant, summary) pairs, best first ─► sizing_lines (terminal)
                                                                          └─► write_sizing_csv ─► read_sizing

The CSV has one column per fact, so nothing has to be parsed back out of a
label: the schedule, its staleness bound, the split and the engine size, then
the figures as plain numbers (utilizations as fractions), device-hours (and,
when priced, USD) per 1,000 trained samples. ``label`` repeats the terminal
table's first column for people reading the file. Rows that do not fit in
device memory come last, with ``fits`` false, empty figures and a ``reason``
(``scenarios.costs.memory``); the terminal table leaves them out and says so in one
line. Nothing here simulates: the rows come from summaries the sweep already
produced (None for a row that does not fit).

Sized with a staleness penalty (``asyncrl size --penalty``), the rows are ranked by predicted time to the
target reward, the table has a ``to target s`` column, and the CSV ends with ``steps_to_target`` and
``time_to_target_s``; without one, a line says the time to target is not predicted.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...scenarios.costs.memory import GB, PoolMemory, misfit
from ...scenarios.files.writing import written
from ...scenarios.record.record import RunSummary, Simulated
from ...scenarios.spec.loading import ScenarioError
from ..tables import (
    FIGURE_HEADER,
    NOT_PREDICTED,
    Labelled,
    cost_cells,
    cost_header,
    device_hours_per_1k,
    figure_cells,
    format_table,
)

if TYPE_CHECKING:
    import pandas as pd

    from ...scenarios.spec.scenario import Scenario

SizingResult = Simulated[Labelled]  # None: the row does not fit in memory, not simulated
TABLE_HEADER = ["schedule split tp", *FIGURE_HEADER]
SIZING_COLUMNS = (
    "label",
    "schedule",  # sync, pipelined or streaming
    "bound",  # staleness bound: η (streaming), N (pipelined), 0 (sync)
    "colocated",
    "generation_devices",
    "training_devices",
    "devices_per_engine",
    "fits",  # the plan fits in device memory; false: not simulated, figures empty
    "samples_per_s",
    "step_s",  # mean learner step
    "staleness_mean",
    "staleness_max",
    "generation_utilization",  # 0-1
    "training_utilization",  # 0-1
    "dropped",
    "reason",  # why it does not fit (the pool and its figures); empty when it fits
    "steps_simulated",  # fewer than the scenario's run.steps when the run ended once converged (extrapolated)
)
OPTIONAL_COLUMNS = ("label", "fits", "reason", "steps_simulated")  # older CSVs lack some of these
INTEGER_COLUMNS = ("bound", "generation_devices", "training_devices", "devices_per_engine")
COUNT_COLUMNS = ("staleness_max", "dropped", "steps_simulated")  # integers, empty where a row was not simulated
FLOAT_COLUMNS = ("samples_per_s", "step_s", "staleness_mean", "generation_utilization", "training_utilization")
TARGET_COLUMNS = (
    "steps_to_target",  # the penalty fit at the row's mean token staleness and dropped fraction (steps)
    "time_to_target_s",  # wall time at which those steps have finished (s)
)
COST_COLUMNS = (
    "device_hours_per_1k_samples",  # all the plan's devices × wall time / 3600 per 1,000 trained samples
    "cost_per_1k_samples_usd",  # only with a price per device-hour
)


def sizing_record(variant: Labelled, summary: RunSummary | None) -> dict[str, Any]:
    """One row of the CSV: the variant's schedule and split, and its figures or why it has none."""
    scenario, cluster = variant.scenario, variant.scenario.cluster
    pool = misfit(scenario) if summary is None else None
    return {
        "label": variant.label,
        "schedule": scenario.schedule.kind,
        "bound": scenario.staleness_bound,
        "colocated": cluster.colocated,
        "generation_devices": cluster.generation_devices,
        "training_devices": cluster.training_devices,
        "devices_per_engine": cluster.devices_per_engine,
        "fits": summary is not None,
        **(_figures(summary) if summary is not None else {}),
        "reason": pool.reason() if pool is not None else "",
    }


def _figures(summary: RunSummary) -> dict[str, Any]:
    return {
        "samples_per_s": summary.throughput.samples_per_s,
        "step_s": summary.step_time_s.mean,
        "staleness_mean": summary.staleness.mean,
        "staleness_max": summary.staleness.max,
        "generation_utilization": summary.utilization.generation,
        "training_utilization": summary.utilization.training,
        "dropped": summary.samples.dropped,
        "steps_simulated": summary.steps_run,
    }


def cost_record(
    scenario: Scenario, summary: RunSummary | None, price_per_device_hour: float | None
) -> dict[str, float | None]:
    """The cost columns of one row: device-hours per 1,000 trained samples, and USD when priced
    (empty for a plan that was not simulated because it does not fit)."""
    if summary is None:
        return dict.fromkeys(COST_COLUMNS if price_per_device_hour is not None else COST_COLUMNS[:1])
    hours = device_hours_per_1k(scenario, summary)
    if price_per_device_hour is None:
        return {COST_COLUMNS[0]: hours}
    return {COST_COLUMNS[0]: hours, COST_COLUMNS[1]: hours * price_per_device_hour}


def target_record(summary: RunSummary | None) -> dict[str, float | None]:
    """The time-to-target columns of one row (empty for a plan that was not simulated)."""
    if summary is None:
        return dict.fromkeys(TARGET_COLUMNS)
    reached = summary.time_to_target
    if reached is None:
        return dict.fromkeys(TARGET_COLUMNS)
    return {"steps_to_target": reached.steps, "time_to_target_s": reached.time_s}


def write_sizing_csv(
    out: Path, ranked: Sequence[SizingResult], price_per_device_hour: float | None = None, with_target: bool = False
) -> Path:
    """The whole ranked table as a tidy CSV, best first; the cost columns after the figures, then (sized
    with a penalty) the time-to-target columns."""
    out.parent.mkdir(parents=True, exist_ok=True)
    costs = COST_COLUMNS if price_per_device_hour is not None else COST_COLUMNS[:1]
    targets = TARGET_COLUMNS if with_target else ()
    with written(out) as temporary, temporary.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=[*SIZING_COLUMNS, *costs, *targets])
        writer.writeheader()
        writer.writerows(
            sizing_record(variant, summary)
            | cost_record(variant.scenario, summary, price_per_device_hour)
            | (target_record(summary) if with_target else {})
            for variant, summary in ranked
        )
    return out


def read_sizing(csv_path: Path) -> pd.DataFrame:
    """The ``asyncrl size`` CSV, its columns typed; a one-line ScenarioError if it is not one."""
    import pandas as pd

    try:
        table = pd.read_csv(csv_path)
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise ScenarioError(f"{csv_path}: cannot read the sizing CSV ({exc})") from None
    missing = [column for column in SIZING_COLUMNS if column not in OPTIONAL_COLUMNS and column not in table.columns]
    if missing:
        raise ScenarioError(f"{csv_path}: not an `asyncrl size` CSV (missing columns {', '.join(missing)})")
    try:
        typed = {column: table[column].astype("int64") for column in INTEGER_COLUMNS}
        typed |= {column: table[column].astype("Int64") for column in COUNT_COLUMNS if column in table.columns}
        typed |= {column: table[column].astype("float64") for column in FLOAT_COLUMNS}
        for column in ("colocated", "fits"):
            typed[column] = table.get(column, pd.Series(True, index=table.index)).map(_boolean).astype(bool)
    except (TypeError, ValueError) as exc:
        raise ScenarioError(f"{csv_path}: a sizing CSV column holds a value of the wrong kind ({exc})") from None
    reason = table.get("reason", pd.Series("", index=table.index)).fillna("").astype(str)
    return table.assign(schedule=table["schedule"].astype(str), reason=reason, **typed)


def _boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1"):
        return True
    if text in ("false", "0"):
        return False
    raise ValueError(f"{value!r} is not true or false")


def table_rows(
    ranked: Sequence[SizingResult], price_per_device_hour: float | None = None, with_target: bool = False
) -> list[list[Any]]:
    """Rows of the terminal table: the label, the figures, the predicted time to target (sized with a
    penalty), then device-hours (and cost) per 1,000 samples; rows that do not fit are left out."""
    return [
        [
            variant.label,
            *figure_cells(summary),
            *([_target_cell(summary)] if with_target else []),
            *cost_cells(variant.scenario, summary, price_per_device_hour),
        ]
        for variant, summary in ranked
        if summary is not None
    ]


def _target_cell(summary: RunSummary) -> Any:
    """The time to target, ``past limit`` where the penalty refused to extrapolate, ``-`` without one."""
    reached = summary.time_to_target
    if reached is None:
        return "-"
    return "past limit" if reached.refused else reached.time_s


def sizing_lines(
    scenario: Scenario,
    devices: int,
    ranked: Sequence[SizingResult],
    top: int,
    price_per_device_hour: float | None = None,
    about_target: str | None = None,
    interval: str | None = None,
) -> str:
    """The baseline and the ``top`` best splits; how many more rows the CSV holds; what did not fit; the best
    plan's interval (``interval``); and what the time to target is a time to (``about_target``), or that it is
    not predicted."""
    with_target = about_target is not None
    rows = table_rows(ranked, price_per_device_hour, with_target)
    order = "soonest to target first" if with_target else "best first"
    target_header = ["to target s"] if with_target else []
    lines = [
        f"{scenario.name}: {devices} devices, {_steps_line(scenario.run.steps, ranked)}, {order}",
        format_table([*TABLE_HEADER, *target_header, *cost_header(price_per_device_hour)], rows[: top + 1]),
    ]
    if len(rows) > top + 1:
        lines.append(f"... {len(rows) - top - 1} more rows in the CSV")
    refused = next(
        (s.time_to_target.refused for _, s in ranked if s and s.time_to_target and s.time_to_target.refused), None
    )
    if refused:
        lines.append(
            f"to target 'past limit': not predicted ({refused.split(',')[0]} and the like: most seeds did not reach it)"
        )
    excluded = [variant for variant, summary in ranked if summary is None]
    if excluded:
        lines.append(excluded_line(excluded, len(ranked)))
    if interval:
        lines.append(interval)
    lines.append(f"time to target: {about_target}" if with_target else NOT_PREDICTED)
    return "\n".join(lines)


def excluded_line(excluded: Sequence[Labelled], total: int) -> str:
    """How many rows were left out for want of memory, and why, by pool, in one line."""
    by_pool: dict[str, list[tuple[Labelled, PoolMemory]]] = {}
    for variant in excluded:
        pool = misfit(variant.scenario)
        if pool is not None:
            by_pool.setdefault(pool.pool, []).append((variant, pool))
    reasons = "; ".join(_pool_summary(name, rows) for name, rows in by_pool.items())
    return (
        f"excluded {len(excluded)} of {total} rows, which do not fit in device memory (reasons in the CSV): {reasons}"
    )


def _pool_summary(name: str, rows: Sequence[tuple[Labelled, PoolMemory]]) -> str:
    """E.g. ``training pool on 1-2 devices needs 88.8-159.5 GB per device, has 80 GB (h100)``."""
    if name == "training pool":
        where = f"on {_spread([v.scenario.cluster.training_devices for v, _ in rows])} devices"
    else:
        where = f"with engines of {_spread([v.scenario.cluster.devices_per_engine for v, _ in rows])} devices"
    needed = _spread([round(pool.needed / GB, 1) for _, pool in rows])
    return f"{name} {where} needs {needed} GB per device, has {rows[0][1].capacity}"


def _spread(values: Sequence[float]) -> str:
    """``3`` for one value, ``1-2`` for several (lowest to highest)."""
    low, high = min(values), max(values)
    return f"{low:g}" if low == high else f"{low:g}-{high:g}"


def _steps_line(steps: int, ranked: Sequence[SizingResult]) -> str:
    """How many steps each row stands for, and how many were simulated where runs ended once converged."""
    simulated = [summary.steps_run for _, summary in ranked if summary is not None]
    if all(count == steps for count in simulated):
        return f"{steps} steps simulated per row"
    low, high = min(simulated), max(simulated)
    return f"{steps} steps per row ({low}–{high} simulated until converged, the rest extrapolated; --exact: all)"
