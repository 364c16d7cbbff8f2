"""Hand-checked values for executor.learning.advantages: group-relative advantages, PPO's token rewards and GAE.

Expected numbers are written out as plain arithmetic from the hand computation in the comment
next to them; they never come from calling the code under test.
"""

from __future__ import annotations

import math

import pytest
import torch
from asyncrl.executor.learning.advantages import gae, grpo_advantages, ppo_token_rewards, rloo_advantages
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.loss_cases import GAE_ADVANTAGES, GAE_RETURNS, as_tensor


def test_grpo_advantages_by_hand() -> None:
    # group [1, 2, 6]: mean 3, population variance (4 + 1 + 9)/3 = 14/3 → A = [-2, -1, 3]/sqrt(14/3)
    # group [4, 4, 4]: all equal → A = 0 (std 0, eps keeps it finite)
    rewards = as_tensor([1.0, 2.0, 6.0, 4.0, 4.0, 4.0])
    std = math.sqrt(14 / 3)
    expected = [-2 / std, -1 / std, 3 / std, 0.0, 0.0, 0.0]
    assert grpo_advantages(rewards, 3, eps=0.0, sample_std=False)[:3].tolist() == pytest.approx(expected[:3])
    assert grpo_advantages(rewards, 3, sample_std=False).tolist() == pytest.approx(expected, abs=1e-5)
    assert grpo_advantages(rewards, 3, normalise_std=False).tolist() == pytest.approx([-2, -1, 3, 0, 0, 0])


def test_grpo_advantages_default_to_the_sample_std() -> None:
    # DeepSeekMath, TRL and verl divide by the sample std: group [1, 2, 6], variance (4 + 1 + 9)/(3 − 1) = 7
    # → A = [-2, -1, 3]/sqrt(7); [0, 1]: variance (0.25 + 0.25)/1 → std sqrt(0.5), A = ±0.5/sqrt(0.5)
    rewards = as_tensor([1.0, 2.0, 6.0])
    std = math.sqrt(7)
    assert grpo_advantages(rewards, 3, eps=0.0).tolist() == pytest.approx([-2 / std, -1 / std, 3 / std])
    pair = grpo_advantages(as_tensor([0.0, 1.0]), 2, eps=0.0)
    assert pair.tolist() == pytest.approx([-0.5 / math.sqrt(0.5), 0.5 / math.sqrt(0.5)])
    assert grpo_advantages(as_tensor([3.0]), 1).tolist() == [0.0]  # G = 1: one sample, no signal, no NaN


@pytest.mark.parametrize("normalise_std", [True, False])
def test_grpo_advantages_of_a_tied_group_are_exactly_zero_in_float32(normalise_std: bool) -> None:
    # 16 samples all at 0.7 carry no signal: A = 0. In float32 the group mean is off by rounding
    # and the std is ~1e-8, so dividing the rounding error by std + eps gave about +0.056 each.
    # A tied group next to an untied one: [0, 1] → ±1 (population std 0.5, eps 0).
    rewards = torch.tensor([0.7] * 16 + [0.0] * 8 + [1.0] * 8, dtype=torch.float32)
    advantages = grpo_advantages(rewards, 16, normalise_std=normalise_std, eps=0.0, sample_std=False)
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
