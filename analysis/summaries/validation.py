"""The ``asyncrl validate`` table: per drawn scenario, how far the prediction fell from the measurement.

    scenario dir/  predicted-<kind>/            ─┐
                   measured-<kind>[-<r>]/  (R×) ─┼─► validation_record ─► validate.csv, validation_lines (terminal)
                   calibration-<kind>/, profile  │                      └─► plots.validation
                                                 ┘

Every error is the prediction's, relative to the measurement, ``(predicted −
measured) / measured``, stored as a fraction (0.1 is 10%); the mean staleness
is a difference in steps. The figures (``FIGURES``): wall time as written and
as sync, speedup over sync (wall sync / wall as written), mean staleness,
generation and training utilization. A sync scenario is its own sync variant,
so it has no separate sync wall time and no speedup (left empty).

With R repeats of each measured run, a figure's error is taken against each
repeat (the speedup against each repeat's pair of runs): the record keeps the
median (``<figure>_error``) and the spread (``_min``, ``_max``), so a user can
tell a model error (all repeats off the same way) from a noisy machine (the
repeats straddle it). The phase errors (``<phase>_error``, ``analysis.records.phases``)
and the decode contention are read from the first repeat of the run as written.
Nothing here runs anything: it reads run records.
"""

from __future__ import annotations

import csv
import math
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ...scenarios.files.writing import written
from ...scenarios.record.record import RunSummary, read_summary
from ..records.phases import BreakdownUnavailable, Contention, breakdown, run_contention
from ..statuses import COMPLETE, FAILED
from ..tables import format_table

#: (key, label, unit): the figures compared, in table order.
FIGURES: tuple[tuple[str, str, str], ...] = (
    ("wall_written", "wall time as written", "%"),
    ("wall_sync", "wall time sync", "%"),
    ("speedup", "speedup over sync", "%"),
    ("staleness", "mean staleness", "steps"),
    ("gen_util", "generation utilization", "%"),
    ("train_util", "training utilization", "%"),
)
PHASE_ERRORS = ("decode", "prefill", "retirements", "weight sync", "learner")
SETTING_COLUMNS = (
    "schedule",
    "bound",
    "in_flight_updates",
    "refresh",
    "loss",
    "updates_per_step",
    "engines",
    "group",
    "prompts",
    "max_concurrency",
    "prompt_tokens",
    "lengths",
)
VALUE_COLUMNS = tuple(
    f"{side}_{name}"
    for name in ("wall_written_s", "wall_sync_s", "speedup", "staleness", "gen_util", "train_util")
    for side in ("predicted", "measured")
)


def run_name(role: str, kind: str, repeat: int = 1, repeats: int = 1) -> str:
    """``predicted-streaming``, ``measured-sync``, or with several repeats ``measured-sync-2``."""
    return f"{role}-{kind}" if repeats == 1 else f"{role}-{kind}-{repeat}"


def columns() -> list[str]:
    """validate.csv's columns, in order."""
    errors = [f"{key}_error{suffix}" for key, _, _ in FIGURES for suffix in ("", "_min", "_max")]
    phases = [f"{phase.replace(' ', '_')}_error" for phase in PHASE_ERRORS]
    head = ["scenario", "label", *SETTING_COLUMNS, "status", "reason"]
    return [*head, *VALUE_COLUMNS, *errors, *phases, "engine_overhead_s", "decode_contention"]


# ── one scenario ────────────────────────────────────────────────────────────────


def validation_record(
    name: str, label: str, settings: dict[str, Any], directory: Path, written: str, repeats: int
) -> dict[str, Any]:
    """One row of validate.csv from the run records in ``directory``."""
    kinds = [written] if written == "sync" else [written, "sync"]
    predicted = {kind: read_summary(directory / run_name("predicted", kind)) for kind in kinds}
    measured = {
        kind: [read_summary(directory / run_name("measured", kind, r, repeats)) for r in range(1, repeats + 1)]
        for kind in kinds
    }
    record: dict[str, Any] = {"scenario": name, "label": label, **_settings(settings), "status": COMPLETE, "reason": ""}
    record.update(_values(predicted, measured, written))
    for key, errors in figure_errors(predicted, measured, written).items():
        record[f"{key}_error"] = statistics.median(errors)
        record[f"{key}_error_min"], record[f"{key}_error_max"] = min(errors), max(errors)
    first = directory / run_name("measured", written, 1, repeats)
    record.update(_phase_errors(directory / run_name("predicted", written), first))
    contention = run_contention(first)
    record["decode_contention"] = contention.slower if isinstance(contention, Contention) else math.nan
    return {column: record.get(column, math.nan) for column in columns()}


def failed_record(name: str, label: str, settings: dict[str, Any], reason: str) -> dict[str, Any]:
    """The row of a scenario whose calibration, prediction or execution failed."""
    record = {"scenario": name, "label": label, **_settings(settings), "status": FAILED, "reason": reason}
    return {column: record.get(column, math.nan) for column in columns()}


def figure_errors(
    predicted: dict[str, RunSummary], measured: dict[str, list[RunSummary]], written: str
) -> dict[str, list[float]]:
    """Per figure, the prediction's error against each repeat of the measurement."""
    p = predicted[written]
    runs = measured[written]
    errors = {"wall_written": [_relative(p.wall_time_s, m.wall_time_s) for m in runs]}
    if written != "sync":
        p_sync = predicted["sync"]
        errors["wall_sync"] = [_relative(p_sync.wall_time_s, m.wall_time_s) for m in measured["sync"]]
        speedup = p_sync.wall_time_s / p.wall_time_s
        errors["speedup"] = [
            _relative(speedup, s.wall_time_s / m.wall_time_s) for s, m in zip(measured["sync"], runs, strict=True)
        ]
    errors["staleness"] = [p.staleness.mean - m.staleness.mean for m in runs]
    for key, role in (("gen_util", "generation"), ("train_util", "training")):
        errors[key] = [_relative(getattr(p.utilization, role), getattr(m.utilization, role)) for m in runs]
    return errors


def _values(predicted: dict[str, RunSummary], measured: dict[str, list[RunSummary]], written: str) -> dict[str, float]:
    """Predicted and measured (median over repeats) figures of the run as written, and sync's wall time."""

    def both(name: str, figure: Callable[[RunSummary], float], kind: str = written) -> dict[str, float]:
        return {
            f"predicted_{name}": figure(predicted[kind]),
            f"measured_{name}": statistics.median(figure(m) for m in measured[kind]),
        }

    values = both("wall_written_s", lambda s: s.wall_time_s)
    values |= both("staleness", lambda s: s.staleness.mean)
    values |= both("gen_util", lambda s: s.utilization.generation)
    values |= both("train_util", lambda s: s.utilization.training)
    if written != "sync":
        values |= both("wall_sync_s", lambda s: s.wall_time_s, "sync")
        values["predicted_speedup"] = values["predicted_wall_sync_s"] / values["predicted_wall_written_s"]
        values["measured_speedup"] = statistics.median(
            s.wall_time_s / m.wall_time_s for s, m in zip(measured["sync"], measured[written], strict=True)
        )
    return values


def _phase_errors(predicted: Path, measured: Path) -> dict[str, float]:
    try:
        a, b = breakdown(predicted, measured)
    except BreakdownUnavailable:
        return {}
    errors = {
        f"{phase.replace(' ', '_')}_error": _relative(a.seconds[phase], b.seconds[phase]) for phase in PHASE_ERRORS
    }
    return {**errors, "engine_overhead_s": b.seconds["engine overhead"]}


def _settings(settings: dict[str, Any]) -> dict[str, Any]:
    return {column: settings.get(column, "") for column in SETTING_COLUMNS}


def _relative(predicted: float, measured: float) -> float:
    return (predicted - measured) / measured if measured else math.nan


# ── all scenarios ───────────────────────────────────────────────────────────────


def write_validation_csv(path: Path, records: Sequence[dict[str, Any]]) -> Path:
    """validate.csv: one row per scenario, the columns of ``columns()``; empty cells for what does not apply."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with written(path) as temporary, temporary.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns())
        writer.writeheader()
        for record in records:
            writer.writerow({key: "" if _missing(value) else value for key, value in record.items()})
    return path


TABLE_HEADER = [
    "scenario",
    "wall as written",
    "wall sync",
    "speedup",
    "staleness (steps)",
    "gen util",
    "train util",
    "decode in training (meas.)",
]


def validation_lines(records: Sequence[dict[str, Any]], repeats: int) -> str:
    """The table (one row per scenario, then median and worst), the worst scenario named, and any failures."""
    ok = [record for record in records if record["status"] == COMPLETE]
    lines = []
    if ok:
        rows = [[f"{r['scenario'][-2:]} {r['label']}", *_error_cells(r, repeats), _contention(r)] for r in ok]
        rows.append(["median", *_aggregate_cells(ok, statistics.median), _aggregate_contention(ok, statistics.median)])
        rows.append(["worst", *_aggregate_cells(ok, _worst), _aggregate_contention(ok, _worst)])
        lines.append(format_table(TABLE_HEADER, rows))
        lines.append(_worst_line(ok))
    lines += [f"{r['scenario']} ({r['label']}) failed: {r['reason']}" for r in records if r["status"] != COMPLETE]
    return "\n".join(lines)


def _error_cells(record: dict[str, Any], repeats: int) -> list[str]:
    cells = []
    for key, _, unit in FIGURES:
        value = record[f"{key}_error"]
        cell = _format(value, unit)
        if repeats > 1 and not _missing(value):
            cell += f" ({_format(record[f'{key}_error_min'], unit)}..{_format(record[f'{key}_error_max'], unit)})"
        cells.append(cell)
    return cells


def _aggregate_cells(records: Sequence[dict[str, Any]], aggregate: Callable[[list[float]], float]) -> list[str]:
    cells = []
    for key, _, unit in FIGURES:
        values = [r[f"{key}_error"] for r in records if not _missing(r[f"{key}_error"])]
        cells.append(_format(aggregate(values), unit) if values else "-")
    return cells


def _aggregate_contention(records: Sequence[dict[str, Any]], aggregate: Callable[[list[float]], float]) -> str:
    values = [r["decode_contention"] for r in records if not _missing(r["decode_contention"])]
    return _format(aggregate(values), "%") if values else "-"


def _worst(values: list[float]) -> float:
    """The value farthest from zero."""
    return max(values, key=abs)


def _worst_line(records: Sequence[dict[str, Any]]) -> str:
    worst = max(records, key=lambda r: abs(r["wall_written_error"]))
    figures = ", ".join(
        f"{label} {_format(worst[f'{key}_error'], unit)}"
        for key, label, unit in FIGURES
        if not _missing(worst[f"{key}_error"])
    )
    return f"worst wall time: {worst['scenario']} ({worst['label']}, max_concurrency {worst['max_concurrency']}): {figures}"


def _contention(record: dict[str, Any]) -> str:
    value = record["decode_contention"]
    return "-" if _missing(value) else _format(value, "%")


def _format(value: float, unit: str) -> str:
    if _missing(value):
        return "-"
    return f"{value:+.0%}" if unit == "%" else f"{value:+.2f}"


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))
