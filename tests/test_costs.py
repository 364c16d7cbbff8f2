"""Cost formulas against examples worked with the datasheet figures."""

from __future__ import annotations

import pytest
from asyncrl.scenarios.loading import load_scenario
from asyncrl.scenarios.workload import TrainTokens
from asyncrl.simulator.costs import AnalyticCosts, MeasuredCosts

from tests.conftest import profile, small_scenario

H100_PEAK, H100_BANDWIDTH, H100_NETWORK = 989e12, 3350e9, 50e9
LLAMA_8B = 8_030_261_248


def test_decode_of_an_8b_model_is_bound_by_reading_its_weights() -> None:
    costs = AnalyticCosts(load_scenario("quickstart"))
    weights_s = LLAMA_8B * 2 / (H100_BANDWIDTH * 0.8)  # bf16 weights at 80% of 3.35 TB/s: ~6.0 ms
    assert costs.decode_step(1, 0) == pytest.approx(weights_s)
    kv_per_token = 2 * 32 * 8 * 128 * 2  # K and V, 32 layers, 8 KV heads of 128, bf16
    assert costs.decode_step(64, 100_000) == pytest.approx(weights_s + 100_000 * kv_per_token / (H100_BANDWIDTH * 0.8))


def test_decode_turns_compute_bound_at_large_batches() -> None:
    costs = AnalyticCosts(load_scenario("quickstart", ["schedule.max_concurrency=256"]))
    flops = 2 * LLAMA_8B * 256
    assert costs.decode_step(256, 0) == pytest.approx(max(flops / H100_PEAK, LLAMA_8B * 2 / (H100_BANDWIDTH * 0.8)))


def test_training_prefill_and_sync_formulas() -> None:
    costs = AnalyticCosts(load_scenario("quickstart"))
    # (6 + 2 · 1 extra forward pass) · N · tokens / (8 devices · peak · 0.35 MFU)
    tokens = TrainTokens(actual=1_000_000, padded=3_000_000)  # a packed learner: the padding costs nothing
    assert costs.train_step(tokens) == pytest.approx(8 * LLAMA_8B * 1e6 / (8 * H100_PEAK * 0.35))
    assert costs.prefill(256, samples=16) == pytest.approx(
        2 * LLAMA_8B * 256 / (H100_PEAK * 0.35)
    )  # one prefill: the group shares its prompt
    assert costs.weight_sync() == pytest.approx(LLAMA_8B * 2 / H100_NETWORK + 0.05)


def test_tensor_parallel_engines_add_bandwidth_and_split_the_sync() -> None:
    one = AnalyticCosts(load_scenario("quickstart"))
    two = AnalyticCosts(load_scenario("quickstart", ["cluster.devices_per_engine=2"]))
    assert two.decode_step(1, 0) == pytest.approx(one.decode_step(1, 0) / 2)
    assert two.weight_sync() - 0.05 == pytest.approx((one.weight_sync() - 0.05) / 2)


def test_moe_reads_only_the_experts_a_small_batch_uses() -> None:
    costs = AnalyticCosts(load_scenario("moe-streaming"))
    active, total, bandwidth = 3_338_511_360, 30_532_122_624, 2 * 4800e9 * 0.8  # two H200s per engine
    assert costs.decode_step(1, 0) == pytest.approx(active * 2 / bandwidth)
    assert costs.decode_step(16, 0) == pytest.approx(total * 2 / bandwidth)


def test_measured_profile_interpolates_between_batch_sizes_and_stays_flat_beyond() -> None:
    table = profile(decode_step_s={1: 0.010, 16: 0.012, 64: 0.018})
    assert table.decode_step(1) == 0.010
    assert table.decode_step(8) == pytest.approx(0.010 + 0.002 * 7 / 15)
    assert table.decode_step(40) == pytest.approx(0.012 + 0.006 * 24 / 48)
    assert table.decode_step(100) == 0.018
    costs = MeasuredCosts(small_scenario(schedule={"kind": "sync", "max_concurrency": 100}), table)
    assert costs.decode_step(40, 0) == pytest.approx(table.decode_step(40))
    assert costs.train_step(TrainTokens(1000, 3000)) == pytest.approx(1000 * 0.002 / 2)  # two training devices
    padded = MeasuredCosts(
        small_scenario(), profile(train_padding="longest", train_step_overhead_s=0.1, train_token_square_s=1e-6)
    )
    tokens = TrainTokens(actual=1000, padded=3000, actual_square=50_000, padded_square=90_000)
    assert padded.train_step(tokens) == pytest.approx((3000 * 0.002 + 90_000 * 1e-6) / 2 + 0.1)


def test_padded_tokens_count_each_minibatch_at_its_longest_row() -> None:
    groups = [[10, 30], [20, 20], [5, 50]]  # prompt + completion length of each row, per group
    squares = 10**2 + 30**2 + 20**2 + 20**2 + 5**2 + 50**2  # 4,325
    assert TrainTokens.of(groups, parts=1) == TrainTokens(135, 6 * 50, squares, 6 * 50**2)
    # Two minibatches of whole groups: [g0] and [g1, g2] -> 2 rows at 30, 4 rows at 50.
    assert TrainTokens.of(groups, parts=2) == TrainTokens(135, 2 * 30 + 4 * 50, squares, 2 * 30**2 + 4 * 50**2)


def test_decode_tables_agree_with_the_formulas() -> None:
    for costs in (
        AnalyticCosts(load_scenario("moe-streaming")),
        MeasuredCosts(small_scenario(), profile(decode_context_token_s=1e-6)),
    ):
        table = costs.decode_step_table(64)
        for batch, context in [(1, 0.0), (7, 5_000.0), (64, 1e6)]:
            assert table(batch, context) == pytest.approx(costs.decode_step(batch, context))


def test_measured_prefill_per_sample_with_a_join_cost_and_a_retire_pause() -> None:
    from asyncrl.scenarios.profile import CostProfile
    from asyncrl.simulator.costs import MeasuredCosts

    from tests.conftest import small_scenario

    profile = CostProfile(
        decode_step_s={1: 0.01},
        prefill_token_s=0.001,
        train_token_s=0.001,
        weight_sync_s=0.0,
        prefill_per="sample",
        join_s=0.002,
        retire_s=0.0005,
    )
    costs = MeasuredCosts(small_scenario(), profile)
    # 4 samples, each prefilled on its own: 4 × (2 ms + 10 tokens × 1 ms) = 48 ms.
    assert costs.prefill(10, samples=4) == pytest.approx(0.048)
    assert costs.retire() == 0.0005
    shared = MeasuredCosts(small_scenario(), profile.model_copy(update={"prefill_per": "group"}))
    assert shared.prefill(10, samples=4) == pytest.approx(0.012)  # once for the group


def test_a_retire_pause_follows_each_finish_in_the_simulator() -> None:
    from tests.conftest import profile, run, small_scenario

    # One slot, two groups of one 100-token sample, flat 10 ms steps, 10 ms prefill: the first ends at
    # 0.01 + 1.0; its retirement (5 ms) and the second's prefill pause the engine, so the second ends at
    # 1.01 + 0.005 + 0.01 + 1.0 = 2.025, when the learner starts.
    scenario = small_scenario(
        workload={"prompts_per_step": 2, "samples_per_prompt": 1},
        schedule={"kind": "sync", "max_concurrency": 1},
        run={"steps": 1, "seed": 0},
    )
    result = run(scenario, profile(retire_s=0.005, weight_sync_s=0.0))
    train = result.events.query("kind == 'train'")
    assert float(train["start"].iloc[0]) == pytest.approx(2.025, abs=1e-9)
