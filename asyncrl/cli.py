"""The ``asyncrl`` command: the one place that wires scenarios, backends and analysis.

    asyncrl simulate SCENARIO [--out DIR] [--set key=value ...]   predict one schedule
    asyncrl execute  SCENARIO [--device cuda] [--resume RUN]       run it for real
    asyncrl speedup  SCENARIO                                      as written vs sync baselines
    asyncrl size     SCENARIO --devices N                          rank generation:training splits
    asyncrl sweep    SCENARIO --vary KEY=V1,V2 [--vary ...]         what-if grid over any keys: CSV and plot
    asyncrl schema                                                 JSON Schema of the scenario file
    asyncrl compare  A B [--tolerance X] [--speedup ...]           B's figures against A's; 1 if off
    asyncrl report   RUN [RUN ...] --out DIR                       figures, traces and index.html
    asyncrl trace    RUN [--out FILE]                              Chrome/Perfetto trace of one run

Bad input prints one line naming the field and exits with status 2; a run that
fails prints one line and exits with status 1 (ASYNCRL_TRACEBACK=1 shows the traceback).

Each handler parses and wires, nothing more: sweeps run in ``simulator.sweep``,
and every table, CSV and summary printed is formatted in ``analysis``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from asyncrl.scenarios.loading import ScenarioError, dump_scenario, load_scenario
from asyncrl.scenarios.outputs import check_output_file, default_run_dir, run_directory
from asyncrl.scenarios.scenario import Scenario

if TYPE_CHECKING:
    from tqdm import tqdm

EXIT_BAD_INPUT = 2
EXIT_FAILED = 1


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
        return args.command(args)
    except ScenarioError as exc:
        return _error(str(exc), EXIT_BAD_INPUT)
    except KeyboardInterrupt:
        print("asyncrl: interrupted (a run directory being written keeps a partial record)", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into head & co.
        return 0
    except Exception as exc:  # a run that failed: one line, never a traceback (unless asked for)
        if os.environ.get("ASYNCRL_TRACEBACK"):
            raise
        return _error(_one_line(exc), EXIT_FAILED)


def _error(message: str, status: int) -> int:
    print(f"asyncrl: error: {_printable(message)}", file=sys.stderr)
    return status


def _printable(message: str) -> str:
    """The message on one line: line breaks and other control characters (from the input itself) escaped."""
    return "".join(char if char.isprintable() else ascii(char)[1:-1] for char in message)


def _one_line(exc: BaseException) -> str:
    """What went wrong, on one line: the OS's reason and the file, or the exception's first line."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.filename}: {exc.strerror}" if exc.filename else exc.strerror
    if isinstance(exc, MemoryError):
        return "out of memory"
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors on one line (exit status 2) instead of a usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"asyncrl: error: {_printable(message)} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="asyncrl", description="Plan, run and check asynchronous RL schedules.")
    commands = parser.add_subparsers(required=True, metavar="COMMAND")

    simulate = commands.add_parser("simulate", help="predict one scenario with the SimPy simulator")
    _scenario_arguments(simulate)
    simulate.add_argument("--out", type=Path, help="run directory (default: runs/<scenario name>)")
    _force_argument(simulate)
    simulate.set_defaults(command=_simulate)

    execute = commands.add_parser("execute", help="run one scenario for real with torch (CPU or CUDA)")
    _scenario_arguments(execute)
    execute.add_argument("--out", type=Path, help="run directory (default: runs/<scenario name>-executed)")
    _force_argument(execute)
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
    calibrate.add_argument(
        "--from-run",
        type=Path,
        action="append",
        metavar="RUN",
        help="fit the profile to executor runs' recorded steps instead of timing micro-benchmarks (repeatable)",
    )
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
    _price_argument(speedup)
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
    _price_argument(size)
    size.set_defaults(command=_size)

    sweep = commands.add_parser("sweep", help="what-if: simulate every combination of values of any scenario keys")
    _scenario_arguments(sweep)
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
    sweep.add_argument("--out", type=Path, help="CSV of the grid (default: runs/<scenario name>-sweep.csv)")
    sweep.add_argument("--plot", type=Path, help="PNG of the metric (default: the CSV's path ending in .png)")
    _price_argument(sweep)
    sweep.set_defaults(command=_sweep)

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


def _force_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--force", action="store_true", help="write into --out even if it holds files that are not a run record"
    )


def _speedup_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--speedup",
        type=Path,
        nargs=4,
        metavar=("SYNC_A", "ASYNC_A", "SYNC_B", "ASYNC_B"),
        help="also compare wall(SYNC_A)/wall(ASYNC_A) (predicted) with wall(SYNC_B)/wall(ASYNC_B) (measured)",
    )


def _price_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--price-per-device-hour",
        type=_fraction,
        metavar="USD",
        help="also show the cost of 1,000 trained samples at this price of one device for one hour",
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
    return load_scenario(args.scenario, _overrides(args))


def _overrides(args: argparse.Namespace) -> list[str]:
    """``--set`` overrides, then ``--seed`` and ``--steps`` as the overrides they stand for."""
    overrides = list(args.overrides)
    if args.seed is not None:
        overrides.append(f"run.seed={args.seed}")
    if args.steps is not None:
        overrides.append(f"run.steps={args.steps}")
    return overrides


def _simulate(args: argparse.Namespace) -> int:
    from asyncrl.analysis.tables import simulation_lines
    from asyncrl.scenarios.record import write_run
    from asyncrl.simulator.simulation import simulate

    scenario = _load(args)
    out = args.out or default_run_dir(scenario.name)
    with run_directory(out, force=args.force):
        with _progress(scenario.run.steps, "simulating", "step", args.quiet, leave=False) as bar:
            result = simulate(scenario, on_step=lambda step, now: bar.update())
        yaml = dump_scenario(scenario.resolved())
        write_run(out, scenario_yaml=yaml, events=result.events, summary=result.summary)
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
    out = args.resume or args.out or default_run_dir(scenario.name, "-executed")
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
                force=args.force,
            )
        except (ScenarioError, KeyboardInterrupt):
            raise
        except Exception as exc:
            bar.close()
            _error(_one_line(exc), EXIT_FAILED)
            _say_partial(out)
            return EXIT_FAILED
    if args.json:
        return _print_json(result.summary)
    if "resumed_from" in result.summary:
        print(f"resumed from the checkpoint at step {result.summary['resumed_from']} in {out}/")
    print(execution_lines(result.summary, result.metrics, synthetic=not scenario.workload.task))
    print(f"wrote {out}/ (summary.json, events.parquet, metrics.parquet, engine_steps.parquet, scenario.yaml)")
    return 0


def _say_partial(out: Path) -> None:
    """After a failed execution: where its partial record is, if it wrote one."""
    try:
        status = json.loads((out / "summary.json").read_text()).get("status", "failed")
    except (OSError, ValueError, AttributeError):
        return  # the run ended before it recorded anything
    print(f"partial run record in {out}/ (summary.json status: {status})", file=sys.stderr)


def _demo(args: argparse.Namespace) -> int:
    from asyncrl.demo import DEMO_SCENARIOS, run_demo

    scenarios = tuple(args.scenario or DEMO_SCENARIOS)
    for name in scenarios:
        load_scenario(name)  # bad names fail before anything runs
    run_demo(args.out, scenarios, args.steps)
    return 0


def _calibrate(args: argparse.Namespace) -> int:
    if args.from_run is not None:
        return _calibrate_from_run(args)
    from asyncrl.analysis.tables import calibration_lines
    from asyncrl.executor.calibrate import calibrate, check_device
    from asyncrl.scenarios.profile import save_profile

    scenario = load_scenario(args.scenario, [*args.overrides, *_model_override(args.model)])
    batch_sizes = _batch_sizes(args.batch_sizes, scenario.engine_concurrency)
    check_device(args.device)
    check_output_file(args.out)
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


def _calibrate_from_run(args: argparse.Namespace) -> int:
    from asyncrl.analysis.fit import profile_from_runs
    from asyncrl.analysis.tables import fit_lines
    from asyncrl.scenarios.profile import save_profile

    runs = args.from_run
    for run in runs:
        if not (run / "scenario.yaml").is_file():
            raise ScenarioError(f"--from-run: {run} is not a run directory (no scenario.yaml)")
    scenario = load_scenario(str(runs[0] / "scenario.yaml"))
    check_output_file(args.out)
    profile, report = profile_from_runs(runs, scenario.training_devices)
    save_profile(profile, args.out)
    print(fit_lines(", ".join(str(run) for run in runs), profile, report))
    print(f"wrote {args.out} (use it as hardware.profile)")
    return 0


def _speedup(args: argparse.Namespace) -> int:
    from asyncrl.analysis.tables import speedup_lines
    from asyncrl.simulator.sweep import simulate_speedup

    scenario = _load(args)
    results = simulate_speedup(scenario, progress=not args.quiet)
    if args.json:
        return _print_json({variant.label: summary for variant, summary in results})
    print(speedup_lines(scenario, results, args.price_per_device_hour))
    return 0


def _size(args: argparse.Namespace) -> int:
    from asyncrl.analysis.sizing import sizing_lines, write_sizing_csv
    from asyncrl.simulator.sweep import simulate_sizing

    scenario = _load(args)
    kinds = args.kind or [scenario.schedule.kind]
    bounds = args.max_staleness or [scenario.staleness_bound]
    csv_path = check_output_file(args.out or default_run_dir(scenario.name, "-size.csv"))
    ranked = simulate_sizing(scenario, args.devices, kinds, bounds, args.splits, progress=not args.quiet)
    out = write_sizing_csv(csv_path, ranked, args.price_per_device_hour)
    if args.json:
        return _print_json([{"label": variant.label, **summary} for variant, summary in ranked])
    print(sizing_lines(scenario, args.devices, ranked, args.top, args.price_per_device_hour))
    print(f"wrote {out}")
    return 0


def _sweep(args: argparse.Namespace) -> int:
    from asyncrl.analysis.sweep_table import check_metric, sweep_lines, sweep_records, write_sweep_csv
    from asyncrl.simulator.sweep import grid_points, parse_axis, simulate_grid

    scenario = _load(args)  # the scenario itself is sound before any grid point is tried
    check_metric(args.metric, priced=args.price_per_device_hour is not None)
    csv_path = check_output_file(args.out or default_run_dir(scenario.name, "-sweep.csv"))
    plot_path = _plot_path(args.plot, csv_path.with_suffix(".png"))
    if plot_path is not None:
        check_output_file(plot_path, "--plot")
    axes = [parse_axis(text) for text in args.vary]
    results = simulate_grid(grid_points(args.scenario, _overrides(args), axes), progress=not args.quiet)
    keys = [axis.key for axis in axes]
    records = sweep_records(keys, results, args.price_per_device_hour)
    written = [write_sweep_csv(csv_path, records)]
    if plot_path is not None:
        name = f"{scenario.name} ({scenario.run.steps} steps per point)"
        written.append(_sweep_plot(records, keys, args.metric, name, plot_path))
    if args.json:
        return _print_json(records)
    print(sweep_lines(scenario, keys, results, args.price_per_device_hour))
    print(f"wrote {' and '.join(str(path) for path in written)}")
    return 0


def _plot_path(asked: Path | None, default: Path) -> Path | None:
    """Where the sweep's plot goes: none without matplotlib, unless asked for (then a one-line error)."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is not None:
        return asked or default
    if asked is not None:
        raise ScenarioError("--plot: matplotlib is not installed (pip install 'asyncrl[analysis]')")
    print("no plot: matplotlib is not installed (pip install 'asyncrl[analysis]')", file=sys.stderr)
    return None


def _sweep_plot(records: list[dict[str, Any]], keys: list[str], metric: str, name: str, out: Path) -> Path:
    import pandas as pd

    from asyncrl.analysis.plots import sweep

    return sweep(pd.DataFrame.from_records(records), keys, metric, name, out)


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
