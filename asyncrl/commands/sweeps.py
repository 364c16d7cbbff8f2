"""``asyncrl sweep``: what-if grids, every combination of values of any scenario keys, simulated.

    sweep    SCENARIO --vary KEY=V1,V2  the product of the values, each point loaded like --set    ─► CSV + PNG + table

``--out`` is a file name ending in ``.csv`` (default ``runs/<scenario name>[-<hash of the overrides>]-sweep.csv``),
``--plot`` the PNG of ``--metric`` beside it.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from asyncrl.commands.common import (
    chosen_file,
    default_out,
    force_argument,
    load,
    output_file,
    overrides,
    plot_path,
    price_argument,
    print_json,
    runtime_argument,
    scenario_arguments,
)

CSV = (".csv",)


def add_parsers(commands: argparse._SubParsersAction) -> None:
    _sweep_parser(commands)


def _sweep_parser(commands: argparse._SubParsersAction) -> None:
    sweep = commands.add_parser("sweep", help="what-if: simulate every combination of values of any scenario keys")
    scenario_arguments(sweep)
    sweep.add_argument(
        "--vary",
        action="append",
        required=True,
        metavar="KEY=V1,V2,...",
        help="a dotted key and the values it takes, read as YAML (repeatable; the grid is the product, first outermost)",
    )
    sweep.add_argument(
        "--metric",
        default="samples_per_s",
        help="CSV figure to plot (default samples_per_s; e.g. tokens_per_s, step_s, staleness_mean, "
        "device_hours_per_1k_samples)",
    )
    sweep.add_argument(
        "--out",
        type=Path,
        metavar="FILE.csv",
        help="CSV of the grid, a file name ending in .csv (default: runs/<scenario name>-sweep.csv, with a hash of "
        "the overrides before -sweep when there are some)",
    )
    sweep.add_argument("--plot", type=Path, help="PNG of the metric (default: the CSV's path ending in .png)")
    runtime_argument(sweep)
    price_argument(sweep)
    force_argument(sweep, "replace --out and --plot if they exist (asyncrl never replaces a file it was not asked to)")
    sweep.set_defaults(command=run_sweep)


def run_sweep(args: argparse.Namespace) -> int:
    from asyncrl.analysis.summaries.sweep_table import check_metric, sweep_lines, sweep_records, write_sweep_csv
    from asyncrl.simulator.sweep import grid_points, parse_axis, simulate_grid

    if args.out is not None:
        output_file(args.out, CSV, force=args.force)
    scenario = load(args)  # the scenario itself is sound before any grid point is tried
    check_metric(args.metric, priced=args.price_per_device_hour is not None)
    csv_path = chosen_file(args.out, default_out(scenario.name, overrides(args), "-sweep.csv"), args.force)
    plot = plot_path(args.plot, csv_path.with_suffix(".png"))
    if plot is not None:
        chosen_file(args.plot, plot, args.force or (args.plot is None and args.out is None), "--plot")
    axes = [parse_axis(text) for text in args.vary]
    points = grid_points(args.scenario, overrides(args), axes)
    results = simulate_grid(points, progress=not args.quiet, runtime=args.runtime)
    keys = [axis.key for axis in axes]
    records = sweep_records(keys, results, args.price_per_device_hour)
    written = [write_sweep_csv(csv_path, records)]
    if plot is not None:
        name = f"{scenario.name} ({scenario.run.steps} steps per point)"
        written.append(_sweep_plot(records, keys, args.metric, name, plot))
    if args.json:
        return print_json(records)
    print(sweep_lines(scenario, keys, results, args.price_per_device_hour))
    print(f"wrote {' and '.join(str(path) for path in written)}")
    return 0


def _sweep_plot(records: list[dict[str, Any]], keys: list[str], metric: str, name: str, out: Path) -> Path:
    import pandas as pd
    from asyncrl.analysis.plots.plots import sweep

    return sweep(pd.DataFrame.from_records(records), keys, metric, name, out)
