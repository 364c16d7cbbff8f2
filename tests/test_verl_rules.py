"""verl's fully async settings change a prediction for the reasons they change a verl run.

verl's README (verl/experimental/fully_async_policy): with ``staleness_threshold = 0`` the rollouter
produces exactly one sync window of samples and waits for the sync ("stream off policy pipeline"), so
the trainer waits for each window's first batch and the rollouter for the last update; a threshold above
0 lets it produce that share of a window ahead, which removes the waits (at the price of staler samples);
``partial_rollout`` moves unfinished rollouts to the new weights instead of draining them at each sync;
a larger ``trigger_parameter_sync_step`` syncs less often: more samples per window, fewer bubbles,
staler samples. The scenarios here are generation-bound, where these waits show.
"""

from __future__ import annotations

from typing import Any

import pytest
from asyncrl.scenarios.record.record import RunSummary
from asyncrl.scenarios.spec.loading import validate_scenario
from asyncrl.scenarios.spec.scenario import Scenario
from asyncrl.simulator.simulation import simulate


def fully_async(prompts: int = 16, every: int = 4, threshold: float = 0.5, partial: bool = True) -> Scenario:
    """A 1.5B policy on 2 + 2 H100s, 512 prompts' worth of steps, completions with a long tail."""
    schedule: dict[str, Any] = {
        "kind": "streaming",
        "max_staleness": 12,
        "sync_every": every,
        "staleness_threshold": threshold,
        "max_concurrency": 64,
    }
    schedule |= {"in_flight_updates": True} if partial else {"refresh": "drain", "refresh_every": every}
    return validate_scenario(
        {
            "name": "verl-rules",
            "model": {"preset": "qwen2.5-1.5b"},
            "hardware": {"device": "h100"},
            "cluster": {"generation_devices": 2, "training_devices": 2},
            "workload": {
                "prompts_per_step": prompts,
                "samples_per_prompt": 8,
                "prompt_tokens": {"kind": "fixed", "value": 200},
                "completion_tokens": {"kind": "lognormal", "median": 800, "sigma": 1.0, "max_tokens": 8192},
            },
            "schedule": schedule,
            "algorithm": {"updates_per_step": 1, "extra_forward_passes": 0},
            "run": {"steps": 768 // prompts, "seed": 1},
        }
    )


def run(scenario: Scenario) -> RunSummary:
    return simulate(scenario).summary


@pytest.mark.slow
def test_a_staleness_threshold_removes_the_waits_at_each_sync_and_makes_samples_staler() -> None:
    zero, tenth, half = (run(fully_async(threshold=t)) for t in (0.0, 0.1, 0.5))
    assert zero.wall_time_s > tenth.wall_time_s > half.wall_time_s
    assert zero.staleness.mean < tenth.staleness.mean < half.staleness.mean
    # At 0 the engines idle once a window is produced: generation is less busy than with a threshold.
    assert zero.utilization.generation < half.utilization.generation
    # At 0 nothing is generated past the window: staleness stays under k (local steps within one sync window),
    # stragglers aside.
    assert zero.staleness.max <= 4


@pytest.mark.slow
def test_syncing_less_often_means_fewer_bubbles_and_staler_samples() -> None:
    every = {k: run(fully_async(every=k)) for k in (1, 2, 4, 8)}
    times = [every[k].wall_time_s for k in (1, 2, 4, 8)]
    staleness = [every[k].staleness.mean for k in (1, 2, 4, 8)]
    assert times == sorted(times, reverse=True)
    assert staleness == sorted(staleness)


@pytest.mark.slow
def test_partial_rollout_spares_the_drain_at_each_sync() -> None:
    partial, drained = run(fully_async(partial=True)), run(fully_async(partial=False))
    assert partial.wall_time_s < drained.wall_time_s
    # Without a threshold nothing runs past the window when the sync comes: the two are the same schedule.
    assert (
        run(fully_async(threshold=0.0, partial=True)).wall_time_s
        == run(fully_async(threshold=0.0, partial=False)).wall_time_s
    )


@pytest.mark.slow
def test_the_sync_window_in_samples_is_what_counts() -> None:
    # Smaller local updates (require_batches × ppo_mini_batch_size) with the same window of samples between syncs
    # (trigger_parameter_sync_step × the local update): about the same run; the sync window, not the update
    # size, sets the waits.
    small, large = run(fully_async(prompts=8, every=8)), run(fully_async(prompts=32, every=2))
    assert small.wall_time_s == pytest.approx(large.wall_time_s, rel=0.1)
