"""The actors' lifecycle, seen from the learner: spawn them, connect, wait until ready, relay their messages, stop.

    spawn()       make_workers ──► workers.start(one ActorSpec per engine)    local processes or Ray actors
    connect()     join_pair(i) for each actor: a weight group of two each     weights travel here later
    wait_ready()  results ──Ready(i) from every actor──► return              ActorFailed(i, tb): RuntimeError
    go(t0, coordinator, restarts)
                  commands ──Go(t0)──► each actor
                  receiver thread: results ──► forward_messages ──► coordinator.on_messages
                                   every pass ──► restarts.watch (deaths, planned failures)
    respawn(i)    a new incarnation of actor i (a new spec, rendezvous and pair), for ``executor.processes.restarts``
    send(w, r)    weights to actor r − 1 over its pair (the coordinator's ``send``)
    check()       while starting: a dead worker ──► RuntimeError (with the traceback it sent)
    stop()        receiver leaves ──► Stop() to each actor ──► workers.stop ──► pairs dropped

Everything here that reads the actors' messages (``wait_ready``,
``_startup_traceback``, ``forward_messages``) is in this module; what the
messages mean to the schedule is the coordinator's business, and what a death
means, ``executor.processes.restarts``'.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
import traceback
from typing import TYPE_CHECKING, Any

from ...scenarios.spec.scenario import Scenario
from .distributed import ACTOR_RANK, join_pair, leave_process_group, rendezvous_address
from .messages import ActorFailed, Go, Ready, Stop
from .placement import Placement

if TYPE_CHECKING:
    import torch

    from .actor import ActorSpec
    from .coordinator import Coordinator
    from .restarts import Restarts
    from .weights import Sending
    from .workers import Workers

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
        self.backend = placement.backend
        self.workers: Workers | None = None
        self.commands: list[Any] = []
        self.results: Any = None
        self.specs: list[ActorSpec] = []
        self.pairs: list[Any] = [None] * self.engines  # each actor's weight group, None while it has none
        self._stop_receiving = threading.Event()
        self._receiver: threading.Thread | None = None
        self._stopped = False

    def spawn(self) -> None:
        """Start one actor per engine, each to join its own weight group at a fresh rendezvous on the learner's host."""
        from .workers import make_workers

        self.workers = make_workers(self.runtime, self.engines, self.scenario, self.device)
        self.commands, self.results = self.workers.commands, self.workers.results
        self.specs = [self._spec(i, incarnation=0) for i in range(self.engines)]
        self.workers.start(self.specs)

    def _spec(self, index: int, incarnation: int) -> ActorSpec:
        from .actor import ActorSpec

        assert self.workers is not None
        rendezvous = rendezvous_address(self.workers.host)
        device, poll = self.placement.engines[index], POLL_INTERVAL_S[self.runtime]
        return ActorSpec(index, self.scenario, device, self.backend, rendezvous, poll, incarnation)

    def connect(self) -> None:
        """Form each actor's weight group; an actor that dies meanwhile ends the wait."""
        for index in range(self.engines):
            self.join(index, lambda: self.check(starting=True))

    def join(self, index: int, watch: Any) -> None:
        """Form actor ``index``'s weight group with its current incarnation; ``watch`` raises to stop waiting.
        A group formed with an incarnation that has died since is dropped at once."""
        rendezvous = self.specs[index].rendezvous
        pair = join_pair(self.backend, rendezvous, watch, READY_TIMEOUT_S)
        if self.specs[index].rendezvous == rendezvous:
            self.pairs[index] = pair
        else:
            with contextlib.suppress(Exception):
                pair.abort()

    def respawn(self, index: int) -> ActorSpec:
        """Start a new incarnation of actor ``index`` (its old one is dead): a fresh command queue, a fresh pair."""
        assert self.workers is not None
        self.drop_pair(index)
        spec = self._spec(index, incarnation=self.specs[index].incarnation + 1)
        self.specs[index] = spec
        self.workers.restart(spec)
        self.commands = self.workers.commands
        return spec

    def drop_pair(self, index: int) -> None:
        """Let go of actor ``index``'s weight group (its actor is gone): sends still pending on it are abandoned."""
        pair, self.pairs[index] = self.pairs[index], None
        if pair is not None:
            with contextlib.suppress(Exception):
                pair.abort()

    def send(self, flat: torch.Tensor, actor_rank: int) -> Sending:
        """Start sending weights to the actor of rank ``actor_rank`` (engine ``actor_rank − 1``) over its pair.

        An actor that has just died (its pair closed) is sent nothing: its death is ``executor.processes.restarts``'
        to find, and its replacement loads the weights anew.
        """
        from .weights import Sending, send_weights

        try:
            return send_weights(flat, ACTOR_RANK, self.pairs[actor_rank - 1])
        except RuntimeError:
            return Sending([])

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

    def go(self, t0: float, coordinator: Coordinator, restarts: Restarts) -> None:
        """Start the actors' clocks at ``t0`` and, from now on, hand every message they send to ``coordinator``
        and every death to ``restarts``."""
        for commands in self.commands:
            commands.put(Go(t0))
        self._receiver = threading.Thread(
            target=forward_messages,
            args=(self.results, coordinator, restarts, self._stop_receiving),
            name="asyncrl-receiver",
            daemon=True,
        )
        self._receiver.start()

    def check(self, starting: bool = False) -> None:
        """While the actors start: RuntimeError if a worker died; while ``starting``, with the traceback it sent
        if it sent one. Once the run goes, deaths are ``executor.processes.restarts``' and this does nothing."""
        if self._receiver is not None:
            return
        failure = self.workers.failure() if self.workers is not None else None
        if failure:
            raise RuntimeError(f"{failure}{self._startup_traceback(starting)}")

    def stop_receiving(self) -> None:
        """Tell the receiver thread to leave; the coordinator gets no more messages."""
        self._stop_receiving.set()

    def stop(self) -> None:
        """Stop the receiver, then the actors, then drop the weight groups; safe at any point of start-up, and
        a second call does nothing (a run that evaluates stops its actors first, ``executor.processes.runtime``)."""
        if self._stopped:
            return
        self._stopped = True
        self._stop_receiving.set()
        if self._receiver is not None:
            self._receiver.join(timeout=2)  # it polls every 0.2 s; let it leave before its queue goes
        for commands in self.commands:
            with contextlib.suppress(Exception):
                commands.put(Stop())
        if self.workers is not None:
            self.workers.stop()
        self.pairs = [None] * self.engines
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


def forward_messages(results: Any, coordinator: Coordinator, restarts: Restarts, stop: threading.Event) -> None:
    """The receiver thread: hand the actors' messages to the coordinator, all that are waiting at
    once (it decides once per batch, as the simulator does per instant), and a restarted actor's
    ``Ready`` to ``restarts``; after each pass, let ``restarts`` look for deaths; until ``stop`` is set.
    Should it fail, the run fails with its traceback (nobody would notice a death otherwise)."""
    try:
        while not stop.is_set():
            messages = _waiting(results, min(0.2, max(0.0, restarts.due_in())))
            if messages is None:
                return  # the queue closed under us: the run is ending
            for message in messages:
                if isinstance(message, Ready):
                    restarts.ready(message.actor)
            rest = [message for message in messages if not isinstance(message, Ready)]
            if rest:
                coordinator.on_messages(rest)
            restarts.watch()
    except Exception:
        coordinator.fail(f"the receiver thread failed:\n{traceback.format_exc()}")


def _waiting(results: Any, timeout: float) -> list[Any] | None:
    """Every message waiting now, after waiting up to ``timeout`` seconds for the first; None if the queue is gone."""
    messages = []
    try:
        messages.append(results.get(timeout=timeout))
        while True:
            messages.append(results.get_nowait())
    except queue.Empty:
        pass
    except (EOFError, OSError):
        return None
    return messages
