"""Where device time goes: the summary's breakdown, worked by hand and checked as an invariant.

Hand-worked runs use the flat measured profile of tests/conftest.py (decode step 10 ms, prefill 1 ms per
prompt token, learner 2 ms per token on one device, weight sync 0.5 s) with the terms the measured path
leaves out (phase switches, tensor-parallel all-reduces) added by a subclass, so each shows alone.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest
from asyncrl.scenarios.costs.profile import CostProfile
from asyncrl.scenarios.record.record import EVENT_COLUMNS, DevicePools, summarize
from asyncrl.scenarios.spec.loading import load_scenario
from asyncrl.scenarios.spec.scenario import Scenario
from asyncrl.simulator.costs import AllReduceCost, AnalyticCosts, DecodeTable, MeasuredCosts
from asyncrl.simulator.simulation import simulate
from hypothesis import given

from tests.conftest import one_group_of_two_pareto_rollouts, profile, small_scenario
from tests.test_simulator_invariants import SETTINGS, costs, scenarios


class WithSwitches(MeasuredCosts):
    """The measured costs plus fixed phase switches."""

    def __init__(self, scenario: Scenario, cost_profile: CostProfile, to_training: float, to_generation: float) -> None:
        super().__init__(scenario, cost_profile)
        self._to_training, self._to_generation = to_training, to_generation

    def switch_to_training(self) -> float:
        return self._to_training

    def switch_to_generation(self) -> float:
        return self._to_generation


class WithAllReduces(MeasuredCosts):
    """The measured costs plus a tensor-parallel all-reduce of per_step + per_rollout · b in every decode step."""

    def __init__(self, scenario: Scenario, cost_profile: CostProfile, cost: AllReduceCost) -> None:
        super().__init__(scenario, cost_profile)
        self._cost = cost

    def decode_step(self, batch: int, context_tokens: float) -> float:
        return super().decode_step(batch, context_tokens) + self._cost(batch)

    def decode_step_table(self, max_batch: int) -> DecodeTable:
        table = super().decode_step_table(max_batch)
        first = [seconds + self._cost(batch) for batch, seconds in enumerate(table.first)]
        return DecodeTable(first, table.first_per_context, table.second, table.second_per_context, table.floor)

    def tensor_parallel(self) -> AllReduceCost:
        return self._cost


def total(breakdown: dict[str, Any]) -> float:
    return sum(breakdown.generation.model_dump().values()) + sum(breakdown.training.model_dump().values())


def test_colocated_sync_with_phase_switches_worked_by_hand() -> None:
    # One colocated device. A step: generate 2 groups (prefill 2 × 10 ms, 100 decode steps × 10 ms = 1.02 s),
    # switch to training (0.3 s), train 4 × 110 tokens × 2 ms = 0.88 s; then load the new weights (0.5 s) and
    # switch back to generation (0.2 s). Three steps: 3 × (1.02 + 0.3 + 0.88) + 2 × (0.5 + 0.2) = 8.0 s.
    scenario = small_scenario(cluster={"generation_devices": 1, "training_devices": 1, "colocated": True})
    result = simulate(scenario, costs=WithSwitches(scenario, profile(), to_training=0.3, to_generation=0.2))
    assert result.summary.wall_time_s == pytest.approx(8.0, abs=1e-9)
    switches = result.events[result.events["kind"] == "switch"].sort_values("start")
    assert list(switches["worker"]) == ["learner", "engine-0", "learner", "engine-0", "learner"]
    assert switches[["start", "end"]].to_numpy().ravel().tolist() == pytest.approx(
        [1.02, 1.32, 2.70, 2.90, 3.92, 4.22, 5.60, 5.80, 6.82, 7.12], abs=1e-9
    )
    # 8.0 device-seconds: decode 3 × 1.0, prefill 3 × 0.02, sync 2 × 0.5, switches 2 × 0.2 (to generation)
    # and 3 × 0.3 (to training), learner 3 × 0.88; nothing idle.
    breakdown = result.summary.breakdown
    assert breakdown.generation.model_dump() == pytest.approx(
        {"decode": 3.0, "prefill": 0.06, "weight_sync": 1.0, "phase_switch": 0.4, "tensor_parallel": 0.0, "idle": 0.0}
    )
    assert breakdown.training.model_dump() == pytest.approx(
        {"compute": 2.64, "communication": 0.0, "phase_switch": 0.9, "idle": 0.0}
    )
    assert breakdown.devices.model_dump() == {"generation": 1, "training": 1, "total": 1}
    assert result.summary.device_hours.per_step == pytest.approx(8.0 / 3 / 3600)
    assert result.summary.device_hours.per_1k_samples == pytest.approx(8.0 / 3600 / 12 * 1000)


def test_tensor_parallel_shares_follow_the_batch_worked_by_hand() -> None:
    # One group of two Pareto rollouts, short S and long L tokens, on one engine: S decode steps at batch 2,
    # then L − S at batch 1. An all-reduce of 1 ms + 0.5 ms per rollout per step: the short rollout's share is
    # S · (1 ms / 2 + 0.5 ms), the long one's that plus (L − S) · (1 + 0.5) ms; together the engine's total.
    scenario = one_group_of_two_pareto_rollouts()
    cost = AllReduceCost(per_step=0.001, per_rollout=0.0005)
    result = simulate(scenario, costs=WithAllReduces(scenario, profile(weight_sync_s=0.0), cost))
    rollouts = result.events[result.events["kind"] == "generate"].sort_values("tokens")
    short, long = rollouts["tokens"].tolist()
    assert short < long
    expected = [short * (0.0005 + 0.0005), short * 0.001 + (long - short) * 0.0015]
    assert rollouts["comm_s"].tolist() == pytest.approx(expected)
    # Decoding: S steps of 10 + 2 ms, L − S of 10 + 1.5 ms; all-reduces are what exceeds 10 ms a step.
    breakdown = result.summary.breakdown.generation
    assert breakdown.tensor_parallel == pytest.approx(sum(expected))
    assert breakdown.decode == pytest.approx(long * 0.01)
    assert breakdown.prefill == pytest.approx(0.01)


def test_executor_records_give_decode_with_prefill_and_no_communication() -> None:
    # What an executor writes: rollouts (prefill inside), a sync, a learner step; no prefill, switch or
    # comm_s to tell apart. Wall time 5 s, 1 + 1 devices: the engine is busy over [0, 3] (two overlapping
    # rollouts) and the sync starts at 5.0, when the run ends; the learner trains over [3.5, 5].
    rows = [
        ("engine-0", "generation", "generate", 0.0, 2.0, 0, 0, 0, 0, 100, 0.0),
        ("engine-0", "generation", "generate", 1.0, 3.0, 0, 0, 0, 1, 200, 0.0),
        ("engine-0", "generation", "sync", 5.0, 5.5, -1, 1, -1, -1, 0, 0.0),
        ("learner", "training", "train", 3.5, 5.0, 0, 0, -1, -1, 300, 0.0),
    ]
    events = pd.DataFrame(rows, columns=list(EVENT_COLUMNS)).astype(EVENT_COLUMNS)
    pools = DevicePools(generation=1, devices_per_engine=1, training=1, colocated=False)
    summary = summarize(events, backend="executor", scenario_name="hand", engines=1, concurrency=2, devices=pools)
    assert summary.breakdown.generation.model_dump() == pytest.approx(
        {"decode": 3.0, "prefill": 0.0, "weight_sync": 0.0, "phase_switch": 0.0, "tensor_parallel": 0.0, "idle": 2.0}
    )
    assert summary.breakdown.training.model_dump() == pytest.approx(
        {"compute": 1.5, "communication": 0.0, "phase_switch": 0.0, "idle": 3.5}
    )
    # 2 devices × 5 s = 10 device-seconds, one step, both rollouts trained.
    hours = 10 / 3600
    assert summary.device_hours.model_dump() == pytest.approx(
        {"total": hours, "per_step": hours, "per_1k_samples": hours * 500}
    )


SHIPPED = [
    ("quickstart", ["run.steps=8"]),
    ("quickstart", ["run.steps=4", "cluster.devices_per_engine=4"]),
    ("quickstart", ["run.steps=3", "schedule.kind=sync", "cluster.colocated=true", "cluster.generation_devices=16",
                    "cluster.training_devices=16"]),
    ("quickstart", ["run.steps=3", "schedule.kind=sync", "cluster.colocated=true", "cluster.generation_devices=16",
                    "cluster.training_devices=16", "cluster.devices_per_engine=8"]),
    ("moe-streaming", ["run.steps=3"]),
    ("pipelined-1b", ["run.steps=5"]),
]  # fmt: skip


@pytest.mark.parametrize(("name", "overrides"), SHIPPED)
def test_breakdown_adds_up_to_wall_time_times_devices(name: str, overrides: list[str]) -> None:
    scenario = load_scenario(name, overrides)
    summary = simulate(scenario).summary
    breakdown = summary.breakdown
    assert breakdown.devices.total == scenario.cluster.total_devices
    assert total(breakdown) == pytest.approx(summary.wall_time_s * scenario.cluster.total_devices, rel=1e-9)
    for role in ("generation", "training"):
        assert min(getattr(breakdown, role).model_dump().values()) >= 0.0
    if scenario.cluster.devices_per_engine > 1:
        assert breakdown.generation.tensor_parallel > 0
    switches = breakdown.generation.phase_switch, breakdown.training.phase_switch
    if AnalyticCosts(scenario).switch_to_training() > 0:  # colocated tp 1: the learner state must leave
        assert min(switches) > 0
    else:  # split pools, or colocated tp 8, whose 256 rollouts leave room for the learner state
        assert switches == (0.0, 0.0)


@pytest.mark.slow
@SETTINGS
@given(scenarios(), costs)
def test_breakdown_adds_up_on_random_runs_and_all_reduces_match_the_decode_steps(scenario, cost_profile) -> None:
    # A flat decode step d plus an all-reduce A + B·b: decoding takes steps · d outside the all-reduces, so
    # the all-reduces must come to (decode / d) · A + B · tokens decoded, split rows (in-flight updates) included.
    # Tensor-parallel engines are GPUs': without shared host cores or engine contention (which stretch a decode
    # step's wall time).
    scenario = scenario.model_copy(update={"hardware": scenario.hardware.model_copy(update={"host_cores": None})})
    if getattr(scenario.schedule, "kv_on_update", "keep") == "recompute":
        # A load's recompute pauses decoding for a prefill that the breakdown counts as decode time
        # (a known simplification), which has no all-reduce of its own: keep the KV so decode / d counts steps.
        keep = scenario.schedule.model_copy(update={"kv_on_update": "keep"})
        scenario = scenario.model_copy(update={"schedule": keep})
    d = cost_profile.decode_step_s[1]
    # no wake (a wake counts as busy) and no engine contention:
    flat = cost_profile.model_copy(update={"decode_step_s": {1: d}, "wake_s": 0.0, "engine_contention": 0.0})
    cost = AllReduceCost(per_step=0.002, per_rollout=0.0003)
    result = simulate(scenario, costs=WithAllReduces(scenario, flat, cost))
    summary, events = result.summary, result.events
    assert total(summary.breakdown) == pytest.approx(summary.wall_time_s * scenario.cluster.total_devices)
    generation = summary.breakdown.generation
    rollouts = events[events["kind"].isin(["generate", "unfinished"])]
    unfinished = int((events["kind"] == "unfinished").sum())  # their last partial token is not counted
    expected = generation.decode / d * cost.per_step + cost.per_rollout * rollouts["tokens"].sum()
    assert generation.tensor_parallel == pytest.approx(expected, abs=unfinished * 0.0023 + 1e-9)


def test_a_rollout_cut_by_in_flight_loads_keeps_its_token_count() -> None:
    # Found by the test above: a 2-token rollout cut at two loads 0.75 of a step apart was recorded as
    # three pieces of one token each (each piece's length rounded on its own); whole tokens are now
    # counted by each load's mark, so the pieces add up to the completion.
    scenario = small_scenario(
        cluster={"generation_devices": 2, "training_devices": 2},
        workload={
            "prompts_per_step": 1,
            "samples_per_prompt": 1,
            "prompt_tokens": {"kind": "fixed", "value": 2},
            "completion_tokens": {"kind": "fixed", "value": 2},
        },
        schedule={
            "kind": "streaming",
            "max_concurrency": 1,
            "max_staleness": 2,
            "in_flight_updates": True,
            "queue_capacity": 2,
        },
        run={"steps": 3, "seed": 0},
    )
    flat = profile(decode_step_s={1: 0.015625}, prefill_token_s=0.0, train_token_s=0.005859375, weight_sync_s=0.0)
    events = simulate(scenario, costs=WithAllReduces(scenario, flat, AllReduceCost(0.002, 0.0003))).events
    rollouts = events[events["kind"] == "generate"]
    assert rollouts.groupby(["group", "sample"])["tokens"].sum().tolist() == [2, 2, 2]
    assert (rollouts.groupby(["group", "sample"]).size() > 1).any()  # one of them was cut
