"""The learner's memory-safe log-probs and micro-batches against the plain full computation, in float64.

    token_logprobs: the output head applied ``chunk`` positions at a time (logits recomputed in backward)
        == log_softmax(full logits) gathered at the targets, values and gradients
    Learner._logprobs: decoder states at the predicting columns only, head in chunks
        == log_softmax(model(...).logits / T) at the columns, the [N, L, vocab] tensor a naive learner forms
    micro-batches by a token budget: the same update as one pass over the whole minibatch, every loss

Run in float64 (model and head), so the only differences left are summation order: the tolerances are tight.
Also here: what bf16 means for the learner and an engine on CPU (fp32 master weights, bf16 engine copy).
"""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from asyncrl.executor.generation.engine import Rollout  # noqa: E402
from asyncrl.executor.generation.models import build_model  # noqa: E402
from asyncrl.executor.learning.learner import Learner, LearnerConfig  # noqa: E402
from asyncrl.executor.learning.loss_inputs import LossConfig  # noqa: E402
from asyncrl.executor.learning.rollout_batch import collate, micro_batches  # noqa: E402
from asyncrl.executor.learning.token_logprobs import at_columns, token_logprobs  # noqa: E402
from asyncrl.executor.tasks.work import engine_model  # noqa: E402

from tests.conftest import small_scenario  # noqa: E402

VOCAB = 48
TIGHT = 1e-10  # float64: the chunked and the full computation differ only in summation order


def full_logprobs(hidden: torch.Tensor, head: torch.nn.Module, targets: torch.Tensor, temperature: float):
    return torch.log_softmax(head(hidden) / temperature, dim=-1).gather(-1, targets[..., None]).squeeze(-1)


@pytest.mark.parametrize("chunk", [1, 3, 7, 1000])
def test_chunked_logprobs_equal_the_full_computation_with_their_gradients(chunk: int) -> None:
    generator = torch.Generator().manual_seed(0)
    head = torch.nn.Linear(16, VOCAB, bias=False, dtype=torch.float64)
    hidden = torch.randn(3, 5, 16, dtype=torch.float64, generator=generator, requires_grad=True)
    targets = torch.randint(0, VOCAB, (3, 5), generator=generator)
    weights = torch.randn(3, 5, dtype=torch.float64, generator=generator)  # an arbitrary loss on the log-probs

    chunked = token_logprobs(hidden, head, targets, temperature=0.7, chunk=chunk)
    (chunked * weights).sum().backward()
    chunked_grads = hidden.grad.clone(), head.weight.grad.clone()
    hidden.grad, head.weight.grad = None, None
    full = full_logprobs(hidden, head, targets, temperature=0.7)
    (full * weights).sum().backward()

    assert chunked.shape == (3, 5) and chunked.dtype == torch.float64
    torch.testing.assert_close(chunked, full, rtol=0, atol=TIGHT)
    torch.testing.assert_close(chunked_grads[0], hidden.grad, rtol=0, atol=TIGHT)
    torch.testing.assert_close(chunked_grads[1], head.weight.grad, rtol=0, atol=TIGHT)


def scored_groups(groups: int = 3, group_size: int = 4, seed: int = 0) -> list[list[tuple[Rollout, float]]]:
    """Groups of rollouts with prompts and completions of different lengths (so rows are padded differently)."""
    generator = torch.Generator().manual_seed(seed)
    result = []
    for g in range(groups):
        prompt = torch.randint(3, VOCAB, (2 + g,), generator=generator).tolist()
        group = []
        for j in range(group_size):
            length = 1 + (5 * g + 3 * j) % 9
            tokens = torch.randint(3, VOCAB, (length,), generator=generator).tolist()
            logprobs = (-torch.rand(length, generator=generator, dtype=torch.float64) * 3).tolist()
            rollout = Rollout(g * group_size + j, prompt, tokens, logprobs, [0] * length, "length")
            group.append((rollout, float(torch.rand((), generator=generator))))
        result.append(group)
    return result


def float64_learner(loss: str = "grpo", algorithm: dict | None = None, **config: object) -> Learner:
    model = build_model("tiny", seed=0, vocab_size=VOCAB).double()
    settings = LossConfig(loss=loss, temperature=0.8, **(algorithm or {}))
    return Learner(model, LearnerConfig(algorithm=settings, **config), pad_token_id=0)


def test_learner_logprobs_equal_log_softmax_of_the_full_logits() -> None:
    learner = float64_learner(logprob_chunk_tokens=5)
    batch = collate(scored_groups(), pad_token_id=0)
    with torch.no_grad():
        _, logprobs = learner._logprobs(batch, learner.model)
        logits = learner.model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
        expected = full_logprobs(
            at_columns(logits, batch.predicting_columns), torch.nn.Identity(), batch.completion_ids, 0.8
        )
    mask = batch.mask.bool()
    assert logits.shape[-1] == VOCAB and logprobs.shape == batch.mask.shape
    torch.testing.assert_close(logprobs[mask], expected[mask], rtol=0, atol=1e-9)


def test_micro_batches_cut_consecutive_rows_within_the_token_budget() -> None:
    batch = collate(scored_groups(), pad_token_id=0)
    widths = batch.attention_mask.sum(dim=1).tolist()
    for budget in (1, 10, 25, 60, 10_000):
        parts = micro_batches(batch, budget)
        assert [row for part in parts for row in range(len(widths))[part]] == list(range(len(widths)))
        for part in parts:
            rows = widths[part]
            assert len(rows) == 1 or len(rows) * max(rows) <= budget
    assert len(micro_batches(batch, 10_000)) == 1 and len(micro_batches(batch, 1)) == len(widths)


DECOUPLED = {"updates_per_step": 3, "correction": "decoupled", "truncation_cap": 3.0}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("loss", "settings"),
    [("grpo", {}), ("online_dpo", {}), ("ppo", {}), ("ppo", DECOUPLED)],
    ids=["grpo", "online_dpo", "ppo", "ppo-decoupled-3-updates"],
)
def test_an_update_in_micro_batches_equals_one_pass_over_the_minibatch(loss: str, settings: dict) -> None:
    # With three updates, decoupled's π_prox and PPO's old values come from the pass before the first update.
    groups = scored_groups()
    whole = float64_learner(loss, settings)
    split = float64_learner(loss, settings, micro_batch_tokens=25, logprob_chunk_tokens=4)
    batch = collate(groups, pad_token_id=0)
    assert len(micro_batches(batch, 25)) > 3 and len(micro_batches(batch, whole.config.micro_batch_tokens)) == 1

    whole_metrics, split_metrics = whole.train_step(groups), split.train_step(groups)

    assert whole_metrics.keys() == split_metrics.keys()
    for name, value in whole_metrics.items():
        assert split_metrics[name] == pytest.approx(value, rel=1e-9, abs=1e-12), name
    trained = dict(split.model.named_parameters())
    if whole.value_head is not None and split.value_head is not None:
        trained.update({f"value_head.{n}": p for n, p in split.value_head.named_parameters()})
    for name, parameter in [
        *whole.model.named_parameters(),
        *_value_head_parameters(whole),
    ]:  # the last update's gradients are still there
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0, name
        torch.testing.assert_close(trained[name].grad, parameter.grad, rtol=1e-9, atol=1e-13, msg=name)
        torch.testing.assert_close(trained[name], parameter, rtol=0, atol=1e-12, msg=name)


def _value_head_parameters(learner: Learner) -> list[tuple[str, torch.nn.Parameter]]:
    head = learner.value_head
    return [] if head is None else [(f"value_head.{n}", p) for n, p in head.named_parameters()]


def test_bf16_keeps_fp32_master_weights_and_an_engine_copy_in_bf16() -> None:
    scenario = small_scenario(model={"preset": "tiny", "dtype": "bf16"})
    learner = Learner.from_scenario(scenario, build_model("tiny", seed=0, vocab_size=VOCAB), 0)
    assert learner.compute_dtype == torch.bfloat16
    assert {p.dtype for p in learner.model.parameters()} == {torch.float32}
    assert {p.dtype for p in learner.reference.parameters()} == {torch.bfloat16}
    before = copy.deepcopy(learner.model.state_dict())
    metrics = learner.train_step(scored_groups())
    assert torch.isfinite(torch.tensor(metrics["loss"])) and metrics["grad_norm"] > 0
    assert any(not torch.equal(before[n], p) for n, p in learner.model.state_dict().items())
    assert {p.dtype for p in learner.model.parameters()} == {torch.float32}
    assert {p.dtype for p in engine_model(scenario, None, "cpu").parameters()} == {torch.bfloat16}
