"""An actor process: one generation engine, driven by the learner's coordinator.

    commands (from the coordinator)          results (to the coordinator), ``executor.processes.messages``
    Go(t0)                start the clock    Ready(actor)
    StartGroups(StartGroup …) ──► engine.add ──► engine.step ... ──► StepFinished(actor, RolloutDone per sample)
    LoadWeights(version) ──recv weights──► engine.load_weights ──► Loaded(actor, version, start, end)
    Stop()                                   ActorFailed(actor, traceback)

The actor makes no schedule decision: what to start and which weights to load
is decided by the coordinator's ``scenarios.rules.state.ScheduleState``. It reports
each sample as soon as it is done, with the wall-clock spans of its versions.
"""

from __future__ import annotations

import queue
import time
import traceback
from dataclasses import dataclass
from multiprocessing.queues import Queue
from typing import Any

from ...scenarios.spec.scenario import Scenario
from .messages import (
    ActorFailed,
    Command,
    EngineStep,
    EngineSteps,
    FinishedRollout,
    Go,
    Loaded,
    LoadWeights,
    Ready,
    RolloutDone,
    Segment,
    StartGroups,
    StepFinished,
    Stop,
)

POLL_S = 0.05  # how long an idle actor waits for a command before checking again
STEPS_PER_REPORT = 64  # engine steps an actor reports at the latest together (else with each finish)


@dataclass(frozen=True)
class ActorSpec:
    """What an actor process needs to start: its place in the process group and its scenario."""

    index: int
    scenario: Scenario
    device: str
    backend: str  # torch.distributed backend: gloo or nccl
    rendezvous: str  # where its weight group with the learner forms (``executor.processes.distributed.connect_pair``)
    poll_interval_s: float = 0.0  # while generating, look for commands at most this often
    incarnation: int = 0  # 0 for the first process of this actor, one more with each restart


def actor_main(spec: ActorSpec, commands: Queue, results: Any) -> None:
    """Process entry point; any failure is reported as ``ActorFailed`` before exiting. ``results`` has a queue's
    ``put`` (``executor.processes.channels``)."""
    try:
        _run(spec, commands, results)
    except KeyboardInterrupt:
        pass
    except BaseException:
        results.put(ActorFailed(spec.index, traceback.format_exc()))
        raise SystemExit(1) from None


def _run(spec: ActorSpec, commands: Queue, results: Any) -> None:
    import torch

    from ..generation.engine import ContinuousBatchingEngine
    from ..generation.precision import enable_tf32
    from ..tasks.work import engine_model, load_scenario_task
    from .distributed import connect_pair
    from .placement import use_device
    from .weights import WeightLayout, receive_weights, staging_device

    index, scenario, device = spec.index, spec.scenario, spec.device
    torch.set_num_threads(scenario.cluster.devices_per_engine if device == "cpu" else 1)
    use_device(device)
    enable_tf32(device)
    group = connect_pair(spec.backend, spec.rendezvous)
    task = load_scenario_task(scenario)
    model = engine_model(scenario, task, device)
    layout = WeightLayout.of(model.state_dict())
    buffer = layout.empty(staging_device(spec.backend, device))
    engine = ContinuousBatchingEngine(
        model,
        max_batch=scenario.engine_concurrency,
        eos_token_id=task.tokenizer.eos_token_id if task else None,
        pad_token_id=task.tokenizer.pad_token_id if task else 0,
        temperature=scenario.algorithm.temperature,
        seed=scenario.run.seed * 1000 + index,
        device=device,
        recompute_kv=scenario.schedule.kv_on_update == "recompute",
    )
    results.put(Ready(index))
    t0 = _wait_for_go(commands)
    if t0 is None:  # stopped before the run began (the learner failed while starting)
        return
    actor = _Actor(index, scenario.workload.samples_per_prompt, engine, results, t0)
    polled = 0.0
    while True:
        idle = engine.in_flight == 0 and engine.waiting == 0
        if not idle and time.monotonic() - polled < spec.poll_interval_s:
            actor.step()
            continue
        polled = time.monotonic()
        for command in _commands(commands, block=idle):
            if isinstance(command, Stop):
                return
            if isinstance(command, StartGroups):
                for start in command.starts:
                    actor.start(start.group, start.requests)
            elif isinstance(command, LoadWeights):
                began = actor.now()
                weights = layout.unflatten(receive_weights(buffer, group))
                engine.load_weights(weights, command.version)
                actor.loaded(command.version, began)
        if engine.in_flight or engine.waiting:
            actor.step()


def _wait_for_go(commands: Queue) -> float | None:
    """The run clock's zero once the coordinator says go; None if it says stop first."""
    while True:
        command = commands.get()
        if isinstance(command, Go):
            return command.t0
        if isinstance(command, Stop):
            return None


def _commands(commands: Queue, block: bool) -> list[Command]:
    """Every command waiting now; with ``block``, wait (briefly) for at least one."""
    pending = []
    try:
        pending.append(commands.get(timeout=POLL_S) if block else commands.get_nowait())
        while True:
            pending.append(commands.get_nowait())
    except queue.Empty:
        pass
    return pending


class _Actor:
    """Bookkeeping around the engine: group start times, weight loads, finished samples."""

    def __init__(self, index: int, group_size: int, engine: Any, results: Any, t0: float) -> None:
        self.index, self.group_size, self.engine, self.results, self.t0 = index, group_size, engine, results, t0
        self.group_start: dict[int, float] = {}
        self.group_left: dict[int, int] = {}  # samples not finished yet
        self.steps: list[EngineStep] = []  # not reported yet
        self.loads: list[tuple[float, int]] = []  # (time the version became active, version)

    def now(self) -> float:
        return time.time() - self.t0

    def start(self, group: int, requests: list[Any]) -> None:
        self.group_start[group] = self.now()
        self.group_left[group] = len(requests)
        for request in requests:
            self.engine.add(request)

    def loaded(self, version: int, start: float) -> None:
        end = self.now()
        self.loads.append((end, version))
        self.results.put(Loaded(self.index, version, start, end))

    def step(self) -> None:
        start = self.now()
        rollouts = self.engine.step()
        stats = self.engine.last_step
        if stats.batch or stats.joins:
            self.steps.append(
                EngineStep(
                    start=start,
                    end=self.now(),
                    batch=stats.batch,
                    context=stats.context,
                    joins=stats.joins,
                    prefill_tokens=stats.prefill_tokens,
                    retired=stats.retired,
                )
            )
        if rollouts or len(self.steps) >= STEPS_PER_REPORT:
            self.results.put(EngineSteps(self.index, self.steps))
            self.steps = []
        done = []
        for rollout in rollouts:
            group, sample = divmod(rollout.id, self.group_size)
            start, end = self.group_start[group], self.now()
            segments = self._segments(rollout.versions, start, end)
            finished = FinishedRollout(sample, rollout.tokens, rollout.logprobs, rollout.versions, start, end, segments)
            done.append(RolloutDone(self.index, group, finished))
            self.group_left[group] -= 1
            if not self.group_left[group]:
                del self.group_start[group], self.group_left[group]
        if done:
            self.results.put(StepFinished(self.index, tuple(done)))

    def _segments(self, versions: list[int], start: float, end: float) -> list[Segment]:
        """Runs of tokens made by one version, timed by the loads that switched versions."""
        runs: list[list[int]] = []
        for version in versions:
            if runs and runs[-1][0] == version:
                runs[-1][1] += 1
            else:
                runs.append([version, 1])
        if not runs:
            return [Segment(version=0, start=start, end=end, tokens=0)]
        starts = [start] + [self._load_time(version, start) for version, _ in runs[1:]]
        ends = [*starts[1:], end]
        return [Segment(version=v, start=s, end=e, tokens=n) for (v, n), s, e in zip(runs, starts, ends, strict=True)]

    def _load_time(self, version: int, after: float) -> float:
        return next((t for t, v in self.loads if v == version and t >= after), after)
