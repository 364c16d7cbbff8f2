"""The local runtime: one learner process (this one) and one process per generation engine.

    this process (rank 0)                                  actor processes (rank 1..E)
    ┌────────────────────────────────────────────┐         ┌──────────────────────────┐
    │ learner loop: take_batch → train → publish │         │ engine: continuous       │
    │ coordinator (policy state, dispatch) ◄─────┼─results─┤ batching, behaviour      │
    │ receiver thread ───────────────────────────┼─cmds───►│ log-probs, versions      │
    │ weights ──torch.distributed isend──────────┼────────►│ recv → load_weights      │
    └────────────────────────────────────────────┘         └──────────────────────────┘

On CPU each process gets its own thread budget (``devices_per_engine`` threads
per engine, ``training_devices`` for the learner), so generation and training
really run at the same time; on CUDA ``executor.processes.placement`` puts each process on
its GPU (locally engine i on cuda:i, the learner on the next one). Engines run in
``model.dtype``, the learner keeps fp32 weights (``executor.generation.precision``). The run writes
the same record as the simulator (``summary.json`` with ``backend:
"executor"``, ``events.parquet``, the resolved ``scenario.yaml``) plus
``metrics.parquet`` (loss, reward, KL, staleness per step: ``staleness_mean`` and
``staleness_max`` from the learner, every token at its own version;
``rollout_staleness_mean`` and ``rollout_staleness_max`` per rollout, at its oldest
version). An actor that dies is restarted, up to ``max_restarts`` times
(``executor.processes.restarts``; its groups go out again, each trained once); one death more,
an error or Ctrl-C ends the run with a partial record whose summary says ``status``.

This module holds the learner loop; the rest of a run lives next to it:

    execute ─► check, checkpoint.check (--resume), run_directory: out checked and locked (scenarios/files/outputs.py)
              _Run.start   the task (user code runs here), ActorProcesses.spawn (actors die with this process:
                            executor/processes/lifetime.py), connect     (executor/processes/actors.py, executor/processes/distributed.py)
                            Learner, checkpoint.resume        (executor/learning/checkpoint.py)
                            ActorProcesses.wait_ready, Coordinator, Restarts, ActorProcesses.go, publish(first version)
              _Run.train    take_batch → train_step → publish → (weights snapshot for evaluation) → metrics row
                            → every N steps the record so far (with checkpoint/progress.json), then checkpoint.save
              _Run.finish   the clock stops; a complete run that evaluates stops its actors and answers the
                            held-out prompts with each snapshot (executor/learning/evaluation.py: eval.parquet);
                            RunLog.write(status): summary.json last  (executor/record.py)
              _Run.stop     ActorProcesses.stop
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from ...scenarios.record.outputs import run_directory
from ...scenarios.record.record import RunRecord, RunStatus, empty_events
from ...scenarios.spec.loading import ScenarioError
from ...scenarios.spec.scenario import Scenario
from ..learning import checkpoint
from ..record import RunLog
from .actors import ActorProcesses
from .restarts import DEFAULT_MAX_RESTARTS

if TYPE_CHECKING:
    import torch

    from ..learning.evaluation import Evaluator
    from ..learning.learner import Learner
    from ..record import LearnerRestart
    from ..tasks.generated import Task
    from .coordinator import Coordinator, GroupRecord

StepCallback = Callable[[int, dict[str, float]], None]
ProgressCallback = Callable[[str, float], None]


def execute(
    scenario: Scenario,
    out: Path,
    device: str = "cpu",
    resume: bool = False,
    on_step: StepCallback | None = None,
    runtime: str = "local",
    force: bool = False,
    max_restarts: int = DEFAULT_MAX_RESTARTS,
    learner_restart: LearnerRestart | None = None,
    on_progress: ProgressCallback | None = None,
) -> RunRecord:
    """Run ``scenario`` for real; write the run record to ``out`` (also when it fails) and return it.

    ``runtime`` is where the actors run: ``local`` processes, or ``ray`` actors
    (a local Ray, or the cluster ``RAY_ADDRESS`` names). ``out`` is checked and
    locked first (``scenarios.record.outputs.run_directory``; ``force`` writes into a
    directory holding other files); nothing starts if it cannot be used. An actor
    that dies is restarted, ``max_restarts`` times at most (``executor.processes.restarts``).
    ``learner_restart`` and ``on_progress`` are ``executor.processes.supervisor``'s (``--auto-resume``):
    what a run resumed after its learner died knows of the death, and where the run
    reports its clock's zero and the groups it has started.
    """
    check(scenario, device)
    if resume:
        checkpoint.check(out, scenario)  # before the directory is touched: a bad checkpoint (or another
        # scenario's run) leaves the run as it was
    with run_directory(out, force=force, option="resume" if resume else "out"):
        run = _Run(scenario, out, device, runtime, max_restarts)
        run.learner_restart, run.on_progress = learner_restart, on_progress
        try:
            run.start(resume)
            run.train(on_step)
            return run.finish("complete")
        except KeyboardInterrupt:
            run.finish("interrupted")
            raise
        except BaseException:
            run.finish("failed")
            raise
        finally:
            run.stop()


def check(scenario: Scenario, device: str) -> None:
    """Raise ScenarioError, naming the field, for anything the executor cannot run."""
    _check_device(scenario, device)
    _check_task(scenario)
    workload = scenario.workload
    if scenario.run.eval_every is not None and not workload.task and workload.prompts is None:
        raise ScenarioError(
            "run.eval_every: evaluation needs a task (workload.task or workload.prompts); timing mode has no reward"
        )


def _check_device(scenario: Scenario, device: str) -> None:
    import torch

    if device not in ("cpu", "cuda"):
        raise ScenarioError(f"device: {device!r}; use cpu or cuda")
    if device == "cuda" and torch.cuda.device_count() < 1:
        raise ScenarioError("device: cuda asked for, but torch sees no GPU")
    if device == "cuda" and scenario.cluster.devices_per_engine != 1:
        raise ScenarioError("cluster.devices_per_engine: the executor's engine runs on one GPU; use 1")


def _check_task(scenario: Scenario) -> None:
    """A task name, model or checkpoint the executor cannot use is a one-line error before any process starts.

    A ``module:function`` task is only checked for its form here: importing it runs user code, which
    waits until the run starts (``_Run.start``).
    """
    from ...scenarios.costs.catalog import MODEL_PRESETS
    from ..generation.models import build_config
    from ..generation.precision import executor_dtype
    from ..tasks.generated import check_task_name

    model = scenario.model
    try:
        executor_dtype(model.dtype)
        if scenario.workload.task:
            check_task_name(scenario.workload.task)
        if model.path is not None and not model.path.is_dir():
            from ...scenarios.spec.checkpoints import cached_checkpoint

            cached_checkpoint(model.path)  # a hub name resolves from the local cache only
        if model.path is None and model.preset is None:
            raise ValueError(
                "model: the executor needs model.preset or model.path (architecture figures alone build no model)"
            )
        if model.path is None:
            assert model.preset is not None  # refused just above otherwise
            build_config(MODEL_PRESETS[model.preset])
    except ValueError as exc:
        message = str(exc)
        raise ScenarioError(
            message if message.startswith(("model.", "model:", "workload.")) else f"model.preset: {message}"
        ) from None


class _Run:
    """The learner side of one run: the learner, the coordinator, the record, and the actors they drive."""

    def __init__(self, scenario: Scenario, out: Path, device: str, runtime: str, max_restarts: int) -> None:
        from .placement import place

        self.scenario, self.out, self.device, self.max_restarts = scenario, out, device, max_restarts
        self.placement = place(device, _visible_gpus(device), scenario.cluster.engines, runtime)
        self.actors = ActorProcesses(scenario, self.placement, runtime)
        self.record = RunLog(scenario, out)
        self.resumed = checkpoint.Resumed()
        self.coordinator: Coordinator | None = None
        self.t0 = time.time()
        self.learner_restart: LearnerRestart | None = None
        self.on_progress: ProgressCallback | None = None
        self.evaluator: Evaluator | None = None
        self._snapshot_s = 0.0  # seconds of weight snapshots for evaluation not yet in a metrics row

    # Start-up.

    def start(self, resume: bool) -> None:
        import torch

        from ..learning.learner import Learner
        from ..tasks.work import policy_model
        from .placement import use_device

        self.task: Task | None = _load_task(self.scenario)  # user code runs here, before any process starts
        self.evaluator = _evaluator(self.scenario, self.task)
        self.actors.spawn()
        if self.device == "cpu":
            torch.set_num_threads(self.scenario.training_devices)
        use_device(self.placement.learner)
        self.actors.connect()
        model = policy_model(self.scenario, self.task)
        pad = self.task.tokenizer.pad_token_id if self.task else 0
        self.learner: Learner = Learner.from_scenario(self.scenario, model, pad, device=self.placement.learner)
        if resume:
            self.resumed = checkpoint.resume(self.out, self.learner, self._staging())
            self.record.continue_from(self.resumed.previous, self.resumed.step)
        self.actors.wait_ready()
        self._start_coordinator(model.config.vocab_size)

    def _start_coordinator(self, model_vocab: int) -> None:
        from ..generation.precision import executor_dtype
        from ..tasks.work import WorkSource
        from .coordinator import Coordinator
        from .restarts import Restarts
        from .weights import WeightLayout

        restart = self.learner_restart
        self.t0 = restart.clock_zero if restart else time.time() - self.resumed.previous.wall_time
        held_out = self.evaluator.held_out if self.evaluator is not None else frozenset()
        source = WorkSource(self.scenario, self.task, model_vocab, held_out)
        first_group = self.resumed.step * self.scenario.batch_groups
        coordinator = Coordinator(
            self.scenario, source, self.actors.commands, self._clock, first_group=first_group, send=self.actors.send
        )
        self.coordinator = coordinator
        self.layout = WeightLayout.of(self.learner.model.state_dict(), executor_dtype(self.scenario.model.dtype))
        if self.resumed.step:
            checkpoint.skip_groups(source, first_group)
            coordinator.restore_versions(self.resumed.versions)
        restarts = Restarts(self.scenario, self.actors, coordinator, self.max_restarts, self._clock)
        self.actors.go(self.t0, coordinator, restarts)
        if restart is not None:
            from ..record import learner_restart_rows

            size = self.scenario.workload.samples_per_prompt
            coordinator.rows.extend(learner_restart_rows(restart, first_group, size, self._clock()))
        self._progress("clock_zero", self.t0)
        coordinator.publish(self.resumed.step, self._flat_weights())

    # The learner loop.

    def train(self, on_step: StepCallback | None) -> None:
        from ..generation.engine import Rollout

        scenario, learner, coordinator = self.scenario, self.learner, self._coordinator()
        self._snapshot(self.resumed.step)
        for step in range(self.resumed.step, scenario.run.steps):
            batch = coordinator.take_batch(step, self._check_health)
            groups = [
                [
                    (Rollout(r.sample, g.prompt, r.tokens, r.logprobs, r.versions, ""), reward)
                    for r, reward in zip(g.rollouts, g.rewards, strict=True)
                ]
                for g in batch
            ]
            start = self._clock()
            figures = learner.train_step(groups)
            end = self._clock()
            tokens = sum(len(g.prompt) + len(r.tokens) for g in batch for r in g.rollouts)
            coordinator.train_row(step, start, end, tokens)
            for record in batch:
                coordinator.generate_rows(record, step)
                coordinator.source.forget(record.group)
            coordinator.publish(step + 1, self._flat_weights())
            self._snapshot(step + 1)
            row = {"step": step, "start": start, "end": end, **figures, **_rollout_staleness(batch, step)}
            if self.evaluator is not None:
                row["eval_snapshot_s"], self._snapshot_s = self._snapshot_s, 0.0
            self.record.add_step(row)
            if scenario.run.checkpoint_every and (step + 1) % scenario.run.checkpoint_every == 0:
                self._checkpoint(step + 1)
            self._progress("groups_started", coordinator.state.next_group)
            if on_step is not None:
                on_step(step, row)

    def _snapshot(self, steps_done: int) -> None:
        """Keep the weights after ``steps_done`` steps for evaluation, when that step is evaluated."""
        if self.evaluator is not None and self.evaluator.due(steps_done):
            self._snapshot_s += self.evaluator.snapshot(steps_done, self.learner.model)

    def _checkpoint(self, step: int) -> None:
        """The record first, then the checkpoint: a kill between them leaves a record ahead of the checkpoint,
        which a resume cuts back to it, never one behind it (steps trained but not recorded)."""
        self._write("checkpoint")
        checkpoint.save(self.out, step, self.learner, self._coordinator().versions_kept())

    # Shutdown and the record.

    def finish(self, status: RunStatus) -> RunRecord:
        """Write the run record, complete or partial (nothing if the coordinator never started: no summary)."""
        if self.coordinator is None:
            return RunRecord(self.scenario, None, empty_events())
        self.actors.stop_receiving()
        now = self._clock()
        if status == "complete" and self.evaluator is not None and self.evaluator.snapshots:
            self.actors.stop()  # the clock has stopped: the held-out answers run alone, outside the run's time
            evaluation = copy.deepcopy(self.learner.model)
            self.record.evaluation = self.evaluator.table(evaluation, self.placement.learner)
        return self._write(status, now)

    def _write(self, status: RunStatus | Literal["checkpoint"], now: float | None = None) -> RunRecord:
        coordinator = self._coordinator()
        rows = coordinator.event_rows(self._clock() if now is None else now, cut_unfinished=status != "checkpoint")
        return self.record.write(status, rows, list(coordinator.engine_steps))

    def stop(self) -> None:
        self.actors.stop()

    # Helpers.

    def _check_health(self) -> None:
        """Raise if the run cannot go on (an actor died with no restart left); the learner calls this while it
        waits for a batch."""
        self.actors.check()
        if self.coordinator is not None and self.coordinator.failure:
            from .coordinator import WorkerFailed

            raise WorkerFailed(self.coordinator.failure)

    def _progress(self, kind: str, value: float) -> None:
        if self.on_progress is not None:
            self.on_progress(kind, value)

    def _coordinator(self) -> Coordinator:
        if self.coordinator is None:
            raise RuntimeError("the coordinator has not started")
        return self.coordinator

    def _flat_weights(self) -> torch.Tensor:
        """The learner's weights as one tensor in the engines' dtype, where the sync backend sends from."""
        return self.layout.flatten(self.learner.model.state_dict(), self._staging())

    def _staging(self) -> str:
        from .weights import staging_device

        return str(staging_device(self.placement.backend, self.placement.learner))

    def _clock(self) -> float:
        return time.time() - self.t0


def _visible_gpus(device: str) -> int:
    if device != "cuda":
        return 0
    import torch

    return torch.cuda.device_count()


def _evaluator(scenario: Scenario, task: Task | None) -> Evaluator | None:
    """The run's evaluator when ``run.eval_every`` is set (its held-out prompts drawn now); ScenarioError if the
    task cannot hold that many prompts out."""
    if scenario.run.eval_every is None or task is None:
        return None
    from ..learning.evaluation import Evaluator

    try:
        return Evaluator(scenario, task)
    except ValueError as exc:
        raise ScenarioError(str(exc).splitlines()[0]) from None


def _load_task(scenario: Scenario) -> Task | None:
    """The scenario's task, imported (and, for ``module:function``, its code run) now; ScenarioError if it fails."""
    from ..tasks.work import load_scenario_task

    try:
        return load_scenario_task(scenario)
    except ValueError as exc:
        raise ScenarioError(str(exc).splitlines()[0]) from None


def _rollout_staleness(batch: list[GroupRecord], step: int) -> dict[str, float]:
    """Staleness per rollout, at its oldest version; the learner's ``staleness_mean`` weighs every token instead."""
    staleness = [step - min(r.versions) for g in batch for r in g.rollouts if r.versions]
    return {
        "rollout_staleness_mean": sum(staleness) / max(1, len(staleness)),
        "rollout_staleness_max": float(max(staleness, default=0)),
    }
