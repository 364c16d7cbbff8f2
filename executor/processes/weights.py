"""Weight synchronization: a state dict as one flat tensor, sent learner → actor over torch.distributed.

    learner: state_dict ──flatten──► flat (one tensor per version) ──isend(dst=actor rank)──┐
    actor:   flat buffer ◄──recv(src=0)──────────────────────────────────────────────────────┘
             ──unflatten──► state_dict ──engine.load_weights(version)

One message per synchronization: the actor knows the layout (names, shapes,
dtype) from its own copy of the model, so only the numbers travel, in the
engines' dtype: the learner's fp32 master weights are cast while they are
flattened (a bf16 run sends 2 bytes per weight). gloo on CPU; NCCL on CUDA
when each process has its own GPU (NCCL cannot pair two processes on one
device), else gloo through host memory (``executor.processes.placement``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, cast

import torch
import torch.distributed as dist

LEARNER_RANK = 0
MESSAGE_BYTES = 256 * 2**20  # weights travel in messages of at most this size, far from any 2 GiB limit


@dataclass(frozen=True)
class WeightLayout:
    """Names, shapes and dtype of a state dict, enough to rebuild it from a flat tensor."""

    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    dtype: torch.dtype

    @classmethod
    def of(cls, state_dict: dict[str, torch.Tensor], dtype: torch.dtype | None = None) -> WeightLayout:
        """The layout of ``state_dict``, sent as ``dtype`` (default: the weights' own, which must be one)."""
        dtypes = {tensor.dtype for tensor in state_dict.values()}
        if dtype is None and len(dtypes) != 1:
            raise ValueError(f"weights mix dtypes {sorted(map(str, dtypes))}; sync needs one")
        shapes = tuple(tuple(t.shape) for t in state_dict.values())
        return cls(tuple(state_dict), shapes, dtype if dtype is not None else dtypes.pop())

    @property
    def numel(self) -> int:
        return sum(math.prod(shape) for shape in self.shapes)

    def flatten(self, state_dict: dict[str, torch.Tensor], device: torch.device | str | None = None) -> torch.Tensor:
        """One tensor of the layout's dtype on ``device`` (default: the weights'), each weight cast as it is copied."""
        first = state_dict[self.names[0]]
        flat = self.empty(first.device if device is None else device)
        for name, piece in zip(self.names, self._pieces(flat), strict=True):
            piece.copy_(state_dict[name].detach().reshape(-1))
        return flat

    def unflatten(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        pieces = self._pieces(flat)
        return {name: piece.view(shape) for name, piece, shape in zip(self.names, pieces, self.shapes, strict=True)}

    def _pieces(self, flat: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.split(flat, [math.prod(shape) for shape in self.shapes])

    def empty(self, device: torch.device | str) -> torch.Tensor:
        return torch.empty(self.numel, dtype=self.dtype, device=device)


def staging_device(backend: str, device: str | torch.device) -> str | torch.device:
    """Where a flat weight tensor must live to travel over ``backend``."""
    return device if backend == "nccl" else "cpu"


class Sending:
    """The messages of one version on their way to an actor: complete when every piece has been received."""

    def __init__(self, works: list[dist.Work]) -> None:
        self.works = works

    def is_completed(self) -> bool:
        return all(work.is_completed() for work in self.works)

    def wait(self) -> None:
        for work in self.works:
            work.wait()


def send_weights(flat: torch.Tensor, actor_rank: int, group: Any = None) -> Sending:
    """Start sending one version to an actor, in pieces of at most ``MESSAGE_BYTES`` (1.5B bf16 weights are 3 GB),
    over the default group or over ``group``, the actor's pair (``executor.processes.distributed.pair_group``)."""
    if group is not None:
        return Sending([group.send([piece], actor_rank, 0) for piece in _pieces(flat)])
    works = [dist.isend(piece, dst=actor_rank) for piece in _pieces(flat)]
    return Sending(cast("list[dist.Work]", works))  # isend returns None only on a rank outside the group


def receive_weights(buffer: torch.Tensor, group: Any = None) -> torch.Tensor:
    """Receive one version into ``buffer``, piece by piece as ``send_weights`` sent it (over ``group`` if given)."""
    for piece in _pieces(buffer):
        if group is not None:
            group.recv([piece], LEARNER_RANK, 0).wait()
        else:
            dist.recv(piece, src=LEARNER_RANK)
    return buffer


def _pieces(flat: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return torch.split(flat, max(1, MESSAGE_BYTES // flat.element_size()))
