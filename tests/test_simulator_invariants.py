"""Invariants that hold for every valid scenario, checked on random small ones (hypothesis)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from asyncrl.scenarios.spec.loading import validate_scenario
from asyncrl.simulator.simulation import simulate
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import profile, run


def _shared_cores(cores: int | None) -> dict[str, int]:
    """``hardware.host_cores`` when drawn (engines and learner then share that many cores), else nothing."""
    return {} if cores is None else {"host_cores": cores}


@st.composite
def scenarios(draw: st.DrawFn) -> Any:
    group = draw(st.integers(1, 3))
    kind = draw(st.sampled_from(["sync", "pipelined", "streaming"]))
    schedule: dict[str, Any] = {"kind": kind, "max_concurrency": group * draw(st.integers(1, 3))}
    if kind == "pipelined":
        schedule["off_policy_steps"] = draw(st.integers(1, 3))
    if kind == "streaming":
        batch = draw(st.integers(1, 3))
        schedule |= {
            "max_staleness": draw(st.integers(0, 3)),
            "in_flight_updates": draw(st.booleans()),
            "queue_policy": draw(st.sampled_from(["block", "drop_oldest"])),
            "queue_capacity": batch * draw(st.integers(1, 3)),
        }
        if schedule["in_flight_updates"]:
            schedule["kv_on_update"] = draw(st.sampled_from(["keep", "recompute"]))
    else:
        batch = draw(st.integers(1, 3))
    completion = draw(
        st.one_of(
            st.builds(lambda v: {"kind": "fixed", "value": v}, st.integers(1, 40)),
            st.builds(
                lambda m, s: {"kind": "lognormal", "median": m, "sigma": s, "max_tokens": 120},
                st.integers(2, 30),
                st.floats(0.1, 1.5),
            ),
        )
    )
    return validate_scenario(
        {
            "name": "random",
            "model": {"preset": "tiny"},
            "hardware": {"device": "cpu"} | _shared_cores(draw(st.one_of(st.none(), st.integers(1, 3)))),
            "cluster": {"generation_devices": draw(st.integers(1, 3)), "training_devices": draw(st.integers(1, 2))},
            "workload": {
                "prompts_per_step": batch,
                "samples_per_prompt": group,
                "prompt_tokens": {"kind": "fixed", "value": draw(st.integers(1, 20))},
                "completion_tokens": completion,
            },
            "schedule": schedule,
            "run": {"steps": draw(st.integers(1, 6)), "seed": draw(st.integers(0, 1000))},
        }
    )


costs = st.builds(
    lambda d1, d8, p, t, s, c, e, w, slicing: profile(
        decode_step_s={1: d1, 8: d1 + d8},
        prefill_token_s=p,
        train_token_s=t,
        weight_sync_s=s,
        train_contention=c,
        engine_contention=e,
        wake_s=w,
        train_start_s=w,
        time_slicing=slicing,
    ),
    st.floats(0.001, 0.02),
    st.floats(0.0, 0.02),
    st.floats(0.0, 0.002),
    st.floats(0.0001, 0.01),
    st.floats(0.0, 0.3),
    st.sampled_from([0.0, 0.0, 0.25]),  # the learner's contention with engines, mostly none
    st.sampled_from([0.0, 0.0, 1.0]),  # the engines' contention with the learner, mostly none
    st.sampled_from([0.0, 0.0, 0.003]),  # messages' delays (wake_s, train_start_s), mostly none
    st.sampled_from([0.0, 0.0, 0.4]),  # engines' time slicing on oversubscribed cores, mostly none
)

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.slow
@SETTINGS
@given(scenarios(), costs)
def test_trained_samples_finished_before_their_step_and_respect_the_bound(scenario, cost_profile) -> None:
    events = run(scenario, cost_profile).events
    train_start = events[events["kind"] == "train"].set_index("step")["start"]
    trained = events[(events["kind"] == "generate") & (events["step"] >= 0)]
    assert (trained["end"].to_numpy() <= train_start.loc[trained["step"]].to_numpy() + 1e-9).all()
    oldest = trained.groupby(["group", "sample"]).agg(step=("step", "first"), version=("version", "min"))
    staleness = oldest["step"] - oldest["version"]
    bound = scenario.staleness_bound
    if scenario.schedule.kind == "streaming":
        assert staleness.max() <= bound
    else:  # sync and pipelined: batch k generated with exactly version max(0, k - N)
        assert (staleness == oldest["step"].clip(upper=bound)).all()


@pytest.mark.slow
@SETTINGS
@given(scenarios(), costs)
def test_samples_are_conserved_and_utilizations_are_fractions(scenario, cost_profile) -> None:
    summary = run(scenario, cost_profile).summary
    samples = summary.samples
    assert samples.generated == samples.trained + samples.queued + samples.in_flight + samples.dropped
    assert samples.trained == scenario.run.steps * scenario.batch_samples
    assert min(samples.model_dump().values()) >= 0
    for role in ("generation", "training", "generation_slots"):
        assert 0.0 <= getattr(summary.utilization, role) <= 1.0 + 1e-9
    assert summary.steps == scenario.run.steps


@pytest.mark.slow
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), costs)
def test_same_seed_same_summary_byte_for_byte(scenario, cost_profile) -> None:
    first = json.dumps(run(scenario, cost_profile).summary.to_json())
    second = json.dumps(run(scenario, cost_profile).summary.to_json())
    assert first == second


@pytest.mark.slow
def test_drain_refresh_reaches_a_busy_engine_that_lazy_refresh_never_does() -> None:
    # One engine that is never empty (a loose bound and a queue that never blocks): with lazy
    # refresh it generates everything with version 0; drain makes it stop, finish and load.
    def run(refresh: str) -> dict:
        scenario = validate_scenario(
            {
                "name": "busy",
                "model": {"preset": "tiny"},
                "hardware": {"device": "cpu"},
                "cluster": {"generation_devices": 1, "training_devices": 1},
                "workload": {
                    "prompts_per_step": 2,
                    "samples_per_prompt": 2,
                    "completion_tokens": {"kind": "lognormal", "median": 40, "sigma": 0.5, "max_tokens": 200},
                },
                "schedule": {
                    "kind": "streaming",
                    "max_staleness": 1000,
                    "max_concurrency": 16,
                    "queue_capacity": 10000,
                    "refresh": refresh,
                },
                "run": {"steps": 40, "seed": 0},
            }
        )
        return simulate(scenario)

    lazy, drain = run("lazy"), run("drain")
    assert set(lazy.events.query("kind == 'generate'")["version"]) == {0}
    assert len(lazy.events.query("kind == 'sync'")) == 0
    assert len(drain.events.query("kind == 'sync'")) > 1
    assert drain.events.query("kind == 'generate'")["version"].nunique() > 5  # it keeps refreshing
    # What is left is the queue's backlog (generation outruns this learner), not weights never refreshed.
    assert drain.summary.staleness.mean < lazy.summary.staleness.mean
