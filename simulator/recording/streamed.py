"""A simulated run's record written in pieces: the event table as Parquet row groups, its summary added up
piece by piece, so a long run's record is never in memory whole.

    Simulation (has run) ─► EventRows ─► groups(lo, hi), CHUNK_ROLLOUTS at a time ─┬─► ParquetWriter ─► events.parquet
                                                                                  └─► Sums: trained, tokens,
                                                                                      staleness, seconds by kind
                         ─► busy spans: one per group (its samples start together), prefills, loads, switches
                         ─► others() (loads, switches, steps), failures' rows: the last row group, and added in
                         ─► RunSummary (summarize's figures) ─► summary.json, last

``scenarios.record.summarize`` computes the same summary from a whole table with the same ``Sums``
(``tests/test_streamed.py`` holds the two together), adding it all at once. The engines' busy seconds need
every span of an engine at once; a group's rollouts all start with the group and its pieces (with in-flight
updates) follow one another, so the union of a group's spans is one span from its start to its last end:
one span a group, not one a row. Memory: the packed rollouts (``simulator.rollouts``, 15 bytes a
rollout), a piece's rows, and the per-group busy spans (``benchmarks/simulator_memory.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ...scenarios.files.textfile import dumps
from ...scenarios.files.writing import write_text, written
from ...scenarios.record.busy import busy_seconds
from ...scenarios.record.record import EVENTS_FILE, SCENARIO_FILE
from ...scenarios.record.run_summary import SUMMARY_FILE, RunSummary
from ...scenarios.record.summarize import DevicePools, Labels, Sums, restarts_of, role_busy_seconds
from ...scenarios.spec.loading import dump_scenario
from .event_rows import EventRows, as_table

if TYPE_CHECKING:
    import pandas as pd

    from ...scenarios.spec.scenario import Scenario
    from ..costs import CostModel
    from ..failures import LostSpan
    from ..packed import Columns
    from ..simulation import Simulation, StepCallback
    from .spans import Spans

CHUNK_ROLLOUTS = 1 << 16  # rollouts a row group holds (some 30 MB of rows while it is built; fewer, larger pieces
# cost pandas less per row: 0.82 s against 1.28 s at 1 << 14 for large-streaming's record)


def write_streamed(sim: Simulation, out: Path) -> RunSummary:
    """Write the run directory ``out`` of ``sim`` (which has run): scenario.yaml, events.parquet in row groups,
    summary.json last; the summary written."""
    import pyarrow.parquet as pq

    out.mkdir(parents=True, exist_ok=True)
    (out / SUMMARY_FILE).unlink(missing_ok=True)
    write_text(out / SCENARIO_FILE, dump_scenario(sim.scenario.resolved()))
    rows = _event_rows(sim)
    wall = max((span.end for span in sim.recorder.trains), default=0.0)
    per_part = max(1, CHUNK_ROLLOUTS // rows.size)
    sums, spans, schema = Sums(), BusySpans(), _schema()
    with written(out / EVENTS_FILE) as temporary, pq.ParquetWriter(temporary, schema) as writer:
        for piece in rows.pieces:
            for part in piece.parts(per_part):
                sums.add(_write(writer, as_table(rows.groups(part)), wall))
                spans.add_groups(part.columns, wall)
        learner: list[pd.DataFrame] = []
        for frame in [*rows.others(), *_failure_rows(sim)]:
            for lo in range(0, len(frame), CHUNK_ROLLOUTS):
                cut = _write(writer, as_table([frame.iloc[lo : lo + CHUNK_ROLLOUTS]]), wall)
                sums.add(cut)
                learner.append(cut.loc[(cut["worker"] == "learner") | cut["kind"].isin(("lost", "restart"))])
    spans.add_others(rows.syncs, rows.switches, sim.failures.log.lost if sim.failures is not None else [], wall)
    summary = _summary(sim, sums, as_table(learner), spans.busy_seconds(), wall)
    write_text(out / SUMMARY_FILE, dumps(summary.to_json(), indent=2) + "\n")
    return summary


def _write(writer: object, table: pd.DataFrame, wall: float) -> pd.DataFrame:
    """Write ``table`` as a row group; the same rows cut at the run's end, for the sums."""
    import pyarrow as pa

    writer.write_table(pa.Table.from_pandas(table, schema=writer.schema, preserve_index=False))  # type: ignore[attr-defined]
    return _cut(table, wall)


class BusySpans:
    """The spans that keep engines busy, one per group instead of one per row (module docstring), cut at the
    run's end, kept in buckets of ``ENGINES_AT_ONCE`` engines; busy seconds are added a bucket at a time."""

    ENGINES_AT_ONCE = 64

    def __init__(self) -> None:
        self.buckets: dict[int, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {}

    def _add(self, workers: np.ndarray, starts: np.ndarray, ends: np.ndarray, wall: float) -> None:
        bucket = workers // self.ENGINES_AT_ONCE
        for key in np.unique(bucket).tolist():
            mine = bucket == key
            spans = (workers[mine].astype(np.int32), np.minimum(starts[mine], wall), np.minimum(ends[mine], wall))
            self.buckets.setdefault(key, []).append(spans)

    def add_groups(self, columns: Columns, wall: float) -> None:
        """A group: its start to its last rollout's end (NaN, the run's end, for one still running); its prefill."""
        size = len(columns.end) // max(1, columns.groups)
        group_end = columns.end.reshape(-1, size).max(axis=1) if columns.groups else np.zeros(0)
        group_end[np.isnan(group_end)] = wall
        self._add(columns.engine, columns.start, group_end, wall)
        self._add(columns.engine, columns.prefill_start, columns.prefill_end, wall)

    def add_others(self, syncs: Spans, switches: Spans, lost: list[LostSpan], wall: float) -> None:
        """Weight loads, engines' phase switches and the rollouts lost with their engines."""
        self._add(syncs.engine, syncs.start, syncs.end, wall)
        on_engines = switches.engine >= 0
        self._add(switches.engine[on_engines], switches.start[on_engines], switches.end[on_engines], wall)
        self._add(
            np.asarray([span.engine for span in lost], dtype=np.int64),
            np.asarray([span.start for span in lost], dtype=np.float64),
            np.asarray([span.end for span in lost], dtype=np.float64),
            wall,
        )

    def busy_seconds(self) -> float:
        """Added over engines, in engine order (each bucket's spans released once counted)."""
        total = 0.0
        for key in sorted(self.buckets):
            workers, starts, ends = (np.concatenate(parts) for parts in zip(*self.buckets.pop(key), strict=True))
            total += busy_seconds(workers, starts, ends)
        return total


def _event_rows(sim: Simulation) -> EventRows:
    engines = sim.engines
    progress, loads = [engine.progress for engine in engines], [engine.loads for engine in engines]
    return sim.recorder.event_rows(progress, loads, sim.env.now, sim.costs.tensor_parallel())


def _failure_rows(sim: Simulation) -> list[pd.DataFrame]:
    return [] if sim.failures is None else [sim.failures.log.rows()]


def _schema() -> object:
    import pyarrow as pa

    return pa.Schema.from_pandas(as_table([]), preserve_index=False)


def _cut(events: pd.DataFrame, wall: float) -> pd.DataFrame:
    """Spans cut at the run's end, as ``summarize`` cuts them."""
    return events.assign(start=events["start"].clip(upper=wall), end=events["end"].clip(upper=wall))


def _summary(sim: Simulation, sums: Sums, learner: pd.DataFrame, generation_busy: float, wall: float) -> RunSummary:
    """``learner``: the learner's rows (steps, switches), and the failures' (lost, restart), cut at ``wall``."""
    scenario = sim.scenario
    labels = Labels("simulator", scenario.name, scenario.cluster.engines, scenario.engine_concurrency)
    train = learner.loc[learner["kind"] == "train", ["step", "end"]].sort_values("step")
    busy = (generation_busy, role_busy_seconds(learner, "training"))
    return sums.summary(labels, train, busy, wall, DevicePools.of(scenario.cluster), restarts_of(learner))


def simulate_to(
    scenario: Scenario, out: Path, on_step: StepCallback | None = None, costs: CostModel | None = None
) -> RunSummary:
    """Simulate ``scenario`` and write its run directory ``out`` in pieces; its summary."""
    from ..simulation import Simulation

    sim = Simulation(scenario, costs)
    sim.run(on_step)
    return write_streamed(sim, out)
