"""Each term of the analytic cost model alone, against values worked by hand (scenarios/costs/efficiency.py's terms).

The scenario here is a verl-like run of Qwen2.5-0.5B on one H100 (989 TFLOP/s, 3.35 TB/s, PCIe at 64 GB/s one
way): 24 layers, 494,032,768 weights (0.988 GB in bf16), a 151,936-word vocabulary.
"""

from __future__ import annotations

from typing import Any

import pytest
from asyncrl.scenarios.costs.efficiency import TERMS, Efficiency, coefficient, from_coefficient
from asyncrl.scenarios.rules.workload import TrainTokens
from asyncrl.scenarios.spec.loading import validate_scenario
from asyncrl.scenarios.spec.scenario import Scenario
from asyncrl.simulator.costs import AnalyticCosts
from hypothesis import given, settings
from hypothesis import strategies as st

PEAK, BANDWIDTH, HOST = 989e12, 3350e9, 64e9
PARAMS, LAYERS, VOCAB = 494_032_768, 24, 151_936
WEIGHTS = PARAMS * 2


def small(**sections: Any) -> Scenario:
    """Qwen2.5-0.5B, one H100, colocated sync, 32 prompts of 8 (256 samples): what a GSM8K run might be."""
    data: dict[str, Any] = {
        "name": "small",
        "framework": "verl",  # verl's own costs: a phase's dispatch 0.3 s, resharding at 3.5 GB/s, ...
        "model": {"preset": "qwen2.5-0.5b"},
        "hardware": {"device": "h100"},
        "cluster": {"generation_devices": 1, "training_devices": 1, "colocated": True},
        "workload": {
            "prompts_per_step": 32,
            "samples_per_prompt": 8,
            "prompt_tokens": {"kind": "fixed", "value": 100, "max_tokens": 512},
            "completion_tokens": {"kind": "fixed", "value": 200, "max_tokens": 1024},
        },
        "schedule": {"kind": "sync"},
        "algorithm": {"extra_forward_passes": 1},
        "run": {"steps": 4},
    }
    for name, values in sections.items():
        data[name] = {**data.get(name, {}), **values}
    return validate_scenario(data)


TOKENS = TrainTokens(actual=256 * 300, padded=256 * 300, rows=256)  # 256 rows of 100 + 200 tokens


def test_an_eager_engine_waits_on_its_hosts_launches_where_the_device_has_little_to_do() -> None:
    # Batch 1: the device reads the weights at half the bandwidth, 0.988 GB / 1.675 TB/s = 0.590 ms, plus 24 layers'
    # gaps of 15 µs (0.36 ms); the eager host launches 24 layers at 0.75 ms, 18 ms, so it sets the step; the
    # engine's fixed step 1.5 ms and one sequence's 10 µs add either way.
    eager = AnalyticCosts(small(cluster={"enforce_eager": True}))
    graphs = AnalyticCosts(small())
    device = WEIGHTS / (BANDWIDTH * 0.5) + 24 * 1.5e-5
    assert graphs.decode_step(1, 0) == pytest.approx(device + 0.0015 + 1e-5)
    assert eager.decode_step(1, 0) == pytest.approx(24 * 7.5e-4 + 0.0015 + 1e-5)


def test_an_eager_engine_costs_nothing_more_where_the_device_takes_longer_than_the_launches() -> None:
    # Batch 256 at 10,000 tokens of context each: the KV cache (24 layers · 2 · 2 heads · 64 · 2 bytes = 12,288
    # bytes a token) and the weights, (0.988 GB + 2.56M · 12,288) / 1.675 TB/s = 19.37 ms, past the 18 ms of
    # launches: eager and CUDA graphs take the same step.
    eager = AnalyticCosts(small(cluster={"enforce_eager": True}))
    graphs = AnalyticCosts(small())
    context = 256 * 10_000
    device = (WEIGHTS + context * 12_288) / (BANDWIDTH * 0.5) + 24 * 1.5e-5
    assert device > 24 * 7.5e-4
    assert eager.decode_step(256, context) == pytest.approx(graphs.decode_step(256, context))
    assert graphs.decode_step(256, context) == pytest.approx(device + 0.0015 + 256 * 1e-5)
    table = eager.decode_step_table(256)  # the engines' loop reads the same step from its table
    assert table(256, context) == pytest.approx(eager.decode_step(256, context))
    assert table(1, 0) == pytest.approx(eager.decode_step(1, 0))


def test_every_running_sequence_costs_the_engine_its_scheduling() -> None:
    # Memory-bound at 1 and at 65 rollouts (no context): the same weights read; 64 more sequences at 10 µs.
    costs = AnalyticCosts(small())
    assert costs.decode_step(65, 0) - costs.decode_step(1, 0) == pytest.approx(64 * 1e-5)


def test_a_small_models_passes_are_bound_by_their_launches() -> None:
    # One no-grad pass over 76,800 tokens packed into micro-batches of 16,384: 5 micro-batches. Its FLOPs,
    # 2 · 494M · 76,800 / 989 TFLOP/s / 0.5 = 0.1534 s; its launches, 5 × 24 layers × 0.3 ms = 0.036 s;
    # its reads, 5 × 0.988 GB of weights + 76,800 × 151,936 logits × 16 bytes at 80% of 3.35 TB/s = 0.0754 s;
    # one phase 0.3 s. Micro-batches of 4 rows (forward_micro_batch_rows): 64 of them, 64 × 24 × 0.3 ms of
    # launches = 0.4608 s, more than the FLOPs.
    packed = AnalyticCosts(small()).learner_step(TOKENS)
    flops = 2 * PARAMS * 76_800 / (PEAK * 0.5)
    reads = (5 * WEIGHTS + 76_800 * VOCAB * 16) / (BANDWIDTH * 0.8)
    assert packed.forward_s == pytest.approx(flops + 5 * 24 * 3e-4 + reads + 0.3)
    rows = AnalyticCosts(small(learner={"forward_micro_batch_rows": 4})).learner_step(TOKENS)
    launches = 64 * 24 * 3e-4
    assert rows.forward_s - packed.forward_s == pytest.approx(
        launches - 5 * 24 * 3e-4 + 59 * WEIGHTS / (BANDWIDTH * 0.8)
    )
    assert launches > flops


def test_without_remove_padding_every_row_is_computed_at_the_caps() -> None:
    # 256 rows at 512 + 1,024 = 1,536 tokens: 393,216 tokens, not 76,800; their attention at 1,536² per row.
    padded = AnalyticCosts(small(learner={"remove_padding": False})).learner_step(TOKENS)
    as_if = AnalyticCosts(small()).learner_step(
        TrainTokens(actual=256 * 1536, padded=256 * 1536, actual_square=256 * 1536**2, rows=256)
    )
    assert padded.total_s == pytest.approx(as_if.total_s)


def test_more_training_passes_and_phase_offloads() -> None:
    # A critic's update is a second training pass: the update phase twice, all but Adam's step of the shard
    # (28 bytes per weight at 80% of the bandwidth, charged once).
    one = AnalyticCosts(small()).learner_step(TOKENS)
    two = AnalyticCosts(small(algorithm={"extra_training_passes": 1})).learner_step(TOKENS)
    adam = 28 * PARAMS / (BANDWIDTH * 0.8)
    assert two.update_s - adam == pytest.approx(2 * (one.update_s - adam))
    # phase_offload: both moves the fp32 weights (4 bytes) after each phase and back before it, and for a
    # training pass also the gradients (4 more) and Adam's moments (8): at half of the 64 GB/s host link,
    # the no-grad phase 2 × 4 × 494M / 32 GB/s = 0.1235 s, the training phase 2 × 16 × 494M / 32 GB/s.
    moved = AnalyticCosts(small(learner={"phase_offload": "both"})).learner_step(TOKENS)
    assert moved.forward_s - one.forward_s == pytest.approx(2 * 4 * PARAMS / (HOST * 0.5))
    assert moved.update_s - one.update_s == pytest.approx(2 * 16 * PARAMS / (HOST * 0.5))


def test_a_colocated_engine_reshards_wakes_sleeps_and_collates() -> None:
    # Before generating: the weights loaded into the engine at 3.5 GB/s (0.988 GB: 0.2823 s) plus the sync's
    # fixed 0.05 s (one device: nothing to gather), the engine's weights back from the host at half of
    # 64 GB/s (0.0309 s), its wake-up 0.2 s. After: the weights to the host again, 256 samples × 0.5 ms.
    costs = AnalyticCosts(small())
    assert costs.weight_sync(0) == pytest.approx(WEIGHTS / 3.5e9 + 0.05)
    assert costs.switch_to_generation() == pytest.approx(WEIGHTS / (HOST * 0.5) + 0.2)
    assert costs.switch_to_training() == pytest.approx(WEIGHTS / (HOST * 0.5) + 256 * 5e-4)


def test_a_term_enters_linearly_as_its_coefficient() -> None:
    assert coefficient(Efficiency(mfu=0.25), "mfu") == 4.0 and from_coefficient("mfu", 4.0) == 0.25
    assert coefficient(Efficiency(phase_s=0.7), "phase_s") == 0.7


@settings(max_examples=40, deadline=None)
@given(
    term=st.sampled_from([term for term in TERMS if term != "train_step_s"]),
    factor=st.floats(1.1, 3.0),
    eager=st.booleans(),
    offload=st.sampled_from(["none", "params", "both"]),
)
def test_the_learners_seconds_are_its_work_times_the_coefficients(
    term: str, factor: float, eager: bool, offload: str
) -> None:
    """What the fit relies on: a learner phase's seconds are linear in each term's coefficient, with the work
    ``AnalyticLearner.work`` reports as its slope."""
    scenario = small(cluster={"enforce_eager": eager}, learner={"phase_offload": offload})
    base = Efficiency()
    value = coefficient(base, term)
    changed = base.model_copy(update={term: from_coefficient(term, value * factor)})
    before = AnalyticCosts(scenario, base)
    after = AnalyticCosts(scenario, changed)
    work = before._learner.work(TOKENS)
    for phase, name in ((work.forward, "forward_s"), (work.update, "update_s"), (work.rest, "overhead_s")):
        slope = phase.terms.get(term, 0.0)
        difference = getattr(after.learner_step(TOKENS), name) - getattr(before.learner_step(TOKENS), name)
        assert difference == pytest.approx(slope * value * (factor - 1), rel=1e-9, abs=1e-12)
        assert phase.seconds(base) == pytest.approx(getattr(before.learner_step(TOKENS), name))
