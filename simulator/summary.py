"""A simulated run's summary straight from its records, without the event table: what sweeps need.

    Simulation (rollouts, engines' loads, recorder)
        ├─► RunSpans: per learner step, weight load, switch, drop, lost rollout; one busy span per group
        └─► RolloutChunk, CHUNK_ROLLOUTS at a time ─► RolloutSums per window of steps (added chunk by chunk)
                                                   ─► tally(steps) ─► Tally ─┬─► summary
                                                                             └─► extrapolated

``scenarios.record.summarize`` computes the summary from the event table; a
sweep only needs the figures, and building the table costs as much as a third
of the simulation. ``run_summary`` computes the same figures from per-rollout
arrays (``tests/test_early_stopping.py`` holds it to ``summarize``), a chunk of
rollouts at a time, so a planning run's summary takes memory by the group, not
by the rollout (``benchmarks/simulator_memory.py``'s ``size`` row).

The engines' busy seconds need every span of an engine at once: a group's rollouts all start with the group,
so the union of their spans is one span from its start to its last end (as the streamed record counts them,
``simulator.recording.streamed``), and the same union gives the same seconds to the bit.

A ``Tally`` holds a stretch of a run's figures as sums (seconds, rollouts,
tokens, a staleness histogram), so they add up: a run ended early
(``Simulation.steady``) is summarized as the run simulated plus the steps it
skipped, each worth one step of the steady span (``extrapolated_summary``).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..scenarios.record.busy import busy_seconds
from ..scenarios.record.run_summary import RunSummary
from ..scenarios.record.summarize import Labels, Tally, summary_of
from ..scenarios.spec.scenario import Scenario
from .convergence import Tolerance
from .costs import CostModel
from .packed import PackedGroups
from .recording.event_rows import LoadMarks
from .rollouts import cut_at_loads
from .simulation import Simulation

CHUNK_ROLLOUTS = 1 << 16  # rollouts summed at once (a few MB of arrays)
ENGINES_AT_ONCE = 16  # engines whose busy spans are merged at once (their sort's arrays, not the run's)


@dataclass(frozen=True)
class RolloutChunk:
    """Some of a finished simulation's rollouts as arrays, one entry per rollout."""

    start: np.ndarray  # (s)
    end: np.ndarray  # (s); the run's end for a rollout still running
    finished: np.ndarray  # bool
    step: np.ndarray  # the learner step that trained it, −1 if none
    tokens: np.ndarray  # completion tokens generated (all of them if finished)
    oldest: np.ndarray  # oldest policy version that generated it
    mean_version: np.ndarray  # token-weighted policy version
    engine: np.ndarray  # the engine that generated it


@dataclass(frozen=True)
class RunSpans:
    """A finished simulation's spans other than its rollouts', and every span that kept an engine busy."""

    train_start: np.ndarray  # per learner step, in step order (s)
    train_end: np.ndarray  # (s)
    sync_start: np.ndarray  # per weight load (s)
    sync_end: np.ndarray  # (s)
    drop_times: np.ndarray  # per dropped rollout (s)
    lost_start: np.ndarray  # per rollout lost with its engine (``simulator.failures``) (s)
    lost_end: np.ndarray  # (s)
    busy_engine: np.ndarray  # per busy span (a group's rollouts, a prefill, a switch, a weight load, a lost
    busy_start: np.ndarray  # rollout), by engine: ``busy_bounds`` cut them into runs of ENGINES_AT_ONCE engines
    busy_end: np.ndarray  # (s)
    busy_bounds: list[int]

    def generation_busy_s(self, begin: float, end: float) -> float:
        """The engines' busy seconds within ``[begin, end]``, added a bucket of engines at a time."""
        total = 0.0
        for lo, hi in itertools.pairwise(self.busy_bounds):
            starts, ends = np.clip(self.busy_start[lo:hi], begin, end), np.clip(self.busy_end[lo:hi], begin, end)
            total += busy_seconds(self.busy_engine[lo:hi], starts, ends)
        return total


@dataclass
class RolloutSums:
    """The rollouts' figures over learner steps ``[first, last)``, added chunk by chunk; spans cut to
    ``[begin, end]``."""

    first: int
    last: int
    begin: float
    end: float
    trained: int = 0
    tokens: int = 0
    staleness: Counter[int] = field(default_factory=Counter)
    token_staleness: float = 0.0
    rollout_s: float = 0.0

    def add(self, chunk: RolloutChunk) -> None:
        trained = (chunk.step >= self.first) & (chunk.step < self.last)
        stale = chunk.step[trained] - chunk.oldest[trained]
        keys, counts = np.unique(stale, return_counts=True)
        self.staleness.update(dict(zip(keys.tolist(), counts.tolist(), strict=True)))
        self.trained += int(trained.sum())
        self.tokens += int(chunk.tokens[trained].sum())
        self.token_staleness += float(
            ((chunk.step[trained] - chunk.mean_version[trained]) * chunk.tokens[trained]).sum()
        )
        start, stop = np.clip(chunk.start, self.begin, self.end), np.clip(chunk.end, self.begin, self.end)
        self.rollout_s += float((stop - start).sum())


def _window(train_end: np.ndarray, first: int, last: int) -> tuple[float, float]:
    """The seconds steps ``[first, last)`` span: from the end of the step before to the end of the last."""
    begin = float(train_end[first - 1]) if first > 0 else 0.0
    return begin, float(train_end[last - 1]) if last > 0 else 0.0


def rollout_chunks(sim: Simulation) -> Iterator[RolloutChunk]:
    """The simulation's rollouts (it has run), CHUNK_ROLLOUTS or so at a time (whole groups), in group order."""
    size, wall, chunk_rollouts = sim.rollouts.group_size, sim.env.now, CHUNK_ROLLOUTS
    progress = np.asarray([engine.progress for engine in sim.engines], dtype=np.float64)
    loads = [engine.loads for engine in sim.engines]
    marks = LoadMarks(loads)
    for piece in sim.rollouts.pieces():
        for part in piece.parts(max(1, chunk_rollouts // max(1, size))):
            yield _chunk(part, size, wall, progress, loads, marks)


def _chunk(
    part: PackedGroups, size: int, wall: float, progress: np.ndarray, loads: list, marks: LoadMarks
) -> RolloutChunk:
    columns = part.columns
    group = np.repeat(np.arange(columns.groups), size)
    engine = columns.engine.astype(np.int64)[group]
    end, tokens = columns.end, columns.tokens.astype(np.int64)
    finished = ~np.isnan(end)
    if not finished.all():  # a rollout still running counts the tokens its engine got through
        done = np.clip(progress[engine] - columns.join[group], 0, tokens).astype(np.int64)
        tokens, end = np.where(finished, tokens, done), np.where(finished, end, wall)
    version = columns.version.astype(np.int64)[group]
    cut = finished & (np.repeat(marks.first_after(columns), size) < columns.join[group] + tokens)
    oldest, mean_version, tokens = _versions_seen(part, loads, size, cut, version, tokens)
    return RolloutChunk(
        start=columns.start[group],
        end=end,
        finished=finished,
        step=np.where(finished, columns.step.astype(np.int64)[group], -1),
        tokens=tokens,
        oldest=oldest,
        mean_version=mean_version,
        engine=engine,
    )


def _versions_seen(
    part: PackedGroups, loads: list, size: int, cut: np.ndarray, version: np.ndarray, tokens: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Oldest and token-weighted policy version of each rollout, and its tokens, as the event table has them.

    A finished rollout its engine loaded new weights under (in-flight updates, ``cut``) is cut where each
    load came (``cut_at_loads``, as the event table's rows are); the others saw one version.
    """
    columns = part.columns
    oldest, mean_version, tokens = version.copy(), version.astype(np.float64), tokens.copy()
    for index in np.flatnonzero(cut).tolist():
        group = index // size
        later = loads[columns.engine[group]][columns.loads_seen[group] :]
        pieces = cut_at_loads(float(columns.join[group]), int(tokens[index]), int(version[index]), later)
        count = sum(piece.tokens for piece in pieces)
        oldest[index] = min(piece.version for piece in pieces)
        mean_version[index] = sum(piece.version * piece.tokens for piece in pieces) / count if count else oldest[index]
        tokens[index] = count
    return oldest, mean_version, tokens


def _group_spans(chunk: RolloutChunk, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One busy span per group: its engine, its start, its last rollout's end."""
    engine, start = chunk.engine[::size].copy(), chunk.start[::size].copy()  # (views would hold the chunk)
    return engine, start, chunk.end.reshape(-1, size).max(axis=1) if len(engine) else chunk.end[:0]


def tallies(sim: Simulation, windows: Sequence[tuple[int, int]]) -> list[Tally]:
    """The figures of each window ``[first, last)`` of learner steps of a simulation that has run, its rollouts
    read a chunk at a time."""
    trains = sorted(sim.recorder.trains)
    train_end = np.asarray([t.end for t in trains], dtype=np.float64)
    sums = [RolloutSums(first, last, *_window(train_end, first, last)) for first, last in windows]
    groups: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for chunk in rollout_chunks(sim):
        for window in sums:
            window.add(chunk)
        groups.append(_group_spans(chunk, sim.rollouts.group_size))
    spans = _run_spans(sim, trains, groups)
    return [tally(spans, window) for window in sums]


def _run_spans(sim: Simulation, trains: list, groups: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> RunSpans:
    """The run's spans; ``groups``: one busy span per group, chunk by chunk."""
    syncs, switches, size = sim.recorder.syncs, sim.recorder.switches, sim.rollouts.group_size
    lost = sim.failures.log.lost if sim.failures is not None else []
    lost_engine = np.asarray([span.engine for span in lost], dtype=np.int64)
    lost_start = np.asarray([span.start for span in lost], dtype=np.float64)
    lost_end = np.asarray([span.end for span in lost], dtype=np.float64)
    prefills = [
        (piece.columns.engine, piece.columns.prefill_start, piece.columns.prefill_end)
        for piece in sim.rollouts.pieces()
    ]
    on_engines = switches.engine >= 0  # not the learner's
    parts = [
        *groups,
        (syncs.engine, syncs.start, syncs.end),
        *prefills,
        (switches.engine[on_engines], switches.start[on_engines], switches.end[on_engines]),
        (lost_engine, lost_start, lost_end),
    ]
    engine = np.concatenate([part[0].astype(np.int64) for part in parts])
    by_engine = np.argsort(engine, kind="stable")
    engine = engine[by_engine]
    bucket = engine // ENGINES_AT_ONCE
    bounds = [0, *(np.flatnonzero(bucket[1:] != bucket[:-1]) + 1).tolist(), len(engine)]
    return RunSpans(
        train_start=np.asarray([t.start for t in trains], dtype=np.float64),
        train_end=np.asarray([t.end for t in trains], dtype=np.float64),
        sync_start=syncs.start,
        sync_end=syncs.end,
        drop_times=np.repeat(np.asarray([d.time for d in sim.recorder.drops], dtype=np.float64), size),
        lost_start=lost_start,
        lost_end=lost_end,
        busy_engine=engine,
        busy_start=np.concatenate([part[1] for part in parts]).astype(np.float64)[by_engine],
        busy_end=np.concatenate([part[2] for part in parts]).astype(np.float64)[by_engine],
        busy_bounds=bounds if len(engine) else [0],
    )


def tally(run: RunSpans, rollouts: RolloutSums) -> Tally:
    """The figures of ``rollouts``' window of steps: spans cut to its time, rollouts trained by those steps."""
    first, last, begin, end = rollouts.first, rollouts.last, rollouts.begin, rollouts.end
    lost_start, lost_stop = np.clip(run.lost_start, begin, end), np.clip(run.lost_end, begin, end)
    sync_start, sync_stop = np.clip(run.sync_start, begin, end), np.clip(run.sync_end, begin, end)
    train_start, train_stop = np.clip(run.train_start, begin, end), np.clip(run.train_end, begin, end)
    return Tally(
        steps=last - first,
        wall_s=end - begin,
        step_times=np.diff(np.concatenate([[begin], run.train_end[first:last]])),
        trained=float(rollouts.trained),
        tokens=float(rollouts.tokens),
        staleness={int(k): float(c) for k, c in sorted(rollouts.staleness.items())},
        token_staleness=rollouts.token_staleness,
        generation_busy_s=run.generation_busy_s(begin, end),
        training_busy_s=busy_seconds(np.zeros(len(train_start), dtype=np.int64), train_start, train_stop),
        rollout_s=rollouts.rollout_s + float((lost_stop - lost_start).sum()),
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
    simulated = len(sim.recorder.trains)
    windows = [(0, simulated)] if sim.steady is None else [(0, simulated), sim.steady]
    whole, *steady = tallies(sim, windows)
    finished = sum(int((~np.isnan(piece.columns.end)).sum()) for piece in sim.rollouts.pieces())
    started = sum(len(piece.columns.end) for piece in sim.rollouts.pieces())
    dropped = int(whole.dropped)
    queued, in_flight = finished - int(whole.trained) - dropped, started - finished
    labels: dict[str, Any] = {}
    restarts = (
        sim.failures.log.summary(max((t.end for t in sim.recorder.trains), default=0.0)) if sim.failures else None
    )
    if restarts is not None:
        labels["restarts"] = restarts
    if steady:
        whole = extended(whole, steady[0], sim.scenario.run.steps)
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
