"""The torch.distributed groups that carry weights from the learner to the actors: one pair per actor.

    learner (rank 0) ──rendezvous_address(host)──► "tcp://host:port" ──in actor i's ActorSpec──► actor i (rank 1)
                       a socket bound to host (not all interfaces) and listening, kept until the pair forms
    join_pair:     the learner's TCPStore serves on that socket (master_listen_fd), the pair's group forms in
                   a thread while the caller watches the actor (one that dies before joining ends the wait)
    connect_pair:  the actor's side: a TCPStore client and the same group, rank 1
    pair_group:    a gloo or NCCL group of two, made directly (no global state, as vLLM's stateless groups),
                   so the learner holds one per actor and a restarted actor gets a fresh one

One group per actor, not one world of E + 1 ranks: a process that dies leaves a
world it can never rejoin, while a pair is simply replaced (``executor.processes.restarts``).
Only weights travel over these groups (``executor.processes.weights``); commands and results
go through the workers' queues. Each store listens on its rendezvous address only
(127.0.0.1 for local runs), and the port is taken by the socket from the start, so
no other process can grab it between choosing and binding. ``join_process_group``
and ``leave_process_group`` make a default group instead (the weight-sync probe's).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

LEARNER_RANK = 0

PAIR = 2  # ranks in an actor's weight group: the learner and the actor
ACTOR_RANK = 1
#: Listening sockets of rendezvous addresses handed out and not joined yet, by address.
_LISTENERS: dict[str, socket.socket] = {}


def rendezvous_address(host: str) -> str:
    """The process group's ``init_method``: a port on ``host`` (only that address), bound and listening now."""
    family = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)[0][0]
    listener = socket.create_server((host, 0), family=family, backlog=128)
    port = int(listener.getsockname()[1])
    address = f"tcp://[{host}]:{port}" if family == socket.AF_INET6 else f"tcp://{host}:{port}"
    _LISTENERS[address] = listener
    return address


def join_process_group(
    backend: str, rendezvous: str, world_size: int, watch: Callable[[], None], timeout_s: float
) -> None:
    """Join as the learner, in a thread, so an actor that dies before joining is noticed.

    ``watch`` runs every 0.2 s while joining and raises if an actor failed.
    """
    import torch.distributed as dist

    failure: list[BaseException] = []

    listener = _LISTENERS.pop(rendezvous, None)

    def join() -> None:
        try:
            if listener is None:  # an address made elsewhere: torch binds the store itself
                dist.init_process_group(backend, init_method=rendezvous, rank=LEARNER_RANK, world_size=world_size)
                return
            # The actors join by init_method, under which torch prefixes every key with "default_pg".
            store = dist.PrefixStore("default_pg", _store(rendezvous, listener, world_size))
            dist.init_process_group(backend, store=store, rank=LEARNER_RANK, world_size=world_size)
        except BaseException as exc:  # reported below, in the main thread
            failure.append(exc)

    _wait_for(threading.Thread(target=join, name="asyncrl-join", daemon=True), watch, timeout_s)
    if failure:
        raise failure[0]


def _store(rendezvous: str, listener: socket.socket, world_size: int) -> Any:
    """The learner's TCPStore, serving on ``listener`` (already bound to the rendezvous address); it takes
    over the socket's descriptor and closes it when the group is destroyed."""
    import torch.distributed as dist
    from torch.distributed.constants import default_pg_timeout

    host, _, port = rendezvous.removeprefix("tcp://").rpartition(":")
    return dist.TCPStore(
        host.strip("[]"),
        int(port),
        world_size,
        is_master=True,
        timeout=default_pg_timeout,
        master_listen_fd=listener.detach(),
    )


def pair_group(backend: str, store: Any, rank: int) -> Any:
    """A group of two (the learner, rank 0, and one actor, rank 1) over ``store``, outside torch's global state."""
    import torch.distributed as dist
    from torch.distributed.constants import default_pg_timeout

    if backend == "nccl":
        options = dist.ProcessGroupNCCL.Options()
        options._timeout = default_pg_timeout
        return dist.ProcessGroupNCCL(store, rank, PAIR, options)
    return dist.ProcessGroupGloo(store, rank, PAIR, default_pg_timeout)


def join_pair(backend: str, rendezvous: str, watch: Callable[[], None], timeout_s: float) -> Any:
    """The learner's end of one actor's pair (``rendezvous_address`` made it); ``watch`` runs every 0.2 s while
    the actor joins and raises to stop waiting (the actor died)."""
    listener = _LISTENERS.pop(rendezvous)
    formed: list[Any] = []
    failure: list[BaseException] = []

    def join() -> None:
        try:
            formed.append(pair_group(backend, _store(rendezvous, listener, PAIR), LEARNER_RANK))
        except BaseException as exc:  # reported below, in the calling thread
            failure.append(exc)

    _wait_for(threading.Thread(target=join, name="asyncrl-join-pair", daemon=True), watch, timeout_s)
    if failure:
        raise failure[0]
    return formed[0]


def connect_pair(backend: str, rendezvous: str) -> Any:
    """The actor's end of its pair with the learner."""
    import torch.distributed as dist
    from torch.distributed.constants import default_pg_timeout

    host, _, port = rendezvous.removeprefix("tcp://").rpartition(":")
    store = dist.TCPStore(host.strip("[]"), int(port), PAIR, is_master=False, timeout=default_pg_timeout)
    return pair_group(backend, store, ACTOR_RANK)


def _wait_for(joining: threading.Thread, watch: Callable[[], None], timeout_s: float) -> None:
    joining.start()
    deadline = time.time() + timeout_s
    while joining.is_alive():
        joining.join(timeout=0.2)
        watch()
        if time.time() > deadline:
            raise RuntimeError(f"an actor did not join its weight group within {timeout_s:.0f} s")


def leave_process_group() -> None:
    """Destroy the process group, if there is one, and close the sockets of rendezvous addresses never joined."""
    import torch.distributed as dist

    if dist.is_initialized():
        with contextlib.suppress(Exception):
            dist.destroy_process_group()
    while _LISTENERS:
        _LISTENERS.popitem()[1].close()
