"""``asyncrl study``: which schedule and loss reach a reward soonest, measured by running each for real.

    SCENARIO ─ --schedules × --losses × --corrections × --seeds ─► cells, each a Scenario validated now
        a cell already finished (OUT/cells/<cell>/summary.json complete, same scenario) is kept;
        the others run, seeds outermost, each from scratch:
            local: a worker process (--workers, default 1) ─► executor.runtime.execute ─► OUT/cells/<cell>/
            ray:   one Ray task per cell (num_cpus: the cell's devices), the same call inside
    ─► analysis.study: cells.csv, curves.csv, summary.csv, robustness.csv; analysis.study_plots: *.png

**Cells.** The grid (labels, lists, defaults) is ``asyncrl.grid``'s. Each cell is the scenario
with the user's overrides, then its schedule's, ``algorithm.loss``, ``algorithm.correction`` and
``run.seed`` (and ``run.steps`` with ``--steps``); its directory is
``<schedule>.<loss>.<correction>.s<seed>``. Every cell is loaded and checked (the executor's own
``check``, memory) before any runs, so a bad label, loss, correction or override is one line and
exit 2 with nothing run. A study needs task mode: a reward to reach.

**How a cell runs: the executor's Python API in a worker process**, not a ``python -m asyncrl
execute`` subprocess. The worker imports torch and transformers once and keeps them for every cell
it runs (seconds saved per cell on two cores); the scenario arrives typed and already validated; a
failure comes back as the exception's first line. Not in this process: a run owns its process's
torch threads and distributed group, and a cell that crashes its worker takes only that worker down
(the pool is replaced and the study goes on; the cell is recorded as failed).

**One worker by default.** Executor wall times are the measurement, and one cell already runs two
busy processes (an engine and the learner) on this two-core machine: a second cell at once would
slow both and bias every time to target. ``--workers N`` runs N at once where there are cores.

**On Ray** (``--runtime ray``) each cell is one Ray task asking for the cell's devices as CPUs, so
the grid fans out over a cluster's nodes while a cell's engine and learner stay together on one
node, run by the local runtime: its wall time is that of a local run, comparable between cells.
Ray joins ``RAY_ADDRESS`` or starts a local instance. ``--workers`` caps the cells in flight
(default: all; Ray queues them by resources). On several nodes OUT must be a shared file system.

**Resuming.** Running the same command again keeps every finished cell and reruns the rest from
scratch (an interrupted or failed cell's directory is removed first); a finished cell whose
scenario differs from the cell's now (other ``--steps`` or ``--set``) is rerun too. Only the tables
are rebuilt from the directories, so another ``--target`` costs no run at all.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from tqdm import tqdm

from asyncrl.analysis.study import (
    CellKey,
    robustness_lines,
    robustness_table,
    run_finished,
    study_tables,
    summary_lines,
    summary_table,
    write_csv,
)
from asyncrl.grid import (
    DEFAULT_CORRECTIONS,
    DEFAULT_LOSSES,
    DEFAULT_SCHEDULES,
    DEFAULT_SEEDS,
    DEFAULT_TARGET,
    correction_overrides,
    parse_losses,
    parse_schedules,
    parse_seeds,
    split_list,
)
from asyncrl.holdout import HOLDOUT_FILE, PENALTY_FILE, check_holdout, holdout_lines, write_study_penalty
from asyncrl.scenarios.loading import ScenarioError, dump_scenario, load_scenario
from asyncrl.scenarios.outputs import OutputError, safe_file_name
from asyncrl.scenarios.scenario import Scenario

STUDY_FILE = "study.json"
LOCK_FILE = ".asyncrl-study"
CELLS_DIR = "cells"
RUNTIMES = ("local", "ray")


# ── the grid ────────────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class Cell:
    """One run of the study: its keys (the tables' first columns), its scenario, where it writes."""

    key: CellKey
    scenario: Scenario
    out: Path


@dataclass(frozen=True)
class StudyOptions:
    scenario: str
    overrides: Sequence[str] = ()
    schedules: str = DEFAULT_SCHEDULES
    losses: str = DEFAULT_LOSSES
    corrections: str = DEFAULT_CORRECTIONS
    seeds: str = DEFAULT_SEEDS
    steps: int | None = None  # the scenario's run.steps
    target: float = DEFAULT_TARGET
    out: Path = Path("runs/study")
    workers: int | None = None  # local: 1; ray: every cell at once
    runtime: str = "local"
    device: str = "cpu"
    quiet: bool = False
    holdout: str | None = None  # a schedule label of the grid, predicted from the other schedules' cells


def build_cells(options: StudyOptions) -> list[Cell]:
    """Every cell of the grid in table order (schedule, loss, correction, seed), each scenario validated."""
    schedules = parse_schedules(options.schedules)
    losses = parse_losses(options.losses)
    corrections = split_list(options.corrections, "--corrections")
    seeds = parse_seeds(options.seeds)
    steps = [f"run.steps={options.steps}"] if options.steps is not None else []
    cells = []
    for schedule, loss, correction, seed in itertools.product(schedules, losses, corrections, seeds):
        name = f"{schedule.label}.{loss}.{safe_file_name(correction)}.s{seed}"
        overrides = [
            *options.overrides,
            *schedule.overrides,
            f"algorithm.loss={loss}",
            *correction_overrides(correction),
            f"run.seed={seed}",
            *steps,
        ]
        try:
            scenario = load_scenario(options.scenario, overrides)
            task = task_name(scenario)
        except ScenarioError as exc:
            raise ScenarioError(f"cell {name}: {'; '.join(str(exc).splitlines())}") from None
        key = CellKey(
            name,
            schedule.label,
            schedule.kind,
            schedule.bound,
            schedule.in_flight,
            loss,
            correction,
            seed,
            task,
        )
        cells.append(Cell(key, scenario, options.out / CELLS_DIR / name))
    return cells


def task_name(scenario: Scenario) -> str:
    """What the reward scores: the task's name, or the prompts file's; ScenarioError in timing mode."""
    workload = scenario.workload
    if workload.task is not None:
        return workload.task
    if workload.prompts is not None:
        return workload.prompts.name
    raise ScenarioError("workload.task: a study measures reward; give a task (e.g. workload.task=copy) or prompts")


def check_options(options: StudyOptions) -> None:
    """ScenarioError naming the flag for options no study can run with."""
    if options.runtime not in RUNTIMES:
        raise ScenarioError(f"--runtime: {options.runtime!r}; use local or ray")
    if options.workers is not None and options.workers < 1:
        raise ScenarioError("--workers: give at least 1")
    if options.target != options.target:
        raise ScenarioError("--target: give a reward, e.g. 0.5")
    if options.holdout is not None:
        labels = split_list(options.schedules, "--schedules")
        if options.holdout not in labels:
            raise ScenarioError(f"--holdout: {options.holdout!r} is not one of --schedules ({', '.join(labels)})")
        if len(labels) < 3:
            raise ScenarioError("--holdout: the fit left after holding one schedule out needs two more schedules")


def check_cells(cells: Sequence[Cell], device: str = "cpu") -> None:
    """What the executor cannot run (task, model, memory) is one line before any cell runs."""
    from asyncrl.executor.runtime import check
    from asyncrl.scenarios.memory import check_memory

    for cell in cells:
        try:
            check(cell.scenario, device)
            check_memory(cell.scenario)
        except ScenarioError as exc:
            raise ScenarioError(f"cell {cell.key.cell}: {exc}") from None


# ── running ─────────────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class Outcome:
    """How a cell's run ended: ``ok`` or ``failed`` (``reason``), and the seconds it took, start-up included."""

    cell: str
    status: str
    reason: str = ""
    seconds: float = float("nan")


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
        return bool((self.cells["status"] != "ok").any())


def run_cell(scenario: Scenario, out: Path, device: str = "cpu") -> Outcome:
    """Run one cell from scratch into ``out`` (what was there is removed first); runs in a worker."""
    from asyncrl.executor.runtime import execute

    start = time.perf_counter()
    shutil.rmtree(out, ignore_errors=True)
    try:
        execute(scenario, out, device=device)
    except Exception as exc:  # the cell failed: say why in one line and let the study go on
        return Outcome(out.name, "failed", _one_line(exc), time.perf_counter() - start)
    return Outcome(out.name, "ok", "", time.perf_counter() - start)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__


def run_study(options: StudyOptions, say: Callable[[str], None] = print) -> StudyResult:
    """Build the grid, run the cells not finished yet, write the tables and plots; return them."""
    check_options(options)
    cells = build_cells(options)
    check_cells([cell for cell in cells if not _finished(cell)], options.device)  # none: no torch to import
    with _study_directory(options.out):
        _write_settings(options, cells)
        todo = [cell for cell in _run_order(cells) if not _finished(cell)]
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
        written = yaml.safe_load((cell.out / "scenario.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return False
    return written == yaml.safe_load(dump_scenario(cell.scenario.resolved()))


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
    run = _run_on_ray if options.runtime == "ray" else _run_locally
    with tqdm(total=total, initial=kept, desc="study", unit="cell", disable=options.quiet or None) as bar:
        for outcome in run(todo, _workers(options, len(todo)), options.device):
            bar.update()
            bar.set_postfix_str(f"{outcome.cell}: {outcome.status} in {outcome.seconds:.0f} s")
            yield outcome


def _run_locally(cells: Sequence[Cell], workers: int, device: str) -> Iterator[Outcome]:
    """A spawned process pool, fed one cell per free worker (so Ctrl-C leaves nothing queued)."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")  # no fork of a process holding threads
    waiting = list(cells)
    running: dict[Future[Outcome], Cell] = {}
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=context)
    try:
        while waiting or running:
            while waiting and len(running) < workers:
                cell = waiting.pop(0)
                running[pool.submit(run_cell, cell.scenario, cell.out, device)] = cell
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            broken = False
            for future in done:
                cell = running.pop(future)
                try:
                    yield future.result()
                except BrokenProcessPool:
                    broken = True
                    yield Outcome(cell.key.cell, "failed", "its worker process died (killed, or out of memory)")
            if broken:  # every run in the old pool is lost with it; a fresh pool takes the rest
                pool.shutdown(wait=False, cancel_futures=True)
                pool = ProcessPoolExecutor(max_workers=workers, mp_context=context)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _run_on_ray(cells: Sequence[Cell], workers: int, device: str) -> Iterator[Outcome]:
    """One Ray task per cell, asking for the cell's devices as CPUs (at most what the cluster has)."""
    import ray

    if not ray.is_initialized():
        ray.init(address=os.environ.get("RAY_ADDRESS"), include_dashboard=False, log_to_driver=False)
    cpus = float(ray.cluster_resources().get("CPU", 1))
    task = ray.remote(run_cell)
    waiting = list(cells)
    running: dict[Any, Cell] = {}
    try:
        while waiting or running:
            while waiting and len(running) < workers:
                cell = waiting.pop(0)
                need = min(cpus, float(cell.scenario.cluster.total_devices))
                running[task.options(num_cpus=need).remote(cell.scenario, cell.out, device)] = cell
            done, _ = ray.wait(list(running), num_returns=1)
            for ref in done:
                cell = running.pop(ref)
                try:
                    yield ray.get(ref)
                except ray.exceptions.RayError as exc:
                    yield Outcome(cell.key.cell, "failed", _one_line(exc))
    finally:
        for ref in running:
            ray.cancel(ref, force=True)


# ── the study directory, tables and plots ───────────────────────────────────────


@contextlib.contextmanager
def _study_directory(out: Path) -> Iterator[Path]:
    """OUT made, checked to be a study's (or empty), and locked for this process while the study runs."""
    if out.exists() and not out.is_dir():
        raise OutputError(f"--out: {out} is a file")
    if out.is_dir() and any(out.iterdir()) and not (out / STUDY_FILE).is_file():
        raise OutputError(f"--out: {out} holds files that are not a study's; choose an empty directory")
    out.mkdir(parents=True, exist_ok=True)
    lock = os.open(out / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise OutputError(f"--out: {out} is being written by another study") from None
        yield out
    finally:
        os.close(lock)


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
    (options.out / STUDY_FILE).write_text(json.dumps(settings, indent=2) + "\n")


def _tables(options: StudyOptions, cells: Sequence[Cell], outcomes: list[Outcome], kept: int) -> StudyResult:
    out, steps = options.out, cells[0].scenario.run.steps
    reasons = {outcome.cell: outcome.reason for outcome in outcomes if outcome.status != "ok"}
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
    (out / "table.txt").write_text(text + "\n")
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
    from asyncrl.analysis.study_plots import study_plots

    title = f"{cells['task'].iloc[0]} task, target reward {options.target:g}"
    return study_plots(curves, summary, options.target, title, options.out)
