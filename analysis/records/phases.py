"""Where a run's time went, phase by phase: executor and simulator records alike, and the one against the other.

    executor run   engine_steps.parquet ─► decode, prefill (joins), retirements      (what each step did)
                   events.parquet       ─► weight sync, learner; busy spans ─► engine overhead, waiting
    simulator run  events.parquet + its profile (hardware.profile) ─► the same phases, charged
                                            │
                                            ▼
                   breakdown_lines(A, B): per phase, A's seconds, B's, and B's error against A

The phases, in seconds; engine phases are summed over engines, so with the
learner's they add up to (engines + 1) × wall time:

    decode           engine-time spent decoding
    prefill          admitting rollouts: their prompt's prefill and the merge into the batch cache
    retirements      what steps in which rollouts finish took beyond their decode (compacting the cache)
    weight sync      loading new weights (the sync spans)
    engine overhead  executor only: time with work in flight spent outside engine cycles and loads
                     (acting on new work after idling, the loop after a load); the simulator has none
    engine waiting   engine-time with nothing in flight and nothing loading
    learner          the train spans
    learner waiting  the rest of the wall time

**Executor.** Each step counts as its cycle (``analysis.fits.fit_timing.engine_cycles``):
up to the next step's start while rows stay in flight, so the actor's reports
and loop between steps belong to the step, as calibration fits them. One step
often does several things at once (admits, decodes, retires). Its decode part is what the run's own decode line gives for its
batch and context (least squares on the steps that only decode,
``analysis.fits.fit.fit_decode``), at most the step's time; the rest of the step is
prefill if it admitted, else retirement. A step that only admitted is prefill.

**Simulator.** It records no steps, so its prefill and retirements are charged
from the profile it ran with: each started group's prompt (drawn by
``scenarios.rules.workload.LengthStream`` in the order the events number the groups)
costs k · (join_s + tokens · prefill_token_s), k = 1 or the group size
(``prefill_per``); each moment rollouts finish while others stay in flight
costs retire_s (an engine left empty lets the pause pass idle). Its decode is
the rest of the engine's busy time, which is exact: a simulated engine with
work does nothing but decode, prefill, retire or load.

**Contention.** ``decode_contention`` compares the mean time of the steps that
only decode, inside and outside the learner's train spans, at the same batch
sizes: "decode steps during training took X% longer". The simulator does not
model it; this reports it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ...scenarios.costs.profile import CostProfile
from ...scenarios.record.record import RunSummary, read_events, read_summary, union_length
from ...scenarios.rules.workload import LengthStream
from ...scenarios.spec.loading import ScenarioError, load_scenario
from ...scenarios.spec.scenario import Scenario
from ..fits.fit import ENGINE_STEPS_FILE, fit_decode, prefilled
from ..fits.fit_timing import engine_cycles
from ..tables import format_table
from .compare import format_relative, relative_error

PHASES = (
    "decode",
    "prefill",
    "retirements",
    "weight sync",
    "engine overhead",
    "engine waiting",
    "learner",
    "learner waiting",
)
ROLLOUT_KINDS = ("generate", "unfinished")
MIN_DECODE_STEPS = 3  # decode-only steps needed for the run's own decode line
MIN_CONTENTION_STEPS = 10  # decode-only steps needed on each side (inside, outside train spans)
_EPS = 1e-9


class BreakdownUnavailable(Exception):
    """A run record that lacks what the phase breakdown needs; the message says what."""


@dataclass(frozen=True)
class Phases:
    """Seconds per phase (``PHASES``) of one run, and what they were derived from."""

    seconds: dict[str, float]
    wall_s: float
    engines: int
    source: str  # "engine steps" (executor) or "profile" (simulator)


@dataclass(frozen=True)
class Contention:
    """Decode-only steps inside train spans against those outside, at the batch sizes both saw."""

    slower: float  # Σ inside time / Σ what the same steps take outside at their batch size − 1
    inside_steps: int
    outside_steps: int
    batch_sizes: int


# ── one run ─────────────────────────────────────────────────────────────────────


def run_phases(run: Path) -> Phases:
    """The phases of an executor or simulator run directory; BreakdownUnavailable says what is missing."""
    summary = _summary(run)
    events = read_events(run)
    wall = summary.wall_time_s
    scenario = _scenario(run)
    if summary.backend == "executor":
        return executor_phases(_steps(run), events, scenario.cluster.engines, wall)
    profile = scenario.hardware.cost_profile()
    if profile is None:
        raise BreakdownUnavailable(
            f"{run}: simulated with analytic costs (no hardware.profile), so there is no profile to charge its work"
        )
    return simulator_phases(events, scenario, profile, wall)


def executor_phases(steps: pd.DataFrame, events: pd.DataFrame, engines: int, wall: float) -> Phases:
    """Phases of an executor run from what each engine step did and the run's spans (see the module docstring)."""
    steps = engine_cycles(steps, events)
    steps = steps[steps["start"] < wall].copy()
    steps["seconds"] = steps["end"].clip(upper=wall) - steps["start"]
    decoding = steps[steps["batch"] > 0]
    if (~prefilled(decoding)).sum() < MIN_DECODE_STEPS:
        raise BreakdownUnavailable(
            f"fewer than {MIN_DECODE_STEPS} engine steps only decoded: no decode line to split steps by"
        )
    a, b, c = fit_decode(decoding)
    line = a + b * steps["batch"] + c * steps["context"]
    plain = ~prefilled(steps) & (steps["retired"] == 0)
    decode = np.where(steps["batch"] == 0, 0.0, np.where(plain, steps["seconds"], np.minimum(steps["seconds"], line)))
    excess = steps["seconds"].to_numpy() - decode
    admitting = prefilled(steps).to_numpy()
    retiring = ~admitting & (steps["retired"] > 0).to_numpy()
    busy, sync = _engine_busy(events, wall)
    stepped = float(steps["seconds"].sum())
    return _phases(
        {
            "decode": float(decode.sum()),
            "prefill": float(excess[admitting].sum()),
            "retirements": float(excess[retiring].sum()),
            "weight sync": sync,
            "engine overhead": busy - stepped - sync,
        },
        busy,
        events,
        engines,
        wall,
        "engine steps",
    )


def simulator_phases(events: pd.DataFrame, scenario: Scenario, profile: CostProfile, wall: float) -> Phases:
    """Phases of a simulator run: prefill and retirements charged from ``profile``, decode the busy rest."""
    rollouts = _rollouts(events, wall)
    busy, sync = _engine_busy(events, wall)
    prefill = _charged_prefill(rollouts, scenario, profile)
    retirements = _charged_retirements(rollouts) * profile.retire_s
    return _phases(
        {
            "decode": busy - prefill - retirements - sync,
            "prefill": prefill,
            "retirements": retirements,
            "weight sync": sync,
            "engine overhead": 0.0,
        },
        busy,
        events,
        scenario.cluster.engines,
        wall,
        "profile",
    )


def _phases(
    engine: dict[str, float], busy: float, events: pd.DataFrame, engines: int, wall: float, source: str
) -> Phases:
    train = events[events["kind"] == "train"]
    learner = float((train["end"].clip(upper=wall) - train["start"]).clip(lower=0).sum())
    seconds = {
        **engine,
        "engine waiting": engines * wall - busy,
        "learner": learner,
        "learner waiting": wall - learner,
    }
    return Phases({phase: seconds[phase] for phase in PHASES}, wall, engines, source)


def _engine_busy(events: pd.DataFrame, wall: float) -> tuple[float, float]:
    """(engine-seconds with a rollout in flight or a load under way, engine-seconds loading), all engines."""
    spans = events[events["kind"].isin([*ROLLOUT_KINDS, "sync"])]
    busy = 0.0
    for _, rows in spans.groupby("worker"):
        starts = rows["start"].clip(0, wall).to_numpy()
        ends = rows["end"].clip(0, wall).to_numpy()
        busy += union_length(starts, ends)
    syncs = spans[spans["kind"] == "sync"]
    sync = float((syncs["end"].clip(upper=wall) - syncs["start"].clip(upper=wall)).sum())
    return busy, sync


def _rollouts(events: pd.DataFrame, wall: float) -> pd.DataFrame:
    """One row per rollout (its segments joined): worker, group, start, end, finished."""
    rows = events[events["kind"].isin(ROLLOUT_KINDS)].assign(finished=lambda t: t["kind"] == "generate")
    rollouts = rows.groupby(["group", "sample"], as_index=False).agg(
        worker=("worker", "first"), start=("start", "min"), end=("end", "max"), finished=("finished", "all")
    )
    rollouts["end"] = rollouts["end"].clip(upper=wall)
    return rollouts


def _charged_prefill(rollouts: pd.DataFrame, scenario: Scenario, profile: CostProfile) -> float:
    """What the profile charges for prefilling every group the run started."""
    groups = rollouts["group"].unique()
    if len(groups) == 0:
        return 0.0
    stream = LengthStream(scenario)
    prompts = np.array([stream.next_group()[0] for _ in range(int(groups.max()) + 1)])
    per_group = scenario.workload.samples_per_prompt if profile.prefill_per == "sample" else 1
    return float(per_group * (len(groups) * profile.join_s + prompts[groups].sum() * profile.prefill_token_s))


def _charged_retirements(rollouts: pd.DataFrame) -> int:
    """Moments at which rollouts finished on an engine while others stayed in flight (each costs retire_s)."""
    count = 0
    for _, rows in rollouts.groupby("worker"):
        finishes = np.unique(np.round(rows.loc[rows["finished"], "end"].to_numpy(), 9))
        starts, ends = np.sort(rows["start"].to_numpy()), np.sort(rows["end"].to_numpy())
        still = np.searchsorted(starts, finishes + _EPS, side="right") - np.searchsorted(ends, finishes + _EPS, "right")
        count += int((still > 0).sum())
    return count


# ── contention ──────────────────────────────────────────────────────────────────


def decode_contention(steps: pd.DataFrame, events: pd.DataFrame) -> Contention | str:
    """How much longer decode-only steps took while the learner trained, at the same batch sizes; else why not."""
    train = events[events["kind"] == "train"].sort_values("start")
    plain = steps[(steps["batch"] > 0) & ~prefilled(steps) & (steps["retired"] == 0)]
    if train.empty or plain.empty:
        return "no train spans or no decode-only steps"
    middle = ((plain["start"] + plain["end"]) / 2).to_numpy()
    starts, ends = train["start"].to_numpy(), train["end"].to_numpy()
    index = np.searchsorted(starts, middle, side="right") - 1
    inside = (index >= 0) & (middle < ends[np.maximum(index, 0)])
    table = pd.DataFrame({"batch": plain["batch"].to_numpy(), "s": (plain["end"] - plain["start"]).to_numpy()})
    during = table[inside].groupby("batch")["s"].agg(["count", "sum"])
    apart = table[~inside].groupby("batch")["s"].mean()
    matched = during.index.intersection(apart.index)
    inside_steps = int(during.loc[matched, "count"].sum())
    outside_steps = int((~inside & table["batch"].isin(matched).to_numpy()).sum())
    if not inside.any():
        return "no decode-only step ran during a train span (in a sync run none does)"
    if min(inside_steps, outside_steps) < MIN_CONTENTION_STEPS:
        return (
            f"too few decode-only steps at the same batch sizes inside and outside train spans "
            f"({inside_steps} and {outside_steps}; {MIN_CONTENTION_STEPS} each needed)"
        )
    expected = float((during.loc[matched, "count"] * apart[matched]).sum())
    slower = float(during.loc[matched, "sum"].sum()) / expected - 1.0
    return Contention(slower, inside_steps, outside_steps, len(matched))


def run_contention(run: Path) -> Contention | str:
    """``decode_contention`` of an executor run directory; a reason instead when it has no engine steps."""
    try:
        steps = _steps(run)
    except BreakdownUnavailable as exc:
        return str(exc)
    return decode_contention(steps, read_events(run))


def contention_line(contention: Contention | str) -> str:
    if isinstance(contention, str):
        return f"no contention figure: {contention}"
    return (
        f"decode steps during training took {contention.slower:+.0%} longer "
        f"({contention.inside_steps} decode-only steps in train spans against {contention.outside_steps} outside, "
        f"at {contention.batch_sizes} batch sizes both saw)"
    )


# ── A against B ─────────────────────────────────────────────────────────────────


def breakdown(a: Path, b: Path) -> tuple[Phases, Phases]:
    """Both runs' phases; BreakdownUnavailable naming the run that lacks what it needs."""
    return run_phases(a), run_phases(b)


def breakdown_rows(a: Phases, b: Phases) -> list[list[Any]]:
    """Per phase: A's seconds, B's, B − A and B's relative error against A."""
    return [
        [phase, a.seconds[phase], b.seconds[phase], b.seconds[phase] - a.seconds[phase], _relative(a, b, phase)]
        for phase in PHASES
    ]


def breakdown_lines(a_dir: Path, b_dir: Path) -> str:
    """The phase table of A against B, with B's (and A's) contention figure; or why there is none."""
    try:
        a, b = breakdown(a_dir, b_dir)
    except BreakdownUnavailable as exc:
        return f"no phase breakdown: {exc}"
    header = ["phase (engine phases: all engines)", f"A s ({a.source})", f"B s ({b.source})", "B - A", "rel. error"]
    lines = ["time by phase", format_table(header, breakdown_rows(a, b))]
    for side, run, phases in (("A", a_dir, a), ("B", b_dir, b)):
        if phases.source == "engine steps":
            lines.append(f"{side}: {contention_line(run_contention(run))}")
    return "\n".join(lines)


def breakdown_dict(a_dir: Path, b_dir: Path) -> dict[str, Any]:
    """The breakdown as JSON-safe data: per phase a, b and the relative error; or ``unavailable``: why."""
    try:
        a, b = breakdown(a_dir, b_dir)
    except BreakdownUnavailable as exc:
        return {"unavailable": str(exc)}
    errors = {phase: relative_error(a.seconds[phase], b.seconds[phase]) for phase in PHASES}
    return {
        "a_source": a.source,
        "b_source": b.source,
        "seconds": {
            phase: {
                "a": a.seconds[phase],
                "b": b.seconds[phase],
                "relative_error": errors[phase] if math.isfinite(errors[phase]) else None,
            }
            for phase in PHASES
        },
    }


def _relative(a: Phases, b: Phases, phase: str) -> str:
    return format_relative(relative_error(a.seconds[phase], b.seconds[phase]))


def _summary(run: Path) -> RunSummary:
    try:
        return read_summary(run)
    except ScenarioError as exc:
        raise BreakdownUnavailable(str(exc)) from None


def _scenario(run: Path) -> Scenario:
    try:
        return load_scenario(run / "scenario.yaml")
    except ScenarioError as exc:
        raise BreakdownUnavailable(f"{run}: its scenario.yaml does not load ({exc})") from None


def _steps(run: Path) -> pd.DataFrame:
    path = run / ENGINE_STEPS_FILE
    if not path.is_file():
        raise BreakdownUnavailable(f"{run}: no {ENGINE_STEPS_FILE} (executor runs record one; older ones did not)")
    return pd.read_parquet(path)
