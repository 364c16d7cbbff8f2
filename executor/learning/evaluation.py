"""Evaluation: the policy of a step answers held-out prompts, greedily and sampled, outside the run's clock.

    run.eval_every K ─► steps 0, K, 2K, …, last: Evaluator.snapshot(step, weights)   (a CPU copy, timed)
    run ends, clock stopped ─► Evaluator.table(model): each snapshot × (greedy, sampled[, expected]) ─► eval.parquet

Held-out prompts come from the task itself, drawn from a random stream no training group uses
(``held_out_prompts``: ``default_rng([seed, EVAL_STREAM, 0])``; a training group draws from
``default_rng([seed, group])``), distinct by text; the training draws skip every prompt whose text is held out
(``executor.tasks.work.WorkSource``), so the learner never trains on them, however small the task's prompt space.

Timing: the only evaluation work inside the run's clock is copying the weights at each evaluated step, logged
per step as ``eval_snapshot_s`` in metrics.parquet; ``study`` subtracts it from the wall time to a target. The
answers themselves are generated after the run's clock stops, each row of eval.parquet carrying its ``seconds``.

eval.parquet, one row per (step, mode): ``step`` (learner steps done when the weights were taken), ``mode``
(``greedy`` or ``sampled`` at ``algorithm.temperature``), ``reward_mean``, ``reward_std`` (population, over the
prompts), ``prompts``, ``completion_tokens_mean``, ``seconds``.

``expected``, where the task allows it (one answer token that scores 1, a budget of one token: the ``median``
and ``max`` tasks' ``answer_token``): the reward's exact expected value under sampling at the temperature, the
answer token's probability (softmax of the logits / temperature), averaged over the prompts. It has no sampling
noise: one sampled answer per prompt on 32 prompts has an SD of about 0.09 at a reward of 0.5, and a policy at
0.40 crosses 0.5 by chance in one evaluation of seven.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel

    from ...scenarios.spec.scenario import Scenario
    from ..tasks.generated import Task, TaskPrompt

__all__ = [
    "EVAL_COLUMNS",
    "EVAL_MODES",
    "EVAL_STREAM",
    "EXPECTED",
    "Evaluator",
    "evaluate",
    "expected_reward",
    "held_out_prompts",
]

EVAL_STREAM = 0xE7A1  # the held-out prompts' stream key: default_rng([seed, EVAL_STREAM, 0])
EVAL_MODES = ("greedy", "sampled")  # every task; EXPECTED besides where the task has one answer token
EXPECTED = "expected"
EVAL_COLUMNS = ("step", "mode", "reward_mean", "reward_std", "prompts", "completion_tokens_mean", "seconds")
DRAWS_PER_PROMPT = 50  # draws allowed per distinct held-out prompt before the task is judged too small


def held_out_prompts(task: Task, seed: int, count: int) -> list[TaskPrompt]:
    """``count`` prompts of distinct text from the task's held-out stream; ValueError naming
    ``run.eval_prompts`` when the task has too few distinct prompts to hold that many out."""
    rng = np.random.default_rng([seed, EVAL_STREAM, 0])
    chosen: dict[str, TaskPrompt] = {}
    for _ in range(DRAWS_PER_PROMPT * count):
        prompt = task.prompts(rng, 1)[0]
        chosen.setdefault(prompt.text, prompt)
        if len(chosen) == count:
            return list(chosen.values())
    raise ValueError(
        f"run.eval_prompts: task {task.name!r} gave {len(chosen)} distinct prompts in {DRAWS_PER_PROMPT * count} "
        f"draws, fewer than the {count} to hold out; lower run.eval_prompts"
    )


def evaluate(
    model: PreTrainedModel,
    task: Task,
    prompts: list[TaskPrompt],
    *,
    mode: str,
    temperature: float,
    max_tokens: int,
    seed: int,
    device: str | torch.device = "cpu",
) -> dict[str, float]:
    """The mean reward (and its spread, the completions' mean length) of ``model`` answering ``prompts`` once."""
    from ..generation.engine import ContinuousBatchingEngine, generate_all
    from ..tasks.generated import to_request

    tokenizer = task.tokenizer
    engine = ContinuousBatchingEngine(
        model,
        max_batch=len(prompts),
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        temperature=temperature,
        greedy=mode == "greedy",
        seed=seed,
        device=device,
    )
    rollouts = generate_all(engine, [to_request(prompt, i, max_tokens) for i, prompt in enumerate(prompts)])
    rollouts.sort(key=lambda rollout: rollout.id)
    rewards = np.array([task.reward(prompts[r.id], r.tokens) for r in rollouts], dtype=float)
    return {
        "reward_mean": float(rewards.mean()),
        "reward_std": float(rewards.std()),
        "prompts": float(len(prompts)),
        "completion_tokens_mean": float(np.mean([len(r.tokens) for r in rollouts])),
    }


def expected_reward(
    model: PreTrainedModel, task: Task, prompts: list[TaskPrompt], *, temperature: float, device: str | torch.device
) -> dict[str, float] | None:
    """The ``expected`` mode's figures (module docstring), or None where a prompt has no single answer token."""
    import torch

    answers = [getattr(task, "answer_token", lambda prompt: None)(prompt) for prompt in prompts]
    if any(answer is None for answer in answers):
        return None
    probabilities = []
    with torch.no_grad():
        for prompt, answer in zip(prompts, answers, strict=True):
            logits = model(torch.tensor([prompt.ids], device=device)).logits[0, -1].float()
            probabilities.append(float(torch.softmax(logits / temperature, dim=-1)[answer]))
    values = np.array(probabilities)
    return {"reward_mean": float(values.mean()), "reward_std": float(values.std()), "prompts": float(len(prompts)),
            "completion_tokens_mean": 1.0}  # fmt: skip


class Evaluator:
    """The held-out prompts of a run and the weights of each evaluated step, answered once the run ends."""

    def __init__(self, scenario: Scenario, task: Task) -> None:
        run = scenario.run
        assert run.eval_every is not None  # built only for a run that evaluates
        self.scenario, self.task, self.every = scenario, task, run.eval_every
        self.prompts = held_out_prompts(task, run.seed, run.eval_prompts)
        self.snapshots: dict[int, dict[str, torch.Tensor]] = {}

    @property
    def held_out(self) -> frozenset[str]:
        """The held-out prompts' texts: training draws skip them."""
        return frozenset(prompt.text for prompt in self.prompts)

    def due(self, steps_done: int) -> bool:
        """Whether the weights after ``steps_done`` steps are evaluated: step 0, every K, and the last."""
        return steps_done % self.every == 0 or steps_done == self.scenario.run.steps

    def snapshot(self, steps_done: int, model: torch.nn.Module) -> float:
        """Keep a CPU copy of ``model``'s weights for step ``steps_done``; the seconds the copy took."""
        start = time.perf_counter()
        self.snapshots[steps_done] = {name: t.detach().to("cpu", copy=True) for name, t in model.state_dict().items()}
        return time.perf_counter() - start

    def table(self, model: PreTrainedModel, device: str | torch.device = "cpu") -> pd.DataFrame:
        """eval.parquet's rows: every snapshot, greedy and sampled, answered by ``model`` loaded with it.

        The snapshots are consumed: a second call (a run that fails while writing) evaluates nothing again.
        """
        import torch

        rows = []
        snapshots, self.snapshots = self.snapshots, {}
        cap = self.scenario.workload.completion_tokens.cap
        temperature = self.scenario.algorithm.temperature
        for step, weights in sorted(snapshots.items()):
            with torch.no_grad():
                model.load_state_dict(weights)
            for mode in EVAL_MODES:
                start = time.perf_counter()
                figures = evaluate(
                    model,
                    self.task,
                    self.prompts,
                    mode=mode,
                    temperature=temperature,
                    max_tokens=cap,
                    seed=self.scenario.run.seed + step,
                    device=device,
                )
                rows.append({"step": step, "mode": mode, **figures, "seconds": time.perf_counter() - start})
            start = time.perf_counter()
            exact = expected_reward(model, self.task, self.prompts, temperature=temperature, device=device)
            if exact is not None:
                rows.append({"step": step, "mode": EXPECTED, **exact, "seconds": time.perf_counter() - start})
        return pd.DataFrame(rows, columns=list(EVAL_COLUMNS))
