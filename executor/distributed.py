"""The learner's side of the torch.distributed process group that carries weights to the actors.

    learner (rank 0) ──rendezvous_address(host)──► "tcp://host:port" ──in each ActorSpec──► actors (rank 1..E)
                       a socket bound to host (not all interfaces) and listening, kept until the group forms
    join_process_group: the learner's TCPStore serves on that socket (master_listen_fd); init_process_group
                        in a thread, while the main thread watches the actors (one that dies before joining
                        ends the wait)
    leave_process_group: destroy the group, if there is one, and close the socket

Only weights travel over this group (``executor.weights``); commands and
results go through the workers' queues. The store listens on the rendezvous
address only (127.0.0.1 for local runs), and the port is taken by the socket
from the start, so no other process can grab it between choosing and binding.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

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
    from asyncrl.executor.weights import LEARNER_RANK

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

    joining = threading.Thread(target=join, name="asyncrl-join", daemon=True)
    joining.start()
    deadline = time.time() + timeout_s
    while joining.is_alive():
        joining.join(timeout=0.2)
        watch()
        if time.time() > deadline:
            raise RuntimeError(f"actors did not join the process group within {timeout_s:.0f} s")
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


def leave_process_group() -> None:
    """Destroy the process group, if there is one, and close the sockets of rendezvous addresses never joined."""
    import torch.distributed as dist

    if dist.is_initialized():
        with contextlib.suppress(Exception):
            dist.destroy_process_group()
    while _LISTENERS:
        _LISTENERS.popitem()[1].close()
