"""Checkpoints every ``run.checkpoint_every`` steps, and ``--resume`` from the last one.

    save(out, step, learner, versions)
      learner ──save_checkpoint──► out/checkpoint/learner/            weights, optimizer, RNG states, step
      versions an actor may still load ──► out/checkpoint/versions.safetensors
      (the runtime then writes the record with status "checkpoint")

    resume(out, learner) ──► Resumed(step, previous, versions)
      out/checkpoint/learner/ ──load_checkpoint──► learner, step
      out/events.parquet, metrics.parquet ──► previous: the record of the steps before ``step``
      out/checkpoint/versions.safetensors ──► versions, for Coordinator.restore_versions

A resumed run starts at group ``step * batch_groups``; ``skip_groups`` moves
the length stream past the groups before it so each group keeps its lengths.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from asyncrl.executor.record import PreviousRun
from asyncrl.scenarios.loading import ScenarioError

if TYPE_CHECKING:
    import torch
    from asyncrl.executor.learner import Learner
    from asyncrl.executor.work import WorkSource

CHECKPOINT_DIR = "checkpoint"


@dataclass
class Resumed:
    """Where a run starts: step 0 with nothing before it, or the last checkpoint of a previous run."""

    step: int = 0
    previous: PreviousRun = field(default_factory=PreviousRun.empty)
    versions: dict[int, torch.Tensor] = field(default_factory=dict)


def save(out: Path, step: int, learner: Learner, versions: dict[int, torch.Tensor]) -> None:
    """Save the learner at ``step`` and the flat weights of ``versions``."""
    from safetensors.torch import save_file

    checkpoint = out / CHECKPOINT_DIR
    learner.save_checkpoint(checkpoint / "learner", step)
    save_file({str(v): w.cpu().contiguous() for v, w in versions.items()}, str(checkpoint / "versions.safetensors"))


def resume(out: Path, learner: Learner, staging: str = "cpu") -> Resumed:
    """Load ``learner`` from the checkpoint in ``out``, with what the run recorded before it.

    The saved weight versions go to ``staging``, where the sync backend sends from (NCCL: the learner's GPU).
    """
    checkpoint = out / CHECKPOINT_DIR
    if not (checkpoint / "learner").is_dir():
        raise ScenarioError(f"--resume: no checkpoint in {out} (set run.checkpoint_every)")
    step = learner.load_checkpoint(checkpoint / "learner")
    return Resumed(step, PreviousRun.load(out, step), _load_versions(checkpoint, staging))


def skip_groups(source: WorkSource, groups: int) -> None:
    """Advance the length stream past the groups of steps already trained, so group i keeps its lengths."""
    for _ in range(groups):
        source._lengths.next_group()


def _load_versions(checkpoint: Path, staging: str) -> dict[int, torch.Tensor]:
    from safetensors.torch import load_file

    path = checkpoint / "versions.safetensors"
    return {int(v): w for v, w in load_file(str(path), device=staging).items()} if path.exists() else {}
