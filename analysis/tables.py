"""Plain-text tables for the terminal: one run's summary, or many runs side by side."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def format_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Columns padded to their widest cell; the first column left-aligned, the rest right-aligned."""
    cells = [[str(cell) for cell in header], *[[format_cell(cell) for cell in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = []
    for index, row in enumerate(cells):
        parts = [row[0].ljust(widths[0]), *(cell.rjust(width) for cell, width in zip(row[1:], widths[1:], strict=True))]
        lines.append("  ".join(parts).rstrip())
        if index == 0:
            lines.append("  ".join("-" * width for width in widths))
    return "\n".join(lines)


def format_cell(value: Any) -> str:
    """A table cell: 3 significant digits below 100, whole numbers above, thousands separated."""
    if isinstance(value, float):
        return f"{value:,.3g}" if abs(value) < 100 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def summary_lines(summary: dict[str, Any]) -> str:
    """One run's summary as a short labelled block."""
    step, stale, util, samples = (
        summary["step_time_s"],
        summary["staleness"],
        summary["utilization"],
        summary["samples"],
    )
    histogram = " ".join(f"{k}:{v:,}" for k, v in stale["histogram"].items()) or "-"
    rows = [
        ("wall time", f"{summary['wall_time_s']:,.1f} s for {summary['steps']} steps"),
        ("step time", f"mean {step['mean']:,.2f} s   p50 {step['p50']:,.2f} s   p95 {step['p95']:,.2f} s"),
        (
            "throughput",
            f"{summary['throughput']['samples_per_s']:,.2f} samples/s   {summary['throughput']['tokens_per_s']:,.0f} tokens/s",
        ),
        ("staleness", f"mean {stale['mean']:.2f}   p95 {stale['p95']:g}   max {stale['max']}   (steps)"),
        ("  histogram", histogram),
        (
            "utilization",
            f"generation {util['generation']:.0%}   training {util['training']:.0%}   "
            f"engine slots {util['generation_slots']:.0%}",
        ),
        ("weight sync", f"{summary['weight_sync_s']:,.1f} s per engine"),
        (
            "samples",
            f"generated {samples['generated']:,}   trained {samples['trained']:,}   queued {samples['queued']:,}   "
            f"in flight {samples['in_flight']:,}   dropped {samples['dropped']:,}",
        ),
    ]
    width = max(len(label) for label, _ in rows)
    return "\n".join(f"{label.ljust(width)}  {text}" for label, text in rows)
