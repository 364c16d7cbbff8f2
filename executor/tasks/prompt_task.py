"""Task mode on a real checkpoint: prompts from a JSONL file, the checkpoint's own tokenizer, a reward function.

    workload.prompts: prompts.jsonl      {"prompt": "what is 2 + 3", "answer": "5"}      one record per line
    workload.reward:  mymodule:score     score(completion_text, record) -> float
    model.path:       ckpt/ or a cached hub name      its tokenizer: AutoTokenizer, local files only

    record ──HfTokenizer.prompt_ids──► ids (the chat template with a generation prompt where the
                                        tokenizer has one; else BOS and the text)
    completion ids ──cut at EOS, decoded──► text ──score(text, record)──► reward

``prompt`` is text, or a list of chat messages (``[{"role": "user", "content": ...}]``, which needs a
chat template); every other field of the record is the reward function's to read. Each group draws
its record with the group's own seeded generator, so a group gets the same prompt whatever the
schedule. Every failure is a ValueError naming the scenario field.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import random
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np

from ...scenarios.files.jsonl import read_records
from ...scenarios.spec.checkpoints import load_hf_tokenizer
from ...scenarios.spec.scenario import Scenario
from ..generation.hf_tokenizer import HfTokenizer
from .generated import Rng, TaskPrompt

Score = Callable[[str, dict[str, Any]], float]


@dataclass
class PromptFileTask:
    """Prompts of a JSONL file, tokenized by the checkpoint's tokenizer, scored by a reward function."""

    name: str
    tokenizer: HfTokenizer
    records: list[dict[str, Any]]
    score: Score
    max_new_tokens: int

    def prompts(self, rng: Rng, n: int) -> list[TaskPrompt]:
        picks = np.asarray(rng.integers(0, len(self.records), size=n)) if hasattr(rng, "integers") else None
        indices = (
            picks.tolist()
            if picks is not None
            else [cast(random.Random, rng).randrange(len(self.records)) for _ in range(n)]
        )
        return [self._prompt(self.records[index]) for index in indices]

    def reward(self, prompt: TaskPrompt, completion_ids: Sequence[int]) -> float:
        """The reward function on the completion's text (up to its first EOS) and the prompt's record."""
        ids = list(completion_ids)
        if self.tokenizer.eos_token_id in ids:
            ids = ids[: ids.index(self.tokenizer.eos_token_id)]
        value = self.score(self.tokenizer.decode(ids), json.loads(prompt.target))
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise ValueError(f"workload.reward: returned {value!r}, not a finite number")
        return float(value)

    def _prompt(self, record: dict[str, Any]) -> TaskPrompt:
        text = record["prompt"] if isinstance(record["prompt"], str) else json.dumps(record["prompt"])
        ids = self.tokenizer.prompt_ids(record["prompt"])
        # target carries the whole record, for the reward function
        return TaskPrompt(text=text, ids=ids, target=json.dumps(record), max_new_tokens=self.max_new_tokens)


def load_prompt_task(scenario: Scenario) -> PromptFileTask:
    """The task of ``workload.prompts`` and ``workload.reward`` on ``model.path``'s tokenizer."""
    workload, model = scenario.workload, scenario.model
    if workload.prompts is None or workload.reward is None:
        raise ValueError("workload.prompts: a prompts file and workload.reward are needed for this task")
    if model.path is None:
        raise ValueError("workload.prompts: needs model.path, a checkpoint whose tokenizer reads the prompts")
    try:
        tokenizer = HfTokenizer(load_hf_tokenizer(model.path, trust_remote_code=model.trust_remote_code))
    except ValueError as exc:
        message = str(exc)
        raise ValueError(message if message.startswith("model.") else f"model.path: {message}") from None
    records = _records(workload.prompts, tokenizer)
    return PromptFileTask(
        name=workload.prompts.stem,
        tokenizer=tokenizer,
        records=records,
        score=load_score(workload.reward),
        max_new_tokens=workload.completion_tokens.cap,
    )


def _records(path: Path, tokenizer: HfTokenizer) -> list[dict[str, Any]]:
    try:
        records = read_records(path)
    except ValueError as exc:
        raise ValueError(f"workload.prompts: {str(exc).removeprefix('path: ')}") from None
    for number, record in enumerate(records, start=1):
        prompt = record.get("prompt")
        if not isinstance(prompt, str | list) or not prompt:
            raise ValueError(f"workload.prompts: record {number} of {path} has no 'prompt' (text or chat messages)")
        if isinstance(prompt, list) and not tokenizer.has_chat_template:
            raise ValueError(
                f"workload.prompts: record {number} gives chat messages; the tokenizer has no chat template"
            )
    return records


def load_score(spec: str) -> Score:
    """The reward function ``module:function``, its module imported from the path or the working directory."""
    module_name, sep, function_name = spec.partition(":")
    if not sep or not module_name or not function_name:
        raise ValueError(f"workload.reward: {spec!r}; write module:function")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())  # a reward module beside the user's work, also under the installed command
    try:
        function = getattr(importlib.import_module(module_name), function_name)
    except Exception as error:  # whatever importing the module raises
        raise ValueError(f"workload.reward: cannot import {spec!r}: {type(error).__name__}: {error}") from None
    if not callable(function):
        raise ValueError(f"workload.reward: {spec!r} is a {type(function).__name__}, not a function")
    return function
