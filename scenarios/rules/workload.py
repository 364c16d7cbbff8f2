"""Prompt and completion lengths, drawn in group order so every schedule and backend sees the same work.

Group ``i`` gets the same prompt length and the same completion lengths
whichever schedule runs it: lengths come from two seeded streams (prompts,
completions) read in the order groups start, in vectorized chunks. A group's
completions share its prompt's difficulty by ``workload.group_correlation``
(``LengthDistribution.sample_groups``), and group ``i`` is drawn for learner step
``i // prompts_per_step``, whose ``workload.completion_scale_by_step`` factor
stretches it (``scale_at_step``): a run whose responses grow, whatever schedule
runs it.
"""

from __future__ import annotations

import functools
import itertools
import operator
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..spec.scenario import Scenario
from ..spec.training import PROXIMAL_CORRECTIONS

_CHUNK_GROUPS = 4096


class LengthStream:
    """Hands out (prompt tokens, completion tokens per sample) for group 0, 1, 2, ..."""

    def __init__(self, scenario: Scenario) -> None:
        prompt_seed, completion_seed = np.random.SeedSequence(scenario.run.seed).spawn(2)
        self._prompt_rng = np.random.default_rng(prompt_seed)
        self._completion_rng = np.random.default_rng(completion_seed)
        self._prompts = scenario.workload.prompt_tokens
        self._completions = scenario.workload.completion_tokens
        self._group_size = scenario.workload.samples_per_prompt
        self._correlation = scenario.workload.group_correlation
        self._scale_points = scenario.workload.completion_scale_by_step
        self._groups_per_step = scenario.workload.prompts_per_step
        self._drawn = 0  # groups drawn so far (the next chunk's first group)
        self._prompt_chunk: list[int] = []
        self._completion_chunk: list[list[int]] = []
        self._next = 0

    def next_group(self) -> tuple[int, list[int]]:
        if self._next == len(self._prompt_chunk):
            self._refill()
        index = self._next
        self._next += 1
        return self._prompt_chunk[index], self._completion_chunk[index]

    def _refill(self) -> None:
        prompts = self._prompts.sample(self._prompt_rng, _CHUNK_GROUPS)
        completions = self._completions.sample_groups(
            self._completion_rng, _CHUNK_GROUPS, self._group_size, self._correlation, self._chunk_scales()
        )
        self._drawn += _CHUNK_GROUPS
        self._prompt_chunk = prompts.tolist()
        self._completion_chunk = completions.tolist()
        self._next = 0

    def _chunk_scales(self) -> np.ndarray | None:
        if self._scale_points is None:
            return None
        steps = (self._drawn + np.arange(_CHUNK_GROUPS)) // self._groups_per_step
        return scale_at_step(self._scale_points, steps)


def scale_at_step(points: Sequence[tuple[int, float]], steps: np.ndarray) -> np.ndarray:
    """``workload.completion_scale_by_step``'s factor at each learner step: geometric (linear in the log)
    between the points, the first point's before it and the last's after it."""
    at = np.array([step for step, _ in points], dtype=np.float64)
    logs = np.log(np.array([factor for _, factor in points], dtype=np.float64))
    return np.exp(np.interp(steps.astype(np.float64), at, logs))


def minibatch_bounds(groups: int, parts: int) -> list[tuple[int, int]]:
    """Consecutive runs of whole groups, ``parts`` of them (fewer if there are fewer groups), sizes within one.

    The learner splits a batch this way into ``algorithm.updates_per_step`` minibatches.
    """
    parts = min(parts, groups)
    bounds = [groups * part // parts for part in range(parts + 1)]
    return list(itertools.pairwise(bounds))


def start_of_step_minibatches(scenario: Scenario) -> list[tuple[int, int]]:
    """The minibatches (group bounds) the learner runs a no-grad forward on before a step's first update.

    The ``tis`` and ``decoupled`` corrections need π_old, the policy as it was when the step began, and PPO needs the
    value head's old values; the first minibatch's own forward still sees the starting weights, so only the
    minibatches after it get that extra pass (``executor.learning.learner.Learner.step_start``). None otherwise, and
    none with one update per step.
    """
    algorithm = scenario.algorithm
    if algorithm.correction not in PROXIMAL_CORRECTIONS and algorithm.loss != "ppo":
        return []
    return minibatch_bounds(scenario.workload.prompts_per_step, algorithm.updates_per_step)[1:]


def forward_passes(scenario: Scenario) -> float:
    """Forward passes per trained sample besides the training pass, on average over the batch:
    ``algorithm.extra_forward_passes`` plus the share of the batch in ``start_of_step_minibatches``."""
    groups = scenario.workload.prompts_per_step
    share = sum(end - start for start, end in start_of_step_minibatches(scenario)) / groups
    return scenario.algorithm.extra_forward_passes + share


@dataclass(frozen=True)
class TrainTokens:
    """What a learner step trains: tokens, and squared row lengths (attention), real and padded.

    ``padded`` counts each minibatch as its rows times its longest row (a learner
    without packing); the ``*_square`` sums add up each row's length squared,
    which attention's cost follows. With several data-parallel ranks (``of(...,
    ranks=R)``), the rows are dealt to the ranks as ``rank_loads`` does, and
    ``update_imbalance`` is how much longer the minibatches take than if every
    rank had the same work (each minibatch ends in a collective, so its busiest
    rank sets its time); ``forward_imbalance`` the same for a no-grad pass over the
    whole batch, which waits only once, at its end. Both are 1 with one rank.
    """

    actual: int
    padded: int
    actual_square: int = 0
    padded_square: int = 0
    update_imbalance: float = 1.0
    forward_imbalance: float = 1.0
    rows: int = 0  # samples in the batch (0: not counted; the learner takes the scenario's batch)

    @classmethod
    def of(cls, groups: Sequence[Sequence[int]], parts: int, ranks: int = 1, square_weight: float = 0.0) -> TrainTokens:
        """``groups``: per group, the prompt + completion length of each of its rows; ``square_weight``: the
        work of a row of length L is L + square_weight · L² (attention's share, for dealing rows to ranks)."""
        padded = padded_square = 0
        for start, stop in minibatch_bounds(len(groups), parts):
            count = sum(map(len, groups[start:stop]))
            longest = max(map(max, groups[start:stop]))
            padded += count * longest
            padded_square += count * longest**2
        rows = list(itertools.chain.from_iterable(groups))
        update, forward = (1.0, 1.0) if ranks == 1 else rank_imbalance(rows, parts, ranks, square_weight)
        return cls(sum(rows), padded, sum(map(operator.mul, rows, rows)), padded_square, update, forward, len(rows))

    @classmethod
    def of_array(cls, groups: np.ndarray, parts: int, ranks: int = 1, square_weight: float = 0.0) -> TrainTokens:
        """``of`` for groups of equal size, one row of ``groups`` (int64) per group: the same integers, in a few
        numpy passes instead of a Python loop per row (the simulator's learner asks once per step)."""
        padded = padded_square = 0
        for start, stop in minibatch_bounds(len(groups), parts):
            count, longest = groups[start:stop].size, int(groups[start:stop].max())
            padded += count * longest
            padded_square += count * longest**2
        rows = groups.ravel()  # group by group, as ``of`` chains them
        update, forward = (1.0, 1.0) if ranks == 1 else rank_imbalance(rows, parts, ranks, square_weight)
        return cls(int(rows.sum()), padded, int(np.dot(rows, rows)), padded_square, update, forward, int(rows.size))


def rank_loads(work: np.ndarray, ranks: int) -> tuple[np.ndarray, np.ndarray]:
    """Deal rows to ``ranks`` data-parallel ranks as verl's ``balance_batch`` does: equal counts, near-equal
    work (here: heaviest first, in snake order 0…R−1, R−1…0, where verl solves the partition with
    Karmarkar-Karp), each rank's rows then ordered light, heavy, light (verl puts the small ones at both ends).
    Returns each row's rank and its position within the rank."""
    snake, placed = _dealing(len(work), ranks)
    rank = np.empty(len(work), dtype=np.int64)
    rank[np.argsort(-work, kind="stable")] = snake
    position = np.empty(len(work), dtype=np.int64)
    position[np.lexsort((work, rank))] = placed  # each rank's rows lightest first (ties in row order)
    return rank, position


@functools.lru_cache(maxsize=64)
def _dealing(rows: int, ranks: int) -> tuple[np.ndarray, np.ndarray]:
    """What ``rank_loads`` deals that depends only on how many rows and ranks: the rank of the heaviest row,
    the next heaviest, ... (snake order), and the position within its rank of each row in (rank, lightest
    first) order: the j-th of a rank's n rows goes to j // 2 when j is even and to n − 1 − j // 2 when it
    is odd, small ends and a heavy middle."""
    lap = np.arange(rows) % (2 * ranks)
    snake = np.where(lap < ranks, lap, 2 * ranks - 1 - lap)
    counts = np.bincount(snake, minlength=ranks)
    ranked = np.repeat(np.arange(ranks), counts)  # the ranks in (rank, lightest first) order
    j = np.arange(rows) - (np.cumsum(counts) - counts)[ranked]
    placed = np.where(j % 2 == 0, j // 2, counts[ranked] - 1 - j // 2)
    snake.flags.writeable = placed.flags.writeable = False  # shared by every call
    return snake, placed


def rank_imbalance(
    rows: Sequence[int] | np.ndarray, parts: int, ranks: int, square_weight: float
) -> tuple[float, float]:
    """(update, forward) imbalance of ``rows`` dealt to ``ranks`` (``TrainTokens``): the summed busiest-rank
    work of the ``parts`` minibatches each rank splits its rows into, and of the whole batch, over a
    perfectly even share."""
    lengths = np.asarray(rows, dtype=np.float64)
    work = lengths + square_weight * lengths * lengths
    rank, position = rank_loads(work, ranks)
    per_rank = np.bincount(rank, minlength=ranks)
    minibatch = position * parts // per_rank[rank]
    loads = np.bincount(minibatch * ranks + rank, weights=work, minlength=parts * ranks).reshape(parts, ranks)
    even = work.sum() / ranks
    if even <= 0:
        return 1.0, 1.0
    return float(loads.max(axis=1).sum() / even), float(loads.sum(axis=0).max() / even)
