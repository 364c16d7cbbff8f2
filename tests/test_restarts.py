"""A dead actor's side of the executor, without processes: the channels that outlive no dead actor, the
coordinator's lost groups, the record a resume keeps, and the flags."""

from __future__ import annotations

import multiprocessing
import queue
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

pytest.importorskip("torch")

import torch
from asyncrl.executor.processes.channels import PipeResults, PipeSender, Tagged, TaggedResults
from asyncrl.executor.processes.coordinator import Coordinator
from asyncrl.executor.processes.messages import FinishedRollout, Ready, RolloutDone, StartGroups, StepFinished
from asyncrl.executor.record import PreviousRun
from asyncrl.scenarios.record.record import EVENT_COLUMNS

from asyncrl.cli import main
from tests.conftest import small_scenario
from tests.test_conformance import _Done, _Source
from tests.test_executor_hardening import one_error


def test_a_pipe_gives_every_message_before_it_says_its_actor_is_gone() -> None:
    reader, writer = multiprocessing.Pipe(duplex=False)
    results = PipeResults()
    results.add(3, reader)
    sender = PipeSender(writer)
    sender.put(Ready(3))
    sender.put(Ready(3))
    writer.close()  # the actor exits
    assert [results.get(timeout=1), results.get(timeout=1)] == [Ready(3), Ready(3)]
    assert results.ended == set()  # not before its messages are read
    with pytest.raises(queue.Empty):
        results.get(timeout=0.1)
    assert results.ended == {3}


class _Queue:
    """A Ray queue's get/put, in memory."""

    def __init__(self) -> None:
        self.items: list[Any] = []

    def put(self, item: Any) -> None:
        self.items.append(item)

    def get(self, timeout: float | None = None) -> Any:
        if not self.items:
            raise queue.Empty
        return self.items.pop(0)

    def get_nowait(self) -> Any:
        return self.get()


def test_ray_messages_of_a_replaced_incarnation_are_dropped() -> None:
    shared, incarnations = _Queue(), [0, 0]
    results = TaggedResults(shared, incarnations)  # type: ignore[arg-type]
    Tagged(shared, 0).put(Ready(0))  # type: ignore[arg-type]
    Tagged(shared, 0).put(Ready(1))  # type: ignore[arg-type]
    incarnations[0] = 1  # actor 0 restarted: its first incarnation's message is stale
    Tagged(shared, 1).put(Ready(0))  # type: ignore[arg-type]
    assert [results.get(timeout=0), results.get(timeout=0)] == [Ready(1), Ready(0)]
    with pytest.raises(queue.Empty):
        results.get_nowait()


def is_completed(self) -> bool:
    return True


def test_a_lost_engines_groups_are_recorded_lost_and_sent_again_to_the_other_engine() -> None:
    scenario = small_scenario(
        cluster={"generation_devices": 2, "training_devices": 1},
        schedule={"kind": "sync", "max_concurrency": 4},
        workload={"prompts_per_step": 4, "samples_per_prompt": 2},
    )
    commands: list[list[Any]] = [[], []]
    queues = [type("Q", (), {"put": lambda self, c, i=i: commands[i].append(c)})() for i in range(2)]
    now = [0.5]
    coordinator = Coordinator(scenario, _Source(2), queues, clock=lambda: now[0], send=lambda w, r: _Done())  # type: ignore[arg-type]
    coordinator.publish(0, torch.zeros(1))  # groups start at 0.5 s
    started = {i: [s.group for c in commands[i] if isinstance(c, StartGroups) for s in c.starts] for i in (0, 1)}
    assert started == {0: [0, 2], 1: [1, 3]}
    first = FinishedRollout(0, [7, 7], [0.0, 0.0], [0, 0], 1.0, 2.0, [])
    second = FinishedRollout(1, [7], [0.0], [0], 1.0, 2.5, [])
    coordinator.on_messages([StepFinished(1, (RolloutDone(1, 1, first),))])  # half of group 1 done
    coordinator.on_messages([StepFinished(0, (RolloutDone(0, 0, first), RolloutDone(0, 0, second)))])  # group 0
    commands[0].clear()
    now[0] = 5.0  # the death is seen at 5 s; it happened at 4 s
    coordinator.engine_lost(1, died_at=4.0)
    lost = pd.DataFrame(coordinator.rows, columns=list(EVENT_COLUMNS)).query("kind == 'lost'")
    assert sorted(zip(lost["group"], lost["sample"], strict=True)) == [(1, 0), (1, 1), (3, 0), (3, 1)]
    assert lost.set_index(["group", "sample"]).loc[(1, 0), ["end", "tokens"]].tolist() == [2.0, 2]  # finished
    assert lost.set_index(["group", "sample"]).loc[(3, 0), ["end", "tokens"]].tolist() == [4.0, 0]  # running
    # Engine 0 has room for one group (group 2 still runs): the older lost group; the other once group 2
    # is done (the work source hands back the requests drawn first: the next test).
    again = [s for c in commands[0] if isinstance(c, StartGroups) for s in c.starts]
    assert [s.group for s in again] == [1]
    coordinator.on_messages([StepFinished(0, (RolloutDone(0, 2, first), RolloutDone(0, 2, second)))])
    assert [s.group for c in commands[0] if isinstance(c, StartGroups) for s in c.starts] == [1, 3]
    coordinator.engine_restored(1, died_at=4.0)
    restart = [row for row in coordinator.rows if row["kind"] == "restart"]
    assert [(row["worker"], row["start"], row["end"]) for row in restart] == [("engine-1", 4.0, 5.0)]


def test_a_group_asked_for_again_gets_its_first_requests_and_the_next_group_its_own() -> None:
    from asyncrl.executor.tasks.work import WorkSource

    scenario = small_scenario(
        workload={"completion_tokens": {"kind": "lognormal", "median": 50, "sigma": 1, "max_tokens": 400}}
    )
    once, again = WorkSource(scenario, None, 100), WorkSource(scenario, None, 100)
    first = [once.requests(0), once.requests(1)]
    assert again.requests(0) == first[0] and again.requests(1) == first[1]
    assert again.requests(0) == first[0]  # generated again after its engine died: the same prompt and lengths
    assert again.requests(2) == once.requests(2)  # the length stream did not move for the repeat


def test_a_resumed_record_keeps_the_restarts_and_losses_before_its_checkpoint(tmp_path: Path) -> None:
    rows = [
        ("learner", "training", "train", 0.0, 1.0, 0, 0, -1, -1),
        ("engine-0", "generation", "lost", 0.2, 0.5, -1, 0, 2, 0),
        ("engine-0", "generation", "restart", 0.5, 0.9, -1, -1, -1, -1),
        ("engine-0", "generation", "restart", 1.5, 1.9, -1, -1, -1, -1),  # after the checkpoint's step: gone
    ]
    columns = ["worker", "role", "kind", "start", "end", "step", "version", "group", "sample"]
    events = pd.DataFrame(rows, columns=columns).assign(tokens=0, comm_s=0.0).astype(EVENT_COLUMNS)
    events.to_parquet(tmp_path / "events.parquet")
    pd.DataFrame({"step": [0, 1]}).to_parquet(tmp_path / "metrics.parquet")
    kept = PreviousRun.load(tmp_path, step=1)
    assert kept.events["kind"].tolist() == ["train", "lost", "restart"]


def test_the_restart_flags_are_checked_before_anything_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["execute", "cpu-timing", "--auto-resume"]) == 2
    assert "--auto-resume: resumes from the run's last checkpoint; set run.checkpoint_every" in one_error(
        capsys.readouterr().err
    )
    with pytest.raises(SystemExit) as refused:
        main(["execute", "cpu-timing", "--max-restarts", "-1"])
    assert refused.value.code == 2
    assert "--max-restarts: expected an integer ≥ 0, got '-1'" in one_error(capsys.readouterr().err)
