"""Cost formulas against examples worked by hand with the datasheet figures (scenarios/costs/catalog.py) and
NCCL's latencies (simulator/topology.py): each term alone, its arithmetic in a comment."""

from __future__ import annotations

import numpy as np
import pytest
from asyncrl.scenarios.rules.workload import TrainTokens, forward_passes, start_of_step_minibatches
from asyncrl.scenarios.spec.loading import load_scenario
from asyncrl.simulator.costs import AnalyticCosts, MeasuredCosts, learner_layout
from asyncrl.simulator.learner_costs import Collectives
from asyncrl.simulator.simulation import Simulation
from asyncrl.simulator.topology import Placement
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import profile, small_scenario

H100_PEAK, H100_BANDWIDTH = 989e12, 3350e9
LLAMA_8B = 8_030_261_248
BASE_SIMPLE, NETWORK_HOP = 8.4e-6, 14e-6  # NCCL's ring latencies, Simple protocol (src/graph/tuning.cc)
SPLIT_4_4 = ["cluster.generation_devices=4", "cluster.training_devices=4"]
# The catalogue's terms (scenarios/costs/efficiency.py): a decode step pays 1.5 ms, 15 µs per layer (a replayed CUDA graph;
# llama-3.1-8b has 32 layers) and 10 µs per running sequence; decode reads at half of the HBM bandwidth and its
# GEMMs at half of peak; quickstart sets hardware.mfu: 0.35, the learner's utilization in its no-grad and
# training passes.
MBU, DECODE_MFU, MFU, FORWARD_MFU = 0.5, 0.5, 0.35, 0.35
STEP_S = 0.0015 + 32 * 1.5e-5  # a decode step's fixed part: 1.98 ms
SEQ_S = 1e-5
COLOCATED_16 = [
    "framework=verl",  # verl's own costs of a colocated switch (scenarios/costs/efficiency.py's FRAMEWORKS)
    "schedule.kind=sync",
    "cluster.colocated=true",
    "cluster.generation_devices=16",
    "cluster.training_devices=16",
]


def test_decode_of_an_8b_model_is_bound_by_reading_its_weights() -> None:
    costs = AnalyticCosts(load_scenario("quickstart"))
    weights_s = LLAMA_8B * 2 / (H100_BANDWIDTH * MBU)  # bf16 weights at half of 3.35 TB/s: ~9.6 ms
    assert costs.decode_step(1, 0) == pytest.approx(STEP_S + SEQ_S + weights_s)  # + the fixed 1.99 ms: ~11.6 ms
    kv_per_token = 2 * 32 * 8 * 128 * 2  # K and V, 32 layers, 8 KV heads of 128, bf16
    kv_s = 100_000 * kv_per_token / (H100_BANDWIDTH * MBU)
    assert costs.decode_step(64, 100_000) == pytest.approx(STEP_S + 64 * SEQ_S + weights_s + kv_s)
    assert costs.decode_step(0, 0) == 0.0  # an empty engine takes no step


def test_decode_turns_compute_bound_at_large_batches() -> None:
    costs = AnalyticCosts(load_scenario("quickstart", ["schedule.max_concurrency=512"]))
    # 2 · 8.03e9 · 512 = 8.22e12 FLOPs at half of 989 TFLOP/s: 16.6 ms, above the 9.59 ms of reading the weights
    # (at 256 rollouts, 8.31 ms, below them: the turn is at peak / bandwidth = 295 rollouts when both are at half)
    flops_s = 2 * LLAMA_8B * 512 / (H100_PEAK * DECODE_MFU)
    assert flops_s == pytest.approx(16.6288e-3, rel=1e-4)
    weights_s = LLAMA_8B * 2 / (H100_BANDWIDTH * MBU)
    assert costs.decode_step(512, 0) == pytest.approx(STEP_S + 512 * SEQ_S + flops_s) and flops_s > weights_s
    assert costs.decode_step(256, 0) == pytest.approx(STEP_S + 256 * SEQ_S + weights_s)


def test_training_prefill_and_sync_formulas() -> None:
    # quickstart's learner: 8 H100s of one node, 8 data-parallel ranks, micro-batches packed to 16,384 tokens.
    # A million tokens: 125,000 per rank, in 8 micro-batches. The no-grad pass: 2 · N per token at forward_mfu,
    # 2.0076e15 FLOPs / 989 TFLOP/s / 0.35 = 5.7997 s; its reads (the weights for each micro-batch, 8 × 16.06 GB,
    # and 16 bytes per logit of the 128,256-word vocabulary) at 80% of 3.35 TB/s: 0.1437 s; 8 micro-batches ×
    # 32 layers × 0.3 ms of launches: 0.0768 s; 8 all-gathers of the weights over NVLink (32.26 ms each at its
    # full bandwidth, worked below) at 70% of it: 0.3687 s. A generic scenario pays no framework's own costs
    # (phase_s, sample_overhead_s: FRAMEWORKS in scenarios/costs/efficiency.py).
    costs = AnalyticCosts(load_scenario("quickstart"))
    tokens = TrainTokens(actual=1_000_000, padded=3_000_000)  # a packed learner: the padding costs nothing
    step = costs.learner_step(tokens)
    compute = 2 * LLAMA_8B * 125_000 / (H100_PEAK * FORWARD_MFU)
    reads = (8 * LLAMA_8B * 2 + 125_000 * 128_256 * 16) / (H100_BANDWIDTH * 0.8)
    gather = 32 * (8.4e-6 + 7 * 3.4e-6) + 7 / 8 * LLAMA_8B * 2 / 450e9
    assert step.forward_s == pytest.approx(compute + reads + 8 * 32 * 3e-4 + 8 * gather / 0.7)
    assert step.forward_s == pytest.approx(6.3889, rel=1e-4)
    # The training pass recomputes its forward: 4 forwards' FLOPs at mfu, 4 passes over the weights, 32 bytes
    # per logit, 4 × 256 launches, 4 gathers' worth of collectives per micro-batch, and Adam's pass over the
    # weights' state (28 bytes per weight of a device's shard, 1/8 of them).
    training = 4 * 2 * LLAMA_8B * 125_000 / (H100_PEAK * MFU)
    training_reads = (4 * 8 * LLAMA_8B * 2 + 125_000 * 128_256 * 32 + 28 * LLAMA_8B / 8) / (H100_BANDWIDTH * 0.8)
    expected = training + training_reads + 4 * 256 * 3e-4 + 4 * 8 * gather / 0.7
    assert step.update_s == pytest.approx(expected)
    assert step.communication_s == pytest.approx(5 * 8 * gather / 0.7)  # of the two: the collectives
    assert step.overhead_s == 0.0  # the rest of a step: a framework's (verl's: 0.3 ms per trained sample)
    verl = AnalyticCosts(load_scenario("quickstart", ["framework=verl"])).learner_step(tokens)
    assert verl.forward_s - step.forward_s == pytest.approx(0.3)  # one worker-group call per phase
    assert verl.overhead_s == pytest.approx(512 * 3e-4)
    assert costs.prefill(256, samples=16) == pytest.approx(
        2 * LLAMA_8B * 256 / (H100_PEAK * MFU)
    )  # one prefill: the group shares its prompt


def test_tensor_parallel_engines_add_bandwidth_and_split_the_sync() -> None:
    one = AnalyticCosts(load_scenario("quickstart"))
    two = AnalyticCosts(load_scenario("quickstart", ["cluster.devices_per_engine=2"]))
    assert two.decode_step(1, 0) - two.tensor_parallel()(1) - STEP_S - SEQ_S == pytest.approx(
        (one.decode_step(1, 0) - STEP_S - SEQ_S) / 2
    )
    # Each device of a tp-2 engine receives half the weights; 4 engines, not 8, ride the network ring.
    assert two.weight_sync(0) - 0.05 - BASE_SIMPLE - 4 * NETWORK_HOP == pytest.approx(
        (one.weight_sync(0) - 0.05 - BASE_SIMPLE - 8 * NETWORK_HOP) / 2
    )


def test_weight_sync_over_the_network_worked_by_hand() -> None:
    # quickstart: 8 engines fill node 0 (devices 0-7), the learner node 1 (8-15): no engine shares the
    # learner's node, so the weights go over each device's 400 Gb/s adapter, broadcast down one ring of
    # 8 receivers: 8.4 µs + 8 hops × 14 µs + 16.06 GB / 50 GB/s = 0.3213 s, + 0.05 s fixed = 0.3713 s.
    costs = AnalyticCosts(load_scenario("quickstart"))
    expected = 8.4e-6 + 8 * 14e-6 + LLAMA_8B * 2 / 50e9 + 0.05
    assert [costs.weight_sync(engine) for engine in range(8)] == pytest.approx([expected] * 8)
    assert expected == pytest.approx(0.3713, abs=1e-4)


def test_weight_sync_over_nvlink_worked_by_hand() -> None:
    # 4 + 4 devices: engines on devices 0-3, the learner on 4-7, all on node 0: NVLink at 450 GB/s one way,
    # 4 receivers: 8.4 µs + 4 hops × 3.4 µs + 16.06 GB / 450 GB/s = 0.03571 s, + 0.05 s = 0.08571 s.
    costs = AnalyticCosts(load_scenario("quickstart", SPLIT_4_4))
    expected = 8.4e-6 + 4 * 3.4e-6 + LLAMA_8B * 2 / 450e9 + 0.05
    assert [costs.weight_sync(engine) for engine in range(4)] == pytest.approx([expected] * 4)
    assert expected == pytest.approx(0.08571, abs=1e-5)


def test_engines_sharing_the_learners_node_sync_over_nvlink_the_rest_over_the_network() -> None:
    # 12 + 4: engines 0-7 fill node 0, engines 8-11 and the learner (devices 12-15) share node 1.
    costs = AnalyticCosts(load_scenario("quickstart", ["cluster.generation_devices=12", "cluster.training_devices=4"]))
    far = 8.4e-6 + 8 * 14e-6 + LLAMA_8B * 2 / 50e9 + 0.05  # 8 receivers on the network ring
    near = 8.4e-6 + 4 * 3.4e-6 + LLAMA_8B * 2 / 450e9 + 0.05  # 4 on the NVLink ring
    assert [costs.weight_sync(engine) for engine in range(12)] == pytest.approx([far] * 8 + [near] * 4)


def test_tensor_parallel_all_reduce_worked_by_hand() -> None:
    # A tp-2 engine of llama-3.1-8b all-reduces b · 4096 hidden · 2 bytes twice per layer, 32 layers, over
    # NVLink with NCCL's LL latencies: 6.6 µs + 2 steps × 0.6 µs = 7.8 µs, + 2·1/2 · bytes / 450 GB/s.
    # At b = 64: bytes = 524,288, so each all-reduce is 7.8 µs + 1.1651 µs = 8.9651 µs; × 64 = 0.57377 ms.
    costs = AnalyticCosts(load_scenario("quickstart", ["cluster.devices_per_engine=2"]))
    per_all_reduce = 6.6e-6 + 2 * 0.6e-6 + 64 * 4096 * 2 / 450e9
    assert costs.tensor_parallel()(64) == pytest.approx(64 * per_all_reduce)
    assert costs.tensor_parallel()(64) == pytest.approx(0.57377e-3, rel=1e-4)
    roofline = LLAMA_8B * 2 / (2 * H100_BANDWIDTH * MBU)  # two devices' bandwidth, memory-bound at b = 64
    assert costs.decode_step(64, 0) == pytest.approx(STEP_S + 64 * SEQ_S + roofline + 64 * per_all_reduce)
    assert costs.decode_step_table(64)(64, 0) == pytest.approx(costs.decode_step(64, 0))
    assert AnalyticCosts(load_scenario("quickstart")).tensor_parallel()(64) == 0.0  # one device: nothing to reduce


def test_learner_collectives_are_charged_per_micro_batch_at_the_links_efficiency() -> None:
    # quickstart's learner: FSDP over the 8 devices of node 1. One all-gather of the weights, layer by layer:
    # 32 × (8.4 µs + 7 hops × 3.4 µs) = 1.0304 ms of latency, and 7/8 · 16.06 GB / 450 GB/s = 31.228 ms.
    scenario = load_scenario("quickstart")
    collectives = Collectives.of(scenario, learner_layout(scenario, Placement.of(scenario.cluster)))
    assert collectives.gather_s == pytest.approx(0.0322592, abs=1e-7)
    # 1,000 tokens: one micro-batch per rank; one gather for the no-grad pass, four for the training pass
    # (forward, backward, and the reduce-scatter of fp32 gradients, twice the bytes), at 70% of the link.
    step = AnalyticCosts(scenario).learner_step(TrainTokens(actual=1000, padded=1000))
    assert step.communication_s == pytest.approx(5 * collectives.gather_s / 0.7)
    # Megatron keeps its share of the weights: its collectives are per update, three gathers' worth.
    megatron = AnalyticCosts(load_scenario("quickstart", ["learner.backend=megatron"]))
    assert megatron.learner_step(TrainTokens(actual=1000, padded=1000)).communication_s == pytest.approx(
        3 * collectives.gather_s / 0.7
    )


@pytest.mark.parametrize(("correction", "passes"), [("tis", 1.75), ("decoupled", 1.75), ("reinforce_is", 1.0)])
def test_corrections_weighing_by_pi_old_charge_its_forward_pass(correction: str, passes: float) -> None:
    # tis and decoupled read π_old: a no-grad forward over the 3 of 4 minibatches after the first (48/64 = 0.75);
    # reinforce_is weighs by π/μ, which the training pass gives.
    scenario = load_scenario("quickstart", ["algorithm.updates_per_step=4", f"algorithm.correction={correction}"])
    assert forward_passes(scenario) == passes


def test_the_decoupled_correction_charges_a_forward_pass_over_all_minibatches_but_the_first() -> None:
    # quickstart: 64 prompts a step. Four updates: minibatches of 16 groups; π_prox is a no-grad forward over
    # the three after the first, 48/64 = 0.75 of a pass per sample, and three more all-gathers.
    four = ["algorithm.updates_per_step=4"]
    clip = load_scenario("quickstart", four)
    decoupled = load_scenario("quickstart", [*four, "algorithm.correction=decoupled"])
    assert start_of_step_minibatches(decoupled) == [(16, 32), (32, 48), (48, 64)]
    assert (forward_passes(clip), forward_passes(decoupled)) == (1.0, 1.75)
    tokens = TrainTokens(actual=1_000_000, padded=1_000_000)
    ratio = AnalyticCosts(decoupled).learner_step(tokens).forward_s / AnalyticCosts(clip).learner_step(tokens).forward_s
    assert ratio == pytest.approx(1.75)  # every part of a no-grad pass, 1.75 times over
    # One update per step: the first minibatch is the whole batch, nothing extra.
    assert forward_passes(load_scenario("quickstart", ["algorithm.correction=decoupled"])) == 1.0
    assert forward_passes(load_scenario("quickstart", ["algorithm.loss=ppo", *four])) == 1.75  # PPO's old values


def test_learner_across_two_nodes_all_reduces_gradient_shards_over_the_network() -> None:
    # 8 + 16: the learner holds nodes 1 and 2, 8 devices each. Its state (14 B per weight, 112 GB) / 8 fits an
    # H100, so each node shards it (HSDP) and the two replicas all-reduce their 2.0076 GB gradient shards per
    # update, layer by layer, over the network: 32 × (8.4 µs + 2 hops × 14 µs) + 2·1/2 · 2.0076 GB / 50 GB/s.
    scenario = load_scenario("quickstart", ["cluster.training_devices=16"])
    collectives = Collectives.of(scenario, learner_layout(scenario, Placement.of(scenario.cluster)))
    across = 32 * (8.4e-6 + 2 * 14e-6) + LLAMA_8B * 2 / 8 / 50e9
    assert collectives.replica_s == pytest.approx(across) and across == pytest.approx(0.041316, abs=1e-6)
    step = AnalyticCosts(scenario).learner_step(TrainTokens(actual=1000, padded=1000))
    assert step.communication_s == pytest.approx(5 * collectives.gather_s / 0.7 + across)  # within, then across


def test_colocated_switch_offloads_the_learner_state_when_it_does_not_fit() -> None:
    # 16 colocated H100s, engines of one device: the learner shards its state over each node's 8 devices,
    # 8.03e9 weights × (4 master + 8 Adam + 2 gradient) bytes / 8 = 14.05 GB per device. The engine holds
    # its 16.06 GB of weights and, for 229 rollouts of 1,861.5 tokens at 128 KiB each, 55.87 GB of KV cache:
    # 86.0 GB > 80 GB, so the state goes to host memory after each step and comes back before the next,
    # over PCIe Gen5 at 64 GB/s one way: 14.05 GB / 64 GB/s = 0.21957 s each way. Without free_cache_engine
    # the engine keeps its weights, and what remains is verl's fixed costs: 0.5 ms per sample collated after
    # generating (512 samples: 0.256 s), 0.2 s to wake the engine before it.
    costs = AnalyticCosts(load_scenario("quickstart", [*COLOCATED_16, "cluster.free_cache_engine=false"]))
    state = LLAMA_8B * 14 / 8
    assert costs.switch_to_training() == pytest.approx(state / 64e9 + 512 * 5e-4)
    assert costs.switch_to_generation() == pytest.approx(0.21957 + 0.2, abs=1e-5)
    # Its weight sync never leaves the node: each device gathers the 7/8 of the weights it lacks over NVLink,
    # 8.4 µs + 7 hops × 3.4 µs + 7/8 · 16.06 GB / 450 GB/s = 31.26 ms, the engine loads the 16.06 GB at
    # 3.5 GB/s (4.588 s), + 0.05 s.
    assert costs.weight_sync(0) == pytest.approx(
        8.4e-6 + 7 * 3.4e-6 + 7 / 8 * LLAMA_8B * 2 / 450e9 + LLAMA_8B * 2 / 3.5e9 + 0.05
    )


def test_a_sleeping_engine_moves_its_weights_to_the_host_and_back() -> None:
    # free_cache_engine (verl's default): after generating, each device's 16.06 GB of engine weights go to the
    # host, before generating they come back, each way at half of PCIe's 64 GB/s: 0.50189 s.
    sleeping = AnalyticCosts(load_scenario("quickstart", [*COLOCATED_16, "schedule.max_concurrency=16"]))
    awake = AnalyticCosts(
        load_scenario("quickstart", [*COLOCATED_16, "schedule.max_concurrency=16", "cluster.free_cache_engine=false"])
    )
    one_way = LLAMA_8B * 2 / (64e9 * 0.5)
    assert sleeping.switch_to_training() - awake.switch_to_training() == pytest.approx(one_way)
    assert sleeping.switch_to_generation() - awake.switch_to_generation() == pytest.approx(one_way)
    assert one_way == pytest.approx(0.50189, abs=1e-5)


def test_colocated_switch_moves_nothing_when_everything_fits() -> None:
    # With 16 rollouts in flight the KV cache is 16 × 1,861.5 × 128 KiB = 3.90 GB: 14.05 + 16.06 + 3.90 GB fit,
    # so only the fixed costs remain; split pools switch nothing.
    setting = [*COLOCATED_16, "schedule.max_concurrency=16", "cluster.free_cache_engine=false"]
    costs = AnalyticCosts(load_scenario("quickstart", setting))
    assert (costs.switch_to_training(), costs.switch_to_generation()) == pytest.approx((512 * 5e-4, 0.2))
    split = AnalyticCosts(load_scenario("quickstart"))
    assert (split.switch_to_training(), split.switch_to_generation()) == (0.0, 0.0)


def test_placement_fills_nodes_with_engines_then_the_learner() -> None:
    cluster = load_scenario("quickstart", ["cluster.generation_devices=12", "cluster.devices_per_engine=4"]).cluster
    placement = Placement.of(cluster)  # engines on devices 0-3, 4-7, 8-11; the learner on 12-19
    assert placement.engine_nodes == (0, 0, 1)
    assert placement.training_per_node == {1: 4, 2: 4}
    assert [placement.shares_learner_node(engine) for engine in range(3)] == [False, False, True]
    colocated = Placement.of(load_scenario("quickstart", COLOCATED_16).cluster)
    assert colocated.training_per_node == {0: 8, 1: 8}


def test_moe_reads_only_the_experts_a_small_batch_uses() -> None:
    costs = AnalyticCosts(load_scenario("moe-streaming"))
    active, total, bandwidth = 3_338_511_360, 30_532_122_624, 2 * 4800e9 * MBU  # two H200s per engine
    all_reduces, fixed = costs.tensor_parallel(), 0.0015 + 48 * 1.5e-5  # its 48 layers
    assert costs.decode_step(1, 0) - all_reduces(1) - fixed - SEQ_S == pytest.approx(active * 2 / bandwidth)
    assert costs.decode_step(16, 0) - all_reduces(16) - fixed - 16 * SEQ_S == pytest.approx(total * 2 / bandwidth)


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
    assert TrainTokens.of(groups, parts=1) == TrainTokens(135, 6 * 50, squares, 6 * 50**2, rows=6)
    # Two minibatches of whole groups: [g0] and [g1, g2] -> 2 rows at 30, 4 rows at 50.
    assert TrainTokens.of(groups, parts=2) == TrainTokens(135, 2 * 30 + 4 * 50, squares, 2 * 30**2 + 4 * 50**2, rows=6)


@settings(max_examples=60, deadline=None)
@given(
    shape=st.tuples(st.integers(1, 40), st.integers(1, 8)),
    parts=st.integers(1, 5),
    ranks=st.integers(1, 9),
    seed=st.integers(0, 2**16),
)
def test_equal_groups_as_an_array_count_what_the_lists_count(
    shape: tuple[int, int], parts: int, ranks: int, seed: int
) -> None:
    rows = np.random.default_rng(seed).integers(1, 30, shape).astype(np.int64)  # small lengths: many ties
    assert TrainTokens.of_array(rows, parts, ranks, 0.01) == TrainTokens.of(rows.tolist(), parts, ranks, 0.01)


def test_decode_tables_agree_with_the_formulas() -> None:
    for costs in (
        AnalyticCosts(load_scenario("moe-streaming")),
        MeasuredCosts(small_scenario(), profile(decode_context_token_s=1e-6)),
    ):
        table = costs.decode_step_table(64)
        for batch, context in [(1, 0.0), (7, 5_000.0), (64, 1e6)]:
            assert table(batch, context) == pytest.approx(costs.decode_step(batch, context))


def test_measured_prefill_per_sample_with_a_join_cost_and_a_retire_pause() -> None:
    from asyncrl.scenarios.costs.profile import CostProfile
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


def test_rows_are_dealt_to_data_parallel_ranks_heaviest_first_in_snake_order() -> None:
    from asyncrl.scenarios.rules.workload import rank_imbalance, rank_loads

    # Works 9, 7, 5, 3, 2, 1 over 2 ranks, heaviest first in snake order 0, 1, 1, 0, 0, 1:
    # rank 0 gets 9, 3, 2 (14), rank 1 gets 7, 5, 1 (13); each rank then lays its rows out light, heavy, light.
    work = np.array([9.0, 7.0, 5.0, 3.0, 2.0, 1.0])
    rank, position = rank_loads(work, 2)
    assert rank.tolist() == [0, 1, 1, 0, 0, 1]
    assert position.tolist() == [1, 1, 2, 2, 0, 0]  # rank 0: 2, 9, 3; rank 1: 1, 7, 5
    # One minibatch: the busiest rank (14) against an even 13.5. Three: each rank's rows one by one,
    # busiest per minibatch 2 | 9 | 5 = 16 against 13.5.
    assert rank_imbalance([9, 7, 5, 3, 2, 1], parts=1, ranks=2, square_weight=0.0) == pytest.approx(
        (14 / 13.5, 14 / 13.5)
    )
    assert rank_imbalance([9, 7, 5, 3, 2, 1], parts=3, ranks=2, square_weight=0.0)[0] == pytest.approx(16 / 13.5)
    # Attention's share makes a long row heavier still: with weight 0.1 a row of 9 weighs 9 + 8.1.
    assert rank_imbalance([9, 1], parts=1, ranks=2, square_weight=0.1)[0] == pytest.approx(17.1 / ((17.1 + 1.1) / 2))


def test_the_learner_pays_attention_on_long_rows_and_its_busiest_rank() -> None:
    # quickstart's 8B: a = 2 · 32 layers · 32 heads · 128 = 262,144 FLOPs per squared row length in a forward.
    # One no-grad pass and the training pass with recompute (1 + 4 forwards of attention) over Σ L² = 10^9,
    # the busiest of 8 ranks holding an eighth: (1 + 4) · a · 10^9 / 8 / (peak · 0.35) = 0.4733 s on top.
    costs = AnalyticCosts(load_scenario("quickstart"))
    plain = costs.learner_step(TrainTokens(actual=1_000_000, padded=1_000_000))
    squared = costs.learner_step(TrainTokens(actual=1_000_000, padded=1_000_000, actual_square=10**9))
    attention = 5 * 2 * 32 * 32 * 128 * 1e9 / (8 * H100_PEAK * MFU)
    assert squared.total_s - plain.total_s == pytest.approx(attention)
    assert attention == pytest.approx(0.47331, rel=1e-4)
    # A minibatch waits for its busiest rank: an imbalance of 1.25 makes the training pass's FLOPs, reads and
    # micro-batches (ceil(1.25 · 125,000 / 16,384) = 10 instead of 8) those of 1.25 times the tokens.
    slow = costs.learner_step(TrainTokens(actual=1_000_000, padded=1_000_000, update_imbalance=1.25))
    heavier = costs.learner_step(TrainTokens(actual=1_250_000, padded=1_250_000))
    assert slow.update_s == pytest.approx(heavier.update_s)
    assert slow.forward_s == pytest.approx(plain.forward_s)
    # Without activation checkpointing the training pass is 3 forwards, not 4: its FLOPs 6 · N per token, not 8.
    light = AnalyticCosts(load_scenario("quickstart", ["learner.activation_checkpointing=false"]))
    saved = plain.update_s - light.learner_step(TrainTokens(1_000_000, 1_000_000)).update_s
    one_forward = 2 * LLAMA_8B * 125_000 / (H100_PEAK * MFU) + (8 * LLAMA_8B * 2) / (H100_BANDWIDTH * 0.8)
    assert saved == pytest.approx(one_forward + 8 * 32 * 3e-4)


def test_the_simulator_deals_the_batch_to_data_parallel_ranks() -> None:
    # 16 training devices: one rank (all 16 share each sequence) trains evenly; 16 ranks wait on the busiest.
    def update_s(model_parallel: int) -> list[float]:
        scenario = load_scenario(
            "quickstart", ["cluster.training_devices=16", f"learner.model_parallel={model_parallel}", "run.steps=2"]
        )
        sim = Simulation(scenario)
        sim.run()
        return [step.update_s for step in sim.learner_steps]

    one_rank, sixteen_ranks = update_s(16), update_s(1)
    assert all(busy > even for busy, even in zip(sixteen_ranks, one_rank, strict=True))
