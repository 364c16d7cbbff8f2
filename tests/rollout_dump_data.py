"""verl rollout dumps the tests (and docs/lengths.md's example) read: ``trainer.rollout_data_dir`` written in code.

    python -m tests.rollout_dump_data runs/rollouts

writes 20 step files ``1.jsonl`` … ``20.jsonl`` of 64 responses each (16 prompts, 4 samples of each), as verl's
``_dump_generations`` lays them out (``input``, ``output``, ``gts``, ``score``, ``step``), each ``output`` a text
of whitespace-separated words whose count is drawn lognormal (median 400, σ 0.9) and cut at 4,096, a prompt's
samples alike by a group correlation of 0.5 (``workload.group_correlation``'s copula); and beside the directory
a word tokenizer over those words (``runs/rollouts-tokenizer``: one token per word), standing for the model's.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from asyncrl.scenarios.spec.distributions import LogNormal

from tests.lengths_data import WORDS
from tests.tiny_checkpoint import save_word_tokenizer

STEPS, PER_STEP, GROUP, MEDIAN, SIGMA, CAP, CORRELATION = 20, 64, 4, 400.0, 0.9, 4096, 0.5


def write_dumps(directory: Path, seed: int = 0) -> Path:
    """The step files, each response's text exactly its drawn number of words."""
    lengths = LogNormal(kind="lognormal", median=MEDIAN, sigma=SIGMA, max_tokens=CAP)
    groups = lengths.sample_groups(np.random.default_rng(seed), STEPS * PER_STEP // GROUP, GROUP, CORRELATION)
    counts = groups.reshape(STEPS, PER_STEP)
    rng = np.random.default_rng(seed + 1)
    directory.mkdir(parents=True, exist_ok=True)
    for step, row in enumerate(counts, start=1):
        records = [
            {"input": f"problem {i // GROUP}", "output": " ".join(rng.choice(WORDS, int(n))), "gts": "42",
             "score": i % 2}
            for i, n in enumerate(row)
        ]  # fmt: skip
        lines = [json.dumps({**record, "score": float(record["score"]), "step": step}) for record in records]
        (directory / f"{step}.jsonl").write_text("\n".join(lines) + "\n")
    return directory


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "runs/rollouts")
    tokenizer = save_word_tokenizer(target.with_name(f"{target.name}-tokenizer"), WORDS)
    print(f"wrote {write_dumps(target)} and {tokenizer}")
