"""Tasks with verifiable rewards, generated in code: prompts to complete and a reward for each completion.

    load_task("copy") ──► Task ──prompts(rng, n)──► [TaskPrompt(text, ids, target, max_new_tokens)]
                                                         │  to_request(prompt, id, cap)
                                                         ▼
                                    engine ──► Rollout.tokens ──reward(prompt, tokens)──► float in [0, 1]

``workload.task`` names a shipped task (a key of ``TASKS``) or ``module:function``, a function of no arguments
returning a ``Task``. ``load_task`` resolves either and reports any failure as a ValueError naming ``workload.task``.
``module:function`` is user code: it is imported and called only when a run starts (``check_task_name`` checks
the name's form without importing anything), in the learner process and in every actor.

Shipped tasks (character tokenizer of ``executor.tokenizer``; the task's budget is 4 tokens: 3 digits and EOS):

* ``copy``: ``"<bos>482="`` → ``"482<eos>"``.
* ``reverse``: ``"<bos>482="`` → ``"284<eos>"``.

Reward (per-position credit against the answer followed by EOS): ``matches / max(len(target), len(completion))``
over token ids, where target = answer + EOS, the completion is cut after its first EOS, and ``matches`` counts the
positions holding the target's token; the max charges every missing or extra token. So ``"482<eos>"`` scores 1,
``"482"`` (no stop) 0.75, ``"4<eos>"`` 0.25. A random policy over the 17-token vocabulary scores about 0.06 and about
one sample in five scores above 0, so nearly every group of 16 has a reward spread and GRPO a signal from step one.

Why these learn quickly: with a fixed answer length, the k-th answer digit always sits at the same offset back in
the sequence (a fixed offset per position for ``reverse``) and EOS always at the same position, which two tiny
attention layers pick up. Variants that were tried and learned less: 1 to 4 digits (the model copies the first digit
but hardly learns where to stop: 0.06 → 0.58 in 400 steps), groups of 8 instead of 16 (0.06 → 0.65 in 400 steps;
with 8 samples about one group in seven has no spread), learning rate 3e-3 (once collapsed to an immediate EOS,
reward 0). The temperature was left at 1.0.

Measured: on-policy GRPO, ``tiny`` preset built with vocab 17 and seed = run seed, 8 prompts × 16 samples per step,
Adam lr 1e-3, gradient-norm clip 1, temperature 1, completions ≤ 4 tokens; mean reward of the first and last 10 steps,
wall seconds on two CPU cores (alone on the machine)::

    python -m tests.test_learning --seeds 0 1 2 3 4 5 6 7 --steps 150
        first 0.059-0.066 → last 0.435 0.591 0.747 0.622 0.600 0.522 0.350 0.672   (~5.5 s a seed)
    python -m tests.test_learning --seeds 0 1 2 3 --steps 400
        first 0.059-0.066 → last 0.997 0.947 0.998 0.937                          (~14 s a seed)
    python -m tests.test_learning --task reverse --seeds 0 1 --steps 400
        first 0.058 0.055 → last 0.766 0.837                                        (~14 s a seed)
"""

from __future__ import annotations

import importlib
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np
from asyncrl.executor.tokenizer import CharTokenizer, Tokenizer

if TYPE_CHECKING:
    from asyncrl.executor.engine import Request

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
    tokenizer: Tokenizer

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


def check_task_name(spec: str) -> None:
    """ValueError naming ``workload.task`` unless ``spec`` is a shipped task or has the form ``module:function``."""
    if spec in TASKS:
        return
    module_name, colon, function_name = spec.partition(":")
    dotted = all(part.isidentifier() for part in module_name.split("."))
    if not colon or not dotted or not function_name.isidentifier():
        raise ValueError(
            f"workload.task: unknown task {spec!r}; use one of {sorted(TASKS)} or 'module:function' returning a Task"
        )


def load_task(spec: str) -> Task:
    """A shipped task by name, or the Task returned by ``module:function`` (which imports and runs user code)."""
    check_task_name(spec)
    if spec in TASKS:
        return TASKS[spec]()
    module_name, _, function_name = spec.partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), function_name)
    except Exception as error:  # whatever the module raises while importing: a missing module, a bad name, a bug
        raise ValueError(f"workload.task: cannot import {spec!r}: {type(error).__name__}: {error}") from error
    if not callable(factory):
        raise ValueError(f"workload.task: {spec!r} is a {type(factory).__name__}, not a function returning a Task")
    try:
        task = factory()
    except Exception as error:  # the user's factory failed
        raise ValueError(f"workload.task: {spec!r} raised {type(error).__name__}: {error}") from error
    if not isinstance(task, Task):
        raise ValueError(f"workload.task: {spec!r} returned {type(task).__name__}, not a Task")
    return task


def to_request(prompt: TaskPrompt, request_id: int, max_new_tokens: int | None = None) -> Request:
    """An engine request for the prompt; ``max_new_tokens`` (e.g. ``completion_tokens.cap``) caps the task's budget."""
    from asyncrl.executor.engine import Request  # torch only when a request is made

    budget = prompt.max_new_tokens if max_new_tokens is None else min(prompt.max_new_tokens, max_new_tokens)
    return Request(id=request_id, prompt=list(prompt.ids), max_new_tokens=budget)
