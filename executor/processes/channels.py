"""How the actors' results reach the learner so that a dead actor's messages never outlive it.

    local:  actor i ──PipeSender(its own pipe)──► PipeResults ──get()──► the receiver thread
                                                  (one pipe per actor incarnation; its end of file, read after
                                                  every message it sent, says the actor is gone)
    Ray:    actor i ──Tagged(queue, incarnation)──► one Ray queue ──TaggedResults.get()──► the receiver thread
                                                  (messages of an incarnation that is no longer current are dropped)
            commands ──Pickled(a Ray queue per actor)──► actor i

A Ray queue is itself an actor, and it unpickles what it is given: a message holding an
``executor.generation.engine.Request`` made it import torch and transformers (seconds, on the run's clock,
for the first commands). ``Pickled`` hands it bytes instead.

Both hand the receiver the messages of the actors' current incarnations only, so when an actor is
declared dead (``executor.processes.restarts``) nothing it sent can still arrive and be counted: on a pipe its
messages all come before its end of file; on the shared Ray queue, the restart makes its incarnation
stale first. One pipe per actor also means a process killed in the middle of a write (SIGKILL, the OOM
killer) damages its own pipe only, never a queue the other actors share.
"""

from __future__ import annotations

import pickle
import queue
import time
from multiprocessing.connection import Connection, wait
from typing import Any


class PipeSender:
    """An actor's end of its results pipe, with a queue's ``put``."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection

    def put(self, message: Any) -> None:
        self.connection.send(message)


class PipeResults:
    """The learner's ends of the actors' results pipes, read as one queue (``get``, ``get_nowait``).

    A pipe that ends (its actor exited, or died mid-message) is closed and its actor listed in ``ended``.
    Only one thread reads at a time: the starting thread, then the receiver.
    """

    def __init__(self) -> None:
        self._pipes: dict[Connection, int] = {}
        self._pending: list[Any] = []
        self.ended: set[int] = set()  # actors whose current pipe has ended

    def add(self, actor: int, connection: Connection) -> None:
        """Read ``actor``'s (new) pipe from now on."""
        self.ended.discard(actor)
        self._pipes[connection] = actor

    def get(self, timeout: float | None = None) -> Any:
        """The next message; queue.Empty after ``timeout`` seconds without one."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._pending:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not self._pipes:
                time.sleep(left or 0.0)
                raise queue.Empty
            ready = wait(list(self._pipes), left)
            if not ready:
                raise queue.Empty
            for connection in ready:
                self._read(connection)  # type: ignore[arg-type]
        return self._pending.pop(0)

    def get_nowait(self) -> Any:
        return self.get(timeout=0.0)

    def _read(self, connection: Connection) -> None:
        try:
            self._pending.append(connection.recv())
        except (EOFError, OSError, pickle.UnpicklingError):
            self.ended.add(self._pipes.pop(connection))
            connection.close()

    def close(self) -> None:
        for connection in self._pipes:
            connection.close()
        self._pipes.clear()


class Pickled:
    """A Ray queue that carries its items as pickled bytes (see the module docstring)."""

    def __init__(self, queue: Any) -> None:
        self.queue = queue

    def put(self, item: Any) -> None:
        self.queue.put(pickle.dumps(item))

    def get(self, timeout: float | None = None) -> Any:
        return pickle.loads(self.queue.get(timeout=timeout))

    def get_nowait(self) -> Any:
        return pickle.loads(self.queue.get_nowait())

    def qsize(self) -> int:
        return int(self.queue.qsize())


class Tagged:
    """An actor's end of the shared Ray queue: every message goes with the actor's incarnation."""

    def __init__(self, results: Pickled, incarnation: int) -> None:
        self.results, self.incarnation = results, incarnation

    def put(self, message: Any) -> None:
        self.results.put((self.incarnation, message))


class TaggedResults:
    """The shared Ray queue, read as the messages of the actors' current incarnations only."""

    def __init__(self, results: Pickled, incarnations: list[int]) -> None:
        self.results = results
        self.incarnations = incarnations  # per actor, the current one (the caller updates it)

    def get(self, timeout: float | None = None) -> Any:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            incarnation, message = self.results.get(timeout=left)
            if incarnation == self.incarnations[message.actor]:
                return message

    def get_nowait(self) -> Any:
        while True:
            incarnation, message = self.results.get_nowait()
            if incarnation == self.incarnations[message.actor]:
                return message
