"""The off-policy corrections through the learner: a real tiny model, rollouts whose behaviour log-probs are stale.

    rollouts (prompt, completion) ──teacher-forced on the learner's model──► log π_θ
    behaviour log-probs log μ = log π_θ − log ρ, with ρ chosen per token   (or from a perturbed copy of the model)
    learner.loss_batch(batch, learner.step_start(batch)) ──corrected_surrogate──► per token: ratio, clipped, truncated

Hand-worked values of each correction on small tensors are in ``tests/test_losses.py``; here the question is
whether the learner feeds them the right log-probs (ratios, π_prox) and reports what they did.
"""

from __future__ import annotations

import copy
import math
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from asyncrl.executor.generation.engine import Rollout  # noqa: E402
from asyncrl.executor.generation.models import build_model  # noqa: E402
from asyncrl.executor.generation.tokenizer import CharTokenizer  # noqa: E402
from asyncrl.executor.learning.advantages import grpo_advantages  # noqa: E402
from asyncrl.executor.learning.corrections import corrected_surrogate  # noqa: E402
from asyncrl.executor.learning.learner import Group, Learner, LearnerConfig, collate  # noqa: E402
from asyncrl.executor.learning.loss_inputs import LossBatch, LossConfig, LossOutput  # noqa: E402

from tests.test_learner_batch import TEMPERATURE, teacher_forced_logprobs  # noqa: E402

EPS, CAP = 0.2, 1.4
# Per-token ratio ρ = π_θ/μ of each row's completion tokens; rewards [1, 0 | 0, 1] give A = [+1, -1 | -1, +1].
RATIOS = [[1.5, 1.1, 0.7], [0.5], [1.3, 3.0], [0.9]]
REWARDS = [1.0, 0.0, 0.0, 1.0]
ADVANTAGE_SIGNS = [1, -1, -1, 1]
TOKENS = 7
# Clip (ε 0.2) acts where A>0 ∧ ρ>1.2 or A<0 ∧ ρ<0.8: row 0's 1.5 and row 1's 0.5. Truncation (c 1.4): 1.5 and 3.0.
CLIPPED_BY_RHO = [[True, False, False], [True], [False, False], [False]]
ABOVE_CAP = [[True, False, False], [False], [False, True], [False]]
NOTHING = [[False] * len(row) for row in RATIOS]
EXPECTED = {  # correction: (clipped, truncated, gradient weight of each token: ∂S/∂log π = weight · A)
    "clip": (CLIPPED_BY_RHO, ABOVE_CAP, [[0.0, 1.1, 0.7], [0.0], [1.3, CAP], [0.9]]),
    "reinforce_is": (NOTHING, ABOVE_CAP, [[CAP, 1.1, 0.7], [0.5], [1.3, CAP], [0.9]]),
    "tis": (NOTHING, ABOVE_CAP, [[CAP, 1.1, 0.7], [0.5], [1.3, CAP], [0.9]]),  # first update: r = 1
    "decoupled": (NOTHING, ABOVE_CAP, [[CAP, 1.1, 0.7], [0.5], [1.3, CAP], [0.9]]),  # tis under AReaL's name
    "none": (NOTHING, NOTHING, [[1.0] * 3, [1.0], [1.0, 1.0], [1.0]]),
}
PROMPTS = [[1, 5, 6], [1, 5], [1], [1, 5, 6, 7]]
COMPLETIONS = [[7, 8, 2], [9], [10, 11], [12]]


def tiny_model(seed: int = 0) -> torch.nn.Module:
    return build_model("tiny", seed=seed, vocab_size=CharTokenizer().vocab_size)


def learner_with(correction: str, updates_per_step: int = 1, learning_rate: float = 1e-4) -> Learner:
    algorithm = LossConfig(
        temperature=TEMPERATURE,
        updates_per_step=updates_per_step,
        learning_rate=learning_rate,
        correction=correction,  # type: ignore[arg-type]
        clip_eps=EPS,
        truncation_cap=CAP,
        group_std="population",
    )
    config = LearnerConfig(algorithm=algorithm)
    return Learner(tiny_model(), config, pad_token_id=0)


def stale_groups(behaviour_model: torch.nn.Module, ratios: list[list[float]] | None = None) -> list[Group]:
    """Two groups of two rollouts whose behaviour log-probs are ``behaviour_model``'s, divided by ``ratios``."""
    rollouts = []
    for row, (prompt, tokens) in enumerate(zip(PROMPTS, COMPLETIONS, strict=True)):
        probe = Rollout(row, prompt, tokens, [0.0] * len(tokens), [0] * len(tokens), "eos")
        logprobs = teacher_forced_logprobs(behaviour_model, probe, TEMPERATURE)
        if ratios is not None:
            logprobs = logprobs - torch.log(torch.tensor(ratios[row]))
        rollouts.append((replace(probe, logprobs=logprobs.tolist()), REWARDS[row]))
    return [rollouts[:2], rollouts[2:]]


def padded(rows: list[list[object]], fill: object) -> list[list[object]]:
    width = max(len(row) for row in rows)
    return [[*row, *[fill] * (width - len(row))] for row in rows]


@pytest.mark.parametrize("correction", sorted(EXPECTED))
def test_each_correction_sees_the_stale_ratio_and_marks_the_right_tokens(correction: str) -> None:
    learner = learner_with(correction)
    batch = collate(stale_groups(learner.model, RATIOS), learner.pad_token_id)
    loss_batch = learner.loss_batch(batch, learner.step_start(batch))
    keep = batch.mask.bool()
    ratio = (loss_batch.logprobs.detach() - loss_batch.behaviour_logprobs).exp()
    torch.testing.assert_close(ratio[keep], torch.tensor([rho for row in RATIOS for rho in row]), atol=1e-5, rtol=1e-5)

    advantages = grpo_advantages(loss_batch.rewards, 2, sample_std=False)[:, None].expand_as(loss_batch.logprobs)
    surrogate = corrected_surrogate(loss_batch, advantages, learner.config.algorithm)
    clipped, truncated, weights = EXPECTED[correction]
    assert (surrogate.clipped & keep).tolist() == padded(clipped, False)
    assert (surrogate.truncated & keep).tolist() == padded(truncated, False)
    (grad,) = torch.autograd.grad(surrogate.objective[keep].sum(), loss_batch.logprobs)
    signs = torch.tensor(ADVANTAGE_SIGNS, dtype=grad.dtype)[:, None]
    expected = torch.tensor(padded(weights, 0.0), dtype=grad.dtype) * signs
    torch.testing.assert_close(grad, expected, atol=1e-4, rtol=1e-4)  # |A| = 0.5 / (0.5 + 1e-6)


@pytest.mark.parametrize("correction", sorted(EXPECTED))
def test_train_step_reports_what_the_correction_did(correction: str) -> None:
    learner = learner_with(correction)
    metrics = learner.train_step(stale_groups(learner.model, RATIOS))
    clipped, truncated, _ = EXPECTED[correction]
    assert metrics["clip_fraction"] == pytest.approx(sum(map(sum, clipped)) / TOKENS)
    assert metrics["truncated_fraction"] == pytest.approx(sum(map(sum, truncated)) / TOKENS)
    assert metrics["ratio_mean"] == pytest.approx(sum(map(sum, RATIOS)) / TOKENS, rel=1e-5)
    if correction in ("tis", "decoupled", "reinforce_is"):
        capped = sum(min(rho, CAP) for row in RATIOS for rho in row)
        assert metrics["behaviour_weight_mean"] == pytest.approx(capped / TOKENS, rel=1e-5)
    else:
        assert "behaviour_weight_mean" not in metrics


def test_ratio_against_a_perturbed_copy_is_the_log_prob_difference() -> None:
    # Behaviour from another copy of the model with perturbed weights (what an actor two versions back holds).
    learner = learner_with("clip")
    stale = copy.deepcopy(learner.model)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for parameter in stale.parameters():
            parameter.add_(0.05 * torch.randn(parameter.shape, generator=generator))
    groups = stale_groups(stale)
    batch = collate(groups, learner.pad_token_id)
    loss_batch = learner.loss_batch(batch)
    rollouts = [rollout for group in groups for rollout, _ in group]
    ratios = []
    for row, rollout in enumerate(rollouts):
        current = teacher_forced_logprobs(learner.model, rollout, TEMPERATURE)
        behaviour = teacher_forced_logprobs(stale, rollout, TEMPERATURE)
        width = len(rollout.tokens)
        torch.testing.assert_close(loss_batch.behaviour_logprobs[row, :width], behaviour)
        ratios.append((current - behaviour).exp())
    ratio = torch.cat(ratios)
    assert (ratio - 1).abs().max() > 0.05  # really stale
    signs = torch.tensor([ADVANTAGE_SIGNS[row] for row, r in enumerate(rollouts) for _ in r.tokens])
    clipped = ((signs > 0) & (ratio > 1 + EPS)) | ((signs < 0) & (ratio < 1 - EPS))
    metrics = learner.train_step(groups)
    assert metrics["ratio_mean"] == pytest.approx(ratio.mean().item(), rel=1e-5)
    assert metrics["clip_fraction"] == pytest.approx(clipped.float().mean().item())
    kl = (ratio - 1 - ratio.log()).mean().item()  # k3 of KL(μ‖π_θ) on μ's samples
    assert metrics["kl_to_behaviour"] == pytest.approx(kl, rel=1e-4)


@pytest.mark.parametrize("correction", ["tis", "decoupled"])
def test_proximal_policy_is_the_policy_before_the_steps_first_update(correction: str) -> None:
    # Two minibatches (one group each): the first update sees π_θ = π_prox (r = 1); the second sees the weights
    # the first update moved, against π_prox from before it, while its behaviour weight stays π_prox/μ = ρ.
    learner = learner_with(correction, updates_per_step=2, learning_rate=1e-2)
    initial = copy.deepcopy(learner.model)
    seen: list[LossBatch] = []

    def recording(batch: LossBatch, config: LossConfig) -> LossOutput:
        seen.append(batch)
        return loss_fn(batch, config)

    loss_fn, learner.loss_fn = learner.loss_fn, recording
    groups = stale_groups(learner.model, RATIOS)
    learner.train_step(groups)
    assert len(seen) == 2
    first, second = seen
    for batch in seen:
        assert batch.proximal_logprobs is not None and not batch.proximal_logprobs.requires_grad
    keep = first.mask.bool()
    torch.testing.assert_close(first.logprobs.detach()[keep], first.proximal_logprobs[keep], atol=1e-6, rtol=0)
    rollouts = [rollout for rollout, _ in groups[1]]
    for row, rollout in enumerate(rollouts):
        width = len(rollout.tokens)
        before = teacher_forced_logprobs(initial, rollout, TEMPERATURE)
        torch.testing.assert_close(second.proximal_logprobs[row, :width], before, atol=1e-5, rtol=0)
        weight = (second.proximal_logprobs[row, :width] - second.behaviour_logprobs[row, :width]).exp()
        torch.testing.assert_close(weight, torch.tensor(RATIOS[2 + row]), atol=1e-4, rtol=1e-4)
    keep = second.mask.bool()
    moved = (second.logprobs.detach() - second.proximal_logprobs)[keep].abs().max().item()
    assert moved > 1e-4, "the second update should see weights the first one changed"
    assert not math.isnan(moved)
