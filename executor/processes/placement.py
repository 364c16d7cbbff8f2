"""Which device each process of a run uses, and the backend weights travel over: a pure function, tested on CPU.

    place(device, visible, engines, runtime) ──► Placement(engines=("cuda:0", ...), learner="cuda:2", backend="nccl")

* ``cpu``: every process on the CPU, weights over gloo.
* ``cuda``, local processes (every process sees every GPU of the machine): engine i on ``cuda:i``, the learner on the
  next GPU, ``cuda:<engines>``, when there is one; with fewer GPUs than processes the engines share them round-robin
  and the learner shares ``cuda:0``.
* ``cuda``, Ray: each engine is a Ray actor given one GPU, which it sees alone, as ``cuda:0``; the learner stays in
  the calling process on its ``cuda:0`` (on a machine it shares with actors, leave that GPU out of Ray's).
* backend: NCCL when every process has a GPU of its own (NCCL cannot pair two processes on one device), else gloo,
  with the weights staged in host memory (``staging_device``).

Each process then calls ``torch.cuda.set_device`` on its own device (``use_device``), so NCCL and every tensor made
without an explicit device land there.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Placement:
    engines: tuple[str, ...]  # engine i's device
    learner: str
    backend: str  # torch.distributed backend of the weight sync: nccl or gloo


def place(device: str, visible: int, engines: int, runtime: str = "local") -> Placement:
    """Devices and sync backend of a run with ``engines`` engine processes and ``visible`` GPUs seen by this one."""
    if engines < 1:
        raise ValueError(f"engines: {engines}; a run needs at least one")
    if device == "cpu":
        return Placement(("cpu",) * engines, "cpu", "gloo")
    if device != "cuda":
        raise ValueError(f"device: {device!r}; use cpu or cuda")
    if visible < 1:
        raise ValueError("device: cuda asked for, but torch sees no GPU")
    if runtime == "ray":
        own_gpus = visible >= engines + 1
        return Placement(("cuda:0",) * engines, "cuda:0", "nccl" if own_gpus else "gloo")
    if runtime != "local":
        raise ValueError(f"runtime: {runtime!r}; use local or ray")
    engine_devices = tuple(f"cuda:{index % visible}" for index in range(engines))
    if visible > engines:
        return Placement(engine_devices, f"cuda:{engines}", "nccl")
    return Placement(engine_devices, "cuda:0", "gloo")


def use_device(device: str) -> None:
    """Make ``device`` this process's current CUDA device (nothing on CPU)."""
    if device.startswith("cuda"):
        import torch

        torch.cuda.set_device(device)
