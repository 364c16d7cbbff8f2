"""The ``asyncrl size`` table: ranked splits of a device budget, for the terminal and as a tidy CSV.

    simulator.sweep.simulate_sizing ─► (variant, summary) pairs, best first ─► sizing_lines (terminal)
                                                                          └─► write_sizing_csv ─► read_sizing

The CSV has one column per fact, so nothing has to be parsed back out of a
label: the schedule, its staleness bound, the split and the engine size, then
the figures as plain numbers (utilizations as fractions). ``label`` repeats the
terminal table's first column for people reading the file. Nothing here
simulates: the rows come from summaries the sweep already produced.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
from asyncrl.analysis.tables import FIGURE_HEADER, Labelled, Summary, figure_cells, format_table
from asyncrl.scenarios.loading import ScenarioError

if TYPE_CHECKING:
    from asyncrl.scenarios.scenario import Scenario

SizingResult = tuple[Labelled, Summary]
TABLE_HEADER = ["schedule split tp", *FIGURE_HEADER]
SIZING_COLUMNS = (
    "label",
    "schedule",  # sync, pipelined or streaming
    "bound",  # staleness bound: η (streaming), N (pipelined), 0 (sync)
    "colocated",
    "generation_devices",
    "training_devices",
    "devices_per_engine",
    "samples_per_s",
    "step_s",  # mean learner step
    "staleness_mean",
    "staleness_max",
    "generation_utilization",  # 0-1
    "training_utilization",  # 0-1
    "dropped",
    "steps_simulated",  # fewer than the scenario's run.steps when the run ended once converged (extrapolated)
)
OPTIONAL_COLUMNS = ("label", "steps_simulated")  # a CSV without them still reads
INTEGER_COLUMNS = ("bound", "generation_devices", "training_devices", "devices_per_engine", "staleness_max", "dropped")
FLOAT_COLUMNS = ("samples_per_s", "step_s", "staleness_mean", "generation_utilization", "training_utilization")
BOUND_NAMES = {"pipelined": "N", "streaming": "η"}


def schedule_label(schedule: str, bound: int) -> str:
    """``streaming η=2``, ``pipelined N=1`` or ``sync``."""
    name = BOUND_NAMES.get(schedule)
    return f"{schedule} {name}={bound}" if name else schedule


def sizing_record(variant: Labelled, summary: Summary) -> dict[str, Any]:
    """One row of the CSV: the variant's schedule and split, and its figures."""
    scenario, cluster = variant.scenario, variant.scenario.cluster
    return {
        "label": variant.label,
        "schedule": scenario.schedule.kind,
        "bound": scenario.staleness_bound,
        "colocated": cluster.colocated,
        "generation_devices": cluster.generation_devices,
        "training_devices": cluster.training_devices,
        "devices_per_engine": cluster.devices_per_engine,
        "samples_per_s": summary["throughput"]["samples_per_s"],
        "step_s": summary["step_time_s"]["mean"],
        "staleness_mean": summary["staleness"]["mean"],
        "staleness_max": summary["staleness"]["max"],
        "generation_utilization": summary["utilization"]["generation"],
        "training_utilization": summary["utilization"]["training"],
        "dropped": summary["samples"]["dropped"],
        "steps_simulated": summary.get("steps_simulated", summary["steps"]),
    }


def write_sizing_csv(out: Path, ranked: Sequence[SizingResult]) -> Path:
    """The whole ranked table as a tidy CSV, best first."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=SIZING_COLUMNS)
        writer.writeheader()
        writer.writerows(sizing_record(variant, summary) for variant, summary in ranked)
    return out


def read_sizing(csv_path: Path) -> pd.DataFrame:
    """The ``asyncrl size`` CSV, its columns typed; a one-line ScenarioError if it is not one."""
    try:
        table = pd.read_csv(csv_path)
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise ScenarioError(f"{csv_path}: cannot read the sizing CSV ({exc})") from None
    missing = [column for column in SIZING_COLUMNS if column not in OPTIONAL_COLUMNS and column not in table.columns]
    if missing:
        raise ScenarioError(f"{csv_path}: not an `asyncrl size` CSV (missing columns {', '.join(missing)})")
    try:
        typed = {column: table[column].astype("int64") for column in INTEGER_COLUMNS}
        typed |= {column: table[column].astype("float64") for column in FLOAT_COLUMNS}
        typed["colocated"] = table["colocated"].map(_boolean).astype(bool)
    except (TypeError, ValueError) as exc:
        raise ScenarioError(f"{csv_path}: a sizing CSV column holds a value of the wrong kind ({exc})") from None
    return table.assign(schedule=table["schedule"].astype(str), **typed)


def _boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1"):
        return True
    if text in ("false", "0"):
        return False
    raise ValueError(f"colocated: {value!r} is not true or false")


def table_rows(ranked: Sequence[SizingResult]) -> list[list[Any]]:
    """Rows of the terminal table: the label, then the figures."""
    return [[variant.label, *figure_cells(summary)] for variant, summary in ranked]


def sizing_lines(scenario: Scenario, devices: int, ranked: Sequence[SizingResult], top: int) -> str:
    """The baseline and the ``top`` best splits; how many more rows the CSV holds."""
    rows = table_rows(ranked)
    lines = [
        f"{scenario.name}: {devices} devices, {_steps_line(scenario.run.steps, ranked)}, best first",
        format_table(TABLE_HEADER, rows[: top + 1]),
    ]
    if len(rows) > top + 1:
        lines.append(f"... {len(rows) - top - 1} more rows in the CSV")
    return "\n".join(lines)


def _steps_line(steps: int, ranked: Sequence[SizingResult]) -> str:
    """How many steps each row stands for, and how many were simulated where runs ended once converged."""
    simulated = [summary.get("steps_simulated", summary["steps"]) for _, summary in ranked]
    if all(count == steps for count in simulated):
        return f"{steps} steps simulated per row"
    low, high = min(simulated), max(simulated)
    return f"{steps} steps per row ({low}–{high} simulated until converged, the rest extrapolated; --exact: all)"
