"""``asyncrl study``: which schedule and loss reach a reward soonest, measured by running each for real.

    SCENARIO ─ --schedules × --losses × --corrections × --seeds ─► asyncrl.experiments.study_cells: cells, validated now
        a cell already finished (OUT/cells/<cell>/summary.json complete, same scenario) is kept;
        the others run, seeds outermost, each from scratch (asyncrl.experiments.study_runs):
            local: a worker process (--workers, default 1) ─► executor.processes.runtime.execute ─► OUT/cells/<cell>/
            ray:   one Ray task per cell (num_cpus: the cell's devices), the same call inside
    ─► analysis.summaries.study: cells.csv, curves.csv; analysis.summaries.study_summary: summary.csv, robustness.csv;
       analysis.plots.study_plots: *.png

OUT is a study's directory (empty, or with its ``study.json``), locked while the study runs by
``scenarios.record.outputs.lock_directory`` (OUT/.asyncrl-study), the lock runs take on their directories.

**Resuming.** Running the same command again keeps every finished cell and reruns the rest from
scratch (an interrupted or failed cell's directory is removed first); a finished cell whose
scenario differs from the cell's now (other ``--steps`` or ``--set``) is rerun too. Only the tables
are rebuilt from the directories, so another ``--target`` costs no run at all.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from asyncrl.analysis.statuses import COMPLETE
from asyncrl.analysis.summaries.study import run_finished, study_tables, write_csv
from asyncrl.analysis.summaries.study_summary import robustness_lines, robustness_table, summary_lines, summary_table
from asyncrl.scenarios.files.textfile import safe_load
from asyncrl.scenarios.files.writing import write_text
from asyncrl.scenarios.record.outputs import OutputError, is_run_record, lock_directory
from asyncrl.scenarios.spec.loading import dump_scenario
from tqdm import tqdm

from asyncrl.experiments.holdout import HOLDOUT_FILE, PENALTY_FILE, check_holdout, holdout_lines, write_study_penalty
from asyncrl.experiments.study_cells import Cell, StudyOptions, build_cells, check_cells, check_options
from asyncrl.experiments.study_runs import Outcome, run_locally, run_on_ray

STUDY_FILE = "study.json"
LOCK_FILE = ".asyncrl-study"


@dataclass(frozen=True)
class StudyResult:
    cells: Any  # cells.csv as a frame
    summary: Any
    robustness: Any
    lines: str
    files: list[Path]
    ran: list[Outcome] = field(default_factory=list)
    kept: int = 0

    @property
    def failed(self) -> bool:
        return bool((self.cells["status"] != COMPLETE).any())


def run_study(options: StudyOptions, say: Callable[[str], None] = print) -> StudyResult:
    """Build the grid, run the cells not finished yet, write the tables and plots; return them."""
    check_options(options)
    cells = build_cells(options)
    check_cells([cell for cell in cells if not _finished(cell)], options.device)  # none: no torch to import
    with _study_directory(options.out):
        todo = [cell for cell in _run_order(cells) if not _finished(cell)]
        _check_cell_directories(todo)  # a cell's directory is removed before it runs: only a run record's
        _write_settings(options, cells)
        stale = [cell for cell in todo if run_finished(cell.out)]
        if stale:
            say(f"note: {len(stale)} finished cells ran another scenario (other --steps or --set): running them again")
        kept = len(cells) - len(todo)
        say(_plan_line(cells, kept, options))
        outcomes = list(_run_all(todo, options, kept, len(cells)))
        return _tables(options, cells, outcomes, kept)


def _run_order(cells: Sequence[Cell]) -> list[Cell]:
    """Seeds outermost: an interrupted study has whole replicates of the grid, not all seeds of a few cells."""
    seeds = list(dict.fromkeys(cell.key.seed for cell in cells))
    return sorted(cells, key=lambda cell: seeds.index(cell.key.seed))


def _finished(cell: Cell) -> bool:
    """Its run finished, with the scenario this cell runs now."""
    if not run_finished(cell.out):
        return False
    try:
        written = safe_load((cell.out / "scenario.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return False
    return written == safe_load(dump_scenario(cell.scenario.resolved()))


def _plan_line(cells: Sequence[Cell], kept: int, options: StudyOptions) -> str:
    first = cells[0].scenario
    runner = "Ray tasks" if options.runtime == "ray" else f"{_workers(options, len(cells))} worker process(es)"
    done = f"; {kept} already finished, kept" if kept else ""
    return (
        f"{first.name}: {len(cells)} cells, {first.run.steps} learner steps each, task {cells[0].key.task}, "
        f"target reward {options.target:g}, on {runner}{done}"
    )


def _workers(options: StudyOptions, count: int) -> int:
    if options.workers is not None:
        return options.workers
    return 1 if options.runtime == "local" else max(1, count)


def _run_all(todo: Sequence[Cell], options: StudyOptions, kept: int, total: int) -> Iterator[Outcome]:
    """Run the cells, at most ``--workers`` at once; yield each outcome as it ends, with a bar over cells."""
    if not todo:
        return
    run = run_on_ray if options.runtime == "ray" else run_locally
    with tqdm(total=total, initial=kept, desc="study", unit="cell", disable=options.quiet or None) as bar:
        for outcome in run(todo, _workers(options, len(todo)), options.device):
            bar.update()
            bar.set_postfix_str(f"{outcome.cell}: {outcome.status} in {outcome.seconds:.0f} s")
            yield outcome


# ── the study directory, tables and plots ───────────────────────────────────────


@contextlib.contextmanager
def _study_directory(out: Path) -> Iterator[Path]:
    """OUT made, checked to be a study's (or empty), and locked for this process while the study runs."""
    if out.exists() and not out.is_dir():
        raise OutputError(f"out: {out} is a file")
    if out.is_dir() and any(out.iterdir()) and not _is_study(out):
        raise OutputError(f"out: {out} holds files that are not a study's; choose an empty directory")
    out.mkdir(parents=True, exist_ok=True)
    lock = lock_directory(out, lock_file=LOCK_FILE, writer="study")
    try:
        yield out
    finally:
        os.close(lock)


def _is_study(out: Path) -> bool:
    """OUT holds a study.json this command wrote (a mapping of the study's settings), not a stray file of the name."""
    try:
        settings = json.loads((out / STUDY_FILE).read_text())
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(settings, dict) and {"scenario", "schedules", "losses", "seeds", "cells"} <= settings.keys()


def _check_cell_directories(cells: Sequence[Cell]) -> None:
    """OutputError naming the first cell whose directory holds files that are not a run record (they would
    be removed with it when the cell runs again)."""
    for cell in cells:
        if cell.out.is_dir() and any(cell.out.iterdir()) and not is_run_record(cell.out):
            raise OutputError(
                f"out: {cell.out} holds files that are not a run record; move them, or choose another --out"
            )


def _write_settings(options: StudyOptions, cells: Sequence[Cell]) -> None:
    """OUT/study.json: what this study runs (it also marks OUT as a study's directory)."""
    settings = {
        "scenario": str(options.scenario),
        "overrides": list(options.overrides),
        "schedules": list(dict.fromkeys(cell.key.schedule for cell in cells)),
        "losses": list(dict.fromkeys(cell.key.loss for cell in cells)),
        "corrections": list(dict.fromkeys(cell.key.correction for cell in cells)),
        "seeds": list(dict.fromkeys(cell.key.seed for cell in cells)),
        "steps": cells[0].scenario.run.steps,
        "target": options.target,
        "runtime": options.runtime,
        "cells": [cell.key.cell for cell in cells],
    }
    write_text(options.out / STUDY_FILE, json.dumps(settings, indent=2) + "\n")


def _tables(options: StudyOptions, cells: Sequence[Cell], outcomes: list[Outcome], kept: int) -> StudyResult:
    out, steps = options.out, cells[0].scenario.run.steps
    reasons = {outcome.cell: outcome.reason for outcome in outcomes if outcome.status != COMPLETE}
    table, curves = study_tables([(cell.key, cell.out) for cell in cells], options.target, steps, reasons)
    summary = summary_table(table, curves)
    robustness = robustness_table(table)
    files = [
        write_csv(table, out / "cells.csv"),
        write_csv(curves, out / "curves.csv"),
        write_csv(summary, out / "summary.csv"),
        write_csv(robustness, out / "robustness.csv"),
    ]
    lines = [summary_lines(summary, options.target, steps), robustness_lines(robustness)]
    penalty, penalty_text = write_study_penalty(table, out)
    lines.append(penalty_text)
    if penalty is not None:
        files.append(out / PENALTY_FILE)
    if options.holdout is not None:
        held = check_holdout(table, {cell.key.cell: cell.out for cell in cells}, options.holdout, out, print)
        if held:
            lines.append(holdout_lines(held, options.target))
            files.append(out / HOLDOUT_FILE)
    text = "\n\n".join(lines)
    write_text(out / "table.txt", text + "\n")
    files.append(out / "table.txt")
    files.extend(_plots(options, table, curves, summary))
    ran = [outcome for outcome in outcomes if outcome.seconds == outcome.seconds]
    if ran:
        mean = sum(outcome.seconds for outcome in ran) / len(ran)
        text += f"\n\nran {len(ran)} cells, {mean:.1f} s each on average (process start-up included); kept {kept}"
    return StudyResult(table, summary, robustness, text, files, outcomes, kept)


def _plots(options: StudyOptions, cells: Any, curves: Any, summary: Any) -> list[Path]:
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None or not len(curves):
        return []
    from asyncrl.analysis.plots.study_plots import study_plots

    title = f"{cells['task'].iloc[0]} task, target reward {options.target:g}"
    return study_plots(curves, summary, options.target, title, options.out)
