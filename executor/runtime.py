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
really run at the same time; on CUDA engine i runs on cuda:i. The run writes
the same record as the simulator (``summary.json`` with ``backend:
"executor"``, ``events.parquet``, the resolved ``scenario.yaml``) plus
``metrics.parquet`` (loss, reward, KL, staleness per step). A crashed worker or
Ctrl-C ends the run with a partial record whose summary says ``status``.
"""

from __future__ import annotations

import contextlib
import queue
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from executor import checkpoint
from executor.record import ExecutionResult, RunRecord
from scenarios.loading import ScenarioError
from scenarios.scenario import Scenario

READY_TIMEOUT_S = 300.0
#: How often a busy actor looks for commands: every decode step on local queues; Ray's queues
#: are remote calls, so at most every 5 ms there.
POLL_INTERVAL_S = {"local": 0.0, "ray": 0.005}


StepCallback = Callable[[int, dict[str, float]], None]


def execute(
    scenario: Scenario,
    out: Path,
    device: str = "cpu",
    resume: bool = False,
    on_step: StepCallback | None = None,
    runtime: str = "local",
) -> ExecutionResult:
    """Run ``scenario`` for real; write the run record to ``out`` (also when it fails).

    ``runtime`` is where the actors run: ``local`` processes, or ``ray`` actors
    (a local Ray, or the cluster ``RAY_ADDRESS`` names).
    """
    check(scenario, device)
    run = _Run(scenario, out, device, runtime)
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


def _check_device(scenario: Scenario, device: str) -> None:
    import torch

    if device not in ("cpu", "cuda"):
        raise ScenarioError(f"--device: {device!r}; use cpu or cuda")
    if device == "cuda" and torch.cuda.device_count() < 1:
        raise ScenarioError("--device: cuda asked for, but torch sees no GPU")
    if device == "cuda" and scenario.cluster.devices_per_engine != 1:
        raise ScenarioError("cluster.devices_per_engine: the executor's engine runs on one GPU; use 1")


def _check_task(scenario: Scenario) -> None:
    """A task, model or checkpoint the executor cannot use is a one-line error before any process starts."""
    from executor.models import build_config
    from executor.work import load_scenario_task
    from scenarios.catalog import MODEL_PRESETS

    model = scenario.model
    try:
        load_scenario_task(scenario)
        if model.path is not None and not model.path.is_dir():
            raise ValueError(f"model.path: {model.path} is not a directory")
        if model.path is None and model.preset is None:
            raise ValueError(
                "model: the executor needs model.preset or model.path (architecture figures alone build no model)"
            )
        if model.path is None:
            build_config(MODEL_PRESETS[model.preset])
    except ValueError as exc:
        message = str(exc)
        raise ScenarioError(
            message if message.startswith(("model.", "model:", "workload.")) else f"model.preset: {message}"
        ) from None


class _Run:
    """Workers, the coordinator and the learner of one run, and what they recorded."""

    def __init__(self, scenario: Scenario, out: Path, device: str, runtime: str) -> None:
        self.scenario, self.out, self.device, self.runtime = scenario, out, device, runtime
        self.engines = scenario.cluster.engines
        self.workers: Any = None
        self.record = RunRecord(scenario, out)
        self.resumed = checkpoint.Resumed()
        self.coordinator: Any = None
        self.t0 = time.time()
        self._stop_receiving = threading.Event()

    # Start-up.

    def start(self, resume: bool) -> None:
        import torch

        from executor.actor import ActorSpec
        from executor.learner import Learner
        from executor.weights import sync_backend
        from executor.work import load_scenario_task, policy_model
        from executor.workers import make_workers

        self.workers = make_workers(self.runtime, self.engines, self.scenario, self.device)
        self.commands, self.results = self.workers.commands, self.workers.results
        rendezvous = f"tcp://{self.workers.host}:{_free_port()}"
        self.backend = sync_backend(self.device, self.engines + 1)
        poll = POLL_INTERVAL_S[self.runtime]
        self.workers.start(
            [
                ActorSpec(i, self.scenario, self._actor_device(i), self.backend, rendezvous, self.engines + 1, poll)
                for i in range(self.engines)
            ]
        )
        if self.device == "cpu":
            torch.set_num_threads(self.scenario.training_devices)
        self._init_distributed(rendezvous)
        self.task = load_scenario_task(self.scenario)
        model = policy_model(self.scenario, self.task)
        pad = self.task.tokenizer.pad_token_id if self.task else 0
        self.learner = Learner.from_scenario(self.scenario, model, pad, device=self._learner_device())
        if resume:
            self.resumed = checkpoint.resume(self.out, self.learner)
            self.record.continue_from(self.resumed.previous)
        self._wait_ready()
        self._start_coordinator(model.config.vocab_size)

    def _init_distributed(self, rendezvous: str) -> None:
        """Join the process group, in a thread, so an actor that dies before joining is noticed."""
        import torch.distributed as dist

        failure: list[BaseException] = []

        def join() -> None:
            try:
                dist.init_process_group(self.backend, init_method=rendezvous, rank=0, world_size=self.engines + 1)
            except BaseException as exc:  # reported below, in the main thread
                failure.append(exc)

        joining = threading.Thread(target=join, name="asyncrl-join", daemon=True)
        joining.start()
        deadline = time.time() + READY_TIMEOUT_S
        while joining.is_alive():
            joining.join(timeout=0.2)
            self._check_processes(starting=True)
            if time.time() > deadline:
                raise RuntimeError(f"actors did not join the process group within {READY_TIMEOUT_S:.0f} s")
        if failure:
            raise failure[0]

    def _start_coordinator(self, model_vocab: int) -> None:
        from executor.coordinator import Coordinator
        from executor.weights import WeightLayout
        from executor.work import WorkSource

        self.t0 = time.time() - self.resumed.previous.wall_time
        clock = self._clock
        source = WorkSource(self.scenario, self.task, model_vocab)
        first_group = self.resumed.step * self.scenario.batch_groups
        self.coordinator = Coordinator(self.scenario, source, self.commands, clock, first_group=first_group)
        self.layout = WeightLayout.of(self.learner.weights())
        if self.resumed.step:
            checkpoint.skip_groups(source, first_group)
            self.coordinator.restore_versions(self.resumed.versions)
        for commands in self.commands:
            commands.put(("go", self.t0))
        self._receiver = threading.Thread(target=self._receive, name="asyncrl-receiver", daemon=True)
        self._receiver.start()
        self.coordinator.publish(self.resumed.step, self._flat_weights())

    def _wait_ready(self) -> None:
        ready: set[int] = set()
        deadline = time.time() + READY_TIMEOUT_S
        while len(ready) < self.engines:
            self._check_processes()
            try:
                message = self.results.get(timeout=0.5)
            except queue.Empty:
                if time.time() > deadline:
                    raise RuntimeError(f"actors not ready after {READY_TIMEOUT_S:.0f} s") from None
                continue
            if message[0] == "error":
                raise RuntimeError(f"actor {message[1]} failed while starting:\n{message[2]}")
            ready.add(message[1])

    # The learner loop.

    def train(self, on_step: StepCallback | None) -> None:
        from executor.engine import Rollout

        scenario, learner, coordinator = self.scenario, self.learner, self.coordinator
        for step in range(self.resumed.step, scenario.run.steps):
            batch = coordinator.take_batch(step, self._check_processes)
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
            row = {"step": step, "start": start, "end": end, **figures, **_batch_staleness(batch, step)}
            self.record.add_step(row)
            if scenario.run.checkpoint_every and (step + 1) % scenario.run.checkpoint_every == 0:
                self._checkpoint(step + 1)
            if on_step is not None:
                on_step(step, row)

    def _checkpoint(self, step: int) -> None:
        checkpoint.save(self.out, step, self.learner, self.coordinator.versions_kept())
        self._write("checkpoint")

    # Shutdown and the record.

    def finish(self, status: str) -> ExecutionResult:
        """Write the run record, complete or partial (nothing if the coordinator never started)."""
        if self.coordinator is None:
            return ExecutionResult.empty()
        self._stop_receiving.set()
        return self._write(status)

    def _write(self, status: str) -> ExecutionResult:
        rows = self.coordinator.event_rows(self._clock(), cut_unfinished=status != "checkpoint")
        return self.record.write(status, rows)

    def stop(self) -> None:
        self._stop_receiving.set()
        if getattr(self, "_receiver", None) is not None:
            self._receiver.join(timeout=2)  # it polls every 0.2 s; let it leave before its queue goes
        for commands in getattr(self, "commands", []):
            with contextlib.suppress(Exception):
                commands.put(("stop",))
        if self.workers is not None:
            self.workers.stop()
        _destroy_process_group()

    # Helpers.

    def _receive(self) -> None:
        """Hand every actor message to the coordinator until the run stops."""
        while not self._stop_receiving.is_set():
            try:
                message = self.results.get(timeout=0.2)
            except queue.Empty:
                continue
            except (EOFError, OSError):
                return  # the queue closed under us: the run is ending
            self.coordinator.on_message(message)

    def _check_processes(self, starting: bool = False) -> None:
        failure = self.workers.failure() if self.workers is not None else None
        if failure:
            raise RuntimeError(f"{failure}{self._actor_error(starting)}")
        if self.coordinator is not None and self.coordinator.failure:
            raise RuntimeError(self.coordinator.failure)

    def _actor_error(self, starting: bool) -> str:
        """The traceback a dead actor sent, if it sent one before the coordinator started reading."""
        if not starting:
            return ""
        try:
            message = self.results.get(timeout=1.0)
        except queue.Empty:
            return ""
        return f":\n{message[2]}" if message[0] == "error" else ""

    def _flat_weights(self) -> Any:
        from executor.weights import staging_device

        flat = self.layout.flatten(self.learner.weights())
        return flat.to(staging_device(self.backend, flat.device))

    def _clock(self) -> float:
        return time.time() - self.t0

    def _actor_device(self, index: int) -> str:
        if self.device != "cuda":
            return "cpu"
        import torch

        return f"cuda:{index % torch.cuda.device_count()}"

    def _learner_device(self) -> str:
        if self.device != "cuda":
            return "cpu"
        import torch

        return f"cuda:{self.engines}" if torch.cuda.device_count() > self.engines else "cuda:0"


def _batch_staleness(batch: list[Any], step: int) -> dict[str, float]:
    staleness = [step - min(r.versions) for g in batch for r in g.rollouts if r.versions]
    return {
        "staleness_mean": sum(staleness) / max(1, len(staleness)),
        "staleness_max": float(max(staleness, default=0)),
    }


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("", 0))
        return int(probe.getsockname()[1])


def _destroy_process_group() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        with contextlib.suppress(Exception):
            dist.destroy_process_group()
