"""Completion lengths from verl's rollout dumps: ``trainer.rollout_data_dir``, one JSONL file per step.

    rollout_data_dir/ 1.jsonl 2.jsonl ... ─► every record's ``output`` (the generated text) ─► tokens of the
        scenario's tokenizer, or a local one (``analysis.fits.lengths.count_text``) ─► Lengths (fitted, written as
        ``asyncrl lengths`` does for one log)

verl writes ``{global_steps}.jsonl`` with one object per response: ``input``, ``output`` (the response decoded
with ``skip_special_tokens=True``), ``gts``, ``score``, ``step`` and the reward's extra fields
(``RayPPOTrainer._dump_generations`` in ``verl/trainer/ppo/ray_trainer.py``, the one-step-off and fully async
trainers alike). The text is counted again, so a response's end-of-sequence token (dropped by the decode) is not
counted, and a tokenizer may split decoded text a little differently from the ids generated.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from asyncrl.analysis.fits.lengths import Lengths, count_text
from asyncrl.scenarios.files.jsonl import is_text, read_field, token_counts
from asyncrl.scenarios.spec.loading import ScenarioError

DUMP_FIELD = "output"


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
    try:
        for path in files:
            name, found = read_field(path, field or DUMP_FIELD)
            values += found
        if not is_text(values):
            counts = token_counts(values, f"{directory.name}:{name}")
            return Lengths(directory, name, counts, "tokens", f"token counts as dumped ({_steps(files)})", False)
        counted, unit, how = count_text([str(value) for value in values], tokenizer, count)
    except ValueError as exc:
        raise ScenarioError(str(exc).removeprefix("path: ")) from None
    return Lengths(directory, name, np.maximum(counted, 1), unit, f"{how}; {_steps(files)}", True)


def _steps(files: list[Path]) -> str:
    numbered = [int(path.stem) for path in files if path.stem.isdigit()]
    span = f", steps {min(numbered)} to {max(numbered)}" if numbered else ""
    return f"{len(files)} step files{span}"
