"""Completion logs the tests (and docs/lengths.md's `asyncrl lengths` example) read: JSONL written in code.

    python -m tests.lengths_data runs/completions.jsonl

writes 2,000 records shaped like verl's rollout dumps (``input``, ``output``, ``score``, ``step``),
each ``output`` a text of whitespace-separated words whose count is drawn lognormal (median 200,
σ 0.8) and cut at 2,048, as a response cap would; ``response_length`` holds the same count.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

WORDS = ("the", "answer", "is", "so", "we", "check", "each", "case", "then", "step", "sum", "of", "two", "and", "x")
MEDIAN, SIGMA, CAP = 200.0, 0.8, 2048


def word_counts(n: int, seed: int = 0, median: float = MEDIAN, sigma: float = SIGMA, cap: int = CAP) -> np.ndarray:
    """Lognormal counts, rounded, at least 1, at most ``cap``."""
    raw = median * np.exp(sigma * np.random.default_rng(seed).standard_normal(n))
    return np.clip(np.rint(raw), 1, cap).astype(np.int64)


def write_completions(path: Path, counts: np.ndarray, seed: int = 0) -> Path:
    """One record per count: its text has exactly that many words."""
    rng = np.random.default_rng(seed + 1)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        for index, count in enumerate(counts):
            text = " ".join(rng.choice(WORDS, int(count)))
            record = {"input": f"question {index}", "output": text, "score": float(index % 2), "step": index // 64}
            record["response_length"] = int(count)
            handle.write(json.dumps(record) + "\n")
    return path


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "runs/completions.jsonl")
    print(f"wrote {write_completions(target, word_counts(2000))}")
