"""Checkpoints every ``run.checkpoint_every`` steps, and ``--resume`` from the last one.

    (the runtime first writes the record so far, and checkpoint/progress.json)
    save(out, step, learner, versions)
      learner ──save_checkpoint──► out/checkpoint/learner.partial/      weights, optimizer, RNG states, step
      versions an actor may still load ──► learner.partial/versions.safetensors
      commit: learner/ ──rename──► learner.old/, learner.partial/ ──rename──► learner/, learner.old/ removed

    check(out, scenario) before any actor starts: the files are there and load (tensors only, no code), and
                         are a run of this scenario (run.steps and run.checkpoint_every may change)
    resume(out, learner) ──► Resumed(step, previous, versions)
      out/checkpoint/learner/ ──load_checkpoint──► learner, step
      out/events.parquet, metrics.parquet ──► previous: the record of the steps before ``step``
      out/checkpoint/learner/versions.safetensors ──► versions, for Coordinator.restore_versions

Exactly once across a kill at any moment (SIGKILL included): the record is written before the checkpoint, so it
always reaches at least the checkpoint's step (``PreviousRun.load`` keeps only the steps before it), and the
checkpoint is one directory committed by renames. A kill between the two renames leaves learner.old/ and a whole
learner.partial/ and no learner/; ``settle`` (run before any reading) finishes that commit.

A resumed run starts at group ``step * batch_groups``; ``skip_groups`` moves
the length stream past the groups before it so each group keeps its lengths.
A checkpoint that is missing, truncated or not what this scenario's learner
saved is a ScenarioError naming ``resume`` (the argument) and the file (exit 2).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import pandas as pd

from ...scenarios.spec.loading import ScenarioError
from ..record import PreviousRun

if TYPE_CHECKING:
    import torch

    from ...scenarios.spec.scenario import Scenario
    from ..tasks.work import WorkSource
    from .learner import Learner

CHECKPOINT_DIR = "checkpoint"
LEARNER_DIR = "learner"  # the committed checkpoint: the learner's files and the weight versions
VERSIONS_FILE = "versions.safetensors"
T = TypeVar("T")


@dataclass
class Resumed:
    """Where a run starts: step 0 with nothing before it, or the last checkpoint of a previous run."""

    step: int = 0
    previous: PreviousRun = field(default_factory=PreviousRun.empty)
    versions: dict[int, torch.Tensor] = field(default_factory=dict)


def save(out: Path, step: int, learner: Learner, versions: dict[int, torch.Tensor]) -> None:
    """Save the learner at ``step`` and the flat weights of ``versions``, as one directory committed whole."""
    from safetensors.torch import save_file

    checkpoint = out / CHECKPOINT_DIR
    settle(checkpoint)
    current, staging, old = _slots(checkpoint)
    shutil.rmtree(staging, ignore_errors=True)
    learner.save_checkpoint(staging, step)
    save_file({str(v): w.cpu().contiguous() for v, w in versions.items()}, str(staging / VERSIONS_FILE))
    shutil.rmtree(old, ignore_errors=True)
    if current.exists():
        current.rename(old)
    staging.rename(current)
    shutil.rmtree(old, ignore_errors=True)


def settle(checkpoint: Path) -> None:
    """Finish a commit that a kill interrupted between its renames (see the module's docstring)."""
    current, staging, old = _slots(checkpoint)
    if not current.exists() and old.is_dir() and staging.is_dir():
        staging.rename(current)


def has_checkpoint(out: Path) -> bool:
    """Whether ``out`` holds a committed checkpoint (after settling an interrupted commit)."""
    settle(out / CHECKPOINT_DIR)
    return (out / CHECKPOINT_DIR / LEARNER_DIR).is_dir()


def _slots(checkpoint: Path) -> tuple[Path, Path, Path]:
    """The committed checkpoint, the one being written, and the one being replaced."""
    return checkpoint / LEARNER_DIR, checkpoint / f"{LEARNER_DIR}.partial", checkpoint / f"{LEARNER_DIR}.old"


#: What a resumed run may change of the scenario it continues: how long it runs, and how often it checkpoints.
RESUMABLE_CHANGES = frozenset({"run.steps", "run.checkpoint_every"})


def check(out: Path, scenario: Scenario | None = None) -> None:
    """ScenarioError (``resume: <file>: ...``) unless ``out`` holds a checkpoint whose files all load, of a run
    of ``scenario`` (the same scenario but for ``RESUMABLE_CHANGES``)."""
    import torch
    from safetensors import safe_open

    from .learner_checkpoint import OPTIMIZER_FILE, POLICY_FILE, STATE_FILE

    learner = out / CHECKPOINT_DIR / LEARNER_DIR
    if not has_checkpoint(out):
        raise ScenarioError(f"resume: no checkpoint in {out} (set run.checkpoint_every)")
    if scenario is not None:
        _same_scenario(out, scenario)
    for name in (OPTIMIZER_FILE, STATE_FILE):  # mapped, not read: the tensors load once, in resume
        _loads(learner / name, lambda path: torch.load(path, map_location="cpu", weights_only=True, mmap=True))
    _loads(learner / POLICY_FILE, lambda path: safe_open(str(path), framework="pt").keys())
    versions = learner / VERSIONS_FILE
    if versions.exists():
        _loads(versions, lambda path: safe_open(str(path), framework="pt").keys())
    for name in ("events.parquet", "metrics.parquet"):
        _loads(out / name, lambda path: pd.read_parquet(path, columns=["step"]))


def _same_scenario(out: Path, scenario: Scenario) -> None:
    """ScenarioError naming the fields in which ``scenario`` differs from the one ``out`` recorded (its
    scenario.yaml): a resume continues the same run, and its record keeps the first steps' scenario."""
    from ...scenarios.record.record import RunRecordError, read_scenario

    try:
        recorded = read_scenario(out)
    except RunRecordError as exc:
        raise ScenarioError(f"resume: {exc}") from None
    differ = sorted(set(_differences(_dotted(recorded.resolved()), _dotted(scenario.resolved()))) - RESUMABLE_CHANGES)
    if differ:
        shown = ", ".join(differ[:4]) + (f" and {len(differ) - 4} more" if len(differ) > 4 else "")
        raise ScenarioError(
            f"resume: {out} is a run of {recorded.name}, and this scenario differs from it in {shown} "
            f"(a resume continues the same scenario; only {' and '.join(sorted(RESUMABLE_CHANGES))} may change)"
        )


def _dotted(scenario: Scenario) -> dict[str, object]:
    """The scenario's fields, nested sections flattened to dotted keys."""
    flat: dict[str, object] = {}

    def walk(node: object, prefix: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                walk(value, f"{prefix}{key}.")
        else:
            flat[prefix.rstrip(".")] = node

    walk(scenario.model_dump(mode="json"), "")
    return flat


def _differences(a: dict[str, object], b: dict[str, object]) -> list[str]:
    return [key for key in a.keys() | b.keys() if a.get(key) != b.get(key)]


def resume(out: Path, learner: Learner, staging: str = "cpu") -> Resumed:
    """Load ``learner`` from the checkpoint in ``out`` (see ``check``), with what the run recorded before it.

    The saved weight versions go to ``staging``, where the sync backend sends from (NCCL: the learner's GPU).
    """
    settle(out / CHECKPOINT_DIR)
    directory = out / CHECKPOINT_DIR / LEARNER_DIR
    step = _loads(directory, learner.load_checkpoint)
    previous = _loads(out / "events.parquet", lambda path: PreviousRun.load(out, step))
    versions = _loads(directory, lambda path: _load_versions(path, staging))
    return Resumed(step, previous, versions)


def _loads(path: Path, load: Callable[[Path], T]) -> T:
    """``load(path)``, with any failure as one ScenarioError naming ``resume`` and the file."""
    if not path.exists():
        raise ScenarioError(f"resume: {path} is missing; the checkpoint is incomplete")
    try:
        return load(path)
    except Exception as exc:  # a truncated or foreign file: torch, safetensors and pyarrow each raise their own
        raise ScenarioError(
            f"resume: {path} cannot be loaded ({type(exc).__name__}): truncated, or not this scenario's checkpoint"
        ) from None


def skip_groups(source: WorkSource, groups: int) -> None:
    """Advance the length stream past the groups of steps already trained, so group i keeps its lengths."""
    for _ in range(groups):
        source._lengths.next_group()


def _load_versions(directory: Path, staging: str) -> dict[int, torch.Tensor]:
    from safetensors.torch import load_file

    path = directory / VERSIONS_FILE
    return {int(v): w for v, w in load_file(str(path), device=staging).items()} if path.exists() else {}
