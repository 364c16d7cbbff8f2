"""The analysis side: comparing run records, plots, traces, the report and their commands."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Any, get_args

import numpy as np
import pandas as pd
import pytest
from asyncrl.analysis import compare, plots, report, sizing, trace
from asyncrl.scenarios.loading import ScenarioError, dump_scenario, load_scenario
from asyncrl.scenarios.record import EVENT_COLUMNS, RunSummary, empty_events, read_summary, validate_summary, write_run
from asyncrl.simulator.simulation import simulate
from pydantic import BaseModel

from asyncrl.cli import main

# ── hand-made run records ───────────────────────────────────────────────────────


def hand_summary(**changes: Any) -> dict[str, Any]:
    """A summary with round numbers; ``changes`` replace fields, dotted keys reach into sections."""
    summary: dict[str, Any] = {
        "backend": "simulator",
        "scenario": "hand",
        "steps": 10,
        "wall_time_s": 100.0,
        "step_time_s": {"mean": 10.0, "p50": 10.0, "p95": 12.0},
        "throughput": {"samples_per_s": 5.0, "tokens_per_s": 500.0},
        "staleness": {"mean": 0.0, "p50": 0.0, "p95": 0.0, "max": 0, "token_mean": 0.0, "histogram": {"0": 500}},
        "utilization": {"generation": 0.5, "training": 0.25, "generation_slots": 0.1},
        "idle": {"generation": 0.5, "training": 0.75},
        "weight_sync_s": 1.0,
        "samples": {"generated": 500, "trained": 500, "queued": 0, "in_flight": 0, "dropped": 0},
    }
    for dotted, value in changes.items():
        *sections, leaf = dotted.split(".")
        node = summary
        for section in sections:
            node = node[section]
        node[leaf] = value
    return summary


# B against A: +10% wall, +10% step mean, -10% p50, 0 p95, -20% samples/s, +20% tokens/s,
# staleness from exactly 0 to 0.5 / 1 / 1 (infinite relative error), utilizations +20%, 0, -50%.
B_CHANGES: dict[str, Any] = {
    "backend": "executor",
    "wall_time_s": 110.0,
    "step_time_s.mean": 11.0,
    "step_time_s.p50": 9.0,
    "throughput.samples_per_s": 4.0,
    "throughput.tokens_per_s": 600.0,
    "staleness.mean": 0.5,
    "staleness.p95": 1.0,
    "staleness.max": 1,
    "staleness.histogram": {"0": 250, "1": 250},
    "utilization.generation": 0.6,
    "utilization.generation_slots": 0.05,
}
EXPECTED_RELATIVE = {
    "wall_time_s": 0.1,
    "step_time_s.mean": 0.1,
    "step_time_s.p50": -0.1,
    "step_time_s.p95": 0.0,
    "throughput.samples_per_s": -0.2,
    "throughput.tokens_per_s": 0.2,
    "staleness.mean": math.inf,
    "staleness.p95": math.inf,
    "staleness.max": math.inf,
    "utilization.generation": 0.2,
    "utilization.training": 0.0,
    "utilization.generation_slots": -0.5,
}


def hand_events() -> pd.DataFrame:
    """One engine running two rollouts of group 0 at once, a weight sync, one learner step, one drop."""
    rows = [
        ("engine-0", "generation", "generate", 0.0, 2.0, 0, 0, 0, 0, 100, 0.0),
        ("engine-0", "generation", "generate", 1.0, 3.0, 0, 0, 0, 1, 200, 0.0),
        ("engine-0", "generation", "sync", 5.0, 5.5, -1, 1, -1, -1, 0, 0.0),
        ("learner", "training", "train", 3.5, 5.0, 0, 0, -1, -1, 300, 0.0),
        ("queue", "generation", "drop", 4.0, 4.0, -1, 0, 1, 0, 50, 0.0),
    ]
    return pd.DataFrame(rows, columns=list(EVENT_COLUMNS)).astype(EVENT_COLUMNS)


def write_hand_run(path: Path, summary: dict[str, Any]) -> Path:
    """A run directory whose summary.json is ``summary`` as given, well-formed or not."""
    write_run(path, scenario_yaml="name: hand\n", events=hand_events(), summary=None)
    (path / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return path


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


def test_compare_command_prints_the_table_and_writes_next_to_b(hand_runs: tuple[Path, Path], capsys) -> None:
    a, b = hand_runs
    assert main(["compare", str(a), str(b)]) == 0
    printed = capsys.readouterr().out
    assert "wall time (s)" in printed and "+10.0%" in printed and "n/a" in printed and "inf" not in printed
    assert json.loads((b / "comparison.json").read_text())["b"]["backend"] == "executor"


def test_compare_tolerance_exit_codes(hand_runs: tuple[Path, Path], tmp_path: Path, capsys) -> None:
    a, b = hand_runs
    out = tmp_path / "c.json"
    assert main(["compare", str(a), str(a), "--tolerance", "0", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["tolerance"]["off"] == []
    assert main(["compare", str(a), str(b), "--tolerance", "0.15", "--out", str(out)]) == 1
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


def check_chrome_trace(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Assert the Chrome trace format; return the complete ("X") events."""
    assert isinstance(data["traceEvents"], list)
    for event in data["traceEvents"]:
        assert {"name", "ph", "ts", "pid", "tid"} <= event.keys()
        if event["ph"] == "X":
            assert event["dur"] >= 0
    spans = [event for event in data["traceEvents"] if event["ph"] == "X"]
    by_thread: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for event in spans:
        by_thread.setdefault((event["pid"], event["tid"]), []).append((event["ts"], event["ts"] + event["dur"]))
    for intervals in by_thread.values():  # slices of one thread never partly overlap
        intervals.sort()
        assert all(end <= next_start for (_, end), (next_start, _) in itertools.pairwise(intervals))
    return spans


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


# ── plots, from small simulated runs ────────────────────────────────────────────


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """quickstart for 5 steps, as written (streaming) and sync."""
    root = tmp_path_factory.mktemp("runs")
    runs = {}
    for label, overrides in (("sync", ["schedule.kind=sync"]), ("async", [])):
        scenario = load_scenario("quickstart", ["run.steps=5", *overrides])
        result = simulate(scenario)
        runs[label] = root / label
        write_run(
            runs[label], scenario_yaml=dump_scenario(scenario.resolved()), events=result.events, summary=result.summary
        )
    return runs


def is_png(path: Path) -> bool:
    return path.is_file() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def texts(artists: Any) -> list[str]:
    return [artist.get_text() for artist in artists]


def legend_texts(holder: Any) -> list[str]:
    """Entries of the legend of an Axes or of a Figure's only legend."""
    legend = holder.get_legend() if hasattr(holder, "get_legend") else holder.legends[0]
    return texts(legend.get_texts())


def span_rows(ax: Any, colour: str) -> list[list[float]]:
    """Widths of the rectangles each ``broken_barh`` call drew on ``ax`` in ``colour`` (one call per row)."""
    from matplotlib.colors import to_rgba

    return [
        [float(np.ptp(path.vertices[:, 0])) for path in collection.get_paths()]
        for collection in ax.collections
        if len(collection.get_facecolor()) and tuple(collection.get_facecolor()[0]) == to_rgba(colour)
    ]


def test_timeline_draws_every_worker_and_kind(simulated: dict[str, Path]) -> None:
    runs = [(label, compare.load_events(path)) for label, path in simulated.items()]
    figure = plots.timeline_figure(runs)
    assert figure.get_suptitle() == "Timeline: busy spans per worker"
    assert len(figure.axes) == len(runs)  # one panel per run
    for ax, (label, events) in zip(figure.axes, runs, strict=True):
        wall = compare.load_summary(simulated[label]).wall_time_s
        assert ax.get_title(loc="left") == f"{label}: wall {wall:,.1f} s"
        workers = [name for name, _ in plots.timeline_workers(events)]
        dropped = events[events["kind"] == "drop"]
        drop_row = [f"dropped ({len(dropped):,})"] if len(dropped) else []
        assert texts(ax.get_yticklabels()) == workers + drop_row and workers[0] == "learner"
        assert ax.get_ylabel() == f"worker ({len(workers)})"
        assert span_rows(ax, plots.IDLE_COLOUR) == [[pytest.approx(wall)]] * len(workers)  # one idle band per row
        for kind in ("generate", "sync"):
            assert (
                len(span_rows(ax, plots.KIND_COLOURS[kind])) == events.loc[events["kind"] == kind, "worker"].nunique()
            )
        ticks = [c for c in ax.collections if not len(c.get_facecolor())]  # the drop row's vlines
        assert sorted(x for c in ticks for x in np.asarray(c.get_segments())[:, 0, 0]) == pytest.approx(
            sorted(dropped["start"])
        )
        train = events[events["kind"] == "train"]
        (learner,) = span_rows(ax, plots.KIND_COLOURS["train"])
        assert sum(learner) == pytest.approx((train["end"] - train["start"]).sum())
    assert figure.axes[-1].get_xlabel() == "time (s)"
    assert any(events["kind"].eq("drop").any() for _, events in runs)  # the async run drops stragglers
    assert legend_texts(figure) == ["generate", "sync (weight load)", "train", "idle", plots.DROP_LABEL]


def test_breakdown_bars_stack_each_runs_device_hours_per_step(simulated: dict[str, Path]) -> None:
    runs = [(label, compare.load_summary(path)) for label, path in simulated.items()]
    (ax,) = plots.breakdown_figure(runs).axes
    assert texts(ax.get_xticklabels()) == ["sync", "async"]  # one bar per run
    assert len(ax.patches) == len(plots.BREAKDOWN_PARTS) * len(runs)  # one segment per category and run
    spent = [
        part for part in plots.BREAKDOWN_PARTS if any(summary.figure(("breakdown", *part[:2])) for _, summary in runs)
    ]
    assert legend_texts(ax) == [label for _, _, label, _ in spent]
    # quickstart on 8 + 8 H100s, one device per engine, split pools: nothing to all-reduce, no phase switch.
    assert {"generation: decode", "generation: weight sync", "training: compute", "training: idle"} <= set(
        legend_texts(ax)
    )
    assert not {"generation: tensor-parallel all-reduce", "generation: phase switch"} & set(legend_texts(ax))
    for index, (_, summary) in enumerate(runs):
        stack = sum(patch.get_height() for patch in ax.patches if patch.get_x() < index < patch.get_x() + 1)
        assert stack == pytest.approx(summary.device_hours.per_step)
    assert ax.get_ylabel() == "device-hours per learner step"
    assert ax.get_title(loc="left").startswith("Where device time goes")


def test_staleness_figure_bars_are_the_normalized_histograms(simulated: dict[str, Path]) -> None:
    summaries = {label: compare.load_summary(path) for label, path in simulated.items()}
    figure = plots.staleness_figure([(label, summary.staleness.histogram) for label, summary in summaries.items()])
    (ax,) = figure.axes
    assert ax.get_title() == "Staleness of trained samples, normalized"
    assert ax.get_xlabel().startswith("staleness (learner steps")
    assert ax.get_ylabel() == "share of trained samples"
    values = sorted({int(v) for summary in summaries.values() for v in summary.staleness.histogram})
    assert len(values) > 1 and texts(ax.get_xticklabels()) == [str(value) for value in values]
    bars = ax.patches
    assert len(bars) == len(summaries) * len(values)  # grouped: one bar per run and staleness value
    for index, summary in enumerate(summaries.values()):
        histogram = summary.staleness.histogram
        heights = [bar.get_height() for bar in bars[index * len(values) : (index + 1) * len(values)]]
        total = sum(histogram.values())
        assert heights == pytest.approx([histogram.get(str(value), 0) / total for value in values])
    assert legend_texts(ax) == [f"{label} (mean {summary.staleness.mean:.2f})" for label, summary in summaries.items()]


def test_throughput_figure_has_a_rate_and_a_queue_line_per_run(simulated: dict[str, Path]) -> None:
    runs = [(label, compare.load_events(path)) for label, path in simulated.items()]
    figure = plots.throughput_and_queue_figure(runs)
    top, bottom = figure.axes
    assert figure.get_suptitle() == "Throughput and queue depth over time"
    assert top.get_ylabel() == "throughput (samples/s)" and bottom.get_ylabel() == "queue depth (groups)"
    assert bottom.get_xlabel() == "time (s)"
    assert top.get_title(loc="left").startswith("Throughput") and bottom.get_title(loc="left").startswith("Finished")
    labels = [label for label, _ in runs]
    assert legend_texts(top) == [f"{label}: {line}" for label in labels for line in ("trained", "generated")]
    assert legend_texts(bottom) == labels
    for (_, events), trained, queue in zip(runs, top.get_lines()[::2], bottom.get_lines(), strict=True):
        edges, rates = plots.trained_rate(events)
        assert trained.get_xdata().tolist() == edges.tolist()
        assert trained.get_ydata()[:-1].tolist() == pytest.approx(rates.tolist())
        times, depth = plots.queue_depth(events)
        assert queue.get_xdata().tolist() == times.tolist() and queue.get_ydata().tolist() == depth.tolist()


def test_predicted_vs_measured_bars_are_the_compared_figures(simulated: dict[str, Path]) -> None:
    sync, asynchronous = simulated["sync"], simulated["async"]
    wall = {label: compare.load_summary(path).wall_time_s for label, path in simulated.items()}
    stale = {label: compare.load_summary(path).staleness.mean for label, path in simulated.items()}
    two_panels = plots.predicted_vs_measured_figure(compare.compare_runs(sync, asynchronous))
    assert [ax.get_ylabel() for ax in two_panels.axes] == ["wall time (s)", "staleness (steps)"]
    comparison = compare.compare_runs(sync, asynchronous, (sync, asynchronous, sync, asynchronous))
    figure = plots.predicted_vs_measured_figure(comparison)
    assert figure.get_suptitle() == "Predicted (A) vs predicted (B)"  # two simulator runs
    assert [ax.get_ylabel() for ax in figure.axes] == ["wall time (s)", "speedup (×)", "staleness (steps)"]
    speedup = wall["sync"] / wall["async"]
    expected = [(wall["sync"], wall["async"]), (speedup, speedup), (stale["sync"], stale["async"])]
    for ax, (a, b) in zip(figure.axes, expected, strict=True):
        assert [bar.get_height() for bar in ax.patches] == pytest.approx([a, b])  # two bars: A then B
        assert texts(ax.get_xticklabels()) == ["A", "B"]
        assert ax.get_title().endswith(f"B vs A: {compare.format_relative(compare.relative_error(a, b))}")
    assert figure.axes[0].get_title().startswith("wall time\n")
    assert legend_texts(figure) == [f"A: {sync} (simulator)", f"B: {asynchronous} (simulator)"]


SIZING_HEADER = (
    "label,schedule,bound,colocated,generation_devices,training_devices,devices_per_engine,"
    "samples_per_s,step_s,staleness_mean,staleness_max,generation_utilization,training_utilization,dropped\n"
)


def test_sizing_figure_has_a_line_per_schedule_and_tp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    csv = tmp_path / "size.csv"
    csv.write_text(
        SIZING_HEADER + "sync colocated 4 tp1 (baseline),sync,0,True,4,4,1,2.0,10,0.0,0,0.5,0.2,0\n"
        "streaming-2 1:3 tp1,streaming,2,False,1,3,1,1.5,12,1.2,2,0.9,0.3,0\n"
        "streaming-2 2:2 tp1,streaming,2,False,2,2,1,3.0,8,1.4,2,0.8,0.6,0\n"
        "streaming-2 3:1 tp1,streaming,2,False,3,1,1,2.5,9,1.1,2,0.4,0.9,0\n"
        "streaming-2 2:2 tp2,streaming,2,False,2,2,2,2.8,8,1.3,2,0.7,0.6,0\n"
    )
    table = sizing.read_sizing(csv)
    assert table["colocated"].tolist() == [True, False, False, False, False]
    assert table["generation_devices"].tolist()[1:] == [1, 2, 3, 2]
    assert table["devices_per_engine"].tolist()[1:] == [1, 1, 1, 2]
    assert table["bound"].tolist() == [0, 2, 2, 2, 2] and table["generation_utilization"].iloc[0] == 0.5
    drawn = []
    save = plots._save
    monkeypatch.setattr(plots, "_save", lambda figure, out: drawn.append(figure) or save(figure, out))
    assert is_png(plots.sizing(csv, tmp_path / "sizing.png"))
    (figure,) = drawn
    assert figure.get_suptitle() == "Sizing: generation:training split of 4 devices"
    throughput, staleness = figure.axes
    assert throughput.get_ylabel() == "throughput (samples/s)" and staleness.get_ylabel() == "mean staleness (steps)"
    names = ["streaming-2 tp1", "streaming-2 tp2", "sync colocated 4 tp1 (baseline)"]
    for ax, column in ((throughput, "samples_per_s"), (staleness, "staleness_mean")):
        assert ax.get_xlabel() == "generation:training devices"
        assert texts(ax.get_xticklabels()) == ["1:3", "2:2", "3:1"]
        lines = {line.get_label(): line for line in ax.get_lines()}
        assert list(lines) == names  # one line per schedule and tp, then the baseline
        values = table[column].tolist()
        assert lines[names[0]].get_xdata().tolist() == [1, 2, 3]
        assert lines[names[0]].get_ydata().tolist() == values[1:4]
        assert lines[names[1]].get_ydata().tolist() == [values[4]]
        assert set(lines[names[2]].get_ydata()) == {values[0]}
    assert legend_texts(throughput) == names


def test_sizing_csv_without_tidy_columns_is_a_one_line_error(tmp_path: Path) -> None:
    old = tmp_path / "old.csv"
    old.write_text("schedule split tp,samples/s,stale mean\nstreaming η=2 2:2 tp1,3.0,1.4\n")
    with pytest.raises(ScenarioError, match=r"not an `asyncrl size` CSV \(missing columns schedule, bound"):
        sizing.read_sizing(old)
    wrong = tmp_path / "wrong.csv"
    wrong.write_text(SIZING_HEADER + "x,streaming,2,maybe,2,2,1,3.0,8,1.4,2,0.8,0.6,0\n")
    with pytest.raises(ScenarioError, match="wrong kind"):
        sizing.read_sizing(wrong)


@pytest.mark.slow
def test_size_command_csv_plots_as_written(tmp_path: Path, capsys) -> None:
    out = tmp_path / "size.csv"
    args = ["size", "quickstart", "--devices", "8", "--steps", "3", "--splits", "2", "--kind", "streaming"]
    assert main([*args, "--max-staleness", "1", "--max-staleness", "2", "--out", str(out), "--quiet"]) == 0
    table = sizing.read_sizing(out)
    assert set(table["schedule"]) == {"sync", "streaming"} and set(table["bound"]) == {0, 1, 2}
    assert is_png(plots.sizing(out, tmp_path / "sizing.png"))


def test_queue_depth_and_rates_on_hand_events() -> None:
    events = hand_events()
    times, depth = plots.queue_depth(events)
    assert times.tolist() == [0.0, 3.0, 3.5] and depth.tolist() == [0.0, 1.0, 0.0]  # group 0 waits 3 → 3.5
    edges, rates = plots.trained_rate(events)
    assert edges.tolist() == [0.0, 5.0] and rates.tolist() == [pytest.approx(2 / 5)]
    assert plots.busy_intervals(np.array([0.0, 1.0, 5.0]), np.array([2.0, 3.0, 6.0])) == [(0.0, 3.0), (5.0, 1.0)]


# ── report ──────────────────────────────────────────────────────────────────────


@pytest.mark.slow
def test_report_command_writes_a_page_of_existing_pngs(simulated: dict[str, Path], tmp_path: Path, capsys) -> None:
    out = tmp_path / "report"
    assert main(["report", str(simulated["sync"]), str(simulated["async"]), "--out", str(out)]) == 0
    assert str(out / "index.html") in capsys.readouterr().out
    page = (out / "index.html").read_text()
    images = [part.split("'")[0] for part in page.split("<img src='")[1:]]
    assert set(images) == {
        "timeline.png",
        "staleness.png",
        "throughput.png",
        "breakdown.png",
        "predicted-vs-measured.png",
    }
    assert all(is_png(out / name) for name in images)
    assert "Comparison" in page and (out / "comparison.json").is_file()
    for label in ("sync", "async"):
        check_chrome_trace(trace.read_chrome_trace(out / f"trace-{label}.json.gz"))
        assert f"trace-{label}.json.gz" in page


@pytest.mark.slow
def test_report_of_one_run_has_no_comparison(simulated: dict[str, Path], tmp_path: Path) -> None:
    files = report.write_report([simulated["async"]], tmp_path / "one")
    assert files.comparison is None and len(files.traces) == 1
    assert "Comparison" not in files.index.read_text()


def test_run_labels_stay_unique() -> None:
    assert report.run_labels([Path("/x/a/run"), Path("/x/b/run")]) == ["a/run", "b/run"]
    assert report.run_labels([Path("/x/sync"), Path("/x/async")]) == ["sync", "async"]
    assert report.file_stem("a/run η=2") == "a-run-2"


@pytest.mark.slow
def test_plots_and_trace_accept_a_run_without_events(tmp_path: Path) -> None:
    empty = empty_events()
    (panel,) = plots.timeline_figure([("empty", empty)]).axes
    assert panel.get_title(loc="left") == "empty: wall 0.0 s" and "no spans recorded" in texts(panel.texts)
    top, bottom = plots.throughput_and_queue_figure([("empty", empty)]).axes
    assert legend_texts(top) == ["empty: generated"] and legend_texts(bottom) == ["empty"]  # no step, no trained line
    (ax,) = plots.staleness_figure([("empty", {})]).axes
    assert [bar.get_height() for bar in ax.patches] == [0.0] and legend_texts(ax) == ["empty (mean 0.00)"]
    assert is_png(plots.timeline([("empty", empty)], tmp_path / "t.png"))
    assert is_png(plots.throughput_and_queue([("empty", empty)], tmp_path / "q.png"))
    assert is_png(plots.staleness_histogram([("empty", {})], tmp_path / "s.png"))
    assert check_chrome_trace(trace.chrome_trace(empty)) == []
