"""Calibrate the analytic model from a framework's metrics log: ``asyncrl calibrate SCENARIO --from-log LOG``.

    LOG ... ─► analysis.metrics_log ─► per-phase means over the logged steps (LoggedPhases)
    SCENARIO (the run the log comes from) ─► simulated at 100% efficiency: the learner's seconds by part
        learner    forward_mfu = no-grad seconds at peak / (old_log_prob + ref + values)
                   mfu         = training seconds at peak / (update_actor + update_critic − train_step_s);
                                 train_step_s: the intercept, where the steps' token counts vary enough
        overheads  switch_s        = update_weights (colocated: waking the engine, reloading its weights)
                   sample_overhead_s = (step − those phases) / samples: reward scoring, advantages, moving the batch
        decode     decode_step_s, by bisection until the simulated generation phase matches timing_s/gen
                   (sync runs, whose generation waits on the long tail's small batches)
    ─► Efficiency (scenarios.efficiency, ``kind: efficiency``) and, per phase, the log against the fitted model

The profile holds efficiencies, not one run's step times, so it transfers to another split, GPU count,
tensor parallelism or schedule of the same model and device. What one sync run cannot tell apart is
said (``LogFit.undetermined``): one generation time fixes one decode term, not the split between an
engine's fixed per-step latency (the long tail's speed) and its bandwidth (the bulk's).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from asyncrl.analysis.metrics_log import MetricsLog, MetricsLogError, read_metrics_log, require
from asyncrl.scenarios.efficiency import Efficiency
from asyncrl.scenarios.loading import ScenarioError
from asyncrl.scenarios.scenario import Scenario
from asyncrl.simulator.costs import AnalyticCosts
from asyncrl.simulator.simulation import Simulation

#: verl's timing keys (verl/trainer/ppo/ray_trainer.py's marked_timer names, logged as timing_s/<name>).
GEN, STEP, UPDATE = "timing_s/gen", "timing_s/step", "timing_s/update_actor"
FORWARD_KEYS = ("timing_s/old_log_prob", "timing_s/ref", "timing_s/values")
UPDATE_KEYS = (UPDATE, "timing_s/update_critic")
SWITCH_KEY = "timing_s/update_weights"
TOKENS_KEY = "perf/total_num_tokens"
REQUIRED = (STEP, GEN, UPDATE)
SIMULATED_STEPS = 20  # learner steps simulated per evaluation of the fit (a long tail's steps vary)
MIN_TOKEN_SPREAD = 0.1  # std / mean of the steps' token counts below which no intercept is fitted
MAX_DECODE_STEP_S = 10.0  # a fixed decode-step time beyond this is a misdescribed scenario, not a fit


@dataclass(frozen=True)
class LoggedPhases:
    """Mean seconds per step of each phase the log timed (None: the log has no such key)."""

    steps: int
    gen_s: float
    forward_s: float | None
    update_s: float
    switch_s: float | None
    other_s: float  # step minus the phases the model has (reward scoring, advantages, and what verl does not time)
    step_s: float
    tokens: float | None  # prompt + response tokens per step (perf/total_num_tokens)
    update_per_step: np.ndarray  # each step's update seconds, for the intercept
    tokens_per_step: np.ndarray | None


@dataclass(frozen=True)
class PhaseRow:
    """One phase: the log's mean seconds, what the fitted model charges, and the term it fixed."""

    phase: str
    logged_s: float | None
    model_s: float
    term: str


@dataclass
class LogFit:
    efficiency: Efficiency
    rows: list[PhaseRow]
    undetermined: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def read_logs(paths: Sequence[Path]) -> list[MetricsLog]:
    """Every log, each checked for the keys the fit needs; ScenarioError (one line, the key) if not."""
    logs = []
    for path in paths:
        try:
            log = read_metrics_log(path)
            require(log, REQUIRED)
        except MetricsLogError as exc:
            raise ScenarioError(f"from_log: {exc}") from None
        logs.append(log)
    return logs


def logged_phases(logs: Sequence[MetricsLog]) -> LoggedPhases:
    """Per-phase means over the steps that timed a whole step."""
    rows = pd.concat([log.rows for log in logs], ignore_index=True)
    rows = rows[rows[STEP].notna() & rows[GEN].notna() & rows[UPDATE].notna()]
    if rows.empty:
        raise ScenarioError(f"from_log: no step has all of {', '.join(REQUIRED)}")

    def total(keys: Sequence[str]) -> pd.Series | None:
        present = [key for key in keys if key in rows and rows[key].notna().any()]
        return rows[present].fillna(0.0).sum(axis=1) if present else None

    forward, update, switch = total(FORWARD_KEYS), total(UPDATE_KEYS), total((SWITCH_KEY,))
    timed = total((GEN, *FORWARD_KEYS, *UPDATE_KEYS, SWITCH_KEY))  # reward, adv & co. stay in the rest
    tokens = rows[TOKENS_KEY] if TOKENS_KEY in rows and rows[TOKENS_KEY].notna().all() else None
    assert update is not None and timed is not None  # update_actor is required
    return LoggedPhases(
        steps=len(rows),
        gen_s=float(rows[GEN].mean()),
        forward_s=float(forward.mean()) if forward is not None else None,
        update_s=float(update.mean()),
        switch_s=float(switch.mean()) if switch is not None else None,
        other_s=float(max(0.0, (rows[STEP] - timed).mean())),
        step_s=float(rows[STEP].mean()),
        tokens=float(tokens.mean()) if tokens is not None else None,
        update_per_step=update.to_numpy(dtype=float),
        tokens_per_step=tokens.to_numpy(dtype=float) if tokens is not None else None,
    )


@dataclass(frozen=True)
class SimulatedPhases:
    """What the model charges per step (means over the simulated steps)."""

    gen_s: float
    forward_s: float
    update_s: float
    overhead_s: float
    communication_s: float
    switch_s: float
    step_s: float
    tokens: float


def simulate_phases(scenario: Scenario, efficiency: Efficiency, steps: int = SIMULATED_STEPS) -> SimulatedPhases:
    """Simulate ``steps`` learner steps of ``scenario`` with ``efficiency``; the per-step means by phase, over
    the steps after the first (which starts with nothing to load), as verl's phases cut a sync step:

        step k = switch (weights to the engines, waking them: verl's update_weights)
               + generation (and the engines' switch back to the learner: verl's gen, which sleeps them)
               + the learner's step (no-grad passes, training pass, fixed and per-sample costs)
    """
    run = scenario.run.model_copy(update={"steps": max(2, min(steps, scenario.run.steps))})
    short = scenario.model_copy(update={"run": run})
    costs = AnalyticCosts(short, efficiency)
    sim = Simulation(short, costs)
    sim.run()
    switch = costs.weight_sync(0) + costs.switch_to_generation()
    trains = sim.recorder.trains
    gaps = [later.start - earlier.end - switch for earlier, later in itertools.pairwise(trains)]
    intervals = [later.end - earlier.end for earlier, later in itertools.pairwise(trains)]
    parts = sim.learner_steps[1:]

    def mean(values: Sequence[float]) -> float:
        return float(np.mean(values))

    return SimulatedPhases(
        gen_s=mean(gaps),
        forward_s=mean([part.forward_s for part in parts]),
        update_s=mean([part.update_s for part in parts]),
        overhead_s=mean([part.overhead_s for part in parts]),
        communication_s=mean([part.communication_s for part in parts]),
        switch_s=switch,
        step_s=mean(intervals),
        tokens=mean([tokens for *_, tokens, _ in trains[1:]]),
    )


def fit_from_logs(scenario: Scenario, paths: Sequence[Path], progress: Callable[[str], object] | None = None) -> LogFit:
    """The efficiency profile that makes the simulated ``scenario`` spend what its logged run spent."""
    say = progress or (lambda _: None)
    logged = logged_phases(read_logs(paths))
    fit = LogFit(efficiency=scenario.hardware.efficiency(), rows=[])
    peak = scenario.hardware.efficiency().model_copy(update={"mfu": 1.0, "forward_mfu": 1.0})
    say("learner")
    at_peak = simulate_phases(scenario, peak)
    _check_tokens(logged, at_peak, fit)
    update = _fit_learner(scenario, logged, at_peak, fit)
    update |= _fit_overheads(scenario, logged, fit)
    efficiency = fit.efficiency.model_copy(update=update)
    if scenario.schedule.kind == "sync":
        say("generation")
        efficiency = _fit_decode(scenario, efficiency, logged.gen_s, fit)
    else:
        fit.undetermined.append(
            f"decode (mbu, decode_mfu, decode_step_s): the log's run is {scenario.schedule.kind}, whose "
            "timing_s/gen is the learner's wait, not the generation time; kept at the catalogue's"
        )
    sources = {**efficiency.sources, **_sources(update, scenario)}
    fitted_to = {
        "device": scenario.hardware.device_name,
        "model": scenario.model.label,
        "logs": ", ".join(str(path) for path in paths),
        "steps": str(logged.steps),
    }
    fit.efficiency = efficiency.model_copy(update={"sources": sources, "fitted_to": fitted_to})
    say("checking")
    fit.rows = _rows(logged, simulate_phases(scenario, fit.efficiency), fit.efficiency, scenario.batch_samples)
    return fit


def _check_tokens(logged: LoggedPhases, simulated: SimulatedPhases, fit: LogFit) -> None:
    """A note when the scenario's lengths give another token count per step than the log's run had."""
    if logged.tokens is None:
        fit.notes.append(f"no {TOKENS_KEY} in the log: the learner was fitted to the scenario's own lengths")
        return
    ratio = simulated.tokens / logged.tokens
    if abs(ratio - 1) > 0.1:
        fit.notes.append(
            f"the scenario's lengths give {simulated.tokens:,.0f} tokens per step, the log's run "
            f"{logged.tokens:,.0f} ({ratio - 1:+.0%}): efficiencies are relative to the scenario's lengths; "
            "fit them to the log (asyncrl lengths --from-log, from-verl --lengths LOG)"
        )


def _fit_learner(scenario: Scenario, logged: LoggedPhases, at_peak: SimulatedPhases, fit: LogFit) -> dict[str, float]:
    """forward_mfu and mfu from the no-grad and training phases; train_step_s where token counts vary."""
    update: dict[str, float] = {}
    if logged.forward_s is not None and logged.forward_s > 0:
        if at_peak.forward_s <= 0:
            raise ScenarioError(
                f"from_log: the log times no-grad passes ({' + '.join(FORWARD_KEYS)}: {logged.forward_s:.1f} s a "
                "step) but the scenario charges none (algorithm.extra_forward_passes: 0); set it to the passes "
                "the run made (1 for old log-probs, 1 more with a reference model)"
            )
        update["forward_mfu"] = _utilization(at_peak.forward_s / logged.forward_s, "forward_mfu", fit)
    elif at_peak.forward_s > 0:
        fit.undetermined.append(
            f"forward_mfu: the scenario charges no-grad passes but the log has none of {', '.join(FORWARD_KEYS)}"
        )
    intercept, seconds = _update_line(logged, at_peak.update_s)
    if intercept is None:
        fit.undetermined.append(
            "train_step_s (a fixed cost per learner step): one token count per step, or counts that vary by "
            f"less than {MIN_TOKEN_SPREAD:.0%} across the steps, cannot tell it from mfu; kept at "
            f"{fit.efficiency.train_step_s:g} s"
        )
        intercept = fit.efficiency.train_step_s
    else:
        update["train_step_s"] = intercept
    update["mfu"] = _utilization(at_peak.update_s / max(seconds - intercept, 1e-9), "mfu", fit)
    return update


def _update_line(logged: LoggedPhases, update_at_peak: float) -> tuple[float | None, float]:
    """(intercept or None, mean update seconds): a line through the steps' update times against their
    tokens, where they vary enough to fix an intercept."""
    tokens = logged.tokens_per_step
    mean = float(np.mean(logged.update_per_step))
    if tokens is None or len(tokens) < 3 or np.std(tokens) / np.mean(tokens) < MIN_TOKEN_SPREAD:
        return None, mean
    slope, intercept = np.polyfit(tokens, logged.update_per_step, 1)
    if slope <= 0:
        return None, mean
    return float(max(0.0, intercept)), mean


def _utilization(value: float, name: str, fit: LogFit) -> float:
    """A fitted utilization, held at 1 (with a note) where the log's run was faster than the peak allows."""
    if value > 1:
        fit.notes.append(
            f"{name}: the log's run was {value:.2f}x faster than the devices' peak allows for the scenario's "
            "tokens (its lengths are longer than the run's, or the model or device differs); held at 1"
        )
        return 1.0
    return value


def _fit_overheads(scenario: Scenario, logged: LoggedPhases, fit: LogFit) -> dict[str, float]:
    """switch_s from update_weights (colocated runs: beyond the weight load and the offload the model charges
    itself), sample_overhead_s from the rest of the step, per trained sample."""
    samples = scenario.batch_samples
    update = {"sample_overhead_s": logged.other_s / samples}
    if not scenario.cluster.colocated:
        update["sample_overhead_s"] = (logged.other_s + (logged.switch_s or 0.0)) / samples
    elif logged.switch_s is not None:
        costs = AnalyticCosts(scenario, fit.efficiency.model_copy(update={"switch_s": 0.0}))
        charged = costs.weight_sync(0) + costs.switch_to_generation()
        update["switch_s"] = max(0.0, logged.switch_s - charged)
    else:
        fit.undetermined.append(
            f"switch_s: no {SWITCH_KEY} in the log; the switch's time (if any) is in sample_overhead_s"
        )
    return update


def _fit_decode(scenario: Scenario, efficiency: Efficiency, target_s: float, fit: LogFit) -> Efficiency:
    """decode_step_s (the engine's fixed time per decode step) whose simulated generation phase matches
    ``target_s``; mbu and decode_mfu stay the catalogue's. A synchronous run's generation waits for its
    longest rollouts, which decode at small batches where the fixed time dominates, so that is the term
    its generation time tells best. Where even no fixed time is too slow, the bandwidth and compute
    efficiencies rise instead (up to 1)."""

    def gen_s(candidate: Efficiency) -> float:
        return simulate_phases(scenario, candidate).gen_s

    def with_step(step_s: float) -> Efficiency:
        return efficiency.model_copy(update={"decode_step_s": step_s})

    if gen_s(with_step(0.0)) > target_s:
        return _faster_decode(scenario, with_step(0.0), target_s, fit)
    low, high = 0.0, max(efficiency.decode_step_s, 1e-3)
    while gen_s(with_step(high)) < target_s:
        low, high = high, high * 4
        if high > MAX_DECODE_STEP_S:
            fit.notes.append(
                f"generation: the log's {target_s:.1f} s needs more than {MAX_DECODE_STEP_S:g} s per decode step; "
                "check the scenario's lengths and engine sizes against the run's"
            )
            return with_step(high)
    while high - low > 1e-3 * high:
        middle = (low + high) / 2
        low, high = (middle, high) if gen_s(with_step(middle)) < target_s else (low, middle)
    fit.undetermined.append(
        "mbu and decode_mfu (the bulk's bandwidth and compute): kept at the catalogue's; a synchronous run's "
        "generation time, set by its long tail, fixed decode_step_s. A log of the same model at another GPU "
        "count (or an asynchronous run's generation) would tell the two apart"
    )
    return with_step((low + high) / 2)


def _faster_decode(scenario: Scenario, efficiency: Efficiency, target_s: float, fit: LogFit) -> Efficiency:
    """No fixed step time, and mbu and decode_mfu raised together (up to 1) until generation matches."""

    def scaled(factor: float) -> Efficiency:
        return efficiency.model_copy(
            update={"mbu": min(1.0, efficiency.mbu * factor), "decode_mfu": min(1.0, efficiency.decode_mfu * factor)}
        )

    low, high = 1.0, 1.0 / min(efficiency.mbu, efficiency.decode_mfu)
    if simulate_phases(scenario, scaled(high)).gen_s > target_s:
        fit.notes.append(
            f"generation: even at full bandwidth and compute the simulated phase is above the log's {target_s:.1f} s "
            "(prefill, or lengths longer than the run's); held there"
        )
        return scaled(high)
    while high / low > 1.001:
        middle = math.sqrt(low * high)
        low, high = (middle, high) if simulate_phases(scenario, scaled(middle)).gen_s > target_s else (low, middle)
    return scaled(math.sqrt(low * high))


def _sources(update: dict[str, float], scenario: Scenario) -> dict[str, str]:
    keys = {
        "forward_mfu": " + ".join(FORWARD_KEYS),
        "mfu": " + ".join(UPDATE_KEYS),
        "train_step_s": f"intercept of {UPDATE} against {TOKENS_KEY}",
        "switch_s": SWITCH_KEY,
        "sample_overhead_s": f"({STEP} - the phases above) / samples",
    }
    sources = {name: keys[name] for name in update}
    if scenario.schedule.kind == "sync":
        sources |= {name: GEN for name in ("mbu", "decode_mfu", "decode_step_s")}
    return sources


def _rows(logged: LoggedPhases, model: SimulatedPhases, efficiency: Efficiency, samples: int) -> list[PhaseRow]:
    decode = f"mbu {efficiency.mbu:.2f}, decode_mfu {efficiency.decode_mfu:.2f}, step {efficiency.decode_step_s * 1e3:.2f} ms"
    return [
        PhaseRow("generation (gen)", logged.gen_s, model.gen_s, decode),
        PhaseRow(
            "no-grad passes (old_log_prob, ref, values)",
            logged.forward_s,
            model.forward_s,
            f"forward_mfu {efficiency.forward_mfu:.3f}",
        ),
        PhaseRow(
            "training (update_actor, update_critic)",
            logged.update_s,
            model.update_s + efficiency.train_step_s + model.communication_s,
            f"mfu {efficiency.mfu:.3f}, train_step_s {efficiency.train_step_s:.2f}",
        ),
        PhaseRow("switch (update_weights)", logged.switch_s, model.switch_s, f"switch_s {efficiency.switch_s:.2f}"),
        PhaseRow(
            "the rest (reward, adv, untimed)",
            logged.other_s,
            efficiency.sample_overhead_s * samples,
            f"sample_overhead_s {efficiency.sample_overhead_s * 1e3:.2f} ms",
        ),
        PhaseRow("step", logged.step_s, model.step_s, "simulated"),
    ]
