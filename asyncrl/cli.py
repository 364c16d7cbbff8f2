"""The ``asyncrl`` command: the one place that wires scenarios, backends and analysis.

    asyncrl simulate SCENARIO [--out DIR] [--set key=value ...]   predict one schedule
    asyncrl execute  SCENARIO [--device cuda] [--resume RUN]       run it for real
    asyncrl calibrate SCENARIO --out PROFILE                       fit a profile to short runs (--bench: benchmarks)
    asyncrl speedup  SCENARIO                                      as written vs sync baselines
    asyncrl size     SCENARIO --devices N                          rank generation:training splits
    asyncrl penalty  CELLS.csv [--out FILE]                        fit the staleness penalty to a study's runs
    asyncrl sweep    SCENARIO --vary KEY=V1,V2 [--vary ...]         what-if grid over any keys: CSV and plot
    asyncrl schema                                                 JSON Schema of the scenario file
    asyncrl compare  A B [--tolerance X] [--speedup ...]           B's figures against A's, time by phase; 1 if off
    asyncrl validate [--count N] [--seed S] [--steps K]            prediction errors on random CPU scenarios
    asyncrl study    SCENARIO [--schedules ...] [--losses ...]      time to a reward, executed over a grid of cells
    asyncrl report   RUN [RUN ...] --out DIR                       figures, traces and index.html
    asyncrl trace    RUN [--out FILE]                              Chrome/Perfetto trace of one run
    asyncrl lengths  FILE.jsonl [--field F] [--tokenizer PATH]      lengths from logs: empirical file, fits, plot
    asyncrl lengths  --from-log LOG [--max-tokens N]               a lognormal fitted to a verl metrics log
    asyncrl from-verl CONFIG.yaml [KEY=VALUE ...] --lengths L       a scenario from a verl trainer config
    asyncrl list                                                   presets, devices, shipped scenarios

``simulate``, ``speedup`` and ``size`` take ``--penalty FILE`` (what ``asyncrl penalty`` writes) to predict
the wall time to the study's target reward as well.

Scenario commands take overrides bare (``schedule.max_staleness=2``) or as ``--set``. Bad input prints
one line per wrong field (``asyncrl.arguments`` words flag errors) and exits with status 2; a run that
fails prints one line and exits with status 1 (ASYNCRL_TRACEBACK=1 shows the traceback).

Each handler parses and wires, nothing more: sweeps run in ``simulator.sweep``,
studies in ``asyncrl.study``, and every table, CSV and summary printed is formatted in ``analysis``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from asyncrl import __version__
from asyncrl.arguments import (
    Parser,
    add_examples,
    assignment,
    fraction,
    non_negative,
    positive,
    split_assignments,
    window,
)
from asyncrl.scenarios.loading import ScenarioError, load_scenario
from asyncrl.scenarios.memory import check_memory, memory_problem
from asyncrl.scenarios.outputs import check_output_file, default_run_dir
from asyncrl.scenarios.scenario import Scenario

if TYPE_CHECKING:
    from tqdm import tqdm

    from asyncrl.scenarios.penalty import PenaltyFit
    from asyncrl.scenarios.record import RunSummary

EXIT_BAD_INPUT = 2
EXIT_FAILED = 1
BENCH_REPEATS = 5  # calibrate --bench: measurements per figure
BENCH_BATCH_SIZES = "1,2,4,8,16,32"  # calibrate --bench: engine batch sizes timed


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    try:
        return args.command(args)
    except ScenarioError as exc:
        for line in str(exc).splitlines():  # a scenario reports every field that is wrong, one line each
            _error(line, EXIT_BAD_INPUT)
        return EXIT_BAD_INPUT
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


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """The arguments; leftover ``dotted.key=value`` ones (after a flag) join the bare overrides."""
    parser = _parser()
    if not (sys.argv[1:] if argv is None else argv):  # bare `asyncrl`: what it can do, not a usage error
        parser.print_help()
        parser.exit(0)
    args, extras = parser.parse_known_args(argv)
    if extras:
        assignments, error = split_assignments(extras, args.subparser._option_string_actions)
        if error is None and "assignments" not in args:
            error = f"unexpected argument {extras[0]!r} ({args.subparser.prog} reads no scenario)"
        if error is not None:
            parser.error(error)
        args.assignments = [*args.assignments, *assignments]
    return args


def _parser() -> argparse.ArgumentParser:
    parser = Parser(prog="asyncrl", description="Plan, run and check asynchronous RL schedules.")
    parser.add_argument("--version", action="version", version=f"asyncrl {__version__}")
    commands = parser.add_subparsers(required=True, metavar="COMMAND")

    simulate = commands.add_parser("simulate", help="predict one scenario with the SimPy simulator")
    _scenario_arguments(simulate)
    simulate.add_argument("--out", type=Path, help="run directory (default: runs/<scenario name>)")
    _force_argument(simulate)
    _penalty_argument(simulate, "also predict the wall time to the target reward of this penalty file")
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
    execute.add_argument(
        "--log",
        choices=["tensorboard", "wandb"],
        help="also log each step's metrics and the summary: RUN/tensorboard/, or a W&B run in RUN/wandb/ "
        "(offline unless WANDB_MODE says otherwise)",
    )
    execute.set_defaults(command=_execute)

    calibrate = commands.add_parser(
        "calibrate",
        help="execute short runs of a scenario (as written and sync) and fit a profile the simulator reads to them "
        "(--bench: time micro-benchmarks instead)",
    )
    calibrate.add_argument(
        "scenario",
        nargs="?",
        default="cpu-timing",
        help="what to run or measure: its model, learner settings, lengths and schedule (default cpu-timing)",
    )
    calibrate.add_argument("--model", help="a preset or a local checkpoint directory, instead of the scenario's model")
    calibrate.add_argument(
        "--device", default="cpu", choices=["cpu", "cuda"], help="where the runs (or micro-benchmarks) execute"
    )
    calibrate.add_argument(
        "--calibration-steps",
        type=_positive,
        metavar="N",
        help="learner steps of each calibration run (default 8); the runs go to <profile stem>-runs/ beside --out",
    )
    calibrate.add_argument(
        "--bench", action="store_true", help="time micro-benchmarks of the executor's engine and learner instead"
    )
    calibrate.add_argument(
        "--repeats", type=_positive, help="with --bench: measurements per figure, the median kept (default 5)"
    )
    calibrate.add_argument(
        "--batch-sizes", help="with --bench: engine batch sizes to time (comma-separated; default 1,2,4,8,16,32)"
    )
    calibrate.add_argument("--out", type=Path, required=True, help="profile file to write (YAML)")
    calibrate.add_argument(
        "--from-run",
        type=Path,
        action="append",
        metavar="RUN",
        help="fit the profile to executor runs already recorded instead of executing new ones (repeatable)",
    )
    calibrate.add_argument(
        "--from-log",
        type=Path,
        action="append",
        metavar="LOG",
        help="fit the analytic model's efficiencies to a framework's metrics log of SCENARIO's run (verl's JSONL "
        "file logger or a TensorBoard directory; repeatable): a profile that transfers to other splits and sizes",
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
    demo.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="where to calibrate and execute")
    demo.add_argument("--profile", type=Path, help="a measured profile to use instead of calibrating (one scenario)")
    demo.add_argument(
        "--calibration",
        choices=["run", "bench"],
        help="run: fit each scenario's profile to short executed runs of it (default); bench: time micro-benchmarks",
    )
    demo.add_argument(
        "--calibration-steps", type=_positive, metavar="N", help="learner steps of each calibration run (default 8)"
    )
    demo.set_defaults(command=_demo)

    validate = commands.add_parser(
        "validate", help="draw random CPU scenarios; calibrate, predict, execute and report the prediction errors"
    )
    validate.add_argument("--count", type=_positive, default=10, help="scenarios drawn (default 10)")
    validate.add_argument("--seed", type=_non_negative, default=0, help="seeds the draws (default 0)")
    validate.add_argument(
        "--steps", type=_positive, default=30, help="learner steps predicted and executed (default 30)"
    )
    validate.add_argument(
        "--calibration",
        choices=["run", "bench"],
        default="run",
        help="run: fit the profile to short executed runs (default); bench: time micro-benchmarks",
    )
    validate.add_argument(
        "--calibration-steps", type=_positive, default=8, help="learner steps of each calibration run (default 8)"
    )
    validate.add_argument(
        "--repeat", type=_positive, default=1, help="executions of each measured run; the table shows the spread"
    )
    validate.add_argument("--out", type=Path, default=Path("runs/validate"), help="default runs/validate")
    validate.add_argument("--quiet", action="store_true", help="no progress bar")
    validate.set_defaults(command=_validate)

    _study_parser(commands)

    speedup = commands.add_parser("speedup", help="the scenario as written vs sync on the same devices")
    _scenario_arguments(speedup)
    _price_argument(speedup)
    _penalty_argument(
        speedup,
        "also predict each run's wall time to the target reward of this penalty file, and the speedup at equal "
        "quality: a baseline's time to target over the scenario's",
    )
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
    size.add_argument(
        "--exact",
        action="store_true",
        help="simulate every step of every run (default: end each run once its step time and staleness have "
        "converged, and extrapolate)",
    )
    size.add_argument("--out", type=Path, help="CSV of the ranked table (default: runs/<scenario name>-size.csv)")
    _price_argument(size)
    _penalty_argument(
        size,
        "rank by predicted wall time to the target reward of this penalty file, soonest first (equal times: "
        "higher samples/s first), instead of by samples/s; the sync baseline stays on top",
    )
    size.set_defaults(command=_size)

    penalty = commands.add_parser(
        "penalty", help="fit the staleness penalty (steps to a target reward vs staleness) to a study's runs"
    )
    penalty.add_argument("cells", type=Path, metavar="CELLS.csv", help="the study table: one row per executor run")
    penalty.add_argument("--out", type=Path, help="penalty file to write (default: penalty.json beside CELLS.csv)")
    penalty.add_argument("--json", action="store_true", help="print the penalty file instead of a table")
    penalty.set_defaults(command=_penalty)

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
    report.add_argument(
        "--window",
        type=window,
        metavar="START:END",
        help="draw the timeline from START to END seconds only (:END from 0, START: to the end)",
    )
    report.set_defaults(command=_report)

    trace = commands.add_parser("trace", help="export a run's events as a Chrome/Perfetto trace")
    trace.add_argument("run", type=Path, metavar="RUN", help="run directory")
    trace.add_argument("--out", type=Path, help="trace file (default: RUN/trace.json.gz; gzipped when it ends in .gz)")
    trace.set_defaults(command=_trace)

    lengths = commands.add_parser(
        "lengths",
        help="completion lengths from a JSONL log (an empirical length file, fitted tails, a histogram), "
        "or a lognormal fitted to a verl metrics log",
    )
    lengths.add_argument("file", type=Path, nargs="?", metavar="FILE.jsonl", help="one JSON object per completion")
    lengths.add_argument(
        "--from-log",
        type=Path,
        metavar="LOG",
        help="instead of FILE: a verl metrics log (FileLogger JSONL, or a TensorBoard directory or event file); "
        "fits a capped lognormal to its response_length/mean, /max, /clip_ratio",
    )
    lengths.add_argument(
        "--samples-per-step",
        type=_positive,
        metavar="N",
        help="with --from-log: responses per step (train_batch_size × rollout.n); needed when none hit the cap",
    )
    lengths.add_argument(
        "--field",
        help="the key holding the completion: text, a token count or token ids (default: the first of "
        "response_length, completion_tokens, num_tokens, response_ids, completion_ids, length, output, response, "
        "completion, text, generated_text)",
    )
    lengths.add_argument(
        "--tokenizer",
        metavar="PATH",
        help="count text in tokens of this local tokenizer (a directory, or a cached name)",
    )
    lengths.add_argument(
        "--count",
        choices=["words", "chars"],
        default="words",
        help="without --tokenizer, count text as whitespace-separated words (default) or characters",
    )
    lengths.add_argument(
        "--max-tokens",
        type=_positive,
        help="cap of the fits (default: the longest length seen; with --from-log, the longest logged where some "
        "responses hit the cap)",
    )
    lengths.add_argument("--out", type=Path, help="directory for lengths.txt, fits.json, lengths.png")
    lengths.add_argument("--json", action="store_true", help="print JSON instead of a table")
    lengths.set_defaults(command=_lengths)

    verl = commands.add_parser("from-verl", help="a scenario from the verl trainer config you launch with")
    verl.add_argument("config", type=Path, metavar="CONFIG.yaml", help="verl's resolved trainer config (Hydra YAML)")
    verl.add_argument(
        "assignments",
        nargs="*",
        type=assignment,
        metavar="KEY=VALUE",
        help="overrides of the verl config, as verl's command line takes them (e.g. trainer.nnodes=2)",
    )
    verl.add_argument(
        "--lengths",
        metavar="FILE|DIST",
        help="completion lengths: a lengths file or JSONL log (see asyncrl lengths), a verl metrics log (a "
        "lognormal fitted to its response_length/*), or a distribution such as '{kind: lognormal, median: 800, "
        "sigma: 1}'; capped at data.max_response_length",
    )
    verl.add_argument("--prompt-lengths", metavar="FILE|DIST", help="prompt lengths (default: every prompt at the cap)")
    verl.add_argument("--device", help="the GPU (verl's config does not say): h100, a100-80g, h200, ...")
    verl.add_argument("--preset", help="model preset, where the model path's name is not one (asyncrl list)")
    verl.add_argument("--name", help="scenario name (default: trainer.experiment_name)")
    verl.add_argument("--out", type=Path, help="scenario file to write (default: <name>.yaml)")
    verl.set_defaults(command=_from_verl)

    listing = commands.add_parser("list", help="model presets, devices and shipped scenarios, with their figures")
    listing.set_defaults(command=_list)
    add_examples(commands)
    return parser


def _study_parser(commands: argparse._SubParsersAction) -> None:
    from asyncrl.grid import DEFAULT_CORRECTIONS, DEFAULT_LOSSES, DEFAULT_SCHEDULES, DEFAULT_SEEDS, DEFAULT_TARGET

    study = commands.add_parser(
        "study", help="execute a grid of schedules, losses, corrections and seeds; time to a target reward"
    )
    study.add_argument("scenario", help="a task-mode scenario file or shipped name (e.g. cpu-study)")
    study.add_argument(
        "assignments",
        nargs="*",
        type=assignment,
        metavar="KEY=VALUE",
        help="override a field of every cell, e.g. workload.task=copy (the same as --set; applied after --set)",
    )
    study.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a field of every cell",
    )
    study.add_argument(
        "--schedules",
        default=DEFAULT_SCHEDULES,
        metavar="LABEL,...",
        help="sync, pipelined-N, streaming-η, streaming-η-inflight (default: sync, pipelined 1 2 4, "
        "streaming 1 2 4 8 with and without in-flight updates)",
    )
    study.add_argument("--losses", default=DEFAULT_LOSSES, metavar="LOSS,...", help=f"default {DEFAULT_LOSSES}")
    study.add_argument(
        "--corrections",
        default=DEFAULT_CORRECTIONS,
        metavar="C,...",
        help="algorithm.correction values, as the scenario takes them (default clip)",
    )
    study.add_argument("--seeds", default=DEFAULT_SEEDS, metavar="S,...", help=f"default {DEFAULT_SEEDS}")
    study.add_argument("--steps", type=_positive, help="learner steps per cell (default: the scenario's run.steps)")
    study.add_argument(
        "--target",
        type=_fraction,
        default=DEFAULT_TARGET,
        help=f"reward (mean of 10 steps) that counts as reached (default {DEFAULT_TARGET})",
    )
    study.add_argument("--out", type=Path, help="study directory (default: runs/<scenario name>-study)")
    study.add_argument(
        "--workers",
        type=_positive,
        help="cells run at once (default 1 locally: wall times are the measurement; on Ray: all)",
    )
    study.add_argument(
        "--runtime",
        default="local",
        choices=["local", "ray"],
        help="cells in local worker processes, or one Ray task each (a local Ray, or the cluster RAY_ADDRESS names)",
    )
    study.add_argument(
        "--device", default="cpu", choices=["cpu", "cuda"], help="where each cell's engine and learner run"
    )
    study.add_argument(
        "--holdout",
        metavar="LABEL",
        help="a schedule of --schedules left out of the penalty fit and the calibration, then predicted by the "
        "simulator and compared with its measured time to target",
    )
    study.add_argument("--quiet", action="store_true", help="no progress bar")
    study.set_defaults(command=_study)


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


def _penalty_argument(parser: argparse.ArgumentParser, help: str) -> None:
    parser.add_argument("--penalty", type=Path, metavar="FILE", help=f"{help} (asyncrl penalty writes it)")


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
        "assignments",
        nargs="*",
        type=assignment,
        metavar="KEY=VALUE",
        help="override a field, e.g. schedule.max_staleness=2 (the same as --set; applied after --set)",
    )
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
    """``--set`` overrides, bare ``KEY=VALUE`` ones, then ``--seed`` and ``--steps`` as the overrides they stand for."""
    overrides = [*args.overrides, *args.assignments]
    if args.seed is not None:
        overrides.append(f"run.seed={args.seed}")
    if args.steps is not None:
        overrides.append(f"run.steps={args.steps}")
    return overrides


def _load_fitting(args: argparse.Namespace) -> Scenario:
    """The scenario, refused (ScenarioError) when its pools do not fit in device memory."""
    scenario = _load(args)
    check_memory(scenario)
    return scenario


def _simulate(args: argparse.Namespace) -> int:
    from asyncrl.analysis.tables import simulation_lines
    from asyncrl.simulator.backend import Simulator
    from asyncrl.simulator.target import step_ends_of_events, time_to_target

    scenario = _load_fitting(args)
    fit, about = _penalty_fit(args.penalty, scenario)
    out = args.out or default_run_dir(scenario.name)
    with _progress(scenario.run.steps, "simulating", "step", args.quiet, leave=False) as bar:
        record = Simulator(on_step=lambda step, now: bar.update(), force=args.force).run(scenario, out)
    summary = record.summary  # the run record keeps the simulator's figures; the time to target is printed only
    assert summary is not None  # a simulated run always ends
    if fit is not None:
        reached = time_to_target(fit, summary, step_ends_of_events(record.events))
        summary = summary.model_copy(update={"time_to_target": reached})
    if args.json:
        return _print_json(summary.to_json())
    print(simulation_lines(scenario, summary, about))
    print(f"wrote {out}/ (summary.json, events.parquet, scenario.yaml)")
    return 0


def _execute(args: argparse.Namespace) -> int:
    from asyncrl.analysis.tables import execution_header, execution_lines
    from asyncrl.executor.runtime import check, execute

    scenario = _load(args)
    check(scenario, args.device)  # what the executor cannot run at all comes first
    check_memory(scenario)
    out = args.resume or args.out or default_run_dir(scenario.name, "-executed")
    tracker = _tracker(args.log, out, scenario)
    print(execution_header(scenario, args.device, args.runtime))
    with _progress(scenario.run.steps, "training", "step", args.quiet) as bar:
        try:
            result = execute(
                scenario,
                out,
                device=args.device,
                resume=args.resume is not None,
                on_step=_tracked(_training_progress(bar, scenario.batch_samples), tracker),
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
        finally:
            if tracker is not None:
                tracker.finish(_read_summary_or_empty(out))
    summary = result.summary
    assert summary is not None  # execute returned: the run started, and its record is written
    if args.json:
        return _print_json(summary.to_json())
    if summary.resumed_from is not None:
        print(f"resumed from the checkpoint at step {summary.resumed_from} in {out}/")
    print(execution_lines(summary, result.metrics, synthetic=not scenario.workload.task_mode))
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
    from asyncrl.executor.calibrate import check_device

    scenarios = tuple(args.scenario or DEMO_SCENARIOS)
    for name in scenarios:
        load_scenario(name)  # bad names fail before anything runs
    check_device(args.device)
    calibration, calibration_steps = _demo_calibration(args)
    if args.profile is not None:
        load_scenario(scenarios[0], [f"hardware.profile={args.profile.resolve()}"]).hardware.cost_profile()
    run_demo(
        args.out,
        scenarios,
        args.steps,
        device=args.device,
        profile=args.profile,
        calibration=calibration,
        calibration_steps=calibration_steps,
    )
    return 0


def _demo_calibration(args: argparse.Namespace) -> tuple[str, int]:
    """``demo``'s calibration (run or bench) and calibration steps; ScenarioError naming a flag that does not apply."""
    from asyncrl.calibration import CALIBRATION_STEPS, check_calibration_steps

    given = "--calibration" if args.calibration else "--calibration-steps" if args.calibration_steps else None
    if args.profile is not None and given:
        raise ScenarioError(f"{given}: --profile uses a profile measured before; give one or the other")
    calibration, steps = args.calibration or "run", args.calibration_steps or CALIBRATION_STEPS
    if calibration == "bench" and args.calibration_steps:
        raise ScenarioError("--calibration-steps: applies to --calibration run, not bench")
    check_calibration_steps(steps)
    return calibration, steps


def _validate(args: argparse.Namespace) -> int:
    from asyncrl.validate import ValidateOptions, run_validate

    options = ValidateOptions(
        count=args.count,
        seed=args.seed,
        steps=args.steps,
        calibration=args.calibration,
        calibration_steps=args.calibration_steps,
        repeat=args.repeat,
        out=args.out,
        quiet=args.quiet,
    )
    result = run_validate(options)
    print(result.table)
    print(f"wrote {', '.join(str(path) for path in result.files)}; each scenario's runs and profile in {args.out}/")
    return 1 if result.failed else 0


def _study(args: argparse.Namespace) -> int:
    from asyncrl.study import StudyOptions, run_study

    name = load_scenario(args.scenario, [*args.overrides, *args.assignments]).name
    options = StudyOptions(
        scenario=args.scenario,
        overrides=[*args.overrides, *args.assignments],
        schedules=args.schedules,
        losses=args.losses,
        corrections=args.corrections,
        seeds=args.seeds,
        steps=args.steps,
        target=args.target,
        out=args.out or default_run_dir(name, "-study"),
        workers=args.workers,
        runtime=args.runtime,
        device=args.device,
        quiet=args.quiet,
        holdout=args.holdout,
    )
    result = run_study(options)
    print(result.lines)
    print(f"wrote {', '.join(str(path) for path in result.files)}; each cell's run in {options.out}/cells/")
    return 1 if result.failed else 0


def _calibrate(args: argparse.Namespace) -> int:
    if args.from_log is not None and args.from_run is not None:
        raise ScenarioError("--from-log: give --from-log or --from-run, not both")
    _check_calibration_flags(args)
    if args.from_log is not None:
        return _calibrate_from_log(args)
    if args.from_run is not None:
        return _calibrate_from_run(args)
    if args.bench:
        return _calibrate_bench(args)
    return _calibrate_by_running(args)


def _check_calibration_flags(args: argparse.Namespace) -> None:
    """ScenarioError naming a flag that the calibration asked for (short runs, ``--bench``, a fit) does not take."""
    fitted = "--from-log" if args.from_log is not None else "--from-run" if args.from_run is not None else None
    if args.bench and fitted:
        raise ScenarioError(f"--bench: give --bench or {fitted}, not both")
    if args.calibration_steps is not None and (args.bench or fitted):
        raise ScenarioError(f"--calibration-steps: applies to the short runs, not with {fitted or '--bench'}")
    if not args.bench:
        for flag, value in (("--repeats", args.repeats), ("--batch-sizes", args.batch_sizes)):
            if value is not None:
                raise ScenarioError(f"{flag}: applies only with --bench (micro-benchmarks)")


def _calibrate_by_running(args: argparse.Namespace) -> int:
    """Execute short runs of the scenario beside the profile (``<stem>-runs/``), fit it to them, print the fit."""
    from asyncrl.calibration import CALIBRATION_STEPS, calibrate_by_running, calibration_kinds, executor, runs_directory
    from asyncrl.executor.calibrate import check_device

    scenario = load_scenario(args.scenario, [*args.overrides, *_model_override(args.model)])
    steps, runs = args.calibration_steps or CALIBRATION_STEPS, runs_directory(args.out)
    kinds = calibration_kinds(scenario)
    check_device(args.device)
    check_output_file(args.out)
    with _progress(steps * len(kinds), "calibrating", "step", args.quiet) as bar:
        execute = executor(args.device, on_step=lambda step, row: bar.update())
        fitted = calibrate_by_running(scenario, args.out, runs, steps, execute)
    print(fitted.lines())
    print(f"wrote {args.out} (use it as hardware.profile), fitted to {steps}-step runs ({', '.join(kinds)}) in {runs}/")
    return 0


def _calibrate_bench(args: argparse.Namespace) -> int:
    """``--bench``: time micro-benchmarks of the executor's engine, learner and weight sync; print their noise."""
    from asyncrl.analysis.tables import calibration_lines
    from asyncrl.executor.calibrate import calibrate, check_device
    from asyncrl.scenarios.profile import save_profile

    scenario = load_scenario(args.scenario, [*args.overrides, *_model_override(args.model)])
    repeats = args.repeats or BENCH_REPEATS
    sizes = BENCH_BATCH_SIZES if args.batch_sizes is None else args.batch_sizes
    batch_sizes = _batch_sizes(sizes, scenario.engine_concurrency)
    check_device(args.device)
    check_output_file(args.out)
    with _progress(repeats + 1, "calibrating", "round", args.quiet) as bar:  # warm-up, then repeats
        result = calibrate(
            scenario,
            batch_sizes,
            repeats=repeats,
            progress=lambda label: (bar.set_postfix_str(label), bar.update()),
            device=args.device,
        )
    save_profile(result.profile, args.out)
    print(calibration_lines(scenario.model.label, args.device, repeats, result.profile, result.noise))
    print(f"wrote {args.out} (use it as hardware.profile)")
    return 0


def _calibrate_from_log(args: argparse.Namespace) -> int:
    from asyncrl.analysis.tables import log_fit_lines
    from asyncrl.fit_log import fit_from_logs
    from asyncrl.scenarios.efficiency import save_efficiency

    scenario = load_scenario(args.scenario, args.overrides)
    check_output_file(args.out)
    with _progress(3, "fitting", "phase", args.quiet) as bar:
        fit = fit_from_logs(scenario, args.from_log, progress=lambda label: (bar.set_postfix_str(label), bar.update()))
    source = ", ".join(str(path) for path in args.from_log)
    save_efficiency(fit.efficiency, args.out, header=f"fitted by asyncrl calibrate {args.scenario} --from-log {source}")
    print(log_fit_lines(source, fit.rows, fit.undetermined, fit.notes))
    print(
        f"wrote {args.out} (use it as hardware.profile: it holds efficiencies, so it also fits other splits and sizes)"
    )
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
    profile, report = profile_from_runs(runs, scenario)
    save_profile(profile, args.out)
    from asyncrl.analysis.phases import contention_line, run_contention

    print(fit_lines(", ".join(str(run) for run in runs), profile, report))
    for run in runs:  # decode steps during training: measured, not in the profile (no consistent sign)
        print(f"{run}: {contention_line(run_contention(run))}")
    print(f"wrote {args.out} (use it as hardware.profile)")
    return 0


def _speedup(args: argparse.Namespace) -> int:
    from asyncrl.analysis.tables import speedup_lines, with_equal_quality
    from asyncrl.simulator.sweep import simulate_speedup

    scenario = _load_fitting(args)
    fit, about = _penalty_fit(args.penalty, scenario)
    results = with_equal_quality(simulate_speedup(scenario, progress=not args.quiet, penalty=fit))
    if args.json:
        return _print_json({variant.label: _summary_or_reason(variant, summary) for variant, summary in results})
    print(speedup_lines(scenario, results, args.price_per_device_hour, about))
    return 0


def _size(args: argparse.Namespace) -> int:
    from asyncrl.analysis.sizing import sizing_lines, write_sizing_csv
    from asyncrl.simulator.sweep import simulate_sizing

    scenario = _load(args)
    fit, about = _penalty_fit(args.penalty, scenario)
    kinds = args.kind or [scenario.schedule.kind]
    bounds = args.max_staleness or [scenario.staleness_bound]
    csv_path = check_output_file(args.out or default_run_dir(scenario.name, "-size.csv"))
    ranked = simulate_sizing(
        scenario, args.devices, kinds, bounds, args.splits, progress=not args.quiet, exact=args.exact, penalty=fit
    )
    out = write_sizing_csv(csv_path, ranked, args.price_per_device_hour, with_target=fit is not None)
    if args.json:
        return _print_json(
            [{"label": variant.label, **_summary_or_reason(variant, summary)} for variant, summary in ranked]
        )
    print(sizing_lines(scenario, args.devices, ranked, args.top, args.price_per_device_hour, about))
    print(f"wrote {out}")
    return 0


def _penalty(args: argparse.Namespace) -> int:
    from asyncrl.analysis.penalty import failed_runs, fit_penalty, penalty_lines, read_cells
    from asyncrl.scenarios.penalty import write_penalty

    out = check_output_file(args.out or args.cells.parent / "penalty.json")
    cells = read_cells(args.cells)
    penalty = fit_penalty(cells, source=str(args.cells))
    write_penalty(penalty, out)
    if args.json:
        return _print_json(penalty.model_dump(mode="json"))
    print(penalty_lines(penalty, failed_runs(cells)))
    print(f"wrote {out} (give it to simulate, speedup or size as --penalty {out})")
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


def _summary_or_reason(variant: Any, summary: RunSummary | None) -> dict[str, Any]:
    """A sweep row for --json: its summary, or why it was not simulated (it does not fit in memory)."""
    return summary.to_json() if summary is not None else {"fits": False, "reason": memory_problem(variant.scenario)}


def _schema(args: argparse.Namespace) -> int:
    return _print_json(Scenario.model_json_schema())


EXIT_OFF_TOLERANCE = 1


def _compare(args: argparse.Namespace) -> int:
    from asyncrl.analysis.compare import compare_runs, comparison_dict, comparison_lines, figures_off, write_comparison
    from asyncrl.analysis.phases import breakdown_dict, breakdown_lines

    comparison = compare_runs(args.a, args.b, tuple(args.speedup) if args.speedup else None)
    path = write_comparison(comparison, args.out or args.b, args.tolerance)
    if args.json:
        _print_json({**comparison_dict(comparison, args.tolerance), "phases": breakdown_dict(args.a, args.b)})
    else:
        print(comparison_lines(comparison, args.tolerance))
        print(breakdown_lines(args.a, args.b))  # time by phase, or why there is none
        print(f"wrote {path}")
    off = figures_off(comparison, args.tolerance) if args.tolerance is not None else []
    return EXIT_OFF_TOLERANCE if off else 0


def _report(args: argparse.Namespace) -> int:
    from asyncrl.analysis.report import report_lines, write_report

    speedup_dirs = tuple(args.speedup) if args.speedup else None
    files = write_report(args.runs, args.out, speedup_dirs=speedup_dirs, sizing_csv=args.sizing, window=args.window)
    print(report_lines(files, args.runs))
    return 0


def _lengths(args: argparse.Namespace) -> int:
    from asyncrl.analysis.lengths import fit_all, lengths_lines, lengths_report, read_lengths, write_lengths
    from asyncrl.analysis.metrics_log import is_metrics_log

    if (args.file is None) == (args.from_log is None):
        raise ScenarioError("give one of FILE.jsonl (a completions log) or --from-log LOG (a metrics log)")
    if args.from_log is not None:
        return _lengths_from_log(args)
    if args.samples_per_step is not None:
        raise ScenarioError("--samples-per-step: only with --from-log (a completions log has every length)")
    if is_metrics_log(args.file):
        raise ScenarioError(f"FILE.jsonl: {args.file} is a metrics log (a line per step); read it with --from-log")
    lengths = read_lengths(args.file, args.field, args.tokenizer, args.count)
    fits = fit_all(lengths.values, args.max_tokens)
    out = args.out or Path("runs") / f"lengths-{args.file.stem}"
    lengths_file = write_lengths(lengths.values, out / "lengths.txt")
    report = lengths_report(lengths, fits, lengths_file)
    (out / "fits.json").write_text(json.dumps(report, indent=2) + "\n")
    plot = _plot_path(None, out / "lengths.png")
    if plot is not None:
        from asyncrl.analysis.length_plots import length_histogram

        length_histogram(lengths, fits, plot)
    if args.json:
        return _print_json(report)
    print(lengths_lines(lengths, fits, lengths_file, plot))
    return 0


def _lengths_from_log(args: argparse.Namespace) -> int:
    from asyncrl.analysis.log_lengths import fit_from_metrics, metrics_fit_lines, metrics_fit_report
    from asyncrl.analysis.metrics_log import MetricsLogError, is_metrics_log, read_metrics_log

    if args.field is not None or args.tokenizer is not None:
        raise ScenarioError("--field, --tokenizer: only for a completions log FILE.jsonl, not with --from-log")
    if args.from_log.is_file() and not is_metrics_log(args.from_log):
        raise ScenarioError(
            f"--from-log: {args.from_log} is not a metrics log (a completions log is read as FILE.jsonl)"
        )
    try:
        log = read_metrics_log(args.from_log)
        fit = fit_from_metrics(log, samples_per_step=args.samples_per_step, max_tokens=args.max_tokens)
    except MetricsLogError as exc:
        raise ScenarioError(str(exc)) from None
    out = args.out or Path("runs") / f"lengths-{args.from_log.stem}"
    out.mkdir(parents=True, exist_ok=True)
    report = metrics_fit_report(fit, log)
    (out / "fits.json").write_text(json.dumps(report, indent=2) + "\n")
    if args.json:
        return _print_json(report)
    print(metrics_fit_lines(fit, log, out / "fits.json"))
    return 0


def _from_verl(args: argparse.Namespace) -> int:
    from asyncrl.analysis.log_lengths import verl_metrics_fit
    from asyncrl.analysis.metrics_log import MetricsLogError
    from asyncrl.scenarios.loading import validate_scenario
    from asyncrl.scenarios.verl import (
        VerlError,
        lengths_option,
        lookup,
        plan_from_verl,
        plan_lines,
        read_config,
        settle_concurrency,
    )

    try:
        config = read_config(args.config, args.assignments)
        name = args.name or str(lookup(config, "trainer.experiment_name", "") or args.config.stem)
        out = args.out or Path(f"{name}.yaml")
        fit = verl_metrics_fit(args.lengths, config)  # --lengths names a metrics log: a lognormal fitted to it
        completion = fit.completion_tokens() if fit else lengths_option(args.lengths, "--lengths", out.parent)
        prompt = lengths_option(args.prompt_lengths, "--prompt-lengths", out.parent)
        plan = plan_from_verl(
            config,
            name=name,
            device=args.device,
            completion_tokens=completion,
            prompt_tokens=prompt or (fit.prompt_tokens() if fit else None),
            preset=args.preset,
        )
        plan.notes += fit.verl_notes(prompt_from_log=prompt is None) if fit else []
    except (VerlError, MetricsLogError) as exc:
        raise ScenarioError(str(exc)) from None
    scenario = validate_scenario(plan.scenario, base_dir=out.parent.resolve())
    if settle_concurrency(plan, scenario):  # verl's max_num_seqs, down to what the KV cache holds
        scenario = validate_scenario(plan.scenario, base_dir=out.parent.resolve())
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(f"# from {args.config} by asyncrl from-verl\n" + _yaml_dump(plan.scenario))
    print(plan_lines(plan))
    print(
        f"wrote {out} ({scenario.schedule.kind} on {scenario.cluster.total_devices} {scenario.hardware.device}); "
        f"next: asyncrl simulate {out}"
    )
    return 0


def _yaml_dump(data: dict[str, Any]) -> str:
    import yaml

    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def _list(args: argparse.Namespace) -> int:
    from asyncrl.listing import catalog_lines

    print(catalog_lines())
    return 0


def _trace(args: argparse.Namespace) -> int:
    from asyncrl.analysis.trace import write_trace

    path = write_trace(args.run, args.out)
    print(f"wrote {path} (open in https://ui.perfetto.dev or chrome://tracing)")
    return 0


# ── wiring shared by the handlers ───────────────────────────────────────────────


def _penalty_fit(path: Path | None, scenario: Scenario) -> tuple[PenaltyFit | None, str | None]:
    """``--penalty``'s fit for the scenario's loss and correction, and what a time to target is a time to
    (None, None without the flag); a ScenarioError naming the flag when the file is missing or malformed,
    or has no such fit."""
    if path is None:
        return None, None
    from asyncrl.analysis.tables import about_target
    from asyncrl.scenarios.penalty import PenaltyError, read_penalty

    try:
        penalty = read_penalty(path)
        fit = penalty.fit_for(scenario.algorithm.loss, scenario.algorithm.correction)
    except PenaltyError as exc:
        raise ScenarioError(f"--penalty: {exc}") from None
    return fit, about_target(penalty, fit, path)


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


def _tracker(kind: str | None, out: Path, scenario: Scenario) -> Any:
    """The experiment tracker ``--log`` asks for (None without it); a missing package is a one-line error."""
    if kind is None:
        return None
    from asyncrl.executor.tracking import check_tracker, open_tracker

    try:
        check_tracker(kind)
    except ValueError as exc:
        raise ScenarioError(str(exc)) from None
    return _OpenedWhenUsed(lambda: open_tracker(kind, out, scenario))


class _OpenedWhenUsed:
    """A tracker opened at its first use: once the run has made (and locked) its directory, so the
    tracker's files are written into a run record, not into a directory the run then refuses."""

    def __init__(self, open_tracker: Callable[[], Any]) -> None:
        self._open, self._tracker = open_tracker, None

    def _opened(self) -> Any:
        if self._tracker is None:
            self._tracker = self._open()
        return self._tracker

    def log_step(self, step: int, row: dict[str, float]) -> None:
        self._opened().log_step(step, row)

    def finish(self, summary: dict[str, Any]) -> None:
        if self._tracker is not None or summary:  # a run that never started logs nothing
            self._opened().finish(summary)


def _tracked(on_step: Callable[[int, dict[str, float]], None], tracker: Any) -> Callable[[int, dict[str, float]], None]:
    """``on_step`` that also logs the step's metrics row to the tracker."""
    if tracker is None:
        return on_step

    def both(step: int, row: dict[str, float]) -> None:
        on_step(step, row)
        tracker.log_step(step, row)

    return both


def _read_summary_or_empty(out: Path) -> dict[str, Any]:
    """The run's summary.json as written (complete or partial), or nothing when the run wrote none."""
    path = out / "summary.json"
    return json.loads(path.read_text()) if path.is_file() else {}


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


_positive, _non_negative, _fraction = positive, non_negative, fraction


if __name__ == "__main__":
    sys.exit(main())
