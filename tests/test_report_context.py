"""The report says what the runs were: scenario essentials on the page and in every figure title, honest
comparison titles from the runs' backends, no inf, gzipped traces, a timeline window with the drops on it."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from asyncrl.analysis.plots import plots, report
from asyncrl.analysis.records import compare
from asyncrl.analysis.records.essentials import essentials
from asyncrl.scenarios.record.record import write_run
from asyncrl.scenarios.spec.loading import dump_scenario, load_scenario
from asyncrl.simulator.simulation import simulate

from asyncrl.cli import main
from tests.test_analysis import B_CHANGES, hand_summary, write_hand_run

QUICKSTART = "llama-3.1-8b on 8+8 h100 (tp1), streaming-2, 64×8 per step, lognormal median 1024 σ 1 ≤ 8,192"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    scenario = load_scenario("quickstart", ["run.steps=6"])
    result = simulate(scenario)
    out = tmp_path_factory.mktemp("runs") / "quickstart"
    write_run(out, scenario_yaml=dump_scenario(scenario.resolved()), events=result.events, summary=result.summary)
    return out


def test_essentials_of_a_scenario() -> None:
    assert essentials(load_scenario("quickstart")) == QUICKSTART
    colocated = load_scenario(
        "quickstart", ["schedule.kind=sync", "cluster.colocated=true", "cluster.devices_per_engine=8"]
    )
    assert essentials(colocated).startswith("llama-3.1-8b on 8 h100 colocated (tp8), sync, 64×8 per step")


@pytest.mark.slow
def test_report_page_and_figure_titles_say_what_ran(run: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    titles: list[str] = []
    save = plots._save

    def keep_titles(figure, out):
        titles.append(
            " ".join(
                [figure.get_suptitle(), *(ax.get_title(loc=loc) for ax in figure.axes for loc in ("left", "center"))]
            )
        )
        return save(figure, out)

    monkeypatch.setattr(plots, "_save", keep_titles)
    out = tmp_path / "report"
    assert main(["report", str(run), "--out", str(out)]) == 0
    page = (out / "index.html").read_text()
    assert page.index("<h2>Scenario</h2>") < page.index("<h2>Runs</h2>")
    for field in ("llama-3.1-8b", "8+8 h100 (tp1)", "streaming-2", "64×8", "lognormal median 1024 σ 1 ≤ 8,192"):
        assert f"<td>{field}</td>" in page
    flat = [" ".join(title.split()) for title in titles]  # long titles are wrapped onto lines
    assert len(flat) == 4 and all(QUICKSTART in title for title in flat)  # with the breakdown bars


def test_traces_are_gzipped(run: Path, tmp_path: Path, capsys) -> None:
    assert main(["trace", str(run)]) == 0
    data = (run / "trace.json.gz").read_bytes()
    assert data[:2] == b"\x1f\x8b" and b'"traceEvents"' in gzip.decompress(data)
    assert main(["trace", str(run), "--out", str(tmp_path / "plain.json")]) == 0
    assert (tmp_path / "plain.json").read_bytes().startswith(b'{"traceEvents"')


@pytest.mark.slow
def test_timeline_window_and_drops(run: Path, tmp_path: Path, capsys) -> None:
    events = compare.load_events(run)
    dropped = events[events["kind"] == "drop"]
    assert len(dropped)
    figure = plots.timeline_figure([("q", events)], window=(100.0, 250.0))
    (ax,) = figure.axes
    assert ax.get_xlim() == (100.0, 250.0)
    wall = plots.run_wall(events)
    assert ax.get_xlabel().startswith(f"time (s), shown from 100 to 250 s of {wall:,.0f} s")
    assert [t.get_text() for t in ax.get_yticklabels()][-1] == f"dropped ({len(dropped):,})"
    open_ended = plots.timeline_figure([("q", events)], window=(100.0, None))
    assert open_ended.axes[0].get_xlim() == pytest.approx((100.0, plots.run_wall(events) * 1.01))
    assert main(["report", str(run), "--out", str(tmp_path / "r"), "--window", ":50"]) == 0
    assert "Shown: 0 s to 50 s." in (tmp_path / "r" / "index.html").read_text()


@pytest.mark.parametrize("text", ["50", "50:10", "a:b", "-1:5", "5:inf"])
def test_a_bad_window_is_one_line(text: str, run: Path, tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as done:
        main(["report", str(run), "--out", str(tmp_path / "r"), f"--window={text}"])
    assert done.value.code == 2
    assert capsys.readouterr().err == (
        f"asyncrl: error: --window: expected START:END in seconds with 0 ≤ START < END, got '{text}'\n"
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("backends", "title"),
    [
        (("simulator", "executor"), "Predicted (A) vs measured (B)"),
        (("simulator", "simulator"), "Predicted (A) vs predicted (B)"),
        (("executor", "executor"), "Measured (A) vs measured (B)"),
    ],
)
def test_comparison_titles_follow_the_backends_and_show_no_inf(backends, title, tmp_path: Path) -> None:
    a = write_hand_run(tmp_path / "a", hand_summary(backend=backends[0]))
    b = write_hand_run(tmp_path / "b", hand_summary(**{**B_CHANGES, "backend": backends[1]}))
    figure = plots.predicted_vs_measured_figure(compare.compare_runs(a, b), context="ctx")
    assert figure.get_suptitle() == f"{title}\nctx"
    staleness = figure.axes[-1]  # from 0 in A to 0.5 in B: no ratio
    assert staleness.get_title() == "mean staleness\nB vs A: n/a"
    everything = [figure.get_suptitle(), *(ax.get_title() for ax in figure.axes)]
    everything += [text.get_text() for ax in figure.axes for text in ax.texts]
    assert not any("inf" in text for text in everything)
    files = report.write_report([a, b], tmp_path / "report")
    assert "inf" not in files.index.read_text().replace("info", "")
