"""Tasks with verifiable rewards, generated in code: prompts to complete and a reward for each completion.

    load_task("copy") ──► Task ──prompts(rng, n)──► [TaskPrompt(text, ids, target, max_new_tokens)]
                                                         │  to_request(prompt, id, cap)
                                                         ▼
                                    engine ──► Rollout.tokens ──reward(prompt, tokens)──► float in [0, 1]

``workload.task`` names a shipped task (a key of ``TASKS``) or ``module:function``, a function of no arguments
returning a ``Task``. ``load_task`` resolves either and reports any failure as a ValueError naming ``workload.task``.
``module:function`` is user code: it is imported and called only when a run starts (``check_task_name`` checks
the name's form without importing anything), in the learner process and in every actor.

Shipped tasks (character tokenizer of ``executor.generation.tokenizer``, 17 ids), each prompt followed by its answer:

* ``copy``: ``"<bos>482="`` → ``"482<eos>"``; per-character credit (below).
* ``reverse``: ``"<bos>482="`` → ``"284<eos>"``; per-character credit.
* ``sort``: ``"<bos>381="`` → ``"138<eos>"``; per-character credit.
* ``add``: ``"<bos>07+58="`` → ``"065<eos>"`` (two numbers 00-99, the sum padded to 3 digits); per-character credit.
* ``max``: ``"<bos>3817="`` → ``"8"``, the largest of 4 digits; 1 for exactly that token, else 0.
* ``median``: ``"<bos>381="`` → ``"3"``, the middle of 3 digits once sorted; 1 for exactly that token, else 0.

The first four have a budget of 4 tokens (3 digits and EOS), ``max`` and ``median`` of 1 token: the answer alone,
with no EOS asked for (a completion cut at its first EOS must be exactly the answer), so a uniform random policy is
right once in 17 draws and about 62% of groups of 16 hold a success: GRPO has a signal from step one, as it would not if
answer and EOS had both to be right (1 in 289).

Reward (per-position credit against the answer followed by EOS): ``matches / max(len(target), len(completion))``
over token ids, where target = answer + EOS, the completion is cut after its first EOS, and ``matches`` counts the
positions holding the target's token; the max charges every missing or extra token. So ``"482<eos>"`` scores 1,
``"482"`` (no stop) 0.75, ``"4<eos>"`` 0.25. A random policy over the 17-token vocabulary scores about 0.06 and about
one sample in five scores above 0, so nearly every group of 16 has a reward spread and GRPO a signal from step one.

Why ``copy`` and ``reverse`` learn quickly: with a fixed answer length, the k-th answer digit always sits at the
same offset back in the sequence (a fixed offset per position for ``reverse``) and EOS always at the same position,
which two tiny attention layers pick up. Variants that were tried and learned less: 1 to 4 digits (the model copies
the first digit but hardly learns where to stop: 0.06 → 0.58 in 400 steps), groups of 8 instead of 16 (0.06 → 0.65
in 400 steps; with 8 samples about one group in seven has no spread), learning rate 3e-3 (once collapsed to an
immediate EOS, reward 0). The temperature was left at 1.0.

Measured: on-policy GRPO, ``tiny`` preset built with vocab 17 and seed = run seed, 8 prompts × 16 samples per step,
Adam lr 1e-3, gradient-norm clip 1, temperature 1, completions ≤ 4 tokens; mean reward of the first and last 10 steps,
wall seconds on two shared CPU cores::

    python -m tests.test_learning --seeds 0 1 2 3 4 5 6 7 --steps 150
        first 0.059-0.066 → last 0.431 0.597 0.719 0.646 0.605 0.496 0.358 0.640   (~5 s a seed, 33 ms a step)
    python -m tests.test_learning --seeds 0 1 2 3 --steps 400 --every 50
        first 0.059-0.066 → last 0.954 0.998 0.998 0.934                          (~13 s a seed)
        seed 0: 0.088 0.188 0.347 0.612 0.868 0.927 0.907 0.934
        seed 1: 0.087 0.194 0.483 0.676 0.836 0.984 0.996 0.998
        seed 2: 0.096 0.325 0.579 0.834 0.987 0.994 0.997 0.998
    python -m tests.test_learning --task reverse --seeds 0 1 --steps 400
        first 0.058 0.055 → last 0.765 0.834                                        (~13 s a seed)

Tasks with headroom, for comparing schedules: ``copy`` is at 0.93-0.99 over steps 251-300, while these still
separate there. Same loop; mean reward per 50 steps of seeds 0, 1, 2, and ms a step on the two shared cores (load
about 1.8)::

    python -m tests.test_learning --task sort --seeds 0 1 2 --steps 400 --every 50          (30-33 ms a step)
        first 10 steps 0.066 0.064 0.072 → last 10 0.704 0.818 0.738
        seed 0: 0.103 0.311 0.527 0.591 0.640 0.648 0.688 0.684
        seed 1: 0.100 0.257 0.545 0.655 0.748 0.765 0.811 0.829
        seed 2: 0.101 0.353 0.542 0.634 0.675 0.709 0.742 0.746
    python -m tests.test_learning --task add --seeds 0 1 2 --steps 400 --every 50           (31-35 ms a step)
        first 10 steps 0.071 0.067 0.075 → last 10 0.469 0.457 0.472
        seed 0: 0.121 0.214 0.376 0.452 0.485 0.482 0.481 0.485
        seed 1: 0.118 0.227 0.445 0.455 0.462 0.470 0.471 0.464
        seed 2: 0.130 0.349 0.464 0.476 0.463 0.453 0.474 0.475
    python -m tests.test_learning --task median --seeds 0 1 2 --steps 400 --every 50        (21-22 ms a step)
        first 10 steps 0.095 0.072 0.080 → last 10 0.614 0.902 0.834
        seed 0: 0.177 0.456 0.632 0.687 0.747 0.767 0.636 0.624
        seed 1: 0.168 0.388 0.597 0.670 0.746 0.810 0.812 0.857
        seed 2: 0.155 0.444 0.618 0.707 0.740 0.794 0.839 0.794
    python -m tests.test_learning --task max --seeds 0 1 2 --steps 400 --every 50           (22-24 ms a step)
        first 10 steps 0.112 0.078 0.120 → last 10 0.948 0.910 0.936
        seed 0: 0.334 0.785 0.807 0.925 0.943 0.978 0.950 0.963
        seed 1: 0.297 0.747 0.897 0.922 0.953 0.943 0.933 0.940
        seed 2: 0.309 0.755 0.914 0.929 0.931 0.920 0.902 0.858

``sort`` is the partial-credit task still rising at step 400 (over steps 351-400 of seed 0 the smallest digit is
right 87% of the time, the other two 47%, EOS 93%). ``add`` plateaus at about 0.47 from step 150: EOS (100%) and
the hundreds digit (73%) are learned, the tens and units stay at chance (10-12%), and the policy has stopped
exploring (the 16 samples of a group agree at every position in 94-98% of groups; 8.5% of groups have any reward
spread), so GRPO has little left to push on: a ceiling, not a slow climb. ``median`` is the 0/1 task
rising over a few hundred steps; ``max`` is the easy 0/1 one (a third of the answers are 9, so answering 9 alone
scores 0.34). The per-position and per-group figures come from throwaway scripts over the same loop, not shipped.

With online DPO (same loop and settings, not tuned), last 10 steps of 400 for seeds 0 and 1, from
``python -m tests.test_learning --task TASK --seeds 0 1 --steps 400 --every 50 --loss online_dpo``: ``sort`` 0.730
0.651 (slower start: 0.116 0.100 over steps 51-100, still rising at the end), ``add`` 0.478 0.453 (the same plateau),
``median`` 0.626 0.782, ``max`` 0.948 0.960.

Variants tried and left out: the sum's digits least significant first (``"07+58="`` → ``"560"``: 0.06 → 0.27 by
step 400, one seed); one-digit addition (``"7+8="`` → ``"15<eos>"``: a plateau at 0.64 from step 200); ``sort`` of 4
digits (a plateau near 0.46); ``max`` with its answer drawn uniformly (0.99 by step 250); the last digit of the sum
of two digits as a 0/1 task (``"38="`` → ``"1"``: 0.06 → 0.27 0.34 0.11 by step 400 over three seeds, too uneven).
"""

from __future__ import annotations

import importlib
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

from ..generation.tokenizer import CharTokenizer, Tokenizer

if TYPE_CHECKING:
    from ..generation.engine import Request

Rng = np.random.Generator | random.Random


@dataclass(frozen=True)
class TaskPrompt:
    """One prompt of a task, with what its reward needs."""

    text: str  # the prompt as text, without the BOS token
    ids: list[int]  # token ids fed to the model: BOS, then the text
    target: str  # the answer the reward compares with
    max_new_tokens: int  # the task's own completion budget (answer plus EOS, or the answer alone)


@runtime_checkable
class Task(Protocol):
    """A prompt generator with a verifiable reward."""

    name: str

    @property
    def tokenizer(self) -> Tokenizer: ...  # read-only, so a task may hold a CharTokenizer or a HFTokenizer

    def prompts(self, rng: Rng, n: int) -> list[TaskPrompt]: ...

    def reward(self, prompt: TaskPrompt, completion_ids: Sequence[int]) -> float: ...


def character_credit(target_ids: Sequence[int], completion_ids: Sequence[int]) -> float:
    """Share of positions matching the target, over the longer of target and completion (0 when both are empty)."""
    length = max(len(target_ids), len(completion_ids))
    if length == 0:
        return 0.0
    matches = sum(expected == actual for expected, actual in zip(target_ids, completion_ids, strict=False))
    return matches / length


def answer_and_stop_credit(tokenizer: CharTokenizer, target: str, completion_ids: Sequence[int]) -> float:
    """``character_credit`` of the target followed by EOS; the completion is cut after its first EOS."""
    target_ids = [*tokenizer.encode(target), tokenizer.eos_token_id]
    answer = tokenizer.until_eos(completion_ids)
    if len(answer) < len(completion_ids):
        answer.append(tokenizer.eos_token_id)
    return character_credit(target_ids, answer)


def _integer(rng: Rng, low: int, high: int) -> int:
    """A uniform integer in [low, high] from either kind of generator."""
    if isinstance(rng, random.Random):
        return rng.randint(low, high)
    return int(rng.integers(low, high + 1))


def _digit_string(rng: Rng, length: int) -> str:
    return "".join(str(_integer(rng, 0, 9)) for _ in range(length))


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
        return answer_and_stop_credit(self.tokenizer, prompt.target, completion_ids)

    def _digits(self, rng: Rng) -> str:
        return _digit_string(rng, _integer(rng, self.min_digits, self.max_digits))

    def _prompt(self, digits: str) -> TaskPrompt:
        text = f"{digits}="
        ids = [self.tokenizer.bos_token_id, *self.tokenizer.encode(text)]
        target = self.transform(digits)
        return TaskPrompt(text=text, ids=ids, target=target, max_new_tokens=len(target) + 1)


def copy_task() -> Task:
    return DigitStringTask(name="copy", transform=lambda digits: digits)


def reverse_task() -> Task:
    return DigitStringTask(name="reverse", transform=lambda digits: digits[::-1])


def sort_task() -> Task:
    return DigitStringTask(name="sort", transform=lambda digits: "".join(sorted(digits)))


@dataclass
class AdditionTask:
    """The sum of two zero-padded numbers of ``digits`` digits, answered with ``digits + 1`` digits and EOS,
    with per-character credit: ``"07+58="`` → ``"065<eos>"``."""

    name: str = "add"
    digits: int = 2
    tokenizer: CharTokenizer = field(default_factory=CharTokenizer)

    def prompts(self, rng: Rng, n: int) -> list[TaskPrompt]:
        largest = 10**self.digits - 1
        return [self._prompt(_integer(rng, 0, largest), _integer(rng, 0, largest)) for _ in range(n)]

    def reward(self, prompt: TaskPrompt, completion_ids: Sequence[int]) -> float:
        return answer_and_stop_credit(self.tokenizer, prompt.target, completion_ids)

    def _prompt(self, left: int, right: int) -> TaskPrompt:
        text = f"{left:0{self.digits}d}+{right:0{self.digits}d}="
        ids = [self.tokenizer.bos_token_id, *self.tokenizer.encode(text)]
        target = f"{left + right:0{self.digits + 1}d}"
        return TaskPrompt(text=text, ids=ids, target=target, max_new_tokens=len(target) + 1)


def add_task() -> Task:
    return AdditionTask()


@dataclass
class DigitAnswerTask:
    """One digit computed by ``answer`` from ``digits`` random digits, all or nothing:
    ``"3817="`` → ``"8"`` for the maximum. The budget is that one token (no EOS asked for); a completion cut at its
    first EOS scores 1 when it is exactly the answer, else 0."""

    name: str
    answer: Callable[[str], str]
    digits: int = 3
    tokenizer: CharTokenizer = field(default_factory=CharTokenizer)

    def prompts(self, rng: Rng, n: int) -> list[TaskPrompt]:
        return [self._prompt(_digit_string(rng, self.digits)) for _ in range(n)]

    def reward(self, prompt: TaskPrompt, completion_ids: Sequence[int]) -> float:
        return float(self.tokenizer.until_eos(completion_ids) == self.tokenizer.encode(prompt.target))

    def answer_token(self, prompt: TaskPrompt) -> int | None:
        """The one token that scores 1 when the budget is one token (else None): the reward's expected value under
        sampling is then that token's probability, which an evaluation can compute instead of drawing."""
        ids = self.tokenizer.encode(prompt.target)
        return ids[0] if len(ids) == 1 and prompt.max_new_tokens == 1 else None

    def _prompt(self, digits: str) -> TaskPrompt:
        text = f"{digits}="
        ids = [self.tokenizer.bos_token_id, *self.tokenizer.encode(text)]
        target = self.answer(digits)
        return TaskPrompt(text=text, ids=ids, target=target, max_new_tokens=len(target))


def median_digit(digits: str) -> str:
    """The middle digit once sorted (the upper middle one for an even count)."""
    return sorted(digits)[len(digits) // 2]


def max_task() -> Task:
    return DigitAnswerTask(name="max", answer=max, digits=4)


def median_task() -> Task:
    return DigitAnswerTask(name="median", answer=median_digit, digits=3)


TASKS: dict[str, Callable[[], Task]] = {
    "copy": copy_task,
    "reverse": reverse_task,
    "sort": sort_task,
    "add": add_task,
    "max": max_task,
    "median": median_task,
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
    from ..generation.engine import Request  # torch only when a request is made

    budget = prompt.max_new_tokens if max_new_tokens is None else min(prompt.max_new_tokens, max_new_tokens)
    return Request(id=request_id, prompt=list(prompt.ids), max_new_tokens=budget)
