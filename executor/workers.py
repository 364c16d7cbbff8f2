"""Where actor processes run: local processes, or Ray actors on any node of a Ray cluster.

    runtime ──start(specs)──► Workers ──► actor_main(spec, commands[i], results) in each worker
            ◄──failure()────          (a dead worker, with its traceback when it sent one)

Both kinds hand the runtime the same things: a command queue per actor, one
results queue, ``failure()`` and ``stop()``. The learner and the coordinator
stay in the calling process either way; weights travel over torch.distributed,
whose rendezvous is the learner's address (``host``).
"""

from __future__ import annotations

import multiprocessing as mp
import os
from typing import Any, Protocol

from asyncrl.executor.actor import ActorSpec, actor_main
from asyncrl.executor.lifetime import die_with_parent
from asyncrl.scenarios.scenario import Scenario


class Workers(Protocol):
    host: str  # address the actors reach the learner at (process-group rendezvous)
    commands: list[Any]  # one queue per actor: put()
    results: Any  # one queue for all: get(timeout), get_nowait()

    def start(self, specs: list[ActorSpec]) -> None: ...
    def failure(self) -> str | None: ...
    def stop(self) -> None: ...


#: What an actor imports before it generates, loaded once into the forkserver that local actors fork from.
ACTOR_MODULES = ["asyncrl.executor.actor", "asyncrl.executor.engine", "asyncrl.executor.models"]


def actor_context() -> Any:
    """multiprocessing's forkserver, with the actor's modules (torch, transformers) imported in it once.

    A spawned actor imported torch and transformers itself, 5-9 s on two cores before its first token; an actor
    forked from the forkserver starts in milliseconds, and the forkserver lives as long as this process, so
    every later run (validate's, demo's, a test suite's) starts its actors at once too. The forkserver imports
    but never computes, so no thread pool and no CUDA context is forked.
    """
    context = mp.get_context("forkserver")
    context.set_forkserver_preload(ACTOR_MODULES)
    return context


class LocalProcesses:
    """One process per engine on this machine, forked from the forkserver."""

    host = "127.0.0.1"

    def __init__(self, engines: int) -> None:
        self.context = actor_context()
        self.commands = [self.context.Queue() for _ in range(engines)]
        self.results = self.context.Queue()
        self.processes: list[Any] = []

    def start(self, specs: list[ActorSpec]) -> None:
        for spec in specs:
            args = (spec, self.commands[spec.index], self.results)
            process = self.context.Process(
                target=_local_actor, args=args, daemon=True, name=f"asyncrl-actor-{spec.index}"
            )
            process.start()
            self.processes.append(process)

    def failure(self) -> str | None:
        for index, process in enumerate(self.processes):
            if process.exitcode is not None:
                return f"actor {index} exited with code {process.exitcode}"
        return None

    def stop(self) -> None:
        for process in self.processes:
            process.join(timeout=10)
            if process.is_alive():
                process.terminate()
                process.join(timeout=5)


def _local_actor(spec: ActorSpec, commands: Any, results: Any) -> None:
    """A local actor process: it dies with this one (``executor.lifetime``), then runs the actor loop."""
    die_with_parent()
    actor_main(spec, commands, results)


class _ActorHost:
    """The body of a Ray actor: runs one actor loop until told to stop."""

    def run(self, spec: ActorSpec, commands: Any, results: Any) -> None:
        actor_main(spec, commands, results)


class RayActors:
    """One Ray actor per engine, packed with a placement group; joins ``RAY_ADDRESS`` or starts a local Ray."""

    def __init__(self, engines: int, scenario: Scenario, device: str) -> None:
        import ray
        from ray.util.queue import Queue

        if not ray.is_initialized():
            ray.init(address=os.environ.get("RAY_ADDRESS"), include_dashboard=False, log_to_driver=False)
        self.ray = ray
        self.host = ray.util.get_node_ip_address()
        self.commands = [Queue() for _ in range(engines)]
        self.results = Queue()
        gpus = 1 if device == "cuda" else 0
        cpus = 0 if gpus else scenario.cluster.devices_per_engine
        self.bundle = {"CPU": cpus, "GPU": gpus} if gpus else {"CPU": cpus}
        self.group = ray.util.placement_group([self.bundle] * engines, strategy="PACK")
        self.handles: list[Any] = []
        self.runs: list[Any] = []

    def start(self, specs: list[ActorSpec]) -> None:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        ready, _ = self.ray.wait([self.group.ready()], timeout=120)
        if not ready:
            raise RuntimeError(f"Ray cannot place {len(specs)} engines of {self.bundle}; too few resources")
        host = self.ray.remote(num_cpus=self.bundle["CPU"], num_gpus=self.bundle.get("GPU", 0))(_ActorHost)
        for spec in specs:
            strategy = PlacementGroupSchedulingStrategy(
                placement_group=self.group, placement_group_bundle_index=spec.index
            )
            handle = host.options(scheduling_strategy=strategy, name=None).remote()
            self.handles.append(handle)
            self.runs.append(handle.run.remote(spec, self.commands[spec.index], self.results))

    def failure(self) -> str | None:
        done, _ = self.ray.wait(self.runs, num_returns=len(self.runs), timeout=0)
        for ref in done:
            index = self.runs.index(ref)
            try:
                self.ray.get(ref)
            except Exception as exc:  # the actor's own exception, or Ray's report of a dead actor
                return f"actor {index} failed: {str(exc).splitlines()[0]}"
            return f"actor {index} exited"
        return None

    def stop(self) -> None:
        self.ray.wait(self.runs, num_returns=len(self.runs), timeout=10)
        for handle in self.handles:
            self.ray.kill(handle)
        self.ray.util.remove_placement_group(self.group)


def make_workers(runtime: str, engines: int, scenario: Scenario, device: str) -> Workers:
    if runtime == "local":
        return LocalProcesses(engines)
    if runtime == "ray":
        return RayActors(engines, scenario, device)
    raise ValueError(f"runtime: {runtime!r}; use local or ray")
