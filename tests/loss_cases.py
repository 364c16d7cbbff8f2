"""Hand cases shared by the loss tests (test_losses, test_corrections, test_advantages).

Padded positions hold garbage on purpose: a loss that read them would be visibly wrong.
"""

from __future__ import annotations

import math

import torch
from asyncrl.executor.learning.loss_inputs import LossBatch

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
#   GRPO (population std, eps 0): group 0 mean 0.5 std 0.5 → A = [+1, -1]; group 1 mean 2 std 1 → A = [+1, -1]
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


def every_input_batch() -> LossBatch:
    """The hand batch with every optional input: a reference and a (zero) value head."""
    return hand_batch(
        reference_logprobs=torch.full((4, 3), -1.0, dtype=F64),
        values=torch.zeros(4, 3, dtype=F64, requires_grad=True),
        old_values=torch.zeros(4, 3, dtype=F64),
    )


# 3-step GAE by hand: V_old = [0.5, 0.4, 0.2], reward 1 on the last token, γ = 0.9, λ = 0.8 (γλ = 0.72)
#   δ2 = 1 + 0 − 0.2 = 0.8            Â2 = 0.8
#   δ1 = 0.9·0.2 − 0.4 = −0.22        Â1 = −0.22 + 0.72·0.8 = 0.356
#   δ0 = 0.9·0.4 − 0.5 = −0.14        Â0 = −0.14 + 0.72·0.356 = 0.11632
#   returns Â + V_old = [0.61632, 0.756, 1.0]
GAE_ADVANTAGES = [-0.14 + 0.72 * (-0.22 + 0.72 * 0.8), -0.22 + 0.72 * 0.8, 0.8]
GAE_RETURNS = [GAE_ADVANTAGES[0] + 0.5, GAE_ADVANTAGES[1] + 0.4, 1.0]
