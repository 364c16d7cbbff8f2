"""What each phase of a logged step stands for as work of the cost terms: the figures the log fit multiplies.

    a scenario and its current terms
        ├─ simulate_steps: a short sync run simulated, each learner step after the first cut by phase as
        │                  verl's timers cut it (gen, no-grad passes, training, the rest); as many steps as
        │                  the generation mean needs to be within 1% (generation_steps)
        ├─ learner_work:   per logged step, the learner's work at that step's own tokens
        │                  (simulator.learner_costs.AnalyticLearner.work)
        └─ generation_work: the generation phase's work, read off the simulator: the run simulated again
                           with each generation term nudged (the same seed: the same lengths), the difference
                           per unit of the term is its work (common random numbers: exact)
    ─► PhaseWork per phase (asyncrl.calibration.fit_log turns them into observations of the terms)

A run whose responses drift is cut into windows of steps (length_windows), each simulated at its own
lengths (with_completions_scaled).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from asyncrl.scenarios.costs.efficiency import Efficiency, coefficient, from_coefficient
from asyncrl.scenarios.rules.workload import LengthStream, TrainTokens
from asyncrl.scenarios.spec.scenario import Scenario
from asyncrl.simulator.costs import AnalyticCosts, colocated_switch_work, colocated_sync_work
from asyncrl.simulator.learner_costs import (
    AnalyticLearner,
    LearnerWork,
    PhaseWork,
    attention_weight,
    data_parallel_ranks,
    learner_layout,
)
from asyncrl.simulator.simulation import Simulation
from asyncrl.simulator.topology import Placement

from asyncrl.frameworks.verl.log_phases import LoggedSteps

SIMULATED_STEPS = 12  # learner steps simulated for each look at a sync run's generation (after the first), at least
#: The simulated generation mean's standard error the fit allows, relative: a run's steps each wait for their
#: batch's longest sample, which moves by a quarter from step to step at 16 samples a step, and 12 steps would put
#: a seed's luck of about 4% into the fitted decode terms. ``generation_steps`` simulates enough steps for this ...
GENERATION_PRECISION = 0.01
MAX_SIMULATED_STEPS = 800  # ... up to this many (1.0% at a step-to-step spread of 28%)
NUDGE = 0.05  # a generation term's relative nudge, to read its work off the simulator
LENGTH_WINDOWS = 3  # a run whose responses drift is fitted in this many windows of steps ...
LENGTH_DRIFT = 0.15  # ... when their mean response lengths differ by more than this


@dataclass(frozen=True)
class SimulatedSteps:
    """What the model charges per learner step of a simulated run (after its first step), by phase."""

    gen: np.ndarray
    forward: np.ndarray
    update: np.ndarray
    rest: np.ndarray
    communication: np.ndarray
    step: np.ndarray
    tokens: np.ndarray

    def mean(self, phase: str) -> float:
        return float(np.mean(getattr(self, phase)))


def simulate_steps(scenario: Scenario, efficiency: Efficiency, steps: int = SIMULATED_STEPS) -> SimulatedSteps:
    """Simulate ``steps`` + 1 learner steps of ``scenario`` with ``efficiency``; each step after the first
    (which starts with nothing to load) by phase, as verl's timers cut a sync step:

        step k = generation (weights into the engines, waking them, decoding, putting them to sleep,
                             collating the batch: everything between two learner phases; verl's gen)
               + no-grad passes + training passes (their phases, offloads and exposed collectives)
               + the rest (train_step_s, sample_overhead_s per sample)
    """
    run = scenario.run.model_copy(update={"steps": max(2, steps + 1)})
    short = scenario.model_copy(update={"run": run})
    sim = Simulation(short, AnalyticCosts(short, efficiency))
    sim.run()
    trains, parts = sim.recorder.trains, sim.learner_steps[1:]
    gaps = [later.start - earlier.end for earlier, later in itertools.pairwise(trains)]
    return SimulatedSteps(
        gen=np.array(gaps),
        forward=np.array([part.forward_s for part in parts]),
        update=np.array([part.update_s for part in parts]),
        rest=np.array([part.overhead_s for part in parts]),
        communication=np.array([part.communication_s for part in parts]),
        step=np.array([later.end - earlier.end for earlier, later in itertools.pairwise(trains)]),
        tokens=np.array([span.tokens for span in trains[1:]], dtype=float),
    )


def generation_steps(scenario: Scenario, efficiency: Efficiency) -> int:
    """How many learner steps to simulate for the mean generation phase to be within ``GENERATION_PRECISION``
    (one standard error) of its expectation: (its step-to-step coefficient of variation / the precision)², from a
    pilot of ``SIMULATED_STEPS``, within [``SIMULATED_STEPS``, ``MAX_SIMULATED_STEPS``]."""
    pilot = simulate_steps(scenario, efficiency).gen
    if len(pilot) < 2 or not pilot.mean() > 0:
        return SIMULATED_STEPS
    spread = float(pilot.std(ddof=1) / pilot.mean())
    return int(min(MAX_SIMULATED_STEPS, max(SIMULATED_STEPS, math.ceil((spread / GENERATION_PRECISION) ** 2))))


def length_windows(steps: LoggedSteps) -> list[tuple[np.ndarray, float]]:
    """The run's steps in up to LENGTH_WINDOWS consecutive windows where their mean response length moves by
    more than LENGTH_DRIFT between them, each with its mean relative to the run's; else the whole run at 1.
    A run whose responses doubled is then fitted at each window's own lengths, not at their blend."""
    whole = np.ones(len(steps.steps), dtype=bool)
    response = steps.response
    if response is None or len(response) < 2 * LENGTH_WINDOWS:
        return [(whole, 1.0)]
    windows = np.array_split(np.arange(len(response)), LENGTH_WINDOWS)
    means = np.array([response[index].mean() for index in windows])
    if means.max() / means.min() - 1 < LENGTH_DRIFT:
        return [(whole, 1.0)]
    overall = float(response.mean())
    masks = []
    for index, mean in zip(windows, means, strict=True):
        mask = np.zeros(len(response), dtype=bool)
        mask[index] = True
        masks.append((mask, float(mean) / overall))
    return masks


def steady_lengths(scenario: Scenario) -> Scenario:
    """The scenario without ``workload.completion_scale_by_step``: a log is fitted at each window's own lengths
    (``length_windows``), which a growth over the simulated steps would stretch a second time."""
    if scenario.workload.completion_scale_by_step is None:
        return scenario
    workload = scenario.workload.model_copy(update={"completion_scale_by_step": None})
    return scenario.model_copy(update={"workload": workload})


def with_completions_scaled(scenario: Scenario, ratio: float) -> Scenario:
    """The scenario with its completions stretched until their mean (under the cap) is ``ratio`` times its own."""
    if ratio == 1.0:
        return scenario
    lengths = scenario.workload.completion_tokens
    target = min(lengths.mean * ratio, lengths.cap * 0.999)
    low, high = math.log(0.05), math.log(20.0)  # the stretch's log, bisected: the mean rises with it
    for _ in range(40):
        middle = (low + high) / 2
        low, high = (middle, high) if lengths.scaled(math.exp(middle)).mean < target else (low, middle)
    workload = scenario.workload.model_copy(update={"completion_tokens": lengths.scaled(math.exp(low))})
    return scenario.model_copy(update={"workload": workload})


def mean_work(work: Sequence[PhaseWork]) -> dict[str, float]:
    terms = {term for item in work for term in item.terms}
    return {term: float(np.mean([item.terms.get(term, 0.0) for item in work])) for term in terms}


def mean_fixed(work: Sequence[PhaseWork]) -> float:
    return float(np.mean([item.fixed_s for item in work]))


def one_pass(work: Sequence[LearnerWork]) -> PhaseWork:
    """One no-grad pass of the average step (old log-probs)."""
    mean = PhaseWork(mean_work([item.forward for item in work]), mean_fixed([item.forward for item in work]))
    share = 1.0 / max(1.0, float(mean.terms.get("phase_s", 1.0)))
    return PhaseWork({term: amount * share for term, amount in mean.terms.items()}, mean.fixed_s * share)


def without_one_pass(work: PhaseWork) -> PhaseWork:
    passes = max(1.0, float(work.terms.get("phase_s", 1.0)))
    share = (passes - 1.0) / passes
    return PhaseWork({term: amount * share for term, amount in work.terms.items()}, work.fixed_s * share)


def learner_work(scenario: Scenario, efficiency: Efficiency, steps: LoggedSteps) -> list[LearnerWork]:
    """Each kept step's learner work at its own tokens: the scenario's batch (its rows' spread and how they
    fall on the ranks) scaled to the step's token count."""
    learner = AnalyticLearner(scenario, efficiency, learner_layout(scenario, Placement.of(scenario.cluster)))
    reference = reference_tokens(scenario)
    counts = steps.tokens if steps.tokens is not None else np.full(len(steps.steps), float(reference.actual))
    work = []
    for count in counts:
        scale = float(count) / reference.actual
        tokens = TrainTokens(
            actual=round(count),
            padded=round(reference.padded * scale),
            actual_square=round(reference.actual_square * scale**2),
            padded_square=round(reference.padded_square * scale**2),
            update_imbalance=reference.update_imbalance,
            forward_imbalance=reference.forward_imbalance,
            rows=scenario.batch_samples,
        )
        work.append(learner.work(tokens))
    return work


def reference_tokens(scenario: Scenario) -> TrainTokens:
    """One batch drawn from the scenario's lengths, as the simulator's recorder counts it."""
    stream = LengthStream(scenario)
    groups = []
    for _ in range(scenario.batch_groups):
        prompt, completions = stream.next_group()
        groups.append([prompt + length for length in completions])
    return TrainTokens.of_array(
        np.array(groups, dtype=np.int64),
        scenario.algorithm.updates_per_step,
        data_parallel_ranks(scenario),
        attention_weight(scenario),
    )


@dataclass(frozen=True)
class GenerationWork:
    """A sync run's generation phase as work: the engines decoding (and prefilling), the weights reaching
    them, the phase switches around it (colocated: waking, sleeping, collating the batch)."""

    decode: PhaseWork
    sync: PhaseWork
    switches: PhaseWork

    @property
    def whole(self) -> PhaseWork:
        return self.decode.plus(self.sync).plus(self.switches)


def generation_work(scenario: Scenario, efficiency: Efficiency, notes: list[str], label: str) -> GenerationWork | None:
    """A sync run's generation phase as work (module docstring): the switches and the weight sync from the cost
    model's own decomposition, the decoding read off the simulator; None for other runs."""
    if scenario.schedule.kind != "sync":
        notes.append(
            f"{label}: the run is {scenario.schedule.kind}: its timing_s/gen is the learner's wait, not the "
            "engines' time; the generation terms keep the catalogue's values unless a sync run's log is given"
        )
        return None
    layout = learner_layout(scenario, Placement.of(scenario.cluster))
    costs = AnalyticCosts(scenario, efficiency)
    if scenario.cluster.colocated:
        sync = colocated_sync_work(scenario, layout)
        to_training, to_generation = colocated_switch_work(scenario, layout)
        switches = to_training.plus(to_generation)
    else:
        sync, switches = PhaseWork({}, costs.weight_sync(0)), PhaseWork()
    around_s = sync.seconds(efficiency) + switches.seconds(efficiency)
    steps = generation_steps(scenario, efficiency)  # the same steps (and seed) for every look: common numbers
    base = simulate_steps(scenario, efficiency, steps).mean("gen") - around_s
    terms = {}
    for term in generation_terms(scenario):
        value = coefficient(efficiency, term)
        step = NUDGE * value
        nudged = efficiency.model_copy(update={term: from_coefficient(term, value + step)})
        terms[term] = max(0.0, (simulate_steps(scenario, nudged, steps).mean("gen") - around_s - base) / step)
    fixed = base - sum(amount * coefficient(efficiency, term) for term, amount in terms.items())
    return GenerationWork(PhaseWork(terms, fixed), sync, switches)


def generation_terms(scenario: Scenario) -> list[str]:
    """The terms the engines' decoding pays (the launch term of their mode), read off the simulator."""
    launch = "decode_layer_s" if scenario.cluster.enforce_eager else "graph_layer_s"
    return ["mbu", "decode_mfu", "decode_step_s", "decode_seq_s", launch, "mfu"]
