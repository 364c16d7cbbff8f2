"""A checkpoint is committed whole, and after the record: a kill at any moment of a save leaves a resumable run
whose record reaches at least the checkpoint's step (exactly once, SIGKILL included)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")
pytest.importorskip("transformers")

from asyncrl.executor.learning import checkpoint  # noqa: E402 (needs torch)


class Died(BaseException):
    """The process dying at this point of the save (nothing after it runs)."""


class StepLearner:
    """A learner whose checkpoint is one file holding its step, written in two parts like a real one's."""

    def save_checkpoint(self, directory: Path, step: int) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "first").write_text(str(step))
        (directory / "second").write_text(str(step))


def committed_step(out: Path) -> int | None:
    """The committed checkpoint's step, checked whole: both learner parts and the versions agree."""
    if not checkpoint.has_checkpoint(out):
        return None
    directory = out / "checkpoint" / "learner"
    parts = {(directory / name).read_text() for name in ("first", "second")}
    versions = checkpoint._load_versions(directory, "cpu")
    assert len(parts) == 1 and list(versions) == [int(parts.pop())], "a checkpoint mixing two saves"
    return next(iter(versions))


def save(out: Path, step: int) -> None:
    checkpoint.save(out, step, StepLearner(), {step: torch.tensor([float(step)])})  # type: ignore[arg-type]


def count_operations(out: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    """How many file operations (writes, renames, removals) a save over a committed one makes."""
    calls = [0]
    _instrument(monkeypatch, lambda: calls.__setitem__(0, calls[0] + 1))
    save(out, 4)
    monkeypatch.undo()
    return calls[0]


def _instrument(monkeypatch: pytest.MonkeyPatch, before: object) -> None:
    def wrap(function):  # type: ignore[no-untyped-def]
        def wrapped(*args, **kwargs):  # type: ignore[no-untyped-def]
            before()  # type: ignore[operator]
            return function(*args, **kwargs)

        return wrapped

    monkeypatch.setattr(Path, "rename", wrap(Path.rename))
    monkeypatch.setattr(Path, "write_text", wrap(Path.write_text))
    monkeypatch.setattr(shutil, "rmtree", wrap(shutil.rmtree))
    monkeypatch.setattr(safetensors_torch, "save_file", wrap(safetensors_torch.save_file))


def dying_after(operations: int) -> object:
    """A hook that lets ``operations`` file operations run, and dies at the next one."""
    calls = [0]

    def maybe_die() -> None:
        calls[0] += 1
        if calls[0] > operations:
            raise Died

    return maybe_die


def test_a_save_killed_at_any_operation_leaves_the_old_or_the_new_checkpoint_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    save(tmp_path / "probe", 2)
    operations = count_operations(tmp_path / "probe", monkeypatch)
    assert operations >= 6  # the learner's parts, the versions, and the commit's renames and removals
    seen = set()
    for dies_at in range(operations):
        out = tmp_path / f"killed-{dies_at}"
        save(out, 2)
        _instrument(monkeypatch, dying_after(dies_at))
        with pytest.raises(Died):
            save(out, 4)
        monkeypatch.undo()
        seen.add(committed_step(out))
        save(out, 6)  # the run goes on after a resume: the next save commits over whatever was left
        assert committed_step(out) == 6
    assert seen == {2, 4}  # every kill point leaves one of the two, and some leave each


@pytest.mark.slow
def test_the_record_on_disk_holds_every_step_a_checkpoint_saves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed between the two (the flaw a SIGKILL once found), a resume would otherwise lose recorded steps."""
    import pandas as pd
    from asyncrl.executor.processes.runtime import execute
    from asyncrl.scenarios.spec.loading import load_scenario

    out = tmp_path / "run"
    recorded_at_save: dict[int, int] = {}
    original = checkpoint.save

    def checked_save(run_out: Path, step: int, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        recorded_at_save[step] = len(pd.read_parquet(run_out / "metrics.parquet"))
        original(run_out, step, *args, **kwargs)

    monkeypatch.setattr(checkpoint, "save", checked_save)
    fast = ["workload.completion_tokens.max_tokens=48", "workload.prompts_per_step=2"]
    execute(load_scenario("cpu-timing", [*fast, "run.steps=4", "run.checkpoint_every=2"]), out)
    assert recorded_at_save == {2: 2, 4: 4}
