"""Simulated runs small enough to work out by hand, checked to the microsecond.

Common setup (tests/conftest.py): one engine holding 4 rollouts, batches of
2 groups × 2 samples, prompts of 10 tokens, completions of exactly 100 tokens,
2 training devices, and a flat measured profile:

    generation of one batch = prefill 2 groups × 10 tokens × 1 ms + 100 steps × 10 ms = 1.02 s
    training of one batch   = 4 samples × 110 tokens × train_token_s / 2 devices
    weight sync             = 0.5 s on the engine, before it generates with new weights
"""

from __future__ import annotations

import pytest

from tests.conftest import one_group_of_two_pareto_rollouts, profile, run, small_scenario

GENERATION_S = 2 * 10 * 0.001 + 100 * 0.01  # 1.02
TOKENS_PER_BATCH = 4 * 110


def _train_rows(result):
    events = result.events
    return [tuple(span) for span in events[events["kind"] == "train"].sort_values("step")[["start", "end"]].to_numpy()]


def _flat(spans):
    return [time for span in spans for time in span]


def test_sync_wall_time_is_steps_times_generation_plus_training_plus_syncs() -> None:
    result = run(small_scenario(), profile(train_token_s=0.002))
    train_s = TOKENS_PER_BATCH * 0.002 / 2  # 0.44
    # Batch 0 uses the initial weights; batches 1 and 2 wait for a 0.5 s sync each.
    expected_wall = 3 * (GENERATION_S + train_s) + 2 * 0.5  # 5.38
    assert result.summary.wall_time_s == pytest.approx(expected_wall, abs=1e-9)
    assert _flat(_train_rows(result)) == pytest.approx(
        _flat([(1.02, 1.46), (1.46 + 0.5 + 1.02, 2.98 + 0.44), (3.42 + 0.5 + 1.02, 4.94 + 0.44)]), abs=1e-9
    )
    assert result.summary.staleness.histogram == {"0": 12}
    assert result.summary.weight_sync_s == pytest.approx(1.0)
    # The engine is busy generating (3 × 1.02 s) or loading weights (2 × 0.5 s).
    assert result.summary.utilization.generation == pytest.approx((3 * 1.02 + 1.0) / 5.38)
    assert result.summary.utilization.training == pytest.approx(3 * 0.44 / 5.38)


def test_pipelined_one_step_off_policy_overlaps_training_with_generation() -> None:
    scenario = small_scenario(schedule={"kind": "pipelined", "off_policy_steps": 1, "max_concurrency": 4})
    result = run(scenario, profile(train_token_s=0.001))
    train_s = TOKENS_PER_BATCH * 0.001 / 2  # 0.22, shorter than generation
    # Batches 0 and 1 both use version 0 (no sync); batch 2 needs version 1, published at 1.24,
    # so the engine loads it (0.5 s) as soon as batch 1 is done at 2.04.
    assert _flat(_train_rows(result)) == pytest.approx(
        _flat([(1.02, 1.02 + train_s), (2.04, 2.04 + train_s), (2.04 + 0.5 + 1.02, 3.56 + train_s)]), abs=1e-9
    )
    assert result.summary.wall_time_s == pytest.approx(3 * GENERATION_S + 0.5 + train_s, abs=1e-9)
    assert result.summary.staleness.histogram == {"0": 4, "1": 8}


def test_pipelined_long_run_without_sync_cost_matches_the_textbook_formula() -> None:
    steps = 20
    scenario = small_scenario(
        schedule={"kind": "pipelined", "off_policy_steps": 1, "max_concurrency": 4}, run={"steps": steps, "seed": 0}
    )
    result = run(scenario, profile(train_token_s=0.001, weight_sync_s=0.0))
    # wall = steps · generation + training; the first batch is on-policy, every later one one step stale.
    assert result.summary.wall_time_s == pytest.approx(steps * GENERATION_S + 0.22, abs=1e-9)
    assert result.summary.staleness.histogram == {"0": 4, "1": 4 * (steps - 1)}


def test_training_slower_than_generation_makes_generation_wait_for_versions() -> None:
    scenario = small_scenario(schedule={"kind": "pipelined", "off_policy_steps": 1, "max_concurrency": 4})
    result = run(scenario, profile(train_token_s=0.01, weight_sync_s=0.0))
    train_s = TOKENS_PER_BATCH * 0.01 / 2  # 2.2 s, longer than generation
    # Steps run back to back once the first batch is in: wall = generation + steps · training.
    assert result.summary.wall_time_s == pytest.approx(GENERATION_S + 3 * train_s, abs=1e-9)
    assert result.summary.utilization.training == pytest.approx(3 * train_s / (GENERATION_S + 3 * train_s))


def test_sync_batch_waits_for_its_slowest_sample() -> None:
    result = run(one_group_of_two_pareto_rollouts(), profile(train_token_s=0.0001, weight_sync_s=0.0))
    rollouts = result.events.query("kind == 'generate'")
    longest = int(rollouts["tokens"].max())
    assert longest > int(rollouts["tokens"].min())  # the seed gives two different lengths
    # Prefill 10 ms, then one 10 ms decode step per token of the longest sample.
    assert _train_rows(result)[0][0] == pytest.approx(0.01 + longest * 0.01, abs=1e-9)


def _two_rollouts(max_concurrency: int):
    scenario = small_scenario(
        workload={"prompts_per_step": 2, "samples_per_prompt": 1},
        schedule={"kind": "sync", "max_concurrency": max_concurrency},
        run={"steps": 1, "seed": 0},
    )
    costs = profile(decode_step_s={1: 0.01, 2: 0.05}, train_token_s=0.0001, weight_sync_s=0.0)
    return sorted(run(scenario, costs).events.query("kind == 'generate'")["end"])


def test_decode_time_follows_the_batch_size() -> None:
    # One slot: the two 100-token rollouts run one after the other at the batch-1 step time.
    assert _two_rollouts(1) == pytest.approx([0.01 + 1.0, 2 * (0.01 + 1.0)], abs=1e-9)
    # Two slots: both prefill (2 × 10 ms), then decode together at the batch-2 step time.
    assert _two_rollouts(2) == pytest.approx([0.02 + 100 * 0.05] * 2, abs=1e-9)


def test_decode_step_time_between_finishes_uses_the_shrinking_batch() -> None:
    costs = profile(decode_step_s={1: 0.01, 2: 0.05}, train_token_s=0.0001, weight_sync_s=0.0)
    rollouts = run(one_group_of_two_pareto_rollouts(), costs).events.query("kind == 'generate'").sort_values("tokens")
    short, long = rollouts["tokens"].tolist()
    # Both decode at the batch-2 time until the short one ends, then the long one alone at batch 1.
    first_end = 0.01 + short * 0.05
    assert rollouts["end"].tolist() == pytest.approx([first_end, first_end + (long - short) * 0.01], abs=1e-9)


def _two_engines(schedule: dict, prompts: int = 4):
    """Two one-device engines, batches of ``prompts`` groups × 2 samples of 100 tokens."""
    return small_scenario(
        cluster={"generation_devices": 2, "training_devices": 2},
        workload={"prompts_per_step": prompts, "samples_per_prompt": 2},
        schedule=schedule,
    )


def test_sync_on_two_engines_splits_each_batch_evenly() -> None:
    # 4 groups per step, room for all of them on either engine: each engine takes 2 (prefill 2 × 10 ms,
    # then 100 steps × 10 ms), so a step is one generation round, exactly as worked out by hand.
    result = run(_two_engines({"kind": "sync", "max_concurrency": 8}), profile(weight_sync_s=0.0))
    generation_s = 2 * 10 * 0.001 + 100 * 0.01  # 1.02, on both engines at once
    train_s = 8 * 110 * 0.002 / 2  # 0.88
    assert result.summary.wall_time_s == pytest.approx(3 * (generation_s + train_s), abs=1e-9)
    rollouts = result.events.query("kind == 'generate'")
    assert rollouts.groupby("worker")["group"].nunique().to_dict() == {"engine-0": 6, "engine-1": 6}


@pytest.mark.slow
def test_pipelined_on_two_engines_worked_out_by_hand() -> None:
    # N = 1, room for 2 groups per engine. Batches 0 and 1 both use version 0: batch 0 (2 + 2 groups)
    # ends at 1.02, batch 1 at 2.04. Version 1 is out at 1.02 + 0.88 = 1.90, so at 2.04 the engines
    # load it (no cost) and generate batch 2 by 3.06, which trains until 3.94.
    result = run(
        _two_engines({"kind": "pipelined", "off_policy_steps": 1, "max_concurrency": 4}), profile(weight_sync_s=0.0)
    )
    assert _flat(_train_rows(result)) == pytest.approx(_flat([(1.02, 1.90), (2.04, 2.92), (3.06, 3.94)]), abs=1e-9)
    assert result.summary.staleness.histogram == {"0": 8, "1": 16}


def test_engines_finishing_at_the_same_instant_share_the_next_batch() -> None:
    """Both engines end each batch at the same moment; the decision comes after both reports.

    2 engines × 8 slots, batches of 4 groups × 2 samples, prompts of 16 tokens, completions of 100 tokens
    at a flat 10 ms a decode step (no prefill, no sync cost): a batch takes 1.0 s however it is split.
    Training: 8 × (16 + 100) tokens × 1 ms / 2 devices = 0.464 s. Pipelined, N = 1: batch k ≥ 1 needs
    exactly version k − 1, published when step k − 2 ends (T(k − 2)). Write g(k) for batch k's end.

        t = 0      batches 0 and 1 (version 0) start, 2 + 2 groups per engine: g(0) = g(1) = 1.0
        step 0     1.0 → 1.464 = T(0);  step 1: 1.464 → 1.928 = T(1)
        t = 1.464  version 1 is out, both engines empty: batch 2 splits 2 + 2, g(2) = 2.464
        t = 2.464  both engines report batch 2 at once; version 2 is out (1.928): both load it and
                   batch 3 splits 2 + 2, g(3) = 3.464. Step 2: 2.464 → 2.928 = T(2)
        k ≥ 3      batch k starts at max(g(k − 1), T(k − 2)) = g(k − 1), as T(k − 2) = g(k − 2) + 0.464:
                   g(k) = k + 0.464, and step k trains g(k) → g(k) + 0.464

    So the run ends when step 19 does: 19.464 + 0.464 = 19.928 s. Deciding after the first report
    alone hands that engine all of batch 3 while the other, still on version 1, waits for version 3:
    the engines then alternate and the run would end at 16.176 s, a different answer from the
    coordinator's (which drains both reports before it dispatches).
    """
    scenario = small_scenario(
        cluster={"generation_devices": 2, "training_devices": 2},
        workload={"prompts_per_step": 4, "samples_per_prompt": 2, "prompt_tokens": {"kind": "fixed", "value": 16}},
        schedule={"kind": "pipelined", "off_policy_steps": 1, "max_concurrency": 8},
        run={"steps": 20, "seed": 0},
    )
    result = run(scenario, profile(prefill_token_s=0.0, weight_sync_s=0.0, train_token_s=0.001))
    train_s = 8 * 116 * 0.001 / 2  # 0.464
    ends = [1.0, 1.0] + [k + train_s for k in range(2, 20)]
    expected = [(1.0, 1.0 + train_s), (1.0 + train_s, 1.0 + 2 * train_s)]
    expected += [(ends[k], ends[k] + train_s) for k in range(2, 20)]
    assert _flat(_train_rows(result)) == pytest.approx(_flat(expected), abs=1e-9)
    assert result.summary.wall_time_s == pytest.approx(19.928, abs=1e-9)
    rollouts = result.events.query("kind == 'generate'")
    per_engine = rollouts.groupby("worker")["group"].nunique().to_dict()
    assert per_engine == {"engine-0": 40, "engine-1": 40}  # every batch split 2 + 2


def test_recomputing_the_kv_cache_at_each_in_flight_load_pauses_decoding_for_a_prefill_of_the_context() -> None:
    # One group of 2 samples a batch, 4 slots, staleness 2: batches 0 and 1 generate at t = 0 and finish at 1.02;
    # batch 2 starts then (prefill to 1.03) and has 21 tokens at 1.24, when the learner publishes version 1
    # (training 2 × 110 × 0.002 / 2 = 0.22 s a step); version 2 follows at 1.46, while the first load still pauses
    # the engine. Keeping the cache: loads 1.24-1.74 and 1.74-2.24, the last 79 tokens to 3.03, training to 3.25.
    # Recomputing it: after each load a prefill of the 2 rollouts' contexts, 2 × (10 prompt + 21) = 62 tokens at
    # 1 ms = 0.062 s (no token decoded between the loads, so the second is the same): loads 1.24-1.74 and
    # 1.802-2.302, decoding again at 2.364, done at 3.154, training to 3.374.
    def scenario(kv_on_update: str):
        return small_scenario(
            workload={"prompts_per_step": 1, "samples_per_prompt": 2},
            schedule={
                "kind": "streaming",
                "max_concurrency": 4,
                "max_staleness": 2,
                "in_flight_updates": True,
                "queue_capacity": 2,
                "kv_on_update": kv_on_update,
            },
            run={"steps": 3, "seed": 0},
        )

    for kv_on_update, loads, train_2 in (
        ("keep", [(1.24, 1.74), (1.74, 2.24)], (3.03, 3.25)),
        ("recompute", [(1.24, 1.74), (1.802, 2.302)], (3.154, 3.374)),
    ):
        result = run(scenario(kv_on_update), profile(train_token_s=0.002))
        events = result.events
        syncs = events[events["kind"] == "sync"].sort_values("start")[["start", "end"]].to_numpy()
        assert _flat(map(tuple, syncs)) == pytest.approx(_flat(loads), abs=1e-9), kv_on_update
        assert _train_rows(result)[2] == pytest.approx(train_2, abs=1e-9), kv_on_update
