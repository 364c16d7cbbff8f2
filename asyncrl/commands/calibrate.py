"""``asyncrl calibrate``: a cost profile the simulator reads, written to ``--out PROFILE``.

(default)        execute short runs of SCENARIO (as written and sync) beside the profile, fit to them
--bench          time micro-benchmarks of the executor's engine, learner and weight sync
--from-run RUN   fit to executor runs already recorded
--from-log LOG   fit the analytic model's terms to frameworks' metrics logs (several: one set of terms for all)
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from asyncrl.scenarios.record.outputs import check_output_file
from asyncrl.scenarios.spec.loading import ScenarioError, load_scenario

from asyncrl.commands.arguments import positive
from asyncrl.commands.common import REPLACE_HELP, force_argument, overrides_argument, progress, quiet_argument

DEFAULT_SCENARIO = "cpu-timing"  # what the short runs and --bench calibrate without a scenario
BENCH_REPEATS = 5  # --bench: measurements per figure
BENCH_BATCH_SIZES = "1,2,4,8,16,32"  # --bench: engine batch sizes timed


def add_parsers(commands: argparse._SubParsersAction) -> None:
    calibrate = commands.add_parser(
        "calibrate",
        help="execute short runs of a scenario (as written and sync) and fit a profile the simulator reads to them "
        "(--bench: time micro-benchmarks instead)",
    )
    calibrate.add_argument(
        "scenario",
        nargs="?",
        help="what to run or measure: its model, learner settings, lengths and schedule (default cpu-timing); "
        "with --from-log, the run the logs come from (unset: each log's own printed config)",
    )
    calibrate.add_argument("--model", help="a preset or a local checkpoint directory, instead of the scenario's model")
    calibrate.add_argument(
        "--device", default="cpu", choices=["cpu", "cuda"], help="where the runs (or micro-benchmarks) execute"
    )
    calibrate.add_argument(
        "--calibration-steps",
        type=positive,
        metavar="N",
        help="learner steps of each calibration run (default 8); the runs go to <profile stem>-runs/ beside --out",
    )
    calibrate.add_argument(
        "--bench", action="store_true", help="time micro-benchmarks of the executor's engine and learner instead"
    )
    calibrate.add_argument(
        "--repeats", type=positive, help="with --bench: measurements per figure, the median kept (default 5)"
    )
    calibrate.add_argument(
        "--batch-sizes", help="with --bench: engine batch sizes to time (comma-separated; default 1,2,4,8,16,32)"
    )
    calibrate.add_argument("--out", type=Path, required=True, help="profile file to write (YAML)")
    force_argument(calibrate, REPLACE_HELP)
    calibrate.add_argument(
        "--from-run",
        type=Path,
        action="append",
        metavar="RUN",
        help="fit the profile to executor runs already recorded instead of executing new ones (repeatable)",
    )
    calibrate.add_argument(
        "--from-log",
        action="append",
        metavar="LOG[=SCENARIO]",
        help="fit the analytic model's terms to a framework's metrics log (verl's console output, its JSONL file "
        "logger or a TensorBoard directory; repeatable: several runs of one cluster fit one set of terms): the "
        "log's run is SCENARIO, or the one after =, or, for a console log, the config it printed (on "
        "--hardware, or the GPU its perf/mfu/actor names); a profile that transfers to other models, splits and sizes",
    )
    calibrate.add_argument(
        "--preset", help="with --from-log and a console log read as its own run: its model's preset, if not guessed"
    )
    calibrate.add_argument(
        "--hardware",
        metavar="DEVICE",
        help="with --from-log and a console log read as its own run: the GPU it ran on (a catalogue name; unset: "
        "the one whose peak verl's perf/mfu/actor divides by, where it logs one)",
    )
    overrides_argument(calibrate, None)
    quiet_argument(calibrate)
    calibrate.set_defaults(command=run_calibrate)


def run_calibrate(args: argparse.Namespace) -> int:
    if args.from_log is not None and args.from_run is not None:
        raise ScenarioError("--from-log: give --from-log or --from-run, not both")
    _check_flags(args)
    if args.from_log is not None:
        return _from_log(args)
    if args.from_run is not None:
        return _from_run(args)
    if args.bench:
        return _bench(args)
    return _by_running(args)


def _check_flags(args: argparse.Namespace) -> None:
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


def _by_running(args: argparse.Namespace) -> int:
    """Execute short runs of the scenario beside the profile (``<stem>-runs/``), fit it to them, print the fit."""
    from asyncrl.executor.calibrate import check_device

    from asyncrl.calibration.runs import (
        CALIBRATION_STEPS,
        calibrate_by_running,
        calibration_kinds,
        executor,
        runs_directory,
    )

    scenario = load_scenario(args.scenario or DEFAULT_SCENARIO, [*args.overrides, *_model_override(args.model)])
    steps, runs = args.calibration_steps or CALIBRATION_STEPS, runs_directory(args.out)
    kinds = calibration_kinds(scenario)
    check_device(args.device)
    check_output_file(args.out, "--out", replace=args.force)
    with progress(steps * len(kinds), "calibrating", "step", args.quiet) as bar:
        execute = executor(args.device, on_step=lambda step, row: bar.update())
        fitted = calibrate_by_running(scenario, args.out, runs, steps, execute)
    print(fitted.lines())
    print(f"wrote {args.out} (use it as hardware.profile), fitted to {steps}-step runs ({', '.join(kinds)}) in {runs}/")
    return 0


def _bench(args: argparse.Namespace) -> int:
    """``--bench``: time micro-benchmarks of the executor's engine, learner and weight sync; print their noise."""
    from asyncrl.analysis.fits.fit_tables import calibration_lines
    from asyncrl.executor.calibrate import calibrate, check_device
    from asyncrl.scenarios.costs.profile import save_profile

    scenario = load_scenario(args.scenario or DEFAULT_SCENARIO, [*args.overrides, *_model_override(args.model)])
    repeats = args.repeats or BENCH_REPEATS
    sizes = BENCH_BATCH_SIZES if args.batch_sizes is None else args.batch_sizes
    batch_sizes = _batch_sizes(sizes, scenario.engine_concurrency)
    check_device(args.device)
    check_output_file(args.out, "--out", replace=args.force)
    with progress(repeats + 1, "calibrating", "round", args.quiet) as bar:  # warm-up, then repeats
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


def _from_log(args: argparse.Namespace) -> int:
    from asyncrl.analysis.fits.fit_tables import log_fit_lines
    from asyncrl.scenarios.costs.efficiency import save_efficiency

    from asyncrl.calibration.fit_log import fit_runs

    runs = [_log_run(text, args) for text in args.from_log]
    check_output_file(args.out, "--out", replace=args.force)
    with progress(None, "fitting", "look", args.quiet) as bar:
        fit = fit_runs(runs, progress=lambda label: (bar.set_postfix_str(label[-40:]), bar.update()))
    source = ", ".join(str(path) for _, paths in runs for path in paths)
    header = f"fitted by asyncrl calibrate{' ' + args.scenario if args.scenario else ''} --from-log {source}"
    save_efficiency(fit.efficiency, args.out, header=header)
    print(log_fit_lines(source, fit.rows, fit.terms, fit.notes))
    print(
        f"wrote {args.out} (use it as hardware.profile: its terms fit other models, splits and sizes of this cluster)"
    )
    return 0


def _log_run(text: str, args: argparse.Namespace) -> tuple[Any, list[Path]]:
    """One ``--from-log`` value: (its run's scenario, [the log])."""
    from asyncrl.frameworks.registry import FRAMEWORKS

    log_text, _, named = text.rpartition("=") if "=" in text else (text, "", "")
    log = Path(log_text).expanduser()
    if named:
        return load_scenario(named, args.overrides), [log]
    if args.scenario:
        return load_scenario(args.scenario, args.overrides), [log]
    readers = [framework for framework in FRAMEWORKS if framework.prints_config and framework.scenario_from_log]
    printed = next((framework for framework in readers if framework.prints_config(log)), None)  # type: ignore[misc]
    if printed is None or printed.scenario_from_log is None:
        labels = " or ".join(framework.label for framework in readers)
        raise ScenarioError(
            f"--from-log: {log} prints no {labels} config to read its run from: give the SCENARIO it comes from "
            "(positional, or LOG=SCENARIO)"
        )
    return printed.scenario_from_log(log, args.hardware, args.preset).scenario, [log]


def _from_run(args: argparse.Namespace) -> int:
    from asyncrl.analysis.fits.fit import profile_from_runs
    from asyncrl.analysis.fits.fit_tables import fit_lines
    from asyncrl.analysis.records.phases import contention_line, run_contention
    from asyncrl.scenarios.costs.profile import save_profile

    runs = args.from_run
    for run in runs:
        if not (run / "scenario.yaml").is_file():
            raise ScenarioError(f"--from-run: {run} is not a run directory (no scenario.yaml)")
    scenario = load_scenario(str(runs[0] / "scenario.yaml"))
    check_output_file(args.out, "--out", replace=args.force)
    profile, report = profile_from_runs(runs, scenario)
    save_profile(profile, args.out)
    print(fit_lines(", ".join(str(run) for run in runs), profile, report))
    for run in runs:  # decode steps during training: measured, not in the profile (no consistent sign)
        print(f"{run}: {contention_line(run_contention(run))}")
    print(f"wrote {args.out} (use it as hardware.profile)")
    return 0


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
