"""Calibrate the analytic model from framework metrics logs: ``asyncrl calibrate SCENARIO --from-log LOG``.

    each run: its scenario (its config, as from-verl writes it) + its log(s)
        ─► analysis.log_phases: per kept step, generation / no-grad / training / the rest, and its tokens
        ─► asyncrl.calibration.log_work: the work each term multiplies in each phase, under the current terms (the
           learner's at each step's own tokens; generation's read off the simulator)
        ─► observations: each phase's mean over the run's steps (sd: MODEL_ERROR of it, what the model
           cannot say), and each step's departure from that mean where the steps' tokens vary
           (sd: the scatter the tokens leave unexplained): they tell fixed costs from per-token ones
        ─► analysis.fits.term_fit: the posterior of every term's coefficient, the catalogue as its prior; again
           under each fit's terms (which rollouts are compute- or launch-bound, what hides FSDP), OUTER_ROUNDS times
    ─► Efficiency: the terms, their 95% intervals, their covariance; per run and phase the log against the
       fitted model (simulated again); the terms the logs could not identify (their catalogue values stand)

Several logs of one cluster (``--from-log A --from-log B``, other model sizes, GPU counts, lengths) fit one set of
terms jointly: that is what identifies a launch-bound small model's terms beside a compute-bound large one's. Only
a synchronous run's generation time is the engines' time; an asynchronous run's ``timing_s/gen`` is the learner's
wait, and is left out.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
from asyncrl.analysis.fits.fit_tables import term_text
from asyncrl.analysis.fits.term_fit import Observation, Posterior, Prior, fit_terms
from asyncrl.scenarios.costs.efficiency import (
    COEFFICIENT_FORMS,
    DEFAULTS,
    MODEL_ERROR,
    PRIOR_LOG_SD,
    VERL_COSTS,
    Efficiency,
    coefficient,
    coefficient_floor,
    from_coefficient,
)
from asyncrl.scenarios.rules.workload import forward_passes
from asyncrl.scenarios.spec.loading import ScenarioError
from asyncrl.scenarios.spec.scenario import Scenario
from asyncrl.simulator.learner_costs import LearnerWork, PhaseWork

from asyncrl.calibration.log_work import (
    GenerationWork,
    generation_steps,
    generation_terms,
    generation_work,
    learner_work,
    length_windows,
    mean_fixed,
    mean_work,
    one_pass,
    simulate_steps,
    steady_lengths,
    with_completions_scaled,
    without_one_pass,
)
from asyncrl.frameworks.common.metrics_log import MetricsLogError, read_metrics_log
from asyncrl.frameworks.verl.log_device import device_notes
from asyncrl.frameworks.verl.log_phases import LoggedSteps, logged_steps

OUTER_ROUNDS = 4  # fits, each linearized where the previous ones point (_between)
LINK_BOUND_START = 0.1  # the second start's link_efficiency, relative to the catalogue's
HELD_LOG_SD = 1e-4  # the prior of a term held at its value
#: A run's step-by-step departures count as at most this many independent steps (its steps drift together).
EFFECTIVE_STEPS = 10
COLOCATED_TERMS = ("reshard_bytes_per_s", "rollout_sample_s", "switch_s")
#: The terms only a sync run's generation phase pays (the simulator's gap between two learner steps).
DECODE_TERMS = ("mbu", "decode_mfu", "decode_step_s", "decode_seq_s", "decode_layer_s", "graph_layer_s")
GENERATION_TERMS = (*DECODE_TERMS, *COLOCATED_TERMS)
PHASE_NAMES = {
    "gen": "generation (gen, update_weights)",
    "forward": "no-grad passes (old_log_prob, ref, values)",
    "update": "training (update_actor, update_critic)",
    "rest": "the rest (reward, adv, untimed)",
    "step": "step",
}


@dataclass(frozen=True)
class LoggedRun:
    """One run: its scenario and the phases its log timed."""

    scenario: Scenario
    steps: LoggedSteps
    label: str
    model_error: float = MODEL_ERROR  # the sd of a phase's mean, relative: what the model cannot say


@dataclass(frozen=True)
class PhaseRow:
    """One phase of one run: the log's mean seconds, what the fitted model charges, the terms it fixed."""

    phase: str
    logged_s: float | None
    model_s: float
    term: str


@dataclass(frozen=True)
class TermRow:
    """One fitted term: its value, its 95% interval, whether the logs identified it, what informed it."""

    term: str
    value: float
    low: float
    high: float
    identified: bool
    source: str


@dataclass
class LogFit:
    efficiency: Efficiency
    rows: list[PhaseRow]
    terms: list[TermRow] = field(default_factory=list)
    undetermined: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def read_runs(runs: Sequence[tuple[Scenario, Sequence[Path]]]) -> list[LoggedRun]:
    """Each run's logs read into phases; ScenarioError (one line naming the file and key) where one cannot be."""
    logged = []
    for scenario, paths in runs:
        per = _updates_per_logged_step(scenario)
        for path in paths:
            try:
                log = read_metrics_log(path)
                steps = logged_steps(log, scenario.batch_samples, per)
            except MetricsLogError as exc:
                raise ScenarioError(f"from_log: {exc}") from None
            if steps.forward is not None and np.mean(steps.forward) > 0 and forward_passes(scenario) == 0:
                raise ScenarioError(
                    f"from_log: {path.name} times no-grad passes (old_log_prob, ref, values: "
                    f"{np.mean(steps.forward):.1f} s a step) but the scenario charges none "
                    "(algorithm.extra_forward_passes: 0); set it to the passes the run made"
                )
            steps.notes.extend(device_notes(log, scenario))
            logged.append(LoggedRun(steady_lengths(scenario), steps, path.name))
    return logged


def _updates_per_logged_step(scenario: Scenario) -> int:
    """verl's fully async trainer logs once per sync window of ``trigger_parameter_sync_step`` updates."""
    every = getattr(scenario.schedule, "sync_every", None)
    return int(every) if scenario.schedule.kind == "streaming" and every else 1


def fit_from_logs(scenario: Scenario, paths: Sequence[Path], progress: Callable[[str], object] | None = None) -> LogFit:
    """The efficiency profile that makes the simulated ``scenario`` spend what its logged run spent."""
    return fit_runs([(scenario, paths)], progress)


def fit_runs(
    runs: Sequence[tuple[Scenario, Sequence[Path]]],
    progress: Callable[[str], object] | None = None,
    free: Collection[str] | None = None,
    model_error: float = MODEL_ERROR,
) -> LogFit:
    """One set of terms for every run's logs (module docstring); ``free``: fit only these, the others held at
    the scenario's (as the catalogue's fit of one framework's fixed costs does); ``model_error``: the sd of a
    phase's mean, relative."""
    say = progress or (lambda _: None)
    logged = [replace(run, model_error=model_error) for run in read_runs(runs)]
    base = logged[0].scenario.efficiency()
    priors = _priors(base, free)
    notes = [note for run in logged for note in run.steps.notes]
    best: tuple[Efficiency, Posterior] | None = None
    for number, start in enumerate(_starts(base)):  # the work has regimes (compute- or link-bound): try each
        efficiency, posterior = start, None
        for round_ in range(OUTER_ROUNDS):
            observations: list[Observation] = []
            for run in logged:
                say(f"{run.label}: start {number + 1}, round {round_ + 1}")
                observations += _observations(run, efficiency, notes if number == round_ == 0 else [])
            posterior = fit_terms(priors, observations)
            fitted = _efficiency(base, posterior)
            efficiency = _between(efficiency, fitted) if round_ else fitted
        assert posterior is not None
        efficiency = fitted
        if best is None or posterior.objective < best[1].objective:
            best = (efficiency, posterior)
    assert best is not None
    efficiency, posterior = best
    say("checking")
    fit = LogFit(efficiency=_with_provenance(efficiency, posterior, logged), rows=[], notes=notes)
    fit.terms = _term_rows(posterior, logged)
    fit.undetermined = [
        f"{row.term}: the logs cannot tell it apart from the other terms of its phases; the catalogue's "
        f"{term_text(row.term, row.value)} stands (95%: {term_text(row.term, row.low)}-{term_text(row.term, row.high)})"
        for row in fit.terms
        if not row.identified and _matters(row.term, logged)
    ]
    fit.rows = [row for run in logged for row in _rows(run, fit.efficiency)]
    return fit


def _starts(base: Efficiency) -> list[Efficiency]:
    """Where the fit starts: the catalogue, and a learner waiting on its links (as on GPUs joined by PCIe)."""
    return [base, base.model_copy(update={"link_efficiency": base.link_efficiency * LINK_BOUND_START})]


def _priors(base: Efficiency, free: Collection[str] | None = None) -> dict[str, Prior]:
    """Each term's prior, centred on ``base``'s value; a framework cost ``base`` has none of (the catalogue's
    generic scenario) centred on verl's instead, a framework's typical cost."""
    typical = DEFAULTS.model_copy(update=VERL_COSTS)
    priors = {}
    for term, log_sd in PRIOR_LOG_SD.items():
        low = coefficient_floor(term)
        held = free is not None and term not in free
        centre = coefficient(base, term) if coefficient(base, term) > 0 else coefficient(typical, term)
        priors[term] = Prior(max(centre, 1e-12), HELD_LOG_SD if held else log_sd, low)
    return priors


def _between(one: Efficiency, other: Efficiency) -> Efficiency:
    """Each term's coefficient the geometric mean of the two: where a round linearizes, so that a term whose work
    turns on and off with its value (an eager engine's launch floor) settles instead of swinging."""
    halfway = {term: math.sqrt(coefficient(one, term) * coefficient(other, term)) for term in PRIOR_LOG_SD}
    return one.model_copy(update={term: from_coefficient(term, value) for term, value in halfway.items()})


def _efficiency(base: Efficiency, posterior: Posterior) -> Efficiency:
    update = {term: from_coefficient(term, max(posterior.value(term), 1e-12)) for term in posterior.terms}
    return base.model_copy(update=update)


# ── observations ───────────────────────────────────────────────────────────────


def _observations(run: LoggedRun, efficiency: Efficiency, notes: list[str]) -> list[Observation]:
    """The run's phases as observations of the terms (module docstring)."""
    scenario, steps = run.scenario, run.steps
    work = learner_work(scenario, efficiency, steps)
    if steps.gen is None:  # whole steps only: their sum of every phase
        generation = generation_work(scenario, efficiency, notes, run.label)
        assert steps.step is not None
        if generation is None:
            return []
        whole = [generation.whole.plus(item.forward).plus(item.update).plus(item.rest) for item in work]
        return [_mean(run, "step", steps.step, whole)]
    observations: list[Observation] = []
    for window, factor in length_windows(steps):
        scaled = with_completions_scaled(scenario, factor)
        generation = generation_work(scaled, efficiency, notes, run.label)
        if generation is None:
            break
        part = LoggedRun(scaled, steps.window(window), run.label, run.model_error)
        observations += _generation_observations(
            part, generation, [item for item, kept in zip(work, window, strict=True) if kept]
        )
    if steps.forward is not None:
        forward = [without_one_pass(item.forward) if steps.legacy else item.forward for item in work]
        observations += _with_departures(run, "forward", steps.forward, forward)
    assert steps.update is not None  # a log timing its phases times the training
    observations += _with_departures(run, "update", steps.update, [item.update for item in work])
    if steps.rest is not None:
        observations.append(_mean(run, "rest", steps.rest, [item.rest for item in work]))
    return observations


def _generation_observations(run: LoggedRun, generation: GenerationWork, work: list[LearnerWork]) -> list[Observation]:
    """The generation phase, or its parts where verl timed them: the engines generating, the weights'
    update, and the rest of it (module docstring). verl before 2025 timed the old log-probs inside gen."""
    steps = run.steps
    assert steps.gen is not None  # a log timing its phases times the generation
    rest = generation.switches.plus(one_pass(work)) if steps.legacy else generation.switches
    if steps.reshard is None:
        return [_mean(run, "gen", steps.gen, [generation.decode.plus(generation.sync).plus(rest)])]
    observations = [_mean(run, "reshard", steps.reshard, [generation.sync])]
    if steps.generate is None:
        return [*observations, _mean(run, "gen", steps.gen - steps.reshard, [generation.decode.plus(rest)])]
    observations.append(_mean(run, "generate", steps.generate, [generation.decode]))
    around = np.maximum(steps.gen - steps.generate - steps.reshard, 0.0)
    if np.mean(around) > 0:
        observations.append(_mean(run, "gen (the rest)", around, [rest]))
    return observations


def _mean(run: LoggedRun, phase: str, values: np.ndarray, work: Sequence[PhaseWork]) -> Observation:
    """A phase's mean over the steps against the mean work, with the model's own error."""
    value = float(np.mean(values))
    return Observation(f"{run.label} {phase}", mean_work(work), mean_fixed(work), value, run.model_error * value)


def _with_departures(run: LoggedRun, phase: str, values: np.ndarray, work: Sequence[PhaseWork]) -> list[Observation]:
    """The mean, and each step's departure from it where the steps' tokens vary (module docstring)."""
    observations = [_mean(run, phase, values, work)]
    tokens = run.steps.tokens
    if tokens is None or len(values) < 3 or np.std(tokens) < 0.02 * np.mean(tokens):
        return observations
    scatter = _unexplained_scatter(values, tokens) * np.sqrt(len(values) / min(len(values), EFFECTIVE_STEPS))
    average, average_fixed, mean_value = mean_work(work), mean_fixed(work), float(np.mean(values))
    for value, item in zip(values, work, strict=True):
        departure = {term: item.terms.get(term, 0.0) - amount for term, amount in average.items()}
        observations.append(
            Observation(
                f"{run.label} {phase} step", departure, item.fixed_s - average_fixed, value - mean_value, scatter
            )
        )
    return observations


def _unexplained_scatter(values: np.ndarray, tokens: np.ndarray) -> float:
    """The scatter of a phase's step times about a line in their tokens: what the model leaves to noise."""
    slope, intercept = np.polyfit(tokens, values, 1)
    residual = values - (slope * tokens + intercept)
    return max(float(np.std(residual, ddof=2)) if len(values) > 2 else 0.0, 0.01 * float(np.mean(values)), 1e-6)


# ── the fitted profile and its report ─────────────────────────────────────────


def _with_provenance(efficiency: Efficiency, posterior: Posterior, logged: Sequence[LoggedRun]) -> Efficiency:
    intervals, sources = {}, {}
    for term in posterior.terms:
        low, high = _term_interval(term, posterior)
        intervals[term] = (low, high)
        sources[term] = _source(term, posterior, logged)
    covariance = {
        row: {column: float(posterior.log_covariance[i, j]) for j, column in enumerate(posterior.terms)}
        for i, row in enumerate(posterior.terms)
    }
    first = logged[0].scenario
    fitted_to = {
        "device": first.hardware.device_name,
        "model": ", ".join(dict.fromkeys(run.scenario.model.label for run in logged)),
        "logs": ", ".join(run.label for run in logged),
        "steps": str(sum(len(run.steps.steps) for run in logged)),
    }
    provenance = {"intervals": intervals, "sources": sources, "covariance": covariance, "model_error": MODEL_ERROR}
    return efficiency.model_copy(update={**provenance, "fitted_to": fitted_to})


def _term_interval(term: str, posterior: Posterior) -> tuple[float, float]:
    """A term's 95% interval in its own form (a share's at most 1)."""
    low, high = posterior.interval(term, coefficient_floor(term))
    if COEFFICIENT_FORMS[term] == "value":
        return low, high
    return from_coefficient(term, high), from_coefficient(term, max(low, 1e-12))


def _source(term: str, posterior: Posterior, logged: Sequence[LoggedRun]) -> str:
    if not posterior.identified(term):
        return "default"
    phases = sorted({phase for run in logged for phase in _phases_paying(term, run)})
    return "fitted to " + ", ".join(PHASE_NAMES[phase].split(" (")[0] for phase in phases)


def _phases_paying(term: str, run: LoggedRun) -> list[str]:
    learner = {
        "mfu": ("update", "gen"),
        "forward_mfu": ("forward",),
        "learner_layer_s": ("forward", "update"),
        "link_efficiency": ("forward", "update"),
        "phase_s": ("forward", "update"),
        "host_efficiency": ("forward", "update", "gen"),
        "sample_overhead_s": ("rest",),
    }
    phases = learner.get(term, ("gen",))
    return [phase for phase in phases if run.steps.mean(phase) is not None]


def _matters(term: str, logged: Sequence[LoggedRun]) -> bool:
    """Whether any run pays the term at all (an eager run pays no graph_layer_s, a split one no reshard)."""
    if term not in GENERATION_TERMS:
        return True
    if term in COLOCATED_TERMS:
        return any(run.scenario.cluster.colocated for run in logged)
    return any(term in generation_terms(run.scenario) for run in logged)


def _term_rows(posterior: Posterior, logged: Sequence[LoggedRun]) -> list[TermRow]:
    rows = []
    for term in posterior.terms:
        if not _matters(term, logged):
            continue
        low, high = _term_interval(term, posterior)
        value = from_coefficient(term, max(posterior.value(term), 1e-12))
        rows.append(TermRow(term, value, low, high, posterior.identified(term), _source(term, posterior, logged)))
    return rows


def _rows(run: LoggedRun, efficiency: Efficiency) -> list[PhaseRow]:
    """Per phase, the log's mean against what the fitted model, simulated, charges."""
    model = simulate_steps(run.scenario, efficiency, generation_steps(run.scenario, efficiency))
    steps = run.steps
    moved = one_pass(learner_work(run.scenario, efficiency, steps)).seconds(efficiency) if steps.legacy else 0.0
    gen, forward = model.mean("gen") + moved, model.mean("forward") - moved  # verl before 2025 timed one in gen
    return [
        PhaseRow(f"{run.label}: {PHASE_NAMES['gen']}", steps.mean("gen"), gen, "decode and switch terms"),
        PhaseRow(f"{run.label}: {PHASE_NAMES['forward']}", steps.mean("forward"), forward, "forward_mfu, launches"),
        PhaseRow(f"{run.label}: {PHASE_NAMES['update']}", steps.mean("update"), model.mean("update"), "mfu, launches"),
        PhaseRow(f"{run.label}: {PHASE_NAMES['rest']}", steps.mean("rest"), model.mean("rest"), "sample_overhead_s"),
        PhaseRow(f"{run.label}: {PHASE_NAMES['step']}", steps.mean("step"), model.mean("step"), "simulated"),
    ]
