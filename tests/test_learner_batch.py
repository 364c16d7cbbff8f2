"""The learner's batch: collated rows, the log-probs and values it carries, importance ratio one on fresh rollouts
(dropout included), whole groups, and the scenario's loss settings reaching the loss config.
Skipped without the optional executor dependencies."""

from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("safetensors")

from asyncrl.executor.generation.engine import ContinuousBatchingEngine, Rollout, generate_all  # noqa: E402
from asyncrl.executor.generation.models import build_model  # noqa: E402
from asyncrl.executor.generation.tokenizer import CharTokenizer  # noqa: E402
from asyncrl.executor.learning.learner import Group, Learner, LearnerConfig, collate, split_groups  # noqa: E402
from asyncrl.executor.learning.loss_inputs import LossConfig  # noqa: E402
from asyncrl.executor.tasks.generated import load_task, to_request  # noqa: E402
from asyncrl.scenarios.spec.loading import ScenarioError  # noqa: E402

from tests.test_learning import learning_scenario  # noqa: E402

TEMPERATURE = 0.7


def hand_made_groups() -> list[Group]:
    """Two groups of two rollouts with different prompt and completion lengths (ids < 17)."""
    return [
        [
            (Rollout(0, [1, 5, 6], [7, 8, 2], [-0.1, -0.2, -0.3], [0, 0, 0], "eos"), 0.1),
            (Rollout(1, [1, 5], [9], [-0.4], [0], "length"), 0.2),
        ],
        [
            (Rollout(2, [1], [10, 11], [-0.5, -0.6], [0, 0], "length"), 0.3),
            (Rollout(3, [1, 5, 6, 7], [12], [-0.7], [0], "length"), 0.4),
        ],
    ]


def teacher_forced_logprobs(model: torch.nn.Module, rollout: Rollout, temperature: float) -> torch.Tensor:
    """Log-probs of the completion tokens from one unpadded forward of that rollout alone."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([rollout.prompt + rollout.tokens])).logits[0]
    log_probs = torch.log_softmax(logits[len(rollout.prompt) - 1 : -1] / temperature, dim=-1)
    return log_probs.gather(1, torch.tensor(rollout.tokens)[:, None]).squeeze(1)


def small_learner(loss: str = "grpo") -> Learner:
    model = build_model("tiny", seed=0, vocab_size=CharTokenizer().vocab_size)
    return Learner(model, LearnerConfig(algorithm=LossConfig(loss=loss, temperature=TEMPERATURE)), pad_token_id=0)


def test_collate_pads_group_major_rows() -> None:
    batch = collate(hand_made_groups(), pad_token_id=0)
    assert batch.group_size == 2
    assert batch.input_ids.tolist() == [
        [1, 5, 6, 7, 8, 2],
        [1, 5, 9, 0, 0, 0],
        [1, 10, 11, 0, 0, 0],
        [1, 5, 6, 7, 12, 0],
    ]
    assert batch.attention_mask.tolist() == [[1] * 6, [1, 1, 1, 0, 0, 0], [1, 1, 1, 0, 0, 0], [1] * 5 + [0]]
    assert batch.completion_ids.tolist() == [[7, 8, 2], [9, 0, 0], [10, 11, 0], [12, 0, 0]]
    assert batch.mask.tolist() == [[1, 1, 1], [1, 0, 0], [1, 1, 0], [1, 0, 0]]
    assert batch.predicting_columns[:, 0].tolist() == [2, 1, 0, 3]  # last prompt column of each row
    expected_behaviour = [[-0.1, -0.2, -0.3], [-0.4, 0, 0], [-0.5, -0.6, 0], [-0.7, 0, 0]]
    torch.testing.assert_close(batch.behaviour_logprobs, torch.tensor(expected_behaviour))
    assert batch.rewards.tolist() == pytest.approx([0.1, 0.2, 0.3, 0.4])


def test_loss_batch_holds_the_policy_log_probs_of_each_completion_token() -> None:
    learner = small_learner()
    groups = hand_made_groups()
    loss_batch = learner.loss_batch(collate(groups, learner.pad_token_id))
    assert loss_batch.logprobs.shape == (4, 3)
    assert loss_batch.logprobs.requires_grad
    assert loss_batch.values is None
    rollouts = [rollout for group in groups for rollout, _ in group]
    for row, rollout in enumerate(rollouts):
        expected = teacher_forced_logprobs(learner.model, rollout, TEMPERATURE)
        length = len(rollout.tokens)
        torch.testing.assert_close(loss_batch.logprobs[row, :length].detach(), expected, atol=1e-5, rtol=0)
        torch.testing.assert_close(loss_batch.reference_logprobs[row, :length], expected, atol=1e-5, rtol=0)


def test_ppo_batches_carry_values_and_the_actor_gets_the_policy_only() -> None:
    learner = small_learner("ppo")
    loss_batch = learner.loss_batch(collate(hand_made_groups(), learner.pad_token_id))
    assert loss_batch.values is not None and loss_batch.values.shape == (4, 3)
    assert loss_batch.old_values is not None
    assert learner.weights().keys() == learner.model.state_dict().keys()
    metrics = learner.train_step(hand_made_groups())
    assert {"loss", "reward_mean", "kl", "ratio_mean", "clip_fraction", "value_loss"} <= metrics.keys()
    assert metrics["reward_mean"] == pytest.approx(0.25)


def test_online_dpo_counts_the_samples_of_its_pairs_as_trained() -> None:
    # The first group's rewards tie: no pair, its two samples consumed but not trained; the second gives a pair.
    learner = small_learner("online_dpo")
    first, second = hand_made_groups()
    tied = [(rollout, 0.5) for rollout, _ in first]
    metrics = learner.train_step([tied, second])
    assert (metrics["samples"], metrics["samples_consumed"], metrics["pairs"]) == (2.0, 4.0, 1.0)


def test_scenario_completion_cap_reaches_the_constant_normaliser() -> None:
    scenario = learning_scenario(seed=0, loss_normaliser="constant")
    config = LearnerConfig.from_scenario(scenario).algorithm
    assert config.loss_normaliser == "constant"
    assert config.max_completion_tokens == scenario.workload.completion_tokens.cap


def test_fresh_rollouts_have_importance_ratio_one() -> None:
    learner = small_learner()
    actor_model = build_model("tiny", seed=0, vocab_size=CharTokenizer().vocab_size)
    engine = ContinuousBatchingEngine(actor_model, max_batch=8, eos_token_id=2, pad_token_id=0, temperature=TEMPERATURE)
    task = load_task("copy")
    prompts = task.prompts(np.random.default_rng(0), 3)
    requests = [to_request(prompt, index * 2 + sample) for index, prompt in enumerate(prompts) for sample in range(2)]
    rollouts = sorted(generate_all(engine, requests), key=lambda rollout: rollout.id)
    groups = [[(rollouts[index * 2 + sample], 0.0) for sample in range(2)] for index in range(3)]
    loss_batch = learner.loss_batch(collate(groups, learner.pad_token_id))
    keep = loss_batch.mask.bool()
    torch.testing.assert_close(
        loss_batch.logprobs.detach()[keep], loss_batch.behaviour_logprobs[keep], atol=1e-4, rtol=0
    )


def dropout_model(seed: int = 0) -> torch.nn.Module:
    """The tiny preset with attention dropout 0.5, as a checkpoint trained with dropout would ship."""
    from asyncrl.executor.generation.models import build_config
    from asyncrl.scenarios.costs.catalog import MODEL_PRESETS
    from transformers import AutoModelForCausalLM

    config = build_config(MODEL_PRESETS["tiny"], vocab_size=CharTokenizer().vocab_size)
    config.attention_dropout = 0.5
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config)


def test_a_model_with_dropout_still_sees_ratio_one_on_fresh_rollouts() -> None:
    # The actor samples with dropout off; the learner's log-probs must be of that same policy (and so
    # of every forward: the loss, the reference, decoupled's proximal pass), or a fresh sample has ρ ≠ 1.
    model = dropout_model()
    engine = ContinuousBatchingEngine(
        copy.deepcopy(model), max_batch=8, eos_token_id=2, pad_token_id=0, temperature=TEMPERATURE
    )
    learner = Learner(model, LearnerConfig(algorithm=LossConfig(temperature=TEMPERATURE)), pad_token_id=0)
    prompts = load_task("copy").prompts(np.random.default_rng(0), 2)
    requests = [to_request(prompt, index * 2 + sample) for index, prompt in enumerate(prompts) for sample in range(2)]
    rollouts = sorted(generate_all(engine, requests), key=lambda rollout: rollout.id)
    groups = [[(rollouts[index * 2 + sample], float(sample)) for sample in range(2)] for index in range(2)]
    loss_batch = learner.loss_batch(collate(groups, learner.pad_token_id))
    keep = loss_batch.mask.bool()
    ratio = (loss_batch.logprobs.detach() - loss_batch.behaviour_logprobs).exp()[keep]
    torch.testing.assert_close(ratio, torch.ones_like(ratio), atol=1e-4, rtol=0)
    assert learner.train_step(groups)["ratio_mean"] == pytest.approx(1.0, abs=1e-4)


def test_groups_must_share_a_size_and_split_into_whole_groups() -> None:
    groups = hand_made_groups()
    with pytest.raises(ValueError, match="same non-zero size"):
        collate([groups[0], groups[1][:1]], pad_token_id=0)
    assert [len(part) for part in split_groups(groups * 3, 4)] == [1, 2, 1, 2]
    assert [len(part) for part in split_groups(groups, 5)] == [1, 1]
    with pytest.raises(ValueError, match=r"algorithm\.updates_per_step"):
        Learner.from_scenario(
            learning_scenario(seed=0, updates_per_step=9), build_model("tiny", vocab_size=17), CharTokenizer()
        )


# ---------------------------------------------------------------- (f) scenario settings


LOSS_SETTINGS = {
    "correction": "decoupled",
    "clip_eps": 0.1,
    "truncation_cap": 3.0,
    "normalise_std": False,
    "kl_coef": 0.01,
    "dpo_beta": 0.2,
    "dpo_reference": "behaviour",
    "gamma": 0.9,
    "gae_lambda": 0.8,
    "value_coef": 0.25,
    "value_clip_eps": None,
}


def test_scenario_loss_settings_reach_the_loss_config() -> None:
    config = LearnerConfig.from_scenario(learning_scenario(seed=0, grad_clip=None, **LOSS_SETTINGS))
    assert config.algorithm.grad_clip is None
    assert {name: getattr(config.algorithm, name) for name in LOSS_SETTINGS} == LOSS_SETTINGS
    assert LearnerConfig.from_scenario(learning_scenario(seed=0, grad_clip=0.5)).algorithm.grad_clip == 0.5


def test_default_algorithm_gives_the_default_loss_config_and_gradient_clip() -> None:
    config = LearnerConfig.from_scenario(learning_scenario(seed=0))
    defaults = LossConfig()
    assert {name: getattr(config.algorithm, name) for name in LOSS_SETTINGS} == {
        name: getattr(defaults, name) for name in LOSS_SETTINGS
    }
    assert config.algorithm.grad_clip == LearnerConfig().algorithm.grad_clip == 1.0


@pytest.mark.parametrize(
    ("setting", "value"),
    [("gamma", 1.5), ("gae_lambda", -0.1), ("grad_clip", 0.0), ("value_coef", -1.0), ("dpo_reference", "ref")],
)
def test_bad_loss_settings_name_the_field(setting: str, value: object) -> None:
    with pytest.raises(ScenarioError, match=rf"^algorithm\.{setting}: "):
        learning_scenario(seed=0, **{setting: value})


@pytest.mark.parametrize("correction", ["tis", "decoupled", "reinforce_is", "none"])
def test_online_dpo_refuses_a_correction_it_would_ignore(correction: str) -> None:
    with pytest.raises(ScenarioError, match=r"^algorithm\.correction: .* no effect: online_dpo"):
        learning_scenario(seed=0, loss="online_dpo", correction=correction)
    assert learning_scenario(seed=0, loss="online_dpo").algorithm.correction == "clip"
