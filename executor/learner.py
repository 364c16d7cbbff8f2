"""The learner: policy-gradient steps on groups of scored rollouts, with checkpoints that resume exactly.

One ``train_step`` consumes a batch of groups (the G rollouts of one prompt, each with its reward)::

    groups ──split into updates_per_step minibatches of whole groups──► for each minibatch:
        collate: rows group-major, prompt+completion right-padded      RolloutBatch
        forward policy (grad), reference (no grad), value head (ppo)   logprobs at the actor's temperature
        LossBatch ──LOSSES[algorithm.loss](batch, LossConfig)──► loss ──backward, clip, Adam──► one update
    metrics: mean over minibatches of the loss's figures, plus reward, KL to the initial policy, staleness

Row layout of one minibatch (prompt ``p``, completion ``c``, padding ``.``; completion tokens sit at different
columns of the forward input, so the column predicting each completion token is gathered per row)::

    input_ids [N, L]           logprobs, behaviour_logprobs, mask [N, T]
    p p p c c c .              c c c      1 1 1
    p p c c . . .              c c .      1 1 0
    p p p p c . .              c . .      1 0 0

Log-probs are those of the tempered distribution, softmax(logits / temperature), which is what the actors sample
from and record (``Rollout.logprobs``), so ρ = 1 for a fresh rollout. The reference is a frozen copy of the policy the
learner was built with. For PPO, ``old_values`` are the value head's outputs at the start of the step, before any
update (rollouts do not record values), and the value head is trained with the policy.

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
from asyncrl.executor.losses import LOSSES, LossBatch, LossConfig
from asyncrl.executor.tokenizer import Tokenizer
from asyncrl.scenarios.workload import minibatch_bounds
from safetensors.torch import load_model as load_safetensors_model
from safetensors.torch import save_model as save_safetensors_model
from torch import Tensor, nn

if TYPE_CHECKING:
    from asyncrl.scenarios.scenario import Scenario
    from transformers import PreTrainedModel

Group = Sequence[tuple[Rollout, float]]  # the G scored rollouts of one prompt

POLICY_FILE = "policy.safetensors"
VALUE_HEAD_FILE = "value_head.safetensors"
OPTIMIZER_FILE = "optimizer.pt"
STATE_FILE = "learner_state.pt"


@dataclass(frozen=True)
class LearnerConfig:
    """Everything the learner reads from a scenario, as plain values."""

    loss: str = "grpo"
    learning_rate: float = 1e-4
    updates_per_step: int = 1
    temperature: float = 1.0
    loss_config: LossConfig = field(default_factory=LossConfig)
    max_grad_norm: float | None = 1.0  # clip of the global gradient norm per update; None = no clipping

    def __post_init__(self) -> None:
        if self.loss not in LOSSES:
            raise ValueError(f"algorithm.loss: unknown loss {self.loss!r}; use one of {sorted(LOSSES)}")
        if self.updates_per_step < 1 or self.temperature <= 0 or self.learning_rate <= 0:
            raise ValueError("updates_per_step must be >= 1, temperature and learning_rate > 0")

    @classmethod
    def from_scenario(cls, scenario: Scenario) -> LearnerConfig:
        algorithm = scenario.algorithm
        if algorithm.updates_per_step > scenario.workload.prompts_per_step:
            raise ValueError(
                f"algorithm.updates_per_step: {algorithm.updates_per_step} minibatches of whole groups need at least "
                f"as many groups per step (workload.prompts_per_step = {scenario.workload.prompts_per_step})"
            )
        loss_config = LossConfig(
            clip_eps=algorithm.clip_eps,
            truncation_cap=algorithm.truncation_cap,
            kl_coef=algorithm.kl_coef,
            dpo_beta=algorithm.dpo_beta,
        )
        return cls(
            loss=algorithm.loss,
            learning_rate=algorithm.learning_rate,
            updates_per_step=algorithm.updates_per_step,
            temperature=algorithm.temperature,
            loss_config=loss_config,
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
        self.model = model.to(self.device).train()
        self.reference = copy.deepcopy(self.model).eval().requires_grad_(False)
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
        ``completion_tokens_mean``, ``staleness_mean``, ``staleness_max``, ``samples``, ``updates``.
        """
        batches = [
            collate(part, self.pad_token_id).to(self.device)
            for part in split_groups(groups, self.config.updates_per_step)
        ]
        old_values = [self._values(batch) if self.value_head is not None else None for batch in batches]
        update_metrics = [self._update(batch, values) for batch, values in zip(batches, old_values, strict=True)]
        metrics = {name: float(np.mean([m[name] for m in update_metrics])) for name in update_metrics[0]}
        metrics.update(self._batch_figures(batches))
        self.step += 1
        return metrics

    def _update(self, batch: RolloutBatch, old_values: Tensor | None) -> dict[str, float]:
        loss_batch = self.loss_batch(batch, old_values)
        output = self.loss_fn(loss_batch, self.config.loss_config)
        self.optimizer.zero_grad(set_to_none=True)
        output.loss.backward()
        grad_norm = self._clip_gradients()
        self.optimizer.step()
        metrics = dict(output.metrics)
        metrics["kl"] = metrics.get("kl_to_reference", 0.0)
        metrics["grad_norm"] = grad_norm
        return metrics

    def _clip_gradients(self) -> float:
        max_norm = self.config.max_grad_norm if self.config.max_grad_norm is not None else float("inf")
        return float(nn.utils.clip_grad_norm_(self._trained_parameters(), max_norm))

    def loss_batch(self, batch: RolloutBatch, old_values: Tensor | None = None) -> LossBatch:
        """The loss's input: current log-probs (with grad), the actor's, the reference's, and values for PPO."""
        with torch.no_grad():
            _, reference_logprobs = self._forward(batch, self.reference, need_hidden=False)
        hidden, logprobs = self._forward(batch, self.model, need_hidden=self.value_head is not None)
        values = self.value_head(hidden).squeeze(-1) if self.value_head is not None else None
        if values is not None and old_values is None:
            old_values = values.detach()
        return LossBatch(
            logprobs=logprobs,
            behaviour_logprobs=batch.behaviour_logprobs,
            mask=batch.mask,
            rewards=batch.rewards,
            group_size=batch.group_size,
            reference_logprobs=reference_logprobs,
            values=values,
            old_values=old_values,
        )

    @torch.no_grad()
    def _values(self, batch: RolloutBatch) -> Tensor:
        """The value head's [N, T] outputs before any update of the step: PPO's ``old_values``."""
        hidden, _ = self._forward(batch, self.model, need_hidden=True)
        assert self.value_head is not None and hidden is not None
        return self.value_head(hidden).squeeze(-1)

    def _forward(self, batch: RolloutBatch, model: nn.Module, need_hidden: bool) -> tuple[Tensor | None, Tensor]:
        """Last hidden states [N, T, H] (when asked) and tempered log-probs [N, T] at the completion tokens."""
        positions = torch.arange(batch.input_ids.shape[1], device=self.device).expand_as(batch.input_ids)
        output = model(
            input_ids=batch.input_ids,
            attention_mask=batch.attention_mask,
            position_ids=positions,
            use_cache=False,
            output_hidden_states=need_hidden,
        )
        logits = _at_columns(output.logits, batch.predicting_columns).float() / self.config.temperature
        logprobs = torch.log_softmax(logits, dim=-1).gather(-1, batch.completion_ids[..., None]).squeeze(-1)
        hidden = _at_columns(output.hidden_states[-1], batch.predicting_columns) if need_hidden else None
        return hidden, logprobs

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
