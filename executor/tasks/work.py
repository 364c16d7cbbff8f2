"""What the actors generate and how it is scored, in task mode or timing mode.

    group id ──► WorkSource.requests(group) ──► G engine requests ──► actor
    finished rollouts ──► WorkSource.reward(group, sample, rollout) ──► learner

* **task mode** (``workload.task``, or ``workload.prompts`` and ``workload.reward``, set): prompts come from the task, the model
  stops at end-of-sequence or ``completion_tokens.max_tokens``, the task scores.
* **timing mode** (no task): prompt and completion lengths come from the same
  seeded ``LengthStream`` as the simulator's, each completion is forced to its
  drawn length, and the reward is a synthetic deterministic number in [0, 1):
  the learner still does the real work for every trained token.

A prompt held out for evaluation (``run.eval_every``: ``executor.learning.evaluation``) is never a training prompt:
a group's stream skips it. Group ``i`` gets the same work whatever the schedule, as in the simulator, and
the same work again when it is generated again after its engine died: its requests
are kept until it is trained or dropped (``forget``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ...scenarios.rules.workload import LengthStream
from ...scenarios.spec.scenario import Scenario

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from ..generation.engine import Request, Rollout
    from ..processes.messages import FinishedRollout
    from .generated import Task, TaskPrompt

FIRST_TIMING_TOKEN = 3
MAX_DRAWS = 1000  # draws of a group's prompt stream before every prompt is judged held out  # timing-mode prompts avoid the lowest ids, where special tokens usually sit


class WorkSource:
    """Requests for each group, in start order, and the reward of each finished rollout."""

    def __init__(
        self, scenario: Scenario, task: Task | None, model_vocab: int, held_out: frozenset[str] = frozenset()
    ) -> None:
        self.scenario = scenario
        self.held_out = held_out  # prompt texts kept for evaluation (executor.learning.evaluation): never drawn here
        self.group_size = scenario.workload.samples_per_prompt
        self.task = task
        self.model_vocab = model_vocab
        self._lengths = LengthStream(scenario)
        self._prompts: dict[int, TaskPrompt] = {}
        self._requests: dict[int, list[Request]] = {}  # by group, until it is trained or dropped

    @property
    def eos_token_id(self) -> int | None:
        return self.task.tokenizer.eos_token_id if self.task else None

    @property
    def pad_token_id(self) -> int:
        return self.task.tokenizer.pad_token_id if self.task else 0

    def requests(self, group: int) -> list[Request]:
        """The G requests of ``group``; call in group order (lengths are drawn in sequence). A group asked
        for again (generated again after its engine died) gets the requests it got first."""
        if group not in self._requests:
            self._requests[group] = self._draw(group)
        return self._requests[group]

    def _draw(self, group: int) -> list[Request]:
        from ..generation.engine import Request
        from .generated import to_request

        prompt_tokens, completion_tokens = self._lengths.next_group()
        first = group * self.group_size
        if self.task is not None:
            prompt = self._training_prompt(self.task, group)
            self._prompts[group] = prompt
            cap = self.scenario.workload.completion_tokens.cap
            return [to_request(prompt, first + j, cap) for j in range(self.group_size)]
        ids = self._timing_prompt(group, prompt_tokens)
        return [
            Request(id=first + j, prompt=ids, max_new_tokens=length, forced_length=length)
            for j, length in enumerate(completion_tokens)
        ]

    def _training_prompt(self, task: Task, group: int) -> TaskPrompt:
        """The group's prompt: the first draw of its stream whose text is not held out for evaluation."""
        rng = np.random.default_rng([self.scenario.run.seed, group])
        for _ in range(MAX_DRAWS):
            prompt = task.prompts(rng, 1)[0]
            if prompt.text not in self.held_out:
                return prompt
        raise ValueError(
            f"run.eval_prompts: {MAX_DRAWS} draws of task {task.name!r} were all held out for evaluation; "
            "lower run.eval_prompts"
        )

    def reward(self, group: int, sample: int, rollout: Rollout | FinishedRollout) -> float:
        if self.task is not None:
            return float(self.task.reward(self._prompts[group], rollout.tokens))
        return float(np.random.default_rng([self.scenario.run.seed, group, sample, 1]).random())

    def forget(self, group: int) -> None:
        """The group is trained or dropped: its prompt and requests are no longer needed."""
        self._prompts.pop(group, None)
        self._requests.pop(group, None)

    def _timing_prompt(self, group: int, length: int) -> list[int]:
        rng = np.random.default_rng([self.scenario.run.seed, group, 0])
        return rng.integers(FIRST_TIMING_TOKEN, self.model_vocab, size=length).tolist()


def load_scenario_task(scenario: Scenario) -> Task | None:
    """The scenario's task (task mode: a named task, or a prompts file and a reward), or None (timing mode)."""
    from .generated import load_task

    if scenario.workload.prompts is not None:
        from .prompt_task import load_prompt_task

        return load_prompt_task(scenario)
    return load_task(scenario.workload.task) if scenario.workload.task else None


def engine_model(scenario: Scenario, task: Task | None, device: str) -> PreTrainedModel:
    """The initial policy as an engine holds it: on ``device``, in ``model.dtype``, in eval mode.

    Built in fp32 like the learner's copy, then cast, so an engine's version 0 is the learner's, rounded.
    """
    from ..generation.precision import executor_dtype

    return policy_model(scenario, task).to(device, executor_dtype(scenario.model.dtype)).eval()


def empty_engine_model(scenario: Scenario, task: Task | None, device: str) -> PreTrainedModel:
    """An engine's model with the right layout, dtype and device but uninitialised weights (for timing loads)."""
    import torch
    from transformers import AutoModelForCausalLM

    from ...scenarios.costs.catalog import MODEL_PRESETS
    from ..generation.models import build_config
    from ..generation.precision import executor_dtype

    if scenario.model.preset is None:  # a checkpoint: its own layout, read from disk
        return engine_model(scenario, task, device)
    vocab_size = task.tokenizer.vocab_size if task else None
    config = build_config(MODEL_PRESETS[scenario.model.preset], vocab_size=vocab_size)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config).to(executor_dtype(scenario.model.dtype))
    return model.to_empty(device=device).eval()


def policy_model(scenario: Scenario, task: Task | None) -> PreTrainedModel:
    """The initial policy: a local checkpoint (``model.path``) or a preset built from its seed, in fp32."""
    from ..generation.models import build_model, load_model

    if scenario.model.path is not None:
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()  # no "Loading weights" bar per process over the run's own
        return load_model(scenario.model.path, trust_remote_code=scenario.model.trust_remote_code).float()
    if scenario.model.preset is None:
        raise ValueError("model: the executor needs model.preset or model.path")
    vocab_size = task.tokenizer.vocab_size if task else None
    return build_model(scenario.model.preset, seed=scenario.run.seed, vocab_size=vocab_size)
