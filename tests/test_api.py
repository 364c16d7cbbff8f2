"""The Python API and the run record as a value: what a notebook user calls, and what comes back."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
from asyncrl.executor.backend import Executor
from asyncrl.scenarios.record.record import RunRecord, RunRecordError, validate_summary
from asyncrl.scenarios.spec.loading import ScenarioError
from asyncrl.simulator.backend import Simulator

import asyncrl
from tests.run_records import B_CHANGES, hand_summary, write_hand_run

QUICK = {"run.steps": 6}


def test_load_scenario_takes_a_mapping_or_overrides_alike() -> None:
    by_mapping = asyncrl.load_scenario("quickstart", {"schedule.kind": "sync", "run.steps": 6})
    by_overrides = asyncrl.load_scenario("quickstart", ["schedule.kind=sync", "run.steps=6"])
    assert by_mapping == by_overrides
    assert by_mapping.schedule.kind == "sync" and by_mapping.run.steps == 6


def test_load_scenario_names_a_bad_field() -> None:
    with pytest.raises(ScenarioError, match=r"^run\.steps"):
        asyncrl.load_scenario("quickstart", {"run.steps": -1})


def test_simulate_returns_a_record_that_writes_and_reads_back(tmp_path: Path) -> None:
    scenario = asyncrl.load_scenario("quickstart", QUICK)
    record = asyncrl.simulate(scenario)
    assert record.summary is not None and record.summary.backend == "simulator" and record.summary.steps == 6
    assert not list(tmp_path.iterdir())  # nothing written without out
    written = record.write(tmp_path / "run")
    again = RunRecord.read(written)
    assert again.summary == record.summary and again.scenario == scenario.resolved()
    pd.testing.assert_frame_equal(again.events, record.events.astype(again.events.dtypes.to_dict()))
    assert again.metrics.empty  # a simulated run has no metrics table


def test_both_backends_hand_back_the_same_kind_of_record(tmp_path: Path) -> None:
    backends = [Simulator(), Executor()]
    assert [backend.name for backend in backends] == ["simulator", "executor"]
    record = Simulator().run(asyncrl.load_scenario("quickstart", QUICK), tmp_path / "sim")
    assert (tmp_path / "sim" / "summary.json").is_file() and record.summary is not None


def test_reading_a_directory_that_is_no_run_names_it(tmp_path: Path) -> None:
    with pytest.raises(RunRecordError, match="no such run directory"):
        RunRecord.read(tmp_path / "missing")


def test_compare_is_b_relative_to_a_per_figure(tmp_path: Path) -> None:
    a = write_hand_run(tmp_path / "a", hand_summary())
    b = write_hand_run(tmp_path / "b", hand_summary(**B_CHANGES))
    table = asyncrl.compare(a, b)
    wall = table.loc["wall time (s)"]
    expected_a, expected_b = hand_summary()["wall_time_s"], hand_summary(**B_CHANGES)["wall_time_s"]
    assert (wall["a"], wall["b"]) == (expected_a, expected_b)
    assert wall["error"] == pytest.approx((expected_b - expected_a) / abs(expected_a))
    same = asyncrl.compare(a, a)
    assert all(math.isclose(error, 0.0) for error in same["error"])


def test_compare_takes_records_too(tmp_path: Path) -> None:
    summary = validate_summary(hand_summary())
    scenario = asyncrl.load_scenario("quickstart", QUICK)
    record = RunRecord(scenario, summary, pd.DataFrame())
    assert (asyncrl.compare(record, record)["error"] == 0).all()
    with pytest.raises(RunRecordError, match="not ended"):
        asyncrl.compare(RunRecord(scenario, None, pd.DataFrame()), record)


@pytest.mark.slow
def test_execute_in_memory_leaves_no_directory_and_keeps_the_metrics(tmp_path: Path, monkeypatch) -> None:
    pytest.importorskip("torch")
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # where the in-memory run's temporary directory goes
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    scenario = asyncrl.load_scenario(
        "cpu-timing", {"run.steps": 2, "workload.prompts_per_step": 2, "workload.completion_tokens.max_tokens": 48}
    )
    record = asyncrl.execute(scenario)
    assert record.summary is not None and record.summary.status == "complete" and record.summary.steps == 2
    assert record.metrics["step"].tolist() == [0, 1]
    assert not list(tmp_path.glob("asyncrl-*"))  # the temporary run directory is gone (torch leaves its own)


def readme_python_example() -> tuple[str, str]:
    """The README's ``## From Python`` code block and the output block shown after it."""
    text = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    section = text.split("## From Python", 1)[1].split("\n## ", 1)[0]
    blocks = section.split("```")
    code = blocks[1].removeprefix("python\n")
    return code, blocks[3].strip("\n")


def test_the_readme_python_example_prints_what_the_readme_shows(tmp_path: Path, monkeypatch, capsys) -> None:
    code, shown = readme_python_example()
    monkeypatch.chdir(tmp_path)  # it writes runs/api-quickstart
    exec(compile(code, "README.md (From Python)", "exec"), {})
    printed = capsys.readouterr().out.strip("\n")
    assert printed.splitlines() == shown.splitlines()
    assert (tmp_path / "runs" / "api-quickstart" / "summary.json").is_file()
