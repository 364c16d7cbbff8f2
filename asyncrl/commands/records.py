"""``asyncrl compare``, ``report`` and ``trace``: what run records say, read and never written into.

    compare A B [--out FILE.json]   B relative to A, figure by figure, and time by phase   ─► table / JSON
    report RUN ... --out DIR        figures, traces and index.html                           ─► DIR
    trace RUN [--out FILE]          a Chrome/Perfetto trace of one run                       ─► FILE

The error of a figure is the same everywhere: (X − reference) / |reference|. In ``compare A B`` the
reference is A, so B's figures are reported relative to A's (put the measured run first to read the
prediction's error, as ``asyncrl demo`` and ``asyncrl validate`` report it).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from asyncrl.scenarios.record.outputs import files_directory

from asyncrl.commands.arguments import fraction, window
from asyncrl.commands.common import (
    DIRECTORY_HELP,
    REPLACE_HELP,
    chosen_file,
    force_argument,
    output_file,
    print_json,
    speedup_argument,
)

EXIT_OFF_TOLERANCE = 1
COMPARE_RULE = """Every summary figure of run B against run A, and the time by phase.

A is the reference: the relative error is (B - A) / |A|, the rule used everywhere in asyncrl
(demo and validate take the measured run as the reference: give it as A to read the
prediction's error). The table is printed; --out FILE.json also writes it as JSON.
Neither run directory is written into."""
JSON = (".json",)


def add_parsers(commands: argparse._SubParsersAction) -> None:
    _compare_parser(commands)
    _report_parser(commands)
    _trace_parser(commands)


def _compare_parser(commands: argparse._SubParsersAction) -> None:
    compare = commands.add_parser(
        "compare",
        help="compare two run directories: B's figures relative to A's",
        description=COMPARE_RULE,
    )
    compare.add_argument("a", type=Path, metavar="A", help="reference run directory (e.g. the executor's, measured)")
    compare.add_argument("b", type=Path, metavar="B", help="run directory held against A (e.g. the simulator's)")
    speedup_argument(compare)
    compare.add_argument(
        "--tolerance",
        type=fraction,
        metavar="X",
        help="exit 1 if a relative error (or the histogram distance) exceeds X, e.g. 0.1 for 10%%",
    )
    compare.add_argument(
        "--out",
        type=Path,
        metavar="FILE.json",
        help="also write the comparison to this JSON file (a name ending in .json; default: print only)",
    )
    compare.add_argument("--json", action="store_true", help="print JSON instead of a table")
    force_argument(compare, REPLACE_HELP)
    compare.set_defaults(command=run_compare)


def _report_parser(commands: argparse._SubParsersAction) -> None:
    report = commands.add_parser("report", help="figures, traces and an index.html for one or more runs")
    report.add_argument("runs", type=Path, nargs="+", metavar="RUN", help="run directories (two: A then B compared)")
    report.add_argument("--out", type=Path, required=True, help="report directory")
    speedup_argument(report)
    report.add_argument("--sizing", type=Path, metavar="CSV", help="also plot this `asyncrl size` CSV")
    report.add_argument(
        "--window",
        type=window,
        metavar="START:END",
        help="draw the timeline from START to END seconds only (:END from 0, START: to the end)",
    )
    force_argument(report, DIRECTORY_HELP)
    report.set_defaults(command=run_report)


def _trace_parser(commands: argparse._SubParsersAction) -> None:
    trace = commands.add_parser("trace", help="export a run's events as a Chrome/Perfetto trace")
    trace.add_argument("run", type=Path, metavar="RUN", help="run directory")
    trace.add_argument("--out", type=Path, help="trace file (default: RUN/trace.json.gz; gzipped when it ends in .gz)")
    force_argument(trace, REPLACE_HELP)
    trace.set_defaults(command=run_trace)


def run_compare(args: argparse.Namespace) -> int:
    from asyncrl.analysis.records.compare import (
        compare_runs,
        comparison_dict,
        comparison_lines,
        figures_off,
        write_comparison,
    )
    from asyncrl.analysis.records.phases import breakdown_dict, breakdown_lines

    if args.out is not None:
        output_file(args.out, JSON, force=args.force)
    comparison = compare_runs(args.a, args.b, tuple(args.speedup) if args.speedup else None)
    path = write_comparison(comparison, args.out, args.tolerance) if args.out is not None else None
    if args.json:
        print_json({**comparison_dict(comparison, args.tolerance), "phases": breakdown_dict(args.a, args.b)})
    else:
        print(comparison_lines(comparison, args.tolerance))
        print(breakdown_lines(args.a, args.b))  # time by phase, or why there is none
        if path is not None:
            print(f"wrote {path}")
    off = figures_off(comparison, args.tolerance) if args.tolerance is not None else []
    return EXIT_OFF_TOLERANCE if off else 0


def run_report(args: argparse.Namespace) -> int:
    from asyncrl.analysis.plots.report import report_lines, write_report

    speedup_dirs = tuple(args.speedup) if args.speedup else None
    with files_directory(args.out, "--out", force=args.force) as out:
        files = write_report(args.runs, out, speedup_dirs=speedup_dirs, sizing_csv=args.sizing, window=args.window)
    print(report_lines(files, args.runs))
    return 0


def run_trace(args: argparse.Namespace) -> int:
    from asyncrl.analysis.records.trace import default_trace_path, write_trace

    out = chosen_file(args.out, default_trace_path(args.run), args.force)
    path = write_trace(args.run, out)
    print(f"wrote {path} (open in https://ui.perfetto.dev or chrome://tracing)")
    return 0
