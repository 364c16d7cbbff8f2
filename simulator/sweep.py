"""Many simulations at once: speedup baselines and cluster sizing.

    scenario ─► variants (speedup) or candidate splits (size) ─► process pool ─► summaries ─► ranked rows

``simulate_speedup`` and ``simulate_sizing`` are what ``asyncrl speedup`` and
``asyncrl size`` run; turning their (variant, summary) pairs into tables and
CSV files is ``analysis``' job.

Each variant is a full ``Scenario`` built from the original by changing a few
fields and validating again, so a variant the catalog cannot hold (weights
that do not fit, a split that does not divide) is skipped, not simulated.

Sweeps summarize each run straight from the simulation (``simulator.summary``),
without the event table. Sizing ends each run once its step time and staleness
have converged (``simulator.convergence``) and extrapolates it to ``run.steps``
(its summary says ``extrapolated: true``); ``exact=True`` simulates every step.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any

from asyncrl.scenarios.loading import ScenarioError, validate_scenario
from asyncrl.scenarios.scenario import Scenario
from asyncrl.simulator.convergence import Tolerance
from asyncrl.simulator.summary import simulate_summary
from tqdm import tqdm

TENSOR_PARALLEL_SIZES = (1, 2, 4, 8)


@dataclass(frozen=True)
class Variant:
    """One scenario of a sweep and the label its row carries in tables."""

    label: str
    scenario: Scenario


Result = tuple[Variant, dict[str, Any]]  # a variant and its simulated summary


def with_changes(scenario: Scenario, **sections: dict[str, Any]) -> Scenario:
    """A copy of ``scenario`` with some fields of some sections replaced, validated again."""
    data = scenario.model_dump(mode="json")
    for section, fields in sections.items():
        if section == "schedule" and "kind" in fields:
            data[section] = {"kind": fields["kind"], "max_concurrency": data[section].get("max_concurrency")}
        data[section].update(fields)
    return validate_scenario(data)


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
    split × engine size × schedule asked for."""
    schedules = [_schedule(kind, bound) for kind in kinds for bound in (staleness if kind != "sync" else [0])]
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


def _schedule(kind: str, bound: int) -> tuple[str, dict[str, Any]]:
    if kind == "pipelined":
        return f"pipelined N={bound}", {"kind": kind, "off_policy_steps": max(1, bound)}
    if kind == "streaming":
        return f"streaming η={bound}", {"kind": kind, "max_staleness": bound}
    return "sync", {"kind": "sync"}


def _splits(devices: int, tp: int, count: int) -> list[int]:
    """Generation device counts to try: multiples of ``tp`` leaving ≥ 1 training device, at most ``count``."""
    options = list(range(tp, devices, tp))
    if len(options) <= count:
        return options
    picks = {options[round(i * (len(options) - 1) / (count - 1))] for i in range(count)}
    return sorted(picks)


def _try(scenario: Scenario, cluster: dict[str, Any], schedule: dict[str, Any]) -> Scenario | None:
    try:
        return with_changes(scenario, cluster=cluster, schedule=schedule)
    except ScenarioError:
        return None  # does not fit: weights too large for the engine, or a split it cannot divide


def _summary_of(scenario: Scenario, until_converged: Tolerance | None = None) -> dict[str, Any]:
    return simulate_summary(scenario, until_converged=until_converged)


def simulate_speedup(scenario: Scenario, progress: bool = True) -> list[Result]:
    """The scenario as written (first) and its sync baselines, simulated."""
    return list(simulate_all(speedup_variants(scenario), progress=progress))


def simulate_sizing(
    scenario: Scenario,
    devices: int,
    kinds: Iterable[str],
    staleness: Iterable[int],
    splits: int = 16,
    progress: bool = True,
    exact: bool = False,
) -> list[Result]:
    """Every split asked for, simulated and ranked by throughput, under the best sync colocated baseline.

    Each run ends once converged (``Tolerance()``) and is extrapolated to ``run.steps``; ``exact``
    simulates every step of every run instead.
    """
    baselines, candidates = sizing_variants(scenario, devices, kinds, staleness, splits)
    if not candidates:
        raise ScenarioError(
            f"--devices: no split of {devices} devices fits {scenario.model.label} on {scenario.hardware.device}"
        )
    tolerance = None if exact else Tolerance()
    results = list(simulate_all(baselines + candidates, progress=progress, until_converged=tolerance))
    best_baseline = sorted(results[: len(baselines)], key=_fastest_first)[:1]  # the best engine size
    return best_baseline + sorted(results[len(baselines) :], key=_fastest_first)


def _fastest_first(result: Result) -> float:
    return -result[1]["throughput"]["samples_per_s"]


def simulate_all(
    variants: list[Variant],
    workers: int | None = None,
    progress: bool = True,
    until_converged: Tolerance | None = None,
) -> Iterator[Result]:
    """Simulate every variant in a process pool; yields (variant, summary) in input order.

    With ``until_converged``, each run ends once converged and its summary is extrapolated.
    """
    workers = workers or os.cpu_count() or 1
    bar = tqdm(total=len(variants), desc="simulating", unit="run", disable=not progress or None, leave=False)
    task = partial(_summary_of, until_converged=until_converged)
    with ProcessPoolExecutor(max_workers=min(workers, max(1, len(variants)))) as pool:
        for variant, summary in zip(variants, pool.map(task, [v.scenario for v in variants]), strict=True):
            bar.update()
            yield variant, summary
    bar.close()
