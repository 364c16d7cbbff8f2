"""A cost profile fitted from a recorded executor run: how a GPU user calibrates from a short real run.

    engine_steps.parquet ──► each step up to its engine's next one while rows stay in flight (engine_cycles)
    (one row per step:     ──► on the steps no train span overlapped (fit_engine), where enough:
                             decode: least squares on steps that only decode
     its span on the clock,   step time = a + b · batch + c · context
     batch, context, joins,   prefill: on steps that admit requests, the time beyond that decode
     prefill tokens,          = join_s · requests + prefill_token_s · prompt tokens
     retired)                 retire: on steps where rows finish, the time beyond the decode
                             engine contention: how much longer the overlapped steps took, in total
    events.parquet ────────► learner (analysis.fits.fit_learner): least squares over train spans,
                             time = overhead + per token · tokens,
                             tokens padded to each minibatch's longest row (longest), as the learner
                             computes them; then how much longer spans an engine overlapped took,
                             in total (total_preserving_excess)
                             weight sync: mean of the sync spans
                             engine start: mean of the engines' restart spans (runs with run.failures)
    both, on the wall clock ► messages: an idle engine's delay from the decision that gave it work
                             to its next step (wake_s); a learner step's from its batch being ready
                             to its start (train_start_s); means
                                 │
                                 ▼
                        CostProfile (prefill_per: sample)

With ``hardware.host_cores`` the decode steps that ran while the busy threads
outnumbered the cores first give ``time_slicing`` (``fit_time_slicing``: how much
slower than their share they ran); then every step and span counts the work it
did at full speed (``at_full_speed``; ``scenarios.rules.cores``).

Least squares fits the mean, not the median, on purpose: a run's wall time is
the sum of its steps, stragglers included (a decode step that waited on the
learner's process for a core is a cost of that run). The one exception is the
learner's line: a short calibration has a few dozen train spans, and a single
one six times as long (an operating-system hiccup, seen in validate) would move
it by half, so spans far slower per token than the rest are left out of it
(``without_stragglers``); thousands of engine steps need no such care. What the
profile then charges is checked against what the run did in ``fit_report``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from ...scenarios.costs.profile import CostProfile, running_maximum
from ...scenarios.record.record import read_events
from ...scenarios.rules.cores import CoreShare, busy_seconds, core_share, full_speed_seconds, unshared_seconds
from ...scenarios.spec.loading import ScenarioError
from ...scenarios.spec.scenario import Scenario
from .fit_learner import (
    ALONE,
    fit_contention,
    fit_learner,
    least_squares,
    total_preserving_excess,
    train_spans,
    without_stragglers,
)
from .fit_timing import engine_cycles, engine_start_seconds, train_start_delays, wake_delays

ENGINE_STEPS_FILE = "engine_steps.parquet"
MIN_STEPS = 20  # decode-only steps needed to fit the decode line


@dataclass(frozen=True)
class FitReport:
    """Per phase: seconds the run spent, and seconds the fitted profile charges for the same work."""

    phases: dict[str, tuple[float, float]]  # phase -> (measured s, charged s)


def profile_from_runs(runs: list[Path], scenario: Scenario) -> tuple[CostProfile, FitReport]:
    """Fit one profile to the recorded engine steps and events of ``runs`` (executor runs of ``scenario``'s
    model, training devices, minibatches and host).

    With ``hardware.host_cores`` (the runs' processes shared that many cores), each step and train span
    counts the full-speed seconds it did (``scenarios.rules.cores``), not its wall time: the simulator slows
    them down again wherever its own run oversubscribes the cores.
    """
    training_devices, share = scenario.training_devices, core_share(scenario)
    as_run = [(_engine_steps(run), read_events(run)) for run in runs]
    wakes = np.concatenate([wake_delays(steps, events) for steps, events in as_run])  # latencies: wall time
    starts = np.concatenate([train_start_delays(events) for _, events in as_run])
    as_run = [(engine_cycles(steps, events), events) for steps, events in as_run]  # from here on, cycles
    if share is not None:
        share = replace(share, slicing=fit_time_slicing(as_run, share))
    recorded = as_run if share is None else [at_full_speed(steps, events, share) for steps, events in as_run]
    minibatches = scenario.algorithm.updates_per_step
    spans = pd.concat([train_spans(events, minibatches, steps) for steps, events in recorded], ignore_index=True)
    steps = pd.concat([steps.assign(trained=training_share(steps, events)) for steps, events in recorded])
    steps = steps.reset_index(drop=True)
    events = pd.concat([events for _, events in recorded], ignore_index=True)
    steps["seconds"] = steps["end"] - steps["start"]
    (decode, join_s, prefill_token_s, retire_s), engine_contention = fit_engine(steps)
    steady = without_stragglers(spans)
    overhead, per_token, padding = fit_learner(steady)
    contention = fit_contention(steady, overhead, per_token, padding)
    if contention == 0:  # the overlapped spans ran no slower than the line (or there were none): one line through all
        overhead, per_token, padding = fit_learner(steady, pooled=True)
    syncs = events[events["kind"] == "sync"]
    largest = int(steps["batch"].max())
    profile = CostProfile(
        decode_step_s=running_maximum({b: max(1e-9, decode[0] + decode[1] * b) for b in _table_sizes(largest)}),
        decode_context_token_s=decode[2],
        prefill_token_s=prefill_token_s,
        prefill_per="sample",  # the executor prefills each sample's prompt (no prefix cache)
        join_s=join_s,
        retire_s=retire_s,
        train_token_s=max(1e-12, per_token * training_devices),
        train_step_overhead_s=overhead,
        train_padding=padding,
        train_contention=contention,
        engine_contention=engine_contention,
        time_slicing=share.slicing if share is not None else 0.0,
        wake_s=float(wakes.mean()) if len(wakes) else 0.0,
        train_start_s=float(starts.mean()) if len(starts) else 0.0,
        weight_sync_s=float((syncs["end"] - syncs["start"]).mean()) if len(syncs) else 0.0,
        engine_start_s=engine_start_seconds(events),
    )
    return profile, fit_report(steps, events, spans, profile, training_devices)


def fit_report(
    steps: pd.DataFrame, events: pd.DataFrame, spans: pd.DataFrame, profile: CostProfile, devices: int
) -> FitReport:
    """What the run spent per phase against what ``profile`` charges for the same steps and spans
    (``steps``: with ``seconds`` and, for the engine's contention, ``trained``; ``spans``: ``train_spans``)."""
    decoding = np.array([profile.decode_step(int(b)) for b in steps["batch"]]) + (
        profile.decode_context_token_s * steps["context"].to_numpy()
    )
    joins = steps["joins"].to_numpy()
    charged_retire = (steps["retired"].to_numpy() > 0) * profile.retire_s
    prefill = joins * profile.join_s + steps["prefill_tokens"].to_numpy() * profile.prefill_token_s
    trained = steps["trained"].to_numpy() if "trained" in steps else np.zeros(len(steps))
    charged_engine = (decoding + prefill + charged_retire) * (1 + profile.engine_contention * trained)
    alone = spans[profile.train_padding] * profile.train_token_s / devices + profile.train_step_overhead_s
    charged_train = (alone * (1 + profile.train_contention * spans["contended"])).sum()
    syncs = events[events["kind"] == "sync"]
    return FitReport(
        {
            "engine steps": (float(steps["seconds"].sum()), float(charged_engine.sum())),
            "learner": (float(spans["seconds"].sum()), float(charged_train)),
            "weight sync": (float((syncs["end"] - syncs["start"]).sum()), len(syncs) * profile.weight_sync_s),
        }
    )


def busy_spans(steps: pd.DataFrame, events: pd.DataFrame, share: CoreShare) -> list[tuple[np.ndarray, int]]:
    """Each process's busy spans with its threads: each engine during its steps, the learner during its train spans."""
    train = events.loc[events["kind"] == "train", ["start", "end"]].to_numpy(float)
    engines = [
        (steps.loc[steps["worker"] == worker, ["start", "end"]].to_numpy(float), share.engine_threads)
        for worker in steps["worker"].unique()
    ]
    return [*engines, (train, share.learner_threads)]


def at_full_speed(steps: pd.DataFrame, events: pd.DataFrame, share: CoreShare) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One run's engine steps and train spans shortened to the full-speed work each did (end = start + work)."""
    train = events["kind"] == "train"
    busy = busy_spans(steps, events, share)
    steps, events = steps.copy(), events.copy()
    steps["end"] = steps["start"] + full_speed_seconds(steps[["start", "end"]].to_numpy(float), busy, share, True)
    spans = events.loc[train, ["start", "end"]].to_numpy(float)
    events.loc[train, "end"] = events.loc[train, "start"] + full_speed_seconds(spans, busy, share)
    return steps, events


def fit_time_slicing(runs: list[tuple[pd.DataFrame, pd.DataFrame]], share: CoreShare) -> float:
    """``time_slicing``: how much slower than their share of the cores oversubscribed decode steps ran.

    The decode line fitted to the steps that ran with cores to spare in the same runs (``fit_decode``;
    runs that never oversubscribed, as sync runs, are left out) says how much work each oversubscribed
    step had to do; processor sharing with slicing s says a step did ``unshared + shared work / (1 + s)``
    in its wall time (``shared work``: what the share alone would give). Summed over the oversubscribed steps, the two agree for one s: that is the figure (0 where
    either kind of step is too rare to tell, or the steps ran no slower than their share).
    """
    alone, over = [], []
    for steps, events in runs:
        busy = busy_spans(steps, events, share)
        plain = steps[~prefilled(steps) & (steps["retired"] == 0)]
        plain = plain.assign(seconds=plain["end"] - plain["start"])
        spans = plain[["start", "end"]].to_numpy(float)
        unshared = unshared_seconds(spans, busy, share)
        shared_work = full_speed_seconds(spans, busy, share) - unshared  # the share's work: no slicing
        oversubscribed = plain["seconds"].to_numpy() - unshared > 1e-9
        if not oversubscribed.any():
            continue  # a run that never oversubscribed (a sync run's): its steps ran on another timeline
        alone.append(plain[~oversubscribed])
        over.append(plain[oversubscribed].assign(unshared=unshared[oversubscribed], shared=shared_work[oversubscribed]))
    if not over:
        return 0.0
    alone_steps, over_steps = pd.concat(alone), pd.concat(over)
    if len(alone_steps) < MIN_STEPS or len(over_steps) < MIN_STEPS:
        return 0.0
    a, b, c = fit_decode(alone_steps)
    work = (a + b * over_steps["batch"] + c * over_steps["context"]).sum()
    left_for_shared = work - over_steps["unshared"].sum()  # the work done while oversubscribed
    if left_for_shared <= 0:
        return 0.0
    return max(0.0, float(over_steps["shared"].sum() / left_for_shared) - 1)


def _engine_steps(run: Path) -> pd.DataFrame:
    path = run / ENGINE_STEPS_FILE
    if not path.is_file():
        raise ScenarioError(f"from_run: {run} has no {ENGINE_STEPS_FILE} (an executor run records one)")
    steps = pd.read_parquet(path)
    if steps.empty or (steps["batch"] > 0).sum() < MIN_STEPS:
        raise ScenarioError(f"from_run: {run} recorded fewer than {MIN_STEPS} decode steps; run more steps")
    return steps[steps["batch"] > 0].reset_index(drop=True)


def prefilled(steps: pd.DataFrame) -> pd.Series:
    """Engine steps that prefilled before decoding: requests joined, or (``recompute_kv``) the running rows'
    keys and values were computed again under new weights."""
    return (steps["joins"] > 0) | (steps["prefill_tokens"] > 0)


def fit_decode(steps: pd.DataFrame) -> tuple[float, float, float]:
    """(a, b, c) of step time = a + b · batch + c · context on steps that only decode; c ≥ 0, b ≥ 0."""
    plain = steps[~prefilled(steps) & (steps["retired"] == 0)]
    if len(plain) < MIN_STEPS:
        plain = steps[~prefilled(steps)]
    seconds, ones = plain["seconds"].to_numpy(), np.ones(len(plain))
    batch, context = plain["batch"].to_numpy(float), plain["context"].to_numpy(float)
    a, b, c = least_squares([ones, batch, context], seconds)
    if c < 0:  # the context term is not supported by this run: drop it
        (a, b), c = least_squares([ones, batch], seconds), 0.0
    if b < 0:
        a, b, c = float(seconds.mean()), 0.0, 0.0
    return float(a), float(b), float(c)


EngineCosts = tuple[tuple[float, float, float], float, float, float]  # decode line, join_s, prefill_token_s, retire_s


def fit_engine(steps: pd.DataFrame) -> tuple[EngineCosts, float]:
    """The engine's own costs and ``engine_contention``, from steps with their seconds and the share of each
    the learner trained during (``trained``, ``training_share``).

    The costs are fitted to the steps no train span overlapped (a sync run's, an asynchronous run's between
    train spans), and the contention is the slowdown for which the overlapped steps are charged, in total,
    the seconds they took (``total_preserving_excess``). One line through every step (the earlier fit, kept
    where too few steps ran apart from the learner or the overlapped ones ran no slower) averages the two
    kinds: in cpu-timing's calibrations the decode steps inside train spans took 2.3x those outside at the
    same batch sizes, and the pooled line overcharged the sync run's engine and undercharged the streaming
    run's, which also left its learner less overlapped in simulation than it was.
    """
    apart = steps[steps["trained"] < ALONE]
    if len(apart) < len(steps) and _decode_only(apart) >= MIN_STEPS:
        costs = _engine_costs(apart)
        overlapped = steps[steps["trained"] >= ALONE]
        charged = engine_charges(overlapped, *costs)
        slower = total_preserving_excess(overlapped["seconds"].to_numpy(), charged, overlapped["trained"].to_numpy())
        if slower > 0:
            return costs, slower
    return _engine_costs(steps), 0.0


def _decode_only(steps: pd.DataFrame) -> int:
    return int((~prefilled(steps) & (steps["retired"] == 0)).sum())


def _engine_costs(steps: pd.DataFrame) -> EngineCosts:
    decode = fit_decode(steps)
    predicted_decode = decode[0] + decode[1] * steps["batch"] + decode[2] * steps["context"]
    excess = (steps["seconds"] - predicted_decode).clip(lower=0)
    return (decode, *_fit_joins(steps, excess), _fit_retire(steps, excess))


def engine_charges(
    steps: pd.DataFrame, decode: tuple[float, float, float], join_s: float, prefill_token_s: float, retire_s: float
) -> np.ndarray:
    """Seconds each step costs alone: its decode on the line, its prefills, its retirement."""
    charged = decode[0] + decode[1] * steps["batch"].to_numpy(float) + decode[2] * steps["context"].to_numpy(float)
    charged = (
        charged + join_s * steps["joins"].to_numpy(float) + prefill_token_s * steps["prefill_tokens"].to_numpy(float)
    )
    return charged + retire_s * (steps["retired"].to_numpy() > 0)


def training_share(steps: pd.DataFrame, events: pd.DataFrame) -> np.ndarray:
    """Per engine step, 0-1: the share of it during which the learner trained (its train spans)."""
    train = events.loc[events["kind"] == "train", ["start", "end"]].to_numpy(float)
    bounds = steps[["start", "end"]].to_numpy(float)
    if not len(train) or not len(bounds):
        return np.zeros(len(bounds))
    return busy_seconds(bounds, [train]) / np.maximum(bounds[:, 1] - bounds[:, 0], 1e-12)


def _fit_joins(steps: pd.DataFrame, excess: pd.Series) -> tuple[float, float]:
    """(join_s, prefill_token_s) from the time admitting steps took beyond their decode; both ≥ 0."""
    admitting = prefilled(steps)
    if admitting.sum() < 2:
        return 0.0, 0.0
    joins = steps.loc[admitting, "joins"].to_numpy(float)
    tokens = steps.loc[admitting, "prefill_tokens"].to_numpy(float)
    spent = excess[admitting].to_numpy()
    join_s, per_token = least_squares([joins, tokens], spent)
    if join_s < 0 or not joins.any():  # (only recomputes: no join to charge)
        return 0.0, float(spent.sum() / tokens.sum())
    if per_token < 0:
        return float(spent.sum() / joins.sum()), 0.0
    return float(join_s), float(per_token)


def _fit_retire(steps: pd.DataFrame, excess: pd.Series) -> float:
    """Mean time beyond the decode of steps where rows finished and none joined."""
    retiring = (steps["retired"] > 0) & ~prefilled(steps)
    return float(excess[retiring].mean()) if retiring.any() else 0.0


def _table_sizes(largest: int) -> list[int]:
    """Batch sizes written to the decode table: powers of two up to the largest seen, and that one."""
    sizes = [1]
    while sizes[-1] * 2 < largest:
        sizes.append(sizes[-1] * 2)
    return sorted({*sizes, largest})
