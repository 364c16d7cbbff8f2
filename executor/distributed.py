"""The learner's side of the torch.distributed process group that carries weights to the actors.

    learner (rank 0) ──free_port()──► rendezvous "tcp://host:port" ──in each ActorSpec──► actors (rank 1..E)
    join_process_group: init_process_group in a thread, while the main thread
                        watches the actors (one that dies before joining ends the wait)
    leave_process_group: destroy the group, if there is one

Only weights travel over this group (``executor.weights``); commands and
results go through the workers' queues.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable


def rendezvous_address(host: str) -> str:
    """The process group's ``init_method``: a free TCP port on the learner's host."""
    return f"tcp://{host}:{free_port()}"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("", 0))
        return int(probe.getsockname()[1])


def join_process_group(
    backend: str, rendezvous: str, world_size: int, watch: Callable[[], None], timeout_s: float
) -> None:
    """Join as the learner, in a thread, so an actor that dies before joining is noticed.

    ``watch`` runs every 0.2 s while joining and raises if an actor failed.
    """
    import torch.distributed as dist
    from asyncrl.executor.weights import LEARNER_RANK

    failure: list[BaseException] = []

    def join() -> None:
        try:
            dist.init_process_group(backend, init_method=rendezvous, rank=LEARNER_RANK, world_size=world_size)
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


def leave_process_group() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        with contextlib.suppress(Exception):
            dist.destroy_process_group()
