"""The learner: policy-gradient steps on groups of scored rollouts, with checkpoints that resume exactly.

One ``train_step`` consumes a batch of groups (the G rollouts of one prompt, each with its reward)::

    groups ──split into updates_per_step minibatches of whole groups──► collate each: RolloutBatch
        before any update, minibatches 2…n: StepStart (no grad)         π_prox (decoupled), old values (ppo)
        for each minibatch:
        forward policy (grad), reference (no grad), value head (ppo)   logprobs at the actor's temperature
        LossBatch ──LOSSES[algorithm.loss](batch, LossConfig)──► loss ──backward, clip, Adam──► one update
    metrics: mean over minibatches of the loss's figures, plus reward, KL to the initial policy, staleness

Row layout of one minibatch (prompt ``p``, completion ``c``, padding ``.``; completion tokens sit at different
columns of the forward input, so the column predicting each completion token is gathered per row)::

    input_ids [N, L]           logprobs, behaviour_logprobs, mask [N, T]
    p p p c c c .              c c c      1 1 1
    p p c c . . .              c c .      1 1 0
    p p p p c . .              c . .      1 0 0

Memory: the model's [N, L, vocab] logits are never formed. The learner runs the decoder (``model.base_model``), keeps
the hidden states at the predicting columns only ([N, T, H]), and applies the output head ``logprob_chunk_tokens``
positions at a time, each chunk's logits recomputed in the backward pass (``token_logprobs``). A minibatch longer than
``micro_batch_tokens`` (rows × their longest row) is split into micro-batches of consecutive rows; the loss still sees
the whole minibatch: log-probs (and PPO values) are first computed without a graph, the loss's gradient with respect
to them is taken, then each micro-batch is recomputed with a graph and back-propagated with its slice of that
gradient. The gradient is the whole minibatch's, for every loss, at the cost of one more forward pass per update
when (and only when) a minibatch is split. On CUDA ``peak_memory_bytes`` reports ``torch.cuda.max_memory_allocated``
per step (absent on CPU).

Precision (``executor.precision``): weights, gradients and Adam state are fp32 (master weights); with
``compute_dtype`` bf16 the forward and backward run under bf16 autocast, log-softmax and losses in fp32. The frozen
reference policy is stored in the compute dtype (it only runs forward).

Log-probs are those of the tempered distribution, softmax(logits / temperature), which is what the actors sample
from and record (``Rollout.logprobs``), so ρ = 1 for a fresh rollout. The policy stays in eval mode (autograd works
all the same): a checkpoint configured with dropout is trained with dropout off, because the actors sample with it
off and a dropped-out forward would be another policy, with ρ ≠ 1 on fresh samples. The reference is a frozen copy of the policy the
learner was built with. For PPO, ``old_values`` are the value head's outputs at the start of the step, before any
update (rollouts do not record values), and the value head is trained with the policy. For the ``decoupled``
correction, ``proximal_logprobs`` are the policy's log-probs at the start of the step (π_prox). Both come from one
no-grad forward per minibatch before the step's first update (``step_start``), except for the first minibatch, whose
own forward still sees the starting weights: there π_θ = π_prox (r = 1). So with ``updates_per_step`` = 1 the
``decoupled`` correction costs no extra forward and reduces to the weight sg(min(π_θ/μ, c)) without a clip.

The learner counts its train steps in ``step`` (0 before the first); an actor that loads ``weights()`` after step k
should tag its tokens with version k, which makes the staleness figures (``step - version`` per token) meaningful.

Checkpoint directory: ``policy.safetensors`` (and ``value_head.safetensors`` for PPO), ``optimizer.pt`` and
``learner_state.pt`` (step and the torch, numpy and Python RNG states). It is written to a sibling ``.partial``
directory that replaces the old one only once complete, so a crash while writing leaves the previous checkpoint whole.
The reference policy is not saved: a resumed learner is built from the same scenario (same initial weights).
"""

from __future__ import annotations

import copy
import random
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from asyncrl.executor.engine import Rollout
from asyncrl.executor.losses import LOSSES, LossBatch, LossConfig, LossOutput
from asyncrl.executor.precision import autocast, enable_tf32, executor_dtype
from asyncrl.executor.tokenizer import Tokenizer
from asyncrl.scenarios.workload import minibatch_bounds
from safetensors.torch import load_model as load_safetensors_model
from safetensors.torch import save_model as save_safetensors_model
from torch import Tensor, nn
from torch.nn import functional as F
from torch.utils.checkpoint import checkpoint

if TYPE_CHECKING:
    from asyncrl.scenarios.scenario import AlgorithmSpec, Scenario
    from transformers import PreTrainedModel

Group = Sequence[tuple[Rollout, float]]  # the G scored rollouts of one prompt

POLICY_FILE = "policy.safetensors"
VALUE_HEAD_FILE = "value_head.safetensors"
OPTIMIZER_FILE = "optimizer.pt"
STATE_FILE = "learner_state.pt"
MICRO_BATCH_TOKENS = 16384  # padded tokens per forward of the learner (rows × their longest row)
LOGPROB_CHUNK_TOKENS = 1024  # completion positions whose [chunk, vocab] logits exist at once
# Output-head transformations besides the linear layer; a model with any of them gets its log-probs from full logits.
_LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "logits_scaling", "output_multiplier_scale")


@dataclass(frozen=True)
class LearnerConfig:
    """Everything the learner reads from a scenario, as plain values."""

    loss: str = "grpo"
    learning_rate: float = 1e-4
    updates_per_step: int = 1
    temperature: float = 1.0
    loss_config: LossConfig = field(default_factory=LossConfig)
    max_grad_norm: float | None = 1.0  # clip of the global gradient norm per update; None = no clipping
    compute_dtype: str = "fp32"  # fp32, or bf16 (autocast over fp32 master weights)
    micro_batch_tokens: int = MICRO_BATCH_TOKENS
    logprob_chunk_tokens: int = LOGPROB_CHUNK_TOKENS

    def __post_init__(self) -> None:
        if self.loss not in LOSSES:
            raise ValueError(f"algorithm.loss: unknown loss {self.loss!r}; use one of {sorted(LOSSES)}")
        if self.updates_per_step < 1 or self.temperature <= 0 or self.learning_rate <= 0:
            raise ValueError("updates_per_step must be >= 1, temperature and learning_rate > 0")
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
        return cls(
            loss=algorithm.loss,
            learning_rate=algorithm.learning_rate,
            updates_per_step=algorithm.updates_per_step,
            temperature=algorithm.temperature,
            loss_config=_loss_config(algorithm),
            max_grad_norm=algorithm.grad_clip,
            compute_dtype=scenario.model.dtype,
        )


@dataclass(frozen=True, eq=False)
class StepStart:
    """What a minibatch's loss reads from the policy at the start of the step, before any of its updates."""

    proximal_logprobs: Tensor | None = None  # [N, T] π_prox (correction ``decoupled``)
    old_values: Tensor | None = None  # [N, T] the value head's outputs (PPO)


def _loss_config(algorithm: AlgorithmSpec) -> LossConfig:
    """The loss settings of ``algorithm``, field for field."""
    return LossConfig(
        correction=algorithm.correction,
        clip_eps=algorithm.clip_eps,
        truncation_cap=algorithm.truncation_cap,
        normalise_std=algorithm.normalise_std,
        kl_coef=algorithm.kl_coef,
        dpo_beta=algorithm.dpo_beta,
        dpo_reference=algorithm.dpo_reference,
        gamma=algorithm.gamma,
        gae_lambda=algorithm.gae_lambda,
        value_clip_eps=algorithm.value_clip_eps,
        value_coef=algorithm.value_coef,
    )


@dataclass(frozen=True, eq=False)
class RolloutBatch:
    """Scored rollouts as padded tensors, rows group-major; N rows, L input columns, T completion tokens."""

    input_ids: Tensor  # [N, L] prompt then completion, right-padded with the pad token
    attention_mask: Tensor  # [N, L] 1 on prompt and completion tokens
    predicting_columns: Tensor  # [N, T] input column whose logits predict each completion token
    completion_ids: Tensor  # [N, T] completion tokens, pad token on padding
    mask: Tensor  # [N, T] 1 on completion tokens
    behaviour_logprobs: Tensor  # [N, T] the actor's log-probs, 0 on padding
    versions: Tensor  # [N, T] weights version of each token, 0 on padding
    rewards: Tensor  # [N]
    group_size: int

    def to(self, device: torch.device) -> RolloutBatch:
        moved = {name: getattr(self, name).to(device) for name in _TENSOR_FIELDS}
        return RolloutBatch(**moved, group_size=self.group_size)

    def forward_inputs(self, rows: slice) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """input_ids, attention_mask, predicting_columns, completion_ids of ``rows``, trimmed to their widths."""
        attention = self.attention_mask[rows]
        width = int(attention.sum(dim=1).max())
        completion = int(self.mask[rows].sum(dim=1).max())
        columns = self.predicting_columns[rows, :completion].clamp(max=width - 1)
        return self.input_ids[rows, :width], attention[:, :width], columns, self.completion_ids[rows, :completion]


_TENSOR_FIELDS = (
    "input_ids",
    "attention_mask",
    "predicting_columns",
    "completion_ids",
    "mask",
    "behaviour_logprobs",
    "versions",
    "rewards",
)


def collate(groups: Sequence[Group], pad_token_id: int) -> RolloutBatch:
    """Pad the groups' rollouts into tensors, group-major (rows g*G … g*G+G-1 are group g, in the given order)."""
    group_size = _common_group_size(groups)
    scored = [pair for group in groups for pair in group]
    rollouts = [rollout for rollout, _ in scored]
    input_width = max(len(r.prompt) + len(r.tokens) for r in rollouts)
    completion_width = max(len(r.tokens) for r in rollouts)
    inputs = [_padded(r.prompt + r.tokens, input_width, pad_token_id) for r in rollouts]
    mask = [_padded([1] * len(r.tokens), completion_width, 0) for r in rollouts]
    columns = [
        [min(len(r.prompt) - 1 + t, input_width - 1) for t in range(completion_width)] for r in rollouts
    ]  # padding points at a real column; the mask hides it
    return RolloutBatch(
        input_ids=torch.tensor(inputs, dtype=torch.long),
        attention_mask=torch.tensor([_padded([1] * (len(r.prompt) + len(r.tokens)), input_width, 0) for r in rollouts]),
        predicting_columns=torch.tensor(columns, dtype=torch.long),
        completion_ids=torch.tensor([_padded(r.tokens, completion_width, pad_token_id) for r in rollouts]),
        mask=torch.tensor(mask, dtype=torch.float32),
        behaviour_logprobs=torch.tensor([_padded(r.logprobs, completion_width, 0.0) for r in rollouts]),
        versions=torch.tensor([_padded(r.versions, completion_width, 0) for r in rollouts], dtype=torch.long),
        rewards=torch.tensor([reward for _, reward in scored], dtype=torch.float32),
        group_size=group_size,
    )


def _common_group_size(groups: Sequence[Group]) -> int:
    sizes = {len(group) for group in groups}
    if not groups or len(sizes) != 1 or 0 in sizes:
        raise ValueError(f"groups: need at least one group, all of the same non-zero size; got sizes {sorted(sizes)}")
    for group in groups:
        for rollout, _ in group:
            if not rollout.prompt or not rollout.tokens or len(rollout.logprobs) != len(rollout.tokens):
                raise ValueError(f"rollout {rollout.id}: needs a prompt, a completion and one log-prob per token")
    return sizes.pop()


def _padded(values: Sequence[Any], width: int, fill: Any) -> list[Any]:
    return [*values, *[fill] * (width - len(values))]


def micro_batches(batch: RolloutBatch, token_budget: int) -> list[slice]:
    """Consecutive runs of rows whose count times their longest row stays within ``token_budget`` (one row at least)."""
    widths = batch.attention_mask.sum(dim=1).tolist()
    parts: list[slice] = []
    start, longest = 0, 0
    for row, width in enumerate(widths):
        if row > start and (row - start + 1) * max(longest, width) > token_budget:
            parts.append(slice(start, row))
            start, longest = row, 0
        longest = max(longest, width)
    parts.append(slice(start, len(widths)))
    return parts


def token_logprobs(hidden: Tensor, head: nn.Module, targets: Tensor, temperature: float, chunk: int) -> Tensor:
    """log softmax(head(hidden) / temperature) at ``targets``: [N, T, H] hidden states -> [N, T] log-probs.

    ``chunk`` positions at a time, in at least float32: only one [chunk, vocab] logits tensor exists at once, and
    with a graph each chunk's logits are recomputed in the backward pass instead of kept.
    """
    flat_hidden, flat_targets = hidden.reshape(-1, hidden.shape[-1]), targets.reshape(-1)
    pieces = []
    for start in range(0, len(flat_targets), chunk):
        args = (flat_hidden[start : start + chunk], flat_targets[start : start + chunk], head, temperature)
        if torch.is_grad_enabled() and hidden.requires_grad:
            pieces.append(checkpoint(_chunk_logprobs, *args, use_reentrant=False))
        else:
            pieces.append(_chunk_logprobs(*args))
    return torch.cat(pieces).view(targets.shape) if pieces else hidden.new_zeros(targets.shape, dtype=torch.float32)


def _chunk_logprobs(hidden: Tensor, targets: Tensor, head: nn.Module, temperature: float) -> Tensor:
    logits = head(hidden)
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32)) / temperature
    return logits.gather(-1, targets[:, None]).squeeze(-1) - torch.logsumexp(logits, dim=-1)


def split_groups(groups: Sequence[Group], parts: int) -> list[list[Group]]:
    """Consecutive runs of whole groups (``scenarios.workload.minibatch_bounds``, shared with the simulator)."""
    return [list(groups[start:stop]) for start, stop in minibatch_bounds(len(groups), parts)]


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
        self.value_head = self._new_value_head() if config.loss == "ppo" else None
        self.optimizer = torch.optim.Adam(self._trained_parameters(), lr=config.learning_rate)
        self.loss_fn = LOSSES[config.loss]
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
        ``truncated_fraction``, ``kl_to_behaviour``, ... as ``executor.losses`` names them), ``kl`` (k3 to the initial
        policy), ``grad_norm`` (before clipping), and figures of the whole batch: ``reward_mean``, ``reward_std``,
        ``completion_tokens_mean``, ``staleness_mean`` and ``staleness_max`` (over completion tokens, each
        ``step - version`` of the version that produced it), ``samples``, ``updates``, and
        on CUDA ``peak_memory_bytes`` (the step's peak of allocated memory; absent on CPU).
        """
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        batches = [
            collate(part, self.pad_token_id).to(self.device)
            for part in split_groups(groups, self.config.updates_per_step)
        ]
        # Before any update: the first minibatch's own forward sees the step's starting weights.
        starts = [StepStart(), *(self.step_start(batch) for batch in batches[1:])]
        update_metrics = [self._update(batch, start) for batch, start in zip(batches, starts, strict=True)]
        metrics = {name: float(np.mean([m[name] for m in update_metrics])) for name in update_metrics[0]}
        metrics.update(self._batch_figures(batches))
        if self.device.type == "cuda":
            metrics["peak_memory_bytes"] = float(torch.cuda.max_memory_allocated(self.device))
        self.step += 1
        return metrics

    @torch.no_grad()
    def step_start(self, batch: RolloutBatch) -> StepStart:
        """What the loss needs from the weights as they are now, before the step's updates (no grad):
        π_prox log-probs for the ``decoupled`` correction, the value head's ``old_values`` for PPO."""
        proximal = self.config.loss_config.correction == "decoupled"
        if not proximal and self.value_head is None:
            return StepStart()
        passes = [self._policy(batch, rows) for rows in micro_batches(batch, self.config.micro_batch_tokens)]
        columns = batch.mask.shape[1]
        values = [v for _, v in passes if v is not None]
        return StepStart(
            proximal_logprobs=_stack_rows([logprobs for logprobs, _ in passes], columns) if proximal else None,
            old_values=_stack_rows(values, columns) if values else None,
        )

    def _update(self, batch: RolloutBatch, start: StepStart) -> dict[str, float]:
        parts = micro_batches(batch, self.config.micro_batch_tokens)
        self.optimizer.zero_grad(set_to_none=True)
        if len(parts) == 1:
            output = self.loss_fn(self.loss_batch(batch, start), self.config.loss_config)
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
            reference = _stack_rows([self._logprobs(batch, self.reference, rows)[1] for rows in parts], columns)
        logprobs = _stack_rows([logprobs for logprobs, _ in passes], columns).requires_grad_()
        values = None
        if self.value_head is not None:
            values = _stack_rows([v for _, v in passes if v is not None], columns).requires_grad_()
        loss_input = self._loss_input(batch, logprobs, reference, values, start)
        output = self.loss_fn(loss_input, self.config.loss_config)
        output.loss.backward()  # gradients with respect to the log-probs (and values) only
        for rows in parts:
            part_logprobs, part_values = self._policy(batch, rows)
            tensors, grads = [part_logprobs], [_grad_rows(logprobs, rows, part_logprobs)]
            if values is not None and part_values is not None:
                tensors.append(part_values)
                grads.append(_grad_rows(values, rows, part_values))
            torch.autograd.backward(tensors, grads)
        return output

    def _clip_gradients(self) -> float:
        max_norm = self.config.max_grad_norm if self.config.max_grad_norm is not None else float("inf")
        return float(nn.utils.clip_grad_norm_(self._trained_parameters(), max_norm))

    def loss_batch(self, batch: RolloutBatch, start: StepStart | None = None) -> LossBatch:
        """The loss's input: current log-probs (with grad), the actor's, the reference's, values for PPO, and
        what ``start`` holds from the start of the step; what it lacks comes from the weights now (a step's first
        update: π_prox = π_θ and old values = values)."""
        with torch.no_grad():
            _, reference_logprobs = self._logprobs(batch, self.reference)
        logprobs, values = self._policy(batch)
        return self._loss_input(batch, logprobs, reference_logprobs, values, start or StepStart())

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

    def _policy(self, batch: RolloutBatch, rows: slice = slice(None)) -> tuple[Tensor, Tensor | None]:
        """The policy's log-probs [n, t] at the completion tokens of ``rows``, and the value head's there (PPO)."""
        hidden, logprobs = self._logprobs(batch, self.model, rows, need_hidden=self.value_head is not None)
        if self.value_head is None or hidden is None:
            return logprobs, None
        return logprobs, self.value_head(hidden.to(self.value_head.weight.dtype)).squeeze(-1)

    def _logprobs(
        self, batch: RolloutBatch, model: nn.Module, rows: slice = slice(None), need_hidden: bool = False
    ) -> tuple[Tensor | None, Tensor]:
        """Last hidden states [n, t, H] (when asked) and tempered log-probs [n, t] at the completion tokens of
        ``rows`` (t: their longest completion); the [n, L, vocab] logits are never formed."""
        input_ids, attention_mask, columns, targets = batch.forward_inputs(rows)
        positions = torch.arange(input_ids.shape[1], device=self.device).expand_as(input_ids)
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": positions}
        temperature, chunk = self.config.temperature, self.config.logprob_chunk_tokens
        with autocast(self.device, self.compute_dtype):
            if not _head_is_linear(model):
                output = model(**inputs, use_cache=False, output_hidden_states=need_hidden)
                logits = _at_columns(output.logits, columns)
                hidden = _at_columns(output.hidden_states[-1], columns) if need_hidden else None
                return hidden, token_logprobs(logits, nn.Identity(), targets, temperature, chunk)
            states = model.base_model(**inputs, use_cache=False).last_hidden_state
            hidden = _at_columns(states, columns)
            return (hidden if need_hidden else None), token_logprobs(
                hidden, model.get_output_embeddings(), targets, temperature, chunk
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
            "samples": float(len(rewards)),
            "updates": float(len(batches)),
        }

    # ------------------------------------------------------------ weights and checkpoints

    def weights(self) -> dict[str, Tensor]:
        """A copy of the policy's state dict: what an actor loads (no value head)."""
        return {name: tensor.detach().clone() for name, tensor in self.model.state_dict().items()}

    def save_checkpoint(self, directory: str | Path, step: int | None = None) -> Path:
        """Write weights, optimizer state, step (default: ``self.step``) and RNG states into ``directory``."""
        directory = Path(directory)
        staging = directory.with_name(directory.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        save_safetensors_model(self.model, str(staging / POLICY_FILE))
        if self.value_head is not None:
            save_safetensors_model(self.value_head, str(staging / VALUE_HEAD_FILE))
        torch.save(self.optimizer.state_dict(), staging / OPTIMIZER_FILE)
        torch.save({"step": self.step if step is None else step, "rng": _rng_states()}, staging / STATE_FILE)
        shutil.rmtree(directory, ignore_errors=True)
        staging.rename(directory)
        return directory

    def load_checkpoint(self, directory: str | Path) -> int:
        """Restore what ``save_checkpoint`` wrote; the saved step (also set as ``self.step``)."""
        directory = Path(directory)
        load_safetensors_model(self.model, str(directory / POLICY_FILE), device=str(self.device))
        if self.value_head is not None:
            load_safetensors_model(self.value_head, str(directory / VALUE_HEAD_FILE), device=str(self.device))
        optimizer = torch.load(directory / OPTIMIZER_FILE, map_location=self.device, weights_only=True)
        self.optimizer.load_state_dict(optimizer)
        state = torch.load(directory / STATE_FILE, weights_only=True)
        _set_rng_states(state["rng"])
        self.step = int(state["step"])
        return self.step


def _head_is_linear(model: nn.Module) -> bool:
    """True when the logits are the output head applied to the decoder's last hidden state, and nothing more."""
    config = getattr(model, "config", None)
    if config is None or model.get_output_embeddings() is None or model.base_model is model:
        return False
    return all(getattr(config, name, None) in (None, 1.0) for name in _LOGIT_TRANSFORMS)


def _stack_rows(parts: Sequence[Tensor], columns: int) -> Tensor:
    """Per-micro-batch [n, t, ...] tensors as one [N, columns, ...], each right-padded with zeros to ``columns``."""
    return torch.cat([F.pad(part, (0, 0) * (part.dim() - 2) + (0, columns - part.shape[1])) for part in parts])


def _grad_rows(full: Tensor, rows: slice, part: Tensor) -> Tensor:
    """The slice of ``full.grad`` that belongs to the micro-batch output ``part``."""
    assert full.grad is not None
    return full.grad[rows, : part.shape[1]].to(part.dtype)


def _at_columns(per_column: Tensor, columns: Tensor) -> Tensor:
    """[N, L, D] → [N, T, D]: row i's vectors at ``columns[i]``."""
    return per_column.gather(1, columns[..., None].expand(-1, -1, per_column.shape[-1]))


def _rng_states() -> dict[str, Any]:
    """The global RNG states, as tensors and plain Python values (loadable with ``weights_only``)."""
    kind, key, position, has_gauss, cached_gaussian = np.random.get_state()
    states: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": (kind, key.tolist(), position, has_gauss, cached_gaussian),
        "python": random.getstate(),
    }
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def _set_rng_states(states: dict[str, Any]) -> None:
    torch.set_rng_state(states["torch"])
    kind, key, position, has_gauss, cached_gaussian = states["numpy"]
    np.random.set_state((kind, np.asarray(key, dtype=np.uint32), position, has_gauss, cached_gaussian))
    random.setstate(states["python"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
