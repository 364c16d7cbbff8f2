"""Advantages: how much better each sample (or token) did than its baseline, for the policy-gradient losses.

    rewards [N] ──group by G──► grpo_advantages / rloo_advantages ──► A [N] (broadcast to tokens by the loss)
    rewards [N], old values [N, T] ──ppo_token_rewards──► r [N, T] ──gae──► Â, returns [N, T]

Group-relative advantages (one value per sample; rows group-major, ``executor.learning.loss_inputs``)
------------------------------------------------------------------------------------------
    GRPO:  A_i = (R_i − mean_g R) / (std_g R + eps)      std over the G samples, the sample std
           (divides by G − 1: DeepSeekMath, TRL, verl) or the population std (by G, ``sample_std=False``);
           normalise_std=False gives A_i = R_i − mean_g R (Dr. GRPO). Statistics in float64; a group
           whose rewards all tie gets A = 0 exactly (G = 1 too).
    RLOO:  A_i = R_i − (Σ_{j∈g} R_j − R_i) / (G − 1)    (mean of the OTHER samples; G ≥ 2)

PPO (old values ``old_values`` of the value head, recorded at the start of the step)
-----------------------------------------------------------------------------------
    token reward r_t = R_i·[t = last completion token] − kl_coef·(log μ_t − log π_ref_t)
    δ_t = r_t + γ V_old(t+1) − V_old(t), V_old after the last token = 0
    Â_t = δ_t + γλ Â_{t+1}  (over completion tokens only);   returns G_t = Â_t + V_old(t)
"""

from __future__ import annotations

import torch
from torch import Tensor

from .loss_inputs import at_least_float32, masked_log_ratio

__all__ = ["gae", "grouped", "grpo_advantages", "ppo_token_rewards", "rloo_advantages"]


def grouped(rewards: Tensor, group_size: int) -> Tensor:
    """[groups, G] view of the detached rewards, at least float32."""
    if group_size < 1 or rewards.numel() % group_size:
        raise ValueError(f"group_size: {group_size} does not divide the {rewards.numel()} rewards")
    return at_least_float32(rewards.detach()).reshape(-1, group_size)


def grpo_advantages(
    rewards: Tensor, group_size: int, normalise_std: bool = True, eps: float = 1e-6, sample_std: bool = True
) -> Tensor:
    """[N] reward minus its group's mean, optionally over the group's std + eps (sample std, or population).

    Group statistics are taken in float64 and a tied group (max = min) gets exactly 0: in float32 the
    rounding error of the mean over a std of ~1e-8 would otherwise give a tied group advantages of order 0.1.
    """
    by_group = grouped(rewards, group_size)
    exact = by_group.double()
    centred = exact - exact.mean(dim=1, keepdim=True)
    if normalise_std:
        correction = 1 if sample_std and group_size > 1 else 0
        centred = centred / (exact.std(dim=1, correction=correction, keepdim=True) + eps)
    tied = exact.amax(dim=1, keepdim=True) == exact.amin(dim=1, keepdim=True)
    return torch.where(tied, 0.0, centred).to(by_group.dtype).reshape(-1)


def rloo_advantages(rewards: Tensor, group_size: int) -> Tensor:
    """[N] reward minus the mean reward of the other G−1 samples of its group."""
    if group_size < 2:
        raise ValueError(f"group_size: RLOO needs at least 2 samples per group, got {group_size}")
    by_group = grouped(rewards, group_size)
    others_mean = (by_group.sum(dim=1, keepdim=True) - by_group) / (group_size - 1)
    return (by_group - others_mean).reshape(-1)


def ppo_token_rewards(
    rewards: Tensor,
    mask: Tensor,
    kl_coef: float = 0.0,
    behaviour_logprobs: Tensor | None = None,
    reference_logprobs: Tensor | None = None,
) -> Tensor:
    """[N, T] R_i on each row's last completion token, minus kl_coef·(log μ − log π_ref) per token."""
    keep = mask.bool()
    is_last = keep & (keep.cumsum(dim=-1) == keep.sum(dim=-1, keepdim=True))
    token_rewards = torch.where(is_last, at_least_float32(rewards.detach())[:, None], 0.0)
    if kl_coef == 0:
        return token_rewards
    if behaviour_logprobs is None or reference_logprobs is None:
        raise ValueError("reference_logprobs: required for the PPO KL reward penalty (kl_coef > 0)")
    return token_rewards - kl_coef * masked_log_ratio(behaviour_logprobs.detach(), reference_logprobs.detach(), mask)


def gae(token_rewards: Tensor, values: Tensor, mask: Tensor, gamma: float, lam: float) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimates and returns [N, T] over completion tokens (0 on padding).

    Padding is skipped, not treated as a step; the value after a row's last completion token is 0.
    """
    keep = mask.bool()
    values = at_least_float32(values.detach())
    next_value = torch.zeros_like(values[:, 0])
    next_advantage = torch.zeros_like(values[:, 0])
    reversed_advantages = []
    for t in reversed(range(values.shape[1])):
        delta = token_rewards[:, t] + gamma * next_value - values[:, t]
        advantage = delta + gamma * lam * next_advantage
        reversed_advantages.append(torch.where(keep[:, t], advantage, 0.0))
        next_value = torch.where(keep[:, t], values[:, t], next_value)
        next_advantage = torch.where(keep[:, t], advantage, next_advantage)
    advantages = torch.stack(reversed_advantages[::-1], dim=1)
    returns = torch.where(keep, advantages + values, 0.0)
    return advantages, returns
