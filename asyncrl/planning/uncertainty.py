"""How sure an answer is: the intervals ``simulate``, ``speedup``, ``size`` and ``plan`` print beside their figures.

    the scenario's terms (scenarios.costs.efficiency)       a fitted profile: their covariance (calibrate --from-log)
                                                      the catalogue's: each one's prior (asyncrl.calibration.fit_log)
    the model's own error                            the profile's model_error (MODEL_ERROR for the catalogue)
    the lengths, where they are an assumption        workload.length_range: their scale from low to high
        ─► each input nudged by one sd (in its log), a short run simulated again (the same seed): the change
           of each figure, relative ─► its sensitivity to that input
        ─► the figure's variance: the terms' sensitivities through their covariance, plus the model's
           error, plus the lengths' (their range taken as a 95% one), all in logs
        ─► a 95% interval, figure · exp(± 1.96 sd), and the inputs that move it most

A ratio of two runs (a speedup) is nudged run by run with the same input at once: what makes both slower
cancels. The runs are short (``SENSITIVITY_STEPS`` learner steps); their relative changes scale the full
run's figures. A term the base runs never read (``ReadTerms``: a split cluster's colocated switch costs, the
eager launch term of an engine on CUDA graphs) cannot move them: its run is skipped, its change exactly 0.
The interval is first-order: a term near a regime's edge (compute- or memory-bound decode) moves a figure
more on one side than the other.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np
from asyncrl.scenarios.costs.efficiency import (
    MODEL_ERROR,
    PRIOR_LOG_SD,
    Efficiency,
    coefficient,
    coefficient_floor,
    from_coefficient,
)
from asyncrl.scenarios.spec.scenario import Scenario
from asyncrl.simulator.costs import AnalyticCosts
from asyncrl.simulator.simulation import Simulation
from asyncrl.simulator.summary import run_summary

SENSITIVITY_STEPS = 12  # learner steps of each nudged run
Z95 = 1.959964
SHOWN = 3  # inputs named as moving an answer most

Figures = dict[str, float]
#: What an answer is made of: its figures from each run's summary.
Combine = Callable[[Sequence[Figures]], Figures]


class ReadTerms:
    """An ``Efficiency`` that notes which terms are read: a term no run reads moves no figure."""

    def __init__(self, efficiency: Efficiency) -> None:
        self._efficiency = efficiency
        self.read: set[str] = set()

    def __getattr__(self, name: str) -> object:
        self.read.add(name)
        return getattr(self._efficiency, name)


@dataclass(frozen=True)
class Input:
    """One uncertain input: its name, its sd in logs, and the scenario and terms it makes of a run's."""

    name: str
    log_sd: float
    nudge: Callable[[Scenario, Efficiency, float], tuple[Scenario, Efficiency]]  # by this many logs


@dataclass(frozen=True)
class Interval:
    """A figure, its 95% interval, and per input the relative change one sd of it makes."""

    value: float
    low: float
    high: float
    moves: dict[str, float]  # input -> relative change of the figure at +1 sd

    def shown(self, unit: str = "", digits: str = ".3g") -> str:
        """``314-1,190 s``: three significant digits, and no exponent for a figure of a thousand or more."""
        return f"{_significant(self.low, digits)}-{_significant(self.high, digits)}{unit}"


def _significant(value: float, digits: str) -> str:
    shown = f"{value:{digits}}"
    return f"{float(shown):,.0f}" if "e+" in shown and abs(value) < 1e15 else shown


@dataclass(frozen=True)
class Uncertainty:
    """Each figure's interval, what moves the answer most, and where the spread comes from."""

    intervals: dict[str, Interval]
    sources: str

    def most(self, figure: str) -> str:
        """The inputs that move ``figure`` most: ``decode_seq_s ±12%, lengths ±7%``."""
        moves = sorted(self.intervals[figure].moves.items(), key=lambda item: -abs(item[1]))[:SHOWN]
        return ", ".join(f"{name} ±{abs(change):.0%}" for name, change in moves if abs(change) >= 0.005) or "none"

    def to_json(self) -> dict[str, object]:
        return {
            "sources": self.sources,
            **{
                name: {"value": item.value, "low": item.low, "high": item.high, "moves": item.moves}
                for name, item in self.intervals.items()
            },
        }


def run_figures(scenario: Scenario, efficiency: Efficiency, steps: int = SENSITIVITY_STEPS) -> Figures:
    """A short run's step time and throughput."""
    run = scenario.run.model_copy(update={"steps": max(2, min(steps, scenario.run.steps))})
    short = scenario.model_copy(update={"run": run})
    sim = Simulation(short, AnalyticCosts(short, efficiency))
    sim.run()
    summary = run_summary(sim)
    return {"step_time_s": summary.step_time_s.mean, "samples_per_s": summary.throughput.samples_per_s}


def inputs(scenario: Scenario) -> tuple[list[Input], np.ndarray, float, str]:
    """The scenario's uncertain inputs, the covariance of their logs, the model's own error, and a phrase for
    where they come from."""
    efficiency = scenario.efficiency()
    if scenario.hardware.cost_profile() is not None:  # a measured table: no analytic terms to vary
        lengths = _length_inputs(scenario)
        return lengths, np.diag([item.log_sd**2 for item in lengths]), MODEL_ERROR, "a measured profile"
    fitted = efficiency.covariance
    terms = list(PRIOR_LOG_SD)
    covariance = np.diag([PRIOR_LOG_SD[term] ** 2 for term in terms])
    for i, row in enumerate(terms):
        for j, column in enumerate(terms):
            if row in fitted and column in fitted[row]:
                covariance[i, j] = fitted[row][column]
    made = [Input(term, math.sqrt(covariance[i, i]), _term_nudge(term)) for i, term in enumerate(terms)]
    lengths = _length_inputs(scenario)
    full = np.zeros((len(made) + len(lengths),) * 2)
    full[: len(made), : len(made)] = covariance
    for index, item in enumerate(lengths, start=len(made)):
        full[index, index] = item.log_sd**2
    model_error = efficiency.model_error or MODEL_ERROR
    source = "the fitted profile's terms" if fitted else "the catalogue's terms"
    source += f", the model's {model_error:.0%}" + (", the lengths' range" if lengths else "")
    return [*made, *lengths], full, model_error, source


def _term_nudge(term: str) -> Callable[[Scenario, Efficiency, float], tuple[Scenario, Efficiency]]:
    def nudge(scenario: Scenario, efficiency: Efficiency, logs: float) -> tuple[Scenario, Efficiency]:
        value = max(coefficient(efficiency, term) * math.exp(logs), coefficient_floor(term))  # a share stays ≤ 1
        return scenario, efficiency.model_copy(update={term: from_coefficient(term, value)})

    return nudge


def _length_inputs(scenario: Scenario) -> list[Input]:
    """The completion lengths' range (``workload.length_range``, a 95% one): one input, its half-range in logs
    over 1.96 its sd (first-order about the lengths as given, which the runs take)."""
    span = scenario.workload.length_range
    if span is None:
        return []
    return [Input("lengths", math.log(span[1] / span[0]) / 2 / Z95, _scale_lengths)]


def _scale_lengths(scenario: Scenario, efficiency: Efficiency, logs: float) -> tuple[Scenario, Efficiency]:
    lengths = scenario.workload.completion_tokens.scaled(math.exp(logs))
    return scenario.model_copy(
        update={"workload": scenario.workload.model_copy(update={"completion_tokens": lengths})}
    ), efficiency


def uncertainty(
    scenarios: Sequence[Scenario], nominal: Figures, combine: Combine, steps: int = SENSITIVITY_STEPS
) -> Uncertainty:
    """Intervals of the figures ``combine`` makes of ``scenarios``' runs, ``nominal`` their full runs' (module
    docstring); the first scenario's inputs stand for all (the runs of one answer share a cluster)."""
    made, covariance, model_error, source = inputs(scenarios[0])
    readers = [ReadTerms(scenario.efficiency()) for scenario in scenarios]
    base = combine(
        [
            run_figures(scenario, cast(Efficiency, terms), steps)
            for scenario, terms in zip(scenarios, readers, strict=True)
        ]
    )
    read = set().union(*(terms.read for terms in readers))
    gradients: dict[str, list[float]] = {name: [] for name in base}
    for item in made:
        if item.name in PRIOR_LOG_SD and item.name not in read:  # a term no run reads: no change, no run
            figures = base
        else:
            figures = combine([run_figures(*_nudged(scenario, item, item.log_sd), steps) for scenario in scenarios])
        for name in base:
            change = math.log(max(figures[name], 1e-300) / max(base[name], 1e-300))
            gradients[name].append(change / item.log_sd if item.log_sd else 0.0)
    intervals = {}
    for name, value in nominal.items():
        gradient = np.array(gradients[name])
        sds = np.sqrt(np.diag(covariance))
        spread = math.sqrt(max(float(gradient @ covariance @ gradient), 0.0) + model_error**2)
        moves = {item.name: math.expm1(gradient[index] * sds[index]) for index, item in enumerate(made)}
        factor = math.exp(Z95 * spread)
        intervals[name] = Interval(value, value / factor, value * factor, moves)
    return Uncertainty(intervals, source)


def _nudged(scenario: Scenario, item: Input | None, logs: float) -> tuple[Scenario, Efficiency]:
    """The scenario and its terms, ``item`` nudged by ``logs``."""
    efficiency = scenario.efficiency()
    return (scenario, efficiency) if item is None else item.nudge(scenario, efficiency, logs)


def run_uncertainty(scenario: Scenario, summary_figures: Figures) -> Uncertainty:
    """One run's step time and throughput intervals (``simulate``)."""
    return uncertainty([scenario], summary_figures, lambda runs: runs[0])


def ratio_uncertainty(scenarios: Sequence[Scenario], ratios: Figures) -> Uncertainty:
    """Intervals of the first run's throughput over each other's (``speedup``, ``size``, ``plan``): ``ratios`` by
    the other runs' labels, in the order of ``scenarios[1:]``."""
    labels = list(ratios)

    def combine(runs: Sequence[Figures]) -> Figures:
        return {
            label: runs[0]["samples_per_s"] / run["samples_per_s"] for label, run in zip(labels, runs[1:], strict=True)
        }

    return uncertainty(scenarios, ratios, combine)


def interval_lines(found: Uncertainty) -> list[str]:
    """``simulate``'s two lines: the figures' intervals, and what moves them most."""
    step, rate = found.intervals["step_time_s"], found.intervals["samples_per_s"]
    return [
        f"interval     step time {step.shown(' s')}   throughput {rate.shown(' samples/s')}   (95%: {found.sources})",
        f"  moves most {found.most('step_time_s')}",
    ]


@dataclass(frozen=True)
class Ranking:
    """The fastest plan against the best sync plan and against the next fastest, with their intervals."""

    best: str
    against: dict[str, str]  # "best sync" / "next": that plan's name
    found: Uncertainty

    def line(self) -> str:
        """``interval: fully async on 16:16 tp4 1.49x the best sync plan (95%: 1.2-1.8x), 1.03x the next ...``."""
        words = {"best sync": "the best sync plan", "next": "the next"}
        parts = [
            f"{item.value:.2f}x {words[key]}, {self.against[key]} (95%: {item.shown('x', '.2f')})"
            for key, item in self.found.intervals.items()
        ]
        return f"interval: {self.best} at {'; '.join(parts)}; {self.found.sources}{self.caveat()}"

    def caveat(self, with_intervals: bool = False) -> str:
        """What changes inside the interval: the verdict (async against sync), the best plan. ``with_intervals``
        repeats the intervals (for ``plan``'s verdict, which is printed apart from this line)."""
        notes = []
        versus = self.found.intervals.get("best sync")
        if versus is not None and versus.low < 1 < versus.high:
            shown = f" ({versus.shown('x', '.2f')})" if with_intervals else ""
            notes.append(f"the sync-or-async verdict changes inside the 95% interval{shown}")
        following = self.found.intervals.get("next")
        if following is not None and following.low < 1:
            shown = f": {following.shown('x', '.2f')}" if with_intervals else ""
            notes.append(f"the best plan changes inside it ({self.against['next']} may be faster{shown})")
        if not notes:
            return "; the verdict and the best plan hold across it"
        return ("; not settled: " if with_intervals else "; ") + "; ".join(notes)


def ranking_uncertainty(ranked: Sequence[object], name: Callable[[Scenario], str]) -> Ranking | None:
    """The fastest simulated plan of a sizing against the best sync plan and the runner-up (None: fewer than
    two plans simulated). ``name`` names a plan by its scenario."""
    simulated = [row for row in ranked if getattr(row, "summary", None) is not None]
    if len(simulated) < 2:
        return None

    def rate(row: object) -> float:
        return float(row.summary.throughput.samples_per_s)  # type: ignore[attr-defined]

    ordered = sorted(simulated, key=rate, reverse=True)
    best, runner_up = ordered[0], ordered[1]
    sync = [row for row in ordered if row.subject.scenario.schedule.kind == "sync"]  # type: ignore[attr-defined]
    others = {"next": runner_up}
    if best.subject.scenario.schedule.kind != "sync" and sync:  # type: ignore[attr-defined]
        others = {"best sync": sync[0], **others}
    scenarios = [best.subject.scenario, *(row.subject.scenario for row in others.values())]  # type: ignore[attr-defined]
    ratios = {key: rate(best) / rate(row) for key, row in others.items()}
    found = ratio_uncertainty(scenarios, ratios)
    rows = {"best": best, **others}
    names = {key: name(row.subject.scenario) for key, row in rows.items()}  # type: ignore[attr-defined]
    if len(set(names.values())) < len(names):  # plans ``name`` cannot tell apart (a micro-batch): their labels
        names = {key: row.subject.label for key, row in rows.items()}  # type: ignore[attr-defined]
    best_name = names.pop("best")
    return Ranking(best_name, names, found)
