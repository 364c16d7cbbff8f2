"""A simulated run's summary straight from its records, without the event table: what sweeps need.

    Simulation (rollouts, engines' loads, recorder) ─► RolloutArrays ─► tally(steps) ─► Tally ─┬─► summary
                                                                                         └─► extrapolated

``scenarios.record.summarize`` computes the summary from the event table; a
sweep only needs the figures, and building the table costs as much as a third
of the simulation. ``run_summary`` computes the same figures from per-rollout
arrays (``tests/test_early_stopping.py`` holds it to ``summarize``).

A ``Tally`` holds a stretch of a run's figures as sums (seconds, rollouts,
tokens, a staleness histogram), so they add up: a run ended early
(``Simulation.steady``) is summarized as the run simulated plus the steps it
skipped, each worth one step of the steady span (``extrapolated_summary``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..scenarios.record.busy import SpanOrder, busy_seconds
from ..scenarios.record.run_summary import RunSummary
from ..scenarios.record.summarize import Labels, Tally, summary_of
from ..scenarios.spec.scenario import Scenario
from .convergence import Tolerance
from .costs import CostModel
from .recording.event_rows import first_load_after
from .rollouts import cut_at_loads
from .simulation import Simulation


@dataclass(frozen=True)
class RolloutArrays:
    """A finished simulation as arrays: one entry per rollout, per learner step, per weight load."""

    engine: np.ndarray  # per rollout: the engine that generated it
    start: np.ndarray  # (s)
    end: np.ndarray  # (s); the run's end for a rollout still running
    finished: np.ndarray  # bool
    step: np.ndarray  # the learner step that trained it, −1 if none
    tokens: np.ndarray  # completion tokens generated (all of them if finished)
    oldest: np.ndarray  # oldest policy version that generated it
    mean_version: np.ndarray  # token-weighted policy version
    train_start: np.ndarray  # per learner step, in step order (s)
    train_end: np.ndarray  # (s)
    sync_engine: np.ndarray  # per weight load
    sync_start: np.ndarray  # (s)
    sync_end: np.ndarray  # (s)
    pause_engine: np.ndarray  # per prefill and per colocated switch back to generation: the engine paused
    pause_start: np.ndarray  # (s)
    pause_end: np.ndarray  # (s)
    drop_times: np.ndarray  # per dropped rollout (s)
    engines: int
    lost_engine: np.ndarray  # per rollout lost with its engine (``simulator.failures``): the engine
    lost_start: np.ndarray  # (s)
    lost_end: np.ndarray  # (s)


def records(sim: Simulation) -> RolloutArrays:
    """The arrays of a simulation that has run."""
    columns, size, wall = sim.rollouts.columns(), sim.rollouts.group_size, sim.env.now
    group = np.repeat(np.arange(columns.groups), size)
    engine = columns.engine.astype(np.int64)[group]
    end = columns.end
    tokens = columns.tokens.astype(np.int64)
    finished = ~np.isnan(end)
    if not finished.all():  # a rollout still running counts the tokens its engine got through
        progress = np.asarray([e.progress for e in sim.engines])[engine]
        done = np.clip(progress - columns.join[group], 0, tokens).astype(np.int64)
        tokens, end = np.where(finished, tokens, done), np.where(finished, end, wall)
    version = columns.version.astype(np.int64)[group]
    oldest, mean_version, tokens = _versions_seen(sim, finished, version, tokens)
    trains = sorted(sim.recorder.trains)
    syncs, drops = sim.recorder.syncs, sim.recorder.drops
    return RolloutArrays(
        engine=engine,
        start=columns.start[group],
        end=end,
        finished=finished,
        step=np.where(finished, columns.step.astype(np.int64)[group], -1),
        tokens=tokens,
        oldest=oldest,
        mean_version=mean_version,
        train_start=np.asarray([t.start for t in trains], dtype=np.float64),
        train_end=np.asarray([t.end for t in trains], dtype=np.float64),
        sync_engine=syncs.engine,
        sync_start=syncs.start,
        sync_end=syncs.end,
        **_pauses(sim),
        drop_times=np.repeat(np.asarray([d.time for d in drops], dtype=np.float64), size),
        engines=len(sim.engines),
        **_lost(sim),
    )


def _lost(sim: Simulation) -> dict[str, np.ndarray]:
    """The rollouts lost with their engines: busy time and slots, as the event table counts them."""
    lost = sim.failures.log.lost if sim.failures is not None else []
    return {
        "lost_engine": np.asarray([span.engine for span in lost], dtype=np.int64),
        "lost_start": np.asarray([span.start for span in lost], dtype=np.float64),
        "lost_end": np.asarray([span.end for span in lost], dtype=np.float64),
    }


def _pauses(sim: Simulation) -> dict[str, np.ndarray]:
    """The engines' prefill and switch spans: busy time as the event table counts it (``BUSY_KINDS``).

    A prefill lies inside its group's rollouts, except where the host's cores were shared differently
    while it ran (its span is timed at the rate it started with), so it is counted like the events count it.
    """
    columns, switches = sim.rollouts.columns(), sim.recorder.switches
    engines = switches.engine >= 0  # not the learner's
    return {
        "pause_engine": np.concatenate([columns.engine.astype(np.int64), switches.engine[engines]]),
        "pause_start": np.concatenate([columns.prefill_start, switches.start[engines]]),
        "pause_end": np.concatenate([columns.prefill_end, switches.end[engines]]),
    }


def _versions_seen(
    sim: Simulation, finished: np.ndarray, version: np.ndarray, tokens: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Oldest and token-weighted policy version of each rollout, and its tokens, as the event table has them.

    A finished rollout its engine loaded new weights under (in-flight updates) is cut where each load
    came (``cut_at_loads``, as the event table's rows are); the others saw one version.
    """
    oldest, mean_version, tokens = version.copy(), version.astype(np.float64), tokens.copy()
    columns, size = sim.rollouts.columns(), sim.rollouts.group_size
    loads = [engine.loads for engine in sim.engines]
    join = np.repeat(columns.join, size)
    cut = finished & (first_load_after(columns, loads, size) < join + tokens)
    for index in np.flatnonzero(cut).tolist():
        group = index // size
        later = loads[columns.engine[group]][columns.loads_seen[group] :]
        pieces = cut_at_loads(float(columns.join[group]), int(tokens[index]), int(version[index]), later)
        count = sum(piece.tokens for piece in pieces)
        oldest[index] = min(piece.version for piece in pieces)
        mean_version[index] = sum(piece.version * piece.tokens for piece in pieces) / count if count else oldest[index]
        tokens[index] = count
    return oldest, mean_version, tokens


def generation_spans(run: RolloutArrays) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every span that keeps an engine busy (rollouts, weight loads, pauses, lost rollouts): engine, start, end."""
    return (
        np.concatenate([run.engine, run.sync_engine, run.pause_engine, run.lost_engine]),
        np.concatenate([run.start, run.sync_start, run.pause_start, run.lost_start]),
        np.concatenate([run.end, run.sync_end, run.pause_end, run.lost_end]),
    )


def tally(run: RolloutArrays, first: int, last: int, order: SpanOrder | None = None) -> Tally:
    """The figures of steps ``[first, last)``: spans cut to their time, rollouts trained by those steps.
    ``order``: ``SpanOrder.of(*generation_spans(run))``, shared by the tallies of one run (``scenarios.record.busy``)."""
    begin = float(run.train_end[first - 1]) if first > 0 else 0.0
    end = float(run.train_end[last - 1]) if last > 0 else 0.0
    engines, busy_start, busy_end = generation_spans(run)
    trained = (run.step >= first) & (run.step < last)
    stale = run.step[trained] - run.oldest[trained]
    keys, counts = np.unique(stale, return_counts=True)
    start, stop = np.clip(run.start, begin, end), np.clip(run.end, begin, end)
    lost_start, lost_stop = np.clip(run.lost_start, begin, end), np.clip(run.lost_end, begin, end)
    sync_start, sync_stop = np.clip(run.sync_start, begin, end), np.clip(run.sync_end, begin, end)
    train_start, train_stop = np.clip(run.train_start, begin, end), np.clip(run.train_end, begin, end)
    return Tally(
        steps=last - first,
        wall_s=end - begin,
        step_times=np.diff(np.concatenate([[begin], run.train_end[first:last]])),
        trained=float(trained.sum()),
        tokens=float(run.tokens[trained].sum()),
        staleness={int(k): float(c) for k, c in zip(keys, counts, strict=True)},
        token_staleness=float(((run.step[trained] - run.mean_version[trained]) * run.tokens[trained]).sum()),
        generation_busy_s=busy_seconds(engines, np.clip(busy_start, begin, end), np.clip(busy_end, begin, end), order),
        training_busy_s=busy_seconds(np.zeros(len(train_start), dtype=np.int64), train_start, train_stop),
        rollout_s=float((stop - start).sum() + (lost_stop - lost_start).sum()),
        sync_s=float((sync_stop - sync_start).sum()),
        dropped=float(((run.drop_times > (begin if first > 0 else -math.inf)) & (run.drop_times <= end)).sum()),
    )


def extended(whole: Tally, steady: Tally, steps: int) -> Tally:
    """``whole`` (a run ended early) plus the steps up to ``steps`` it skipped, each one a mean step of ``steady``.

    Step times repeat the steady span's, in order, as often as it takes; the staleness histogram gets
    the steady span's counts scaled to the steps skipped (not rounded here).
    """
    skipped = steps - whole.steps
    scale = skipped / steady.steps
    staleness = dict(whole.staleness)
    for key, count in steady.staleness.items():
        staleness[key] = staleness.get(key, 0.0) + scale * count
    return Tally(
        steps=steps,
        wall_s=whole.wall_s + scale * steady.wall_s,
        step_times=np.concatenate([whole.step_times, np.resize(steady.step_times, skipped)]),
        trained=whole.trained + scale * steady.trained,
        tokens=whole.tokens + scale * steady.tokens,
        staleness=staleness,
        token_staleness=whole.token_staleness + scale * steady.token_staleness,
        generation_busy_s=whole.generation_busy_s + scale * steady.generation_busy_s,
        training_busy_s=whole.training_busy_s + scale * steady.training_busy_s,
        rollout_s=whole.rollout_s + scale * steady.rollout_s,
        sync_s=whole.sync_s + scale * steady.sync_s,
        dropped=whole.dropped + scale * steady.dropped,
    )


def run_summary(sim: Simulation) -> RunSummary:
    """The summary of a simulation that has run, as ``summarize`` would give it from the events.

    A run ended early (``sim.steady`` set) is extrapolated to the scenario's ``run.steps``: its
    summary says ``extrapolated: true`` and how many steps were simulated.
    """
    run = records(sim)
    simulated = len(run.train_end)
    order = SpanOrder.of(*generation_spans(run))  # sorted once for both tallies
    whole = tally(run, 0, simulated, order)
    finished, dropped = int(run.finished.sum()), int(whole.dropped)
    queued, in_flight = finished - int(whole.trained) - dropped, int((~run.finished).sum())
    labels: dict[str, Any] = {}
    restarts = sim.failures.log.summary(float(run.train_end[-1]) if simulated else 0.0) if sim.failures else None
    if restarts is not None:
        labels["restarts"] = restarts
    if sim.steady is not None:
        whole = extended(whole, tally(run, *sim.steady, order), sim.scenario.run.steps)
        labels = {"steps_simulated": simulated, "extrapolated": True}
    scenario = sim.scenario
    names = Labels("simulator", scenario.name, scenario.cluster.engines, scenario.engine_concurrency)
    return summary_of(whole, names, queued=queued, in_flight=in_flight, **labels)


def simulate_summary(
    scenario: Scenario, costs: CostModel | None = None, until_converged: Tolerance | None = None
) -> RunSummary:
    """Simulate ``scenario`` and summarize it without the event table; with ``until_converged``, end the
    run once converged and extrapolate it to ``run.steps``."""
    sim = Simulation(scenario, costs)
    sim.run(until_converged=until_converged)
    return run_summary(sim)
