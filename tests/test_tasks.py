"""The shipped tasks with headroom (``sort``, ``add``, ``max``, ``median``): prompts, answers and rewards worked by
hand. No torch needed; how fast the tiny model learns them is measured by ``python -m tests.test_learning --task``
(figures in ``executor/tasks/generated.py``), not here.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from asyncrl.executor.generation.tokenizer import CharTokenizer
from asyncrl.executor.tasks.generated import TASKS, Task, TaskPrompt, load_task, median_digit, to_request

TOKENIZER = CharTokenizer()
EOS = TOKENIZER.eos_token_id
NEW_TASKS = ["sort", "add", "max", "median"]


def ids(text: str) -> list[int]:
    return TOKENIZER.encode(text)


def prompt_for(text: str, target: str, max_new_tokens: int) -> TaskPrompt:
    return TaskPrompt(text=text, ids=[TOKENIZER.bos_token_id, *ids(text)], target=target, max_new_tokens=max_new_tokens)


@pytest.mark.parametrize("name", NEW_TASKS)
def test_new_tasks_load_and_draw_the_same_prompts_from_the_same_seed(name: str) -> None:
    task = load_task(name)
    assert isinstance(task, Task)
    assert task.name == name
    assert name in TASKS
    assert task.prompts(np.random.default_rng(3), 8) == task.prompts(np.random.default_rng(3), 8)
    assert task.prompts(random.Random(3), 8) == task.prompts(random.Random(3), 8)
    assert task.prompts(np.random.default_rng(3), 8) != task.prompts(np.random.default_rng(4), 8)
    for prompt in task.prompts(np.random.default_rng(5), 20):
        assert prompt.ids == [TOKENIZER.bos_token_id, *ids(prompt.text)]


def test_add_prompts_are_two_padded_numbers_and_their_padded_sum() -> None:
    prompts = load_task("add").prompts(np.random.default_rng(0), 50)
    for prompt in prompts:
        left, right = prompt.text.removesuffix("=").split("+")
        assert len(left) == len(right) == 2
        assert prompt.target == f"{int(left) + int(right):03d}"
        assert prompt.max_new_tokens == 4  # three digits and EOS
    assert any(prompt.target.startswith("1") for prompt in prompts)  # carries into the hundreds happen


def test_add_reward_gives_credit_per_position_and_for_stopping() -> None:
    task = load_task("add")
    prompt = prompt_for("07+58=", "065", 4)
    assert task.reward(prompt, [*ids("065"), EOS]) == 1.0
    assert task.reward(prompt, ids("065")) == 0.75  # right digits, no stop
    assert task.reward(prompt, [*ids("056"), EOS]) == 0.5  # only the leading 0 and the stop are right
    assert task.reward(prompt, [*ids("65"), EOS]) == 0.0  # no zero padding: every position is shifted
    assert task.reward(prompt, [*ids("0650"), EOS]) == 0.6  # an extra digit: 3 matches over 5 positions
    assert task.reward(prompt, [*ids("065"), EOS, *ids("7")]) == 1.0  # what follows EOS does not count
    assert task.reward(prompt, [EOS]) == 0.0


def test_sort_answers_the_digits_in_order_with_per_character_credit() -> None:
    task = load_task("sort")
    for prompt in task.prompts(np.random.default_rng(0), 20):
        assert prompt.target == "".join(sorted(prompt.text.removesuffix("=")))
    prompt = prompt_for("381=", "138", 4)
    assert task.reward(prompt, [*ids("138"), EOS]) == 1.0
    assert task.reward(prompt, [*ids("381"), EOS]) == 0.25  # the prompt copied: only the stop is right
    assert task.reward(prompt, [*ids("13"), EOS]) == 0.5


def test_max_is_all_or_nothing_on_a_one_token_answer() -> None:
    task = load_task("max")
    for prompt in task.prompts(np.random.default_rng(0), 20):
        assert len(prompt.text) == 5
        assert prompt.target == max(prompt.text.removesuffix("="))
        assert prompt.max_new_tokens == 1
    prompt = prompt_for("3817=", "8", 1)
    assert task.reward(prompt, ids("8")) == 1.0
    assert task.reward(prompt, [*ids("8"), EOS]) == 1.0  # a stop after the answer is allowed, not asked for
    assert task.reward(prompt, ids("7")) == 0.0
    assert task.reward(prompt, [EOS]) == 0.0
    assert task.reward(prompt, ids("88")) == 0.0  # exact answer or nothing
    assert task.reward(prompt, []) == 0.0
    assert to_request(prompt, 0, max_new_tokens=16).max_new_tokens == 1


def test_median_is_the_middle_digit_scored_all_or_nothing() -> None:
    assert median_digit("381") == "3"
    assert median_digit("919") == "9"
    assert median_digit("000") == "0"
    assert median_digit("1357") == "5"  # even count: the upper middle one
    task = load_task("median")
    for prompt in task.prompts(np.random.default_rng(0), 20):
        assert len(prompt.text) == 4
        assert prompt.target == sorted(prompt.text.removesuffix("="))[1]
    prompt = prompt_for("381=", "3", 1)
    assert task.reward(prompt, ids("3")) == 1.0
    assert task.reward(prompt, ids("8")) == 0.0
