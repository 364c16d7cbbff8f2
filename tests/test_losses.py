"""Hand-checked values for executor.losses.

Expected numbers are written out as plain arithmetic from the hand computation in the comment
next to them; they never come from calling the code under test.
"""

from __future__ import annotations

import math
import typing

import pytest
import torch
from asyncrl.executor.losses import (
    CORRECTIONS,
    LOSSES,
    Correction,
    LossBatch,
    LossConfig,
    best_worst_pairs,
    gae,
    grpo_advantages,
    grpo_loss,
    online_dpo_loss,
    ppo_loss,
    ppo_token_rewards,
    rloo_advantages,
    rloo_loss,
)
from hypothesis import given, settings
from hypothesis import strategies as st

F64 = torch.float64
PAD = None  # marks a padded position in the hand tables below


def as_tensor(values: list) -> torch.Tensor:
    return torch.tensor(values, dtype=F64)


def off_policy_batch(
    ratios: list[list[float | None]],
    rewards: list[float],
    group_size: int,
    behaviour_value: float = -1.2,
    **extra: torch.Tensor,
) -> LossBatch:
    """Behaviour log-prob ``behaviour_value`` on every token, current = behaviour + log(ratio).

    Padded positions get garbage (log-prob 5, behaviour -30: a ratio of e^35 if it leaked).
    """
    mask = [[0.0 if ratio is PAD else 1.0 for ratio in row] for row in ratios]
    behaviour = [[-30.0 if ratio is PAD else behaviour_value for ratio in row] for row in ratios]
    current = [[5.0 if ratio is PAD else behaviour_value + math.log(ratio) for ratio in row] for row in ratios]
    return LossBatch(
        logprobs=as_tensor(current).requires_grad_(),
        behaviour_logprobs=as_tensor(behaviour),
        mask=as_tensor(mask),
        rewards=as_tensor(rewards),
        group_size=group_size,
        **extra,
    )


# The shared hand case: 2 groups × 2 samples × 3 tokens, 9 completion tokens.
#   rewards [1, 0 | 3, 1]
#   GRPO (std, eps 0): group 0 mean 0.5 std 0.5 → A = [+1, -1]; group 1 mean 2 std 1 → A = [+1, -1]
#   RLOO (G = 2, other sample's reward):           A = [1-0, 0-1, 3-1, 1-3] = [+1, -1, +2, -2]
HAND_RATIOS: list[list[float | None]] = [
    [1.5, 1.1, 0.7],
    [0.5, 1.0, PAD],
    [1.3, PAD, PAD],
    [0.9, 0.7, 3.0],
]
HAND_REWARDS = [1.0, 0.0, 3.0, 1.0]
HAND_TOKENS = 9


def hand_batch(**extra: torch.Tensor) -> LossBatch:
    return off_policy_batch(HAND_RATIOS, HAND_REWARDS, group_size=2, **extra)


# ---------------------------------------------------------------- advantages


def test_grpo_advantages_by_hand() -> None:
    # group [1, 2, 6]: mean 3, population variance (4 + 1 + 9)/3 = 14/3 → A = [-2, -1, 3]/sqrt(14/3)
    # group [4, 4, 4]: all equal → A = 0 (std 0, eps keeps it finite)
    rewards = as_tensor([1.0, 2.0, 6.0, 4.0, 4.0, 4.0])
    std = math.sqrt(14 / 3)
    expected = [-2 / std, -1 / std, 3 / std, 0.0, 0.0, 0.0]
    assert grpo_advantages(rewards, 3, eps=0.0)[:3].tolist() == pytest.approx(expected[:3])
    assert grpo_advantages(rewards, 3).tolist() == pytest.approx(expected, abs=1e-5)
    assert grpo_advantages(rewards, 3, normalise_std=False).tolist() == pytest.approx([-2, -1, 3, 0, 0, 0])


@pytest.mark.parametrize("normalise_std", [True, False])
def test_grpo_advantages_of_a_tied_group_are_exactly_zero_in_float32(normalise_std: bool) -> None:
    # 16 samples all at 0.7 carry no signal: A = 0. In float32 the group mean is off by rounding
    # and the std is ~1e-8, so dividing the rounding error by std + eps gave about +0.056 each.
    # A tied group next to an untied one: [0, 1] → ±1 (population std 0.5, eps 0).
    rewards = torch.tensor([0.7] * 16 + [0.0] * 8 + [1.0] * 8, dtype=torch.float32)
    advantages = grpo_advantages(rewards, 16, normalise_std=normalise_std, eps=0.0)
    assert advantages.dtype == torch.float32
    assert advantages[:16].tolist() == [0.0] * 16
    expected = 1.0 if normalise_std else 0.5
    assert advantages[16:].tolist() == [-expected] * 8 + [expected] * 8


def test_rloo_advantages_by_hand() -> None:
    # [1, 2, 6]: 1 - (2+6)/2 = -3;  2 - (1+6)/2 = -1.5;  6 - (1+2)/2 = 4.5
    # [0, 4]:    0 - 4 = -4;        4 - 0 = 4
    assert rloo_advantages(as_tensor([1.0, 2.0, 6.0]), 3).tolist() == pytest.approx([-3.0, -1.5, 4.5])
    assert rloo_advantages(as_tensor([0.0, 4.0]), 2).tolist() == pytest.approx([-4.0, 4.0])


def test_rloo_needs_two_samples_per_group() -> None:
    with pytest.raises(ValueError, match="at least 2"):
        rloo_advantages(as_tensor([1.0, 2.0]), 1)


# ---------------------------------------------------------------- off-policy correction


def test_grpo_loss_by_hand_with_clipping() -> None:
    # ε = 0.2 → clip range [0.8, 1.2]; S = min(ρA, clip(ρ)A):
    #   row 0, A=+1: ρ 1.5 → 1.2 (clipped) | 1.1 → 1.1 | 0.7 → min(0.7, 0.8) = 0.7 (not clipped)
    #   row 1, A=-1: ρ 0.5 → min(-0.5, -0.8) = -0.8 (clipped) | 1.0 → -1.0
    #   row 2, A=+1: ρ 1.3 → 1.2 (clipped)
    #   row 3, A=-1: ρ 0.9 → -0.9 | 0.7 → min(-0.7, -0.8) = -0.8 (clipped) | 3.0 → min(-3, -1.2) = -3
    # loss = -ΣS / 9; 4 of 9 tokens clipped; mean ratio = Σρ / 9
    batch = hand_batch()
    loss, metrics = grpo_loss(batch, LossConfig(clip_eps=0.2, std_eps=0.0))
    surrogate_sum = 1.2 + 1.1 + 0.7 - 0.8 - 1.0 + 1.2 - 0.9 - 0.8 - 3.0
    assert loss.item() == pytest.approx(-surrogate_sum / HAND_TOKENS)
    assert metrics["clip_fraction"] == pytest.approx(4 / 9)
    assert metrics["truncated_fraction"] == 0.0
    assert metrics["ratio_mean"] == pytest.approx((1.5 + 1.1 + 0.7 + 0.5 + 1.0 + 1.3 + 0.9 + 0.7 + 3.0) / 9)
    # gradient of -S/9 w.r.t. log π: -ρA/9 where unclipped, 0 where clipped or padded
    loss.backward()
    grad = batch.logprobs.grad
    assert grad[0].tolist() == pytest.approx([0.0, -1.1 / 9, -0.7 / 9])
    assert grad[1].tolist() == pytest.approx([0.0, 1.0 / 9, 0.0])
    assert grad[2].tolist() == pytest.approx([0.0, 0.0, 0.0])
    assert grad[3].tolist() == pytest.approx([0.9 / 9, 0.0, 3.0 / 9])


def test_truncation_caps_the_importance_weight() -> None:
    # Same as above with cap c = 2: only row 3's last token (ρ = 3, A = -1) exceeds it;
    # its term becomes (2/3)·(-3) = -2 and its gradient weight 2 instead of 3.
    batch = hand_batch()
    loss, metrics = grpo_loss(batch, LossConfig(clip_eps=0.2, truncation_cap=2.0, std_eps=0.0))
    surrogate_sum = 1.2 + 1.1 + 0.7 - 0.8 - 1.0 + 1.2 - 0.9 - 0.8 - 2.0
    assert loss.item() == pytest.approx(-surrogate_sum / HAND_TOKENS)
    assert metrics["truncated_fraction"] == pytest.approx(1 / 9)
    loss.backward()
    assert batch.logprobs.grad[3, 2].item() == pytest.approx(2.0 / 9)


def test_truncated_importance_sampling_without_clip() -> None:
    # ε = None, c = 1.2: gradient = -min(ρ, 1.2)·A/9 on every token, no token clipped.
    # row 0 (A=+1): -[1.2, 1.1, 0.7]/9;  row 3 (A=-1): +[0.9, 0.7, 1.2]/9
    batch = hand_batch()
    loss, metrics = grpo_loss(batch, LossConfig(clip_eps=None, truncation_cap=1.2, std_eps=0.0))
    loss.backward()
    assert metrics["clip_fraction"] == 0.0
    assert metrics["truncated_fraction"] == pytest.approx(3 / 9)  # 1.5, 1.3, 3.0
    assert batch.logprobs.grad[0].tolist() == pytest.approx([-1.2 / 9, -1.1 / 9, -0.7 / 9])
    assert batch.logprobs.grad[3].tolist() == pytest.approx([0.9 / 9, 0.7 / 9, 1.2 / 9])


def test_clip_is_the_default_correction() -> None:
    default, explicit = hand_batch(), hand_batch()
    default_loss, default_metrics = grpo_loss(default, LossConfig(std_eps=0.0))
    explicit_loss, explicit_metrics = grpo_loss(explicit, LossConfig(correction="clip", std_eps=0.0))
    default_loss.backward()
    explicit_loss.backward()
    assert default_loss.item() == explicit_loss.item() and default_metrics == explicit_metrics
    assert torch.equal(default.logprobs.grad, explicit.logprobs.grad)
    assert "behaviour_weight_mean" not in default_metrics


def test_tis_correction_by_hand() -> None:
    # c = 1.2, ε = 0.2 ignored (no clip). GRPO A = [+1, -1, +1, -1]; weight w = min(ρ, 1.2):
    #   row 0: ρ 1.5, 1.1, 0.7 → w 1.2, 1.1, 0.7 | row 1: 0.5, 1.0 → 0.5, 1.0 | row 2: 1.3 → 1.2
    #   row 3: 0.9, 0.7, 3.0 → 0.9, 0.7, 1.2
    # value Σ w·A = (1.2 + 1.1 + 0.7) - (0.5 + 1.0) + 1.2 - (0.9 + 0.7 + 1.2) = -0.1 → loss 0.1/9
    # gradient of the loss w.r.t. log π: -w·A/9; 3 of 9 tokens truncated (1.5, 1.3, 3.0); none clipped
    batch = hand_batch()
    loss, metrics = grpo_loss(batch, LossConfig(correction="tis", clip_eps=0.2, truncation_cap=1.2, std_eps=0.0))
    assert loss.item() == pytest.approx(0.1 / 9)
    loss.backward()
    grad = batch.logprobs.grad
    assert grad[0].tolist() == pytest.approx([-1.2 / 9, -1.1 / 9, -0.7 / 9])
    assert grad[1].tolist() == pytest.approx([0.5 / 9, 1.0 / 9, 0.0])
    assert grad[2].tolist() == pytest.approx([-1.2 / 9, 0.0, 0.0])
    assert grad[3].tolist() == pytest.approx([0.9 / 9, 0.7 / 9, 1.2 / 9])
    assert metrics["clip_fraction"] == 0.0
    assert metrics["truncated_fraction"] == pytest.approx(3 / 9)
    assert metrics["behaviour_weight_mean"] == pytest.approx((3.0 + 1.5 + 1.2 + 2.8) / 9)


def test_tis_cap_defaults_to_two() -> None:
    # Only ρ = 3.0 (row 3, A = -1) exceeds 2: its gradient weight is 2, the others keep ρ.
    assert LossConfig(correction="tis").cap == 2.0
    assert LossConfig(correction="clip").cap is None
    batch = hand_batch()
    loss, metrics = grpo_loss(batch, LossConfig(correction="tis", std_eps=0.0))
    loss.backward()
    assert batch.logprobs.grad[3].tolist() == pytest.approx([0.9 / 9, 0.7 / 9, 2.0 / 9])
    assert batch.logprobs.grad[0].tolist() == pytest.approx([-1.5 / 9, -1.1 / 9, -0.7 / 9])
    assert metrics["truncated_fraction"] == pytest.approx(1 / 9)


def decoupled_batch(proximal_requires_grad: bool = False) -> LossBatch:
    """One group of 2 samples × 2 tokens, rewards [1, 0] (GRPO A = +1, -1), μ = -1 everywhere.

    Per token q = π_prox/μ and r = π_θ/π_prox:
        row 0: (q 1.5, r 1.5), (q 3.0, r 1.1)      row 1: (q 0.5, r 0.7), (q 1.0, r 1.0)
    """
    q = [[1.5, 3.0], [0.5, 1.0]]
    r = [[1.5, 1.1], [0.7, 1.0]]
    behaviour = as_tensor([[-1.0, -1.0], [-1.0, -1.0]])
    proximal = behaviour + torch.log(as_tensor(q))
    current = proximal + torch.log(as_tensor(r))
    return LossBatch(
        logprobs=current.requires_grad_(),
        behaviour_logprobs=behaviour,
        mask=torch.ones(2, 2, dtype=F64),
        rewards=as_tensor([1.0, 0.0]),
        group_size=2,
        proximal_logprobs=proximal.requires_grad_(proximal_requires_grad),
    )


def test_decoupled_correction_by_hand() -> None:
    # ε = 0.2, c = 2: w = min(q, 2) = [1.5, 2.0 (truncated)], [0.5, 1.0]; S = w · min(rA, clip(r)A):
    #   row 0 (A=+1): r 1.5 → clipped to 1.2: S = 1.5·1.2 = 1.8, gradient 0 | r 1.1: S = 2·1.1 = 2.2
    #   row 1 (A=-1): r 0.7 → clipped, min(-0.7, -0.8) = -0.8: S = 0.5·(-0.8) = -0.4, gradient 0
    #                 r 1.0: S = 1·(-1) = -1
    #   loss = -(1.8 + 2.2 - 0.4 - 1) / 4 = -0.65; gradient -w·r·A/4 where unclipped
    # ρ = q·r = 2.25, 3.3, 0.35, 1.0
    batch = decoupled_batch(proximal_requires_grad=True)
    config = LossConfig(correction="decoupled", clip_eps=0.2, truncation_cap=2.0, std_eps=0.0)
    loss, metrics = grpo_loss(batch, config)
    assert loss.item() == pytest.approx(-0.65)
    loss.backward()
    assert batch.logprobs.grad.tolist() == [pytest.approx([0.0, -2.2 / 4]), pytest.approx([0.0, 1.0 / 4])]
    assert batch.proximal_logprobs.grad is None  # π_prox is a constant of the step
    assert metrics["clip_fraction"] == pytest.approx(2 / 4)
    assert metrics["truncated_fraction"] == pytest.approx(1 / 4)
    assert metrics["behaviour_weight_mean"] == pytest.approx((1.5 + 2.0 + 0.5 + 1.0) / 4)
    assert metrics["ratio_mean"] == pytest.approx((2.25 + 3.3 + 0.35 + 1.0) / 4)


def test_decoupled_without_a_cap_weighs_by_the_full_proximal_ratio() -> None:
    # c unset: row 0 token 1 keeps w = 3: S = 3·1.1 = 3.3, gradient -3.3/4; nothing truncated
    batch = decoupled_batch()
    loss, metrics = grpo_loss(batch, LossConfig(correction="decoupled", clip_eps=0.2, std_eps=0.0))
    assert loss.item() == pytest.approx(-(1.8 + 3.3 - 0.4 - 1.0) / 4)
    loss.backward()
    assert batch.logprobs.grad[0, 1].item() == pytest.approx(-3.3 / 4)
    assert metrics["truncated_fraction"] == 0.0


def test_decoupled_at_the_proximal_policy_is_weighted_reinforce() -> None:
    # A step's first update: π_θ = π_prox, so r = 1, nothing is clipped, the gradient is -w·A/4.
    batch = decoupled_batch()
    at_start = LossBatch(
        logprobs=batch.proximal_logprobs.clone().requires_grad_(),
        behaviour_logprobs=batch.behaviour_logprobs,
        mask=batch.mask,
        rewards=batch.rewards,
        group_size=2,
        proximal_logprobs=batch.proximal_logprobs,
    )
    loss, metrics = grpo_loss(at_start, LossConfig(correction="decoupled", clip_eps=0.2, std_eps=0.0))
    loss.backward()
    assert metrics["clip_fraction"] == 0.0
    assert at_start.logprobs.grad.tolist() == [pytest.approx([-1.5 / 4, -3.0 / 4]), pytest.approx([0.5 / 4, 1.0 / 4])]


@pytest.mark.parametrize("name", ["grpo", "rloo", "ppo"])
def test_decoupled_needs_proximal_log_probs(name: str) -> None:
    with pytest.raises(ValueError, match="proximal_logprobs"):
        LOSSES[name](every_input_batch(), LossConfig(correction="decoupled"))


def test_no_correction_treats_stale_samples_as_on_policy() -> None:
    # correction none: S = A whatever ρ; loss = -Σ A·len / 9 = -(3 - 2 + 1 - 3)/9 = 1/9;
    # gradient -A/9 on every completion token, even where ρ = 3 or 0.5; nothing clipped or truncated.
    batch = hand_batch()
    loss, metrics = grpo_loss(batch, LossConfig(correction="none", clip_eps=0.2, truncation_cap=1.2, std_eps=0.0))
    assert loss.item() == pytest.approx(1 / 9)
    loss.backward()
    expected = [[-1 / 9] * 3, [1 / 9, 1 / 9, 0.0], [-1 / 9, 0.0, 0.0], [1 / 9] * 3]
    assert batch.logprobs.grad.tolist() == [pytest.approx(row) for row in expected]
    assert metrics["clip_fraction"] == metrics["truncated_fraction"] == 0.0
    assert metrics["ratio_mean"] == pytest.approx((1.5 + 1.1 + 0.7 + 0.5 + 1.0 + 1.3 + 0.9 + 0.7 + 3.0) / 9)
    assert "behaviour_weight_mean" not in metrics


@pytest.mark.parametrize("name", ["grpo", "rloo", "ppo"])
@pytest.mark.parametrize("correction", ["tis", "decoupled"])
def test_weighted_corrections_log_the_behaviour_weight(name: str, correction: str) -> None:
    batch = every_input_batch()
    batch = LossBatch(**{**vars(batch), "proximal_logprobs": batch.behaviour_logprobs})  # w = π_prox/μ = 1
    _, metrics = LOSSES[name](batch, LossConfig(correction=correction))
    expected = 1.0 if correction == "decoupled" else (1.5 + 1.1 + 0.7 + 0.5 + 1.0 + 1.3 + 0.9 + 0.7 + 2.0) / 9
    assert metrics["behaviour_weight_mean"] == pytest.approx(expected)


def test_corrections_match_the_scenario_names() -> None:
    from asyncrl.scenarios.scenario import AlgorithmSpec

    names = set(typing.get_args(AlgorithmSpec.model_fields["correction"].annotation))
    assert set(CORRECTIONS) == names == set(typing.get_args(Correction))
    with pytest.raises(ValueError, match="correction"):
        LossConfig(correction="ppo")  # type: ignore[arg-type]


def test_rloo_loss_by_hand_plain_importance_sampling() -> None:
    # RLOO A = [+1, -1, +2, -2], no clip, no truncation: S = ρA
    #   row 0: 1.5 + 1.1 + 0.7 = 3.3 | row 1: -(0.5 + 1.0) = -1.5 | row 2: 2·1.3 = 2.6
    #   row 3: -2·(0.9 + 0.7 + 3.0) = -9.2          loss = -(3.3 - 1.5 + 2.6 - 9.2)/9
    loss, metrics = rloo_loss(hand_batch(), LossConfig(clip_eps=None))
    assert loss.item() == pytest.approx(-(3.3 - 1.5 + 2.6 - 9.2) / 9)
    assert metrics["advantage_abs_mean"] == pytest.approx(1.5)


@pytest.mark.parametrize("loss_fn", [grpo_loss, rloo_loss])
def test_on_policy_batch_gives_the_uncorrected_loss_and_reinforce_gradient(loss_fn: typing.Callable) -> None:
    # behaviour = current → ρ = 1: clip (ε 0.2) and truncation (c 1.5) are inactive, the loss is
    # -token_mean(A) and the gradient is REINFORCE's -A/9 per completion token.
    ratios = [[1.0 if ratio is not PAD else PAD for ratio in row] for row in HAND_RATIOS]
    corrected, plain = (off_policy_batch(ratios, HAND_REWARDS, 2) for _ in range(2))
    corrected_loss, metrics = loss_fn(corrected, LossConfig(clip_eps=0.2, truncation_cap=1.5, std_eps=0.0))
    plain_loss, _ = loss_fn(plain, LossConfig(clip_eps=None, truncation_cap=None, std_eps=0.0))
    corrected_loss.backward()
    plain_loss.backward()
    assert corrected_loss.item() == plain_loss.item()
    assert torch.equal(corrected.logprobs.grad, plain.logprobs.grad)
    assert metrics["ratio_mean"] == 1.0
    assert metrics["clip_fraction"] == 0.0
    advantages = [1.0, -1.0, 1.0, -1.0] if loss_fn is grpo_loss else [1.0, -1.0, 2.0, -2.0]
    lengths = [3, 2, 1, 3]
    # token_mean(A) = Σ_i A_i·len_i / 9
    assert corrected_loss.item() == pytest.approx(-sum(a * n for a, n in zip(advantages, lengths, strict=True)) / 9)
    assert corrected.logprobs.grad[:, 0].tolist() == pytest.approx([-a / 9 for a in advantages])


def test_kl_to_reference_metric_and_penalty() -> None:
    # reference = current on every token except row 0 token 0, where log π_ref − log π = ln 2:
    #   k3 = e^{ln 2} − 1 − ln 2 = 1 − ln 2 there, 0 elsewhere → mean (1 − ln 2)/9
    #   penalty 0.1·(1 − ln 2)/9 added to the loss; d k3/d log π = 1 − e^r = −1 there
    batch = hand_batch()
    reference = batch.logprobs.detach().clone()
    reference[0, 0] += math.log(2)
    with_ref = hand_batch(reference_logprobs=reference)
    config = LossConfig(clip_eps=0.2, std_eps=0.0)
    base_loss, _ = grpo_loss(batch, config)
    loss, metrics = grpo_loss(with_ref, LossConfig(clip_eps=0.2, std_eps=0.0, kl_coef=0.1))
    assert metrics["kl_to_reference"] == pytest.approx((1 - math.log(2)) / 9)
    assert loss.item() == pytest.approx(base_loss.item() + 0.1 * (1 - math.log(2)) / 9)
    loss.backward()
    assert with_ref.logprobs.grad[0, 0].item() == pytest.approx(0.1 * -1.0 / 9)  # token 0 itself is clipped


def test_kl_to_behaviour_is_k3_of_kl_mu_to_pi_on_samples_from_mu() -> None:
    # Samples come from μ, so the k3 estimate of KL(μ‖π_θ) uses r = log π_θ − log μ = log ρ:
    #   k3 = ρ − 1 − log ρ per token. The hand batch's ratios:
    #   row 0: 1.5, 1.1, 0.7 | row 1: 0.5, 1.0 | row 2: 1.3 | row 3: 0.9, 0.7, 3.0
    #   e.g. ρ = 3: 3 − 1 − ln 3 = 0.901; ρ = 0.5: 0.5 − 1 + ln 2 = 0.193 (the reversed ratio gives
    #   1/ρ − 1 + ln ρ instead: 2 − 1 − ln 2 = 0.307 for ρ = 0.5)
    ratios = [1.5, 1.1, 0.7, 0.5, 1.0, 1.3, 0.9, 0.7, 3.0]
    expected = sum(rho - 1 - math.log(rho) for rho in ratios) / 9
    _, metrics = grpo_loss(hand_batch())
    assert metrics["kl_to_behaviour"] == pytest.approx(expected)


def test_kl_penalty_without_reference_is_an_error() -> None:
    with pytest.raises(ValueError, match="reference_logprobs"):
        grpo_loss(hand_batch(), LossConfig(kl_coef=0.1))


def test_padding_can_hold_infinities() -> None:
    batch = hand_batch()
    inf_logprobs = batch.logprobs.detach().clone()
    inf_behaviour = batch.behaviour_logprobs.clone()
    inf_logprobs[batch.mask == 0] = -math.inf
    inf_behaviour[batch.mask == 0] = math.inf
    inf_batch = LossBatch(inf_logprobs.requires_grad_(), inf_behaviour, batch.mask, batch.rewards, batch.group_size)
    loss, _ = grpo_loss(batch)
    inf_loss, _ = grpo_loss(inf_batch)
    inf_loss.backward()
    assert inf_loss.item() == pytest.approx(loss.item())
    assert torch.isfinite(inf_batch.logprobs.grad).all()


# ---------------------------------------------------------------- online DPO


def dpo_batch(**overrides: torch.Tensor) -> LossBatch:
    # 3 groups × 3 samples × 2 tokens; row 2 has one completion token.
    #   group 0 rewards [0.2, 0.9, 0.1] → chosen row 1, rejected row 2
    #   group 1 rewards [0.5, 0.5, 0.5] → tie, skipped
    #   group 2 rewards [-1, 0, -2]     → chosen row 7, rejected row 8
    logprobs = [[-1.0, -1.0]] * 9
    reference = [[-1.0, -1.0]] * 9
    logprobs[1], reference[1] = [-0.5, -0.5], [-0.75, -0.75]
    logprobs[2], reference[2] = [-1.0, 9.0], [-0.5, -9.0]  # second token is padding
    logprobs[7], reference[7] = [-2.0, -1.0], [-1.0, -1.0]
    logprobs[8], reference[8] = [-1.0, -1.0], [-1.5, -1.5]
    mask = [[1.0, 1.0]] * 9
    mask[2] = [1.0, 0.0]
    fields = {
        "logprobs": as_tensor(logprobs).requires_grad_(),
        "behaviour_logprobs": as_tensor(logprobs),
        "mask": as_tensor(mask),
        "rewards": as_tensor([0.2, 0.9, 0.1, 0.5, 0.5, 0.5, -1.0, 0.0, -2.0]),
        "group_size": 3,
        "reference_logprobs": as_tensor(reference),
    }
    return LossBatch(**{**fields, **overrides})


def test_best_worst_pairs_picks_extremes_and_skips_ties() -> None:
    chosen, rejected = best_worst_pairs(dpo_batch().rewards, 3)
    assert chosen.tolist() == [1, 7]
    assert rejected.tolist() == [2, 8]


def test_online_dpo_loss_by_hand() -> None:
    # implicit reward h = Σ log π − Σ log π_ref:
    #   row 1: -1.0 − (-1.5) = +0.5   row 2: -1.0 − (-0.5) = -0.5   → margin 0.5 − (−0.5) = 1
    #   row 7: -3.0 − (-2.0) = -1.0   row 8: -2.0 − (-3.0) = +1.0   → margin −1 − 1 = −2
    # β = 0.5: loss = mean(−log σ(0.5), −log σ(−1)) = mean(log(1 + e^{−0.5}), log(1 + e^{1}))
    batch = dpo_batch()
    loss, metrics = online_dpo_loss(batch, LossConfig(dpo_beta=0.5))
    assert loss.item() == pytest.approx((math.log(1 + math.exp(-0.5)) + math.log(1 + math.exp(1))) / 2)
    assert metrics["pairs"] == 2.0
    assert metrics["skipped_groups"] == 1.0
    assert metrics["accuracy"] == 0.5
    assert metrics["margin_mean"] == pytest.approx(-0.5)
    # d/d log π(chosen token) = −β σ(−β m)/2;  rejected tokens get the opposite sign; others 0
    loss.backward()
    grad = batch.logprobs.grad
    chosen_grad_pair0 = -0.5 * (1 / (1 + math.exp(0.5))) / 2
    assert grad[1].tolist() == pytest.approx([chosen_grad_pair0] * 2)
    assert grad[2].tolist() == pytest.approx([-chosen_grad_pair0, 0.0])
    assert grad[7, 0].item() < 0 < grad[8, 0].item()
    assert grad[[0, 3, 4, 5, 6]].abs().sum().item() == 0.0


def test_online_dpo_behaviour_anchor() -> None:
    # Anchoring on μ with μ's log-probs equal to the reference table gives the same loss.
    reference_batch = dpo_batch()
    behaviour_batch = dpo_batch(behaviour_logprobs=reference_batch.reference_logprobs, reference_logprobs=None)
    expected, _ = online_dpo_loss(reference_batch, LossConfig(dpo_beta=0.5))
    loss, _ = online_dpo_loss(behaviour_batch, LossConfig(dpo_beta=0.5, dpo_reference="behaviour"))
    assert loss.item() == pytest.approx(expected.item())
    with pytest.raises(ValueError, match="reference_logprobs"):
        online_dpo_loss(behaviour_batch, LossConfig(dpo_reference="initial"))


def test_online_dpo_with_only_ties_is_zero_and_differentiable() -> None:
    batch = dpo_batch(rewards=torch.ones(9, dtype=F64))
    loss, metrics = online_dpo_loss(batch)
    loss.backward()
    assert loss.item() == 0.0
    assert metrics["pairs"] == 0.0
    assert metrics["skipped_groups"] == 3.0
    assert batch.logprobs.grad.abs().sum().item() == 0.0


# ---------------------------------------------------------------- PPO

# 3-step GAE by hand: V_old = [0.5, 0.4, 0.2], reward 1 on the last token, γ = 0.9, λ = 0.8 (γλ = 0.72)
#   δ2 = 1 + 0 − 0.2 = 0.8            Â2 = 0.8
#   δ1 = 0.9·0.2 − 0.4 = −0.22        Â1 = −0.22 + 0.72·0.8 = 0.356
#   δ0 = 0.9·0.4 − 0.5 = −0.14        Â0 = −0.14 + 0.72·0.356 = 0.11632
#   returns Â + V_old = [0.61632, 0.756, 1.0]
GAE_ADVANTAGES = [-0.14 + 0.72 * (-0.22 + 0.72 * 0.8), -0.22 + 0.72 * 0.8, 0.8]
GAE_RETURNS = [GAE_ADVANTAGES[0] + 0.5, GAE_ADVANTAGES[1] + 0.4, 1.0]


def test_gae_three_steps_by_hand() -> None:
    # Row 1 is padded after two tokens, reward 2, V_old = [1.0, 0.5]:
    #   Â1 = 2 − 0.5 = 1.5;  Â0 = 0.9·0.5 − 1.0 + 0.72·1.5 = 0.53
    mask = as_tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    old_values = as_tensor([[0.5, 0.4, 0.2, 7.0], [1.0, 0.5, 7.0, 7.0]])
    token_rewards = ppo_token_rewards(as_tensor([1.0, 2.0]), mask)
    assert token_rewards.tolist() == [[0.0, 0.0, 1.0, 0.0], [0.0, 2.0, 0.0, 0.0]]
    advantages, returns = gae(token_rewards, old_values, mask, gamma=0.9, lam=0.8)
    assert advantages[0].tolist() == pytest.approx([*GAE_ADVANTAGES, 0.0])
    assert returns[0].tolist() == pytest.approx([*GAE_RETURNS, 0.0])
    assert advantages[1].tolist() == pytest.approx([0.9 * 0.5 - 1.0 + 0.72 * 1.5, 1.5, 0.0, 0.0])


def test_ppo_token_rewards_with_kl_penalty() -> None:
    # −0.1·(log μ − log π_ref) = −0.1·[0.5, 0, −0.5] = [−0.05, 0, 0.05], plus reward 1 on the last token
    rewards = ppo_token_rewards(
        as_tensor([1.0]),
        as_tensor([[1, 1, 1]]),
        kl_coef=0.1,
        behaviour_logprobs=as_tensor([[-1.0, -1.0, -1.0]]),
        reference_logprobs=as_tensor([[-1.5, -1.0, -0.5]]),
    )
    assert rewards.tolist()[0] == pytest.approx([-0.05, 0.0, 1.05])


def test_ppo_loss_by_hand() -> None:
    # The GAE example above (4th token padded), ρ = [1.0, 1.5, 0.5], ε = 0.2, ε_v = 0.2, value_coef 0.5.
    # policy, A = [0.11632, 0.356, 0.8] all > 0:
    #   t0 1.0·A0 | t1 min(1.5, 1.2)·A1 (clipped) | t2 min(0.5, 0.8)·A2 = 0.5·A2  → clip fraction 1/3
    # value, V = [0.6, 0.1, 0.9], V_old = [0.5, 0.4, 0.2], returns G = [0.61632, 0.756, 1.0]:
    #   t0 V_clip = 0.6 (inside):      (0.6 − G0)² both
    #   t1 V_clip = 0.4 − 0.2 = 0.2:   max((0.1 − 0.756)², (0.2 − 0.756)²) = 0.656²   (unclipped wins)
    #   t2 V_clip = 0.2 + 0.2 = 0.4:   max((0.9 − 1)², (0.4 − 1)²) = 0.6²             (clipped wins)
    #   value loss = ½·(…)/3; value clip fraction 1/3
    values = as_tensor([[0.6, 0.1, 0.9, 3.0]]).requires_grad_()
    batch = off_policy_batch(
        [[1.0, 1.5, 0.5, PAD]],
        [1.0],
        group_size=1,
        values=values,
        old_values=as_tensor([[0.5, 0.4, 0.2, 7.0]]),
    )
    config = LossConfig(clip_eps=0.2, value_clip_eps=0.2, value_coef=0.5, gamma=0.9, gae_lambda=0.8)
    loss, metrics = ppo_loss(batch, config)
    a0, a1, a2 = GAE_ADVANTAGES
    policy_loss = -(1.0 * a0 + 1.2 * a1 + 0.5 * a2) / 3
    value_loss = 0.5 * ((0.6 - GAE_RETURNS[0]) ** 2 + 0.656**2 + 0.6**2) / 3
    assert metrics["policy_loss"] == pytest.approx(policy_loss)
    assert metrics["value_loss"] == pytest.approx(value_loss)
    assert loss.item() == pytest.approx(policy_loss + 0.5 * value_loss)
    assert metrics["clip_fraction"] == pytest.approx(1 / 3)
    assert metrics["value_clip_fraction"] == pytest.approx(1 / 3)
    # d/dV of 0.5·½(V − G)²/3 = 0.5·(V − G)/3 where the unclipped term wins; 0 at t2 (clip saturated)
    loss.backward()
    expected_value_grad = [0.5 * (0.6 - GAE_RETURNS[0]) / 3, 0.5 * (0.1 - 0.756) / 3, 0.0, 0.0]
    assert values.grad[0].tolist() == pytest.approx(expected_value_grad)
    assert batch.logprobs.grad[0].tolist() == pytest.approx([-a0 / 3, 0.0, -0.5 * a2 / 3, 0.0])


def test_ppo_needs_values() -> None:
    with pytest.raises(ValueError, match="old_values"):
        ppo_loss(hand_batch())


# ---------------------------------------------------------------- registry, gradients, validation


def every_input_batch() -> LossBatch:
    """The hand batch with every optional input: a reference and a (zero) value head."""
    return hand_batch(
        reference_logprobs=torch.full((4, 3), -1.0, dtype=F64),
        values=torch.zeros(4, 3, dtype=F64, requires_grad=True),
        old_values=torch.zeros(4, 3, dtype=F64),
    )


def test_registry_covers_the_scenario_loss_names() -> None:
    from asyncrl.scenarios.scenario import AlgorithmSpec

    assert set(LOSSES) == set(typing.get_args(AlgorithmSpec.model_fields["loss"].annotation))


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_every_loss_backpropagates_and_logs_floats(name: str) -> None:
    batch = every_input_batch()
    loss, metrics = LOSSES[name](batch, LossConfig(kl_coef=0.05))
    loss.backward()
    assert loss.dim() == 0
    assert torch.isfinite(batch.logprobs.grad).all()
    assert batch.logprobs.grad.abs().sum().item() > 0
    assert all(isinstance(value, float) for value in metrics.values())
    assert "kl_to_reference" in metrics


@pytest.mark.parametrize("name", ["grpo", "rloo", "ppo"])
def test_positive_advantage_token_gets_a_negative_gradient(name: str) -> None:
    # Row 0 has the group's higher reward (A > 0; for PPO the reward makes Â > 0 with zero values):
    # a descent step must raise its log-probs, so ∂loss/∂log π < 0 on its tokens.
    batch = every_input_batch()
    loss, _ = LOSSES[name](batch, LossConfig(clip_eps=None))
    loss.backward()
    assert (batch.logprobs.grad[0] < 0).all()
    if name != "ppo":  # row 1 has A < 0 in both group-relative losses
        assert (batch.logprobs.grad[1, :2] > 0).all()


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("mask", torch.ones(4, 2), "mask"),
        ("rewards", torch.ones(3), "rewards"),
        ("group_size", 3, "group_size"),
        ("logprobs", torch.ones(12), "logprobs"),
    ],
)
def test_batch_rejects_inconsistent_shapes(field: str, value: object, message: str) -> None:
    fields = {
        "logprobs": torch.zeros(4, 3),
        "behaviour_logprobs": torch.zeros(4, 3),
        "mask": torch.ones(4, 3),
        "rewards": torch.zeros(4),
        "group_size": 2,
    }
    with pytest.raises(ValueError, match=message):
        LossBatch(**{**fields, field: value})


@pytest.mark.parametrize("overrides", [{"clip_eps": 0.0}, {"truncation_cap": -1.0}, {"gamma": 1.5}, {"kl_coef": -1}])
def test_config_rejects_bad_values(overrides: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        LossConfig(**overrides)


# ---------------------------------------------------------------- properties


@st.composite
def grouped_rewards(draw: st.DrawFn) -> tuple[torch.Tensor, int]:
    group_size = draw(st.integers(2, 6))
    groups = draw(st.integers(1, 4))
    values = draw(st.lists(st.floats(-100, 100), min_size=groups * group_size, max_size=groups * group_size))
    return as_tensor(values), group_size


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(grouped_rewards())
def test_group_advantages_sum_to_zero(case: tuple[torch.Tensor, int]) -> None:
    rewards, group_size = case
    for advantages in (
        grpo_advantages(rewards, group_size, normalise_std=False),
        grpo_advantages(rewards, group_size),
        rloo_advantages(rewards, group_size),
    ):
        group_sums = advantages.reshape(-1, group_size).sum(dim=1)
        scale = 1 + advantages.abs().max().item()
        assert group_sums.abs().max().item() <= 1e-9 * scale


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    groups=st.integers(1, 3),
    group_size=st.integers(2, 4),
    tokens=st.integers(1, 5),
    clip_eps=st.floats(0.01, 0.5),
    truncation_cap=st.floats(1.0, 10.0),
    correction=st.sampled_from(sorted(CORRECTIONS)),
)
def test_on_policy_invariance(
    seed: int, groups: int, group_size: int, tokens: int, clip_eps: float, truncation_cap: float, correction: str
) -> None:
    # With μ = π_θ = π_prox every correction's loss and gradient equal the uncorrected ones, for any ε and c ≥ 1.
    generator = torch.Generator().manual_seed(seed)
    shape = (groups * group_size, tokens)
    logprobs = -torch.rand(shape, generator=generator, dtype=F64) * 5
    mask = (torch.rand(shape, generator=generator) < 0.8).to(F64)
    rewards = torch.randn(shape[0], generator=generator, dtype=F64)

    def loss_and_grad(config: LossConfig) -> tuple[float, torch.Tensor]:
        current = logprobs.clone().requires_grad_()
        batch = LossBatch(current, logprobs.clone(), mask, rewards, group_size, proximal_logprobs=logprobs.clone())
        loss, _ = rloo_loss(batch, config)
        loss.backward()
        return loss.item(), current.grad

    corrected = loss_and_grad(LossConfig(correction=correction, clip_eps=clip_eps, truncation_cap=truncation_cap))
    plain = loss_and_grad(LossConfig(clip_eps=None, truncation_cap=None))
    assert corrected[0] == plain[0]
    assert torch.equal(corrected[1], plain[1])
