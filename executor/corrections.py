"""Off-policy corrections: how the policy-gradient losses weigh tokens that a stale policy sampled.

    LossBatch, advantages A [N, T], LossConfig ──CORRECTIONS[config.correction]──► Surrogate (S_t to maximise)

Each correction turns the per-token advantages A_t into a surrogate S_t to maximise; the policy
loss is −token_mean(S) (notation of ``executor.loss_inputs``; ε = ``clip_eps``, c = ``truncation_cap``).
ρ_t = exp(log π_θ − log μ) is the importance ratio to the behaviour policy.
A token is *clipped* when a clip branch is strictly smaller than the unclipped term (A>0 ∧ x>1+ε
or A<0 ∧ x<1−ε, x the ratio the clip acts on); its gradient is 0. ε = None turns the clip off.

``clip`` (the default; PPO's trust region centred on μ, which plays PPO's "old policy"):
    S_t = sg(min(1, c/ρ_t)) · min(ρ_t A_t, clip(ρ_t, 1−ε, 1+ε) A_t)
    Clipped on ρ. Truncated: ρ_t > c (c = None: never); an unclipped token then has value
    min(ρ_t, c)·A_t and gradient min(ρ_t, c)·A_t·∇log π_θ: no token's gradient weight exceeds c,
    which bounds the case the clip leaves open (A<0 with ρ ≫ 1). Whether a token is clipped is
    decided on the raw ρ; a clipped token keeps gradient 0 (its value is scaled too). The trust
    region is centred on μ: a sample's staleness already uses up part of ε, and with several
    updates per step every update is still measured against μ.
``tis`` (truncated importance sampling, no clip; ε is ignored; c defaults to 2 when unset):
    S_t = sg(min(ρ_t, c)/ρ_t) · ρ_t A_t       value min(ρ_t, c)·A_t, gradient min(ρ_t, c)·A_t·∇log π_θ
    Behaviour weight w_t = min(ρ_t, c); truncated: ρ_t > c; never clipped.
``decoupled`` (AReaL's decoupled PPO objective, Fu et al. 2025): π_prox is the learner's policy at
    the start of the train step, before any update of the step (``proximal_logprobs``, computed
    without grad); the trust region is centred on π_prox and the behaviour weight corrects for μ:
    w_t = sg(π_prox/μ), capped at c when c is set        r_t = π_θ/π_prox
    S_t = w_t · min(r_t A_t, clip(r_t, 1−ε, 1+ε) A_t)
    Clipped on r; truncated: π_prox/μ > c. For a step's first update π_θ = π_prox, so r = 1 and
    the gradient is w_t A_t ∇log π_θ: with one update per step (``updates_per_step`` = 1)
    ``decoupled`` has the value and gradient of ``tis`` with the same c (no cap if c is unset).
``none`` (what a naive asynchronous loop does: stale samples taken as on-policy; ε, c ignored):
    S_t = exp(log π_θ − sg(log π_θ)) · A_t    value A_t, gradient A_t·∇log π_θ; never clipped or
    truncated, whatever ρ is.

With μ = π_θ (= π_prox) and c ≥ 1 every correction gives the on-policy REINFORCE gradient
token_mean(A ∇log π_θ). Corrections apply to GRPO, RLOO and PPO; online DPO reads none of them,
and a scenario refuses online DPO with a correction other than the default.

Each correction is registered once in ``CORRECTIONS`` under a name of ``AlgorithmSpec.correction``
(``executor.registry``), and every name has one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
from asyncrl.executor.loss_inputs import LossBatch, LossConfig, importance_ratio, masked_log_ratio
from asyncrl.executor.registry import Registry, scenario_names
from torch import Tensor

__all__ = [
    "CORRECTIONS",
    "CorrectionFn",
    "Surrogate",
    "clip_surrogate",
    "corrected_surrogate",
    "decoupled_surrogate",
    "no_correction_surrogate",
    "policy_surrogate",
    "tis_surrogate",
]


@dataclass(frozen=True, eq=False)
class Surrogate:
    objective: Tensor  # [N, T] S_t, to be maximised
    ratio: Tensor  # [N, T] the ratio S_t is built on (ρ; r = π_θ/π_prox for decoupled; 1 for none), before clip
    clipped: Tensor  # [N, T] bool: the clip branch is active (zero gradient)
    truncated: Tensor  # [N, T] bool: the importance weight exceeds c
    behaviour_weight: Tensor | None = None  # [N, T] w_t after the cap (tis, decoupled)


CorrectionFn = Callable[[LossBatch, Tensor, LossConfig], Surrogate]
CORRECTIONS: Registry[CorrectionFn] = Registry("algorithm.correction", scenario_names("correction"))


def policy_surrogate(
    ratio: Tensor, advantages: Tensor, clip_eps: float | None, truncation_cap: float | None
) -> Surrogate:
    """S_t = sg(min(1, c/ρ)) · min(ρA, clip(ρ, 1−ε, 1+ε)A); the ``clip`` correction (module docstring)."""
    advantages = advantages.detach()
    objective = ratio * advantages
    clipped = torch.zeros_like(ratio, dtype=torch.bool)
    if clip_eps is not None:
        clipped_objective = ratio.clamp(1 - clip_eps, 1 + clip_eps) * advantages
        clipped = clipped_objective < objective
        objective = torch.where(clipped, clipped_objective, objective)
    truncated = torch.zeros_like(clipped)
    if truncation_cap is not None:
        truncated = ratio.detach() > truncation_cap
        objective = objective * (truncation_cap / ratio.detach()).clamp(max=1.0)
    return Surrogate(objective=objective, ratio=ratio, clipped=clipped, truncated=truncated)


@CORRECTIONS.register("clip")
def clip_surrogate(batch: LossBatch, advantages: Tensor, config: LossConfig) -> Surrogate:
    """``clip``: PPO's clip on ρ = π_θ/μ, then the optional truncation at c."""
    ratio = importance_ratio(batch.logprobs, batch.behaviour_logprobs, batch.mask)
    return policy_surrogate(ratio, advantages, config.clip_eps, config.cap)


@CORRECTIONS.register("tis")
def tis_surrogate(batch: LossBatch, advantages: Tensor, config: LossConfig) -> Surrogate:
    """``tis``: value min(ρ, c)·A, gradient min(ρ, c)·A·∇log π_θ; no clip."""
    ratio = importance_ratio(batch.logprobs, batch.behaviour_logprobs, batch.mask)
    surrogate = policy_surrogate(ratio, advantages, None, config.cap)
    weight = ratio.detach().clamp(max=config.cap)
    return replace(surrogate, behaviour_weight=weight)


@CORRECTIONS.register("decoupled")
def decoupled_surrogate(batch: LossBatch, advantages: Tensor, config: LossConfig) -> Surrogate:
    """``decoupled``: sg(π_prox/μ) (capped at c) times PPO's clip on r = π_θ/π_prox."""
    if batch.proximal_logprobs is None:
        raise ValueError("proximal_logprobs: required for correction='decoupled'")
    proximal = batch.proximal_logprobs.detach()
    weight = masked_log_ratio(proximal, batch.behaviour_logprobs.detach(), batch.mask).exp()
    truncated = torch.zeros_like(weight, dtype=torch.bool)
    if config.cap is not None:
        truncated = weight > config.cap
        weight = weight.clamp(max=config.cap)
    ratio = importance_ratio(batch.logprobs, proximal, batch.mask)
    trust_region = policy_surrogate(ratio, advantages, config.clip_eps, None)
    return Surrogate(
        objective=weight * trust_region.objective,
        ratio=ratio,
        clipped=trust_region.clipped,
        truncated=truncated,
        behaviour_weight=weight,
    )


@CORRECTIONS.register("none")
def no_correction_surrogate(batch: LossBatch, advantages: Tensor, config: LossConfig) -> Surrogate:
    """``none``: every sample taken as on-policy, S = exp(log π_θ − sg(log π_θ))·A (value A)."""
    ratio = importance_ratio(batch.logprobs, batch.logprobs, batch.mask)  # importance_ratio detaches the second
    return policy_surrogate(ratio, advantages, None, None)


CORRECTIONS.require_complete()


def corrected_surrogate(batch: LossBatch, token_advantages: Tensor, config: LossConfig) -> Surrogate:
    """S_t of ``config.correction`` for [N, T] advantages (the policy-gradient losses' one entry point)."""
    return CORRECTIONS[config.correction](batch, token_advantages, config)
