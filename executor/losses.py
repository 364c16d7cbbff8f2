"""The learner's policy-gradient losses, with off-policy correction for stale rollouts.

Pure torch: every function takes padded per-token tensors and returns tensors; no model code.

Batch layout
------------
``LossBatch`` holds N = groups × G completions padded to T tokens. Rows are **group-major**:
rows ``g*G … g*G+G-1`` are the G samples of prompt g, and ``group_size`` = G. ``mask`` is 1 on
completion tokens and 0 on padding; padded positions never reach a loss, a gradient or a
metric, whatever the log-prob tensors hold there (even -inf).

Notation: π_θ current policy (``logprobs``, carries grad), μ behaviour policy that sampled the
tokens (``behaviour_logprobs``), π_ref initial policy (``reference_logprobs``), π_prox the policy at
the start of the learner step (``proximal_logprobs``, for ``decoupled``), m mask, R_i the scalar
reward of sample i, sg(·) stop-gradient.

Token aggregation (all token-level losses)
------------------------------------------
    token_mean(x) = Σ_{i,t} m_it x_it / Σ_{i,t} m_it
One mean over every completion token of the batch (DAPO), not a mean of per-sequence means:
every token weighs the same, so a long completion is not down-weighted per token.

Group-relative advantages (one value per sample, broadcast to its tokens)
--------------------------------------------------------------------------
    GRPO:  A_i = (R_i − mean_g R) / (std_g R + eps)      std over the G samples, population
           (divides by G, so G = 1 gives 0); normalise_std=False gives A_i = R_i − mean_g R
           (Dr. GRPO). Statistics in float64; a group whose rewards all tie gets A = 0 exactly.
    RLOO:  A_i = R_i − (Σ_{j∈g} R_j − R_i) / (G − 1)    (mean of the OTHER samples; G ≥ 2)

Off-policy correction (``correction``; ε = ``clip_eps``, c = ``truncation_cap``)
-------------------------------------------------------------------------------
Each correction turns the per-token advantages A_t into a surrogate S_t to maximise; the policy
loss is −token_mean(S). ρ_t = exp(log π_θ − log μ) is the importance ratio to the behaviour policy.
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
token_mean(A ∇log π_θ). Corrections apply to GRPO, RLOO and PPO; online DPO reads none of them
(see below), and a scenario refuses online DPO with a correction other than the default.

Losses
------
    GRPO, RLOO:  L = −token_mean(S) + kl_coef · token_mean(k3)
    k3 (KL to reference, also logged): k3_t = exp(r_t) − 1 − r_t, r_t = log π_ref − log π_θ
    online DPO (Noukhovitch et al. 2024): per group, chosen c = argmax R, rejected r = argmin R
        (groups whose max and min reward tie are skipped); s(y) = Σ_t m_t log π(y_t);
        L = mean over pairs of −log σ(β[(s_θ(c) − s_a(c)) − (s_θ(r) − s_a(r))])
        where the anchor a is π_ref (``dpo_reference="initial"``, the paper's choice) or μ
        (``"behaviour"``). No importance weights and no ``correction``: the DPO loss is
        off-policy by construction.
    PPO (value head ``values``, old values ``old_values`` recorded with the rollout):
        token reward r_t = R_i·[t = last completion token] − kl_coef·(log μ_t − log π_ref_t)
        δ_t = r_t + γ V_old(t+1) − V_old(t), V_old after the last token = 0
        Â_t = δ_t + γλ Â_{t+1}  (over completion tokens only);   returns G_t = Â_t + V_old(t)
        policy: −token_mean(S) with A_t = Â_t
        value:  ½ token_mean(max((V−G)², (V_clip−G)²)), V_clip = V_old + clip(V−V_old, ±ε_v)
        L = policy + value_coef · value

Every loss returns ``LossOutput(loss, metrics)``; metrics are plain floats for logging:
``loss``, ``ratio_mean`` (token_mean ρ, whatever the correction), ``kl_to_behaviour`` (k3 of
KL(μ‖π_θ) on μ's samples: token_mean(ρ − 1 − log ρ)) and, with a reference, ``kl_to_reference``
(k3 above); policy-gradient losses add ``policy_loss``, ``clip_fraction``, ``truncated_fraction``
(fractions of completion tokens) and, for ``tis`` and ``decoupled``, ``behaviour_weight_mean``
(token_mean w, after the cap); GRPO and RLOO add ``advantage_abs_mean``; PPO adds ``value_loss``,
``value_clip_fraction``, ``advantage_mean``, ``return_mean``; online DPO adds ``pairs``,
``skipped_groups``, ``accuracy``, ``margin_mean``.
``LOSSES`` maps the scenario's ``algorithm.loss`` names to the loss functions, all called as
``loss_fn(batch, config)``. token_mean normalises by the tokens of the batch it is given: a
learner that splits a step into minibatches gets one normalisation per minibatch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal, NamedTuple, get_args

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "CORRECTIONS",
    "DEFAULT_LOSS_CONFIG",
    "LOSSES",
    "TIS_DEFAULT_CAP",
    "Correction",
    "CorrectionFn",
    "LossBatch",
    "LossConfig",
    "LossFn",
    "LossOutput",
    "Surrogate",
    "best_worst_pairs",
    "clip_surrogate",
    "clipped_value_loss",
    "corrected_surrogate",
    "decoupled_surrogate",
    "gae",
    "grpo_advantages",
    "grpo_loss",
    "importance_ratio",
    "k3_kl",
    "masked_log_ratio",
    "masked_mean",
    "no_correction_surrogate",
    "online_dpo_loss",
    "policy_surrogate",
    "ppo_loss",
    "ppo_token_rewards",
    "rloo_advantages",
    "rloo_loss",
    "sequence_logprob",
    "tis_surrogate",
]


@dataclass(frozen=True, eq=False)
class LossBatch:
    """One learner batch: N = groups × G completions, group-major, padded to T tokens.

    ``values`` and ``old_values`` are needed by PPO only; ``reference_logprobs`` by the KL
    penalty, the KL metric and online DPO's default anchor; ``proximal_logprobs`` by the
    ``decoupled`` correction only.
    """

    logprobs: Tensor  # [N, T] current policy, with grad
    behaviour_logprobs: Tensor  # [N, T] recorded by the actor that generated the tokens
    mask: Tensor  # [N, T] 1 on completion tokens
    rewards: Tensor  # [N] scalar reward per sample
    group_size: int  # G; rows g*G … g*G+G-1 share a prompt
    reference_logprobs: Tensor | None = None  # [N, T] initial policy
    values: Tensor | None = None  # [N, T] value head now, with grad (PPO)
    old_values: Tensor | None = None  # [N, T] value head at rollout time (PPO)
    proximal_logprobs: Tensor | None = None  # [N, T] policy at the start of the learner step (decoupled)

    def __post_init__(self) -> None:
        if self.logprobs.dim() != 2:
            raise ValueError(f"logprobs: expected [N, T], got shape {tuple(self.logprobs.shape)}")
        shape = self.logprobs.shape
        for name in ("behaviour_logprobs", "mask", "reference_logprobs", "values", "old_values", "proximal_logprobs"):
            tensor = getattr(self, name)
            if tensor is not None and tensor.shape != shape:
                raise ValueError(f"{name}: shape {tuple(tensor.shape)} differs from logprobs {tuple(shape)}")
        if self.rewards.shape != (shape[0],):
            raise ValueError(f"rewards: expected shape ({shape[0]},), got {tuple(self.rewards.shape)}")
        if self.group_size < 1 or shape[0] % self.group_size:
            raise ValueError(f"group_size: {self.group_size} does not divide the {shape[0]} samples")


Correction = Literal["clip", "tis", "decoupled", "none"]
TIS_DEFAULT_CAP = 2.0  # c of ``tis`` when ``truncation_cap`` is unset


@dataclass(frozen=True)
class LossConfig:
    """Knobs of all losses; each loss reads the ones it needs."""

    correction: Correction = "clip"  # off-policy correction of grpo, rloo and ppo (module docstring)
    clip_eps: float | None = 0.2  # clip of ρ (clip) or r (decoupled); None = no clipping
    truncation_cap: float | None = None  # cap c on the importance weight; None = none (tis: TIS_DEFAULT_CAP)
    normalise_std: bool = True  # GRPO: divide by the group std
    std_eps: float = 1e-6
    kl_coef: float = 0.0  # GRPO/RLOO: k3 loss term; PPO: per-token reward penalty; DPO: unused
    dpo_beta: float = 0.1
    dpo_reference: Literal["initial", "behaviour"] = "initial"
    gamma: float = 1.0
    gae_lambda: float = 0.95
    value_clip_eps: float | None = 0.2  # None = unclipped value loss
    value_coef: float = 0.5

    def __post_init__(self) -> None:
        if self.correction not in get_args(Correction):
            raise ValueError(f"correction: unknown {self.correction!r}; use one of {get_args(Correction)}")
        for name in ("clip_eps", "truncation_cap", "value_clip_eps"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name}: must be positive or None, got {value}")
        for name in ("std_eps", "kl_coef", "dpo_beta", "value_coef"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: must be non-negative, got {getattr(self, name)}")
        for name in ("gamma", "gae_lambda"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name}: must lie in [0, 1], got {getattr(self, name)}")

    @property
    def cap(self) -> float | None:
        """c as the correction applies it: ``truncation_cap``, or TIS_DEFAULT_CAP for an unset ``tis``."""
        if self.correction == "tis" and self.truncation_cap is None:
            return TIS_DEFAULT_CAP
        return self.truncation_cap


DEFAULT_LOSS_CONFIG = LossConfig()


class LossOutput(NamedTuple):
    loss: Tensor  # scalar, differentiable
    metrics: dict[str, float]


LossFn = Callable[[LossBatch, LossConfig], LossOutput]


# ---------------------------------------------------------------- shared pieces


def _at_least_float32(tensor: Tensor) -> Tensor:
    """Half/bfloat16 (and integer) inputs are upcast so exp and sums stay accurate; float64 stays."""
    return tensor.to(torch.promote_types(tensor.dtype, torch.float32))


def masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    """token_mean: mean of ``values`` over positions where ``mask`` is set (0 if none)."""
    keep = mask.bool()
    return torch.where(keep, values, 0.0).sum() / keep.sum().clamp(min=1)


def masked_log_ratio(numerator_logprobs: Tensor, denominator_logprobs: Tensor, mask: Tensor) -> Tensor:
    """log(p/q) per token, at least float32, exactly 0 on padding (so padding can hold anything)."""
    difference = _at_least_float32(numerator_logprobs) - _at_least_float32(denominator_logprobs)
    return torch.where(mask.bool(), difference, 0.0)


def importance_ratio(logprobs: Tensor, behaviour_logprobs: Tensor, mask: Tensor) -> Tensor:
    """ρ = π_θ/μ per token; differentiable in ``logprobs``, 1 on padding."""
    return masked_log_ratio(logprobs, behaviour_logprobs.detach(), mask).exp()


def k3_kl(logprobs: Tensor, reference_logprobs: Tensor, mask: Tensor) -> Tensor:
    """Per-token k3 estimate of KL(π_θ‖π_ref): exp(r) − 1 − r with r = log π_ref − log π_θ."""
    return _k3(masked_log_ratio(reference_logprobs.detach(), logprobs, mask))


def _k3(log_ratio: Tensor) -> Tensor:
    """k3 of KL(p‖q) on samples from p, given r = log q − log p: exp(r) − 1 − r (≥ 0, unbiased under p)."""
    return log_ratio.exp() - 1 - log_ratio


def sequence_logprob(logprobs: Tensor, mask: Tensor) -> Tensor:
    """[N] sum of completion-token log-probs per sequence."""
    return torch.where(mask.bool(), _at_least_float32(logprobs), 0.0).sum(dim=-1)


def _grouped(rewards: Tensor, group_size: int) -> Tensor:
    if group_size < 1 or rewards.numel() % group_size:
        raise ValueError(f"group_size: {group_size} does not divide the {rewards.numel()} rewards")
    return _at_least_float32(rewards.detach()).reshape(-1, group_size)


# ---------------------------------------------------------------- advantages


def grpo_advantages(rewards: Tensor, group_size: int, normalise_std: bool = True, eps: float = 1e-6) -> Tensor:
    """[N] reward minus its group's mean, optionally over the group's (population) std + eps.

    Group statistics are taken in float64 and a tied group (max = min) gets exactly 0: in float32 the
    rounding error of the mean over a std of ~1e-8 would otherwise give a tied group advantages of order 0.1.
    """
    grouped = _grouped(rewards, group_size)
    exact = grouped.double()
    centred = exact - exact.mean(dim=1, keepdim=True)
    if normalise_std:
        centred = centred / (exact.std(dim=1, correction=0, keepdim=True) + eps)
    tied = exact.amax(dim=1, keepdim=True) == exact.amin(dim=1, keepdim=True)
    return torch.where(tied, 0.0, centred).to(grouped.dtype).reshape(-1)


def rloo_advantages(rewards: Tensor, group_size: int) -> Tensor:
    """[N] reward minus the mean reward of the other G−1 samples of its group."""
    if group_size < 2:
        raise ValueError(f"group_size: RLOO needs at least 2 samples per group, got {group_size}")
    grouped = _grouped(rewards, group_size)
    others_mean = (grouped.sum(dim=1, keepdim=True) - grouped) / (group_size - 1)
    return (grouped - others_mean).reshape(-1)


# ---------------------------------------------------------------- off-policy corrections


@dataclass(frozen=True, eq=False)
class Surrogate:
    objective: Tensor  # [N, T] S_t, to be maximised
    ratio: Tensor  # [N, T] the ratio S_t is built on (ρ; r = π_θ/π_prox for decoupled; 1 for none), before clip
    clipped: Tensor  # [N, T] bool: the clip branch is active (zero gradient)
    truncated: Tensor  # [N, T] bool: the importance weight exceeds c
    behaviour_weight: Tensor | None = None  # [N, T] w_t after the cap (tis, decoupled)


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


def clip_surrogate(batch: LossBatch, advantages: Tensor, config: LossConfig) -> Surrogate:
    """``clip``: PPO's clip on ρ = π_θ/μ, then the optional truncation at c."""
    ratio = importance_ratio(batch.logprobs, batch.behaviour_logprobs, batch.mask)
    return policy_surrogate(ratio, advantages, config.clip_eps, config.cap)


def tis_surrogate(batch: LossBatch, advantages: Tensor, config: LossConfig) -> Surrogate:
    """``tis``: value min(ρ, c)·A, gradient min(ρ, c)·A·∇log π_θ; no clip."""
    ratio = importance_ratio(batch.logprobs, batch.behaviour_logprobs, batch.mask)
    surrogate = policy_surrogate(ratio, advantages, None, config.cap)
    weight = ratio.detach().clamp(max=config.cap)
    return replace(surrogate, behaviour_weight=weight)


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


def no_correction_surrogate(batch: LossBatch, advantages: Tensor, config: LossConfig) -> Surrogate:
    """``none``: every sample taken as on-policy, S = exp(log π_θ − sg(log π_θ))·A (value A)."""
    ratio = importance_ratio(batch.logprobs, batch.logprobs, batch.mask)  # importance_ratio detaches the second
    return policy_surrogate(ratio, advantages, None, None)


CorrectionFn = Callable[[LossBatch, Tensor, LossConfig], Surrogate]

CORRECTIONS: dict[str, CorrectionFn] = {
    "clip": clip_surrogate,
    "tis": tis_surrogate,
    "decoupled": decoupled_surrogate,
    "none": no_correction_surrogate,
}


def corrected_surrogate(batch: LossBatch, token_advantages: Tensor, config: LossConfig) -> Surrogate:
    """S_t of ``config.correction`` for [N, T] advantages (the policy-gradient losses' one entry point)."""
    return CORRECTIONS[config.correction](batch, token_advantages, config)


def _require_reference(batch: LossBatch, why: str) -> Tensor:
    if batch.reference_logprobs is None:
        raise ValueError(f"reference_logprobs: required for {why}")
    return batch.reference_logprobs


def _kl_loss_term(batch: LossBatch, config: LossConfig) -> Tensor:
    if config.kl_coef == 0:
        return torch.zeros((), device=batch.logprobs.device)
    reference = _require_reference(batch, "the KL penalty (kl_coef > 0)")
    return config.kl_coef * masked_mean(k3_kl(batch.logprobs, reference, batch.mask), batch.mask)


@torch.no_grad()
def _common_metrics(batch: LossBatch) -> dict[str, float]:
    log_ratio = masked_log_ratio(batch.logprobs, batch.behaviour_logprobs, batch.mask)  # log ρ
    metrics = {
        "ratio_mean": masked_mean(log_ratio.exp(), batch.mask).item(),
        "kl_to_behaviour": masked_mean(_k3(log_ratio), batch.mask).item(),  # KL(μ‖π_θ) on μ's samples: r = log ρ
    }
    if batch.reference_logprobs is not None:
        kl = k3_kl(batch.logprobs, batch.reference_logprobs, batch.mask)
        metrics["kl_to_reference"] = masked_mean(kl, batch.mask).item()
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


def _policy_gradient_loss(batch: LossBatch, sample_advantages: Tensor, config: LossConfig) -> LossOutput:
    token_advantages = sample_advantages.to(batch.logprobs.device)[:, None].expand(batch.logprobs.shape)
    surrogate = corrected_surrogate(batch, token_advantages, config)
    policy_loss = -masked_mean(surrogate.objective, batch.mask)
    loss = policy_loss + _kl_loss_term(batch, config)
    metrics = {
        "loss": loss.item(),
        "policy_loss": policy_loss.item(),
        "advantage_abs_mean": sample_advantages.abs().mean().item(),
        **_surrogate_metrics(surrogate, batch.mask),
        **_common_metrics(batch),
    }
    return LossOutput(loss, metrics)


# ---------------------------------------------------------------- losses


def grpo_loss(batch: LossBatch, config: LossConfig = DEFAULT_LOSS_CONFIG) -> LossOutput:
    """GRPO: group-normalised advantages through the corrected surrogate, plus optional k3 KL."""
    advantages = grpo_advantages(batch.rewards, batch.group_size, config.normalise_std, config.std_eps)
    return _policy_gradient_loss(batch, advantages, config)


def rloo_loss(batch: LossBatch, config: LossConfig = DEFAULT_LOSS_CONFIG) -> LossOutput:
    """REINFORCE with the leave-one-out baseline, through the same corrected surrogate."""
    return _policy_gradient_loss(batch, rloo_advantages(batch.rewards, batch.group_size), config)


def best_worst_pairs(rewards: Tensor, group_size: int) -> tuple[Tensor, Tensor]:
    """Row indices (chosen, rejected) per group: first highest- and first lowest-reward sample.

    Groups whose highest and lowest rewards are equal give no pair.
    """
    grouped = _grouped(rewards, group_size)
    offsets = torch.arange(grouped.shape[0], device=grouped.device) * group_size
    has_pair = grouped.max(dim=1).values > grouped.min(dim=1).values
    chosen = (offsets + grouped.argmax(dim=1))[has_pair]
    rejected = (offsets + grouped.argmin(dim=1))[has_pair]
    return chosen, rejected


def _dpo_anchor(batch: LossBatch, config: LossConfig) -> Tensor:
    if config.dpo_reference == "behaviour":
        return batch.behaviour_logprobs
    return _require_reference(batch, 'online DPO with dpo_reference="initial"')


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
        "skipped_groups": float(groups - margins.numel()),
        "accuracy": (margins > 0).float().mean().item() if margins.numel() else 0.0,
        "margin_mean": margins.mean().item() if margins.numel() else 0.0,
        **_common_metrics(batch),
    }
    return LossOutput(loss, metrics)


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
    token_rewards = torch.where(is_last, _at_least_float32(rewards.detach())[:, None], 0.0)
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
    values = _at_least_float32(values.detach())
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


def clipped_value_loss(
    values: Tensor, old_values: Tensor, returns: Tensor, mask: Tensor, clip_eps: float | None
) -> tuple[Tensor, Tensor]:
    """½ token_mean(max((V−G)², (V_clip−G)²)) and the [N, T] mask where the clipped term wins."""
    values = _at_least_float32(values)
    unclipped = (values - returns) ** 2
    if clip_eps is None:
        return 0.5 * masked_mean(unclipped, mask), torch.zeros_like(unclipped, dtype=torch.bool)
    old_values = _at_least_float32(old_values.detach())
    clipped_values = old_values + (values - old_values).clamp(-clip_eps, clip_eps)
    clipped = (clipped_values - returns) ** 2
    clip_active = clipped > unclipped
    return 0.5 * masked_mean(torch.where(clip_active, clipped, unclipped), mask), clip_active


def ppo_loss(batch: LossBatch, config: LossConfig = DEFAULT_LOSS_CONFIG) -> LossOutput:
    """PPO with a value head: GAE over tokens, clipped policy surrogate, clipped value loss."""
    if batch.values is None or batch.old_values is None:
        raise ValueError("values, old_values: PPO needs the value head's current and rollout-time values")
    token_rewards = ppo_token_rewards(
        batch.rewards, batch.mask, config.kl_coef, batch.behaviour_logprobs, batch.reference_logprobs
    )
    advantages, returns = gae(token_rewards, batch.old_values, batch.mask, config.gamma, config.gae_lambda)
    surrogate = corrected_surrogate(batch, advantages, config)
    policy_loss = -masked_mean(surrogate.objective, batch.mask)
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
        **_surrogate_metrics(surrogate, batch.mask),
        **_common_metrics(batch),
    }
    return LossOutput(loss, metrics)


LOSSES: dict[str, LossFn] = {
    "grpo": grpo_loss,
    "rloo": rloo_loss,
    "online_dpo": online_dpo_loss,
    "ppo": ppo_loss,
}
