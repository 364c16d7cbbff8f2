"""``size --search wide``: the fluid screen's parts against hand-worked values, and on a grid small enough to
simulate whole, the plan the exhaustive simulation picks is among those the search simulates (and picks)."""

from __future__ import annotations

import numpy as np
import pytest
from asyncrl.scenarios.spec.loading import load_scenario
from asyncrl.simulator.sweep import SIZING_TOLERANCE, Variant, simulate_fitting
from asyncrl.simulator.wide_search import ScreenInputs, plans, screen, wide_search

KINDS, BOUNDS = ["pipelined", "streaming"], [1, 2]


def test_the_running_context_is_length_biased_and_the_survival_falls_with_the_lengths() -> None:
    inputs = ScreenInputs(np.zeros((1, 4), dtype=np.int64), np.array([1, 1, 3, 3]), 0.0)
    assert inputs.running_context == pytest.approx((1 + 1 + 9 + 9) / (2 * 8))  # E[L²] / 2E[L] = 20 / 16
    # 4 rollouts: all 4 decode at step 0, two past length 1 (steps 1 and 2), the longest of 4 draws is 3 long
    assert inputs.survival(4).tolist() == [4.0, 2.0, 2.0]


def test_every_plan_of_the_grid_is_a_split_engine_size_schedule_and_micro_batch() -> None:
    scenario = load_scenario("quickstart")
    labels = [plan.label for chunk in plans(scenario, 8, KINDS, BOUNDS) for plan in chunk]
    splits = 7 + 3 + 1  # tp 1, 2 and 4 (tp 8 leaves no training device)
    assert len(labels) == len(set(labels)) == splits * 3 * len(KINDS) * len(BOUNDS)
    assert "streaming-2 4:4 tp2 mb32768t" in labels and "pipelined-1 7:1 tp1 mb8192t" in labels


@pytest.mark.slow
def test_the_search_simulates_and_picks_the_plan_exhaustive_simulation_picks() -> None:
    scenario = load_scenario("quickstart", ["run.steps=30"])
    found = wide_search(scenario, 8, KINDS, BOUNDS, confirm=4, progress=False, workers=1)
    every = [
        Variant(p.label, v) for chunk in plans(scenario, 8, KINDS, BOUNDS) for p in chunk if (v := p.scenario(scenario))
    ]
    exhaustive = [
        r for r in simulate_fitting(every, progress=False, until_converged=SIZING_TOLERANCE, workers=1) if r.summary
    ]
    best = max(exhaustive, key=lambda r: r.summary.throughput.samples_per_s)  # type: ignore[union-attr]
    assert found.simulated < len(exhaustive)  # it ruled some out unsimulated
    assert best.subject.label in {r.subject.label for r in found.ranked[1:]}
    chosen = found.ranked[1].summary
    assert chosen is not None and chosen.throughput.samples_per_s == best.summary.throughput.samples_per_s  # type: ignore[union-attr]
    inputs = ScreenInputs.of(scenario)
    assert all(screen(v.scenario, inputs) > 0 for v in every[:5])


def test_the_interval_line_tells_apart_plans_that_differ_by_micro_batch_alone(tmp_path, capsys) -> None:
    """Two plans on one split and engine size name alike (``plan_name``); the line names them by their labels."""
    from asyncrl.cli import main

    args = ["size", "quickstart", "--devices", "16", "--search", "wide", "--steps", "4", "--kind", "streaming"]
    assert main([*args, "--kind", "sync", "--max-staleness", "1", "--quiet", "--out", str(tmp_path / "s.csv")]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("interval:"))
    best, after = line.removeprefix("interval: ").split(" at ", 1)
    runner_up = after.split("the next, ", 1)[1].split(" (95%", 1)[0]
    assert best != runner_up and " mb" in best
