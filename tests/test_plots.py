"""Plots from small simulated runs and hand-made events: timeline, device time, staleness, throughput, the
comparison and sizing figures; and the report page that gathers them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from asyncrl.analysis.plots import plots, report, table_plots
from asyncrl.analysis.records import compare, trace
from asyncrl.analysis.summaries import sizing
from asyncrl.scenarios.record.record import empty_events, write_run
from asyncrl.scenarios.spec.loading import ScenarioError, dump_scenario, load_scenario
from asyncrl.simulator.simulation import simulate

from asyncrl.cli import main
from tests.run_records import check_chrome_trace, hand_events

# ── plots, from small simulated runs ────────────────────────────────────────────


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """quickstart for 5 steps, sync and streaming with a bound of 1 (whose stragglers are dropped)."""
    root = tmp_path_factory.mktemp("runs")
    runs = {}
    for label, overrides in (("sync", ["schedule.kind=sync"]), ("async", ["schedule.max_staleness=1"])):
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
    save = table_plots.save_png
    monkeypatch.setattr(table_plots, "save_png", lambda figure, out: drawn.append(figure) or save(figure, out))
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
        assert np.allclose(lines[names[0]].get_xdata(), [1, 2, 3], atol=0.2)  # nudged apart from tp2's line
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
