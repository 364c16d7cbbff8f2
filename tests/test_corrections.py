"""Hand-checked values for executor.learning.corrections: each off-policy correction through the losses.

Expected numbers are written out as plain arithmetic from the hand computation in the comment
next to them; they never come from calling the code under test.
"""

from __future__ import annotations

import typing

import pytest
import torch
from asyncrl.executor.learning.corrections import CORRECTIONS
from asyncrl.executor.learning.loss_inputs import LossBatch, LossConfig
from asyncrl.executor.learning.losses import LOSSES, grpo_loss, rloo_loss
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.loss_cases import F64, HAND_TOKENS, as_tensor, every_input_batch, hand_batch

# ---------------------------------------------------------------- off-policy correction


def test_grpo_loss_by_hand_with_clipping() -> None:
    # ε = 0.2 → clip range [0.8, 1.2]; S = min(ρA, clip(ρ)A):
    #   row 0, A=+1: ρ 1.5 → 1.2 (clipped) | 1.1 → 1.1 | 0.7 → min(0.7, 0.8) = 0.7 (not clipped)
    #   row 1, A=-1: ρ 0.5 → min(-0.5, -0.8) = -0.8 (clipped) | 1.0 → -1.0
    #   row 2, A=+1: ρ 1.3 → 1.2 (clipped)
    #   row 3, A=-1: ρ 0.9 → -0.9 | 0.7 → min(-0.7, -0.8) = -0.8 (clipped) | 3.0 → min(-3, -1.2) = -3
    # loss = -ΣS / 9; 4 of 9 tokens clipped; mean ratio = Σρ / 9
    batch = hand_batch()
    loss, metrics = grpo_loss(batch, LossConfig(clip_eps=0.2, truncation_cap=None, std_eps=0.0, group_std="population"))
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
    loss, metrics = grpo_loss(batch, LossConfig(clip_eps=0.2, truncation_cap=2.0, std_eps=0.0, group_std="population"))
    surrogate_sum = 1.2 + 1.1 + 0.7 - 0.8 - 1.0 + 1.2 - 0.9 - 0.8 - 2.0
    assert loss.item() == pytest.approx(-surrogate_sum / HAND_TOKENS)
    assert metrics["truncated_fraction"] == pytest.approx(1 / 9)
    loss.backward()
    assert batch.logprobs.grad[3, 2].item() == pytest.approx(2.0 / 9)


def test_truncated_importance_sampling_without_clip() -> None:
    # ε = None, c = 1.2: gradient = -min(ρ, 1.2)·A/9 on every token, no token clipped.
    # row 0 (A=+1): -[1.2, 1.1, 0.7]/9;  row 3 (A=-1): +[0.9, 0.7, 1.2]/9
    batch = hand_batch()
    loss, metrics = grpo_loss(batch, LossConfig(clip_eps=None, truncation_cap=1.2, std_eps=0.0, group_std="population"))
    loss.backward()
    assert metrics["clip_fraction"] == 0.0
    assert metrics["truncated_fraction"] == pytest.approx(3 / 9)  # 1.5, 1.3, 3.0
    assert batch.logprobs.grad[0].tolist() == pytest.approx([-1.2 / 9, -1.1 / 9, -0.7 / 9])
    assert batch.logprobs.grad[3].tolist() == pytest.approx([0.9 / 9, 0.7 / 9, 1.2 / 9])


def test_clip_is_the_default_correction() -> None:
    default, explicit = hand_batch(), hand_batch()
    default_loss, default_metrics = grpo_loss(default, LossConfig(std_eps=0.0, group_std="population"))
    explicit_loss, explicit_metrics = grpo_loss(
        explicit, LossConfig(correction="clip", std_eps=0.0, group_std="population")
    )
    default_loss.backward()
    explicit_loss.backward()
    assert default_loss.item() == explicit_loss.item() and default_metrics == explicit_metrics
    assert torch.equal(default.logprobs.grad, explicit.logprobs.grad)
    assert "behaviour_weight_mean" not in default_metrics


def test_clip_with_mask_drops_the_token_above_the_cap() -> None:
    # As above with c = 2 and cap_action mask: row 3's last token (ρ = 3, A = -1, not clipped) gets weight 0:
    # its term is 0 instead of -2 and its gradient 0; it stays in the denominator (9 tokens).
    batch = hand_batch()
    config = LossConfig(clip_eps=0.2, truncation_cap=2.0, cap_action="mask", std_eps=0.0, group_std="population")
    loss, metrics = grpo_loss(batch, config)
    surrogate_sum = 1.2 + 1.1 + 0.7 - 0.8 - 1.0 + 1.2 - 0.9 - 0.8 + 0.0
    assert loss.item() == pytest.approx(-surrogate_sum / HAND_TOKENS)
    assert metrics["truncated_fraction"] == pytest.approx(1 / 9)
    loss.backward()
    assert batch.logprobs.grad[3].tolist() == pytest.approx([0.9 / 9, 0.0, 0.0])  # 0.7 clipped, 3.0 masked


def test_reinforce_is_by_hand() -> None:
    # c = 1.2, ε = 0.2 ignored (no clip). GRPO A = [+1, -1, +1, -1]; weight w = min(ρ, 1.2):
    #   row 0: ρ 1.5, 1.1, 0.7 → w 1.2, 1.1, 0.7 | row 1: 0.5, 1.0 → 0.5, 1.0 | row 2: 1.3 → 1.2
    #   row 3: 0.9, 0.7, 3.0 → 0.9, 0.7, 1.2
    # value Σ w·A = (1.2 + 1.1 + 0.7) - (0.5 + 1.0) + 1.2 - (0.9 + 0.7 + 1.2) = -0.1 → loss 0.1/9
    # gradient of the loss w.r.t. log π: -w·A/9; 3 of 9 tokens truncated (1.5, 1.3, 3.0); none clipped
    batch = hand_batch()
    config = LossConfig(
        correction="reinforce_is", clip_eps=0.2, truncation_cap=1.2, std_eps=0.0, group_std="population"
    )
    loss, metrics = grpo_loss(batch, config)
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


def test_reinforce_is_with_mask_by_hand() -> None:
    # c = 1.2, mask: w = ρ where ρ ≤ 1.2, else 0:
    #   row 0: 0, 1.1, 0.7 | row 1: 0.5, 1.0 | row 2: 0 | row 3: 0.9, 0.7, 0
    # value Σ w·A = (1.1 + 0.7) - (0.5 + 1.0) + 0 - (0.9 + 0.7) = -1.3 → loss 1.3/9; gradient -w·A/9
    batch = hand_batch()
    config = LossConfig(
        correction="reinforce_is", truncation_cap=1.2, cap_action="mask", std_eps=0.0, group_std="population"
    )
    loss, metrics = grpo_loss(batch, config)
    assert loss.item() == pytest.approx(1.3 / 9)
    loss.backward()
    expected = [[0.0, -1.1 / 9, -0.7 / 9], [0.5 / 9, 1.0 / 9, 0.0], [0.0, 0.0, 0.0], [0.9 / 9, 0.7 / 9, 0.0]]
    assert batch.logprobs.grad.tolist() == [pytest.approx(row) for row in expected]
    assert metrics["truncated_fraction"] == pytest.approx(3 / 9)
    assert metrics["behaviour_weight_mean"] == pytest.approx((1.8 + 1.5 + 1.6) / 9)


@pytest.mark.parametrize("correction", ["clip", "tis", "decoupled", "reinforce_is"])
def test_every_cap_defaults_to_two(correction: str) -> None:
    # One default for all: c = 2. In reinforce_is only ρ = 3.0 (row 3, A = -1) exceeds it: gradient weight 2.
    assert LossConfig(correction=correction).truncation_cap == 2.0  # type: ignore[arg-type]
    assert LossConfig(correction=correction).cap_action == "clamp"  # type: ignore[arg-type]
    batch = hand_batch()
    loss, metrics = grpo_loss(batch, LossConfig(correction="reinforce_is", std_eps=0.0, group_std="population"))
    loss.backward()
    assert batch.logprobs.grad[3].tolist() == pytest.approx([0.9 / 9, 0.7 / 9, 2.0 / 9])
    assert batch.logprobs.grad[0].tolist() == pytest.approx([-1.5 / 9, -1.1 / 9, -0.7 / 9])
    assert metrics["truncated_fraction"] == pytest.approx(1 / 9)


def decoupled_batch(proximal_requires_grad: bool = False) -> LossBatch:
    """One group of 2 samples × 2 tokens, rewards [1, 0] (GRPO A = +1, -1), μ = -1 everywhere.

    Per token q = π_old/μ and r = π_θ/π_old:
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


@pytest.mark.parametrize("correction", ["tis", "decoupled"])
def test_tis_correction_by_hand(correction: str) -> None:
    # ε = 0.2, c = 2: w = min(q, 2) = [1.5, 2.0 (truncated)], [0.5, 1.0]; S = w · min(rA, clip(r)A):
    #   row 0 (A=+1): r 1.5 → clipped to 1.2: S = 1.5·1.2 = 1.8, gradient 0 | r 1.1: S = 2·1.1 = 2.2
    #   row 1 (A=-1): r 0.7 → clipped, min(-0.7, -0.8) = -0.8: S = 0.5·(-0.8) = -0.4, gradient 0
    #                 r 1.0: S = 1·(-1) = -1
    #   loss = -(1.8 + 2.2 - 0.4 - 1) / 4 = -0.65; gradient -w·r·A/4 where unclipped
    # ρ = q·r = 2.25, 3.3, 0.35, 1.0
    batch = decoupled_batch(proximal_requires_grad=True)
    config = LossConfig(correction=correction, clip_eps=0.2, truncation_cap=2.0, std_eps=0.0, group_std="population")  # type: ignore[arg-type]
    loss, metrics = grpo_loss(batch, config)
    assert loss.item() == pytest.approx(-0.65)
    loss.backward()
    assert batch.logprobs.grad.tolist() == [pytest.approx([0.0, -2.2 / 4]), pytest.approx([0.0, 1.0 / 4])]
    assert batch.proximal_logprobs.grad is None  # π_prox is a constant of the step
    assert metrics["clip_fraction"] == pytest.approx(2 / 4)
    assert metrics["truncated_fraction"] == pytest.approx(1 / 4)
    assert metrics["behaviour_weight_mean"] == pytest.approx((1.5 + 2.0 + 0.5 + 1.0) / 4)
    assert metrics["ratio_mean"] == pytest.approx((2.25 + 3.3 + 0.35 + 1.0) / 4)


def test_tis_with_mask_drops_the_token_above_the_cap() -> None:
    # As test_tis_correction_by_hand with cap_action mask: row 0 token 1 (q = 3 > 2) gets w = 0:
    #   S = 1.8 + 0 - 0.4 - 1 = 0.4 → loss -0.1; its gradient 0 (the others' are clipped or -w·r·A/4)
    batch = decoupled_batch()
    config = LossConfig(
        correction="tis", clip_eps=0.2, truncation_cap=2.0, cap_action="mask", std_eps=0.0, group_std="population"
    )
    loss, metrics = grpo_loss(batch, config)
    assert loss.item() == pytest.approx(-0.1)
    loss.backward()
    assert batch.logprobs.grad.tolist() == [pytest.approx([0.0, 0.0]), pytest.approx([0.0, 1.0 / 4])]
    assert metrics["truncated_fraction"] == pytest.approx(1 / 4)
    assert metrics["behaviour_weight_mean"] == pytest.approx((1.5 + 0.0 + 0.5 + 1.0) / 4)


def test_tis_clips_where_reinforce_is_does_not() -> None:
    # The same tokens under reinforce_is (weight on ρ = q·r, no clip), c = 4:
    #   ρ = 2.25, 3.3 | 0.35, 1.0, all ≤ 4: value Σ ρA = 2.25 + 3.3 - 0.35 - 1.0 = 4.2 → loss -1.05
    #   gradient -ρA/4 on every token, where tis (c = 4: w = q) gives 0 on the two clipped tokens
    reinforce, tis = decoupled_batch(), decoupled_batch()
    loss, _ = grpo_loss(
        reinforce, LossConfig(correction="reinforce_is", truncation_cap=4.0, std_eps=0.0, group_std="population")
    )
    assert loss.item() == pytest.approx(-1.05)
    loss.backward()
    assert reinforce.logprobs.grad.tolist() == [pytest.approx([-2.25 / 4, -3.3 / 4]), pytest.approx([0.35 / 4, 1 / 4])]
    tis_loss, _ = grpo_loss(tis, LossConfig(correction="tis", truncation_cap=4.0, std_eps=0.0, group_std="population"))
    assert tis_loss.item() == pytest.approx(-(1.8 + 3.3 - 0.4 - 1.0) / 4)
    tis_loss.backward()
    assert tis.logprobs.grad.tolist() == [pytest.approx([0.0, -3.3 / 4]), pytest.approx([0.0, 1.0 / 4])]


def test_tis_without_a_cap_weighs_by_the_full_proximal_ratio() -> None:
    # c null: row 0 token 1 keeps w = 3: S = 3·1.1 = 3.3, gradient -3.3/4; nothing truncated
    batch = decoupled_batch()
    loss, metrics = grpo_loss(
        batch, LossConfig(correction="tis", clip_eps=0.2, truncation_cap=None, std_eps=0.0, group_std="population")
    )
    assert loss.item() == pytest.approx(-(1.8 + 3.3 - 0.4 - 1.0) / 4)
    loss.backward()
    assert batch.logprobs.grad[0, 1].item() == pytest.approx(-3.3 / 4)
    assert metrics["truncated_fraction"] == 0.0


@pytest.mark.parametrize("correction", ["tis", "decoupled"])
def test_tis_at_the_start_of_the_step_is_weighted_reinforce(correction: str) -> None:
    # A step's first update: π_θ = π_old, so r = 1, nothing is clipped, the gradient is -w·A/4 (w = min(q, 2)).
    batch = decoupled_batch()
    at_start = LossBatch(
        logprobs=batch.proximal_logprobs.clone().requires_grad_(),
        behaviour_logprobs=batch.behaviour_logprobs,
        mask=batch.mask,
        rewards=batch.rewards,
        group_size=2,
        proximal_logprobs=batch.proximal_logprobs,
    )
    loss, metrics = grpo_loss(
        at_start, LossConfig(correction=correction, clip_eps=0.2, std_eps=0.0, group_std="population")
    )  # type: ignore[arg-type]
    loss.backward()
    assert metrics["clip_fraction"] == 0.0
    assert at_start.logprobs.grad.tolist() == [pytest.approx([-1.5 / 4, -2.0 / 4]), pytest.approx([0.5 / 4, 1.0 / 4])]


@pytest.mark.parametrize("name", ["grpo", "rloo", "ppo"])
@pytest.mark.parametrize("correction", ["tis", "decoupled"])
def test_tis_needs_proximal_log_probs(name: str, correction: str) -> None:
    with pytest.raises(ValueError, match="proximal_logprobs"):
        LOSSES[name](every_input_batch(), LossConfig(correction=correction))  # type: ignore[arg-type]


def test_no_correction_treats_stale_samples_as_on_policy() -> None:
    # correction none: S = A whatever ρ; loss = -Σ A·len / 9 = -(3 - 2 + 1 - 3)/9 = 1/9;
    # gradient -A/9 on every completion token, even where ρ = 3 or 0.5; nothing clipped or truncated.
    batch = hand_batch()
    loss, metrics = grpo_loss(
        batch, LossConfig(correction="none", clip_eps=0.2, truncation_cap=1.2, std_eps=0.0, group_std="population")
    )
    assert loss.item() == pytest.approx(1 / 9)
    loss.backward()
    expected = [[-1 / 9] * 3, [1 / 9, 1 / 9, 0.0], [-1 / 9, 0.0, 0.0], [1 / 9] * 3]
    assert batch.logprobs.grad.tolist() == [pytest.approx(row) for row in expected]
    assert metrics["clip_fraction"] == metrics["truncated_fraction"] == 0.0
    assert metrics["ratio_mean"] == pytest.approx((1.5 + 1.1 + 0.7 + 0.5 + 1.0 + 1.3 + 0.9 + 0.7 + 3.0) / 9)
    assert "behaviour_weight_mean" not in metrics


@pytest.mark.parametrize("name", ["grpo", "rloo", "ppo"])
@pytest.mark.parametrize("correction", ["tis", "decoupled", "reinforce_is"])
def test_weighted_corrections_log_the_behaviour_weight(name: str, correction: str) -> None:
    batch = every_input_batch()
    batch = LossBatch(**{**vars(batch), "proximal_logprobs": batch.behaviour_logprobs})  # w = π_old/μ = 1
    _, metrics = LOSSES[name](batch, LossConfig(correction=correction))  # type: ignore[arg-type]
    expected = 1.0 if correction != "reinforce_is" else (1.5 + 1.1 + 0.7 + 0.5 + 1.0 + 1.3 + 0.9 + 0.7 + 2.0) / 9
    assert metrics["behaviour_weight_mean"] == pytest.approx(expected)


def test_corrections_match_the_scenario_names() -> None:
    from asyncrl.scenarios.spec.scenario import AlgorithmSpec

    names = set(typing.get_args(AlgorithmSpec.model_fields["correction"].annotation))
    assert set(CORRECTIONS) == names == set(CORRECTIONS.names)
    with pytest.raises(ValueError, match="correction"):
        LossConfig(correction="ppo")  # type: ignore[arg-type]


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


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    cap=st.floats(1.0, 4.0),
    action=st.sampled_from(["clamp", "mask"]),
)
def test_tis_at_the_step_s_first_update_is_reinforce_is(seed: int, cap: float, action: str) -> None:
    # π_θ = π_old (a step's first update): r = 1, nothing clipped, w = cap(π_θ/μ) = reinforce_is's weight.
    generator = torch.Generator().manual_seed(seed)
    current = -torch.rand(4, 3, generator=generator, dtype=F64) * 3
    behaviour = current + 0.8 * torch.randn(4, 3, generator=generator, dtype=F64)
    rewards = torch.rand(4, generator=generator, dtype=F64)

    def loss_and_grad(correction: str) -> tuple[float, torch.Tensor]:
        logprobs = current.clone().requires_grad_()
        batch = LossBatch(logprobs, behaviour, torch.ones(4, 3, dtype=F64), rewards, 2, proximal_logprobs=current)
        config = LossConfig(correction=correction, truncation_cap=cap, cap_action=action)  # type: ignore[arg-type]
        loss, _ = grpo_loss(batch, config)
        loss.backward()
        return loss.item(), logprobs.grad

    tis, reinforce = loss_and_grad("tis"), loss_and_grad("reinforce_is")
    assert tis[0] == pytest.approx(reinforce[0], abs=1e-12)
    torch.testing.assert_close(tis[1], reinforce[1])
