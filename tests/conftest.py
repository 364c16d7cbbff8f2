"""Helpers shared by the tests: small scenarios built in code, with a measured profile."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from asyncrl.scenarios.costs.profile import CostProfile
from asyncrl.scenarios.record.record import RunRecord
from asyncrl.scenarios.spec.loading import validate_scenario
from asyncrl.scenarios.spec.scenario import Scenario
from asyncrl.simulator.costs import MeasuredCosts
from asyncrl.simulator.simulation import simulate


def small_scenario(**sections: dict[str, Any]) -> Scenario:
    """A one-engine scenario on the tiny model; sections given replace or extend the defaults."""
    data: dict[str, Any] = {
        "name": "small",
        "model": {"preset": "tiny", "dtype": "fp32"},
        "hardware": {"device": "cpu"},
        "cluster": {"generation_devices": 1, "training_devices": 2},
        "workload": {
            "prompts_per_step": 2,
            "samples_per_prompt": 2,
            "prompt_tokens": {"kind": "fixed", "value": 10},
            "completion_tokens": {"kind": "fixed", "value": 100},
        },
        "schedule": {"kind": "sync", "max_concurrency": 4},
        "run": {"steps": 3, "seed": 0},
    }
    for section, fields in sections.items():
        data[section] = {**data.get(section, {}), **fields} if section != "schedule" else fields
    return validate_scenario(data)


def one_group_of_two_pareto_rollouts() -> Scenario:
    """One step of one group of two Pareto-length rollouts (seed 0 gives two different lengths) on one engine."""
    return small_scenario(
        workload={
            "prompts_per_step": 1,
            "samples_per_prompt": 2,
            "completion_tokens": {"kind": "pareto", "scale": 10, "alpha": 1.0, "max_tokens": 400},
        },
        schedule={"kind": "sync", "max_concurrency": 2},
        run={"steps": 1, "seed": 0},
    )


def profile(**fields: Any) -> CostProfile:
    values = {"decode_step_s": {1: 0.01}, "prefill_token_s": 0.001, "train_token_s": 0.002, "weight_sync_s": 0.5}
    return CostProfile(**{**values, **fields})


def run(scenario: Scenario, cost_profile: CostProfile) -> RunRecord:
    return simulate(scenario, costs=MeasuredCosts(scenario, cost_profile))


@pytest.fixture
def small() -> Scenario:
    return small_scenario()


@pytest.fixture
def local_ray() -> Iterator[None]:
    """A local Ray instance of two CPUs for one test (the Ray tests skip where ray is not installed). A new
    one each time (``address="local"``): without it ray.init joins a cluster another pytest worker started
    moments before, and refuses num_cpus there (it happened in a fresh-clone CI run)."""
    ray = pytest.importorskip("ray")
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()
