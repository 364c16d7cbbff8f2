"""Off-policy corrections: how the policy-gradient losses weigh tokens that a stale policy sampled.

    LossBatch, advantages A [N, T], LossConfig ──CORRECTIONS[config.correction]──► Surrogate (S_t to maximise)

Each correction turns the per-token advantages A_t into a surrogate S_t to maximise; the policy
loss is −token_mean(S) (notation of ``executor.learning.loss_inputs``; ε = ``clip_eps``, c = ``truncation_cap``,
the same default, 2, for every correction that has a cap). ρ_t = exp(log π_θ − log μ) is the
importance ratio to the behaviour policy μ; π_old (``proximal_logprobs``) is the learner's policy at
the start of the train step, before any update of the step, recomputed without grad.

A token is *clipped* when a clip branch is strictly smaller than the unclipped term (A>0 ∧ x>1+ε
or A<0 ∧ x<1−ε, x the ratio the clip acts on); its gradient is 0. ε = None turns the clip off.
A token is *truncated* when its importance weight x exceeds c; ``cap_action`` says what it then gets:
``clamp`` (verl's TIS) the weight cap(x) = min(x, c); ``mask`` (AReaL's default) cap(x) = 0 above c,
so the token adds nothing to the value or the gradient (it stays in token_mean's denominator).

``clip`` (the default; PPO's trust region centred on μ, which plays PPO's "old policy"):
    S_t = sg(cap(ρ_t)/ρ_t) · min(ρ_t A_t, clip(ρ_t, 1−ε, 1+ε) A_t)
    Clipped on ρ. An unclipped token has value cap(ρ_t)·A_t and gradient cap(ρ_t)·A_t·∇log π_θ: no
    token's gradient weight exceeds c, which bounds the case the clip leaves open (A<0 with ρ ≫ 1).
    Whether a token is clipped is decided on the raw ρ; a clipped token keeps gradient 0 (its value is
    scaled too). The trust region is centred on μ: a sample's staleness already uses up part of ε, and
    with several updates per step every update is still measured against μ.
``tis`` (truncated importance sampling as verl's ``decoupled_token_is``, open-instruct, slime and
    OpenRLHF's ``--enable_vllm_is_correction`` apply it):
    w_t = sg(cap(π_old/μ))        r_t = π_θ/π_old        S_t = w_t · min(r_t A_t, clip(r_t, 1−ε, 1+ε) A_t)
    Clipped on r; truncated: π_old/μ > c. For a step's first update π_θ = π_old, so r = 1 and the
    gradient is w_t A_t ∇log π_θ; on its later minibatches r ≠ 1 and the clip acts.
``decoupled`` (AReaL's decoupled PPO objective, Fu et al. 2025, π_old its "proximal" policy): the objective
    of ``tis``, the same function under AReaL's name. AReaL's own default is ``cap_action: mask`` with c = 5.
``reinforce_is`` (REINFORCE with a truncated importance weight on π/μ, no trust region: verl's "bypass"
    mode with its REINFORCE loss; ε is ignored):
    S_t = sg(cap(ρ_t)/ρ_t) · ρ_t A_t       value cap(ρ_t)·A_t, gradient cap(ρ_t)·A_t·∇log π_θ
    Behaviour weight w_t = cap(ρ_t); truncated: ρ_t > c; never clipped. On a step's first update
    (π_θ = π_old; every update with ``updates_per_step`` 1) it has the value and gradient of ``tis``
    with the same c and ``cap_action``; on minibatches 2…n ``tis`` clips r = π_θ/π_old and weighs by
    π_old/μ, ``reinforce_is`` does neither (``tests/test_corrections.py`` works both cases by hand).
``none`` (what a naive asynchronous loop does: stale samples taken as on-policy; ε, c ignored):
    S_t = exp(log π_θ − sg(log π_θ)) · A_t    value A_t, gradient A_t·∇log π_θ; never clipped or
    truncated, whatever ρ is.

With μ = π_θ (= π_old) and c ≥ 1 every correction gives the on-policy REINFORCE gradient
token_mean(A ∇log π_θ). Corrections apply to GRPO, RLOO and PPO; online DPO reads none of them,
and a scenario refuses online DPO with a correction other than the default.

Each correction is registered once in ``CORRECTIONS`` under a name of ``AlgorithmSpec.correction``
(``executor.learning.registry``), and every name has one (``decoupled`` and ``tis`` the same function).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from .loss_inputs import LossBatch, LossConfig, importance_ratio, masked_log_ratio
from .registry import Registry, scenario_names

__all__ = [
    "CORRECTIONS",
    "CorrectionFn",
    "Surrogate",
    "capped_weight",
    "clip_surrogate",
    "clipped_objective",
    "corrected_surrogate",
    "no_correction_surrogate",
    "policy_surrogate",
    "reinforce_is_surrogate",
    "tis_surrogate",
]


@dataclass(frozen=True, eq=False)
class Surrogate:
    objective: Tensor  # [N, T] S_t, to be maximised
    ratio: Tensor  # [N, T] the ratio S_t is built on (ρ; r = π_θ/π_old for tis and decoupled; 1 for none), before clip
    clipped: Tensor  # [N, T] bool: the clip branch is active (zero gradient)
    truncated: Tensor  # [N, T] bool: the importance weight exceeds c
    behaviour_weight: Tensor | None = None  # [N, T] w_t after the cap (tis, decoupled, reinforce_is)


CorrectionFn = Callable[[LossBatch, Tensor, LossConfig], Surrogate]
CORRECTIONS: Registry[CorrectionFn] = Registry("algorithm.correction", scenario_names("correction"))


def capped_weight(weight: Tensor, cap: float | None, action: str = "clamp") -> tuple[Tensor, Tensor]:
    """cap(x) of a detached weight and the bool mask of x > c: ``clamp`` min(x, c), ``mask`` 0 above c."""
    weight = weight.detach()
    if cap is None:
        return weight, torch.zeros_like(weight, dtype=torch.bool)
    truncated = weight > cap
    if action == "mask":
        return torch.where(truncated, 0.0, weight), truncated
    return weight.clamp(max=cap), truncated


def clipped_objective(ratio: Tensor, advantages: Tensor, clip_eps: float | None) -> tuple[Tensor, Tensor]:
    """min(xA, clip(x, 1−ε, 1+ε)A) and where the clip branch is strictly smaller (ε None: xA, nothing clipped)."""
    advantages = advantages.detach()
    objective = ratio * advantages
    if clip_eps is None:
        return objective, torch.zeros_like(ratio, dtype=torch.bool)
    clipped_value = ratio.clamp(1 - clip_eps, 1 + clip_eps) * advantages
    clipped = clipped_value < objective
    return torch.where(clipped, clipped_value, objective), clipped


def policy_surrogate(
    ratio: Tensor,
    advantages: Tensor,
    clip_eps: float | None,
    truncation_cap: float | None,
    cap_action: str = "clamp",
) -> Surrogate:
    """S_t = sg(cap(ρ)/ρ) · min(ρA, clip(ρ, 1−ε, 1+ε)A); the ``clip`` correction (module docstring)."""
    objective, clipped = clipped_objective(ratio, advantages, clip_eps)
    weight, truncated = capped_weight(ratio, truncation_cap, cap_action)
    if truncation_cap is not None:
        objective = objective * (weight / ratio.detach())
    return Surrogate(objective=objective, ratio=ratio, clipped=clipped, truncated=truncated, behaviour_weight=weight)


@CORRECTIONS.register("clip")
def clip_surrogate(batch: LossBatch, advantages: Tensor, config: LossConfig) -> Surrogate:
    """``clip``: PPO's clip on ρ = π_θ/μ, then the cap at c."""
    ratio = importance_ratio(batch.logprobs, batch.behaviour_logprobs, batch.mask)
    surrogate = policy_surrogate(ratio, advantages, config.clip_eps, config.truncation_cap, config.cap_action)
    return replace(surrogate, behaviour_weight=None)


@CORRECTIONS.register("reinforce_is")
def reinforce_is_surrogate(batch: LossBatch, advantages: Tensor, config: LossConfig) -> Surrogate:
    """``reinforce_is``: value cap(ρ)·A, gradient cap(ρ)·A·∇log π_θ; no clip."""
    ratio = importance_ratio(batch.logprobs, batch.behaviour_logprobs, batch.mask)
    return policy_surrogate(ratio, advantages, None, config.truncation_cap, config.cap_action)


@CORRECTIONS.register("tis")
@CORRECTIONS.register("decoupled")
def tis_surrogate(batch: LossBatch, advantages: Tensor, config: LossConfig) -> Surrogate:
    """``tis`` (and AReaL's ``decoupled``): sg(cap(π_old/μ)) times PPO's clip on r = π_θ/π_old."""
    if batch.proximal_logprobs is None:
        raise ValueError(f"proximal_logprobs: required for correction={config.correction!r}")
    proximal = batch.proximal_logprobs.detach()
    raw_weight = masked_log_ratio(proximal, batch.behaviour_logprobs.detach(), batch.mask).exp()
    weight, truncated = capped_weight(raw_weight, config.truncation_cap, config.cap_action)
    ratio = importance_ratio(batch.logprobs, proximal, batch.mask)
    objective, clipped = clipped_objective(ratio, advantages, config.clip_eps)
    return Surrogate(
        objective=weight * objective, ratio=ratio, clipped=clipped, truncated=truncated, behaviour_weight=weight
    )


@CORRECTIONS.register("none")
def no_correction_surrogate(batch: LossBatch, advantages: Tensor, config: LossConfig) -> Surrogate:
    """``none``: every sample taken as on-policy, S = exp(log π_θ − sg(log π_θ))·A (value A)."""
    ratio = importance_ratio(batch.logprobs, batch.logprobs, batch.mask)  # importance_ratio detaches the second
    return replace(policy_surrogate(ratio, advantages, None, None), behaviour_weight=None)


CORRECTIONS.require_complete()


def corrected_surrogate(batch: LossBatch, token_advantages: Tensor, config: LossConfig) -> Surrogate:
    """S_t of ``config.correction`` for [N, T] advantages (the policy-gradient losses' one entry point)."""
    return CORRECTIONS[config.correction](batch, token_advantages, config)
