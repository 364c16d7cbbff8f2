"""The event table's rows, built from a finished simulation's arrays for any range of groups.

    Rollouts.pieces() ──┐
    Recorder (drops,    ├─► EventRows ─► groups(piece): rollout, drop and prefill rows of a piece's groups
      syncs, switches,  │              └► others(): sync, switch and train rows
      trains)          ─┘
    Recorder.events: groups(the whole run as one piece) + others(), one table
    simulator.recording.streamed: groups(piece) piece by piece (as packed) into Parquet row groups, others() last

A rollout row's ``comm_s`` is its share of its engine's tensor-parallel
all-reduces: every decode step's all-reduce time split evenly among the
rollouts in the batch, so the shares of an engine's rows add up to its
all-reduce time exactly. Each rollout advances one token per decode step of
its engine, so in the engine's progress (decode steps) it occupies
``[join, join + tokens]``, and the batch size at any progress is the number
of such intervals covering it; ``DecodeShares`` integrates 1 / batch along them
(for every rollout of the run at once: a chunk's batch includes rollouts of other chunks).
"""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from ...scenarios.record.record import EVENT_COLUMNS
from ..costs import AllReduceCost
from ..packed import Columns, PackedGroups
from ..rollouts import WeightLoad, cut_at_loads
from .spans import Spans

if TYPE_CHECKING:
    import pandas as pd

    from .recorder import Drop, TrainSpan

RowColumns = dict[str, Any]  # one kind of the event table's rows, column by column (``pd.DataFrame(columns)``)


class EventRows:
    """Builds the rows of a finished run (``Simulation.run`` has returned)."""

    def __init__(
        self,
        pieces: list[PackedGroups],
        size: int,
        end_state: tuple[list[float], list[list[WeightLoad]], float],
        logged: tuple[list[Drop], Spans, Spans, list[TrainSpan]],
        tensor_parallel: AllReduceCost,
    ) -> None:
        """``pieces``: the run's groups (``Rollouts.pieces``); ``end_state``: each engine's progress and weight
        loads, and the wall time at the end; ``logged``: the recorder's drops, syncs, switches and learner steps."""
        self.pieces, self.size = pieces, size
        self.progress, self.loads, self.wall = end_state
        drops, self.syncs, self.switches, self.trains = logged
        order = sorted(range(len(drops)), key=lambda index: drops[index].group)
        self.drop_group = np.asarray([drops[index].group for index in order], dtype=np.int64)
        self.drop_time = np.asarray([drops[index].time for index in order], dtype=np.float64)
        self.names = np.asarray(engine_names(len(self.progress)) or [""])
        self.marks = LoadMarks(self.loads)
        empty = (np.zeros(0, dtype=np.int32), np.zeros(0), np.zeros(0, dtype=np.int64))
        engines, joins, tokens = empty
        if tensor_parallel.per_step:  # each engine's batch over its progress, from all of its rollouts
            engines = np.concatenate([empty[0], *(np.repeat(piece.columns.engine, size) for piece in pieces)])
            joins = np.concatenate([empty[1], *(np.repeat(piece.columns.join, size) for piece in pieces)])
            tokens = np.concatenate([empty[2], *(self._done_tokens(piece)[0] for piece in pieces)])
        self.shares = DecodeShares(engines, joins, tokens, tensor_parallel)

    def _done_tokens(self, piece: PackedGroups) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per rollout of ``piece``: tokens generated (all if finished), end (the run's end if not), finished."""
        size, columns = self.size, piece.columns
        end, tokens = columns.end, columns.tokens.astype(np.int64)
        finished = ~np.isnan(end)
        if not finished.all():
            group = np.repeat(np.arange(columns.groups), size)
            at = np.asarray(self.progress)[columns.engine[group]]
            done = np.clip(at - columns.join[group], 0, tokens).astype(np.int64)
            tokens, end = np.where(finished, tokens, done), np.where(finished, end, self.wall)
        return tokens, end, finished

    def groups(self, piece: PackedGroups) -> list[pd.DataFrame]:
        """The rollout, drop and prefill rows of ``piece``'s groups."""
        import pandas as pd

        return [
            self._rollout_rows(piece),
            pd.DataFrame(self._drop_rows(piece)),
            pd.DataFrame(self._prefill_rows(piece)),
        ]

    def others(self) -> list[pd.DataFrame]:
        """The sync, switch and train rows."""
        import pandas as pd

        return [pd.DataFrame(self._sync_rows()), pd.DataFrame(self._switch_rows()), pd.DataFrame(self._train_rows())]

    def _rollout_rows(self, piece: PackedGroups) -> pd.DataFrame:
        import pandas as pd

        size, columns = self.size, piece.columns
        local = np.repeat(np.arange(columns.groups), size)
        group_engine = columns.engine[local].astype(np.int64)
        tokens, end, finished = self._done_tokens(piece)
        joins = columns.join[local]
        rows = pd.DataFrame(
            {
                "worker": labels(engine_names(len(self.progress)), group_engine),
                "role": labels(["generation"], np.zeros(len(local), dtype=np.int64)),
                "kind": labels(["unfinished", "generate"], finished.astype(np.int64)),
                "start": columns.start[local],
                "end": end,
                "step": np.where(finished, columns.step[local], -1).astype(np.int64),
                "version": columns.version[local].astype(np.int64),
                "group": piece.first + local,
                "sample": np.tile(np.arange(size), columns.groups),
                "tokens": tokens,
                "comm_s": self.shares.of(group_engine, joins, tokens),
            }
        )
        saw_loads = finished & (np.repeat(self.marks.first_after(columns), size) < joins + tokens)
        return self._split_by_version(rows, saw_loads, piece)

    def _split_by_version(self, rows: pd.DataFrame, saw_loads: np.ndarray, piece: PackedGroups) -> pd.DataFrame:
        """With in-flight updates, one row per (rollout, version) instead of one per rollout: those rows that
        ``saw_loads`` (finished, and their engine loaded weights before they did)."""
        import pandas as pd

        split_rows = np.flatnonzero(saw_loads).tolist()
        if not split_rows:
            return rows
        columns, pieces = piece.columns, []
        for index in split_rows:
            row = rows.iloc[index]
            group = int(row["group"]) - piece.first
            later = self.loads[columns.engine[group]][columns.loads_seen[group] :]
            pieces.extend(self._segments(row, later, float(columns.join[group])))
        kept = np.ones(len(rows), dtype=bool)
        kept[split_rows] = False
        return pd.concat([rows[kept], pd.DataFrame(pieces)], ignore_index=True)

    def _segments(self, row: pd.Series, loads: list[WeightLoad], join: float) -> list[dict]:
        """Cut one rollout's row where its engine loaded new weights mid-rollout (``cut_at_loads``)."""
        engine, start = int(row["worker"].removeprefix("engine-")), row["start"]
        rows = []
        for piece in cut_at_loads(join, int(row["tokens"]), int(row["version"]), loads):
            end = row["end"] if piece.end_time is None else piece.end_time
            comm = self.shares.between(engine, piece.first, piece.last, piece.tokens)
            rows.append(
                {**row, "start": start, "end": end, "version": piece.version, "tokens": piece.tokens, "comm_s": comm}
            )
            start = end
        return rows

    def _drop_rows(self, piece: PackedGroups) -> RowColumns:
        size, columns, lo = self.size, piece.columns, piece.first
        first, last = np.searchsorted(self.drop_group, [lo, lo + columns.groups])
        groups = np.repeat(self.drop_group[first:last], size)
        times = np.repeat(self.drop_time[first:last], size)
        samples = np.tile(np.arange(size), last - first)
        return {
            "worker": "queue",
            "role": "generation",
            "kind": "drop",
            "start": times,
            "end": times,
            "step": -1,
            "version": columns.version[groups - lo].astype(np.int64),
            "group": groups,
            "sample": samples,
            "tokens": columns.tokens[(groups - lo) * size + samples].astype(np.int64),
            "comm_s": 0.0,
        }

    def _prefill_rows(self, piece: PackedGroups) -> RowColumns:
        columns = piece.columns
        return {
            "worker": labels(list(self.names), columns.engine.astype(np.int64)),
            "role": "generation",
            "kind": "prefill",
            "start": columns.prefill_start,
            "end": columns.prefill_end,
            "step": -1,
            "version": columns.version.astype(np.int64),
            "group": piece.first + np.arange(columns.groups),
            "sample": -1,
            "tokens": columns.prompt.astype(np.int64),
            "comm_s": 0.0,
        }

    def _sync_rows(self) -> RowColumns:
        engine, start, end, version = self.syncs
        return {
            "worker": self.names[engine],
            "role": "generation",
            "kind": "sync",
            "start": start,
            "end": end,
            "step": -1,
            "version": version,
            "group": -1,
            "sample": -1,
            "tokens": 0,
            "comm_s": 0.0,
        }

    def _switch_rows(self) -> RowColumns:
        engine, start, end, _ = self.switches
        learner = engine < 0
        return {
            "worker": np.where(learner, "learner", self.names[np.where(learner, 0, engine)]),
            "role": np.where(learner, "training", "generation"),
            "kind": "switch",
            "start": start,
            "end": end,
            "step": -1,
            "version": -1,
            "group": -1,
            "sample": -1,
            "tokens": 0,
            "comm_s": 0.0,
        }

    def _train_rows(self) -> RowColumns:
        step, start, end, tokens, comm = zip(*self.trains, strict=True) if self.trains else ((),) * 5
        return {
            "worker": "learner",
            "role": "training",
            "kind": "train",
            "start": start,
            "end": end,
            "step": step,
            "version": step,
            "group": -1,
            "sample": -1,
            "tokens": tokens,
            "comm_s": comm,
        }


def as_table(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Frames of rows as one table of the event table's columns and types (empty frames left out)."""
    import pandas as pd

    frames = [frame for frame in frames if len(frame)]
    table = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=list(EVENT_COLUMNS))
    return table.astype(EVENT_COLUMNS)[list(EVENT_COLUMNS)]


def engine_names(engines: int) -> list[str]:
    """The event table's ``worker`` of each engine."""
    return [f"engine-{index}" for index in range(engines)]


def labels(names: list[str], codes: np.ndarray) -> pd.api.extensions.ExtensionArray:
    """``names[codes]`` as a column of the event table's string type, built by Arrow: a Python string per row
    would cost more than the rest of the table."""
    import pandas as pd
    import pyarrow as pa

    return pd.array(pa.array(names, type=pa.string()).take(pa.array(codes)), dtype="string")


class DecodeShares:
    """Each rollout's share of its engine's tensor-parallel all-reduce time (module docstring).

    With H(p) = ∫ 1 / batch(p) dp along an engine's progress, a rollout over
    ``[lo, hi]`` with ``n`` tokens gets ``per_step · (H(hi) − H(lo)) + per_rollout · n``.
    """

    def __init__(self, engines: np.ndarray, joins: np.ndarray, tokens: np.ndarray, cost: AllReduceCost) -> None:
        self.cost = cost
        self._curves: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        if cost.per_step:
            order = np.argsort(engines, kind="stable")
            bounds = np.flatnonzero(np.diff(engines[order], prepend=-1, append=-1))
            for lo, hi in itertools.pairwise(bounds.tolist()):
                mine = order[lo:hi]
                self._curves[int(engines[mine[0]])] = _inverse_batch_integral(joins[mine], joins[mine] + tokens[mine])

    def of(self, engines: np.ndarray, joins: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        """The share of each rollout given (its engine, join and tokens)."""
        shares = self.cost.per_rollout * tokens.astype(np.float64)
        if not self._curves:
            return shares
        for engine in np.unique(engines).tolist():
            points, integral = self._curves[engine]
            mine = engines == engine
            lo, hi = joins[mine], joins[mine] + tokens[mine]
            shares[mine] += self.cost.per_step * (np.interp(hi, points, integral) - np.interp(lo, points, integral))
        return shares

    def between(self, engine: int, lo: float, hi: float, tokens: int) -> float:
        """The share of a piece of one rollout, from progress ``lo`` to ``hi`` (``tokens`` of them)."""
        share = self.cost.per_rollout * tokens
        if engine in self._curves:
            points, integral = self._curves[engine]
            share += self.cost.per_step * float(np.interp(hi, points, integral) - np.interp(lo, points, integral))
        return share


def _inverse_batch_integral(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Points where the batch changes and H(p) = ∫ 1 / batch at them (0 where no rollout is in flight)."""
    points = np.concatenate([starts, ends])
    order = np.argsort(points, kind="stable")
    points = points[order]
    batch = np.cumsum(np.concatenate([np.ones(len(starts)), -np.ones(len(ends))])[order])
    # Between points k and k + 1 the batch is what is open after point k (equal points span nothing).
    inverse = np.divide(1.0, batch[:-1], out=np.zeros(len(points) - 1), where=batch[:-1] > 0.5)
    return points, np.concatenate([[0.0], np.cumsum(np.diff(points) * inverse)])


class LoadMarks:
    """Every engine's weight loads as one array of progress marks, for ``first_after``."""

    def __init__(self, loads: list[list[WeightLoad]]) -> None:
        self.marks = np.asarray([load.progress for engine in loads for load in engine] + [math.inf], dtype=np.float64)
        self.offsets = np.concatenate([[0], np.cumsum([len(engine) for engine in loads])]).astype(np.int64)

    def first_after(self, columns: Columns) -> np.ndarray:
        """Per group: the engine progress at its engine's first weight load after the group started (inf if
        none). A finished rollout saw more than one policy version exactly when this is below its finishing
        progress."""
        engine = columns.engine.astype(np.int64)
        seen = columns.loads_seen.astype(np.int64)
        offsets = self.offsets
        index = np.where(seen < np.diff(offsets)[engine], offsets[engine] + seen, len(self.marks) - 1)
        return self.marks[index]


def first_load_after(columns: Columns, loads: list[list[WeightLoad]], size: int) -> np.ndarray:
    """``LoadMarks.first_after`` per rollout."""
    return np.repeat(LoadMarks(loads).first_after(columns), size)
