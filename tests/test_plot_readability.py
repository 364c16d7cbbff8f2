"""Plots a new user found hard to read (issue 22): clipped titles, a 100-step timeline drawn as solid stripes, the
lengths plot's y-axis set by a spike at the cap, a speedup panel titled with the wrong sides."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from asyncrl.analysis.fits.lengths import Lengths, fit_all
from asyncrl.analysis.plots import plots
from asyncrl.analysis.plots.canvas import TITLE_CHARS, with_context
from asyncrl.analysis.plots.length_plots import length_figure
from asyncrl.analysis.records.compare import compare_speedup, compare_summaries
from asyncrl.analysis.records.event_series import AUTO_WINDOW_STEPS, auto_window
from asyncrl.scenarios.spec.loading import load_scenario
from asyncrl.simulator.simulation import simulate

from asyncrl.cli import main


@pytest.fixture(scope="module")
def long_runs() -> list:
    """quickstart for 40 steps, sync and streaming: many more steps than a timeline can show as spans."""
    return [simulate(load_scenario("quickstart", ["run.steps=40", *extra])) for extra in (["schedule.kind=sync"], [])]


def test_titles_are_wrapped_not_cut() -> None:
    """breakdown.png and predicted-vs-measured.png cut their context lines at the figure's edge."""
    context = "a: " + "llama-3.1-8b on 8+8 h100 (tp1), streaming-2, 64×8 per step, lognormal median 1024 " * 3
    lines = with_context("Where device time goes", context).splitlines()
    assert len(lines) > 2 and max(len(line) for line in lines) <= TITLE_CHARS
    assert " ".join(lines[1:]).split() == context.split()  # nothing dropped


def test_a_saved_figure_holds_its_whole_title(tmp_path: Path) -> None:
    from asyncrl.analysis.plots.canvas import new_figure, save_png
    from PIL import Image

    figure = new_figure(4.0, 3.0)
    figure.subplots().set_title("x" * 200)  # one word far wider than the figure: it cannot be wrapped
    out = save_png(figure, tmp_path / "wide.png")
    assert Image.open(out).size[0] > 4.0 * 120  # the canvas grew to hold it (bbox_inches="tight")


def test_a_long_run_timeline_shows_its_first_steps_and_says_so(long_runs: list) -> None:
    events = [result.events for result in long_runs]
    auto = auto_window(events)
    assert auto is not None and (auto.shown, auto.steps) == (AUTO_WINDOW_STEPS, 40)
    for run in events:  # every run shows at least its first steps
        trained = np.sort(run.loc[run["kind"] == "train", "end"].to_numpy())
        assert trained[AUTO_WINDOW_STEPS - 1] <= auto.window[1] < trained[-1]
    assert auto.line().startswith(f"Shown: the first {AUTO_WINDOW_STEPS} of 40 learner steps")
    figure = plots.timeline_figure([("sync", events[0]), ("async", events[1])], auto.window)
    assert "shown from 0 to " in figure.axes[-1].get_xlabel() and "(40 learner steps)" in figure.axes[-1].get_xlabel()
    short = [run[run["step"] < 5] for run in events]
    assert auto_window(short) is None  # few steps: drawn whole


@pytest.mark.slow
def test_the_report_caption_says_the_timeline_is_a_window(long_runs: list, tmp_path: Path, capsys) -> None:
    from asyncrl.scenarios.record.record import write_run
    from asyncrl.scenarios.spec.loading import dump_scenario

    runs = []
    for name, result in zip(("sync", "async"), long_runs, strict=True):
        write_run(tmp_path / name, scenario_yaml=dump_scenario(result.scenario.resolved()), events=result.events,
                  summary=result.summary)  # fmt: skip
        runs.append(str(tmp_path / name))
    assert main(["report", *runs, "--out", str(tmp_path / "report")]) == 0
    assert (
        f"Shown: the first {AUTO_WINDOW_STEPS} of 40 learner steps" in (tmp_path / "report" / "index.html").read_text()
    )
    assert main(["report", *runs, "--out", str(tmp_path / "report"), "--window", "0:100"]) == 0
    assert "Shown: 0 s to 100 s." in (tmp_path / "report" / "index.html").read_text()
    capsys.readouterr()


def test_a_spike_at_the_cap_does_not_set_the_lengths_axis(tmp_path: Path) -> None:
    """The fit's mass at the cap, one narrow bin on a log axis, flattened the data under it."""
    rng = np.random.default_rng(1)
    values = np.minimum(np.maximum(np.rint(np.exp(rng.normal(np.log(800), 1.0, 5000))), 1), 2048).astype(np.int64)
    lengths = Lengths(tmp_path / "log.jsonl", "response_length", values, "tokens", "as logged", False)
    figure = length_figure(lengths, fit_all(values, 2048))
    ax = figure.axes[0]
    assert "the last bin (up to 2,048) runs off the scale; its share: observed 20%" in ax.get_title()
    body_top = ax.get_ylim()[1]
    assert body_top < 2.0  # the body's density (about 1 per decade), not the cap's (above 4)


def test_a_speedup_panel_of_other_runs_says_whose_speedups_it_shows(long_runs: list) -> None:
    """Two measured runs compared, with the speedup of measured against predicted: not "measured vs measured"."""
    sync, streaming = (result.summary for result in long_runs)
    executed = [summary.model_copy(update={"backend": "executor"}) for summary in (sync, streaming)]
    comparison = compare_summaries(
        executed[0], executed[1], speedup=compare_speedup(executed[0], executed[1], sync, streaming)
    )
    figure = plots.predicted_vs_measured_figure(comparison)
    titles = [ax.get_title() for ax in figure.axes]
    assert any(title.startswith("speedup sync/async: measured (a) vs predicted (b)") for title in titles), titles
    assert figure._suptitle is not None and figure._suptitle.get_text().startswith("Measured (A) vs measured (B)")


def test_sizing_lines_on_one_another_stay_apart_and_unfit_splits_are_marked(tmp_path: Path) -> None:
    """Equal lines hid each other, and splits left out for memory were not there at all."""
    from asyncrl.analysis.plots.table_plots import sizing_figure
    from asyncrl.analysis.summaries.sizing import read_sizing

    from tests.test_plots import SIZING_HEADER

    csv = tmp_path / "size.csv"
    csv.write_text(
        SIZING_HEADER + "sync colocated 4 tp1 (baseline),sync,0,True,4,4,1,2.0,10,0.0,0,0.5,0.2,0\n"
        "streaming-2 1:3 tp1,streaming,2,False,1,3,1,1.5,12,2.0,2,0.9,0.3,0\n"
        "streaming-2 2:2 tp1,streaming,2,False,2,2,1,3.0,8,2.0,2,0.8,0.6,0\n"
        "streaming-2 1:3 tp2,streaming,2,False,1,3,2,1.5,12,2.0,2,0.9,0.3,0\n"
        "streaming-2 2:2 tp2,streaming,2,False,2,2,2,3.0,8,2.0,2,0.8,0.6,0\n"
    )
    table = read_sizing(csv)
    unfit = table.iloc[[1]].assign(fits=False, generation_devices=3, training_devices=1)
    figure = sizing_figure(pd.concat([table, unfit], ignore_index=True), csv)
    staleness = figure.axes[1]
    lines = {line.get_label(): line for line in staleness.get_lines()}
    tp1, tp2 = lines["streaming-2 tp1"], lines["streaming-2 tp2"]
    assert list(tp1.get_ydata()) == list(tp2.get_ydata())  # the same figures...
    assert tp1.get_marker() != tp2.get_marker() and all(tp1.get_xdata() < tp2.get_xdata())  # ...told apart
    left_out = lines["left out: does not fit in memory (1)"]
    assert left_out.get_marker() == "x" and list(left_out.get_xdata()) == [3]


def test_a_sweep_line_without_points_has_no_legend_entry() -> None:
    from asyncrl.analysis.plots.table_plots import sweep_figure

    table = pd.DataFrame(
        {"a": [1, 2, 1, 2], "b": ["x", "x", "y", "y"], "samples_per_s": [1.0, 2.0, float("nan"), float("nan")]}
    )
    ax = sweep_figure(table, ["a", "b"], "samples_per_s", "s").axes[0]
    assert [line.get_label() for line in ax.get_lines()] == ["b=x"]
    assert [text.get_text() for text in ax.get_legend().get_texts()] == ["b=x"]
    assert any("no point (skipped): b=y" in text.get_text() for text in ax.texts)


def test_the_frontier_is_not_zoomed_onto_noise() -> None:
    from asyncrl.analysis.plots.study_plots import MIN_REWARD_SPAN, frontier_figure

    summary = pd.DataFrame(
        {
            "loss": ["grpo", "grpo"],
            "correction": ["clip", "clip"],
            "schedule": ["sync", "streaming-1"],
            "kind": ["sync", "streaming"],
            "in_flight_updates": [False, False],
            "kl_final": [0.0101, 0.0102],
            "final_reward": [0.501, 0.503],  # a hundredth apart: noise
            "final_reward_ci": [float("nan"), float("nan")],
        }
    )
    ax = frontier_figure(summary, "t").axes[0]
    low, high = ax.get_ylim()
    assert high - low >= MIN_REWARD_SPAN and low < 0.501 and high > 0.503
    assert ax.get_xlim()[0] == 0
