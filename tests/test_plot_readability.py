"""Plots a new user found hard to read (issue 22): clipped titles, a 100-step timeline drawn as solid stripes, the
lengths plot's y-axis set by a spike at the cap, a speedup panel titled with the wrong sides."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from asyncrl.analysis import plots
from asyncrl.analysis.canvas import TITLE_CHARS, with_context
from asyncrl.analysis.compare import compare_speedup, compare_summaries
from asyncrl.analysis.event_series import AUTO_WINDOW_STEPS, auto_window
from asyncrl.analysis.length_plots import length_figure
from asyncrl.analysis.lengths import Lengths, fit_all
from asyncrl.scenarios.loading import load_scenario
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
    from asyncrl.analysis.canvas import new_figure, save_png
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


def test_the_report_caption_says_the_timeline_is_a_window(long_runs: list, tmp_path: Path, capsys) -> None:
    from asyncrl.scenarios.loading import dump_scenario
    from asyncrl.scenarios.record import write_run

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
