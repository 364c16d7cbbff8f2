"""``--auto-resume``: the learner runs in a child process, and when it dies the run resumes from its last checkpoint.

    asyncrl execute --auto-resume (this process: the supervisor, no torch work of its own)
      └─ attempt 1: learner process (spawned) ── runtime.execute(...) ── progress ──► on_step, clock zero, groups
           dies (SIGKILL, OOM, an error) ──► attempt 2: runtime.execute(resume=True, learner_restart=...)
                                               its clock continues the first's; a ``restart`` row for the learner
                                               from its death to the resumed start; ``lost`` rows for the groups
                                               the dead learner had started since the checkpoint
           ... at most ``max_restarts`` resumes; then the run fails, as without the flag

The learner process dies with the supervisor (``executor.processes.lifetime``), and its actors
with it, as they always do. What the checkpoint covers is trained once: a resumed run
starts at the checkpoint's step with the learner's state of that moment, and the steps
the dead learner trained after it are trained again, from the same groups (their ids,
prompts and lengths), so the record holds each step once. A bad scenario, a bad
checkpoint or Ctrl-C end the run at once, as without the flag.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ...scenarios.record.record import RunRecord
from ...scenarios.spec.loading import ScenarioError
from ...scenarios.spec.scenario import Scenario
from ..learning.checkpoint import has_checkpoint
from ..record import LearnerRestart
from .lifetime import die_with_parent

StepCallback = Callable[[int, dict[str, float]], None]


@dataclass(frozen=True)
class Options:
    """``runtime.execute``'s options, as the learner process gets them."""

    device: str
    runtime: str
    force: bool
    max_restarts: int


def supervise(
    scenario: Scenario, out: Path, options: Options, resume: bool = False, on_step: StepCallback | None = None
) -> RunRecord:
    """Execute ``scenario`` into ``out`` in a learner process, resuming it from its checkpoint when it dies."""
    restart: LearnerRestart | None = None
    for attempt in range(options.max_restarts + 1):
        outcome = _attempt(scenario, out, options, resume or restart is not None, restart, on_step)
        if outcome.ended:
            return RunRecord.read(out)
        if not has_checkpoint(out):
            raise RuntimeError(f"{outcome.why}, before its first checkpoint: nothing to resume from")
        if attempt == options.max_restarts:
            break
        print(
            f"asyncrl: {outcome.why}; resuming from its last checkpoint ({attempt + 1} of at most "
            f"{options.max_restarts})",
            file=sys.stderr,
        )
        restart = outcome.restart(restart)
        options = replace(options, force=False)
    raise RuntimeError(f"{outcome.why} ({options.max_restarts} resume(s) used; --max-restarts {options.max_restarts})")


@dataclass
class _Outcome:
    """How one learner process ended, and what it reported before."""

    ended: bool = False  # it wrote its record and returned (complete)
    why: str = "the learner died"
    clock_zero: float | None = None
    died_at: float = 0.0
    groups_started: int = 0

    def restart(self, previous: LearnerRestart | None) -> LearnerRestart:
        zero = self.clock_zero if self.clock_zero is not None else (previous.clock_zero if previous else time.time())
        return LearnerRestart(zero, self.died_at, self.groups_started)


def _attempt(
    scenario: Scenario,
    out: Path,
    options: Options,
    resume: bool,
    restart: LearnerRestart | None,
    on_step: StepCallback | None,
) -> _Outcome:
    context = mp.get_context("spawn")
    reports = context.Queue()
    args = (scenario, out, options, resume, restart, reports)
    learner = context.Process(target=_learner_main, args=args, name="asyncrl-learner")  # it has children: not a daemon
    learner.start()
    outcome = _Outcome(clock_zero=restart.clock_zero if restart else None)
    try:
        while learner.is_alive() or not reports.empty():
            try:
                kind, *values = reports.get(timeout=0.2)
            except queue.Empty:
                continue
            _note(outcome, kind, values, on_step)
    except KeyboardInterrupt:
        learner.join(timeout=30)  # Ctrl-C reached it too: let it write its record as interrupted
        raise
    learner.join()
    if outcome.ended:
        return outcome
    died = time.time()
    outcome.died_at = died - outcome.clock_zero if outcome.clock_zero is not None else 0.0
    if outcome.why == "the learner died":
        outcome.why = f"the learner exited with code {learner.exitcode}"
    return outcome


def _note(outcome: _Outcome, kind: str, values: list[Any], on_step: StepCallback | None) -> None:
    """One report of the learner process."""
    if kind == "step" and on_step is not None:
        on_step(*values)
    elif kind == "clock_zero":
        outcome.clock_zero = values[0]
    elif kind == "groups_started":
        outcome.groups_started = values[0]
    elif kind == "done":
        outcome.ended = True
    elif kind == "scenario_error":
        raise ScenarioError(values[0])
    elif kind == "interrupted":
        raise KeyboardInterrupt
    elif kind == "failed":
        outcome.why = f"the learner failed: {values[0]}"


def _learner_main(
    scenario: Scenario, out: Path, options: Options, resume: bool, restart: LearnerRestart | None, reports: Any
) -> None:
    """The learner process: one ``runtime.execute``, its progress and its end reported to the supervisor."""
    from .runtime import execute

    die_with_parent()
    try:
        execute(
            scenario,
            out,
            device=options.device,
            resume=resume,
            on_step=lambda step, row: reports.put(("step", step, row)),
            runtime=options.runtime,
            force=options.force,
            max_restarts=options.max_restarts,
            learner_restart=restart,
            on_progress=lambda kind, value: reports.put((kind, value)),
        )
        reports.put(("done",))
    except ScenarioError as exc:
        reports.put(("scenario_error", str(exc)))
    except KeyboardInterrupt:
        reports.put(("interrupted",))
    except Exception as exc:
        reports.put(("failed", str(exc).splitlines()[0] if str(exc) else type(exc).__name__))
        raise SystemExit(1) from None
