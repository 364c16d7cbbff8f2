"""Many simulations at once: speedup baselines and cluster sizing.

    scenario ─► variants (speedup) or candidate splits (size) ─► process pool ─► summaries ─► ranked rows

``simulate_speedup`` and ``simulate_sizing`` are what ``asyncrl speedup`` and ``asyncrl size`` run; turning their
(variant, summary) pairs into tables and CSV files is ``analysis``' job.

Each variant is a full ``Scenario`` built from the original by changing a few fields and validating again, so a
variant the catalog cannot hold (an engine that cannot hold one group, a split that does not divide) is skipped. A
valid variant whose pools do not fit in device memory (``scenarios.costs.memory``) is kept with no summary (None) and not
simulated, so tables can say why it is missing.

In a pool of N workers each simulation is budgeted 1/N of the memory available
(``simulator.budget``), so the runs at once add up to what the machine has.

Sweeps summarize each run straight from the simulation (``simulator.summary``), without the event table. Sizing ends
each run once its step time and staleness have converged (``simulator.convergence``) and extrapolates it to
``run.steps`` (its summary says ``extrapolated: true``); ``exact=True`` simulates every step.

Given a staleness penalty fit (``scenarios.staleness.penalty``), each summary also carries ``time_to_target``
(``simulator.target``), worked out in the worker while the run's step times are at hand, and sizing
ranks by it instead of by throughput.

``simulate_grid`` runs ``asyncrl sweep``: the product of ``--vary KEY=v1,v2`` lists, each point loaded like
``--set KEY=v`` and kept with its reason when the scenario rejects it.

With ``runtime="ray"`` (``--runtime ray``) each simulation is a Ray task instead (``simulator.ray_tasks``): the same
call, so the same summaries, on a cluster's nodes.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import re
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Literal

import yaml
from tqdm import tqdm

from ..scenarios.costs.memory import memory_problem
from ..scenarios.files.pools import new_pool, stopping
from ..scenarios.files.textfile import safe_load
from ..scenarios.record.record import RunSummary, Simulated
from ..scenarios.spec import loading
from ..scenarios.spec.loading import ScenarioError, load_scenario
from ..scenarios.spec.scenario import Scenario
from ..scenarios.spec.schedules import schedule_label
from ..scenarios.staleness.penalty import PenaltyFit
from .convergence import Tolerance
from .simulation import Simulation, without_cycle_collection
from .summary import run_summary
from .target import step_ends, time_to_target

TENSOR_PARALLEL_SIZES = (1, 2, 4, 8)
SIZING_TOLERANCE = Tolerance()  # when size ends a run (``simulator.convergence``)

Runtime = Literal["local", "ray"]  # where the simulations run: a process pool here, or Ray tasks


@dataclass(frozen=True)
class Variant:
    """One scenario of a sweep and the label its row carries in tables."""

    label: str
    scenario: Scenario


Result = Simulated[Variant]  # a variant and its simulated summary; None: does not fit


def with_changes(scenario: Scenario, **sections: dict[str, Any]) -> Scenario:
    """A variant of ``scenario`` (``scenarios.spec.loading.variant``) with some fields of some sections replaced; a
    schedule of another kind starts from that kind's defaults (keeping ``max_concurrency``), not from the
    settings of the one it replaces."""
    changes: dict[str, Any] = {}
    for section, fields in sections.items():
        if section == "schedule" and "kind" in fields:
            changes["schedule"] = {"kind": fields["kind"], "max_concurrency": scenario.schedule.max_concurrency}
        changes.update({f"{section}.{name}": value for name, value in fields.items()})
    return loading.variant(scenario, changes)


def speedup_variants(scenario: Scenario) -> list[Variant]:
    """The scenario as written, sync on the same split, and sync colocated on all its devices."""
    cluster = scenario.cluster
    variants = [Variant(f"{scenario.schedule.kind} (as written)", scenario)]
    if scenario.schedule.kind != "sync" or cluster.colocated:
        variants.append(
            Variant("sync, same split", with_changes(scenario, schedule={"kind": "sync"}, cluster={"colocated": False}))
        )
    if not cluster.colocated:
        total = cluster.total_devices
        colocated = {"colocated": True, "generation_devices": total, "training_devices": total}
        variants.append(
            Variant(f"sync, colocated on {total}", with_changes(scenario, schedule={"kind": "sync"}, cluster=colocated))
        )
    return variants


def sizing_variants(
    scenario: Scenario, devices: int, kinds: Iterable[str], staleness: Iterable[int], splits: int = 16
) -> tuple[list[Variant], list[Variant]]:
    """Sync colocated baselines on ``devices`` (one per engine size that fits), and every
    split × engine size × schedule asked for. The scenario's own kind at its own bound keeps the rest of its
    schedule (in-flight updates, verl's sync window and threshold, the queue), moved to each split."""
    schedules = [_schedule(scenario, kind, bound) for kind in kinds for bound in (staleness if kind != "sync" else [0])]
    candidates: list[Variant] = []
    for tp in TENSOR_PARALLEL_SIZES:
        for generation in _splits(devices, tp, splits):
            for label, schedule in schedules:
                cluster = {"generation_devices": generation, "training_devices": devices - generation}
                variant = _try(scenario, {**cluster, "devices_per_engine": tp, "colocated": False}, schedule)
                if variant is not None:
                    candidates.append(Variant(f"{label} {generation}:{devices - generation} tp{tp}", variant))
    return _baselines(scenario, devices), candidates


def _baselines(scenario: Scenario, devices: int) -> list[Variant]:
    baselines = []
    for tp in TENSOR_PARALLEL_SIZES:
        cluster = {
            "generation_devices": devices,
            "training_devices": devices,
            "devices_per_engine": tp,
            "colocated": True,
        }
        variant = _try(scenario, cluster, {"kind": "sync"})
        if variant is not None:
            baselines.append(Variant(f"sync colocated {devices} tp{tp} (baseline)", variant))
    return baselines


def _schedule(scenario: Scenario, kind: str, bound: int) -> tuple[str, dict[str, Any]]:
    """A row's schedule label and the schedule fields it changes (none: the scenario's own, as written)."""
    if kind == scenario.schedule.kind and (kind == "sync" or bound == scenario.staleness_bound):
        return scenario.schedule.label, {}
    if kind == "pipelined":
        return schedule_label(kind, bound), {"kind": kind, "off_policy_steps": max(1, bound)}
    if kind == "streaming":
        return schedule_label(kind, bound), {"kind": kind, "max_staleness": bound}
    return "sync", {"kind": "sync"}


def _splits(devices: int, tp: int, count: int) -> list[int]:
    """Generation device counts to try: multiples of ``tp`` leaving ≥ 1 training device, at most ``count``."""
    options = list(range(tp, devices, tp))
    if len(options) <= count:
        return options
    if count == 1:
        return [options[len(options) // 2]]  # the middle split, the most even one
    picks = {options[round(i * (len(options) - 1) / (count - 1))] for i in range(count)}
    return sorted(picks)


def _try(scenario: Scenario, cluster: dict[str, Any], schedule: dict[str, Any]) -> Scenario | None:
    try:
        return with_changes(scenario, cluster=cluster, schedule=schedule)
    except ScenarioError:
        return None  # does not fit: weights too large for the engine, or a split it cannot divide


def _summary_of(
    scenario: Scenario,
    until_converged: Tolerance | None = None,
    penalty: PenaltyFit | None = None,
    memory_share: int = 1,
) -> RunSummary:
    """The run's summary; with a penalty, its ``time_to_target`` too (``simulator.target``). ``memory_share``:
    the simulations running at once on this machine, which share its memory budget (``simulator.budget``)."""
    with without_cycle_collection():  # as in the run itself, for the whole plan (docs/performance.md)
        sim = Simulation(scenario, memory_share=memory_share)
        sim.run(until_converged=until_converged)
        summary = run_summary(sim)
        if penalty is not None:
            reached = time_to_target(penalty, summary, step_ends(sim), sim.steady)
            summary = summary.model_copy(update={"time_to_target": reached})
        del sim  # before the collector is back, whose first collection then frees the simulation's cycles young
    return summary


def simulate_speedup(scenario: Scenario, progress: bool = True, penalty: PenaltyFit | None = None) -> list[Result]:
    """The scenario as written (first) and its sync baselines, simulated where they fit in memory; with a
    penalty, each summary has its ``time_to_target``."""
    return simulate_fitting(speedup_variants(scenario), progress=progress, penalty=penalty)


def simulate_sizing(
    scenario: Scenario,
    devices: int,
    kinds: Iterable[str],
    staleness: Iterable[int],
    splits: int = 16,
    progress: bool = True,
    exact: bool = False,
    penalty: PenaltyFit | None = None,
    workers: int | None = None,
    runtime: Runtime = "local",
    tolerance: Tolerance = SIZING_TOLERANCE,
) -> list[Result]:
    """Every split asked for, simulated and ranked by throughput (with a penalty: by predicted time to target,
    soonest first), under the best sync colocated baseline; then the variants that do not fit in memory,
    unsimulated (summary None).

    Each run ends once converged (``tolerance``) and is extrapolated to ``run.steps``; ``exact`` simulates all.
    """
    baselines, candidates = sizing_variants(scenario, devices, kinds, staleness, splits)
    if not candidates:
        raise ScenarioError(
            f"devices: no split of {devices} devices fits {scenario.model.label} on {scenario.hardware.device_name}"
        )
    results = simulate_fitting(
        baselines + candidates,
        progress=progress,
        until_converged=None if exact else tolerance,
        penalty=penalty,
        workers=workers,
        runtime=runtime,
    )
    best = _soonest_first if penalty is not None else _fastest_first
    best_baseline = sorted(_simulated(results[: len(baselines)]), key=best)[:1]  # the best engine size
    ranked = best_baseline + sorted(_simulated(results[len(baselines) :]), key=best)
    return ranked + [result for result in results if result.summary is None]


def _simulated(results: list[Result]) -> list[Result]:
    return [result for result in results if result.summary is not None]


def simulate_fitting(
    variants: list[Variant],
    progress: bool = True,
    until_converged: Tolerance | None = None,
    penalty: PenaltyFit | None = None,
    workers: int | None = None,
    runtime: Runtime = "local",
) -> list[Result]:
    """Simulate the variants that fit in device memory; the others get None, unsimulated. Input order."""
    fitting = [variant for variant in variants if not memory_problem(variant.scenario)]
    simulated = simulate_all(
        fitting, workers=workers, progress=progress, until_converged=until_converged, penalty=penalty, runtime=runtime
    )
    summaries = {id(variant): summary for variant, summary in simulated}
    return [Simulated(variant, summaries.get(id(variant))) for variant in variants]


def _fastest_first(result: Result) -> float:
    assert result.summary is not None  # ranked rows were simulated
    return -result.summary.throughput.samples_per_s


def _soonest_first(result: Result) -> tuple[float, float]:
    """Predicted time to target; between equal times, the higher throughput."""
    assert result.summary is not None and result.summary.time_to_target is not None  # sized with a penalty
    return result.summary.time_to_target.time_s, _fastest_first(result)


def simulate_all(
    variants: list[Variant],
    workers: int | None = None,
    progress: bool = True,
    until_converged: Tolerance | None = None,
    penalty: PenaltyFit | None = None,
    runtime: Runtime = "local",
) -> Iterator[Result]:
    """Simulate every variant in a process pool (``runtime="ray"``: one Ray task each); yields (variant, summary)
    in input order.

    With ``until_converged``, each run ends once converged and its summary is extrapolated; with ``penalty``,
    each summary has its ``time_to_target``.
    """
    workers = min(workers or os.cpu_count() or 1, max(1, len(variants)))
    bar = tqdm(total=len(variants), desc="simulating", unit="run", disable=not progress or None, leave=False)
    task = partial(_summary_of, until_converged=until_converged, penalty=penalty)
    scenarios = [v.scenario for v in variants]
    if runtime == "ray":  # each node's memory is its own; Ray places the tasks
        from .ray_tasks import summaries_on_ray

        for variant, summary in zip(variants, summaries_on_ray(task, scenarios, bar.update), strict=True):
            yield Simulated(variant, summary)
        bar.close()
        return
    if workers == 1:  # one run at a time: no pool to start
        summaries: Iterator[RunSummary] = map(task, scenarios)
        yield from _with_bar(variants, summaries, bar)
        return
    shared = partial(task, memory_share=workers)  # the runs at once share this machine's memory
    pool = new_pool(workers, _pool_context())
    with pool, stopping(pool):  # interrupted (Ctrl-C, SIGTERM): the workers stop now, not after their runs
        yield from _with_bar(variants, pool.map(shared, scenarios), bar)


def _pool_context() -> multiprocessing.context.BaseContext:
    """Fork, which starts workers at once and needs no ``if __name__ == "__main__"`` in a user's script; spawn
    where the process has loaded torch or Ray, whose threads a forked child inherits half-made (CI saw one die)."""
    threaded = any(name in sys.modules for name in ("torch", "ray"))
    return multiprocessing.get_context("spawn" if threaded else "fork")


def _with_bar(variants: list[Variant], summaries: Iterable[RunSummary], bar: tqdm) -> Iterator[Result]:
    """Pairs each variant with its summary, in order, ticking the bar; closes it at the end."""
    for variant, summary in zip(variants, summaries, strict=True):
        bar.update()
        yield Simulated(variant, summary)
    bar.close()


# ── what-if grids ──────────────────────────────────────────────────────────────

_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


@dataclass(frozen=True)
class Axis:
    """One ``--vary KEY=v1,v2,...``: a dotted scenario key and its values as written, in order."""

    key: str
    texts: tuple[str, ...]


@dataclass(frozen=True)
class GridPoint:
    """One combination of the varied values; ``scenario`` is None when it does not validate (``reason`` says why)."""

    values: dict[str, Any]
    scenario: Scenario | None
    reason: str = ""

    @property
    def label(self) -> str:
        return " ".join(f"{key.rsplit('.', 1)[-1]}={value}" for key, value in self.values.items())


GridResult = Simulated[GridPoint]  # a point and its summary (None: skipped)


def parse_scalar(text: str) -> Any:
    """A value as YAML reads it (``true``, ``bf16``, ``0.5``), with ``1e-4`` read as a number too."""
    try:
        value = safe_load(text)
    except yaml.YAMLError:
        return text
    if isinstance(value, str) and _NUMBER.fullmatch(value):
        return float(value)
    return value


def parse_axis(text: str) -> Axis:
    """``dotted.key=v1,v2,...`` as an Axis; a ScenarioError naming ``vary`` (the argument) if it is not one."""
    key, sep, raw = text.partition("=")
    texts = tuple(part.strip() for part in raw.split(","))
    if not sep or not key.strip() or not all(texts):
        raise ScenarioError(f"vary {text}: expected dotted.key=value,value,... (e.g. cluster.generation_devices=4,8)")
    if len(set(texts)) < len(texts):
        raise ScenarioError(f"vary {text}: a value is given twice")
    for part in texts:
        if isinstance(parse_scalar(part), dict | list):
            raise ScenarioError(f"vary {text}: {part!r} is not a single value (a number, a word, true or false)")
    return Axis(key.strip(), texts)


def grid_points(source: str | Path, overrides: Sequence[str], axes: Sequence[Axis]) -> list[GridPoint]:
    """Every combination of the axes' values (the first axis outermost), loaded from ``source`` with
    ``overrides`` then the point's values; a ScenarioError if a key repeats or no point validates."""
    keys = [axis.key for axis in axes]
    repeated = next((key for key in keys if keys.count(key) > 1), None)
    if repeated:
        raise ScenarioError(f"vary {repeated}: the key is varied twice")
    combinations = itertools.product(*(axis.texts for axis in axes))
    points = [_grid_point(source, overrides, keys, texts) for texts in combinations]
    if all(point.scenario is None for point in points):
        raise ScenarioError(f"{points[0].reason} (every grid point fails: {len(points)} of {len(points)})")
    return points


def _grid_point(source: str | Path, overrides: Sequence[str], keys: list[str], texts: tuple[str, ...]) -> GridPoint:
    values = {key: parse_scalar(text) for key, text in zip(keys, texts, strict=True)}
    point_overrides = [f"{key}={text}" for key, text in zip(keys, texts, strict=True)]
    try:
        return GridPoint(values, load_scenario(source, [*overrides, *point_overrides]))
    except ScenarioError as exc:
        return GridPoint(values, None, "; ".join(str(exc).splitlines()))  # a CSV cell: every error on one line


def simulate_grid(points: Sequence[GridPoint], progress: bool = True, runtime: Runtime = "local") -> list[GridResult]:
    """Simulate the valid points in a process pool (or as Ray tasks); every point comes back in grid order."""
    valid = [(index, point.scenario) for index, point in enumerate(points) if point.scenario is not None]
    variants = [Variant(points[index].label, scenario) for index, scenario in valid]
    simulated = simulate_all(variants, progress=progress, runtime=runtime)
    summaries = {index: summary for (index, _), (_, summary) in zip(valid, simulated, strict=True)}
    return [Simulated(point, summaries.get(index)) for index, point in enumerate(points)]
