"""The ``asyncrl`` command: the one place that wires scenarios, backends and analysis.

    asyncrl simulate SCENARIO [--out DIR] [--set key=value ...]   predict one schedule
    asyncrl speedup  SCENARIO                                      as written vs sync baselines
    asyncrl size     SCENARIO --devices N                          rank generation:training splits
    asyncrl schema                                                 JSON Schema of the scenario file

Bad input prints one line naming the field and exits with status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from scenarios.loading import ScenarioError, dump_scenario, load_scenario
from scenarios.scenario import Scenario

EXIT_BAD_INPUT = 2


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return args.command(args)
    except ScenarioError as exc:
        print(f"asyncrl: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("asyncrl: interrupted", file=sys.stderr)
        return 130


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="asyncrl", description="Plan, run and check asynchronous RL schedules.")
    commands = parser.add_subparsers(required=True, metavar="COMMAND")

    simulate = commands.add_parser("simulate", help="predict one scenario with the SimPy simulator")
    _scenario_arguments(simulate)
    simulate.add_argument("--out", type=Path, help="run directory (default: runs/<scenario name>)")
    simulate.set_defaults(command=_simulate)

    speedup = commands.add_parser("speedup", help="the scenario as written vs sync on the same devices")
    _scenario_arguments(speedup)
    speedup.set_defaults(command=_speedup)

    size = commands.add_parser("size", help="rank generation:training splits of a device budget")
    _scenario_arguments(size)
    size.add_argument("--devices", type=_positive, required=True, help="device budget to split")
    size.add_argument(
        "--kind",
        action="append",
        choices=["sync", "pipelined", "streaming"],
        help="schedule kinds (repeatable; default: the scenario's)",
    )
    size.add_argument(
        "--max-staleness",
        action="append",
        type=_non_negative,
        help="staleness bounds (repeatable; default: the scenario's)",
    )
    size.add_argument(
        "--splits", type=_positive, default=16, help="most generation device counts tried per engine size (default 16)"
    )
    size.add_argument("--top", type=_positive, default=20, help="rows printed (all go to the CSV; default 20)")
    size.add_argument("--out", type=Path, help="CSV of the ranked table (default: runs/<scenario name>-size.csv)")
    size.set_defaults(command=_size)

    schema = commands.add_parser("schema", help="print the JSON Schema of the scenario file")
    schema.set_defaults(command=_schema)
    return parser


def _scenario_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", help="scenario file, or the name of a shipped scenario (e.g. quickstart)")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a field, e.g. schedule.max_staleness=2",
    )
    parser.add_argument("--seed", type=_non_negative, help="shortcut for --set run.seed=N")
    parser.add_argument("--steps", type=_positive, help="shortcut for --set run.steps=N")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def _load(args: argparse.Namespace) -> Scenario:
    overrides = list(args.overrides)
    if args.seed is not None:
        overrides.append(f"run.seed={args.seed}")
    if args.steps is not None:
        overrides.append(f"run.steps={args.steps}")
    return load_scenario(args.scenario, overrides)


def _simulate(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from analysis.tables import summary_lines
    from scenarios.record import write_run
    from simulator.simulation import simulate

    scenario = _load(args)
    out = args.out or Path("runs") / scenario.name
    with tqdm(total=scenario.run.steps, desc="simulating", unit="step", disable=args.quiet or None, leave=False) as bar:
        result = simulate(scenario, on_step=lambda step, now: bar.update())
    write_run(out, scenario_yaml=dump_scenario(scenario.resolved()), events=result.events, summary=result.summary)
    if args.json:
        print(json.dumps(result.summary, indent=2))
        return 0
    print(f"{scenario.name}: {scenario.schedule.kind} on {_devices(scenario)} (simulated)")
    print(summary_lines(result.summary))
    print(f"wrote {out}/ (summary.json, events.parquet, scenario.yaml)")
    return 0


def _speedup(args: argparse.Namespace) -> int:
    from analysis.sweep import simulate_all, speedup_variants
    from analysis.tables import format_table

    scenario = _load(args)
    results = list(simulate_all(speedup_variants(scenario), progress=not args.quiet))
    if args.json:
        print(json.dumps({variant.label: summary for variant, summary in results}, indent=2))
        return 0
    written = results[0][1]["throughput"]["samples_per_s"]
    rows = [
        [
            variant.label,
            _devices(variant.scenario),
            *_figures(summary),
            f"{written / summary['throughput']['samples_per_s']:.2f}x",
        ]
        for variant, summary in results
    ]
    print(f"{scenario.name}: {scenario.run.steps} steps of {scenario.batch_samples} samples, simulated")
    print(format_table(["schedule", "devices", *_FIGURE_HEADER, "as written vs this"], rows))
    return 0


def _size(args: argparse.Namespace) -> int:
    import csv

    from analysis.sweep import simulate_all, sizing_variants
    from analysis.tables import format_table

    scenario = _load(args)
    kinds = args.kind or [scenario.schedule.kind]
    bounds = args.max_staleness or [scenario.staleness_bound]
    baselines, candidates = sizing_variants(scenario, args.devices, kinds, bounds, args.splits)
    if not candidates:
        raise ScenarioError(
            f"--devices: no split of {args.devices} devices fits {scenario.model.label} on {scenario.hardware.device}"
        )
    results = list(simulate_all(baselines + candidates, progress=not args.quiet))
    throughput = _throughput_of
    best_baseline = sorted(results[: len(baselines)], key=throughput)[:1]  # the best sync colocated engine size
    ranked = best_baseline + sorted(results[len(baselines) :], key=throughput)
    header = ["schedule split tp", *_FIGURE_HEADER]
    rows = [[variant.label, *_figures(summary)] for variant, summary in ranked]
    out = args.out or Path("runs") / f"{scenario.name}-size.csv"
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as handle:
        csv.writer(handle).writerows([header, *rows])
    if args.json:
        print(json.dumps([{"label": v.label, **s} for v, s in ranked], indent=2))
        return 0
    print(f"{scenario.name}: {args.devices} devices, {scenario.run.steps} steps simulated per row, best first")
    print(format_table(header, rows[: args.top + 1]))
    if len(rows) > args.top + 1:
        print(f"... {len(rows) - args.top - 1} more rows in the CSV")
    print(f"wrote {out}")
    return 0


def _throughput_of(result: tuple) -> float:
    """Sort key: highest throughput first."""
    return -result[1]["throughput"]["samples_per_s"]


def _schema(args: argparse.Namespace) -> int:
    print(json.dumps(Scenario.model_json_schema(), indent=2))
    return 0


_FIGURE_HEADER = ["samples/s", "step s", "stale mean", "stale max", "gen util", "train util", "dropped"]


def _figures(summary: dict) -> list:
    return [
        summary["throughput"]["samples_per_s"],
        summary["step_time_s"]["mean"],
        summary["staleness"]["mean"],
        summary["staleness"]["max"],
        f"{summary['utilization']['generation']:.0%}",
        f"{summary['utilization']['training']:.0%}",
        summary["samples"]["dropped"],
    ]


def _devices(scenario: Scenario) -> str:
    cluster = scenario.cluster
    if cluster.colocated:
        return f"{cluster.generation_devices} {scenario.hardware.device} (colocated)"
    return f"{cluster.generation_devices}+{cluster.training_devices} {scenario.hardware.device}"


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be zero or more, got {text}")
    return value


if __name__ == "__main__":
    sys.exit(main())
