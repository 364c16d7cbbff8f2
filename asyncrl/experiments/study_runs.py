"""How the cells of ``asyncrl study`` run: the executor's Python API in worker processes, or as Ray tasks.

    [Cell] ─► run_locally: a spawned process pool (--workers, default 1) ─► run_cell ─► executor.processes.runtime.execute
           └► run_on_ray:  one Ray task per cell (num_cpus: the cell's devices) ─► run_cell, the same call
    ─► one Outcome per cell as it ends: complete, or failed with the exception's first line

**A worker process, not a ``python -m asyncrl execute`` subprocess.** The worker imports torch and
transformers once and keeps them for every cell it runs (seconds saved per cell on two cores); the
scenario arrives typed and already validated; a failure comes back as the exception's first line.
Not in the study's process: a run owns its process's torch threads and distributed group, and a
cell that crashes its worker takes only that worker down (the pool is replaced and the study goes
on; the cell is recorded as failed).

**One worker by default.** Executor wall times are the measurement, and one cell already runs two
busy processes (an engine and the learner) on this two-core machine: a second cell at once would
slow both and bias every time to target. ``--workers N`` runs N at once where there are cores.

**On Ray** (``--runtime ray``) each cell is one Ray task asking for the cell's devices as CPUs, so
the grid fans out over a cluster's nodes while a cell's engine and learner stay together on one
node, run by the local runtime: its wall time is that of a local run, comparable between cells.
Ray joins ``RAY_ADDRESS`` or starts a local instance. ``--workers`` caps the cells in flight
(default: all; Ray queues them by resources). On several nodes OUT must be a shared file system.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from asyncrl.analysis.statuses import COMPLETE, FAILED
from asyncrl.scenarios.files.pools import new_pool, stop
from asyncrl.scenarios.record.outputs import is_run_record
from asyncrl.scenarios.record.record import RunStatus
from asyncrl.scenarios.spec.scenario import Scenario

from asyncrl.experiments.study_cells import Cell


@dataclass(frozen=True)
class Outcome:
    """How a cell's run ended: ``complete`` or ``failed`` (``reason``), and the seconds it took, start-up included."""

    cell: str
    status: RunStatus
    reason: str = ""
    seconds: float = float("nan")


def run_cell(scenario: Scenario, out: Path, device: str = "cpu") -> Outcome:
    """Run one cell from scratch into ``out`` (what was there is removed first); runs in a worker."""
    from asyncrl.executor.processes.runtime import execute

    start = time.perf_counter()
    if out.is_dir() and is_run_record(out):  # never a directory of other files (the study checked them first)
        shutil.rmtree(out, ignore_errors=True)
    try:
        execute(scenario, out, device=device)
    except Exception as exc:  # the cell failed: say why in one line and let the study go on
        return Outcome(out.name, FAILED, _one_line(exc), time.perf_counter() - start)
    return Outcome(out.name, COMPLETE, "", time.perf_counter() - start)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__


def run_locally(cells: Sequence[Cell], workers: int, device: str) -> Iterator[Outcome]:
    """A spawned process pool, fed one cell per free worker (so Ctrl-C leaves nothing queued)."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")  # no fork of a process holding threads
    waiting = list(cells)
    running: dict[Future[Outcome], Cell] = {}
    pool = new_pool(workers, context)
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
                    yield Outcome(cell.key.cell, FAILED, "its worker process died (killed, or out of memory)")
            if broken:  # every run in the old pool is lost with it; a fresh pool takes the rest
                pool.shutdown(wait=False, cancel_futures=True)
                pool = new_pool(workers, context)
    except BaseException:  # interrupted (Ctrl-C, SIGTERM) or failed: the cells running stop now
        stop(pool)
        raise
    pool.shutdown(wait=True, cancel_futures=True)


def run_on_ray(cells: Sequence[Cell], workers: int, device: str) -> Iterator[Outcome]:
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
                    yield Outcome(cell.key.cell, FAILED, _one_line(exc))
    finally:
        for ref in running:
            ray.cancel(ref, force=True)
