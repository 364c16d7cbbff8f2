"""The cells of ``asyncrl study``: the grid of scenarios it runs, each loaded and checked before any runs.

    SCENARIO ─ --schedules × --losses × --corrections × --seeds ─► build_cells ─► [Cell(key, scenario, out)]
                                                                   check_cells (executor check, memory)

The grid (labels, lists, defaults) is ``asyncrl.experiments.grid``'s. Each cell is the scenario with the user's
overrides, then its schedule's, ``algorithm.loss``, ``algorithm.correction`` and ``run.seed`` (and
``run.steps`` with ``--steps``); its directory is ``OUT/cells/<schedule>.<loss>.<correction>.s<seed>``.
Every cell is loaded and checked (the executor's own ``check``, memory) before any runs, so a bad
label, loss, correction or override is one line and exit 2 with nothing run. A study needs task
mode: a reward to reach.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from asyncrl.analysis.summaries.study import CellKey
from asyncrl.scenarios.record.outputs import safe_file_name
from asyncrl.scenarios.spec.loading import ScenarioError, load_scenario
from asyncrl.scenarios.spec.scenario import Scenario

from asyncrl.experiments.grid import (
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

CELLS_DIR = "cells"
RUNTIMES = ("local", "ray")


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
    corrections = split_list(options.corrections, "corrections")
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


#: Most --workers a study takes: processes (local) or tasks in flight (Ray).
MAX_WORKERS = 1_024


def check_options(options: StudyOptions) -> None:
    """ScenarioError naming the argument (``workers: ...``) for options no study can run with."""
    if options.runtime not in RUNTIMES:
        raise ScenarioError(f"runtime: {options.runtime!r}; use local or ray")
    if options.workers is not None and options.workers < 1:
        raise ScenarioError("workers: give at least 1")
    if options.workers is not None and options.workers > MAX_WORKERS:
        raise ScenarioError(
            f"workers: at most {MAX_WORKERS:,} (each local worker is a process holding a model; a Ray study "
            "runs at most one task per cell anyway)"
        )
    if options.target != options.target:
        raise ScenarioError("target: give a reward, e.g. 0.5")
    if options.holdout is not None:
        labels = split_list(options.schedules, "schedules")
        if options.holdout != "all" and options.holdout not in labels:
            raise ScenarioError(f"holdout: {options.holdout!r} is not all or one of --schedules ({', '.join(labels)})")
        if len(labels) < 3:
            raise ScenarioError("holdout: the fit left after holding one schedule out needs two more schedules")


def check_cells(cells: Sequence[Cell], device: str = "cpu") -> None:
    """What the executor cannot run (task, model, memory) is one line before any cell runs."""
    from asyncrl.executor.calibrate import check_device
    from asyncrl.executor.processes.runtime import check
    from asyncrl.scenarios.costs.memory import check_memory

    if cells:
        check_device(device)  # about the argument, not a cell: named alone (``device: ...``)
    for cell in cells:
        try:
            check(cell.scenario, device)
            check_memory(cell.scenario)
        except ScenarioError as exc:
            raise ScenarioError(f"cell {cell.key.cell}: {exc}") from None
