"""Where actor processes run: local processes, or Ray actors on any node of a Ray cluster.

    runtime ──start(specs)──► Workers ──► actor_main(spec, commands[i], results) in each worker
            ◄──failure()────          (while starting: a dead worker, with its traceback when it sent one)
            ◄──dead()───────          (while running: actors whose current incarnation died, why)
            ──restart(spec)─►         a new incarnation of one actor, with a fresh command queue
            ──kill(i)───────►         end one actor now (an injected failure: SIGKILL, or ray.kill)

Both kinds hand the runtime the same things: a command queue per actor (replaced
when the actor restarts), one results queue that yields only the messages of the
actors' current incarnations (``executor.processes.channels``), ``failure()``, ``dead()``,
``restart()``, ``kill()`` and ``stop()``. The learner and the coordinator stay in
the calling process either way; weights travel over torch.distributed, whose
rendezvous is the learner's address (``host``).
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
from typing import Any, Protocol

from ...scenarios.spec.scenario import Scenario
from .actor import ActorSpec, actor_main
from .channels import Pickled, PipeResults, PipeSender, Tagged, TaggedResults
from .lifetime import die_with_parent


class Workers(Protocol):
    host: str  # address the actors reach the learner at (process-group rendezvous)
    commands: list[Any]  # one queue per actor: put(); replaced when the actor restarts
    results: Any  # the current incarnations' messages: get(timeout), get_nowait()

    def start(self, specs: list[ActorSpec]) -> None: ...
    def failure(self) -> str | None: ...
    def dead(self) -> dict[int, str]: ...
    def restart(self, spec: ActorSpec) -> None: ...
    def kill(self, index: int) -> None: ...
    def stop(self) -> None: ...


#: What an actor imports before it generates, loaded once into the forkserver that local actors fork from.
ACTOR_MODULES = [
    "asyncrl.executor.processes.actor",
    "asyncrl.executor.generation.engine",
    "asyncrl.executor.generation.models",
]


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
    """One process per engine on this machine, forked from the forkserver, each with its own results pipe."""

    host = "127.0.0.1"

    def __init__(self, engines: int) -> None:
        self.context = actor_context()
        self.commands = [self.context.Queue() for _ in range(engines)]
        self.results = PipeResults()
        self.processes: list[Any] = [None] * engines

    def start(self, specs: list[ActorSpec]) -> None:
        for spec in specs:
            self._start(spec)

    def _start(self, spec: ActorSpec) -> None:
        reader, writer = self.context.Pipe(duplex=False)
        args = (spec, self.commands[spec.index], writer)
        process = self.context.Process(target=_local_actor, args=args, daemon=True, name=f"asyncrl-actor-{spec.index}")
        process.start()
        writer.close()  # the actor holds the only writing end: its exit ends the pipe
        self.processes[spec.index] = process
        self.results.add(spec.index, reader)

    def failure(self) -> str | None:
        for index, process in enumerate(self.processes):
            if process is not None and process.exitcode is not None:
                return f"actor {index} exited with code {process.exitcode}"
        return None

    def dead(self) -> dict[int, str]:
        found = {}
        for index in self.results.ended:
            process = self.processes[index]
            process.join(timeout=5)  # its pipe ended: it has exited, or is exiting
            found[index] = f"actor {index} exited with code {process.exitcode}"
        return found

    def restart(self, spec: ActorSpec) -> None:
        old = self.commands[spec.index]
        old.cancel_join_thread()  # commands the dead actor never read: dropped, not flushed at exit
        old.close()
        self.commands[spec.index] = self.context.Queue()
        self._start(spec)

    def kill(self, index: int) -> None:
        pid = self.processes[index].pid
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)

    def stop(self) -> None:
        for process in self.processes:
            if process is None:
                continue
            process.join(timeout=10)
            if process.is_alive():
                process.terminate()
                process.join(timeout=5)
        self.results.close()


def _local_actor(spec: ActorSpec, commands: Any, results: Any) -> None:
    """A local actor process: it dies with this one (``executor.processes.lifetime``), then runs the actor loop."""
    die_with_parent()
    actor_main(spec, commands, PipeSender(results))


class _ActorHost:
    """The body of a Ray actor: runs one actor loop until told to stop."""

    def run(self, spec: ActorSpec, commands: Any, results: Any) -> None:
        actor_main(spec, commands, Tagged(results, spec.incarnation))


class RayActors:
    """One Ray actor per engine, packed with a placement group; joins ``RAY_ADDRESS`` or starts a local Ray.

    The queues live on this node (the driver's), so losing another node loses none of them; a restarted
    actor takes its bundle back (Ray places the bundles of a lost node again where there is room).
    """

    def __init__(self, engines: int, scenario: Scenario, device: str) -> None:
        import ray
        from ray.util.queue import Queue
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        if not ray.is_initialized():
            ray.init(address=os.environ.get("RAY_ADDRESS"), include_dashboard=False, log_to_driver=False)
        self.ray = ray
        self.host = ray.util.get_node_ip_address()
        here = NodeAffinitySchedulingStrategy(node_id=ray.get_runtime_context().get_node_id(), soft=False)
        self._new_queue = lambda: Pickled(Queue(actor_options={"scheduling_strategy": here, "num_cpus": 0}))
        self.commands = [self._new_queue() for _ in range(engines)]
        self.incarnations = [0] * engines
        self.results = TaggedResults(self._new_queue(), self.incarnations)
        gpus = 1 if device == "cuda" else 0
        cpus = 0 if gpus else scenario.cluster.devices_per_engine
        self.bundle = {"CPU": cpus, "GPU": gpus} if gpus else {"CPU": cpus}
        self.group = ray.util.placement_group([self.bundle] * engines, strategy="PACK")
        self.handles: list[Any] = [None] * engines
        self.runs: list[Any] = [None] * engines

    def start(self, specs: list[ActorSpec]) -> None:
        ready, _ = self.ray.wait([self.group.ready()], timeout=120)
        if not ready:
            raise RuntimeError(f"Ray cannot place {len(specs)} engines of {self.bundle}; too few resources")
        for spec in specs:
            self._start(spec)
        for queue in [*self.commands, self.results.results]:
            queue.qsize()  # each queue is an actor: wait until it is up, before the run's clock starts

    def _start(self, spec: ActorSpec) -> None:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        host = self.ray.remote(num_cpus=self.bundle["CPU"], num_gpus=self.bundle.get("GPU", 0))(_ActorHost)
        strategy = PlacementGroupSchedulingStrategy(placement_group=self.group, placement_group_bundle_index=spec.index)
        handle = host.options(scheduling_strategy=strategy, name=None).remote()
        self.handles[spec.index] = handle
        self.runs[spec.index] = handle.run.remote(spec, self.commands[spec.index], self.results.results)

    def failure(self) -> str | None:
        dead = self.dead()
        return dead[min(dead)] if dead else None

    def dead(self) -> dict[int, str]:
        runs = [run for run in self.runs if run is not None]
        done, _ = self.ray.wait(runs, num_returns=len(runs), timeout=0)
        found = {}
        for ref in done:
            index = self.runs.index(ref)
            try:
                self.ray.get(ref)
            except Exception as exc:  # the actor's own exception, or Ray's report of a dead actor
                found[index] = f"actor {index} failed: {str(exc).splitlines()[0]}"
            else:
                found[index] = f"actor {index} exited"
        return found

    def restart(self, spec: ActorSpec) -> None:
        self.incarnations[spec.index] = spec.incarnation  # its predecessor's messages are stale from now on
        with contextlib.suppress(Exception):
            self.ray.kill(self.handles[spec.index], no_restart=True)
        self.commands[spec.index] = self._new_queue()
        self._start(spec)

    def kill(self, index: int) -> None:
        self.ray.kill(self.handles[index], no_restart=True)

    def stop(self) -> None:
        self.ray.wait(self.runs, num_returns=len(self.runs), timeout=10)
        for handle in self.handles:
            with contextlib.suppress(Exception):
                self.ray.kill(handle)
        self.ray.util.remove_placement_group(self.group)


def make_workers(runtime: str, engines: int, scenario: Scenario, device: str) -> Workers:
    if runtime == "local":
        return LocalProcesses(engines)
    if runtime == "ray":
        return RayActors(engines, scenario, device)
    raise ValueError(f"runtime: {runtime!r}; use local or ray")
