"""Sweeps' runs: the convergence rule, the summary without the event table, and early-stopped figures.

Early-stopped runs are held to full-length runs of the same scenarios: throughput within
THROUGHPUT_TOLERANCE (relative) and mean staleness within STALENESS_TOLERANCE (steps), the figures
the README states. The rule's own tolerance (``Tolerance()``: 1% and 0.02 steps) bounds how well the
steady state is known; the figures a full run reaches also carry the noise of the steps an early stop
never simulates, so the comparison allows more.
"""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from asyncrl.scenarios.costs.profile import CostProfile
from asyncrl.scenarios.record.record import RunSummary, summarize, validate_summary
from asyncrl.scenarios.spec.loading import load_scenario
from asyncrl.scenarios.spec.scenario import Scenario
from asyncrl.simulator.convergence import Tolerance, steady_span
from asyncrl.simulator.costs import MeasuredCosts
from asyncrl.simulator.simulation import Simulation, simulate
from asyncrl.simulator.summary import rollout_chunks, run_summary, simulate_summary
from asyncrl.simulator.sweep import simulate_sizing, sizing_variants
from hypothesis import HealthCheck, given, settings

from asyncrl.cli import main
from tests.test_simulator_invariants import costs, scenarios

THROUGHPUT_TOLERANCE = 0.03  # relative
STALENESS_TOLERANCE = 0.05  # steps

# ── the convergence rule, on step-time series worked by hand ────────────────────

HAND = Tolerance(warmup=2, window=2, step_time=0.01, staleness=0.02)  # ≥ 3 windows: 8 steps at least


def test_steady_series_converges_after_three_windows() -> None:
    times, stale = [5, 3] + [1.0] * 6, [0, 1] + [1.0] * 6
    assert steady_span(times[:7], stale[:7], HAND, steps=100) is None  # (7 − 2) // 2 = 2 windows
    assert steady_span(times, stale, HAND, steps=100) == 2  # windows [2, 4), [4, 6), [6, 8)
    assert steady_span([*times, 1.0], [*stale, 1.0], HAND, steps=100) == 3  # the partial window is left out
    assert HAND.min_steps == 8


def test_last_two_windows_must_agree() -> None:
    stale = [0.0, 1.0] + [1.0] * 6
    drifting = [5, 3, 1.0, 1.0, 1.0, 1.0, 1.02, 1.02]  # |1.00 − 1.02| = 0.02 > 1% of 1.02
    assert steady_span(drifting, stale, HAND, steps=100) is None
    times = [5, 3] + [1.0] * 6
    staler = [0, 1, 2.0, 2.0, 2.0, 2.0, 2.03, 2.03]  # |2.00 − 2.03| = 0.03 > 0.02 steps
    assert steady_span(times, staler, HAND, steps=100) is None


def test_noisy_windows_must_pin_the_mean_down() -> None:
    # window means 1.0, 1.1, 1.1: the last two agree, but the sample sd is 0.0577, the standard error
    # 0.0333; with 92 of 100 steps to extrapolate, 0.92 × 2 × 0.0333 = 0.0613 > 1% of the mean 1.0667
    noisy, stale = [5, 3, 1.0, 1.0, 1.1, 1.1, 1.1, 1.1], [0, 1] + [1.0] * 6
    assert steady_span(noisy, stale, HAND, steps=100) is None
    # window means 1.000, 1.005, 1.000: sd 0.002887, standard error 0.001667, 0.92 × 0.00333 = 0.00307 ≤ 0.0100
    close = [5, 3, 1.0, 1.0, 1.005, 1.005, 1.0, 1.0]
    stale_close = [0, 1, 2.0, 2.0, 2.0, 2.0, 1.99, 1.99]  # 0.01 apart; 0.92 × 2 × 0.00333 = 0.0061 ≤ 0.02
    assert steady_span(close, stale_close, HAND, steps=100) == 2


def test_fewer_steps_left_allow_more_noise() -> None:
    noisy, stale = [5, 3, 1.0, 1.0, 1.1, 1.1, 1.1, 1.1], [0, 1] + [1.0] * 6
    # 1 step left of 9: 1/9 × 2 × 0.0333 = 0.0074 ≤ 1% of 1.0667 = 0.0107
    assert steady_span(noisy, stale, HAND, steps=9) == 2


def test_a_periodic_series_converges_on_windows_of_whole_periods() -> None:
    # one long step and two short ones, over and over (a pipelined-2 run generating in waves of three):
    # windows of 2 steps have means 2, 1, 2, 2, 1, ... and the last two never agree; windows of 3 all
    # have the mean 5/3, whichever step they start at
    times, stale = [5.0, 3.0] + [3.0, 1.0, 1.0] * 6, [0.0, 1.0] + [2.0] * 18
    whole = HAND.in_periods_of(3)
    assert whole.window == 3 and whole.min_steps == 11
    for done in range(11, 21):
        assert steady_span(times[:done], stale[:done], HAND, steps=100) is None
        assert steady_span(times[:done], stale[:done], whole, steps=100) == 2 + (done - 2) % 3


def test_windows_round_up_to_whole_periods() -> None:
    assert Tolerance().in_periods_of(3).window == 12  # pipelined-2
    assert Tolerance().in_periods_of(2) == Tolerance() == Tolerance().in_periods_of(1)  # 10 holds whole periods
    assert Tolerance().in_periods_of(5).window == 10 and Tolerance().in_periods_of(7).window == 14


def test_step_period_of_each_schedule() -> None:
    def period(*overrides: str) -> int:
        return load_scenario("quickstart", list(overrides)).schedule.step_period

    assert period("schedule.kind=sync") == 1
    assert period("schedule.kind=pipelined", "schedule.off_policy_steps=2") == 3
    assert period() == 1  # streaming syncs every step
    assert period("schedule.sync_every=4") == 4


def test_a_pipelined_run_in_waves_ends_early() -> None:
    """pipelined-2 with generation to spare takes one long step and two short ones; judged on windows of
    10 steps it never converged and ran all 100 steps."""
    scenario = load_scenario(
        "quickstart",
        [
            "cluster.generation_devices=48",
            "cluster.training_devices=16",
            "cluster.devices_per_engine=4",
            "schedule.kind=pipelined",
            "schedule.off_policy_steps=2",
        ],
    )
    sim = Simulation(scenario)
    sim.run(until_converged=Tolerance())
    assert sim.steady is not None and sim.steps < scenario.run.steps
    assert (sim.steady[1] - sim.steady[0]) % 12 == 0  # whole windows of 12 steps: four periods each


def test_tolerance_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        Tolerance(window=0)
    with pytest.raises(ValueError):
        Tolerance(step_time=0)


# ── the summary without the event table ─────────────────────────────────────────

SUMMARY_CASES = [
    ("quickstart", ["run.steps=30"]),
    ("moe-streaming", ["run.steps=20"]),  # in-flight updates: rollouts cut at weight loads
    ("quickstart", ["run.steps=25", "schedule.max_staleness=4", "schedule.in_flight_updates=true"]),
    (
        "quickstart",
        ["run.steps=20", "schedule.queue_capacity=64", "cluster.generation_devices=12", "cluster.training_devices=4"],
    ),  # drops
    ("pipelined-1b", ["run.steps=12"]),
]


def assert_summarized_alike(sim: Simulation) -> None:
    """Run ``sim``; its summary straight from the simulation must be ``summarize`` on its event table."""
    sim.run()
    scenario = sim.scenario
    expected = summarize(
        sim.events(),
        backend="simulator",
        scenario_name=scenario.name,
        engines=scenario.cluster.engines,
        concurrency=scenario.engine_concurrency,
    )
    assert_same_figures(run_summary(sim), expected)


@pytest.mark.slow
@pytest.mark.parametrize(("name", "overrides"), SUMMARY_CASES)
def test_summary_from_the_simulation_is_summarize_on_its_events(name: str, overrides: list[str]) -> None:
    scenario = load_scenario(name, overrides)
    assert_summarized_alike(Simulation(scenario))


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), costs)
def test_summary_from_the_simulation_on_random_small_runs(scenario: Scenario, cost_profile: CostProfile) -> None:
    """Random small runs: drops, rollouts still running at the end, in-flight updates, all schedules."""
    assert_summarized_alike(Simulation(scenario, MeasuredCosts(scenario, cost_profile)))


@pytest.mark.parametrize(
    ("name", "overrides"),
    [
        ("quickstart", ["schedule.kind=streaming", "schedule.in_flight_updates=true", "run.steps=30"]),
        ("moe-streaming", ["run.steps=30", "schedule.queue_policy=drop_oldest"]),
    ],
)
def test_the_summary_is_the_same_whatever_the_chunks(
    name: str, overrides: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rollouts summed 16 at a time and busy spans merged one engine at a time give the figures of the
    defaults (65,536 rollouts, 16 engines): the sums only add up in another order."""
    import asyncrl.simulator.summary as summary

    sim = Simulation(load_scenario(name, overrides))
    sim.run()
    expected = run_summary(sim)
    monkeypatch.setattr(summary, "CHUNK_ROLLOUTS", 16)
    monkeypatch.setattr(summary, "ENGINES_AT_ONCE", 1)
    assert len(list(summary.rollout_chunks(sim))) > 10
    assert_same_figures(run_summary(sim), expected)


# ── early stopping ──────────────────────────────────────────────────────────────


def test_a_run_ended_early_is_the_run_that_had_that_many_steps() -> None:
    scenario = load_scenario("quickstart", ["cluster.generation_devices=14", "cluster.training_devices=2"])
    early = Simulation(scenario)
    early.run(until_converged=Tolerance())
    assert early.steady is not None and early.steps < scenario.run.steps
    run = scenario.run.model_copy(update={"steps": early.steps})
    short = Simulation(scenario.model_copy(update={"run": run}))
    short.run()
    assert [t.end for t in sorted(early.recorder.trains)] == [t.end for t in sorted(short.recorder.trains)]
    a, b = list(rollout_chunks(early)), list(rollout_chunks(short))
    assert [chunk.step.tolist() for chunk in a] == [chunk.step.tolist() for chunk in b]
    assert [chunk.end.tolist() for chunk in a] == [chunk.end.tolist() for chunk in b]


def test_full_runs_are_unchanged_without_a_tolerance() -> None:
    scenario = load_scenario("quickstart", ["run.steps=50"])
    summary = simulate_summary(scenario)
    assert "steps_simulated" not in summary and "extrapolated" not in summary
    assert simulate(scenario).summary.steps_simulated is None


def _random_scenario(rng: random.Random) -> Scenario:
    """A split of 16 or 32 devices of quickstart or moe-streaming, a random schedule, bound and seed."""
    name = rng.choice(["quickstart", "moe-streaming"])
    base = load_scenario(name, ["run.steps=100", f"run.seed={rng.randrange(1000)}"])
    kind, bound = rng.choice(["pipelined", "streaming"]), rng.choice([1, 2, 4])
    _, candidates = sizing_variants(base, rng.choice([16, 32]), [kind], [bound], splits=4)
    return rng.choice(candidates).scenario


def _accuracy_cases() -> list[Scenario]:
    shipped = [
        load_scenario("quickstart"),
        load_scenario("moe-streaming", ["run.steps=100"]),
        load_scenario("large-streaming", ["run.steps=60"]),
    ]
    rng = random.Random(7)
    return shipped + [_random_scenario(rng) for _ in range(6)]


@pytest.mark.slow
def test_early_stopped_figures_match_full_runs() -> None:
    stopped = 0
    for scenario in _accuracy_cases():
        full = simulate_summary(scenario)
        early = simulate_summary(scenario, until_converged=Tolerance())
        validate_summary(early)
        label = f"{scenario.name} {scenario.schedule.kind} {scenario.cluster.generation_devices}"
        throughput = early.throughput.samples_per_s / full.throughput.samples_per_s
        assert abs(throughput - 1) <= THROUGHPUT_TOLERANCE, label
        assert abs(early.staleness.mean - full.staleness.mean) <= STALENESS_TOLERANCE, label
        assert early.steps == full.steps == scenario.run.steps
        if early.extrapolated:
            stopped += 1
            assert early.steps_simulated < scenario.run.steps
            samples = early.samples
            parts = samples.trained + samples.queued + samples.in_flight + samples.dropped
            assert samples.generated == parts
            assert samples.trained == full.samples.trained  # every step trains one batch
    assert stopped >= 6  # the check is not vacuous: most of the nine runs ended early


@pytest.mark.slow
def test_size_ends_runs_early_unless_exact() -> None:
    scenario = load_scenario("quickstart")
    kinds, bounds = ["streaming"], [2]
    early = simulate_sizing(scenario, 16, kinds, bounds, splits=2, progress=False)
    exact = simulate_sizing(scenario, 16, kinds, bounds, splits=2, progress=False, exact=True)
    assert any(summary.extrapolated for _, summary in early if summary is not None)
    assert not any("extrapolated" in summary for _, summary in exact if summary is not None)  # None: does not fit
    assert {variant.label for variant, _ in early} == {variant.label for variant, _ in exact}


@pytest.mark.slow
def test_size_command_takes_exact_and_writes_steps_simulated(tmp_path: Path, capsys) -> None:
    out = tmp_path / "size.csv"
    args = ["size", "quickstart", "--devices", "8", "--steps", "3", "--splits", "2", "--kind", "streaming"]
    assert main([*args, "--exact", "--out", str(out), "--quiet"]) == 0
    assert "3 steps simulated per row" in capsys.readouterr().out
    table = pd.read_csv(out)
    assert set(table.loc[table["fits"], "steps_simulated"]) == {3}


# ── helpers ─────────────────────────────────────────────────────────────────────


def assert_same_figures(
    actual: RunSummary | dict[str, Any], expected: RunSummary | dict[str, Any], path: str = ""
) -> None:
    """Equal keys, equal values; floats equal up to the order they were added in."""
    actual, expected = _as_json(actual), _as_json(expected)
    assert actual.keys() == expected.keys(), path
    for key, value in expected.items():
        if isinstance(value, dict):
            assert_same_figures(actual[key], value, f"{path}{key}.")
        elif isinstance(value, float):
            assert math.isclose(actual[key], value, rel_tol=1e-9, abs_tol=1e-9), f"{path}{key}"
        else:
            assert actual[key] == value, f"{path}{key}"


def _as_json(summary: RunSummary | dict[str, Any]) -> dict[str, Any]:
    return summary.to_json() if isinstance(summary, RunSummary) else summary
