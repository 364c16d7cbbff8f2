"""The run's event table, built once at the end from the rollouts and what the recorder appended.

    Rollouts (groups, samples) ─┐
    Recorder: syncs, trains,    ├─► events() ─► table of ``scenarios.record.EVENT_COLUMNS``
              drops (appended) ─┘

During the run the recorder only appends (cheap per event); ``events`` builds
the table once, with numpy. It reads the engines' final progress and weight
loads as plain lists, so it knows nothing of the engine or the simulation.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from asyncrl.scenarios.record import EVENT_COLUMNS
from asyncrl.scenarios.workload import TrainTokens
from asyncrl.simulator.rollouts import Rollouts

Load = tuple[float, float, int]  # (engine progress, wall time, version) of one weight load


class Recorder:
    def __init__(self, rollouts: Rollouts) -> None:
        self.rollouts = rollouts
        self.group_size = rollouts.group_size
        self._drops: list[tuple[int, float]] = []  # (group, time)
        self._syncs: list[tuple[int, float, float, int]] = []
        self._trains: list[tuple[int, float, float, int]] = []

    def dropped(self, group: int, now: float) -> None:
        self._drops.append((group, now))

    def sync(self, engine: int, start: float, end: float, version: int) -> None:
        self._syncs.append((engine, start, end, version))

    def train(self, step: int, start: float, end: float, tokens: int) -> None:
        self._trains.append((step, start, end, tokens))

    @property
    def trains(self) -> list[tuple[int, float, float, int]]:
        """(step, start, end, tokens) of each learner step, as appended."""
        return self._trains

    @property
    def syncs(self) -> list[tuple[int, float, float, int]]:
        """(engine, start, end, version) of each weight load, as appended."""
        return self._syncs

    @property
    def drops(self) -> list[tuple[int, float]]:
        """(group, time) of each dropped group, as appended."""
        return self._drops

    def batch_tokens(self, groups: list[int], minibatches: int) -> TrainTokens:
        """Prompt plus completion tokens the learner trains on for these groups, real and padded."""
        size, prompts, tokens = self.group_size, self.rollouts.prompt, self.rollouts.tokens
        rows = [[prompts[g] + n for n in tokens[g * size : (g + 1) * size]] for g in groups]
        return TrainTokens.of(rows, minibatches)

    def events(self, progress: list[float], loads: list[list[Load]], wall_time: float) -> pd.DataFrame:
        """The event table; ``progress`` and ``loads`` are each engine's at the end of the run."""
        frames = [self._rollout_rows(progress, loads, wall_time), self._drop_rows(), self._sync_rows()]
        frames.append(self._train_rows())
        table = pd.concat([frame for frame in frames if len(frame)], ignore_index=True)
        return table.astype(EVENT_COLUMNS)[list(EVENT_COLUMNS)]

    def _rollout_rows(self, progress: list[float], loads: list[list[Load]], wall_time: float) -> pd.DataFrame:
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
        rows = pd.DataFrame(
            {
                "worker": np.asarray([f"engine-{i}" for i in range(len(progress))])[group_engine[group]],
                "role": "generation",
                "kind": np.where(finished, "generate", "unfinished"),
                "start": np.asarray(rollouts.start)[group],
                "end": end,
                "step": np.where(finished, trained_step, -1),
                "version": np.asarray(rollouts.version)[group],
                "group": group,
                "sample": np.tile(np.arange(size), len(rollouts)),
                "tokens": tokens,
            }
        )
        return self._split_by_version(rows, loads)

    def _split_by_version(self, rows: pd.DataFrame, loads: list[list[Load]]) -> pd.DataFrame:
        """With in-flight updates, one row per (rollout, version) instead of one per rollout."""
        rollouts, size = self.rollouts, self.group_size
        finished = ~np.isnan(np.asarray(rollouts.end, dtype=np.float64))
        finish = np.repeat(np.asarray(rollouts.join, dtype=np.float64), size) + np.asarray(rollouts.tokens)
        split_rows = np.flatnonzero(finished & (first_load_after(rollouts, loads) < finish)).tolist()
        if not split_rows:
            return rows
        pieces: list[dict] = []
        for index in split_rows:
            group = index // size
            later = loads[rollouts.engine[group]][rollouts.loads_seen[group] :]
            pieces.extend(self._segments(rows.loc[index], later, rollouts.join[group]))
        return pd.concat([rows.drop(index=split_rows), pd.DataFrame(pieces)], ignore_index=True)

    @staticmethod
    def _segments(row: pd.Series, loads: list[Load], join: float) -> list[dict]:
        """Cut one rollout's row where its engine loaded new weights mid-rollout."""
        finish = join + row["tokens"]
        pieces, start_mark, start_time, version = [], join, row["start"], row["version"]
        for mark, time, new_version in loads:
            if mark >= finish:
                break
            count = round(mark - start_mark)
            if count > 0:
                pieces.append({**row, "start": start_time, "end": time, "version": version, "tokens": count})
                start_mark, start_time = mark, time
            version = new_version
        pieces.append({**row, "start": start_time, "version": version, "tokens": round(finish - start_mark)})
        return pieces

    def _drop_rows(self) -> pd.DataFrame:
        size = self.group_size
        dropped, times = (
            (np.asarray(column) for column in zip(*self._drops, strict=True)) if self._drops else (np.zeros(0), ())
        )
        groups = np.repeat(np.asarray(dropped, dtype=np.int64), size)
        samples = np.tile(np.arange(size), len(self._drops))
        return pd.DataFrame(
            {
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
            }
        )

    def _sync_rows(self) -> pd.DataFrame:
        engine, start, end, version = zip(*self._syncs, strict=True) if self._syncs else ((), (), (), ())
        return pd.DataFrame(
            {
                "worker": [f"engine-{i}" for i in engine],
                "role": "generation",
                "kind": "sync",
                "start": start,
                "end": end,
                "step": -1,
                "version": version,
                "group": -1,
                "sample": -1,
                "tokens": 0,
            }
        )

    def _train_rows(self) -> pd.DataFrame:
        step, start, end, tokens = zip(*self._trains, strict=True) if self._trains else ((), (), (), ())
        return pd.DataFrame(
            {
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
            }
        )


def first_load_after(rollouts: Rollouts, loads: list[list[Load]]) -> np.ndarray:
    """Per rollout: the engine progress at its engine's first weight load after its group started (inf if none).

    A finished rollout saw more than one policy version exactly when this is below its finishing progress.
    """
    marks = np.asarray([load[0] for engine in loads for load in engine] + [math.inf], dtype=np.float64)
    offsets = np.concatenate([[0], np.cumsum([len(engine) for engine in loads])]).astype(np.int64)
    engine = np.asarray(rollouts.engine, dtype=np.int64)
    seen = np.asarray(rollouts.loads_seen, dtype=np.int64)
    index = np.where(seen < np.diff(offsets)[engine], offsets[engine] + seen, len(marks) - 1)
    return np.repeat(marks[index], rollouts.group_size)
