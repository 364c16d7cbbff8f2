"""``asyncrl simulate`` and ``asyncrl execute``: one scenario into one run directory.

    SCENARIO [overrides] ─► Simulator(...).run(scenario, out)          ─► RunRecord ─► table / JSON
                         └► executor.processes.runtime.execute(scenario, out, ...) ─► RunRecord ─► table / JSON

``--out`` is the run directory; by default ``runs/<scenario name>`` (``-executed`` for an execution),
with a hash of the overrides when there are some (``asyncrl.commands.common.default_out``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from asyncrl.executor.processes.restarts import DEFAULT_MAX_RESTARTS
from asyncrl.scenarios.costs.memory import check_memory
from asyncrl.scenarios.spec.loading import ScenarioError

from asyncrl.commands.arguments import error, non_negative, one_line
from asyncrl.commands.common import (
    EXIT_FAILED,
    default_out,
    force_argument,
    load,
    load_fitting,
    overrides,
    penalty_argument,
    penalty_fit,
    print_json,
    progress,
    scenario_arguments,
)

if TYPE_CHECKING:
    from asyncrl.scenarios.record.record import RunRecord
    from asyncrl.scenarios.spec.scenario import Scenario
    from tqdm import tqdm

StepCallback = Callable[[int, dict[str, float]], None]


def add_parsers(commands: argparse._SubParsersAction) -> None:
    simulate = commands.add_parser("simulate", help="predict one scenario with the SimPy simulator")
    scenario_arguments(simulate)
    simulate.add_argument(
        "--out",
        type=Path,
        help="run directory (default: runs/<scenario name>, or runs/<scenario name>-<hash of the overrides>)",
    )
    force_argument(simulate)
    penalty_argument(simulate, "also predict the wall time to the target reward of this penalty file")
    simulate.set_defaults(command=run_simulate)

    execute = commands.add_parser("execute", help="run one scenario for real with torch (CPU or CUDA)")
    scenario_arguments(execute)
    execute.add_argument(
        "--out",
        type=Path,
        help="run directory (default: runs/<scenario name>-executed, or runs/<scenario name>-<hash of the "
        "overrides>-executed)",
    )
    force_argument(execute)
    execute.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="where engines and learner run")
    execute.add_argument("--resume", type=Path, metavar="RUN", help="continue RUN from its last checkpoint")
    execute.add_argument(
        "--runtime",
        default="local",
        choices=["local", "ray"],
        help="actors as local processes, or as Ray actors (a local Ray, or the cluster RAY_ADDRESS names)",
    )
    execute.add_argument(
        "--max-restarts",
        type=non_negative,
        default=DEFAULT_MAX_RESTARTS,
        metavar="N",
        help="restart an actor that dies (its groups generated again, each trained once) at most N times; one "
        f"death more fails the run (default {DEFAULT_MAX_RESTARTS}); with --auto-resume, also the learner's resumes",
    )
    execute.add_argument(
        "--auto-resume",
        action="store_true",
        help="run the learner in a process of its own and, when it dies, resume from its last checkpoint "
        "(needs run.checkpoint_every)",
    )
    execute.add_argument(
        "--log",
        choices=["tensorboard", "wandb"],
        help="also log each step's metrics and the summary: RUN/tensorboard/, or a W&B run in RUN/wandb/ "
        "(offline unless WANDB_MODE says otherwise)",
    )
    execute.set_defaults(command=run_execute)


def run_simulate(args: argparse.Namespace) -> int:
    from asyncrl.analysis.tables import simulation_lines
    from asyncrl.scenarios.record.record import read_events
    from asyncrl.simulator.backend import Simulator
    from asyncrl.simulator.target import step_ends_of_events, time_to_target

    from asyncrl.planning.uncertainty import interval_lines, run_uncertainty

    scenario = load_fitting(args)
    fit, about = penalty_fit(args.penalty, scenario)
    out = args.out or default_out(scenario.name, overrides(args))
    with progress(scenario.run.steps, "simulating", "step", args.quiet, leave=False) as bar:
        summary = Simulator(on_step=lambda step, now: bar.update(), force=args.force).write(scenario, out)
    if fit is not None:  # the run record keeps the simulator's figures; the time to target is printed only
        ends = step_ends_of_events(read_events(out, ["kind", "step", "end"]))
        reached = time_to_target(fit, summary, ends)
        summary = summary.model_copy(update={"time_to_target": reached})
    nominal = {"step_time_s": summary.step_time_s.mean, "samples_per_s": summary.throughput.samples_per_s}
    found = run_uncertainty(scenario, nominal)
    if args.json:
        return print_json({**summary.to_json(), "uncertainty": found.to_json()})
    print(simulation_lines(scenario, summary, about, interval_lines(found)))
    print(f"wrote {out}/ (summary.json, events.parquet, scenario.yaml)")
    return 0


def run_execute(args: argparse.Namespace) -> int:
    from asyncrl.analysis.tables import execution_header, execution_lines
    from asyncrl.executor.processes.runtime import check

    scenario = load(args)
    check(scenario, args.device)  # what the executor cannot run at all comes first
    check_memory(scenario)
    if args.auto_resume and scenario.run.checkpoint_every is None:
        raise ScenarioError("--auto-resume: resumes from the run's last checkpoint; set run.checkpoint_every")
    out = args.resume or args.out or default_out(scenario.name, overrides(args), "-executed")
    tracker = _tracker(args.log, out, scenario)
    print(execution_header(scenario, args.device, args.runtime))
    with progress(scenario.run.steps, "training", "step", args.quiet) as bar:
        try:
            result = _execute(args, scenario, out, _tracked(_training_progress(bar, scenario.batch_samples), tracker))
        except (ScenarioError, KeyboardInterrupt):
            raise
        except Exception as exc:
            bar.close()
            error(one_line(exc), EXIT_FAILED)
            _say_partial(out)
            return EXIT_FAILED
        finally:
            if tracker is not None:
                tracker.finish(_read_summary_or_empty(out))
    summary = result.summary
    assert summary is not None  # execute returned: the run started, and its record is written
    if args.json:
        return print_json(summary.to_json())
    if summary.resumed_from is not None:
        print(f"resumed from the checkpoint at step {summary.resumed_from} in {out}/")
    print(execution_lines(summary, result.metrics, not scenario.workload.task_mode, result.evaluation))
    evaluated = ", eval.parquet" if len(result.evaluation) else ""
    print(
        f"wrote {out}/ (summary.json, events.parquet, metrics.parquet, engine_steps.parquet{evaluated}, scenario.yaml)"
    )
    return 0


def _execute(args: argparse.Namespace, scenario: Scenario, out: Path, on_step: StepCallback) -> RunRecord:
    """The run, in this process, or with ``--auto-resume`` in a learner process resumed when it dies."""
    from asyncrl.executor.processes.runtime import execute
    from asyncrl.executor.processes.supervisor import Options, supervise

    resume = args.resume is not None
    if args.auto_resume:
        options = Options(args.device, args.runtime, args.force, args.max_restarts)
        return supervise(scenario, out, options, resume=resume, on_step=on_step)
    return execute(
        scenario,
        out,
        device=args.device,
        resume=resume,
        on_step=on_step,
        runtime=args.runtime,
        force=args.force,
        max_restarts=args.max_restarts,
    )


def _say_partial(out: Path) -> None:
    """After a failed execution: where its partial record is, if it wrote one."""
    try:
        status = json.loads((out / "summary.json").read_text()).get("status", "failed")
    except (OSError, ValueError, AttributeError):
        return  # the run ended before it recorded anything
    print(f"partial run record in {out}/ (summary.json status: {status})", file=sys.stderr)


def _training_progress(bar: tqdm, batch_samples: int) -> StepCallback:
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


def _tracked(on_step: StepCallback, tracker: Any) -> StepCallback:
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
