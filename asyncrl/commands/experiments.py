"""``asyncrl demo``, ``asyncrl validate`` and ``asyncrl study``: workflows over many runs, into one directory.

    demo      calibrate, predict, execute and compare shipped CPU scenarios   ─► asyncrl.experiments.demo.run_demo
    validate  the same on random CPU scenarios, their prediction errors       ─► asyncrl.experiments.validate.run_validate
    study     a grid of executed cells, the time to a target reward           ─► asyncrl.experiments.study.run_study

``--out`` is a directory for all three (an existing file is refused). In demo and validate every error is
the prediction's, relative to the measured run: (predicted − measured) / measured.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from asyncrl.scenarios.spec.loading import ScenarioError, load_scenario

from asyncrl.commands.arguments import fraction, non_negative, positive
from asyncrl.commands.common import default_out, overrides_argument, quiet_argument, runs_directory
from asyncrl.frameworks.common.command import assignment


def add_parsers(commands: argparse._SubParsersAction) -> None:
    _demo_parser(commands)
    _validate_parser(commands)
    _study_parser(commands)


def _demo_parser(commands: argparse._SubParsersAction) -> None:
    demo = commands.add_parser("demo", help="the main job: calibrate, predict, execute, compare and report on CPU")
    demo.add_argument(
        "--out", type=Path, default=Path("runs/demo"), help="directory for the runs and the report (default runs/demo)"
    )
    demo.add_argument(
        "--scenario", action="append", help="shipped CPU scenarios to use (repeatable; default all three)"
    )
    demo.add_argument("--steps", type=positive, help="learner steps per run (default: each scenario's own)")
    demo.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="where to calibrate and execute")
    demo.add_argument("--profile", type=Path, help="a measured profile to use instead of calibrating (one scenario)")
    demo.add_argument(
        "--calibration",
        choices=["run", "bench"],
        help="run: fit each scenario's profile to short executed runs of it (default); bench: time micro-benchmarks",
    )
    demo.add_argument(
        "--calibration-steps", type=positive, metavar="N", help="learner steps of each calibration run (default 8)"
    )
    demo.set_defaults(command=run_demo)


def _validate_parser(commands: argparse._SubParsersAction) -> None:
    validate = commands.add_parser(
        "validate", help="draw random CPU scenarios; calibrate, predict, execute and report the prediction errors"
    )
    validate.add_argument("--count", type=positive, default=10, help="scenarios drawn (default 10)")
    validate.add_argument("--seed", type=non_negative, default=0, help="seeds the draws (default 0)")
    validate.add_argument(
        "--steps", type=positive, default=30, help="learner steps predicted and executed (default 30)"
    )
    validate.add_argument(
        "--calibration",
        choices=["run", "bench"],
        default="run",
        help="run: fit the profile to short executed runs (default); bench: time micro-benchmarks",
    )
    validate.add_argument(
        "--calibration-steps", type=positive, default=8, help="learner steps of each calibration run (default 8)"
    )
    validate.add_argument(
        "--repeat", type=positive, default=1, help="executions of each measured run; the table shows the spread"
    )
    validate.add_argument(
        "--out",
        type=Path,
        default=Path("runs/validate"),
        help="directory for the runs and tables (default runs/validate)",
    )
    quiet_argument(validate)
    validate.set_defaults(command=run_validate)


def _study_parser(commands: argparse._SubParsersAction) -> None:
    from asyncrl.experiments.grid import (
        DEFAULT_CORRECTIONS,
        DEFAULT_LOSSES,
        DEFAULT_SCHEDULES,
        DEFAULT_SEEDS,
        DEFAULT_TARGET,
    )

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
    overrides_argument(study, "override a field of every cell")
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
    study.add_argument("--steps", type=positive, help="learner steps per cell (default: the scenario's run.steps)")
    study.add_argument(
        "--target",
        type=fraction,
        default=DEFAULT_TARGET,
        help="reward that counts as reached: the held-out evaluation's where the scenario sets run.eval_every, "
        f"else the mean of 10 training steps (default {DEFAULT_TARGET})",
    )
    study.add_argument(
        "--out",
        type=Path,
        help="study directory (default: runs/<scenario name>-study, or runs/<scenario name>-<hash of the "
        "overrides and --steps>-study)",
    )
    study.add_argument(
        "--workers",
        type=positive,
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
        "simulator and compared with its measured time to target; all: every schedule in turn",
    )
    quiet_argument(study)
    study.set_defaults(command=run_study)


def run_demo(args: argparse.Namespace) -> int:
    from asyncrl.executor.calibrate import check_device

    from asyncrl.experiments.demo import DEMO_SCENARIOS
    from asyncrl.experiments.demo import run_demo as demo

    scenarios = tuple(args.scenario or DEMO_SCENARIOS)
    from asyncrl.simulator.budget import plan

    for name in scenarios:  # bad names, scenarios this machine's CPU cannot execute or simulate: before any run
        scenario = load_scenario(name, [f"run.steps={args.steps}"] if args.steps else [])
        plan(scenario)  # the simulation's memory, checked now rather than after minutes of executing
        device = scenario.hardware.device_name
        if args.device == "cpu" and device != "cpu":
            raise ScenarioError(
                f"--scenario: {name} runs on {device} devices; the demo executes it here, on the CPU: give a cpu "
                f"scenario ({', '.join(DEMO_SCENARIOS)})"
            )
    runs_directory(args.out)
    check_device(args.device)
    calibration, calibration_steps = _demo_calibration(args)
    if args.profile is not None:
        load_scenario(scenarios[0], [f"hardware.profile={args.profile.resolve()}"]).hardware.cost_profile()
    demo(
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
    from asyncrl.calibration.runs import CALIBRATION_STEPS, check_calibration_steps

    given = "--calibration" if args.calibration else "--calibration-steps" if args.calibration_steps else None
    if args.profile is not None and given:
        raise ScenarioError(f"{given}: --profile uses a profile measured before; give one or the other")
    calibration, steps = args.calibration or "run", args.calibration_steps or CALIBRATION_STEPS
    if calibration == "bench" and args.calibration_steps:
        raise ScenarioError("--calibration-steps: applies to --calibration run, not bench")
    check_calibration_steps(steps)
    return calibration, steps


def run_validate(args: argparse.Namespace) -> int:
    from asyncrl.experiments.validate import ValidateOptions, check_options
    from asyncrl.experiments.validate import run_validate as validate

    check_options(ValidateOptions(calibration=args.calibration, calibration_steps=args.calibration_steps))
    options = ValidateOptions(
        count=args.count,
        seed=args.seed,
        steps=args.steps,
        calibration=args.calibration,
        calibration_steps=args.calibration_steps,
        repeat=args.repeat,
        out=runs_directory(args.out),
        quiet=args.quiet,
    )
    result = validate(options)
    print(result.table)
    print(f"wrote {', '.join(str(path) for path in result.files)}; each scenario's runs and profile in {args.out}/")
    return 1 if result.failed else 0


def run_study(args: argparse.Namespace) -> int:
    from asyncrl.experiments.study import StudyOptions
    from asyncrl.experiments.study import run_study as study

    given = [*args.overrides, *args.assignments]
    name = load_scenario(args.scenario, given).name
    options = StudyOptions(
        scenario=args.scenario,
        overrides=given,
        schedules=args.schedules,
        losses=args.losses,
        corrections=args.corrections,
        seeds=args.seeds,
        steps=args.steps,
        target=args.target,
        out=args.out or default_out(name, [*given, *_steps_override(args.steps)], "-study"),
        workers=args.workers,
        runtime=args.runtime,
        device=args.device,
        quiet=args.quiet,
        holdout=args.holdout,
    )
    result = study(options)
    print(result.lines)
    print(f"wrote {', '.join(str(path) for path in result.files)}; each cell's run in {options.out}/cells/")
    return 1 if result.failed else 0


def _steps_override(steps: int | None) -> list[str]:
    """``--steps N`` as the override it is for every cell, for the default study directory's name."""
    return [] if steps is None else [f"run.steps={steps}"]
