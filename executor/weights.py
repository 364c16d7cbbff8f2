"""Weight synchronization: a state dict as one flat tensor, sent learner → actor over torch.distributed.

    learner: state_dict ──flatten──► flat (one tensor per version) ──isend(dst=actor rank)──┐
    actor:   flat buffer ◄──recv(src=0)──────────────────────────────────────────────────────┘
             ──unflatten──► state_dict ──engine.load_weights(version)

One message per synchronization: the actor knows the layout (names, shapes,
dtypes) from its own copy of the model, so only the numbers travel. gloo on
CPU; NCCL on CUDA when each process has its own GPU (NCCL cannot pair two
processes on one device), else gloo through host memory.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.distributed as dist

LEARNER_RANK = 0


@dataclass(frozen=True)
class WeightLayout:
    """Names, shapes and dtype of a state dict, enough to rebuild it from a flat tensor."""

    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    dtype: torch.dtype

    @classmethod
    def of(cls, state_dict: dict[str, torch.Tensor]) -> WeightLayout:
        dtypes = {tensor.dtype for tensor in state_dict.values()}
        if len(dtypes) != 1:
            raise ValueError(f"weights mix dtypes {sorted(map(str, dtypes))}; sync needs one")
        return cls(tuple(state_dict), tuple(tuple(t.shape) for t in state_dict.values()), dtypes.pop())

    @property
    def numel(self) -> int:
        return sum(math.prod(shape) for shape in self.shapes)

    def flatten(self, state_dict: dict[str, torch.Tensor]) -> torch.Tensor:
        return torch.cat([state_dict[name].detach().reshape(-1) for name in self.names]).contiguous()

    def unflatten(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        sizes = [math.prod(shape) for shape in self.shapes]
        pieces = torch.split(flat, sizes)
        return {name: piece.view(shape) for name, piece, shape in zip(self.names, pieces, self.shapes, strict=True)}

    def empty(self, device: torch.device | str) -> torch.Tensor:
        return torch.empty(self.numel, dtype=self.dtype, device=device)


def sync_backend(device: str, processes: int) -> str:
    """NCCL when every process has a GPU of its own; otherwise gloo, with weights staged in host memory."""
    if device == "cuda" and torch.cuda.device_count() >= processes:
        return "nccl"
    return "gloo"


def staging_device(backend: str, device: str | torch.device) -> str | torch.device:
    """Where a flat weight tensor must live to travel over ``backend``."""
    return device if backend == "nccl" else "cpu"


def send_weights(flat: torch.Tensor, actor_rank: int) -> dist.Work:
    """Start sending one version to an actor; the returned work completes when it has received it."""
    return dist.isend(flat, dst=actor_rank)


def receive_weights(buffer: torch.Tensor) -> torch.Tensor:
    dist.recv(buffer, src=LEARNER_RANK)
    return buffer
