"""The ``asyncrl`` command: the one place that wires scenarios, backends and analysis.

    asyncrl simulate SCENARIO [--out DIR] [--set key=value ...]   predict one schedule
    asyncrl execute  SCENARIO [--device cuda] [--resume RUN]       run it for real
    asyncrl speedup  SCENARIO                                      as written vs sync baselines
    asyncrl size     SCENARIO --devices N                          rank generation:training splits
    asyncrl schema                                                 JSON Schema of the scenario file
    asyncrl compare  A B [--tolerance X] [--speedup ...]           B's figures against A's; 1 if off
    asyncrl report   RUN [RUN ...] --out DIR                       figures, traces and index.html
    asyncrl trace    RUN [--out FILE]                              Chrome/Perfetto trace of one run

Bad input prints one line naming the field and exits with status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from scenarios.loading import ScenarioError, dump_scenario, load_scenario
from scenarios.scenario import Scenario

if TYPE_CHECKING:
    from analysis.compare import Comparison

EXIT_BAD_INPUT = 2


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return args.command(args)
    except ScenarioError as exc:
        print(f"asyncrl: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("asyncrl: interrupted (a run directory being written keeps a partial record)", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into head & co.
        return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="asyncrl", description="Plan, run and check asynchronous RL schedules.")
    commands = parser.add_subparsers(required=True, metavar="COMMAND")

    simulate = commands.add_parser("simulate", help="predict one scenario with the SimPy simulator")
    _scenario_arguments(simulate)
    simulate.add_argument("--out", type=Path, help="run directory (default: runs/<scenario name>)")
    simulate.set_defaults(command=_simulate)

    execute = commands.add_parser("execute", help="run one scenario for real with torch (CPU or CUDA)")
    _scenario_arguments(execute)
    execute.add_argument("--out", type=Path, help="run directory (default: runs/<scenario name>-executed)")
    execute.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="where engines and learner run")
    execute.add_argument("--resume", type=Path, metavar="RUN", help="continue RUN from its last checkpoint")
    execute.add_argument(
        "--runtime",
        default="local",
        choices=["local", "ray"],
        help="actors as local processes, or as Ray actors (a local Ray, or the cluster RAY_ADDRESS names)",
    )
    execute.set_defaults(command=_execute)

    calibrate = commands.add_parser(
        "calibrate", help="measure the executor's costs; write a profile the simulator reads"
    )
    calibrate.add_argument(
        "scenario",
        nargs="?",
        default="cpu-timing",
        help="whose model and learner settings to measure (default cpu-timing)",
    )
    calibrate.add_argument("--model", help="a preset or a local checkpoint directory, instead of the scenario's model")
    calibrate.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    calibrate.add_argument("--repeats", type=_positive, default=5, help="measurements per figure; the median is kept")
    calibrate.add_argument(
        "--batch-sizes", default="1,2,4,8,16,32", help="engine batch sizes to time (comma-separated)"
    )
    calibrate.add_argument("--out", type=Path, required=True, help="profile file to write (YAML)")
    calibrate.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    calibrate.add_argument("--quiet", action="store_true")
    calibrate.set_defaults(command=_calibrate)

    demo = commands.add_parser("demo", help="the main job: calibrate, predict, execute, compare and report on CPU")
    demo.add_argument(
        "--out", type=Path, default=Path("runs/demo"), help="where runs and the report go (default runs/demo)"
    )
    demo.add_argument(
        "--scenario", action="append", help="shipped CPU scenarios to use (repeatable; default all three)"
    )
    demo.add_argument("--steps", type=_positive, help="learner steps per run (default: each scenario's own)")
    demo.set_defaults(command=_demo)

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

    compare = commands.add_parser("compare", help="compare two run directories: B's figures against A's")
    compare.add_argument("a", type=Path, metavar="A", help="reference run directory (e.g. the simulator's prediction)")
    compare.add_argument("b", type=Path, metavar="B", help="run directory held against A (e.g. the executor's)")
    _speedup_argument(compare)
    compare.add_argument(
        "--tolerance",
        type=_fraction,
        metavar="X",
        help="exit 1 if a relative error (or the histogram distance) exceeds X, e.g. 0.1 for 10%%",
    )
    compare.add_argument("--out", type=Path, help="comparison JSON file, or a directory for it (default: B/)")
    compare.add_argument("--json", action="store_true", help="print JSON instead of a table")
    compare.set_defaults(command=_compare)

    report = commands.add_parser("report", help="figures, traces and an index.html for one or more runs")
    report.add_argument("runs", type=Path, nargs="+", metavar="RUN", help="run directories (two: A then B compared)")
    report.add_argument("--out", type=Path, required=True, help="report directory")
    _speedup_argument(report)
    report.add_argument("--sizing", type=Path, metavar="CSV", help="also plot this `asyncrl size` CSV")
    report.set_defaults(command=_report)

    trace = commands.add_parser("trace", help="export a run's events as a Chrome/Perfetto trace")
    trace.add_argument("run", type=Path, metavar="RUN", help="run directory")
    trace.add_argument("--out", type=Path, help="trace file (default: RUN/trace.json)")
    trace.set_defaults(command=_trace)
    return parser


def _speedup_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--speedup",
        type=Path,
        nargs=4,
        metavar=("SYNC_A", "ASYNC_A", "SYNC_B", "ASYNC_B"),
        help="also compare wall(SYNC_A)/wall(ASYNC_A) (predicted) with wall(SYNC_B)/wall(ASYNC_B) (measured)",
    )


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


def _execute(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from analysis.tables import summary_lines
    from executor.runtime import check, execute

    scenario = _load(args)
    check(scenario, args.device)
    out = args.resume or args.out or Path("runs") / f"{scenario.name}-executed"
    where = "Ray actor(s)" if args.runtime == "ray" else "engine process(es)"
    print(
        f"{scenario.name}: {scenario.schedule.kind}, {scenario.cluster.engines} {where} and a learner on {args.device}"
    )
    with tqdm(total=scenario.run.steps, desc="training", unit="step", disable=args.quiet or None) as bar:

        def on_step(step: int, row: dict[str, float]) -> None:
            bar.n = step + 1
            rate = (step + 1) * scenario.batch_samples / max(row["end"], 1e-9)
            bar.set_postfix(
                reward=f"{row['reward_mean']:.3f}", staleness=f"{row['staleness_mean']:.2f}", samples_s=f"{rate:.1f}"
            )

        try:
            result = execute(
                scenario, out, device=args.device, resume=args.resume is not None, on_step=on_step, runtime=args.runtime
            )
        except RuntimeError as exc:
            bar.close()
            print(f"asyncrl: error: {str(exc).splitlines()[0]}", file=sys.stderr)
            print(f"partial run record in {out}/ (summary.json status: failed)", file=sys.stderr)
            return 1
    if args.json:
        print(json.dumps(result.summary, indent=2))
        return 0
    metrics = result.metrics
    first, last = metrics["reward_mean"].head(3).mean(), metrics["reward_mean"].tail(3).mean()
    print(summary_lines(result.summary))
    kind = "" if scenario.workload.task else " (synthetic: timing mode)"
    print(f"reward       {first:.3f} over the first 3 steps -> {last:.3f} over the last 3{kind}")
    print(f"wrote {out}/ (summary.json, events.parquet, metrics.parquet, scenario.yaml)")
    return 0


def _demo(args: argparse.Namespace) -> int:
    from asyncrl.demo import DEMO_SCENARIOS, run_demo

    scenarios = tuple(args.scenario or DEMO_SCENARIOS)
    for name in scenarios:
        load_scenario(name)  # bad names fail before anything runs
    run_demo(args.out, scenarios, args.steps)
    return 0


def _calibrate(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from analysis.tables import format_table
    from executor.calibrate import calibrate
    from scenarios.profile import save_profile

    overrides = list(args.overrides)
    if args.model:
        key = "model.path" if Path(args.model).is_dir() else "model.preset"
        overrides.append(f"{key}={args.model}")
    scenario = load_scenario(args.scenario, overrides)
    batch_sizes = _batch_sizes(args.batch_sizes, scenario.engine_concurrency)
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise ScenarioError("--device: cuda asked for, but torch sees no GPU")
    with tqdm(total=len(batch_sizes) + 4, desc="calibrating", unit="figure", disable=args.quiet or None) as bar:
        result = calibrate(
            scenario,
            batch_sizes,
            repeats=args.repeats,
            progress=lambda label: (bar.set_postfix_str(label), bar.update()),
            device=args.device,
        )
    save_profile(result.profile, args.out)
    profile = result.profile
    rows = [[f"decode step, batch {b}", f"{t * 1e3:.3f} ms"] for b, t in profile.decode_step_s.items()]
    rows += [
        ["decode, per context token", f"{profile.decode_context_token_s * 1e9:.1f} ns"],
        ["prefill, per prompt token", f"{profile.prefill_token_s * 1e6:.2f} us"],
        ["learner, per token (one device)", f"{profile.train_token_s * 1e6:.2f} us"],
        ["learner, per row x length^2", f"{profile.train_token_square_s * 1e9:.3f} ns"],
        ["learner, per step", f"{profile.train_step_overhead_s * 1e3:.2f} ms"],
        ["weight sync", f"{profile.weight_sync_s * 1e3:.3f} ms"],
    ]
    print(f"{scenario.model.label} on {args.device}, median of {args.repeats}")
    print(format_table(["figure", "measured"], rows))
    worst = max(result.noise.items(), key=lambda item: item[1])
    print(
        f"noise: spread (max - min) / median over repeats is {_median_noise(result.noise):.0%} typically, {worst[1]:.0%} at worst ({worst[0]})"
    )
    print(f"wrote {args.out} (use it as hardware.profile)")
    return 0


def _median_noise(noise: dict[str, float]) -> float:
    import statistics

    return statistics.median(noise.values()) if noise else 0.0


def _batch_sizes(text: str, limit: int) -> list[int]:
    try:
        sizes = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise ScenarioError(f"--batch-sizes: {text!r} is not a comma-separated list of integers") from None
    if not sizes or sizes[0] < 1:
        raise ScenarioError("--batch-sizes: give positive batch sizes, e.g. 1,2,4,8")
    return [size for size in sizes if size <= limit] or [1]


def _speedup(args: argparse.Namespace) -> int:
    from analysis.tables import format_table
    from simulator.sweep import simulate_all, speedup_variants

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

    from analysis.tables import format_table
    from simulator.sweep import simulate_all, sizing_variants

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


EXIT_OFF_TOLERANCE = 1


def _compare(args: argparse.Namespace) -> int:
    from analysis.compare import compare_runs, comparison_dict, figures_off, write_comparison

    comparison = compare_runs(args.a, args.b, tuple(args.speedup) if args.speedup else None)
    path = write_comparison(comparison, args.out or args.b, args.tolerance)
    off = figures_off(comparison, args.tolerance) if args.tolerance is not None else []
    if args.json:
        print(json.dumps(comparison_dict(comparison, args.tolerance), indent=2))
    else:
        _print_comparison(args, comparison, off)
        print(f"wrote {path}")
    return EXIT_OFF_TOLERANCE if off else 0


def _print_comparison(args: argparse.Namespace, comparison: Comparison, off: list[str]) -> None:
    from analysis.compare import TABLE_HEADER, table_rows
    from analysis.tables import format_table

    for side, path, run in (("A", args.a, comparison.a_run), ("B", args.b, comparison.b_run)):
        print(f"{side}: {path} ({run['backend']}, {run['scenario']})")
    if comparison.a_run["scenario"] != comparison.b_run["scenario"]:
        print("note: A and B ran different scenarios")
    header = [*TABLE_HEADER, "off"] if args.tolerance is not None else TABLE_HEADER
    print(format_table(header, table_rows(comparison, args.tolerance)))
    if args.tolerance is not None:
        verdict = f"{len(off)} off by more than {args.tolerance:g}: {', '.join(off)}" if off else "none off"
        print(f"tolerance {args.tolerance:g}: {verdict}")


def _report(args: argparse.Namespace) -> int:
    from analysis.report import write_report

    files = write_report(
        args.runs, args.out, speedup_dirs=tuple(args.speedup) if args.speedup else None, sizing_csv=args.sizing
    )
    print(f"wrote {files.index}")
    print(f"  figures: {', '.join(path.name for path in files.figures)}")
    print(f"  traces:  {', '.join(path.name for path in files.traces)}")
    if files.comparison is not None:
        print(f"  comparison: {files.comparison.name} (B = {args.runs[1]} against A = {args.runs[0]})")
    return 0


def _trace(args: argparse.Namespace) -> int:
    from analysis.trace import write_trace

    path = write_trace(args.run, args.out)
    print(f"wrote {path} (open in https://ui.perfetto.dev or chrome://tracing)")
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


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number ≥ 0, got {text}")
    return value


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be zero or more, got {text}")
    return value


if __name__ == "__main__":
    sys.exit(main())
