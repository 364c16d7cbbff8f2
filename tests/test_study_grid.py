"""The study's grid: schedule labels to scenario overrides, the list flags, and their one-line errors."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from asyncrl.scenarios.spec.loading import ScenarioError, load_scenario

from asyncrl.experiments.grid import (
    correction_overrides,
    parse_losses,
    parse_schedule,
    parse_schedules,
    parse_seeds,
    split_list,
)
from asyncrl.experiments.study import StudyOptions, build_cells


@pytest.mark.parametrize(
    ("label", "kind", "bound", "in_flight", "overrides"),
    [
        ("sync", "sync", 0, False, ["schedule.kind=sync"]),
        ("pipelined-2", "pipelined", 2, False, ["schedule.kind=pipelined", "schedule.off_policy_steps=2"]),
        (
            "streaming-8",
            "streaming",
            8,
            False,
            ["schedule.kind=streaming", "schedule.max_staleness=8", "schedule.in_flight_updates=false"],
        ),
        (
            "streaming-0-inflight",
            "streaming",
            0,
            True,
            ["schedule.kind=streaming", "schedule.max_staleness=0", "schedule.in_flight_updates=true"],
        ),
    ],
)
def test_a_label_is_a_schedule_and_its_overrides(
    label: str, kind: str, bound: int, in_flight: bool, overrides: list[str]
) -> None:
    schedule = parse_schedule(label)
    assert (schedule.label, schedule.kind, schedule.bound, schedule.in_flight) == (label, kind, bound, in_flight)
    assert schedule.overrides == overrides
    loaded = load_scenario("cpu-study", schedule.overrides).schedule
    assert loaded.kind == kind and loaded.staleness_bound == bound
    assert getattr(loaded, "in_flight_updates", False) == in_flight


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("sync,stream-2", "schedules: 'stream-2' is not a schedule; did you mean streaming-1? (labels: sync, "),
        ("pipelined-0", "schedules: 'pipelined-0': a pipelined schedule is at least 1 step off-policy"),
        ("streaming-x", "schedules: 'streaming-x' is not a schedule"),
        ("pipelined", "schedules: 'pipelined' is not a schedule"),
        ("sync,streaming-2,sync", "schedules: sync is given twice"),
        ("sync,,streaming-2", "schedules: 'sync,,streaming-2' has an empty item"),
    ],
)
def test_a_bad_schedule_label_names_the_flag(text: str, message: str) -> None:
    with pytest.raises(ScenarioError) as caught:
        parse_schedules(text)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_losses_seeds_and_corrections_are_lists_checked_where_they_can_be() -> None:
    assert parse_losses("grpo, online_dpo") == ["grpo", "online_dpo"]
    with pytest.raises(ScenarioError, match=r"^losses: unknown loss 'grp'; did you mean grpo\? \(one of grpo, rloo"):
        parse_losses("grp")
    assert parse_seeds("0,1,2") == [0, 1, 2]
    with pytest.raises(ScenarioError, match=r"^seeds: '-1' is not an integer ≥ 0"):
        parse_seeds("0,-1")
    with pytest.raises(ScenarioError, match=r"^--corrections: clip is given twice"):
        split_list("clip,clip", "--corrections")
    assert correction_overrides("tis") == ["algorithm.correction=tis"]  # the scenario judges it


def test_the_grid_is_every_combination_in_table_order_with_the_cells_scenarios(tmp_path) -> None:
    options = StudyOptions(
        "cpu-study",
        overrides=["workload.prompts_per_step=4"],
        schedules="sync,streaming-2-inflight",
        losses="grpo,online_dpo",
        seeds="3,4",
        steps=7,
        out=tmp_path,
    )
    cells = build_cells(options)
    assert [cell.key.cell for cell in cells[:4]] == [
        "sync.grpo.clip.s3",
        "sync.grpo.clip.s4",
        "sync.online_dpo.clip.s3",
        "sync.online_dpo.clip.s4",
    ]
    last = cells[-1]
    assert last.key.cell == "streaming-2-inflight.online_dpo.clip.s4" and last.out == tmp_path / "cells" / last.key.cell
    assert (last.key.kind, last.key.staleness_bound, last.key.in_flight_updates) == ("streaming", 2, True)
    assert last.key.task == "sort" and last.scenario.algorithm.loss == "online_dpo"
    assert (last.scenario.run.seed, last.scenario.run.steps, last.scenario.workload.prompts_per_step) == (4, 7, 4)


def test_a_cell_the_scenario_refuses_names_the_cell() -> None:
    with pytest.raises(ScenarioError, match=r"^cell sync\.grpo\.bogus\.s0: algorithm\.correction"):
        build_cells(StudyOptions("cpu-study", schedules="sync", losses="grpo", corrections="bogus", seeds="0"))
    with pytest.raises(ScenarioError, match=r"^cell sync\.grpo\.clip\.s0: workload\.task: a study measures reward"):
        build_cells(StudyOptions("cpu-study", overrides=["workload.task=null"], schedules="sync", losses="grpo"))


@pytest.mark.slow
def test_the_command_says_which_flag_is_wrong_on_one_line(tmp_path) -> None:
    out = tmp_path / "study"
    args = [sys.executable, "-m", "asyncrl", "study", "cpu-study", "--schedules", "sync,async-2", "--out", str(out)]
    done = subprocess.run(args, capture_output=True, text=True)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("asyncrl: error: --schedules: 'async-2' is not a schedule")
    assert done.stderr.count("\n") == 1 and not out.exists()


def test_the_held_out_schedule_is_one_of_the_grid_and_leaves_two_to_fit() -> None:
    from asyncrl.experiments.study import check_options

    with pytest.raises(ScenarioError, match=r"^holdout: 'streaming-4' is not all or one of --schedules \(sync, stream"):
        check_options(StudyOptions("cpu-study", schedules="sync,streaming-1,streaming-2", holdout="streaming-4"))
    with pytest.raises(ScenarioError, match=r"^holdout: the fit left after holding one schedule out needs two"):
        check_options(StudyOptions("cpu-study", schedules="sync,streaming-2", holdout="streaming-2"))
    check_options(StudyOptions("cpu-study", schedules="sync,streaming-1,streaming-2", holdout="streaming-2"))


def test_a_study_directory_is_locked_with_the_runs_lock(tmp_path) -> None:
    from asyncrl.scenarios.record.outputs import OutputError, lock_directory

    from asyncrl.experiments.study import LOCK_FILE, _study_directory

    out = tmp_path / "study"
    with _study_directory(out):
        assert (out / LOCK_FILE).read_text() == f"{os.getpid()}\n"
        with pytest.raises(OutputError, match=rf"^out: {out} is being written by another study \(pid {os.getpid()}\)$"):
            lock_directory(out, lock_file=LOCK_FILE, writer="study")
    os.close(lock_directory(out, lock_file=LOCK_FILE, writer="study"))  # released
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(OutputError, match="holds files that are not a study's"), _study_directory(tmp_path / "other"):
        pass
