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

Each handler parses and wires, nothing more: sweeps run in ``simulator.sweep``,
and every table, CSV and summary printed is formatted in ``analysis``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from asyncrl.scenarios.loading import ScenarioError, dump_scenario, load_scenario
from asyncrl.scenarios.scenario import Scenario

if TYPE_CHECKING:
    from tqdm import tqdm

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
    demo.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="where to calibrate and execute")
    demo.add_argument("--profile", type=Path, help="a measured profile to use instead of calibrating (one scenario)")
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
    from asyncrl.analysis.tables import simulation_lines
    from asyncrl.scenarios.record import write_run
    from asyncrl.simulator.simulation import simulate

    scenario = _load(args)
    out = args.out or Path("runs") / scenario.name
    with _progress(scenario.run.steps, "simulating", "step", args.quiet, leave=False) as bar:
        result = simulate(scenario, on_step=lambda step, now: bar.update())
    write_run(out, scenario_yaml=dump_scenario(scenario.resolved()), events=result.events, summary=result.summary)
    if args.json:
        return _print_json(result.summary)
    print(simulation_lines(scenario, result.summary))
    print(f"wrote {out}/ (summary.json, events.parquet, scenario.yaml)")
    return 0


def _execute(args: argparse.Namespace) -> int:
    from asyncrl.analysis.tables import execution_header, execution_lines
    from asyncrl.executor.runtime import check, execute

    scenario = _load(args)
    check(scenario, args.device)
    out = args.resume or args.out or Path("runs") / f"{scenario.name}-executed"
    print(execution_header(scenario, args.device, args.runtime))
    with _progress(scenario.run.steps, "training", "step", args.quiet) as bar:
        try:
            result = execute(
                scenario,
                out,
                device=args.device,
                resume=args.resume is not None,
                on_step=_training_progress(bar, scenario.batch_samples),
                runtime=args.runtime,
            )
        except RuntimeError as exc:
            bar.close()
            print(f"asyncrl: error: {str(exc).splitlines()[0]}", file=sys.stderr)
            print(f"partial run record in {out}/ (summary.json status: failed)", file=sys.stderr)
            return 1
    if args.json:
        return _print_json(result.summary)
    print(execution_lines(result.summary, result.metrics, synthetic=not scenario.workload.task))
    print(f"wrote {out}/ (summary.json, events.parquet, metrics.parquet, scenario.yaml)")
    return 0


def _demo(args: argparse.Namespace) -> int:
    from asyncrl.demo import DEMO_SCENARIOS, run_demo
    from asyncrl.executor.calibrate import check_device

    scenarios = tuple(args.scenario or DEMO_SCENARIOS)
    for name in scenarios:
        load_scenario(name)  # bad names fail before anything runs
    check_device(args.device)
    if args.profile is not None:
        load_scenario(scenarios[0], [f"hardware.profile={args.profile.resolve()}"]).hardware.cost_profile()
    run_demo(args.out, scenarios, args.steps, device=args.device, profile=args.profile)
    return 0


def _calibrate(args: argparse.Namespace) -> int:
    from asyncrl.analysis.tables import calibration_lines
    from asyncrl.executor.calibrate import calibrate, check_device
    from asyncrl.scenarios.profile import save_profile

    scenario = load_scenario(args.scenario, [*args.overrides, *_model_override(args.model)])
    batch_sizes = _batch_sizes(args.batch_sizes, scenario.engine_concurrency)
    check_device(args.device)
    with _progress(len(batch_sizes) + 4, "calibrating", "figure", args.quiet) as bar:
        result = calibrate(
            scenario,
            batch_sizes,
            repeats=args.repeats,
            progress=lambda label: (bar.set_postfix_str(label), bar.update()),
            device=args.device,
        )
    save_profile(result.profile, args.out)
    print(calibration_lines(scenario.model.label, args.device, args.repeats, result.profile, result.noise))
    print(f"wrote {args.out} (use it as hardware.profile)")
    return 0


def _speedup(args: argparse.Namespace) -> int:
    from asyncrl.analysis.tables import speedup_lines
    from asyncrl.simulator.sweep import simulate_speedup

    scenario = _load(args)
    results = simulate_speedup(scenario, progress=not args.quiet)
    if args.json:
        return _print_json({variant.label: summary for variant, summary in results})
    print(speedup_lines(scenario, results))
    return 0


def _size(args: argparse.Namespace) -> int:
    from asyncrl.analysis.sizing import sizing_lines, write_sizing_csv
    from asyncrl.simulator.sweep import simulate_sizing

    scenario = _load(args)
    kinds = args.kind or [scenario.schedule.kind]
    bounds = args.max_staleness or [scenario.staleness_bound]
    ranked = simulate_sizing(scenario, args.devices, kinds, bounds, args.splits, progress=not args.quiet)
    out = write_sizing_csv(args.out or Path("runs") / f"{scenario.name}-size.csv", ranked)
    if args.json:
        return _print_json([{"label": variant.label, **summary} for variant, summary in ranked])
    print(sizing_lines(scenario, args.devices, ranked, args.top))
    print(f"wrote {out}")
    return 0


def _schema(args: argparse.Namespace) -> int:
    return _print_json(Scenario.model_json_schema())


EXIT_OFF_TOLERANCE = 1


def _compare(args: argparse.Namespace) -> int:
    from asyncrl.analysis.compare import compare_runs, comparison_dict, comparison_lines, figures_off, write_comparison

    comparison = compare_runs(args.a, args.b, tuple(args.speedup) if args.speedup else None)
    path = write_comparison(comparison, args.out or args.b, args.tolerance)
    if args.json:
        _print_json(comparison_dict(comparison, args.tolerance))
    else:
        print(comparison_lines(comparison, args.tolerance))
        print(f"wrote {path}")
    off = figures_off(comparison, args.tolerance) if args.tolerance is not None else []
    return EXIT_OFF_TOLERANCE if off else 0


def _report(args: argparse.Namespace) -> int:
    from asyncrl.analysis.report import report_lines, write_report

    speedup_dirs = tuple(args.speedup) if args.speedup else None
    files = write_report(args.runs, args.out, speedup_dirs=speedup_dirs, sizing_csv=args.sizing)
    print(report_lines(files, args.runs))
    return 0


def _trace(args: argparse.Namespace) -> int:
    from asyncrl.analysis.trace import write_trace

    path = write_trace(args.run, args.out)
    print(f"wrote {path} (open in https://ui.perfetto.dev or chrome://tracing)")
    return 0


# ── wiring shared by the handlers ───────────────────────────────────────────────


def _print_json(data: Any) -> int:
    print(json.dumps(data, indent=2))
    return 0


def _progress(total: int, desc: str, unit: str, quiet: bool, leave: bool = True) -> tqdm:
    """A progress bar on stderr; none when ``quiet`` or when stderr is not a terminal."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, disable=quiet or None, leave=leave)


def _training_progress(bar: tqdm, batch_samples: int) -> Callable[[int, dict[str, float]], None]:
    """An ``on_step`` callback that shows reward, staleness and samples/s on the bar."""

    def on_step(step: int, row: dict[str, float]) -> None:
        bar.n = step + 1
        rate = (step + 1) * batch_samples / max(row["end"], 1e-9)
        bar.set_postfix(
            reward=f"{row['reward_mean']:.3f}", staleness=f"{row['staleness_mean']:.2f}", samples_s=f"{rate:.1f}"
        )

    return on_step


def _model_override(model: str | None) -> list[str]:
    """``--model``: a local checkpoint directory or a preset name."""
    if not model:
        return []
    key = "model.path" if Path(model).is_dir() else "model.preset"
    return [f"{key}={model}"]


def _batch_sizes(text: str, limit: int) -> list[int]:
    try:
        sizes = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise ScenarioError(f"--batch-sizes: {text!r} is not a comma-separated list of integers") from None
    if not sizes or sizes[0] < 1:
        raise ScenarioError("--batch-sizes: give positive batch sizes, e.g. 1,2,4,8")
    return [size for size in sizes if size <= limit] or [1]


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
