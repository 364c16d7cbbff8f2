"""A report directory for one or more runs: figures, traces and an index.html that shows them.

run dirs ─► summaries, events ─► plots (PNG) ─┐
                              ─► traces      ─┼─► index.html (summary tables, comparison, figures, trace links)
two runs ─► comparison.json ──────────────────┘

report/
  index.html              the page; open it in a browser
  timeline.png            one panel per run on a shared time axis
  staleness.png           normalized staleness histograms, overlaid
  throughput.png          throughput and queue depth over time
  breakdown.png           where device time goes, a stacked bar per run (runs whose summary has a breakdown)
  predicted-vs-measured.png, comparison.json    when two runs are given (first = A, second = B)
  sizing.png              when a sizing CSV is given
  trace-<run>.json.gz     per run, gzipped, for ui.perfetto.dev or chrome://tracing

The page opens with each run's scenario essentials (model, devices and split, schedule, batch,
lengths, from its ``scenario.yaml``), and every figure's title says them too. ``window`` limits the
timeline to a span of time.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ...scenarios.files.writing import write_text
from ...scenarios.record.record import RunSummary
from ..records.compare import (
    FIGURES,
    TABLE_HEADER,
    Comparison,
    RunRecordError,
    SpeedupComparison,
    compare_speedup,
    compare_summaries,
    figure_value,
    load_events,
    load_summary,
    table_rows,
    write_comparison,
)
from ..records.essentials import essentials, essentials_rows, run_scenario
from ..records.event_series import auto_window
from ..records.trace import write_chrome_trace
from ..statuses import unfinished_note
from ..summaries.sizing import read_sizing
from ..tables import format_cell
from . import plots


@dataclass(frozen=True)
class Run:
    label: str
    path: Path
    summary: RunSummary
    events: pd.DataFrame
    scenario: Any = None  # the run's resolved Scenario, None where its scenario.yaml is unreadable

    @property
    def essentials(self) -> str:
        return essentials(self.scenario) if self.scenario is not None else "scenario unknown"


@dataclass
class ReportFiles:
    index: Path
    figures: list[Path] = field(default_factory=list)
    traces: list[Path] = field(default_factory=list)
    comparison: Path | None = None
    notes: list[str] = field(default_factory=list)  # runs that did not complete
    captions: list[str] = field(default_factory=list)  # one per figure


def run_labels(run_dirs: Sequence[Path]) -> list[str]:
    """Short unique labels: the directory name, or more of the path where names repeat."""
    parts = [run_dir.resolve().parts for run_dir in run_dirs]
    depth = 1
    while depth < max(len(p) for p in parts):
        labels = ["/".join(p[-depth:]) for p in parts]
        if len(set(labels)) == len(labels):
            return labels
        depth += 1
    return [f"{index}:{'/'.join(p[-1:])}" for index, p in enumerate(parts)]


def file_stem(label: str) -> str:
    """A label made safe for a file name."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", label).strip("-") or "run"


def load_runs(run_dirs: Sequence[Path]) -> list[Run]:
    labels = run_labels(run_dirs)
    return [
        Run(label, run_dir, load_summary(run_dir), load_events(run_dir), run_scenario(run_dir))
        for label, run_dir in zip(labels, run_dirs, strict=True)
    ]


def write_report(
    run_dirs: Sequence[Path],
    out: Path,
    *,
    speedup_dirs: tuple[Path, Path, Path, Path] | None = None,
    sizing_csv: Path | None = None,
    window: plots.Window | None = None,
) -> ReportFiles:
    """Every applicable figure, a trace per run and index.html, written to ``out``; ``window`` (start, end
    in seconds) limits the timeline."""
    if speedup_dirs and len(run_dirs) != 2:
        raise RunRecordError("speedup: a report compares speedups only between exactly two runs")
    if sizing_csv is not None:
        read_sizing(sizing_csv)  # a bad CSV fails before anything is drawn
    runs = load_runs(run_dirs)
    speedup = compare_speedup(*(load_summary(path) for path in speedup_dirs)) if speedup_dirs else None
    comparison = _comparison(runs, speedup)
    out.mkdir(parents=True, exist_ok=True)
    files = ReportFiles(index=out / "index.html", notes=unfinished_notes(runs))
    if comparison is not None:
        files.comparison = write_comparison(comparison, out / "comparison.json")
    captions = _draw_figures(runs, comparison, sizing_csv, out, window)
    files.figures = [path for path, _ in captions]
    files.captions = [caption for _, caption in captions]
    files.traces = [
        write_chrome_trace(run.events, out / f"trace-{stem}.json.gz", run_label=run.label)
        for run, stem in zip(runs, trace_stems(runs), strict=True)
    ]
    write_text(files.index, _page(runs, comparison, captions, files.traces))
    return files


@dataclass
class Section:
    """One part of an overview page: a heading, a line under it, and a report written below the page's folder."""

    title: str
    about: str
    files: ReportFiles


def write_overview(
    out: Path, title: str, table: tuple[Sequence[str], Sequence[Sequence[Any]]], sections: Sequence[Section]
) -> Path:
    """``out/index.html``: a table, then every section's figures (its report's own PNGs, linked, not copied)
    under its heading, with a link to the section's full page (its traces, the comparison table)."""
    parts = [f"<h1>{html.escape(title)}</h1>", _html_table(*table)]
    for section in sections:
        page = _relative(section.files.index, out)
        parts += [
            f"<h2>{html.escape(section.title)}</h2>",
            f"<p>{html.escape(section.about)} The full report, with its traces: <a href='{page}'>{page}</a>.</p>",
            *(f"<p class='warning'>{html.escape(note)}</p>" for note in section.files.notes),
        ]
        parts += [
            f"<figure><img src='{_relative(path, out)}' alt='{html.escape(section.title)}: {html.escape(path.stem)}'>"
            f"<figcaption>{html.escape(caption)}</figcaption></figure>"
            for path, caption in zip(section.files.figures, section.files.captions, strict=True)
        ]
    index = out / "index.html"
    write_text(index, _document(title, "\n".join(parts)))
    return index


def _relative(path: Path, start: Path) -> str:
    import os

    return html.escape(Path(os.path.relpath(path, start)).as_posix())


def report_lines(files: ReportFiles, run_dirs: Sequence[Path]) -> str:
    """What a report wrote, for the terminal."""
    lines = [
        f"wrote {files.index}",
        f"  figures: {', '.join(path.name for path in files.figures)}",
        f"  traces:  {', '.join(path.name for path in files.traces)}",
    ]
    if files.comparison is not None:
        lines.append(f"  comparison: {files.comparison.name} (B = {run_dirs[1]} against A = {run_dirs[0]})")
    lines += [f"note: {note}" for note in files.notes]
    return "\n".join(lines)


def unfinished_notes(runs: Sequence[Run]) -> list[str]:
    """A note per run that did not complete (an execution interrupted or failed)."""
    notes = [
        unfinished_note(
            run.label, run.summary.status, run.summary.steps, run.scenario.run.steps if run.scenario else None
        )
        for run in runs
    ]
    return [note for note in notes if note is not None]


def trace_stems(runs: Sequence[Run]) -> list[str]:
    """File-safe run labels, numbered where two labels would give the same file name."""
    stems = [file_stem(run.label) for run in runs]
    return stems if len(set(stems)) == len(stems) else [f"{index}-{stem}" for index, stem in enumerate(stems)]


def _draw_figures(
    runs: Sequence[Run],
    comparison: Comparison | None,
    sizing_csv: Path | None,
    out: Path,
    window: plots.Window | None = None,
) -> list[tuple[Path, str]]:
    """Each applicable figure as (PNG path, caption)."""
    events = [(run.label, run.events) for run in runs]
    histograms = [(run.label, run.summary.staleness.histogram) for run in runs]
    context = figure_context(runs)
    auto = auto_window([run.events for run in runs]) if window is None else None
    drawn = auto.window if auto is not None else window
    timeline = plots.timeline(events, out / "timeline.png", drawn, [run.essentials for run in runs])
    shown = f" Shown: {window[0]:g} s to {_end(window)}." if window else f" {auto.line()}" if auto else ""
    captions = [
        (timeline, TIMELINE_TEXT + shown),
        (plots.staleness_histogram(histograms, out / "staleness.png", context), STALENESS_TEXT),
        (plots.throughput_and_queue(events, out / "throughput.png", context), THROUGHPUT_TEXT),
    ]
    broken_down = [(run.label, run.summary) for run in runs if run.summary.breakdown is not None]
    if broken_down:
        captions.append((plots.breakdown(broken_down, out / "breakdown.png", context), BREAKDOWN_TEXT))
    if comparison is not None:
        figure = plots.predicted_vs_measured(comparison, out / "predicted-vs-measured.png", context)
        captions.append((figure, COMPARE_TEXT))
    if sizing_csv is not None:
        captions.append((plots.sizing(sizing_csv, out / "sizing.png"), f"Sizing sweep from {sizing_csv}."))
    return captions


TIMELINE_TEXT = (
    "Busy spans per worker, one panel per run on a shared time axis; grey is idle; red ticks are rollouts "
    "dropped as too stale."
)
STALENESS_TEXT = "Share of trained samples by staleness (learner steps), normalized per run."
THROUGHPUT_TEXT = (
    "Trained samples per second over each learner step, finished rollouts per second, and finished groups "
    "waiting for the learner (from a group's last rollout to the start of the step that trains it)."
)
BREAKDOWN_TEXT = (
    "Device-hours per learner step of each run, split by role and by what the devices did (summary.json's "
    "breakdown); the executor cannot tell prefill from decode nor measure communication apart, so it shows none."
)
COMPARE_TEXT = (
    "Run A (first) against run B (second), titled by their backends (the simulator predicts, the executor "
    "measures); a speedup panel appears when speedup runs are given."
)


def figure_context(runs: Sequence[Run]) -> str:
    """What the runs were, for a figure title: one line when they share a scenario, else one per run."""
    unique = list(dict.fromkeys(run.essentials for run in runs))
    if len(unique) == 1:
        return unique[0]
    return "\n".join(f"{run.label}: {run.essentials}" for run in runs)


def _end(window: plots.Window) -> str:
    return f"{window[1]:g} s" if window[1] is not None else "the end"


def _comparison(runs: Sequence[Run], speedup: SpeedupComparison | None) -> Comparison | None:
    if len(runs) != 2:
        return None
    a, b = runs
    return compare_summaries(a.summary, b.summary, a_label=a.label, b_label=b.label, speedup=speedup)


# ── the page ────────────────────────────────────────────────────────────────────

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1500px; padding: 0 1em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; display: block; max-width: 100%;
        overflow-x: auto; }
h1, h2, p, figcaption { overflow-wrap: anywhere; }
th, td { padding: 0.25em 0.8em; border-bottom: 1px solid #ddd; text-align: right; }
th:first-child, td:first-child { text-align: left; }
td.off { color: #b00020; font-weight: bold; }
figure { margin: 1.5em 0; }
figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { color: #555; font-size: 0.9em; }
code { background: #f4f4f4; padding: 0 0.2em; }
p.warning { color: #b00020; font-weight: bold; }
"""


def _page(
    runs: Sequence[Run], comparison: Comparison | None, captions: Sequence[tuple[Path, str]], traces: Sequence[Path]
) -> str:
    sections = [
        f"<h1>asyncrl report: {html.escape(', '.join(run.label for run in runs))}</h1>",
        "<h2>Scenario</h2>",
        _html_table(["", *(run.label for run in runs)], _scenario_rows(runs)),
        "<h2>Runs</h2>",
        *(f"<p class='warning'>{html.escape(note)}</p>" for note in unfinished_notes(runs)),
        _html_table(["figure", *(run.label for run in runs)], _summary_rows(runs)),
    ]
    if comparison is not None:
        sections += [
            f"<h2>Comparison: B = {html.escape(comparison.b_label)} against A = {html.escape(comparison.a_label)}</h2>",
            "<p>Relative error is (B − A) / A; the histogram row is the total variation distance. "
            "Also written to <a href='comparison.json'>comparison.json</a>.</p>",
            _html_table(TABLE_HEADER, table_rows(comparison)),
        ]
    sections.append("<h2>Figures</h2>")
    sections += [
        f"<figure><img src='{html.escape(path.name)}' alt='{html.escape(path.stem)}'>"
        f"<figcaption>{html.escape(caption)}</figcaption></figure>"
        for path, caption in captions
    ]
    links = "".join(f"<li><a href='{html.escape(path.name)}'>{html.escape(path.name)}</a></li>" for path in traces)
    sections += [
        "<h2>Traces</h2>",
        "<p>Open in <code>https://ui.perfetto.dev</code> or <code>chrome://tracing</code>.</p>",
        f"<ul>{links}</ul>",
    ]
    return _document("asyncrl report", "\n".join(sections))


def _document(title: str, body: str) -> str:
    return (
        f"<!doctype html>\n<html><head><meta charset='utf-8'>"
        f"<meta name='viewport' content='width=device-width, initial-scale=1'><title>{html.escape(title)}</title>"
        f"<style>{STYLE}</style></head>\n<body>\n{body}\n</body></html>\n"
    )


def _scenario_rows(runs: Sequence[Run]) -> list[list[Any]]:
    """The essentials of each run's scenario, one field per row."""
    fields = [essentials_rows(run.scenario) for run in runs]
    rows: list[list[Any]] = [["scenario", *(run.summary.scenario for run in runs)]]
    rows += [[name, *(field[name] for field in fields)] for name in fields[0]]
    return rows


def _summary_rows(runs: Sequence[Run]) -> list[list[Any]]:
    rows: list[list[Any]] = [
        ["backend", *(run.summary.backend for run in runs)],
        ["scenario", *(run.summary.scenario for run in runs)],
        ["steps", *(run.summary.steps for run in runs)],
    ]
    rows += [[label, *(figure_value(run.summary, path) for run in runs)] for _, label, path in FIGURES]
    rows.append(["weight sync per engine (s)", *(run.summary.weight_sync_s for run in runs)])
    hours = [run.summary.device_hours for run in runs]
    rows.append(["device-hours per step", *(figures.per_step if figures else "-" for figures in hours)])
    rows.append(["device-hours per 1,000 samples", *(figures.per_1k_samples if figures else "-" for figures in hours)])
    samples = [run.summary.samples for run in runs]
    rows.append(["samples generated", *(counts.generated for counts in samples)])
    rows.append(["samples trained", *(counts.trained for counts in samples)])
    rows.append(["samples dropped", *(counts.dropped for counts in samples)])
    return rows


def _html_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{html.escape(str(cell))}</th>" for cell in header)
    body = "".join("<tr>" + "".join(_html_cell(cell) for cell in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _html_cell(value: Any) -> str:
    text = format_cell(value)
    return f"<td class='off'>{html.escape(text)}</td>" if text == "OFF" else f"<td>{html.escape(text)}</td>"
