"""A reward function for a prompts file, as ``workload.reward: tests.tasks_example:exact_answer`` names it.

The prompts (``tests/data/arithmetic.jsonl``) ask for the sum of two digits and carry the answer:
``{"prompt": "what is 2 + 3", "answer": "5"}``.
"""

from __future__ import annotations

from typing import Any


def exact_answer(completion: str, record: dict[str, Any]) -> float:
    """1 when the completion's first word is the record's answer, else 0."""
    words = completion.split()
    return float(bool(words) and words[0] == record["answer"])


def write_arithmetic(path: str = "tests/data/arithmetic.jsonl") -> None:
    """The prompts file: every sum of two digits that is itself a digit."""
    import json

    with open(path, "w") as handle:
        for a in range(10):
            for b in range(10 - a):
                handle.write(json.dumps({"prompt": f"what is {a} + {b}", "answer": str(a + b)}) + "\n")


if __name__ == "__main__":
    write_arithmetic()
