"""``asyncrl size --search wide``: every plan of a device budget screened analytically, the contenders simulated.

    scenario, devices
      ─► candidates   split × tensor parallelism (the engine's size) × schedule kind × staleness bound × micro-batch
      ─► screen       each candidate's step time from the simulator's costs as a fluid model: a few numpy passes
      ─► confirm      the discrete-event simulator on the screen's best ``confirm`` candidates, then on every
                      candidate the screen cannot separate from the best simulated one (below), round by round
      ─► ranked       the sync colocated baseline, then the simulated candidates by throughput

The screen's fluid model of one learner step (B samples, completion lengths L, E engines of capacity C, bound η;
1 + η batches may be generating at once):

    learner   the simulator's own learner step at the batch's tokens (``CostModel.train_step``); decode_step: its own
    decode    the steady part: b rollouts per engine, each one token per decode step, b = min(C, (1 + η) · B / E)
              for streaming (it admits the next steps' groups) and min(C, B / E) for pipelined (one version at a
              time), at the context of a running rollout (length-biased: E[L²] / 2E[L] generated so far):
              B · mean(L) / (E · b / decode_step(b)) seconds
            + the drain: an engine finishes what runs before it loads new weights, Σ_j decode_step(running_j) over
              its last rollouts (the running count falling as the lengths' survival function), shared by the
              1 + η batches generating at once
            + prefill and the weight load
    step      the larger of generation and the learner (the two overlap on their own devices)

"Cannot separate": after each round, per schedule family (kind and bound), the simulated throughputs are divided
by the screened ones. A plan not yet simulated is simulated next if it would beat the best simulated plan by
``REGRET`` were the screen to have missed it as much as any plan of its family seen so far, ``MARGIN`` more. The
first round measures those misses: the screen's best, and each family's best few and a few spread over its top
quarter. The search ends when no such plan is left, or at ``max_simulated``, which the result reports. This bounds
the regret only as far as the misses seen stand for the ones not seen: ``benchmarks/wide_search.py`` checks it by
simulating every plan of grids small enough to (regret, top-5 overlap).
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial

import numpy as np
from tqdm import tqdm

from ..scenarios.costs.memory import memory_problem
from ..scenarios.files.pools import new_pool, stopping
from ..scenarios.rules.workload import LengthStream, TrainTokens
from ..scenarios.spec.loading import ScenarioError
from ..scenarios.spec.scenario import Scenario
from .costs import CostModel, cost_model
from .learner_costs import attention_weight, data_parallel_ranks
from .sweep import (
    SIZING_TOLERANCE,
    TENSOR_PARALLEL_SIZES,
    Result,
    Runtime,
    Variant,
    _baselines,
    _fastest_first,
    _pool_context,
    _schedule,
    _simulated,
    simulate_fitting,
    with_changes,
)

#: How much further than the worst miss seen a candidate's screened throughput may be off (relative).
MARGIN = 0.05
#: The regret a plan left unsimulated may cost at most, as far as the screen's misses seen tell (relative).
REGRET = 0.01
CHUNK = 512  # plans per chunk a screening worker takes
#: Micro-batch sizes tried: the scenario's, half and twice.
MICRO_BATCH_FACTORS = (0.5, 1.0, 2.0)
DecodeArrays = tuple[np.ndarray, float, np.ndarray, float, np.ndarray]  # a DecodeTable's lists as arrays


@dataclass(frozen=True)
class Screened:
    """One candidate and the screen's estimate of its throughput (samples per second)."""

    plan: Plan
    samples_per_s: float


@dataclass(frozen=True)
class WideSearch:
    """What ``wide_search`` found: the ranked rows (as ``simulate_sizing``'s), and how the search went."""

    ranked: list[Result]
    candidates: int  # plans screened (valid, fitting in memory)
    simulated: int  # of which the simulator confirmed
    rounds: int
    worst_ratio: float  # the largest simulated / screened throughput seen (the screen's most pessimistic miss)
    capped: bool  # the search stopped at max_simulated with candidates it could not yet rule out

    def line(self) -> str:
        """One line saying what the search did."""
        capped = (
            f"; stopped at --max-simulated {self.simulated} with plans left it could not rule out"
            if self.capped
            else ""
        )
        return (
            f"screened {self.candidates:,} plans, simulated {self.simulated} in {self.rounds} round(s): the screen's "
            f"best, probes of its top quarter, and every plan that would beat the best simulated by {REGRET:.0%} "
            f"if the screen missed it as much as any seen (x{self.worst_ratio:.2f}, +{MARGIN:.0%}){capped}"
        )


@dataclass(frozen=True)
class ScreenInputs:
    """One batch drawn from the scenario's lengths, and what candidates share of their costs (computed once)."""

    rows: np.ndarray  # per group, prompt + completion tokens of each sample (int64, groups × samples)
    completions: np.ndarray  # completion tokens of every sample, sorted
    prompt_mean: float
    _tokens: dict[tuple[int, int, float], TrainTokens] = field(default_factory=dict)
    _tables: dict[tuple[int, int], DecodeArrays] = field(default_factory=dict)
    _survivals: dict[int, np.ndarray] = field(default_factory=dict)

    @classmethod
    def of(cls, scenario: Scenario) -> ScreenInputs:
        stream = LengthStream(scenario)
        prompts, completions = [], []
        for _ in range(scenario.batch_groups):
            prompt, lengths = stream.next_group()
            prompts.append(prompt)
            completions.append(lengths)
        completion = np.asarray(completions, dtype=np.int64)
        rows = completion + np.asarray(prompts, dtype=np.int64)[:, None]
        return cls(rows, np.sort(completion.ravel()), float(np.mean(prompts)))

    @property
    def running_context(self) -> float:
        """Mean tokens generated so far by a rollout that is decoding: a long rollout decodes for longer, so the
        running ones are the long ones (length-biased): E[L²] / (2 E[L])."""
        lengths = self.completions.astype(np.float64)
        return float(np.dot(lengths, lengths) / (2.0 * lengths.sum()))

    def tokens(self, variant: Scenario) -> TrainTokens:
        """The batch as ``variant``'s learner counts it (its data-parallel ranks), computed once per rank count."""
        key = (data_parallel_ranks(variant), variant.algorithm.updates_per_step, attention_weight(variant))
        if key not in self._tokens:
            self._tokens[key] = TrainTokens.of_array(self.rows, key[1], key[0], key[2])
        return self._tokens[key]

    def decode_table(self, variant: Scenario, costs: CostModel) -> DecodeArrays:
        """``costs.decode_step_table`` as arrays, once per engine size and capacity (the split does not change it)."""
        key = (variant.cluster.devices_per_engine, variant.engine_concurrency)
        if key not in self._tables:
            table = costs.decode_step_table(key[1])
            first, second, floor = np.asarray(table.first), np.asarray(table.second), np.asarray(table.floor)
            self._tables[key] = (first, table.first_per_context, second, table.second_per_context, floor)
        return self._tables[key]

    def survival(self, n: int) -> np.ndarray:
        """Expected rollouts still decoding at each decode step of an engine given ``n`` of them: n · S(j), up to
        the expected longest of n draws."""
        if n in self._survivals:
            return self._survivals[n]
        longest = int(np.quantile(self.completions, 1.0 - 1.0 / (n + 1.0)))
        steps = np.arange(max(1, longest))
        still = 1.0 - np.searchsorted(self.completions, steps, side="right") / len(self.completions)
        self._survivals[n] = np.maximum(1.0, n * still)
        return self._survivals[n]


@dataclass(frozen=True)
class Plan:
    """One candidate as the fields it changes (cheap to send between processes; built again where simulated)."""

    label: str
    family: str  # the schedule's label (kind and bound): the screen's misses are measured per family
    cluster: dict[str, object]
    schedule: dict[str, object]
    learner: dict[str, int]

    def scenario(self, base: Scenario) -> Scenario | None:
        """The candidate's scenario; None if the scenario cannot hold it or it does not fit in memory."""
        try:
            variant = with_changes(base, cluster=self.cluster, schedule=self.schedule, learner=self.learner)
        except ScenarioError:
            return None  # the engine cannot hold a group, a micro-batch below one rollout, ...
        return None if memory_problem(variant) else variant


def plans(scenario: Scenario, devices: int, kinds: Iterable[str], staleness: Iterable[int]) -> list[list[Plan]]:
    """Every split × engine size × micro-batch × schedule of ``devices`` (async kinds only: sync is the colocated
    baseline's), in chunks of about ``CHUNK`` plans of one engine size and micro-batch."""
    schedules = [_schedule(scenario, kind, bound) for kind in kinds if kind != "sync" for bound in staleness]
    chunks: list[list[Plan]] = []
    for learner, micro in _micro_batches(scenario):
        for tp in TENSOR_PARALLEL_SIZES:
            splits = list(range(tp, devices, tp))
            for start in range(0, len(splits), max(1, CHUNK // max(1, len(schedules)))):
                chunk = []
                for generation in splits[start : start + max(1, CHUNK // max(1, len(schedules)))]:
                    cluster: dict[str, object] = {
                        "generation_devices": generation,
                        "training_devices": devices - generation,
                        "devices_per_engine": tp,
                        "colocated": False,
                    }
                    for label, schedule in schedules:
                        name = f"{label} {generation}:{devices - generation} tp{tp} {micro}"
                        chunk.append(Plan(name, label, cluster, schedule, learner))
                chunks.append(chunk)
    return chunks


def screen_chunk(scenario: Scenario, chunk: list[Plan]) -> list[tuple[Plan, float]]:
    """The plans of ``chunk`` the scenario holds, each with the screen's samples per second."""
    inputs = ScreenInputs.of(scenario)
    screened = []
    for plan in chunk:
        variant = plan.scenario(scenario)
        if variant is not None:
            screened.append((plan, screen(variant, inputs)))
    return screened


def _micro_batches(scenario: Scenario) -> list[tuple[dict[str, int], str]]:
    """The learner fields of each micro-batch size tried, and its label."""
    learner = scenario.learner
    if learner.micro_batch_rows is not None:
        rows = sorted({max(1, round(learner.micro_batch_rows * f)) for f in MICRO_BATCH_FACTORS})
        return [({"micro_batch_rows": r}, f"mb{r}") for r in rows]
    tokens = sorted({max(1, round(learner.micro_batch_tokens * f)) for f in MICRO_BATCH_FACTORS})
    return [({"micro_batch_tokens": t}, f"mb{t}t") for t in tokens]


def screen(variant: Scenario, lengths: ScreenInputs) -> float:
    """The fluid model's samples per second of one candidate (module docstring)."""
    costs = cost_model(variant)
    learner_s = costs.train_step(lengths.tokens(variant))
    engines = variant.cluster.generation_devices // variant.cluster.devices_per_engine
    capacity, samples = variant.engine_concurrency, variant.batch_samples
    first, first_per_context, second, second_per_context, floor = lengths.decode_table(variant, costs)

    def decode_s(batch: np.ndarray, context: np.ndarray) -> np.ndarray:
        index = np.minimum(np.rint(batch).astype(np.int64), capacity)
        affine = (first[index] + first_per_context * context, second[index] + second_per_context * context)
        return np.maximum(np.maximum(*affine), floor[index])

    per_engine = samples / engines
    mean_completion = float(lengths.completions.mean())
    depth = _depth(variant)
    # a streaming engine admits groups of the next steps while it decodes; a pipelined one holds one batch's
    # version at a time (it finishes a batch before loading the next one's weights), so only its tail overlaps
    ahead = depth if variant.schedule.kind == "streaming" else 1
    running = min(capacity, math.ceil(ahead * per_engine))
    context = running * (lengths.prompt_mean + lengths.running_context)
    rate = running / float(decode_s(np.array([running]), np.array([context]))[0])
    tail = _batch_makespan(per_engine, capacity, lengths, mean_completion, decode_s)
    # an engine drains before it loads new weights, its tail amortized over the batches generating at once; kept
    # with in-flight updates too, where the longest rollouts still hold back their batch (without it the screen's
    # best on moe-streaming at 32 devices was 19% below the exhaustive best)
    drain = tail / depth
    decode = per_engine * mean_completion / rate + drain
    prefill = costs.prefill(round(lengths.prompt_mean * per_engine), math.ceil(per_engine))
    sync = max(costs.weight_sync(engine) for engine in range(engines))
    step = max(decode + prefill + sync, learner_s)
    return samples / step


def _depth(variant: Scenario) -> int:
    """How many steps' batches may be generating at once: the one the learner waits for and ``bound`` more."""
    return 1 + variant.staleness_bound


def _batch_makespan(
    per_engine: float,
    capacity: int,
    lengths: ScreenInputs,
    mean_completion: float,
    decode_s: Callable[[np.ndarray, np.ndarray], np.ndarray],
) -> float:
    """Seconds for one engine to decode its share of a batch to its last token: waves at capacity, then the tail."""
    tail_n = min(capacity, max(1, math.ceil(per_engine)))
    running = lengths.survival(tail_n)
    steps = np.arange(len(running))
    tail = float(decode_s(running, running * (lengths.prompt_mean + steps)).sum())
    if per_engine <= capacity:
        return tail
    full = np.array([float(capacity)])
    step_s = float(decode_s(full, full * (lengths.prompt_mean + lengths.running_context))[0])
    return (per_engine - capacity) * mean_completion * step_s / capacity + tail


def wide_search(
    scenario: Scenario,
    devices: int,
    kinds: Iterable[str],
    staleness: Iterable[int],
    confirm: int = 16,
    max_simulated: int = 400,
    progress: bool = True,
    runtime: Runtime = "local",
    workers: int | None = None,
) -> WideSearch:
    """Screen every candidate of ``devices`` and simulate the contenders (module docstring)."""
    screened = screen_all(scenario, plans(scenario, devices, list(kinds), list(staleness)), progress, workers)
    if not screened:
        raise ScenarioError(
            f"devices: no split of {devices} devices fits {scenario.model.label} on {scenario.hardware.device_name}"
        )
    run = {"progress": progress, "until_converged": SIZING_TOLERANCE, "runtime": runtime, "workers": workers}
    baselines = _simulated(simulate_fitting(_baselines(scenario, devices), **run))  # type: ignore[arg-type]
    simulated: list[tuple[Screened, Result]] = []
    tried: set[int] = set()
    batch, rounds = _first_round(screened, confirm), 0
    while True:
        rounds += 1
        tried |= {id(s) for s in batch}
        variants = [Variant(s.plan.label, v) for s in batch if (v := s.plan.scenario(scenario)) is not None]
        results = simulate_fitting(variants, **run)  # type: ignore[arg-type]
        simulated += [(s, r) for s, r in zip(batch, results, strict=True) if r.summary is not None]
        misses = _misses(simulated)
        best = max(_throughput(r) for _, r in simulated)
        left = [s for s in screened if id(s) not in tried and _could_win(s, misses, best)]
        room = max_simulated - len(tried)
        if not left or room <= 0:
            worst = max(max(ratios) for ratios in misses.values())
            return _result(baselines, simulated, len(screened), rounds, worst, capped=bool(left))
        batch = sorted(left, key=lambda s: -s.samples_per_s * statistics.median(_family(misses, s)))[:room]


def _misses(simulated: list[tuple[Screened, Result]]) -> dict[str, list[float]]:
    """Per schedule family, simulated / screened throughput of each plan simulated ("" : all of them)."""
    misses: dict[str, list[float]] = {"": []}
    for screened, result in simulated:
        ratio = _throughput(result) / screened.samples_per_s
        misses.setdefault(screened.plan.family, []).append(ratio)
        misses[""].append(ratio)
    return misses


def _family(misses: dict[str, list[float]], screened: Screened) -> list[float]:
    """The misses seen in the plan's family, or in all families where none of its own was simulated."""
    return misses.get(screened.plan.family) or misses[""]


def _could_win(screened: Screened, misses: dict[str, list[float]], best: float) -> bool:
    """Whether the plan would beat ``best`` by ``REGRET`` if the screen missed it as much as any plan of its family
    seen, and ``MARGIN`` more."""
    return screened.samples_per_s * max(_family(misses, screened)) * (1 + MARGIN) > best * (1 + REGRET)


def screen_all(scenario: Scenario, chunks: list[list[Plan]], progress: bool, workers: int | None) -> list[Screened]:
    """Every plan the scenario holds, screened in a process pool, best first."""
    workers = min(workers or os.cpu_count() or 1, max(1, len(chunks)))
    bar = tqdm(total=sum(map(len, chunks)), desc="screening", unit="plan", disable=not progress or None, leave=False)
    task = partial(screen_chunk, scenario)
    screened: list[Screened] = []
    with contextlib.ExitStack() as stack:
        if workers > 1:
            pool = stack.enter_context(new_pool(workers, _pool_context()))
            stack.enter_context(stopping(pool))
            results: Iterable[list[tuple[Plan, float]]] = pool.map(task, chunks)
        else:
            results = map(task, chunks)
        for chunk, result in zip(chunks, results, strict=True):
            bar.update(len(chunk))
            screened += [Screened(plan, rate) for plan, rate in result]
    bar.close()
    return sorted(screened, key=lambda s: -s.samples_per_s)


def _first_round(screened: list[Screened], confirm: int) -> list[Screened]:
    """The screen's best ``confirm``; and per schedule family its best few and a few spread over its top quarter,
    which measure the screen's misses in that family."""
    chosen = {id(s): s for s in screened[:confirm]}
    families: dict[str, list[Screened]] = {}
    for plan in screened:
        families.setdefault(plan.plan.family, []).append(plan)
    each = max(2, confirm // 4)
    for members in families.values():
        top = members[: max(2 * each, len(members) // 4)]
        for plan in members[:each] + top[each :: max(1, (len(top) - each) // each)][:each]:
            chosen.setdefault(id(plan), plan)
    return list(chosen.values())


def _throughput(result: Result) -> float:
    assert result.summary is not None  # only simulated results are kept
    return result.summary.throughput.samples_per_s


def _result(
    baselines: list[Result],
    simulated: list[tuple[Screened, Result]],
    count: int,
    rounds: int,
    worst: float,
    capped: bool,
) -> WideSearch:
    best_baseline = sorted(baselines, key=_fastest_first)[:1]
    ranked = best_baseline + sorted((r for _, r in simulated), key=_fastest_first)
    return WideSearch(ranked, count, len(simulated), rounds, worst, capped)
