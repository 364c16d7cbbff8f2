"""The schedule rules on small explicit states, worked by hand."""

from __future__ import annotations

from typing import Any

from asyncrl.scenarios.rules import policy
from asyncrl.scenarios.rules.policy import FinishedGroup
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import small_scenario


def scenario(schedule: dict[str, Any], steps: int = 10):
    # Batches of B = 2 groups of 2 samples.
    return small_scenario(schedule={"max_concurrency": 4, **schedule}, run={"steps": steps, "seed": 0})


def admissible(sc, version: int, live: int, queued: int = 0) -> int:
    return policy.admissible_groups(sc, engine_version=version, live_groups=live, queued_groups=queued)


def test_sync_generates_batch_k_only_with_version_k() -> None:
    sync = scenario({"kind": "sync"})
    assert admissible(sync, version=0, live=0) == 2  # batch 0, both groups
    assert admissible(sync, version=0, live=1) == 1
    assert admissible(sync, version=0, live=2) == 0  # batch 1 needs version 1
    assert admissible(sync, version=1, live=2) == 2


def test_pipelined_generates_batch_k_with_exactly_version_k_minus_n() -> None:
    pipelined = scenario({"kind": "pipelined", "off_policy_steps": 1})
    assert admissible(pipelined, version=0, live=0) == 4  # batches 0 and 1 both use version 0
    assert admissible(pipelined, version=0, live=4) == 0  # batch 2 needs version 1
    assert admissible(pipelined, version=1, live=4) == 2
    assert admissible(pipelined, version=2, live=4) == 0  # exactly k - N: a newer version does not do
    assert policy.lowest_version(9, pipelined) == 3  # group 9 is in batch 4, generated with version 3


def test_streaming_admits_up_to_the_staleness_window() -> None:
    streaming = scenario({"kind": "streaming", "max_staleness": 1, "queue_capacity": 2})
    # Version 0 may start groups of batches 0 and 1 (staleness ≤ 1): live indices 0..3.
    assert admissible(streaming, version=0, live=3) == 1
    assert admissible(streaming, version=0, live=4) == 0
    assert admissible(streaming, version=2, live=4) == 4  # any version ≥ the floor will do
    assert admissible(streaming, version=2, live=4, queued=2) == 0  # a full queue blocks generation
    dropping = scenario({"kind": "streaming", "max_staleness": 1, "queue_capacity": 2, "queue_policy": "drop_oldest"})
    assert admissible(dropping, version=2, live=4, queued=2) == 4


def test_nothing_starts_beyond_what_the_run_trains() -> None:
    short = scenario({"kind": "streaming", "max_staleness": 5}, steps=2)
    assert admissible(short, version=0, live=3) == 1
    assert admissible(short, version=0, live=4) == 0


def test_sync_target_for_exact_schedules_waits_for_an_empty_engine() -> None:
    sync = scenario({"kind": "sync"})
    assert policy.sync_target(sync, engine_version=0, latest_version=1, live_groups=2, in_flight=0) == 1
    assert policy.sync_target(sync, engine_version=0, latest_version=1, live_groups=2, in_flight=3) is None
    assert policy.sync_target(sync, engine_version=1, latest_version=1, live_groups=2, in_flight=0) is None
    pipelined = scenario({"kind": "pipelined", "off_policy_steps": 2})
    # Batch 3 (live 6) needs version 1, though version 2 is out: load exactly 1.
    assert policy.sync_target(pipelined, engine_version=0, latest_version=2, live_groups=6, in_flight=0) == 1


def test_sync_target_for_streaming() -> None:
    lazy = scenario({"kind": "streaming", "max_staleness": 2})
    assert policy.sync_target(lazy, engine_version=0, latest_version=2, live_groups=5, in_flight=0) == 2
    assert policy.sync_target(lazy, engine_version=0, latest_version=2, live_groups=5, in_flight=1) is None
    eager = scenario({"kind": "streaming", "max_staleness": 2, "in_flight_updates": True})
    assert policy.sync_target(eager, engine_version=0, latest_version=2, live_groups=5, in_flight=1) == 2
    done = scenario({"kind": "streaming", "max_staleness": 2}, steps=2)
    assert policy.sync_target(done, engine_version=0, latest_version=1, live_groups=4, in_flight=0) is None


def test_overflow_drops_the_oldest_only_under_drop_oldest() -> None:
    block = scenario({"kind": "streaming", "queue_capacity": 2})
    dropping = scenario({"kind": "streaming", "queue_capacity": 2, "queue_policy": "drop_oldest"})
    assert policy.overflow(block, queued_groups=2) == 0
    assert policy.overflow(dropping, queued_groups=1) == 0
    assert policy.overflow(dropping, queued_groups=2) == 1


def test_exact_batches_wait_for_all_their_groups() -> None:
    pipelined = scenario({"kind": "pipelined", "off_policy_steps": 1})
    queue = [
        FinishedGroup(0, batch=0, version=0),
        FinishedGroup(2, batch=1, version=0),
        FinishedGroup(1, batch=0, version=0),
    ]
    assert policy.select_batch(pipelined, queue, step=0) == policy.BatchChoice(take=(0, 2), drop=())
    assert policy.select_batch(pipelined, queue, step=1) == policy.BatchChoice(take=(), drop=())


def test_streaming_drops_the_too_stale_and_takes_the_oldest_first() -> None:
    streaming = scenario({"kind": "streaming", "max_staleness": 1})
    versions = [1, 3, 2, 2]  # step 3 with bound 1: version 1 is too stale
    queue = [FinishedGroup(i, batch=0, version=v) for i, v in enumerate(versions)]
    choice = policy.select_batch(streaming, queue, step=3)
    assert choice.drop == (0,)
    assert choice.take == (2, 3)  # the two version-2 groups, before the version-3 one
    assert policy.select_batch(streaming, queue[:2], step=3) == policy.BatchChoice(take=(), drop=(0,))


def test_drain_refresh_stops_admission_once_the_engine_is_behind() -> None:
    lazy = scenario({"kind": "streaming", "max_staleness": 3, "queue_capacity": 2})
    drain = scenario({"kind": "streaming", "max_staleness": 3, "queue_capacity": 2, "refresh": "drain"})
    every_two = scenario(
        {"kind": "streaming", "max_staleness": 3, "queue_capacity": 2, "refresh": "drain", "refresh_every": 2}
    )
    # Version 0 may start live groups 0..7 (η = 3, B = 2); 2 are live, version 1 is out.
    assert policy.admissible_groups(lazy, engine_version=0, live_groups=2, queued_groups=0, latest_version=1) == 6
    assert policy.admissible_groups(drain, engine_version=0, live_groups=2, queued_groups=0, latest_version=1) == 0
    assert policy.admissible_groups(every_two, engine_version=0, live_groups=2, queued_groups=0, latest_version=1) == 6
    assert policy.admissible_groups(every_two, engine_version=0, live_groups=2, queued_groups=0, latest_version=2) == 0
    # Once empty it loads the latest version, under either rule.
    target = policy.sync_target(drain, engine_version=0, latest_version=1, live_groups=2, in_flight=0)
    assert target == 1


def test_verls_rule_admits_a_share_of_a_sync_window_ahead() -> None:
    # verl's fully async rollouter: sync every k = 2 steps, staleness_threshold t = 0.5, B = 2 groups a step:
    # an engine holding version v may start groups up to ⌊(v + k · (1 + t)) · B⌋ = 2v + 6 (max_required_samples
    # = ⌊B · (1 + t) · k⌋ = 6 prompts past the samples the trainer consumed by the last sync).
    verl = scenario({"kind": "streaming", "max_staleness": 8, "sync_every": 2, "staleness_threshold": 0.5})
    assert admissible(verl, version=0, live=5) == 1
    assert admissible(verl, version=0, live=6) == 0
    assert admissible(verl, version=2, live=6) == 4  # the next sync: up to 2 · 2 + 6 = 10
    fractional = scenario({"kind": "streaming", "max_staleness": 8, "sync_every": 2, "staleness_threshold": 0.3})
    assert admissible(fractional, version=0, live=0) == 5  # ⌊2 · 1.3 · 2⌋ = 5: a part of a batch ahead
    on_policy = scenario({"kind": "streaming", "max_staleness": 8, "sync_every": 2, "staleness_threshold": 0.0})
    assert admissible(on_policy, version=0, live=0) == 4  # t = 0: exactly the k batches trained before the sync
    # The default queue holds the whole window (verl's max_queue_size = max_required_samples): 6 groups.
    assert verl.queue_capacity == 6 and on_policy.queue_capacity == 4


def test_versions_reach_the_engines_every_sync_every_steps() -> None:
    from asyncrl.scenarios.rules.state import ScheduleState

    verl = scenario({"kind": "streaming", "max_staleness": 8, "sync_every": 2, "staleness_threshold": 0.5})
    assert [policy.reaches_engines(verl, version) for version in range(5)] == [True, False, True, False, True]
    state = ScheduleState(verl, engines=1)
    assert state.publish(1) == [1]  # not synced: no engine may load it, the backend may free it now
    assert state.latest_version == 0 and 1 not in state.kept_versions
    state.publish(2)
    assert state.latest_version == 2
    resumed = ScheduleState(verl, engines=1, first_version=3)
    assert resumed.publish(3) == []  # a resumed run's first weights always reach the engines


SCHEDULES_FOR_KEYS = [
    {"kind": "sync"},
    {"kind": "pipelined", "off_policy_steps": 2},
    {"kind": "streaming", "max_staleness": 2, "queue_capacity": 3},
    {"kind": "streaming", "max_staleness": 1, "queue_capacity": 2, "queue_policy": "drop_oldest"},
    {"kind": "streaming", "max_staleness": 3, "queue_capacity": 2, "refresh": "drain", "refresh_every": 2},
    {"kind": "streaming", "max_staleness": 2, "sync_every": 2, "staleness_threshold": 0.5},
]
STATES = st.tuples(st.integers(0, 24), st.integers(0, 5), st.integers(0, 8))  # live, queued, latest version


@given(st.sampled_from(SCHEDULES_FOR_KEYS), STATES, STATES)
@settings(max_examples=300, deadline=None)
def test_equal_admission_keys_mean_equal_limits_at_every_version(
    schedule: dict[str, Any], first: tuple[int, int, int], second: tuple[int, int, int]
) -> None:
    # What lets ScheduleState keep its admission limits between dispatches: the key names every input.
    sc = scenario(schedule)

    def key(state: tuple[int, int, int]) -> tuple[int, ...]:
        live, queued, latest = state
        return policy.admission_key(sc, live_groups=live, queued_groups=queued, latest_version=latest)

    def limits(state: tuple[int, int, int]) -> list[int]:
        live, queued, latest = state
        return [
            policy.admission_limit(
                sc, engine_version=version, live_groups=live, queued_groups=queued, latest_version=latest
            )
            for version in range(10)
        ]

    if key(first) == key(second):
        assert limits(first) == limits(second)


def test_the_admission_key_of_streaming_ignores_the_live_groups_while_admission_is_open() -> None:
    sc = scenario({"kind": "streaming", "max_staleness": 2, "queue_capacity": 3})
    open_at = [policy.admission_key(sc, live_groups=live, queued_groups=1, latest_version=4) for live in (3, 9)]
    assert open_at[0] == open_at[1]  # the window's end depends on the engine's version alone
    full = [policy.admission_key(sc, live_groups=live, queued_groups=3, latest_version=4) for live in (3, 9)]
    assert full[0] != full[1]  # a full queue closes admission at the live count itself
