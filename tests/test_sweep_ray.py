"""``asyncrl size`` (and its ``--search wide``) and ``asyncrl sweep`` with ``--runtime ray`` on a simulated 3-node
cluster: the same CSV as the local process pool, and nothing left running when the caller stops early."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from asyncrl.scenarios.spec.scenario import Scenario  # noqa: E402
from asyncrl.simulator.ray_tasks import summaries_on_ray  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

from asyncrl.cli import main  # noqa: E402
from tests.conftest import small_scenario  # noqa: E402

SIZE = ["size", "quickstart", "--devices", "16", "--steps", "4", "--splits", "3", "--kind", "streaming", "--quiet"]
SWEEP = ["sweep", "quickstart", "--steps", "3", "--vary", "schedule.max_staleness=1,2", "--quiet"]
WIDE = ["size", "quickstart", "--devices", "16", "--search", "wide", "--steps", "4", "--kind", "streaming", "--kind",
        "sync", "--max-staleness", "1", "--quiet"]  # fmt: skip


@pytest.fixture(scope="module")
def three_nodes() -> Iterator[Cluster]:
    """A head and two workers of one CPU each, the driver connected to it as through RAY_ADDRESS."""
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    for _ in range(2):
        cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    yield cluster
    ray.shutdown()
    cluster.shutdown()


@pytest.mark.slow
def test_size_and_sweep_on_ray_write_what_the_local_pool_writes(tmp_path: Path, three_nodes: Cluster) -> None:
    assert len([node for node in ray.nodes() if node["Alive"]]) == 3
    for number, command in enumerate((SIZE, SWEEP, WIDE)):
        local, on_ray = tmp_path / f"{number}-local.csv", tmp_path / f"{number}-ray.csv"
        assert main([*command, "--out", str(local)]) == 0
        assert main([*command, "--out", str(on_ray), "--runtime", "ray"]) == 0
        assert on_ray.read_text() == local.read_text()
        assert len(on_ray.read_text().splitlines()) > 2  # rows, not just a header


@pytest.mark.slow
def test_stopping_early_cancels_every_task_still_queued_or_running(three_nodes: Cluster) -> None:
    def task(scenario: Scenario) -> str:  # the first ends at once, the others would run for ten minutes
        if scenario.name != "first":
            time.sleep(600)
        return scenario.name

    scenario = small_scenario()
    scenarios = [scenario.model_copy(update={"name": name}) for name in ["first", *"abcde"]]
    results = summaries_on_ray(task, scenarios, tick=lambda: None)  # type: ignore[arg-type]
    assert next(results) == "first"  # the others are running (three CPUs) or queued
    deadline = time.monotonic() + 60  # on a loaded machine a task's worker takes a while to start
    while not _busy_cpus() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _busy_cpus() > 0
    results.close()  # what an interrupt does to the generator
    deadline = time.monotonic() + 60  # a bound for a failure, far below the tasks' ten minutes
    while _busy_cpus() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _busy_cpus() == 0  # every CPU of the three nodes is free again: no task runs, none is queued


def _busy_cpus() -> float:
    return ray.cluster_resources().get("CPU", 0) - ray.available_resources().get("CPU", 0)
