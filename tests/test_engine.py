"""The continuous-batching generation engine against one-sequence-at-a-time decoding without a cache.

The reference decodes each request alone with a full forward over the whole sequence at every step (no KV cache,
no padding, no batching), so any slip in cache merging, row removal, padding or positions shows up as a different
token or log-prob. Skipped where the optional executor dependencies (torch, transformers) are not installed.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from asyncrl.executor.generation.engine import (  # noqa: E402
    FINISH_EOS,
    FINISH_LENGTH,
    ContinuousBatchingEngine,
    GenerationEngine,
    Request,
    Rollout,
    generate_all,
)
from asyncrl.executor.generation.models import build_config, build_model, load_model  # noqa: E402
from asyncrl.scenarios.costs.catalog import MODEL_PRESETS  # noqa: E402

if TYPE_CHECKING:
    from transformers import PreTrainedModel

VOCAB = 64
PAD = 0
LOGPROB_TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def model() -> PreTrainedModel:
    return build_model("tiny", seed=0, vocab_size=VOCAB)


def reference_decode(
    model: PreTrainedModel, prompt: list[int], new_tokens: int, temperature: float = 1.0
) -> tuple[list[int], list[float]]:
    """Greedy decoding of one prompt by full forwards; tokens and their log-probs (after temperature)."""
    sequence = list(prompt)
    logprobs: list[float] = []
    with torch.inference_mode():
        for _ in range(new_tokens):
            logits = model(input_ids=torch.tensor([sequence])).logits[0, -1]
            log_probs = torch.log_softmax(logits / temperature, dim=-1)
            token = int(log_probs.argmax())
            sequence.append(token)
            logprobs.append(float(log_probs[token]))
    return sequence[len(prompt) :], logprobs


def teacher_forced_logprobs(
    model: PreTrainedModel, prompt: list[int], tokens: list[int], temperature: float
) -> list[float]:
    """Log-prob of each completion token given everything before it, from one full forward."""
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([prompt + tokens])).logits[0]
    log_probs = torch.log_softmax(logits[len(prompt) - 1 : -1] / temperature, dim=-1)
    return log_probs.gather(1, torch.tensor(tokens)[:, None]).squeeze(1).tolist()


def engine_for(
    model: PreTrainedModel,
    max_batch: int,
    eos: int | None = None,
    greedy: bool = True,
    temperature: float = 1.0,
    seed: int = 0,
) -> ContinuousBatchingEngine:
    return ContinuousBatchingEngine(
        model,
        max_batch=max_batch,
        eos_token_id=eos,
        pad_token_id=PAD,
        temperature=temperature,
        greedy=greedy,
        seed=seed,
    )


def mixed_requests(count: int, seed: int) -> list[Request]:
    """Prompts of 1 to 8 tokens and forced lengths of 1 to 24 tokens, in an order that makes rows join and leave."""
    generator = torch.Generator().manual_seed(seed)
    requests = []
    for index in range(count):
        prompt_length = 1 + index % 8
        prompt = torch.randint(1, VOCAB, (prompt_length,), generator=generator).tolist()
        forced = int(torch.randint(1, 25, (1,), generator=generator))
        requests.append(Request(id=index, prompt=prompt, max_new_tokens=32, forced_length=forced))
    return requests


def by_id(rollouts: list[Rollout]) -> dict[int, Rollout]:
    return {rollout.id: rollout for rollout in rollouts}


def test_continuous_batching_matches_one_sequence_at_a_time(model: PreTrainedModel) -> None:
    requests = mixed_requests(count=11, seed=1)
    rollouts = by_id(generate_all(engine_for(model, max_batch=3), requests))
    assert sorted(rollouts) == [request.id for request in requests]
    for request in requests:
        tokens, logprobs = reference_decode(model, request.prompt, request.forced_length)
        rollout = rollouts[request.id]
        assert rollout.prompt == request.prompt
        assert rollout.tokens == tokens, f"request {request.id}"
        assert rollout.logprobs == pytest.approx(logprobs, abs=LOGPROB_TOLERANCE)
        assert rollout.finish_reason == FINISH_LENGTH


def test_freed_row_is_refilled_at_the_next_step(model: PreTrainedModel) -> None:
    # max_batch 2: a (2 tokens) and b (5) start together; c (3) takes a's row at step 3 and ends with b at step 5,
    # where fixed batches would need 5 + 3 = 8 steps.
    requests = [Request(0, [5, 6], 8, forced_length=2), Request(1, [7], 8, 5), Request(2, [9, 10, 11], 8, 3)]
    engine = engine_for(model, max_batch=2)
    for request in requests:
        engine.add(request)
    finished_per_step, in_flight_per_step = [], []
    while engine.in_flight or engine.waiting:
        finished_per_step.append([rollout.id for rollout in engine.step()])
        in_flight_per_step.append(engine.in_flight)
    assert finished_per_step == [[], [0], [], [], [1, 2]]
    assert in_flight_per_step == [2, 1, 2, 2, 0]


def test_single_token_prompts_join_an_empty_batch(model: PreTrainedModel) -> None:
    # Nothing to prefill: each joins an empty batch with an empty cache, the second after the first has left.
    requests = [Request(0, [17], 6, forced_length=4), Request(1, [18], 6, forced_length=6)]
    rollouts = by_id(generate_all(engine_for(model, max_batch=1), requests))
    for request in requests:
        assert rollouts[request.id].tokens == reference_decode(model, request.prompt, request.forced_length)[0]


@pytest.mark.slow
def test_long_rollouts_outgrow_the_cache_buffer(model: PreTrainedModel) -> None:
    # Rebuilt caches get 64 free columns at least; 80 and 70 tokens cross that, while c joins after b has left.
    requests = [Request(0, [2, 3], 80, forced_length=80), Request(1, [4], 3, 3), Request(2, [5, 6, 7, 8], 70, 70)]
    rollouts = by_id(generate_all(engine_for(model, max_batch=2), requests))
    for request in requests:
        tokens, logprobs = reference_decode(model, request.prompt, request.max_new_tokens)
        assert rollouts[request.id].tokens == tokens, f"request {request.id}"
        assert rollouts[request.id].logprobs == pytest.approx(logprobs, abs=LOGPROB_TOLERANCE)


def test_sampled_logprobs_are_those_of_the_tempered_policy(model: PreTrainedModel) -> None:
    temperature = 0.7
    requests = mixed_requests(count=6, seed=2)
    rollouts = generate_all(engine_for(model, max_batch=4, greedy=False, temperature=temperature, seed=3), requests)
    assert len(rollouts) == len(requests)
    for rollout in rollouts:
        expected = teacher_forced_logprobs(model, rollout.prompt, rollout.tokens, temperature)
        assert rollout.logprobs == pytest.approx(expected, abs=LOGPROB_TOLERANCE)


def test_sampling_is_reproducible_from_the_seed(model: PreTrainedModel) -> None:
    requests = mixed_requests(count=5, seed=4)

    def sampled_tokens(seed: int) -> dict[int, list[int]]:
        engine = engine_for(model, max_batch=2, greedy=False, seed=seed)
        return {rollout.id: rollout.tokens for rollout in generate_all(engine, requests)}

    first = sampled_tokens(seed=5)
    assert sampled_tokens(seed=5) == first
    assert sampled_tokens(seed=6) != first  # the seed reaches the sampler: it is not fixed elsewhere


def test_forced_length_is_exact_and_ignores_eos(model: PreTrainedModel) -> None:
    prompt = [3, 14, 15]
    greedy_tokens, _ = reference_decode(model, prompt, 6)
    eos = greedy_tokens[0]  # the very first token would end the rollout if EOS counted
    engine = engine_for(model, max_batch=2, eos=eos)
    (rollout,) = generate_all(engine, [Request(0, prompt, max_new_tokens=10, forced_length=6)])
    assert rollout.tokens == greedy_tokens
    assert rollout.finish_reason == FINISH_LENGTH


def test_eos_ends_a_rollout(model: PreTrainedModel) -> None:
    prompt = [21, 22, 23, 24]
    greedy_tokens, _ = reference_decode(model, prompt, 16)
    first_seen = {token: index for index, token in reversed(list(enumerate(greedy_tokens)))}
    eos, eos_index = max(first_seen.items(), key=lambda item: item[1])  # the token whose first use comes last
    assert eos_index >= 1, "degenerate reference: a single repeated token"
    other = Request(1, [30], max_new_tokens=16, forced_length=16)  # keeps the batch busy past the EOS
    rollouts = by_id(generate_all(engine_for(model, max_batch=2, eos=eos), [Request(0, prompt, 16), other]))
    assert rollouts[0].tokens == greedy_tokens[: eos_index + 1]
    assert rollouts[0].finish_reason == FINISH_EOS
    assert len(rollouts[1].tokens) == 16


def test_max_new_tokens_caps_a_rollout(model: PreTrainedModel) -> None:
    prompt = [40, 41]
    greedy_tokens, _ = reference_decode(model, prompt, 7)
    eos = next(token for token in range(VOCAB) if token not in greedy_tokens)
    (rollout,) = generate_all(engine_for(model, max_batch=1, eos=eos), [Request(0, prompt, max_new_tokens=7)])
    assert rollout.tokens == greedy_tokens
    assert rollout.finish_reason == FINISH_LENGTH


def test_tokens_after_a_weight_update_carry_the_new_version() -> None:
    policy = build_model("tiny", seed=0, vocab_size=VOCAB)
    new_weights = build_model("tiny", seed=1, vocab_size=VOCAB).state_dict()
    engine = engine_for(policy, max_batch=2)
    assert isinstance(engine, GenerationEngine)
    early = Request(0, [1, 2, 3], max_new_tokens=8, forced_length=8)
    early_tokens, _ = reference_decode(policy, early.prompt, 3)
    engine.add(early)
    assert [engine.step() for _ in range(3)] == [[], [], []]
    engine.load_weights(new_weights, version=1)
    late = Request(1, [4, 5], max_new_tokens=5, forced_length=5)
    late_tokens, _ = reference_decode(policy, late.prompt, 5)  # the policy module now holds the new weights
    rollouts = by_id(generate_all(engine, [late]))
    assert rollouts[0].versions == [0, 0, 0, 1, 1, 1, 1, 1]
    assert rollouts[0].tokens[:3] == early_tokens
    assert rollouts[1].versions == [1] * 5
    assert rollouts[1].tokens == late_tokens


def test_recomputing_the_cache_after_a_weight_update_continues_as_the_new_weights_would_alone() -> None:
    # recompute_kv (schedule.kv_on_update: recompute): after the load, the rollout's later tokens and log-probs are
    # those of the new weights over its whole sequence so far, as if it had been generated with them from the
    # start; the next step counts the recompute's tokens (3 prompt + 3 sampled, the last one pending: 5).
    old_weights = build_model("tiny", seed=0, vocab_size=VOCAB)
    new_policy = build_model("tiny", seed=1, vocab_size=VOCAB)
    request = Request(0, [1, 2, 3], max_new_tokens=8, forced_length=8)
    first, _ = reference_decode(old_weights, request.prompt, 3)
    rest, rest_logprobs = reference_decode(new_policy, request.prompt + first, 5)
    engine = ContinuousBatchingEngine(
        build_model("tiny", seed=0, vocab_size=VOCAB),
        max_batch=2,
        eos_token_id=None,
        pad_token_id=PAD,
        greedy=True,
        recompute_kv=True,
    )
    engine.add(request)
    assert [engine.step() for _ in range(3)] == [[], [], []]
    engine.load_weights(new_policy.state_dict(), version=1)
    assert engine.step() == [] and engine.last_step.prefill_tokens == 5 and engine.last_step.joins == 0
    rollout = by_id(generate_all(engine, []))[0]
    assert rollout.tokens == first + rest and rollout.versions == [0] * 3 + [1] * 5
    assert rollout.logprobs[3:] == pytest.approx(rest_logprobs, abs=LOGPROB_TOLERANCE)
    kept = engine_for(build_model("tiny", seed=0, vocab_size=VOCAB), max_batch=2)  # the default keeps the cache
    kept.add(request)
    for _ in range(3):
        kept.step()
    kept.load_weights(new_policy.state_dict(), version=1)
    kept.step()
    assert kept.last_step.prefill_tokens == 0


def test_invalid_requests_are_refused(model: PreTrainedModel) -> None:
    engine = engine_for(model, max_batch=1)
    with pytest.raises(ValueError, match="forced_length"):
        engine.add(Request(0, [1], max_new_tokens=4, forced_length=5))
    with pytest.raises(ValueError, match="prompt"):
        engine.add(Request(1, [], max_new_tokens=4))
    assert engine.waiting == 0


@pytest.mark.parametrize("preset", [name for name, figures in MODEL_PRESETS.items() if figures.family != "qwen3_moe"])
def test_presets_build_with_the_catalog_parameter_count(preset: str) -> None:
    with torch.device("meta"):
        meta_model = transformers.AutoModelForCausalLM.from_config(build_config(MODEL_PRESETS[preset]))
    assert sum(parameter.numel() for parameter in meta_model.parameters()) == MODEL_PRESETS[preset].params


def test_tiny_model_size_vocab_override_and_reload(tmp_path: Path) -> None:
    tiny = build_model("tiny", seed=0)
    assert sum(parameter.numel() for parameter in tiny.parameters()) == MODEL_PRESETS["tiny"].params
    small_vocab = build_model("tiny", seed=0, vocab_size=VOCAB)
    assert small_vocab.get_input_embeddings().weight.shape == (VOCAB, MODEL_PRESETS["tiny"].hidden)
    small_vocab.save_pretrained(tmp_path)
    reloaded = load_model(tmp_path)
    for name, weight in small_vocab.state_dict().items():
        assert torch.equal(reloaded.state_dict()[name], weight), name
