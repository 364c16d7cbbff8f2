"""Two run records side by side: how far run B is from run A, the reference, figure by figure.

    run A, the reference (e.g. executor, measured) ─┐
                                                    ├─► compare_summaries ─► Comparison ─► table / JSON
    run B (e.g. simulator, predicted)             ──┘                          └─► figures_off(tolerance)

Every figure is read from ``summary.json`` (see ``scenarios.record.summarize``),
so simulator and executor runs compare the same way, in any mix.

One rule for every comparison in asyncrl: the error of X is ``(X − reference) / |reference|``.
Here the reference is A and X is B (``asyncrl compare A B`` reports B relative to A);
``asyncrl demo`` and ``asyncrl validate`` take the measured run as the reference, so
their errors are the prediction's, ``(predicted − measured) / |measured|``.

Relative error is ``(B − A) / |A|``. Where A is 0 it is 0 when B is 0 too and
±infinity otherwise (any departure from an exact zero is off by more than any
tolerance); ``comparison.json`` writes a non-finite error as ``null`` next to
the absolute error ``B − A``, which is always finite.

The staleness histograms are compared by total variation distance, half the
sum of absolute differences between the normalized histograms: 0 when the
shapes match, 1 when they share no staleness value. The tolerance check holds
it to the same bound as the relative errors.

The speedup comparison takes four runs: B's speedup ``wall(sync B) / wall(async B)``
relative to A's ``wall(sync A) / wall(async A)``, by the same rule (``predicted`` and
``measured`` name A's and B's speedup, as ``asyncrl compare --speedup`` has long called them).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ...scenarios.files.writing import write_text
from ...scenarios.record.record import RunRecordError, RunSummary, read_events, read_scenario, read_summary
from ..statuses import unfinished_note
from ..tables import format_table

# (key in comparison.json, label for tables, path in summary.json)
FIGURES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("wall_time_s", "wall time (s)", ("wall_time_s",)),
    ("step_time_s.mean", "step time mean (s)", ("step_time_s", "mean")),
    ("step_time_s.p50", "step time p50 (s)", ("step_time_s", "p50")),
    ("step_time_s.p95", "step time p95 (s)", ("step_time_s", "p95")),
    ("throughput.samples_per_s", "throughput (samples/s)", ("throughput", "samples_per_s")),
    ("throughput.tokens_per_s", "throughput (tokens/s)", ("throughput", "tokens_per_s")),
    ("staleness.mean", "staleness mean (steps)", ("staleness", "mean")),
    ("staleness.p95", "staleness p95 (steps)", ("staleness", "p95")),
    ("staleness.max", "staleness max (steps)", ("staleness", "max")),
    ("utilization.generation", "generation utilization (0-1)", ("utilization", "generation")),
    ("utilization.training", "training utilization (0-1)", ("utilization", "training")),
    ("utilization.generation_slots", "engine slot utilization (0-1)", ("utilization", "generation_slots")),
)
HISTOGRAM_DISTANCE = "staleness.histogram_tv"
SPEEDUP = "speedup"


@dataclass(frozen=True)
class FigureComparison:
    key: str
    label: str
    a: float
    b: float

    @property
    def absolute_error(self) -> float:
        return self.b - self.a

    @property
    def relative_error(self) -> float:
        return relative_error(self.a, self.b)


@dataclass(frozen=True)
class SpeedupComparison:
    sync_a_s: float
    async_a_s: float
    sync_b_s: float
    async_b_s: float
    a_backend: str = ""  # what produced A's speedup runs (simulator, executor), for titles
    b_backend: str = ""

    @property
    def a(self) -> float:
        """A's speedup, the reference: wall(sync A) / wall(async A)."""
        return _speedup(self.sync_a_s, self.async_a_s)

    @property
    def b(self) -> float:
        """B's speedup: wall(sync B) / wall(async B)."""
        return _speedup(self.sync_b_s, self.async_b_s)

    @property
    def predicted(self) -> float:
        """A's speedup (the name from when A was always the prediction)."""
        return self.a

    @property
    def measured(self) -> float:
        """B's speedup (the name from when B was always the measurement)."""
        return self.b

    @property
    def relative_error(self) -> float:
        """B's speedup relative to A's: ``(b − a) / |a|``."""
        return relative_error(self.a, self.b)


@dataclass(frozen=True)
class Comparison:
    a_label: str
    b_label: str
    figures: list[FigureComparison]
    staleness_tv: float
    speedup: SpeedupComparison | None = None
    a_run: dict[str, Any] = field(default_factory=dict)  # backend and scenario of each side (status if unfinished)
    b_run: dict[str, Any] = field(default_factory=dict)


def relative_error(a: float, b: float) -> float:
    """``(b − a) / |a|``; for ``a == 0``: 0 if ``b == 0``, else ±infinity with the sign of ``b``."""
    if a == 0:
        return 0.0 if b == 0 else math.copysign(math.inf, b)
    return (b - a) / abs(a)


def figure_value(summary: RunSummary, path: tuple[str, ...]) -> float:
    return summary.figure(path)


def normalized_histogram(histogram: Mapping[str, int]) -> dict[int, float]:
    """Staleness value → share of trained samples; empty when nothing was trained."""
    total = sum(histogram.values())
    return {int(value): count / total for value, count in histogram.items()} if total > 0 else {}


def total_variation(a: Mapping[str, int], b: Mapping[str, int]) -> float:
    """Total variation distance between two staleness histograms (counts keyed by staleness)."""
    p, q = normalized_histogram(a), normalized_histogram(b)
    if not p or not q:
        return 0.0 if not p and not q else 1.0
    return 0.5 * sum(abs(p.get(value, 0.0) - q.get(value, 0.0)) for value in p.keys() | q.keys())


def compare_summaries(
    a: RunSummary, b: RunSummary, *, a_label: str = "A", b_label: str = "B", speedup: SpeedupComparison | None = None
) -> Comparison:
    """Every figure of B relative to A (the reference), the staleness histogram distance, and the speedup
    comparison if given."""
    figures = [
        FigureComparison(key, label, figure_value(a, path), figure_value(b, path)) for key, label, path in FIGURES
    ]
    return Comparison(
        a_label=a_label,
        b_label=b_label,
        figures=figures,
        staleness_tv=total_variation(a.staleness.histogram, b.staleness.histogram),
        speedup=speedup,
        a_run=_run_identity(a),
        b_run=_run_identity(b),
    )


def compare_speedup(
    sync_a: RunSummary, async_a: RunSummary, sync_b: RunSummary, async_b: RunSummary
) -> SpeedupComparison:
    """B's speedup wall(sync B)/wall(async B) against A's, the reference, wall(sync A)/wall(async A)."""
    return SpeedupComparison(
        sync_a_s=sync_a.wall_time_s,
        async_a_s=async_a.wall_time_s,
        sync_b_s=sync_b.wall_time_s,
        async_b_s=async_b.wall_time_s,
        a_backend=async_a.backend,
        b_backend=async_b.backend,
    )


def figures_off(comparison: Comparison, tolerance: float) -> list[str]:
    """Keys of the figures whose relative error (or histogram distance) exceeds ``tolerance``, in table order."""
    off = [figure.key for figure in comparison.figures if abs(figure.relative_error) > tolerance]
    if comparison.staleness_tv > tolerance:
        off.append(HISTOGRAM_DISTANCE)
    if comparison.speedup is not None and abs(comparison.speedup.relative_error) > tolerance:
        off.append(SPEEDUP)
    return off


def comparison_dict(comparison: Comparison, tolerance: float | None = None) -> dict[str, Any]:
    """The comparison as plain JSON-safe data (non-finite errors become ``null``)."""
    data: dict[str, Any] = {
        "a": {"run": comparison.a_label, **comparison.a_run},
        "b": {"run": comparison.b_label, **comparison.b_run},
        "figures": {
            figure.key: {
                "a": figure.a,
                "b": figure.b,
                "absolute_error": figure.absolute_error,
                "relative_error": _finite_or_none(figure.relative_error),
            }
            for figure in comparison.figures
        },
        HISTOGRAM_DISTANCE: comparison.staleness_tv,
        SPEEDUP: _speedup_dict(comparison.speedup) if comparison.speedup else None,
    }
    if tolerance is not None:
        data["tolerance"] = {"bound": tolerance, "off": figures_off(comparison, tolerance)}
    return data


def write_comparison(comparison: Comparison, out: Path, tolerance: float | None = None) -> Path:
    """Write ``comparison.json`` (or ``out`` if it names a .json file) and return its path."""
    path = out if out.suffix == ".json" else out / "comparison.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, json.dumps(comparison_dict(comparison, tolerance), indent=2, allow_nan=False) + "\n")
    return path


def load_summary(run_dir: Path) -> RunSummary:
    """``summary.json`` of a run directory, checked field by field (``scenarios.record.record.RunSummary``);
    RunRecordError naming the directory, the file or the field when it is missing or malformed."""
    return read_summary(run_dir)


def load_events(run_dir: Path) -> pd.DataFrame:
    """``events.parquet`` of a complete run directory; RunRecordError if anything is missing."""
    load_summary(run_dir)
    if not (run_dir / "events.parquet").is_file():
        raise RunRecordError(f"{run_dir}: no events.parquet")
    return read_events(run_dir)


def compare_runs(a_dir: Path, b_dir: Path, speedup_dirs: tuple[Path, Path, Path, Path] | None = None) -> Comparison:
    """Load two run directories (and four for the speedup) and compare them."""
    speedup = compare_speedup(*(load_summary(path) for path in speedup_dirs)) if speedup_dirs else None
    comparison = compare_summaries(
        load_summary(a_dir), load_summary(b_dir), a_label=str(a_dir), b_label=str(b_dir), speedup=speedup
    )
    for run, run_dir in ((comparison.a_run, a_dir), (comparison.b_run, b_dir)):
        if "status" in run:  # how many steps the unfinished run had planned
            run["planned_steps"] = _planned_steps(run_dir)
    return comparison


def _planned_steps(run_dir: Path) -> int | None:
    try:
        return read_scenario(run_dir).run.steps
    except RunRecordError:
        return None


def table_rows(comparison: Comparison, tolerance: float | None = None) -> list[list[Any]]:
    """Rows of figure, A, B, B − A, relative error (and 'OFF' marks when a tolerance is given)."""
    off = set(figures_off(comparison, tolerance)) if tolerance is not None else set()
    rows = [
        [figure.label, figure.a, figure.b, figure.absolute_error, format_relative(figure.relative_error)]
        for figure in comparison.figures
    ]
    rows.append(["staleness histogram TV distance", "", "", comparison.staleness_tv, ""])
    keys = [figure.key for figure in comparison.figures] + [HISTOGRAM_DISTANCE]
    if comparison.speedup is not None:
        speedup = comparison.speedup
        rows.append(
            [
                "speedup sync/async",
                speedup.a,
                speedup.b,
                speedup.b - speedup.a,
                format_relative(speedup.relative_error),
            ]
        )
        keys.append(SPEEDUP)
    if tolerance is not None:
        for row, key in zip(rows, keys, strict=True):
            row.append("OFF" if key in off else "")
    return rows


TABLE_HEADER = ["figure", "A", "B", "B - A", "rel. error"]


def comparison_lines(comparison: Comparison, tolerance: float | None = None) -> str:
    """Which runs were compared, the figure table and, given a tolerance, the verdict."""
    lines = [
        f"{side}: {label} ({run['backend']}, {run['scenario']})"
        for side, label, run in (
            ("A", comparison.a_label, comparison.a_run),
            ("B", comparison.b_label, comparison.b_run),
        )
    ]
    if comparison.a_run["scenario"] != comparison.b_run["scenario"]:
        lines.append("note: A and B ran different scenarios")
    for side, run in (("A", comparison.a_run), ("B", comparison.b_run)):
        note = unfinished_note(side, run.get("status"), run.get("steps", 0), run.get("planned_steps"))
        if note is not None:
            lines.append(f"note: {note}")
    header = [*TABLE_HEADER, "off"] if tolerance is not None else TABLE_HEADER
    lines.append(format_table(header, table_rows(comparison, tolerance)))
    if tolerance is not None:
        off = figures_off(comparison, tolerance)
        verdict = f"{len(off)} off by more than {tolerance:g}: {', '.join(off)}" if off else "none off"
        lines.append(f"tolerance {tolerance:g}: {verdict}")
    return "\n".join(lines)


def format_relative(error: float) -> str:
    """``+12.3%``, or ``n/a`` where the reference is 0 and no ratio exists."""
    if not math.isfinite(error):
        return "n/a"
    return f"{error:+.1%}"


def _speedup(sync_s: float, async_s: float) -> float:
    return sync_s / async_s if async_s > 0 else 0.0


def _speedup_dict(speedup: SpeedupComparison) -> dict[str, Any]:
    return {
        "wall_time_s": {
            "sync_a": speedup.sync_a_s,
            "async_a": speedup.async_a_s,
            "sync_b": speedup.sync_b_s,
            "async_b": speedup.async_b_s,
        },
        "predicted": speedup.a,  # A's speedup (the key keeps its name in comparison.json)
        "measured": speedup.b,  # B's
        "absolute_error": speedup.b - speedup.a,
        "relative_error": _finite_or_none(speedup.relative_error),
    }


def _run_identity(summary: RunSummary) -> dict[str, Any]:
    """Backend and scenario; with a status other than complete (an execution interrupted or failed), the status
    and the steps it completed."""
    identity: dict[str, Any] = {"backend": summary.backend, "scenario": summary.scenario}
    if summary.status is not None and summary.status != "complete":
        identity |= {"status": summary.status, "steps": summary.steps}
    return identity


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None
