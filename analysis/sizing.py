"""The ``asyncrl size`` table: ranked splits of a device budget, for the terminal and as CSV.

    simulator.sweep.simulate_sizing ─► (variant, summary) pairs, best first ─► sizing_lines (terminal)
                                                                          └─► write_sizing_csv

Nothing here simulates: the rows come from summaries the sweep already produced.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from analysis.tables import FIGURE_HEADER, Labelled, Summary, figure_cells, format_table

if TYPE_CHECKING:
    from scenarios.scenario import Scenario

SizingResult = tuple[Labelled, Summary]
TABLE_HEADER = ["schedule split tp", *FIGURE_HEADER]


def table_rows(ranked: Sequence[SizingResult]) -> list[list[Any]]:
    return [[variant.label, *figure_cells(summary)] for variant, summary in ranked]


def write_sizing_csv(out: Path, ranked: Sequence[SizingResult]) -> Path:
    """The whole ranked table as CSV."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as handle:
        csv.writer(handle).writerows([TABLE_HEADER, *table_rows(ranked)])
    return out


def sizing_lines(scenario: Scenario, devices: int, ranked: Sequence[SizingResult], top: int) -> str:
    """The baseline and the ``top`` best splits; how many more rows the CSV holds."""
    rows = table_rows(ranked)
    lines = [
        f"{scenario.name}: {devices} devices, {scenario.run.steps} steps simulated per row, best first",
        format_table(TABLE_HEADER, rows[: top + 1]),
    ]
    if len(rows) > top + 1:
        lines.append(f"... {len(rows) - top - 1} more rows in the CSV")
    return "\n".join(lines)
