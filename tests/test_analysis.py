"""The analysis side: comparing run records, traces, malformed summaries and their commands (plots and the
report: tests/test_plots.py; the hand-made records: tests/run_records.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, get_args

import numpy as np
import pytest
from asyncrl.analysis.records import compare, trace
from asyncrl.scenarios.record.record import RunSummary, read_summary, validate_summary
from pydantic import BaseModel

from asyncrl.cli import main
from tests.run_records import (  # hand_summary, B_CHANGES and write_hand_run: other tests import them from here too
    B_CHANGES,
    EXPECTED_RELATIVE,
    check_chrome_trace,
    hand_events,
    hand_summary,
    write_hand_run,
)


@pytest.fixture
def hand_runs(tmp_path: Path) -> tuple[Path, Path]:
    return write_hand_run(tmp_path / "a", hand_summary()), write_hand_run(tmp_path / "b", hand_summary(**B_CHANGES))


# ── compare ─────────────────────────────────────────────────────────────────────


def test_relative_error_is_defined_for_a_zero_reference() -> None:
    assert compare.relative_error(4.0, 5.0) == pytest.approx(0.25)
    assert compare.relative_error(0.0, 0.0) == 0.0
    assert compare.relative_error(0.0, 2.0) == math.inf
    assert compare.relative_error(0.0, -2.0) == -math.inf


def test_compare_arithmetic_on_hand_values(hand_runs: tuple[Path, Path]) -> None:
    comparison = compare.compare_runs(*hand_runs)
    errors = {figure.key: figure.relative_error for figure in comparison.figures}
    assert set(errors) == set(EXPECTED_RELATIVE)
    for key, expected in EXPECTED_RELATIVE.items():
        assert errors[key] == pytest.approx(expected), key
    wall = next(figure for figure in comparison.figures if figure.key == "wall_time_s")
    assert (wall.a, wall.b, wall.absolute_error) == (100.0, 110.0, 10.0)
    assert comparison.staleness_tv == pytest.approx(0.5)  # ½(|1 − ½| + |0 − ½|)
    assert comparison.a_run == {"backend": "simulator", "scenario": "hand"}
    assert comparison.b_run["backend"] == "executor"


def test_total_variation_distance() -> None:
    assert compare.total_variation({"0": 3, "1": 1}, {"0": 30, "1": 10}) == 0.0
    assert compare.total_variation({"0": 1}, {"2": 7}) == 1.0
    assert compare.total_variation({"0": 1, "1": 1}, {"1": 1, "2": 3}) == pytest.approx(0.75)
    assert compare.total_variation({}, {}) == 0.0
    assert compare.total_variation({}, {"0": 1}) == 1.0


def test_a_run_compared_with_itself_has_no_error(hand_runs: tuple[Path, Path]) -> None:
    a, b = hand_runs
    for run in (a, b):
        comparison = compare.compare_runs(run, run, (run, run, run, run))
        assert all(figure.relative_error == 0 and figure.absolute_error == 0 for figure in comparison.figures)
        assert comparison.staleness_tv == 0.0
        assert comparison.speedup is not None and comparison.speedup.relative_error == 0.0
        assert compare.figures_off(comparison, 0.0) == []


def test_speedup_comparison_on_hand_values() -> None:
    speedup = compare.compare_speedup(
        validate_summary(hand_summary(wall_time_s=300.0)),
        validate_summary(hand_summary(wall_time_s=100.0)),
        validate_summary(hand_summary(wall_time_s=330.0)),
        validate_summary(hand_summary(wall_time_s=150.0)),
    )
    assert speedup.predicted == pytest.approx(3.0)
    assert speedup.measured == pytest.approx(2.2)
    assert speedup.relative_error == pytest.approx((2.2 - 3.0) / 3.0)


def test_tolerance_lists_the_figures_off(hand_runs: tuple[Path, Path]) -> None:
    comparison = compare.compare_runs(*hand_runs)
    expected = [key for key, error in EXPECTED_RELATIVE.items() if abs(error) > 0.15] + ["staleness.histogram_tv"]
    assert compare.figures_off(comparison, 0.15) == expected
    assert "wall_time_s" in compare.figures_off(comparison, 0.05)


def test_comparison_json_is_strict_json(hand_runs: tuple[Path, Path], tmp_path: Path) -> None:
    comparison = compare.compare_runs(*hand_runs)
    path = compare.write_comparison(comparison, tmp_path / "out", tolerance=0.15)
    assert path == tmp_path / "out" / "comparison.json"
    data = json.loads(path.read_text(), parse_constant=lambda name: pytest.fail(f"non-JSON constant {name}"))
    assert data["figures"]["staleness.mean"] == {"a": 0.0, "b": 0.5, "absolute_error": 0.5, "relative_error": None}
    assert data["figures"]["wall_time_s"]["relative_error"] == pytest.approx(0.1)
    assert data["staleness.histogram_tv"] == pytest.approx(0.5)
    assert data["tolerance"]["off"] == compare.figures_off(comparison, 0.15)
    assert data["speedup"] is None


# ── command line: compare, trace, errors ────────────────────────────────────────


def test_compare_command_prints_the_table_and_writes_only_to_out(
    hand_runs: tuple[Path, Path], tmp_path: Path, capsys
) -> None:
    a, b = hand_runs
    assert main(["compare", str(a), str(b)]) == 0
    printed = capsys.readouterr().out
    assert "wall time (s)" in printed and "+10.0%" in printed and "n/a" in printed and "inf" not in printed
    assert not (b / "comparison.json").exists() and not (a / "comparison.json").exists()  # inputs stay as they were
    assert main(["compare", str(a), str(b), "--out", str(tmp_path / "c.json")]) == 0
    assert json.loads((tmp_path / "c.json").read_text())["b"]["backend"] == "executor"


def test_compare_tolerance_exit_codes(hand_runs: tuple[Path, Path], tmp_path: Path, capsys) -> None:
    a, b = hand_runs
    out = tmp_path / "c.json"
    assert main(["compare", str(a), str(a), "--tolerance", "0", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["tolerance"]["off"] == []
    assert main(["compare", str(a), str(b), "--tolerance", "0.15", "--out", str(out), "--force"]) == 1
    assert "staleness.histogram_tv" in json.loads(out.read_text())["tolerance"]["off"]
    assert "OFF" in capsys.readouterr().out


def test_compare_command_with_speedup(hand_runs: tuple[Path, Path], tmp_path: Path, capsys) -> None:
    a, b = hand_runs  # predicted 100/100 = 1, measured 100/110
    out = tmp_path / "c.json"
    assert main(["compare", str(a), str(b), "--speedup", str(a), str(a), str(a), str(b), "--out", str(out)]) == 0
    speedup = json.loads(out.read_text())["speedup"]
    assert speedup["predicted"] == pytest.approx(1.0)
    assert speedup["measured"] == pytest.approx(100 / 110)
    assert "speedup sync/async" in capsys.readouterr().out


def one_line_error(command: str, bad: Path, good: Path, tmp_path: Path, capsys: Any) -> str:
    """Run ``command`` on the bad run directory; it must exit 2 with one line on stderr, returned."""
    args = {
        "compare": ["compare", str(good), str(bad)],
        "report": ["report", str(bad), "--out", str(tmp_path / "report")],
        "trace": ["trace", str(bad)],
    }[command]
    assert main(args) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1
    return error


@pytest.mark.parametrize("command", ["compare", "report", "trace"])
def test_missing_run_is_a_one_line_error(command: str, hand_runs: tuple[Path, Path], tmp_path: Path, capsys) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    missing = tmp_path / "missing"
    for bad in (empty, missing):
        error = one_line_error(command, bad, hand_runs[0], tmp_path, capsys)
        assert error.startswith("asyncrl: error: ") and str(bad) in error


MISSING = object()
MALFORMED = [
    ("staleness.histogram", MISSING, "staleness.histogram: Field required"),
    ("steps", "many", "steps: Input should be a valid integer"),
    ("utilization", [0.5, 0.25], "utilization: Input should be a valid dictionary"),
    ("samples.dropped", None, "samples.dropped: Input should be a valid integer"),
]


@pytest.mark.parametrize(("dotted", "value", "message"), MALFORMED)
@pytest.mark.parametrize("command", ["compare", "report", "trace"])
def test_malformed_summary_is_a_one_line_error_naming_the_field(
    command: str, dotted: str, value: Any, message: str, hand_runs: tuple[Path, Path], tmp_path: Path, capsys
) -> None:
    summary = hand_summary()
    *sections, leaf = dotted.split(".")
    node = summary
    for section in sections:
        node = node[section]
    if value is MISSING:
        del node[leaf]
    else:
        node[leaf] = value
    bad = write_hand_run(tmp_path / "bad", summary)
    error = one_line_error(command, bad, hand_runs[0], tmp_path, capsys)
    assert error.startswith(f"asyncrl: error: {bad / 'summary.json'}: {message}")


def test_summary_that_is_not_json_is_named(hand_runs: tuple[Path, Path], capsys) -> None:
    a, b = hand_runs
    (b / "summary.json").write_text('{"backend": "executor",')
    assert main(["compare", str(a), str(b)]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"asyncrl: error: {b / 'summary.json'}: not valid JSON (") and error.count("\n") == 1


def test_reading_a_summary_keeps_the_file_as_written(hand_runs: tuple[Path, Path], tmp_path: Path) -> None:
    a, _ = hand_runs
    assert list(read_summary(a).to_json().items()) == list(json.loads((a / "summary.json").read_text()).items())
    executor = write_hand_run(tmp_path / "executor", {**hand_summary(), "status": "failed", "later_field": 1})
    # A field this version does not know (a later version's) is read past, not refused, and not kept.
    assert read_summary(executor).to_json() == {**hand_summary(), "status": "failed"}


def test_every_summary_field_is_documented_with_its_unit() -> None:
    def fields(model: type[BaseModel], prefix: str = "") -> list[tuple[str, Any]]:
        found = []
        for name, field in model.model_fields.items():
            section = next((arg for arg in (field.annotation, *get_args(field.annotation)) if _is_model(arg)), None)
            if section is not None:  # a section, or an optional one (absent from older records)
                assert section.__doc__, f"{prefix}{name}"
                found += fields(section, f"{prefix}{name}.")
            else:
                found.append((f"{prefix}{name}", field))
        return found

    leaves = fields(RunSummary)
    expected = set(EXPECTED_RELATIVE) | {"staleness.histogram", "samples.dropped", "breakdown.training.communication"}
    assert {name for name, _ in leaves} >= expected | {"device_hours.per_1k_samples"}
    for name, field in leaves:
        assert field.description, name
        if field.annotation in (int, float):
            assert field.description.endswith(")"), f"{name}: no unit in {field.description!r}"


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def test_trace_command_writes_the_default_file(hand_runs: tuple[Path, Path], capsys) -> None:
    a, _ = hand_runs
    assert main(["trace", str(a)]) == 0
    assert str(a / "trace.json.gz") in capsys.readouterr().out
    check_chrome_trace(trace.read_chrome_trace(a / "trace.json.gz"))  # gzipped: Perfetto reads it as is


# ── trace ───────────────────────────────────────────────────────────────────────


def test_trace_of_hand_events() -> None:
    data = json.loads(json.dumps(trace.chrome_trace(hand_events(), run_label="hand")))
    spans = check_chrome_trace(data)
    assert len(spans) == 5
    train = next(event for event in spans if event["name"] == "train")
    assert (train["ts"], train["dur"]) == (3.5e6, 1.5e6)
    assert train["args"] == {"worker": "learner", "step": 0, "version": 0, "group": -1, "sample": -1, "tokens": 300}
    assert train["pid"] != next(event for event in spans if event["name"] == "generate")["pid"]
    generate_tids = {event["tid"] for event in spans if event["name"] == "generate"}
    assert len(generate_tids) == 2  # the two overlapping rollouts land in two lanes
    names = {event["args"]["name"] for event in data["traceEvents"] if event["name"] == "thread_name"}
    assert {"engine-0", "engine-0 ·1", "learner", "queue"} <= names


def test_assign_lanes_never_overlaps() -> None:
    rng = np.random.default_rng(0)
    starts = rng.uniform(0, 100, 300)
    ends = starts + rng.exponential(5, 300)
    lanes = trace.assign_lanes(starts, ends)
    for lane in np.unique(lanes):
        order = np.argsort(starts[lanes == lane])
        s, e = starts[lanes == lane][order], ends[lanes == lane][order]
        assert np.all(e[:-1] <= s[1:])
    assert lanes.max() + 1 == max(np.sum((starts <= t) & (ends > t)) for t in starts)  # fewest lanes


def test_natural_order() -> None:
    names = ["engine-10", "engine-2", "learner", "engine-1"]
    assert sorted(names, key=trace.natural_key) == ["engine-1", "engine-2", "engine-10", "learner"]
