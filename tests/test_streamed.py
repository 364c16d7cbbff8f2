"""The record written in pieces (``simulator.recording.streamed``) against the record built whole: the same rows, and the
summary ``summarize`` computes from them; and the rollouts packed away during a run (``simulator.rollouts``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from asyncrl.scenarios.record.record import EVENT_COLUMNS, read_events, read_summary
from asyncrl.scenarios.record.summarize import histogram_percentiles
from asyncrl.scenarios.spec.loading import load_scenario
from asyncrl.simulator import rollouts as rollouts_module
from asyncrl.simulator.recording import streamed
from asyncrl.simulator.simulation import Simulation, simulate
from hypothesis import given
from hypothesis import strategies as st

CASES = {
    "streaming": ["run.steps=12"],
    "in-flight updates with drops": [
        "run.steps=12",
        "schedule.kind=streaming",
        "schedule.max_staleness=1",
        "schedule.in_flight_updates=true",
        "schedule.queue_capacity=64",
        "schedule.max_concurrency=64",
    ],
    "failures": ["run.steps=12", "run.failures.every_s=200", "run.failures.restart_s=60"],
    "colocated sync": ["run.steps=6", "cluster.colocated=true", "schedule.kind=sync"],
    "tensor parallel": ["run.steps=8", "cluster.devices_per_engine=2"],
}


def _close(whole: object, pieces: object, path: str = "summary") -> None:
    if isinstance(whole, dict):
        assert isinstance(pieces, dict) and set(whole) == set(pieces), path
        for key in whole:
            _close(whole[key], pieces[key], f"{path}.{key}")
    elif isinstance(whole, float):
        assert pieces == pytest.approx(whole, rel=1e-9, abs=1e-9), path
    else:
        assert pieces == whole, path


@pytest.mark.parametrize("overrides", CASES.values(), ids=list(CASES))
def test_the_record_written_in_pieces_is_the_record_built_whole(
    overrides: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(streamed, "CHUNK_ROLLOUTS", 100)  # many row groups, some groups cut across none
    monkeypatch.setattr(rollouts_module, "PACK_AT_LEAST", 1)  # pack after every step
    scenario = load_scenario("quickstart", overrides)
    whole = simulate(scenario)
    sim = Simulation(scenario)
    sim.run()
    summary = streamed.write_streamed(sim, tmp_path)
    assert sim.rollouts.base == len(sim.rollouts)  # every group packed
    columns = list(EVENT_COLUMNS)
    written = read_events(tmp_path).sort_values(columns).reset_index(drop=True)
    pd.testing.assert_frame_equal(written, whole.events.sort_values(columns).reset_index(drop=True))
    assert whole.summary is not None
    _close(whole.summary.to_json(), summary.to_json())
    assert read_summary(tmp_path) == summary


def test_a_long_run_packs_its_settled_groups_as_it_goes(monkeypatch: pytest.MonkeyPatch) -> None:
    """After each step the groups it settled leave the live lists: what stays live is the window of groups
    not yet trained, not the run."""
    monkeypatch.setattr(rollouts_module, "PACK_AT_LEAST", 1)
    scenario = load_scenario("quickstart", ["run.steps=30"])
    sim = Simulation(scenario)
    live: list[int] = []
    sim.run(on_step=lambda step, now: live.append(len(sim.rollouts.step)))
    batch = scenario.workload.prompts_per_step
    # Live: the batches admitted ahead of the learner (bound + 1), the queue and the stragglers; not the run's.
    assert max(live) < 8 * batch
    assert max(live[15:]) <= max(live[:15]) + batch  # it does not grow with the run
    assert len(sim.rollouts) == sim.rollouts.columns().groups >= 30 * batch


@given(st.dictionaries(st.integers(0, 40), st.integers(1, 5000), min_size=1))
def test_percentiles_of_a_histogram_are_numpys_of_its_values_to_the_bit(histogram: dict[int, int]) -> None:
    """The summary's staleness percentiles, from its histogram: the values are never written out one by one."""
    histogram = dict(sorted(histogram.items()))
    values = np.repeat(list(histogram), list(histogram.values()))
    assert histogram_percentiles(histogram) == {"p50": np.percentile(values, 50), "p95": np.percentile(values, 95)}


def test_percentiles_of_a_histogram_worked_by_hand() -> None:
    # 0, 0, 1, 1, 1, 5: p50 at rank 2.5 between 1 and 1; p95 at rank 4.75: 1 + 0.75 · (5 − 1) = 4.
    assert histogram_percentiles({0: 2, 1: 3, 5: 1}) == pytest.approx({"p50": 1.0, "p95": 4.0})
    assert histogram_percentiles({}) == {"p50": 0.0, "p95": 0.0}
