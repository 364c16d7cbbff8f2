"""Hand-checked values for executor.learning.losses.

Expected numbers are written out as plain arithmetic from the hand computation in the comment
next to them; they never come from calling the code under test.
"""

from __future__ import annotations

import math
import typing
from dataclasses import replace

import pytest
import torch
from asyncrl.executor.learning.loss_inputs import LossBatch, LossConfig
from asyncrl.executor.learning.losses import LOSSES, best_worst_pairs, grpo_loss, online_dpo_loss, ppo_loss, rloo_loss
from asyncrl.executor.learning.registry import Registry

from tests.loss_cases import (
    F64,
    GAE_ADVANTAGES,
    GAE_RETURNS,
    HAND_RATIOS,
    HAND_REWARDS,
    PAD,
    as_tensor,
    every_input_batch,
    hand_batch,
    off_policy_batch,
)


def test_rloo_loss_by_hand_plain_importance_sampling() -> None:
    # RLOO A = [+1, -1, +2, -2], no clip, no truncation: S = ρA
    #   row 0: 1.5 + 1.1 + 0.7 = 3.3 | row 1: -(0.5 + 1.0) = -1.5 | row 2: 2·1.3 = 2.6
    #   row 3: -2·(0.9 + 0.7 + 3.0) = -9.2          loss = -(3.3 - 1.5 + 2.6 - 9.2)/9
    loss, metrics = rloo_loss(hand_batch(), LossConfig(clip_eps=None, truncation_cap=None))
    assert loss.item() == pytest.approx(-(3.3 - 1.5 + 2.6 - 9.2) / 9)
    assert metrics["advantage_abs_mean"] == pytest.approx(1.5)


@pytest.mark.parametrize("loss_fn", [grpo_loss, rloo_loss])
def test_on_policy_batch_gives_the_uncorrected_loss_and_reinforce_gradient(loss_fn: typing.Callable) -> None:
    # behaviour = current → ρ = 1: clip (ε 0.2) and truncation (c 1.5) are inactive, the loss is
    # -token_mean(A) and the gradient is REINFORCE's -A/9 per completion token.
    ratios = [[1.0 if ratio is not PAD else PAD for ratio in row] for row in HAND_RATIOS]
    corrected, plain = (off_policy_batch(ratios, HAND_REWARDS, 2) for _ in range(2))
    corrected_loss, metrics = loss_fn(
        corrected, LossConfig(clip_eps=0.2, truncation_cap=1.5, std_eps=0.0, group_std="population")
    )
    plain_loss, _ = loss_fn(plain, LossConfig(clip_eps=None, truncation_cap=None, std_eps=0.0, group_std="population"))
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
    #   k3 = e^{ln 2} − 1 − ln 2 = 1 − ln 2 there, 0 elsewhere; that token's ρ = 1.5 weighs it:
    #   mean 1.5·(1 − ln 2)/9, penalty 0.1·1.5·(1 − ln 2)/9; d(sg(ρ)·k3)/d log π = 1.5·(1 − e^r) = −1.5 there
    batch = hand_batch()
    reference = batch.logprobs.detach().clone()
    reference[0, 0] += math.log(2)
    with_ref = hand_batch(reference_logprobs=reference)
    config = LossConfig(clip_eps=0.2, std_eps=0.0, group_std="population")
    base_loss, _ = grpo_loss(batch, config)
    loss, metrics = grpo_loss(with_ref, LossConfig(clip_eps=0.2, std_eps=0.0, kl_coef=0.1, group_std="population"))
    assert metrics["kl_to_reference"] == pytest.approx(1.5 * (1 - math.log(2)) / 9)
    assert loss.item() == pytest.approx(base_loss.item() + 0.1 * 1.5 * (1 - math.log(2)) / 9)
    loss.backward()
    assert with_ref.logprobs.grad[0, 0].item() == pytest.approx(0.1 * -1.5 / 9)  # token 0 itself is clipped


def two_token_batch() -> LossBatch:
    """One position, a two-token vocabulary: μ = (0.5, 0.5), π_θ = (0.8, 0.2), π_ref = (0.5, 0.5).

    Row 0 sampled token a, row 1 token b: each has μ-probability 0.5, so the batch's token mean is the
    expectation under μ exactly. ρ = π_θ/μ = 1.6 and 0.4.
    """
    return LossBatch(
        logprobs=as_tensor([[math.log(0.8)], [math.log(0.2)]]).requires_grad_(),
        behaviour_logprobs=as_tensor([[math.log(0.5)], [math.log(0.5)]]),
        mask=as_tensor([[1.0], [1.0]]),
        rewards=as_tensor([1.0, 0.0]),
        group_size=1,
        reference_logprobs=as_tensor([[math.log(0.5)], [math.log(0.5)]]),
    )


def test_kl_to_reference_on_stale_samples_is_importance_weighted() -> None:
    # True KL(π_θ‖π_ref) = 0.8·ln 1.6 + 0.2·ln 0.4 = 0.3760029 − 0.1832581 = 0.1927448.
    # k3 (r = log π_ref − log π_θ): a: 0.625 − 1 − ln 0.625 = 0.0950036 | b: 2.5 − 1 − ln 2.5 = 0.5837093
    # unweighted mean (0.0950036 + 0.5837093)/2 = 0.3393565 (biased: a KL under μ's samples, not π_θ's)
    # weighted by ρ: (1.6·0.0950036 + 0.4·0.5837093)/2 = (0.1520058 + 0.2334837)/2 = 0.1927447 = the true KL
    _, metrics = grpo_loss(two_token_batch(), LossConfig())
    true_kl = 0.8 * math.log(1.6) + 0.2 * math.log(0.4)
    assert metrics["kl_to_reference"] == pytest.approx(true_kl)
    assert metrics["kl_to_reference"] == pytest.approx((1.6 * 0.0950036 + 0.4 * 0.5837093) / 2, abs=1e-6)
    # the penalty's gradient: kl_coef·sg(ρ)·(1 − π_ref/π_θ)/2 per token: a 1.6·(1 − 0.625)/2 = 0.3,
    # b 0.4·(1 − 2.5)/2 = −0.3 (kl_coef 1; the policy term is 0: G = 1 gives A = 0)
    batch = two_token_batch()
    loss, _ = grpo_loss(batch, LossConfig(kl_coef=1.0))
    loss.backward()
    assert batch.logprobs.grad[:, 0].tolist() == pytest.approx([0.3, -0.3])


def test_entropy_is_the_importance_weighted_sampled_estimate() -> None:
    # H(π_θ) = −(0.8 ln 0.8 + 0.2 ln 0.2) = 0.178515 + 0.321888 = 0.500402
    # estimate: token_mean(ρ·(−log π_θ)) = (1.6·0.223144 + 0.4·1.609438)/2 = (0.357030 + 0.643775)/2 = 0.500402
    for loss_fn in (grpo_loss, rloo_loss, online_dpo_loss):
        batch = two_token_batch() if loss_fn is not rloo_loss else replace(two_token_batch(), group_size=2)
        _, metrics = loss_fn(batch, LossConfig())
        assert metrics["entropy"] == pytest.approx(-(0.8 * math.log(0.8) + 0.2 * math.log(0.2)))


def test_dr_grpo_divides_by_a_constant() -> None:
    # GRPO without the std: group [1, 0] → A = ±0.5, [3, 1] → ±1; correction none: S = A per token.
    # Σ m·A = 0.5·3 − 0.5·2 + 1·1 − 1·3 = −1.5. Constant: 4 rows × 5 tokens → loss 1.5/20; tokens: 1.5/9;
    # with no max_completion_tokens the padded width, 3: 1.5/12. Gradient −A/20 per completion token.
    base = {"correction": "none", "normalise_std": False}
    batch = hand_batch()
    loss, _ = grpo_loss(batch, LossConfig(**base, loss_normaliser="constant", max_completion_tokens=5))
    assert loss.item() == pytest.approx(1.5 / 20)
    loss.backward()
    assert batch.logprobs.grad[:, 0].tolist() == pytest.approx([-0.5 / 20, 0.5 / 20, -1 / 20, 1 / 20])
    assert grpo_loss(hand_batch(), LossConfig(**base))[0].item() == pytest.approx(1.5 / 9)
    assert grpo_loss(hand_batch(), LossConfig(**base, loss_normaliser="constant"))[0].item() == pytest.approx(1.5 / 12)


def test_zero_variance_groups_filtered_out_of_the_normaliser() -> None:
    # rewards [1, 0 | 2, 2]: group 1 ties (A = 0). Correction none, population std: A = [+1, −1, 0, 0].
    # Σ m·A = 3 − 2 = 1. Kept in: loss −1/9 (9 tokens); filtered: −1/5 (rows 0, 1: 5 tokens).
    config = LossConfig(correction="none", group_std="population", std_eps=0.0)
    tied = off_policy_batch(HAND_RATIOS, [1.0, 0.0, 2.0, 2.0], group_size=2)
    loss, metrics = grpo_loss(tied, config)
    assert loss.item() == pytest.approx(-1 / 9)
    assert (metrics["trained_samples"], metrics["filtered_groups"]) == (4.0, 0.0)
    filtered = off_policy_batch(HAND_RATIOS, [1.0, 0.0, 2.0, 2.0], group_size=2)
    loss, metrics = grpo_loss(filtered, config.model_copy(update={"filter_zero_variance": True}))
    assert loss.item() == pytest.approx(-1 / 5)
    assert (metrics["trained_samples"], metrics["filtered_groups"]) == (2.0, 1.0)
    loss.backward()
    assert filtered.logprobs.grad[0].tolist() == pytest.approx([-1 / 5] * 3)


def test_every_group_tied_and_filtered_leaves_a_zero_loss_that_backpropagates() -> None:
    batch = off_policy_batch(HAND_RATIOS, [1.0, 1.0, 2.0, 2.0], group_size=2)
    loss, metrics = rloo_loss(batch, LossConfig(filter_zero_variance=True))
    loss.backward()
    assert loss.item() == 0.0 and metrics["trained_samples"] == 0.0 and metrics["filtered_groups"] == 2.0
    assert batch.logprobs.grad is not None and not batch.logprobs.grad.any()


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
    assert metrics["trained_samples"] == 4.0  # the loss trains on the two pairs, not the 9 samples
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


def test_registry_covers_the_scenario_loss_names() -> None:
    from asyncrl.scenarios.spec.scenario import AlgorithmSpec

    assert set(LOSSES) == set(typing.get_args(AlgorithmSpec.model_fields["loss"].annotation))


def test_registry_takes_each_scenario_name_once() -> None:
    registry: Registry[int] = Registry("algorithm.loss", ("a", "b"))
    assert registry.register("a")(1) == 1
    assert dict(registry) == {"a": 1} and registry.missing() == ("b",)
    with pytest.raises(RuntimeError, match="'b'"):
        registry.require_complete()
    with pytest.raises(ValueError, match="twice"):
        registry.register("a")(2)
    with pytest.raises(ValueError, match="not a name"):
        registry.register("c")(3)
    with pytest.raises(KeyError, match="unknown 'b'"):
        registry["b"]


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
