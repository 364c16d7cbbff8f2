"""The actors' lifecycle, seen from the learner: spawn them, connect, wait until ready, relay their messages, stop.

    spawn()       make_workers ──► workers.start(one ActorSpec per engine)    local processes or Ray actors
    connect()     join_process_group (rank 0) ◄── actors join as ranks 1..E    weights travel here later
    wait_ready()  results ──Ready(i) from every actor──► return              ActorFailed(i, tb): RuntimeError
    go(t0, coordinator)
                  commands ──Go(t0)──► each actor
                  receiver thread: results ──► forward_messages ──► coordinator.on_messages
    check()       a dead worker ──► RuntimeError (while connecting, with the traceback it sent)
    stop()        receiver leaves ──► Stop() to each actor ──► workers.stop ──► leave_process_group

Everything here that reads the actors' messages (``wait_ready``,
``_startup_traceback``, ``forward_messages``) is in this module; what the
messages mean to the schedule is the coordinator's business.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from typing import TYPE_CHECKING, Any

from asyncrl.executor.distributed import join_process_group, leave_process_group, rendezvous_address
from asyncrl.executor.messages import ActorFailed, Go, Stop
from asyncrl.executor.placement import Placement
from asyncrl.scenarios.scenario import Scenario

if TYPE_CHECKING:
    from asyncrl.executor.coordinator import Coordinator
    from asyncrl.executor.workers import Workers

READY_TIMEOUT_S = 300.0
#: How often a busy actor looks for commands: every decode step on local queues; Ray's queues
#: are remote calls, so at most every 5 ms there.
POLL_INTERVAL_S = {"local": 0.0, "ray": 0.005}


class ActorProcesses:
    """One actor per engine, wherever ``runtime`` (local or ray) runs them, and the thread that reads their results."""

    def __init__(self, scenario: Scenario, placement: Placement, runtime: str) -> None:
        self.scenario, self.placement, self.runtime = scenario, placement, runtime
        self.device = "cuda" if placement.learner.startswith("cuda") else "cpu"
        self.engines = scenario.cluster.engines
        self.world_size = self.engines + 1  # the learner is rank 0, actor i is rank i + 1
        self.backend = placement.backend
        self.workers: Workers | None = None
        self.commands: list[Any] = []
        self.results: Any = None
        self._rendezvous = ""
        self._stop_receiving = threading.Event()
        self._receiver: threading.Thread | None = None

    def spawn(self) -> None:
        """Start one actor per engine; they join the process group at a fresh rendezvous on the learner's host."""
        from asyncrl.executor.actor import ActorSpec
        from asyncrl.executor.workers import make_workers

        self.workers = make_workers(self.runtime, self.engines, self.scenario, self.device)
        self.commands, self.results = self.workers.commands, self.workers.results
        self._rendezvous = rendezvous_address(self.workers.host)
        poll = POLL_INTERVAL_S[self.runtime]
        self.workers.start(
            [
                ActorSpec(
                    i, self.scenario, self.placement.engines[i], self.backend, self._rendezvous, self.world_size, poll
                )
                for i in range(self.engines)
            ]
        )

    def connect(self) -> None:
        """Join the process group the actors are joining; an actor that dies meanwhile ends the wait."""
        join_process_group(
            self.backend, self._rendezvous, self.world_size, lambda: self.check(starting=True), READY_TIMEOUT_S
        )

    def wait_ready(self) -> None:
        """Block until every actor has its engine up; one that failed while starting raises with its traceback."""
        ready: set[int] = set()
        deadline = time.time() + READY_TIMEOUT_S
        while len(ready) < self.engines:
            self.check()
            try:
                message = self.results.get(timeout=0.5)
            except queue.Empty:
                if time.time() > deadline:
                    raise RuntimeError(f"actors not ready after {READY_TIMEOUT_S:.0f} s") from None
                continue
            if isinstance(message, ActorFailed):
                raise RuntimeError(f"actor {message.actor} failed while starting:\n{message.traceback}")
            ready.add(message.actor)

    def go(self, t0: float, coordinator: Coordinator) -> None:
        """Start the actors' clocks at ``t0`` and, from now on, hand every message they send to ``coordinator``."""
        for commands in self.commands:
            commands.put(Go(t0))
        self._receiver = threading.Thread(
            target=forward_messages,
            args=(self.results, coordinator, self._stop_receiving),
            name="asyncrl-receiver",
            daemon=True,
        )
        self._receiver.start()

    def check(self, starting: bool = False) -> None:
        """Raise RuntimeError if a worker died; while ``starting``, with the traceback it sent if it sent one."""
        failure = self.workers.failure() if self.workers is not None else None
        if failure:
            raise RuntimeError(f"{failure}{self._startup_traceback(starting)}")

    def stop_receiving(self) -> None:
        """Tell the receiver thread to leave; the coordinator gets no more messages."""
        self._stop_receiving.set()

    def stop(self) -> None:
        """Stop the receiver, then the actors, then leave the process group; safe at any point of start-up."""
        self._stop_receiving.set()
        if self._receiver is not None:
            self._receiver.join(timeout=2)  # it polls every 0.2 s; let it leave before its queue goes
        for commands in self.commands:
            with contextlib.suppress(Exception):
                commands.put(Stop())
        if self.workers is not None:
            self.workers.stop()
        leave_process_group()

    def _startup_traceback(self, starting: bool) -> str:
        """The traceback a dead actor sent, if it sent one before the coordinator started reading."""
        if not starting:
            return ""
        try:
            message = self.results.get(timeout=1.0)
        except queue.Empty:
            return ""
        return f":\n{message.traceback}" if isinstance(message, ActorFailed) else ""


def forward_messages(results: Any, coordinator: Coordinator, stop: threading.Event) -> None:
    """The receiver thread: hand the actors' messages to the coordinator, all that are waiting at
    once (it decides once per batch, as the simulator does per instant), until ``stop`` is set."""
    while not stop.is_set():
        messages = []
        try:
            messages.append(results.get(timeout=0.2))
            while True:
                messages.append(results.get_nowait())
        except queue.Empty:
            pass
        except (EOFError, OSError):
            return  # the queue closed under us: the run is ending
        if messages:
            coordinator.on_messages(messages)
