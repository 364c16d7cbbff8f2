"""Chaos, bounded in time: actors killed at random moments in short CPU runs (local processes, and Ray actors on a
simulated multi-node cluster, one of them with its node), a learner killed under ``--auto-resume``; every record
still trains every planned group exactly once (``analysis.records.exactly_once``)."""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import threading
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from asyncrl.analysis.records.exactly_once import exactly_once_violations
from asyncrl.executor.processes.runtime import execute
from asyncrl.executor.processes.supervisor import Options, supervise
from asyncrl.scenarios.record.record import RunRecord
from asyncrl.scenarios.spec.loading import load_scenario

SHORT = ["run.steps=8", "workload.completion_tokens.max_tokens=48", "workload.prompts_per_step=2"]
#: One schedule of each kind, each run with two engines: where the lost groups may go, and with which weights.
SCHEDULES = [
    ["schedule.kind=sync"],
    ["schedule.kind=pipelined", "schedule.off_policy_steps=1"],
    ["schedule.max_staleness=1", "schedule.in_flight_updates=true"],
]


def moments(rng: random.Random) -> list[float]:
    """One or two random moments early in a run (it lasts a few seconds), when a random engine is killed."""
    return sorted(round(rng.uniform(0.2, 1.5), 2) for _ in range(rng.randint(1, 2)))


def check_record(result: RunRecord, kills: int) -> None:
    summary = result.summary
    assert summary is not None and summary.status == "complete"
    assert summary.restarts is not None and 1 <= summary.restarts.engines <= kills
    assert summary.samples.trained == summary.steps * result.scenario.batch_samples
    assert exactly_once_violations(result.scenario, result.events, result.metrics) == []


@pytest.mark.slow
def test_local_actors_killed_at_random_moments_restart_and_every_group_is_trained_once(tmp_path: Path) -> None:
    rng = random.Random(22)
    for run, schedule in enumerate(SCHEDULES):
        kills = moments(rng)
        failures = f"run.failures={{at_s: {kills}}}"
        scenario = load_scenario("cpu-timing", [*SHORT, "cluster.generation_devices=2", *schedule, failures])
        check_record(execute(scenario, tmp_path / f"run-{run}", max_restarts=len(kills)), len(kills))


@pytest.mark.slow
def test_ray_actors_killed_or_lost_with_their_node_restart_on_a_simulated_cluster(tmp_path: Path) -> None:
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    try:
        nodes = [cluster.add_node(num_cpus=1) for _ in range(3)]  # two engines' bundles, one node to spare
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
        kills = moments(random.Random(23))
        failures = f"run.failures={{at_s: {kills}}}"
        scenario = load_scenario("cpu-timing", [*SHORT, "cluster.generation_devices=2", failures])
        lose = LoseANode(cluster, nodes, at_step=2)
        result = execute(scenario, tmp_path / "run", runtime="ray", max_restarts=len(kills) + 1, on_step=lose.on_step)
        lose.thread.join()
        assert lose.removed
        check_record(result, len(kills) + 1)
    finally:
        ray.shutdown()
        cluster.shutdown()


class LoseANode:
    """After learner step ``at_step``, remove the node that holds an engine (in a thread: the run goes on)."""

    def __init__(self, cluster, nodes, at_step: int) -> None:  # type: ignore[no-untyped-def]
        self.cluster, self.nodes, self.at_step = cluster, nodes, at_step
        self.thread = threading.Thread(target=self._remove, daemon=True)
        self.removed = False

    def on_step(self, step: int, row: dict) -> None:
        if step == self.at_step:
            self.thread.start()

    def _remove(self) -> None:
        from ray._private import state  # where each actor lives; ray.util.state needs the dashboard

        hosts = {a["Address"]["NodeID"] for a in state.actors().values() if a["State"] == "ALIVE"}
        node = next(node for node in self.nodes if node.node_id in hosts)
        self.cluster.remove_node(node)
        self.removed = True


@pytest.mark.slow
def test_a_learner_killed_after_its_checkpoint_resumes_and_trains_every_step_once(tmp_path: Path) -> None:
    scenario = load_scenario("cpu-timing", [*SHORT, "run.checkpoint_every=3"])

    def kill_the_learner(step: int, row: dict) -> None:
        if step == 4 and not killed:  # the checkpoint of step 3 is written; steps 3 and 4 are trained again
            (learner,) = [p for p in multiprocessing.active_children() if p.name == "asyncrl-learner"]
            killed.append(learner.pid)
            os.kill(learner.pid, signal.SIGKILL)

    killed: list[int | None] = []
    result = supervise(scenario, tmp_path / "run", Options("cpu", "local", False, 1), on_step=kill_the_learner)
    assert killed
    summary = result.summary
    assert summary is not None and summary.status == "complete" and summary.resumed_from == 3
    assert summary.restarts is not None and summary.restarts.learner == 1
    assert summary.restarts.regenerated_samples >= 2 * scenario.batch_samples  # steps 3 and 4's groups at least
    assert exactly_once_violations(scenario, result.events, result.metrics) == []
