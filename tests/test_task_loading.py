"""Task loading (shipped names, module functions, errors naming the field), the copy reward, reproducible
prompts, and the character tokenizer. Skipped without the optional executor dependencies."""

from __future__ import annotations

import random

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("safetensors")

from asyncrl.executor.generation.tokenizer import ALPHABET, CharTokenizer, Tokenizer
from asyncrl.executor.tasks.generated import TASKS, Task, load_task, to_request
from hypothesis import given
from hypothesis import strategies as st

# ---------------------------------------------------------------- tasks


def test_load_task_accepts_shipped_names_and_module_functions() -> None:
    assert {load_task(name).name for name in TASKS} == set(TASKS)
    task = load_task("asyncrl.executor.tasks.generated:reverse_task")
    assert isinstance(task, Task)
    assert task.name == "reverse"


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ("no-such-task", "unknown task"),
        ("no_such_module_anywhere:make", "cannot import"),
        ("asyncrl.executor.tasks.generated:no_such_function", "cannot import"),
        ("asyncrl.executor.generation.tokenizer:CharTokenizer", "not a Task"),
        ("asyncrl.executor.generation.tokenizer:ALPHABET", "not a function"),
    ],
)
def test_load_task_errors_name_the_scenario_field(spec: str, why: str) -> None:
    with pytest.raises(ValueError, match=f"workload.task: .*{why}"):
        load_task(spec)


def test_copy_reward_gives_credit_per_position_and_for_stopping() -> None:
    task = load_task("copy")
    tokenizer = task.tokenizer
    (prompt,) = task.prompts(np.random.default_rng(0), 1)
    answer = tokenizer.encode(prompt.target)
    eos = tokenizer.eos_token_id
    assert prompt.ids == [tokenizer.bos_token_id, *tokenizer.encode(prompt.text)]
    assert prompt.text == f"{prompt.target}="
    assert task.reward(prompt, [*answer, eos]) == 1.0
    assert task.reward(prompt, answer) == 0.75  # right digits, no stop: 3 of 4 positions
    assert task.reward(prompt, [answer[0], eos]) == 0.25  # stopped early: only the first digit counts
    assert task.reward(prompt, [*answer, eos, *answer]) == 1.0  # what follows EOS is not part of the answer
    assert task.reward(prompt, []) == 0.0
    assert to_request(prompt, 5, max_new_tokens=2).max_new_tokens == 2
    assert to_request(prompt, 5).max_new_tokens == len(prompt.target) + 1


def test_prompts_are_reproducible_from_either_kind_of_generator() -> None:
    task = load_task("reverse")
    assert task.prompts(np.random.default_rng(3), 5) == task.prompts(np.random.default_rng(3), 5)
    assert task.prompts(random.Random(3), 5) == task.prompts(random.Random(3), 5)
    assert all(prompt.target == prompt.text[:-1][::-1] for prompt in task.prompts(random.Random(4), 20))


# ---------------------------------------------------------------- tokenizer


@given(st.text(alphabet=ALPHABET, max_size=40))
def test_tokenizer_round_trip(text: str) -> None:
    tokenizer = CharTokenizer()
    ids = tokenizer.encode(text)
    assert len(ids) == len(text)
    assert all(token not in tokenizer.special_ids and 0 <= token < tokenizer.vocab_size for token in ids)
    assert tokenizer.decode(ids) == text
    assert tokenizer.decode([tokenizer.bos_token_id, *ids, tokenizer.eos_token_id, tokenizer.pad_token_id]) == text


def test_tokenizer_refuses_unknown_characters_and_ids() -> None:
    tokenizer = CharTokenizer()
    assert isinstance(tokenizer, Tokenizer)
    assert len({tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id}) == 3
    assert tokenizer.vocab_size == 3 + len(ALPHABET)
    with pytest.raises(ValueError, match="not in the tokenizer alphabet"):
        tokenizer.encode("12a")
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tokenizer.decode([tokenizer.vocab_size])
