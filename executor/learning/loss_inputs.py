"""What every loss takes and returns, and the token-level pieces they share (pure torch, no model code).

    LossBatch (padded per-token tensors) ─┐
                                          ├──► loss_fn(batch, config) ──► LossOutput(loss, metrics)
    LossConfig (the scenario's algorithm) ┘

Batch layout
------------
``LossBatch`` holds N = groups × G completions padded to T tokens. Rows are **group-major**:
rows ``g*G … g*G+G-1`` are the G samples of prompt g, and ``group_size`` = G. ``mask`` is 1 on
completion tokens and 0 on padding; padded positions never reach a loss, a gradient or a
metric, whatever the log-prob tensors hold there (even -inf).

Notation: π_θ current policy (``logprobs``, carries grad), μ behaviour policy that sampled the
tokens (``behaviour_logprobs``), π_ref initial policy (``reference_logprobs``), π_old the policy at
the start of the learner step (``proximal_logprobs``, for ``tis`` and ``decoupled``), m mask, R_i the scalar
reward of sample i, sg(·) stop-gradient.

Token aggregation (all token-level losses)
------------------------------------------
    token_mean(x) = Σ_{i,t} m_it x_it / Σ_{i,t} m_it
One mean over every completion token of the batch (DAPO), not a mean of per-sequence means:
every token weighs the same, so a long completion is not down-weighted per token. token_mean
normalises by the tokens of the batch it is given: a learner that splits a step into minibatches
gets one normalisation per minibatch. ``loss_normaliser: constant`` divides the policy-gradient
losses' sums by a constant instead, rows × ``max_completion_tokens`` (Dr. GRPO; ``aggregate``), so
a batch of short completions does not weigh its tokens more than one of long completions.

Settings
--------
``LossConfig`` is the scenario's ``AlgorithmSpec`` (its fields, defaults and checks, declared there
only) plus ``std_eps``, the guard of GRPO's division by the group std that no scenario sets, and
``max_completion_tokens``, the completions' cap that ``loss_normaliser: constant`` divides by (the learner
sets it from ``workload.completion_tokens``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
from pydantic import NonNegativeFloat, PositiveInt
from torch import Tensor

from ...scenarios.spec.scenario import AlgorithmSpec

__all__ = [
    "DEFAULT_LOSS_CONFIG",
    "LossBatch",
    "LossConfig",
    "LossOutput",
    "aggregate",
    "at_least_float32",
    "importance_ratio",
    "k3",
    "k3_kl",
    "masked_log_ratio",
    "masked_mean",
    "sequence_logprob",
]

_OPTIONAL_TENSORS = ("behaviour_logprobs", "mask", "reference_logprobs", "values", "old_values", "proximal_logprobs")


@dataclass(frozen=True, eq=False)
class LossBatch:
    """One learner batch: N = groups × G completions, group-major, padded to T tokens.

    ``values`` and ``old_values`` are needed by PPO only; ``reference_logprobs`` by the KL
    penalty, the KL metric and online DPO's default anchor; ``proximal_logprobs`` by the
    ``tis`` and ``decoupled`` corrections only.
    """

    logprobs: Tensor  # [N, T] current policy, with grad
    behaviour_logprobs: Tensor  # [N, T] recorded by the actor that generated the tokens
    mask: Tensor  # [N, T] 1 on completion tokens
    rewards: Tensor  # [N] scalar reward per sample
    group_size: int  # G; rows g*G … g*G+G-1 share a prompt
    reference_logprobs: Tensor | None = None  # [N, T] initial policy
    values: Tensor | None = None  # [N, T] value head now, with grad (PPO)
    old_values: Tensor | None = None  # [N, T] value head at rollout time (PPO)
    proximal_logprobs: Tensor | None = None  # [N, T] policy at the start of the learner step (tis, decoupled)

    def __post_init__(self) -> None:
        if self.logprobs.dim() != 2:
            raise ValueError(f"logprobs: expected [N, T], got shape {tuple(self.logprobs.shape)}")
        shape = self.logprobs.shape
        for name in _OPTIONAL_TENSORS:
            tensor = getattr(self, name)
            if tensor is not None and tensor.shape != shape:
                raise ValueError(f"{name}: shape {tuple(tensor.shape)} differs from logprobs {tuple(shape)}")
        if self.rewards.shape != (shape[0],):
            raise ValueError(f"rewards: expected shape ({shape[0]},), got {tuple(self.rewards.shape)}")
        if self.group_size < 1 or shape[0] % self.group_size:
            raise ValueError(f"group_size: {self.group_size} does not divide the {shape[0]} samples")


class LossConfig(AlgorithmSpec):
    """The algorithm settings as the losses read them: ``AlgorithmSpec`` itself, plus ``std_eps`` and
    ``max_completion_tokens``.

    Each loss reads the settings it needs (``correction``, ``clip_eps``, ``kl_coef``, ...); their defaults and
    checks are ``AlgorithmSpec``'s. ``LossConfig.of(scenario.algorithm)`` carries a scenario's settings over.
    """

    std_eps: NonNegativeFloat = 1e-6  # GRPO: added to the group std before dividing by it
    max_completion_tokens: PositiveInt | None = None  # loss_normaliser constant: the longest completion; None: T

    @classmethod
    def of(cls, algorithm: AlgorithmSpec, max_completion_tokens: int | None = None) -> LossConfig:
        """``algorithm``'s settings, every field of it (and the completions' cap, for a constant normaliser)."""
        return cls.model_validate({**algorithm.model_dump(), "max_completion_tokens": max_completion_tokens})


DEFAULT_LOSS_CONFIG = LossConfig()


class LossOutput(NamedTuple):
    loss: Tensor  # scalar, differentiable
    metrics: dict[str, float]


def at_least_float32(tensor: Tensor) -> Tensor:
    """Half/bfloat16 (and integer) inputs are upcast so exp and sums stay accurate; float64 stays."""
    return tensor.to(torch.promote_types(tensor.dtype, torch.float32))


def masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    """token_mean: mean of ``values`` over positions where ``mask`` is set (0 if none)."""
    keep = mask.bool()
    return torch.where(keep, values, 0.0).sum() / keep.sum().clamp(min=1)


def aggregate(values: Tensor, mask: Tensor, config: LossConfig) -> Tensor:
    """The loss's sum of token terms over its normaliser: token_mean (``tokens``), or Σ m·x / (rows ·
    ``max_completion_tokens``) (``constant``, Dr. GRPO; rows: those with a completion token, width T if unset)."""
    if config.loss_normaliser == "tokens":
        return masked_mean(values, mask)
    keep = mask.bool()
    rows = keep.any(dim=-1).sum().clamp(min=1)
    width = config.max_completion_tokens or mask.shape[-1]
    return torch.where(keep, values, 0.0).sum() / (rows * width)


def masked_log_ratio(numerator_logprobs: Tensor, denominator_logprobs: Tensor, mask: Tensor) -> Tensor:
    """log(p/q) per token, at least float32, exactly 0 on padding (so padding can hold anything)."""
    difference = at_least_float32(numerator_logprobs) - at_least_float32(denominator_logprobs)
    return torch.where(mask.bool(), difference, 0.0)


def importance_ratio(logprobs: Tensor, behaviour_logprobs: Tensor, mask: Tensor) -> Tensor:
    """ρ = π_θ/μ per token; differentiable in ``logprobs``, 1 on padding."""
    return masked_log_ratio(logprobs, behaviour_logprobs.detach(), mask).exp()


def k3_kl(logprobs: Tensor, reference_logprobs: Tensor, mask: Tensor) -> Tensor:
    """Per-token k3 estimate of KL(π_θ‖π_ref): exp(r) − 1 − r with r = log π_ref − log π_θ."""
    return k3(masked_log_ratio(reference_logprobs.detach(), logprobs, mask))


def k3(log_ratio: Tensor) -> Tensor:
    """k3 of KL(p‖q) on samples from p, given r = log q − log p: exp(r) − 1 − r (≥ 0, unbiased under p)."""
    return log_ratio.exp() - 1 - log_ratio


def sequence_logprob(logprobs: Tensor, mask: Tensor) -> Tensor:
    """[N] sum of completion-token log-probs per sequence."""
    return torch.where(mask.bool(), at_least_float32(logprobs), 0.0).sum(dim=-1)
