"""Completion lengths from verl's rollout dumps: ``trainer.rollout_data_dir``, one JSONL file per step.

    rollout_data_dir/ 1.jsonl 2.jsonl ... ─► every record's ``output`` (the generated text) ─► tokens of the
        scenario's tokenizer, or a local one (``analysis.fits.lengths.count_text``) ─► Lengths (fitted, written as
        ``asyncrl lengths`` does for one log)

verl writes ``{global_steps}.jsonl`` with one object per response: ``input``, ``output`` (the response decoded
with ``skip_special_tokens=True``), ``gts``, ``score``, ``step`` and the reward's extra fields
(``RayPPOTrainer._dump_generations`` in ``verl/trainer/ppo/ray_trainer.py``, the one-step-off and fully async
trainers alike). The text is counted again, so a response's end-of-sequence token (dropped by the decode) is not
counted, and a tokenizer may split decoded text a little differently from the ids generated.

The responses of one ``input`` in one step's file are one group (verl dumps each of a prompt's
``actor_rollout_ref.rollout.n`` samples with the prompt's text), from which ``asyncrl lengths`` fits how alike a
group's lengths are (``workload.group_correlation``); dumps without ``input`` are not grouped.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from asyncrl.analysis.fits.lengths import Lengths, count_text
from asyncrl.scenarios.files.jsonl import is_text, read_field, token_counts
from asyncrl.scenarios.spec.loading import ScenarioError

DUMP_FIELD = "output"
PROMPT_FIELD = "input"


def dump_files(directory: Path) -> list[Path]:
    """The step files of a rollout dump directory, in step order (``2.jsonl`` before ``10.jsonl``)."""
    files = [path for path in directory.glob("*.jsonl") if path.is_file()]
    if not files:
        raise ScenarioError(f"FILE.jsonl: {directory} holds no .jsonl files (verl writes one per step there)")
    return sorted(
        files, key=lambda path: (not path.stem.isdigit(), int(path.stem) if path.stem.isdigit() else 0, path.name)
    )


def read_rollout_dumps(directory: Path, field: str | None, tokenizer: str | None, count: str) -> Lengths:
    """Every response of every step's dump, its text counted in tokens of ``tokenizer`` (else words or characters)."""
    files = dump_files(directory)
    values: list[object] = []
    prompts: list[tuple[int, str]] | None = []
    try:
        for number, path in enumerate(files):
            name, found = read_field(path, field or DUMP_FIELD)
            values += found
            prompts = _prompts_of(path, number, prompts)
        groups = _group_ids(prompts)
        if not is_text(values):
            counts = token_counts(values, f"{directory.name}:{name}")
            how = f"token counts as dumped ({_steps(files)})"
            return Lengths(directory, name, counts, "tokens", how, False, groups)
        counted, unit, how = count_text([str(value) for value in values], tokenizer, count)
    except ValueError as exc:
        raise ScenarioError(str(exc).removeprefix("path: ")) from None
    return Lengths(directory, name, np.maximum(counted, 1), unit, f"{how}; {_steps(files)}", True, groups)


def _prompts_of(path: Path, number: int, so_far: list[tuple[int, str]] | None) -> list[tuple[int, str]] | None:
    """Each record's (step file, prompt text) after ``so_far``; None once a file has records without one."""
    if so_far is None:
        return None
    try:
        _, found = read_field(path, PROMPT_FIELD)
    except ValueError:  # a record without ``input``: the dumps are not grouped
        return None
    return so_far + [(number, str(prompt)) for prompt in found]


def _group_ids(prompts: list[tuple[int, str]] | None) -> np.ndarray | None:
    if not prompts:
        return None
    ids: dict[tuple[int, str], int] = {}
    return np.asarray([ids.setdefault(key, len(ids)) for key in prompts], dtype=np.int64)


def _steps(files: list[Path]) -> str:
    numbered = [int(path.stem) for path in files if path.stem.isdigit()]
    span = f", steps {min(numbered)} to {max(numbered)}" if numbered else ""
    return f"{len(files)} step files{span}"
