"""The learner: policy-gradient steps on groups of scored rollouts, with checkpoints that resume exactly.

One ``train_step`` consumes a batch of groups (the G rollouts of one prompt, each with its reward)::

    groups ──split into updates_per_step minibatches of whole groups──► collate each: RolloutBatch
        before any update, minibatches 2…n: StepStart (no grad)         π_old (tis, decoupled), old values (ppo)
        for each minibatch:
        forward policy (grad), reference (no grad), value head (ppo)   logprobs at the actor's temperature
        LossBatch ──LOSSES[algorithm.loss](batch, algorithm)──► loss ──backward, clip, Adam──► one update
    metrics: mean over minibatches of the loss's figures, plus reward, KL to the initial policy, staleness

The rows of a minibatch (``executor.learning.rollout_batch``) are group-major and padded; log-probs come from
``executor.learning.token_logprobs``, which never forms the model's [N, L, vocab] logits (the output head runs
``logprob_chunk_tokens`` positions at a time, each chunk's logits recomputed in the backward pass). A minibatch
longer than ``micro_batch_tokens`` (rows × their longest row) is split into micro-batches of consecutive rows; the loss
still sees the whole minibatch: log-probs (and PPO values) are first computed without a graph, the loss's gradient with respect
to them is taken, then each micro-batch is recomputed with a graph and back-propagated with its slice of that
gradient. The gradient is the whole minibatch's, for every loss, at the cost of one more forward pass per update
when (and only when) a minibatch is split. On CUDA ``peak_memory_bytes`` reports ``torch.cuda.max_memory_allocated``
per step (absent on CPU).

Precision (``executor.generation.precision``): weights, gradients and Adam state are fp32 (master weights); with
``compute_dtype`` bf16 the forward and backward run under bf16 autocast, log-softmax and losses in fp32. The frozen
reference policy is stored in the compute dtype (it only runs forward).

Log-probs are those of the tempered distribution, softmax(logits / temperature), which is what the actors sample
from and record (``Rollout.logprobs``), so ρ = 1 for a fresh rollout. The policy stays in eval mode (autograd works
all the same): a checkpoint configured with dropout is trained with dropout off, because the actors sample with it
off and a dropped-out forward would be another policy, with ρ ≠ 1 on fresh samples. The reference is a frozen copy of the policy the
learner was built with. For PPO, ``old_values`` are the value head's outputs at the start of the step, before any
update (rollouts do not record values), and the value head is trained with the policy. For the ``tis`` and
``decoupled`` corrections, ``proximal_logprobs`` are the policy's log-probs at the start of the step (π_old). Both
come from one no-grad forward per minibatch before the step's first update (``step_start``), except for the first
minibatch, whose own forward still sees the starting weights: there π_θ = π_old (r = 1). So with ``updates_per_step``
= 1 these corrections cost no extra forward and their gradient is sg(cap(π_θ/μ))·A·∇log π_θ.

The learner counts its train steps in ``step`` (0 before the first); an actor that loads ``weights()`` after step k
should tag its tokens with version k, which makes the staleness figures (``step - version`` per token) meaningful.

Checkpoints (``executor.learning.learner_checkpoint``) hold the weights, Adam's state, the step and the RNG states; the
reference policy is not saved: a resumed learner is built from the same scenario (same initial weights).

Settings: ``LearnerConfig.algorithm`` is the scenario's ``algorithm`` section itself (``LossConfig``, an
``AlgorithmSpec``), so its defaults and checks exist once; the config adds only how the learner computes.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import torch
from torch import Tensor, nn

from ...scenarios.spec.training import PROXIMAL_CORRECTIONS
from ..generation.precision import enable_tf32, executor_dtype
from ..generation.tokenizer import Tokenizer
from .learner_checkpoint import load_learner, save_learner
from .loss_inputs import LossBatch, LossConfig, LossOutput
from .losses import LOSSES
from .rollout_batch import Group, RolloutBatch, collate, micro_batches, split_groups
from .token_logprobs import TokenLogprobs, grad_rows, policy_logprobs, stack_rows

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from ...scenarios.spec.scenario import Scenario

__all__ = ["Group", "Learner", "LearnerConfig", "StepStart", "collate", "split_groups"]

#: Loss figures that are counts over the minibatches of a step, added rather than averaged.
SUMMED_METRICS = {"trained_samples", "filtered_groups", "pairs", "skipped_groups"}
MICRO_BATCH_TOKENS = 16384  # padded tokens per forward of the learner (rows × their longest row)
LOGPROB_CHUNK_TOKENS = 1024  # completion positions whose [chunk, vocab] logits exist at once


@dataclass(frozen=True)
class LearnerConfig:
    """What the learner reads: the scenario's algorithm section, and how the learner computes it."""

    algorithm: LossConfig = field(
        default_factory=LossConfig
    )  # loss, learning rate, updates, temperature, grad_clip, ...
    compute_dtype: str = "fp32"  # fp32, or bf16 (autocast over fp32 master weights)
    micro_batch_tokens: int = MICRO_BATCH_TOKENS
    logprob_chunk_tokens: int = LOGPROB_CHUNK_TOKENS

    def __post_init__(self) -> None:
        if self.micro_batch_tokens < 1 or self.logprob_chunk_tokens < 1:
            raise ValueError("micro_batch_tokens and logprob_chunk_tokens must be >= 1")
        executor_dtype(self.compute_dtype)

    @classmethod
    def from_scenario(cls, scenario: Scenario) -> LearnerConfig:
        algorithm = scenario.algorithm
        if algorithm.updates_per_step > scenario.workload.prompts_per_step:
            raise ValueError(
                f"algorithm.updates_per_step: {algorithm.updates_per_step} minibatches of whole groups need at least "
                f"as many groups per step (workload.prompts_per_step = {scenario.workload.prompts_per_step})"
            )
        loss_config = LossConfig.of(algorithm, scenario.workload.completion_tokens.cap)
        return cls(algorithm=loss_config, compute_dtype=scenario.model.dtype)


@dataclass(frozen=True, eq=False)
class StepStart:
    """What a minibatch's loss reads from the policy at the start of the step, before any of its updates."""

    proximal_logprobs: Tensor | None = None  # [N, T] π_prox (correction ``decoupled``)
    old_values: Tensor | None = None  # [N, T] the value head's outputs (PPO)


class PolicyOutput(NamedTuple):
    """The policy's log-probs at the completion tokens of some rows, and the value head's values there (PPO)."""

    logprobs: Tensor  # [n, t]
    values: Tensor | None  # [n, t]


class Learner:
    """Owns the policy, its frozen initial copy, an optional value head (PPO) and the Adam optimizer."""

    def __init__(
        self,
        model: PreTrainedModel,
        config: LearnerConfig,
        pad_token_id: int,
        device: str | torch.device = "cpu",
    ) -> None:
        self.device = torch.device(device)
        self.config = config
        self.pad_token_id = pad_token_id
        self.compute_dtype = executor_dtype(config.compute_dtype)
        enable_tf32(self.device)
        master = torch.promote_types(next(model.parameters()).dtype, torch.float32)  # fp32 (fp64 stays fp64)
        self.model = model.to(self.device, master).eval()  # dropout off: the policy the actors sample from
        self.reference = copy.deepcopy(self.model).eval().requires_grad_(False)
        if self.compute_dtype != torch.float32:  # it only runs forward, in the compute dtype: keep it there
            self.reference.to(self.compute_dtype)
        self.algorithm = config.algorithm
        self.value_head = self._new_value_head() if self.algorithm.loss == "ppo" else None
        self.optimizer = torch.optim.Adam(self._trained_parameters(), lr=self.algorithm.learning_rate)
        self.loss_fn = LOSSES[self.algorithm.loss]
        self.step = 0

    @classmethod
    def from_scenario(
        cls,
        scenario: Scenario,
        model: PreTrainedModel,
        tokenizer_or_pad_id: Tokenizer | int,
        device: str | torch.device = "cpu",
    ) -> Learner:
        pad_token_id = tokenizer_or_pad_id if isinstance(tokenizer_or_pad_id, int) else tokenizer_or_pad_id.pad_token_id
        return cls(model, LearnerConfig.from_scenario(scenario), pad_token_id, device)

    def _new_value_head(self) -> nn.Linear:
        """A linear value on the last hidden state, zero-initialised (every value starts at 0)."""
        hidden = self.model.config.get_text_config(decoder=True).hidden_size
        head = nn.Linear(hidden, 1, device=self.device, dtype=next(self.model.parameters()).dtype)
        nn.init.zeros_(head.weight)
        nn.init.zeros_(head.bias)
        return head

    def _trained_parameters(self) -> list[nn.Parameter]:
        parameters = list(self.model.parameters())
        return parameters + (list(self.value_head.parameters()) if self.value_head is not None else [])

    # ------------------------------------------------------------ training

    def train_step(self, groups: Sequence[Group]) -> dict[str, float]:
        """One learner step: ``updates_per_step`` optimizer updates over minibatches of whole groups.

        Returns the loss's metrics averaged over the minibatches (``loss``, ``ratio_mean``, ``clip_fraction``,
        ``truncated_fraction``, ``kl_to_behaviour``, ... as ``executor.learning.losses`` names them), ``kl`` (k3 to the initial
        policy), ``grad_norm`` (before clipping), and figures of the whole batch: ``reward_mean``, ``reward_std``,
        ``completion_tokens_mean``, ``staleness_mean`` and ``staleness_max`` (over completion tokens, each
        ``step - version`` of the version that produced it), ``samples`` (those the loss took a gradient from:
        online DPO's pairs, the groups ``filter_zero_variance`` kept), ``samples_consumed`` (the batch's),
        ``updates``, and
        on CUDA ``peak_memory_bytes`` (the step's peak of allocated memory; absent on CPU).
        """
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        batches = [
            collate(part, self.pad_token_id).to(self.device)
            for part in split_groups(groups, self.algorithm.updates_per_step)
        ]
        # Before any update: the first minibatch's own forward sees the step's starting weights.
        starts = [StepStart(), *(self.step_start(batch) for batch in batches[1:])]
        update_metrics = [self._update(batch, start) for batch, start in zip(batches, starts, strict=True)]
        metrics = {name: float(np.mean([m[name] for m in update_metrics])) for name in update_metrics[0]}
        for name in SUMMED_METRICS.intersection(metrics):
            metrics[name] = float(sum(m[name] for m in update_metrics))
        metrics.update(self._batch_figures(batches))
        metrics["samples"] = metrics.pop("trained_samples", metrics["samples_consumed"])
        if self.device.type == "cuda":
            metrics["peak_memory_bytes"] = float(torch.cuda.max_memory_allocated(self.device))
        self.step += 1
        return metrics

    @torch.no_grad()
    def step_start(self, batch: RolloutBatch) -> StepStart:
        """What the loss needs from the weights as they are now, before the step's updates (no grad):
        π_old log-probs for the ``tis`` and ``decoupled`` corrections, the value head's ``old_values`` for PPO."""
        proximal = self.algorithm.correction in PROXIMAL_CORRECTIONS
        if not proximal and self.value_head is None:
            return StepStart()
        passes = [self._policy(batch, rows) for rows in micro_batches(batch, self.config.micro_batch_tokens)]
        columns = batch.mask.shape[1]
        values = [output.values for output in passes if output.values is not None]
        return StepStart(
            proximal_logprobs=stack_rows([output.logprobs for output in passes], columns) if proximal else None,
            old_values=stack_rows(values, columns) if values else None,
        )

    def _update(self, batch: RolloutBatch, start: StepStart) -> dict[str, float]:
        parts = micro_batches(batch, self.config.micro_batch_tokens)
        self.optimizer.zero_grad(set_to_none=True)
        if len(parts) == 1:
            output = self.loss_fn(self.loss_batch(batch, start), self.algorithm)
            output.loss.backward()
        else:
            output = self._accumulate(batch, parts, start)
        grad_norm = self._clip_gradients()
        self.optimizer.step()
        metrics = dict(output.metrics)
        metrics["kl"] = metrics.get("kl_to_reference", 0.0)
        metrics["grad_norm"] = grad_norm
        return metrics

    def _accumulate(self, batch: RolloutBatch, parts: list[slice], start: StepStart) -> LossOutput:
        """The minibatch's gradient, one micro-batch's graph at a time (see the module docstring)."""
        columns = batch.mask.shape[1]
        with torch.no_grad():
            passes = [self._policy(batch, rows) for rows in parts]
            reference = stack_rows([self._logprobs(batch, self.reference, rows).logprobs for rows in parts], columns)
        logprobs = stack_rows([output.logprobs for output in passes], columns).requires_grad_()
        values = None
        if self.value_head is not None:
            part_values = [output.values for output in passes if output.values is not None]
            values = stack_rows(part_values, columns).requires_grad_()
        loss_input = self._loss_input(batch, logprobs, reference, values, start)
        output = self.loss_fn(loss_input, self.algorithm)
        output.loss.backward()  # gradients with respect to the log-probs (and values) only
        for rows in parts:
            part = self._policy(batch, rows)
            tensors, grads = [part.logprobs], [grad_rows(logprobs, rows, part.logprobs)]
            if values is not None and part.values is not None:
                tensors.append(part.values)
                grads.append(grad_rows(values, rows, part.values))
            torch.autograd.backward(tensors, grads)
        return output

    def _clip_gradients(self) -> float:
        max_norm = self.algorithm.grad_clip if self.algorithm.grad_clip is not None else float("inf")
        return float(nn.utils.clip_grad_norm_(self._trained_parameters(), max_norm))

    def loss_batch(self, batch: RolloutBatch, start: StepStart | None = None) -> LossBatch:
        """The loss's input: current log-probs (with grad), the actor's, the reference's, values for PPO, and
        what ``start`` holds from the start of the step; what it lacks comes from the weights now (a step's first
        update: π_prox = π_θ and old values = values)."""
        with torch.no_grad():
            reference_logprobs = self._logprobs(batch, self.reference).logprobs
        policy = self._policy(batch)
        return self._loss_input(batch, policy.logprobs, reference_logprobs, policy.values, start or StepStart())

    @staticmethod
    def _loss_input(
        batch: RolloutBatch, logprobs: Tensor, reference: Tensor, values: Tensor | None, start: StepStart
    ) -> LossBatch:
        proximal = start.proximal_logprobs if start.proximal_logprobs is not None else logprobs.detach()
        old_values = start.old_values if start.old_values is not None or values is None else values.detach()
        return LossBatch(
            logprobs=logprobs,
            behaviour_logprobs=batch.behaviour_logprobs,
            mask=batch.mask,
            rewards=batch.rewards,
            group_size=batch.group_size,
            reference_logprobs=reference,
            values=values,
            old_values=old_values,
            proximal_logprobs=proximal,
        )

    def _policy(self, batch: RolloutBatch, rows: slice = slice(None)) -> PolicyOutput:
        """The policy's log-probs [n, t] at the completion tokens of ``rows``, and the value head's there (PPO)."""
        output = self._logprobs(batch, self.model, rows, need_hidden=self.value_head is not None)
        if self.value_head is None or output.hidden is None:
            return PolicyOutput(output.logprobs, None)
        values = self.value_head(output.hidden.to(self.value_head.weight.dtype)).squeeze(-1)
        return PolicyOutput(output.logprobs, values)

    def _logprobs(
        self, batch: RolloutBatch, model: nn.Module, rows: slice = slice(None), need_hidden: bool = False
    ) -> TokenLogprobs:
        """``model``'s tempered log-probs at the completion tokens of ``rows`` (``executor.learning.token_logprobs``)."""
        return policy_logprobs(
            model,
            batch,
            rows,
            temperature=self.algorithm.temperature,
            chunk=self.config.logprob_chunk_tokens,
            compute_dtype=self.compute_dtype,
            need_hidden=need_hidden,
        )

    def _batch_figures(self, batches: Sequence[RolloutBatch]) -> dict[str, float]:
        rewards = torch.cat([batch.rewards for batch in batches])
        mask = torch.cat([batch.mask.flatten() for batch in batches]).bool()
        staleness = torch.cat([(self.step - batch.versions).flatten() for batch in batches])[mask].float()
        lengths = torch.cat([batch.mask.sum(dim=1) for batch in batches])
        return {
            "reward_mean": rewards.mean().item(),
            "reward_std": rewards.std(correction=0).item(),
            "completion_tokens_mean": lengths.mean().item(),
            "staleness_mean": staleness.mean().item(),
            "staleness_max": staleness.max().item(),
            "samples_consumed": float(len(rewards)),
            "updates": float(len(batches)),
        }

    # ------------------------------------------------------------ weights and checkpoints

    def weights(self) -> dict[str, Tensor]:
        """A copy of the policy's state dict: what an actor loads (no value head)."""
        return {name: tensor.detach().clone() for name, tensor in self.model.state_dict().items()}

    def save_checkpoint(self, directory: str | Path, step: int | None = None) -> Path:
        """Write weights, optimizer state, step (default: ``self.step``) and RNG states into ``directory``."""
        saved_step = self.step if step is None else step
        return save_learner(Path(directory), self.model, self.value_head, self.optimizer, saved_step)

    def load_checkpoint(self, directory: str | Path) -> int:
        """Restore what ``save_checkpoint`` wrote; the saved step (also set as ``self.step``)."""
        self.step = load_learner(Path(directory), self.model, self.value_head, self.optimizer, self.device)
        return self.step
