"""The run's event table, built once at the end from the rollouts and what the recorder appended.

    Rollouts (groups, samples) ─┐
    Recorder: prefills, syncs,  ├─► events() ─► table of ``scenarios.record.record.EVENT_COLUMNS``
      switches, trains, drops  ─┘

During the run the recorder only appends (cheap per event); ``events`` builds
the table once, with numpy. Weight loads and phase switches arrive one by one or as a block (dormant
engines, ``simulator.dormant``); each carries its decision's number and its rank in it (loads in engine
order), so their rows come out in the order the decisions took them. It reads the engines' final progress and weight
loads as plain lists, so it knows nothing of the engine or the simulation.

A rollout row's ``comm_s`` is its share of its engine's tensor-parallel
all-reduces: every decode step's all-reduce time split evenly among the
rollouts in the batch, so the shares of an engine's rows add up to its
all-reduce time exactly. Each rollout advances one token per decode step of
its engine, so in the engine's progress (decode steps) it occupies
``[join, join + tokens]``, and the batch size at any progress is the number
of such intervals covering it; ``DecodeShares`` integrates 1 / batch along them.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from ..scenarios.record.record import EVENT_COLUMNS
from ..scenarios.rules.workload import TrainTokens
from .costs import AllReduceCost
from .rollouts import Rollouts, WeightLoad, cut_at_loads
from .spans import Block, SpanLog, Spans

if TYPE_CHECKING:
    import pandas as pd


Columns = dict[str, Any]  # one kind of the event table's rows, column by column (``pd.DataFrame(columns)``)


class Drop(NamedTuple):
    group: int
    time: float  # (s)


class TrainSpan(NamedTuple):
    """One learner step."""

    step: int
    start: float  # (s)
    end: float  # (s)
    tokens: int  # prompt + completion tokens trained
    comm_s: float  # exposed data-parallel communication (s)


class Recorder:
    def __init__(self, rollouts: Rollouts, ranks: int = 1, square_weight: float = 0.0) -> None:
        self.rollouts = rollouts
        self.group_size = rollouts.group_size
        self._ranks, self._square_weight = ranks, square_weight  # how the learner's rows fall on its ranks
        self._drops: list[Drop] = []
        self._syncs = SpanLog()
        self.decision = 0  # numbers the backend's decisions, so syncs and switches keep their order
        # Each group's prefill span, by group id (groups are numbered in start order). Plain floats, not
        # tuples: one per group, and floats are no work for the garbage collector.
        self._prefill_start: list[float] = []
        self._prefill_end: list[float] = []
        self._switches = SpanLog()
        self._trains: list[TrainSpan] = []

    def dropped(self, group: int, now: float) -> None:
        self._drops.append(Drop(group, now))

    def decide(self) -> None:
        """A new decision begins: what is appended from now on comes after what came before."""
        self.decision += 1

    def sync(self, engine: int, start: float, end: float, version: int, rank: int) -> None:
        """``engine`` loads ``version``; ``rank`` orders it within this decision."""
        self._syncs.rows.append((self.decision, rank, engine, start, end, version))

    def syncs_of(self, engines: np.ndarray, start: np.ndarray, end: np.ndarray, version: int) -> None:
        """Each of ``engines`` loads ``version`` (ranked by engine index)."""
        self._syncs.blocks.append(Block(self.decision, engines, start, end, version))

    def prefill(self, start: float, end: float) -> None:
        """The prefill of the group started last."""
        self._prefill_start.append(start)
        self._prefill_end.append(end)

    def prefill_again(self, group: int, start: float, end: float) -> None:
        """The prefill of ``group``, started again after its engine was lost."""
        self._prefill_start[group], self._prefill_end[group] = start, end

    def switch(self, engine: int, start: float, end: float, rank: int = 0) -> None:
        """Colocated devices change phase: ``engine`` back to generation, or −1, the learner to training."""
        self._switches.rows.append((self.decision, rank, engine, start, end, -1))

    def switches_of(self, engines: np.ndarray, start: np.ndarray, end: np.ndarray) -> None:
        self._switches.blocks.append(Block(self.decision, engines, start, end, -1))

    def train(self, step: int, start: float, end: float, tokens: int, comm_s: float) -> None:
        self._trains.append(TrainSpan(step, start, end, tokens, comm_s))

    @property
    def trains(self) -> list[TrainSpan]:
        """Each learner step, as appended."""
        return self._trains

    @property
    def syncs(self) -> Spans:
        """Each weight load, in the order decided."""
        return self._syncs.columns()

    @property
    def prefills(self) -> tuple[list[float], list[float]]:
        """Start and end of each group's prefill, by group id."""
        return self._prefill_start, self._prefill_end

    @property
    def switches(self) -> Spans:
        """Each phase switch, in the order decided."""
        return self._switches.columns()

    @property
    def drops(self) -> list[Drop]:
        """Each dropped group, as appended."""
        return self._drops

    def batch_tokens(self, groups: list[int], minibatches: int) -> TrainTokens:
        """Prompt plus completion tokens the learner trains on for these groups, real and padded."""
        size, prompts, tokens = self.group_size, self.rollouts.prompt, self.rollouts.tokens
        completions = np.array([tokens[g * size : (g + 1) * size] for g in groups], dtype=np.int64)
        rows = completions + np.array([prompts[g] for g in groups], dtype=np.int64)[:, None]
        return TrainTokens.of_array(rows, minibatches, self._ranks, self._square_weight)

    def events(
        self,
        progress: list[float],
        loads: list[list[WeightLoad]],
        wall_time: float,
        tensor_parallel: AllReduceCost | None = None,
    ) -> pd.DataFrame:
        """The event table; ``progress`` and ``loads`` are each engine's at the end of the run,
        ``tensor_parallel`` the all-reduce time of one decode step (none: no rollout pays any)."""
        import pandas as pd

        names = np.asarray(engine_names(len(progress)) or [""])
        rows_of_kinds = [self._drop_rows(), self._sync_rows(names), self._prefill_rows(names)]
        rows_of_kinds += [self._switch_rows(names), self._train_rows()]
        frames = [
            self._rollout_rows(progress, loads, wall_time, tensor_parallel or AllReduceCost()),
            *(pd.DataFrame(columns) for columns in rows_of_kinds),
        ]
        table = pd.concat([frame for frame in frames if len(frame)], ignore_index=True)
        return table.astype(EVENT_COLUMNS)[list(EVENT_COLUMNS)]

    def _rollout_rows(
        self, progress: list[float], loads: list[list[WeightLoad]], wall_time: float, tensor_parallel: AllReduceCost
    ) -> pd.DataFrame:
        import pandas as pd

        size, rollouts = self.group_size, self.rollouts
        group = np.repeat(np.arange(len(rollouts)), size)
        group_engine = np.asarray(rollouts.engine, dtype=np.int64)
        end = np.asarray(rollouts.end, dtype=np.float64)
        tokens = np.asarray(rollouts.tokens, dtype=np.int64)
        finished = ~np.isnan(end)
        if not finished.all():
            at = np.asarray(progress)[group_engine[group]]
            done = np.clip(at - np.asarray(rollouts.join)[group], 0, tokens).astype(np.int64)
            tokens = np.where(finished, tokens, done)
            end = np.where(finished, end, wall_time)
        trained_step = np.asarray(rollouts.step, dtype=np.int64)[group]
        joins = np.asarray(rollouts.join, dtype=np.float64)[group]
        shares = DecodeShares(group_engine[group], joins, tokens, tensor_parallel)
        rows = pd.DataFrame(
            {
                "worker": labels(engine_names(len(progress)), group_engine[group]),
                "role": labels(["generation"], np.zeros(len(group), dtype=np.int64)),
                "kind": labels(["unfinished", "generate"], finished.astype(np.int64)),
                "start": np.asarray(rollouts.start)[group],
                "end": end,
                "step": np.where(finished, trained_step, -1),
                "version": np.asarray(rollouts.version)[group],
                "group": group,
                "sample": np.tile(np.arange(size), len(rollouts)),
                "tokens": tokens,
                "comm_s": shares.of_rollouts(),
            }
        )
        return self._split_by_version(
            rows, loads, shares, finished & (first_load_after(rollouts, loads) < joins + tokens)
        )

    def _split_by_version(
        self, rows: pd.DataFrame, loads: list[list[WeightLoad]], shares: DecodeShares, saw_loads: np.ndarray
    ) -> pd.DataFrame:
        """With in-flight updates, one row per (rollout, version) instead of one per rollout: those rows that
        ``saw_loads`` (finished, and their engine loaded weights before they did)."""
        import pandas as pd

        rollouts, size = self.rollouts, self.group_size
        split_rows = np.flatnonzero(saw_loads).tolist()
        if not split_rows:
            return rows
        pieces: list[dict] = []
        for index in split_rows:
            group = index // size
            later = loads[rollouts.engine[group]][rollouts.loads_seen[group] :]
            pieces.extend(self._segments(rows.loc[index], later, rollouts.join[group], shares))
        return pd.concat([rows.drop(index=split_rows), pd.DataFrame(pieces)], ignore_index=True)

    @staticmethod
    def _segments(row: pd.Series, loads: list[WeightLoad], join: float, shares: DecodeShares) -> list[dict]:
        """Cut one rollout's row where its engine loaded new weights mid-rollout (``cut_at_loads``)."""
        engine, start = int(row["worker"].removeprefix("engine-")), row["start"]
        rows = []
        for piece in cut_at_loads(join, int(row["tokens"]), int(row["version"]), loads):
            end = row["end"] if piece.end_time is None else piece.end_time
            comm = shares.between(engine, piece.first, piece.last, piece.tokens)
            rows.append(
                {**row, "start": start, "end": end, "version": piece.version, "tokens": piece.tokens, "comm_s": comm}
            )
            start = end
        return rows

    def _drop_rows(self) -> Columns:
        size = self.group_size
        dropped, times = (
            (np.asarray(column) for column in zip(*self._drops, strict=True)) if self._drops else (np.zeros(0), ())
        )
        groups = np.repeat(np.asarray(dropped, dtype=np.int64), size)
        samples = np.tile(np.arange(size), len(self._drops))
        return {
            "worker": "queue",
            "role": "generation",
            "kind": "drop",
            "start": np.repeat(np.asarray(times, dtype=np.float64), size),
            "end": np.repeat(np.asarray(times, dtype=np.float64), size),
            "step": -1,
            "version": np.asarray(self.rollouts.version, dtype=np.int64)[groups],
            "group": groups,
            "sample": samples,
            "tokens": np.asarray(self.rollouts.tokens, dtype=np.int64)[groups * size + samples],
            "comm_s": 0.0,
        }

    def _sync_rows(self, engine_names: np.ndarray) -> Columns:
        engine, start, end, version = self.syncs
        return {
            "worker": engine_names[engine],
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

    def _prefill_rows(self, engine_names: np.ndarray) -> Columns:
        rollouts = self.rollouts
        return {
            "worker": labels(list(engine_names), np.asarray(rollouts.engine, dtype=np.int64)),
            "role": "generation",
            "kind": "prefill",
            "start": np.asarray(self._prefill_start, dtype=np.float64),
            "end": np.asarray(self._prefill_end, dtype=np.float64),
            "step": -1,
            "version": np.asarray(rollouts.version, dtype=np.int64),
            "group": np.arange(len(rollouts)),
            "sample": -1,
            "tokens": np.asarray(rollouts.prompt, dtype=np.int64),
            "comm_s": 0.0,
        }

    def _switch_rows(self, engine_names: np.ndarray) -> Columns:
        engine, start, end, _ = self.switches
        learner = engine < 0
        return {
            "worker": np.where(learner, "learner", engine_names[np.where(learner, 0, engine)]),
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

    def _train_rows(self) -> Columns:
        step, start, end, tokens, comm = zip(*self._trains, strict=True) if self._trains else ((),) * 5
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
        self.cost, self.engines, self.joins, self.tokens = cost, engines, joins, tokens
        self._curves: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        if cost.per_step:
            for engine in np.unique(engines):
                mine = engines == engine
                self._curves[int(engine)] = _inverse_batch_integral(joins[mine], joins[mine] + tokens[mine])

    def of_rollouts(self) -> np.ndarray:
        """The share of every rollout, in the order given."""
        shares = self.cost.per_rollout * self.tokens.astype(np.float64)
        for engine, (points, integral) in self._curves.items():
            mine = self.engines == engine
            lo, hi = self.joins[mine], self.joins[mine] + self.tokens[mine]
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


def first_load_after(rollouts: Rollouts, loads: list[list[WeightLoad]]) -> np.ndarray:
    """Per rollout: the engine progress at its engine's first weight load after its group started (inf if none).

    A finished rollout saw more than one policy version exactly when this is below its finishing progress.
    """
    marks = np.asarray([load.progress for engine in loads for load in engine] + [math.inf], dtype=np.float64)
    offsets = np.concatenate([[0], np.cumsum([len(engine) for engine in loads])]).astype(np.int64)
    engine = np.asarray(rollouts.engine, dtype=np.int64)
    seen = np.asarray(rollouts.loads_seen, dtype=np.int64)
    index = np.where(seen < np.diff(offsets)[engine], offsets[engine] + seen, len(marks) - 1)
    return np.repeat(marks[index], rollouts.group_size)
