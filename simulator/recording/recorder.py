"""What a simulated run appends as it goes, and its event table, built once at the end.

    Rollouts.columns() (groups, samples) ─┐
    Recorder: syncs, switches, trains,    ├─► event_rows() ─► EventRows (``simulator.recording.event_rows``)
      drops                              ─┘                    └─► events(): one table of ``EVENT_COLUMNS``

During the run the recorder only appends (cheap per event); ``events`` builds
the table once, with numpy. Weight loads and phase switches arrive one by one or as a block (dormant
engines, ``simulator.dormant``); each carries its decision's number and its rank in it (loads in engine
order), so their rows come out in the order the decisions took them. It reads the engines' final progress and weight
loads as plain lists, so it knows nothing of the engine or the simulation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from ...scenarios.rules.workload import TrainTokens
from ..costs import AllReduceCost
from ..packed import PackedGroups
from ..rollouts import Rollouts, WeightLoad
from .event_rows import EventRows, as_table
from .spans import Block, SpanLog, Spans

if TYPE_CHECKING:
    import pandas as pd


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
    def switches(self) -> Spans:
        """Each phase switch, in the order decided."""
        return self._switches.columns()

    @property
    def drops(self) -> list[Drop]:
        """Each dropped group, as appended."""
        return self._drops

    def batch_tokens(self, groups: list[int], minibatches: int) -> TrainTokens:
        """Prompt plus completion tokens the learner trains on for these groups, real and padded."""
        rollouts = self.rollouts
        completions = np.array([rollouts.group_tokens(g) for g in groups], dtype=np.int64)
        rows = completions + np.array([rollouts.prompt_of(g) for g in groups], dtype=np.int64)[:, None]
        return TrainTokens.of_array(rows, minibatches, self._ranks, self._square_weight)

    def event_rows(
        self, progress: list[float], loads: list[list[WeightLoad]], wall_time: float, tensor_parallel: AllReduceCost
    ) -> EventRows:
        """What builds the rows of the run (after it has run); ``progress`` and ``loads`` are each engine's
        at the end, ``tensor_parallel`` the all-reduce time of one decode step."""
        logged = (self._drops, self.syncs, self.switches, self._trains)
        pieces = self.rollouts.pieces()
        return EventRows(pieces, self.group_size, (progress, loads, wall_time), logged, tensor_parallel)

    def events(
        self,
        progress: list[float],
        loads: list[list[WeightLoad]],
        wall_time: float,
        tensor_parallel: AllReduceCost | None = None,
    ) -> pd.DataFrame:
        """The event table, whole (``event_rows``; ``tensor_parallel`` none: no rollout pays any)."""
        whole = PackedGroups(0, self.rollouts.columns())  # (after which the rollouts are one piece)
        rows = self.event_rows(progress, loads, wall_time, tensor_parallel or AllReduceCost())
        rollouts, drops, prefills = rows.groups(whole)
        syncs, switches, trains = rows.others()
        return as_table([rollouts, drops, syncs, prefills, switches, trains])
