"""What happened to every group and sample, turned into the shared event table.

During the run the recorder only appends to flat lists (cheap per rollout);
``events`` builds the table of ``scenarios.record.EVENT_COLUMNS`` once, at the
end, with numpy. Sample ``s`` belongs to group ``s // samples_per_prompt``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from scenarios.record import EVENT_COLUMNS
from scenarios.scenario import Scenario
from scenarios.workload import TrainTokens

if TYPE_CHECKING:
    from simulator.engine import Engine


class Recorder:
    def __init__(self, scenario: Scenario) -> None:
        self.group_size = scenario.workload.samples_per_prompt
        self.group_engine: list[int] = []
        self.group_start: list[float] = []
        self.group_version: list[int] = []
        self.group_prompt: list[int] = []
        self.group_join: list[float] = []
        self.group_loads_seen: list[int] = []  # engine loads before the group started
        self.group_step: list[int] = []  # learner step that trained it, -1 if none
        self.dropped_at: dict[int, float] = {}
        self.sample_tokens: list[int] = []
        self.sample_end: list[float] = []
        self._syncs: list[tuple[int, float, float, int]] = []
        self._trains: list[tuple[int, float, float, int]] = []

    def group_started(self, group: int, engine: Engine, now: float, prompt: int, lengths: list[int]) -> None:
        self.group_engine.append(engine.index)
        self.group_start.append(now)
        self.group_version.append(engine.version)
        self.group_prompt.append(prompt)
        self.group_join.append(engine.progress)
        self.group_loads_seen.append(len(engine.loads))
        self.group_step.append(-1)
        self.sample_tokens.extend(lengths)
        self.sample_end.extend([math.nan] * len(lengths))

    def group_dropped(self, group: int, now: float) -> None:
        self.dropped_at[group] = now

    def sync(self, engine: int, start: float, end: float, version: int) -> None:
        self._syncs.append((engine, start, end, version))

    def train(self, step: int, start: float, end: float, tokens: int, groups: list[int]) -> None:
        self._trains.append((step, start, end, tokens))
        for group in groups:
            self.group_step[group] = step

    def batch_tokens(self, groups: list[int], minibatches: int) -> TrainTokens:
        """Prompt plus completion tokens the learner trains on for these groups, real and padded."""
        size = self.group_size
        rows = [[self.group_prompt[g] + n for n in self.sample_tokens[g * size : (g + 1) * size]] for g in groups]
        return TrainTokens.of(rows, minibatches)

    def events(self, engines: list[Engine], wall_time: float) -> pd.DataFrame:
        frames = [self._rollout_rows(engines, wall_time), self._drop_rows(), self._sync_rows(), self._train_rows()]
        table = pd.concat([frame for frame in frames if len(frame)], ignore_index=True)
        return table.astype(EVENT_COLUMNS)[list(EVENT_COLUMNS)]

    def _rollout_rows(self, engines: list[Engine], wall_time: float) -> pd.DataFrame:
        size = self.group_size
        group = np.repeat(np.arange(len(self.group_start)), size)
        end = np.asarray(self.sample_end, dtype=np.float64)
        tokens = np.asarray(self.sample_tokens, dtype=np.int64)
        finished = ~np.isnan(end)
        unfinished = ~finished
        if unfinished.any():
            progress = np.array([engine.progress for engine in engines])[np.asarray(self.group_engine)[group]]
            done = np.clip(progress - np.asarray(self.group_join)[group], 0, tokens).astype(np.int64)
            tokens = np.where(finished, tokens, done)
            end = np.where(finished, end, wall_time)
        rows = pd.DataFrame(
            {
                "worker": np.asarray([f"engine-{i}" for i in range(len(engines))])[
                    np.asarray(self.group_engine, dtype=np.int64)[group]
                ],
                "role": "generation",
                "kind": np.where(finished, "generate", "unfinished"),
                "start": np.asarray(self.group_start)[group],
                "end": end,
                "step": np.where(finished, np.asarray(self.group_step)[group], -1),
                "version": np.asarray(self.group_version)[group],
                "group": group,
                "sample": np.tile(np.arange(size), len(self.group_start)),
                "tokens": tokens,
            }
        )
        return self._split_by_version(rows, engines)

    def _split_by_version(self, rows: pd.DataFrame, engines: list[Engine]) -> pd.DataFrame:
        """With in-flight updates, one row per (rollout, version) instead of one per rollout."""
        split_rows: list[int] = []
        pieces: list[dict] = []
        for group, seen in enumerate(self.group_loads_seen):
            loads = engines[self.group_engine[group]].loads[seen:]
            if not loads:
                continue
            first = group * self.group_size
            for index in range(first, first + self.group_size):
                finished = not math.isnan(self.sample_end[index])
                if finished and loads[0][0] < self.group_join[group] + self.sample_tokens[index]:
                    split_rows.append(index)
                    pieces.extend(self._segments(rows.loc[index], loads, self.group_join[group]))
        if not split_rows:
            return rows
        return pd.concat([rows.drop(index=split_rows), pd.DataFrame(pieces)], ignore_index=True)

    @staticmethod
    def _segments(row: pd.Series, loads: list[tuple[float, float, int]], join: float) -> list[dict]:
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
        groups = np.repeat(np.fromiter(self.dropped_at, dtype=np.int64), size)
        return pd.DataFrame(
            {
                "worker": "queue",
                "role": "generation",
                "kind": "drop",
                "start": np.repeat(np.fromiter(self.dropped_at.values(), dtype=np.float64), size),
                "end": np.repeat(np.fromiter(self.dropped_at.values(), dtype=np.float64), size),
                "step": -1,
                "version": np.asarray(self.group_version, dtype=np.int64)[groups] if len(groups) else groups,
                "group": groups,
                "sample": np.tile(np.arange(size), len(self.dropped_at)),
                "tokens": np.asarray(self.sample_tokens, dtype=np.int64)[
                    groups * size + np.tile(np.arange(size), len(self.dropped_at))
                ]
                if len(groups)
                else groups,
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
