"""Tasks with verifiable rewards, generated in code: prompts to complete and a reward for each completion.

    load_task("copy") ──► Task ──prompts(rng, n)──► [TaskPrompt(text, ids, target, max_new_tokens)]
                                                         │  to_request(prompt, id, cap)
                                                         ▼
                                    engine ──► Rollout.tokens ──reward(prompt, tokens)──► float in [0, 1]

``workload.task`` names a shipped task (a key of ``TASKS``) or ``module:function``, a function of no arguments
returning a ``Task``. ``load_task`` resolves either and reports any failure as a ValueError naming ``workload.task``.

Shipped tasks (character tokenizer, completions of at most 5 tokens with EOS):

* ``copy``: ``"<bos>4821="`` → ``"4821<eos>"``; 1 to 4 digits.
* ``reverse``: ``"<bos>4821="`` → ``"1284<eos>"``; 1 to 4 digits (harder: the attention has to run backwards).

Reward (per-character credit): ``matches / max(len(target), len(completion))``, where the completion is cut at its
first EOS, ``matches`` counts positions holding the target's token, and the max charges every extra or missing
character. A random policy over the 17-token vocabulary scores about 0.03, with most groups of 8 holding at least
one non-zero reward, so group-relative advantages have a signal from the first step; a perfect one scores 1.

Measured (on-policy GRPO, ``tiny`` preset, two CPU cores; see ``tests/test_learning.py`` for the loop)::

    TODO

"""

from __future__ import annotations

import importlib
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

from executor.tokenizer import CharTokenizer

if TYPE_CHECKING:
    from executor.engine import Request

Rng = np.random.Generator | random.Random


@dataclass(frozen=True)
class TaskPrompt:
    """One prompt of a task, with what its reward needs."""

    text: str  # the prompt as text, without the BOS token
    ids: list[int]  # token ids fed to the model: BOS, then the text
    target: str  # the answer the reward compares with
    max_new_tokens: int  # the task's own completion budget (answer plus EOS)


@runtime_checkable
class Task(Protocol):
    """A prompt generator with a verifiable reward."""

    name: str
    tokenizer: CharTokenizer

    def prompts(self, rng: Rng, n: int) -> list[TaskPrompt]: ...

    def reward(self, prompt: TaskPrompt, completion_ids: Sequence[int]) -> float: ...


def character_credit(target_ids: Sequence[int], completion_ids: Sequence[int]) -> float:
    """Share of positions matching the target, over the longer of target and completion (0 when both are empty)."""
    length = max(len(target_ids), len(completion_ids))
    if length == 0:
        return 0.0
    matches = sum(expected == actual for expected, actual in zip(target_ids, completion_ids, strict=False))
    return matches / length


def _integer(rng: Rng, low: int, high: int) -> int:
    """A uniform integer in [low, high] from either kind of generator."""
    if isinstance(rng, random.Random):
        return rng.randint(low, high)
    return int(rng.integers(low, high + 1))


@dataclass
class DigitStringTask:
    """Answer a random digit string transformed by ``transform`` (copy, reverse, ...), with per-character credit."""

    name: str
    transform: Callable[[str], str]
    min_digits: int = 3
    max_digits: int = 3
    tokenizer: CharTokenizer = field(default_factory=CharTokenizer)

    def prompts(self, rng: Rng, n: int) -> list[TaskPrompt]:
        return [self._prompt(self._digits(rng)) for _ in range(n)]

    def reward(self, prompt: TaskPrompt, completion_ids: Sequence[int]) -> float:
        """Credit per position of the target followed by EOS; the completion is cut after its first EOS."""
        target_ids = [*self.tokenizer.encode(prompt.target), self.tokenizer.eos_token_id]
        answer = self.tokenizer.until_eos(completion_ids)
        if len(answer) < len(completion_ids):
            answer.append(self.tokenizer.eos_token_id)
        return character_credit(target_ids, answer)

    def _digits(self, rng: Rng) -> str:
        length = _integer(rng, self.min_digits, self.max_digits)
        return "".join(str(_integer(rng, 0, 9)) for _ in range(length))

    def _prompt(self, digits: str) -> TaskPrompt:
        text = f"{digits}="
        ids = [self.tokenizer.bos_token_id, *self.tokenizer.encode(text)]
        target = self.transform(digits)
        return TaskPrompt(text=text, ids=ids, target=target, max_new_tokens=len(target) + 1)


def copy_task() -> Task:
    return DigitStringTask(name="copy", transform=lambda digits: digits)


def reverse_task() -> Task:
    return DigitStringTask(name="reverse", transform=lambda digits: digits[::-1])


TASKS: dict[str, Callable[[], Task]] = {
    "copy": copy_task,
    "reverse": reverse_task,
}


def load_task(spec: str) -> Task:
    """A shipped task by name, or the Task returned by ``module:function``."""
    if spec in TASKS:
        return TASKS[spec]()
    if ":" not in spec:
        raise ValueError(
            f"workload.task: unknown task {spec!r}; use one of {sorted(TASKS)} or 'module:function' returning a Task"
        )
    module_name, _, function_name = spec.partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), function_name)
    except (ImportError, AttributeError, ValueError) as error:
        raise ValueError(f"workload.task: cannot import {spec!r}: {error}") from error
    task = factory()
    if not isinstance(task, Task):
        raise ValueError(f"workload.task: {spec!r} returned {type(task).__name__}, not a Task")
    return task


def to_request(prompt: TaskPrompt, request_id: int, max_new_tokens: int | None = None) -> Request:
    """An engine request for the prompt; ``max_new_tokens`` (e.g. ``completion_tokens.cap``) caps the task's budget."""
    from executor.engine import Request  # torch only when a request is made

    budget = prompt.max_new_tokens if max_new_tokens is None else min(prompt.max_new_tokens, max_new_tokens)
    return Request(id=request_id, prompt=list(prompt.ids), max_new_tokens=budget)
