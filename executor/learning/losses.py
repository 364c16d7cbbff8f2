"""The learner's losses, each registered once under its ``algorithm.loss`` name (``LOSSES``).

    LossBatch, LossConfig ──LOSSES[config.loss]──► grpo_loss | rloo_loss | online_dpo_loss | ppo_loss ──► LossOutput
        advantages (executor.learning.advantages) ──► corrected surrogate S (executor.learning.corrections) ──► −token_mean(S) + …

Inputs, notation and token_mean are ``executor.learning.loss_inputs``'; advantages ``executor.learning.advantages``';
the off-policy corrections (``correction``) ``executor.learning.corrections``'.

Losses
------
    GRPO, RLOO:  L = −token_mean(S) + kl_coef · token_mean(sg(ρ)·k3)
    k3 (KL to reference, also logged): k3_t = exp(r_t) − 1 − r_t, r_t = log π_ref − log π_θ, weighted by
        ρ_t = π_θ/μ: on μ's samples E_μ[ρ·k3] is π_θ's own KL estimate (TRL's use_bias_correction_kl), so a
        stale batch's figure is comparable with a fresh one's; ρ = 1 on-policy
    token_mean is ``loss_normaliser``'s (``executor.learning.loss_inputs.aggregate``); with ``filter_zero_variance``
    the rows of groups whose rewards all tie are left out of it (DAPO's dynamic sampling, no resampling)
    online DPO (Noukhovitch et al. 2024): per group, chosen c = argmax R, rejected r = argmin R
        (groups whose max and min reward tie are skipped); s(y) = Σ_t m_t log π(y_t);
        L = mean over pairs of −log σ(β[(s_θ(c) − s_a(c)) − (s_θ(r) − s_a(r))])
        where the anchor a is π_ref (``dpo_reference="initial"``, the paper's choice) or μ
        (``"behaviour"``). No importance weights and no ``correction``: the DPO loss is
        off-policy by construction.
    PPO (value head ``values``, old values ``old_values``; GAE in ``executor.learning.advantages``):
        policy: −token_mean(S) with A_t = Â_t (token_mean as ``loss_normaliser`` says)
        value:  ½ token_mean(max((V−G)², (V_clip−G)²)), V_clip = V_old + clip(V−V_old, ±ε_v)
        L = policy + value_coef · value

Every loss returns ``LossOutput(loss, metrics)``; metrics are plain floats for logging:
``loss``, ``ratio_mean`` (token_mean ρ, whatever the correction), ``kl_to_behaviour`` (k3 of
KL(μ‖π_θ) on μ's samples: token_mean(ρ − 1 − log ρ)), ``entropy`` (token_mean(ρ·(−log π_θ)): the
sampled-token estimate of π_θ's entropy per token, importance-weighted as the KL is; no [N, T, vocab]
logits are formed), ``trained_samples`` (the rows the loss takes a gradient from: online DPO's two per
pair, the groups left after ``filter_zero_variance``) and, with a reference, ``kl_to_reference``
(token_mean(ρ·k3) above); policy-gradient losses add ``policy_loss``, ``clip_fraction``, ``truncated_fraction``
(fractions of completion tokens) and, for ``tis``, ``decoupled`` and ``reinforce_is``,
``behaviour_weight_mean`` (token_mean w, after the cap); GRPO and RLOO add ``advantage_abs_mean`` and ``filtered_groups``; PPO adds ``value_loss``,
``value_clip_fraction``, ``advantage_mean``, ``return_mean``; online DPO adds ``pairs``,
``skipped_groups``, ``accuracy``, ``margin_mean``.
``LOSSES`` maps the scenario's ``algorithm.loss`` names (``AlgorithmSpec``'s Literal, ``executor.learning.registry``)
to the loss functions, all called as ``loss_fn(batch, config)``; every name has one.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from .advantages import gae, grouped, grpo_advantages, ppo_token_rewards, rloo_advantages
from .corrections import Surrogate, corrected_surrogate
from .loss_inputs import (
    DEFAULT_LOSS_CONFIG,
    LossBatch,
    LossConfig,
    LossOutput,
    aggregate,
    at_least_float32,
    importance_ratio,
    k3,
    k3_kl,
    masked_log_ratio,
    masked_mean,
    sequence_logprob,
)
from .registry import Registry, scenario_names

__all__ = [
    "LOSSES",
    "LossFn",
    "best_worst_pairs",
    "clipped_value_loss",
    "grpo_loss",
    "online_dpo_loss",
    "ppo_loss",
    "reference_kl",
    "rloo_loss",
    "varied_groups",
]

LossFn = Callable[[LossBatch, LossConfig], LossOutput]
LOSSES: Registry[LossFn] = Registry("algorithm.loss", scenario_names("loss"))


# ---------------------------------------------------------------- shared pieces


def _require_reference(batch: LossBatch, why: str) -> Tensor:
    if batch.reference_logprobs is None:
        raise ValueError(f"reference_logprobs: required for {why}")
    return batch.reference_logprobs


def reference_kl(batch: LossBatch) -> Tensor:
    """[N, T] sg(ρ)·k3: the k3 estimate of KL(π_θ‖π_ref) importance-weighted to π_θ's samples (ρ = π_θ/μ).

    k3 on tokens sampled from μ estimates a KL under μ; weighted by ρ its mean is the one π_θ's own samples give,
    so a stale batch's figure is comparable with an on-policy one and its gradient is, in expectation, the
    on-policy gradient of the k3 penalty. On-policy (μ = π_θ) ρ = 1 and nothing changes.
    """
    reference = _require_reference(batch, "the KL to the reference")
    weight = importance_ratio(batch.logprobs, batch.behaviour_logprobs, batch.mask).detach()
    return weight * k3_kl(batch.logprobs, reference, batch.mask)


def _kl_loss_term(batch: LossBatch, config: LossConfig, mask: Tensor) -> Tensor:
    if config.kl_coef == 0:
        return torch.zeros((), device=batch.logprobs.device)
    _require_reference(batch, "the KL penalty (kl_coef > 0)")
    return config.kl_coef * aggregate(reference_kl(batch), mask, config)


@torch.no_grad()
def _common_metrics(batch: LossBatch) -> dict[str, float]:
    log_ratio = masked_log_ratio(batch.logprobs, batch.behaviour_logprobs, batch.mask)  # log ρ
    ratio = log_ratio.exp()
    logprobs = torch.where(batch.mask.bool(), at_least_float32(batch.logprobs.detach()), 0.0)
    metrics = {
        "ratio_mean": masked_mean(ratio, batch.mask).item(),
        "kl_to_behaviour": masked_mean(k3(log_ratio), batch.mask).item(),  # KL(μ‖π_θ) on μ's samples: r = log ρ
        "entropy": masked_mean(ratio * -logprobs, batch.mask).item(),  # E_μ[ρ·(−log π_θ)] = E_π[−log π_θ]
    }
    if batch.reference_logprobs is not None:
        metrics["kl_to_reference"] = masked_mean(reference_kl(batch), batch.mask).item()
    return metrics


@torch.no_grad()
def _surrogate_metrics(surrogate: Surrogate, mask: Tensor) -> dict[str, float]:
    metrics = {
        "clip_fraction": masked_mean(surrogate.clipped.float(), mask).item(),
        "truncated_fraction": masked_mean(surrogate.truncated.float(), mask).item(),
    }
    if surrogate.behaviour_weight is not None:
        metrics["behaviour_weight_mean"] = masked_mean(surrogate.behaviour_weight, mask).item()
    return metrics


def varied_groups(rewards: Tensor, group_size: int) -> Tensor:
    """[N] bool: the rows of groups whose rewards do not all tie."""
    by_group = grouped(rewards, group_size)
    varied = by_group.amax(dim=1) > by_group.amin(dim=1)
    return varied.repeat_interleave(group_size)


def _policy_gradient_loss(batch: LossBatch, sample_advantages: Tensor, config: LossConfig) -> LossOutput:
    token_advantages = sample_advantages.to(batch.logprobs.device)[:, None].expand(batch.logprobs.shape)
    surrogate = corrected_surrogate(batch, token_advantages, config)
    mask, groups = batch.mask, batch.rewards.numel() // batch.group_size
    trained = torch.ones_like(batch.rewards, dtype=torch.bool)
    if config.filter_zero_variance:
        trained = varied_groups(batch.rewards, batch.group_size).to(mask.device)
        mask = mask * trained[:, None]
    policy_loss = -aggregate(surrogate.objective, mask, config)
    if not trained.any():  # every group tied: a graph-attached zero, so backward() still works
        policy_loss = surrogate.objective.sum() * 0.0
    loss = policy_loss + _kl_loss_term(batch, config, mask)
    metrics = {
        "loss": loss.item(),
        "policy_loss": policy_loss.item(),
        "advantage_abs_mean": sample_advantages.abs().mean().item(),
        "trained_samples": float(trained.sum().item()),
        "filtered_groups": float(groups - trained.sum().item() // batch.group_size),
        **_surrogate_metrics(surrogate, batch.mask),
        **_common_metrics(batch),
    }
    return LossOutput(loss, metrics)


# ---------------------------------------------------------------- losses


@LOSSES.register("grpo")
def grpo_loss(batch: LossBatch, config: LossConfig = DEFAULT_LOSS_CONFIG) -> LossOutput:
    """GRPO: group-normalised advantages through the corrected surrogate, plus optional k3 KL."""
    advantages = grpo_advantages(
        batch.rewards, batch.group_size, config.normalise_std, config.std_eps, config.group_std == "sample"
    )
    return _policy_gradient_loss(batch, advantages, config)


@LOSSES.register("rloo")
def rloo_loss(batch: LossBatch, config: LossConfig = DEFAULT_LOSS_CONFIG) -> LossOutput:
    """REINFORCE with the leave-one-out baseline, through the same corrected surrogate."""
    return _policy_gradient_loss(batch, rloo_advantages(batch.rewards, batch.group_size), config)


def best_worst_pairs(rewards: Tensor, group_size: int) -> tuple[Tensor, Tensor]:
    """Row indices (chosen, rejected) per group: first highest- and first lowest-reward sample.

    Groups whose highest and lowest rewards are equal give no pair.
    """
    by_group = grouped(rewards, group_size)
    offsets = torch.arange(by_group.shape[0], device=by_group.device) * group_size
    has_pair = by_group.max(dim=1).values > by_group.min(dim=1).values
    chosen = (offsets + by_group.argmax(dim=1))[has_pair]
    rejected = (offsets + by_group.argmin(dim=1))[has_pair]
    return chosen, rejected


def _dpo_anchor(batch: LossBatch, config: LossConfig) -> Tensor:
    if config.dpo_reference == "behaviour":
        return batch.behaviour_logprobs
    return _require_reference(batch, 'online DPO with dpo_reference="initial"')


@LOSSES.register("online_dpo")
def online_dpo_loss(batch: LossBatch, config: LossConfig = DEFAULT_LOSS_CONFIG) -> LossOutput:
    """Online DPO on each group's best-vs-worst pair, with sequence log-prob sums; ``correction`` is not read."""
    policy_scores = sequence_logprob(batch.logprobs, batch.mask)
    anchor_scores = sequence_logprob(_dpo_anchor(batch, config).detach(), batch.mask)
    implicit_rewards = policy_scores - anchor_scores
    chosen, rejected = best_worst_pairs(batch.rewards, batch.group_size)
    margins = implicit_rewards[chosen] - implicit_rewards[rejected]
    # With no pair the loss is a graph-attached zero, so backward() still works.
    loss = F.softplus(-config.dpo_beta * margins).mean() if margins.numel() else policy_scores.sum() * 0.0
    groups = batch.rewards.numel() // batch.group_size
    metrics = {
        "loss": loss.item(),
        "pairs": float(margins.numel()),
        "trained_samples": float(2 * margins.numel()),  # the chosen and the rejected of each pair
        "skipped_groups": float(groups - margins.numel()),
        "accuracy": (margins > 0).float().mean().item() if margins.numel() else 0.0,
        "margin_mean": margins.mean().item() if margins.numel() else 0.0,
        **_common_metrics(batch),
    }
    return LossOutput(loss, metrics)


def clipped_value_loss(
    values: Tensor, old_values: Tensor, returns: Tensor, mask: Tensor, clip_eps: float | None
) -> tuple[Tensor, Tensor]:
    """½ token_mean(max((V−G)², (V_clip−G)²)) and the [N, T] mask where the clipped term wins."""
    values = at_least_float32(values)
    unclipped = (values - returns) ** 2
    if clip_eps is None:
        return 0.5 * masked_mean(unclipped, mask), torch.zeros_like(unclipped, dtype=torch.bool)
    old_values = at_least_float32(old_values.detach())
    clipped_values = old_values + (values - old_values).clamp(-clip_eps, clip_eps)
    clipped = (clipped_values - returns) ** 2
    clip_active = clipped > unclipped
    return 0.5 * masked_mean(torch.where(clip_active, clipped, unclipped), mask), clip_active


@LOSSES.register("ppo")
def ppo_loss(batch: LossBatch, config: LossConfig = DEFAULT_LOSS_CONFIG) -> LossOutput:
    """PPO with a value head: GAE over tokens, clipped policy surrogate, clipped value loss."""
    if batch.values is None or batch.old_values is None:
        raise ValueError("values, old_values: PPO needs the value head's current and rollout-time values")
    token_rewards = ppo_token_rewards(
        batch.rewards, batch.mask, config.kl_coef, batch.behaviour_logprobs, batch.reference_logprobs
    )
    advantages, returns = gae(token_rewards, batch.old_values, batch.mask, config.gamma, config.gae_lambda)
    surrogate = corrected_surrogate(batch, advantages, config)
    policy_loss = -aggregate(surrogate.objective, batch.mask, config)
    value_loss, value_clipped = clipped_value_loss(
        batch.values, batch.old_values, returns, batch.mask, config.value_clip_eps
    )
    loss = policy_loss + config.value_coef * value_loss
    metrics = {
        "loss": loss.item(),
        "policy_loss": policy_loss.item(),
        "value_loss": value_loss.item(),
        "value_clip_fraction": masked_mean(value_clipped.float(), batch.mask).item(),
        "advantage_mean": masked_mean(advantages, batch.mask).item(),
        "return_mean": masked_mean(returns, batch.mask).item(),
        "trained_samples": float(batch.rewards.numel()),
        **_surrogate_metrics(surrogate, batch.mask),
        **_common_metrics(batch),
    }
    return LossOutput(loss, metrics)


LOSSES.require_complete()
