"""The demo's report page, built from simulated runs of its three scenarios (no execution: seconds, not minutes).

The "measured" runs are simulated too, so the figures' numbers mean nothing; the page, its sections and its
figures are the ones ``asyncrl demo`` writes (``asyncrl.experiments.demo._report``), which is what the layout tests check.
"""

from __future__ import annotations

from pathlib import Path

from asyncrl.analysis.records.compare import compare_speedup, compare_summaries
from asyncrl.scenarios.record.record import RunSummary
from asyncrl.scenarios.spec.loading import load_scenario
from asyncrl.simulator.backend import Simulator

from asyncrl.calibration.runs import as_kind
from asyncrl.experiments.demo import DEMO_SCENARIOS, ScenarioOutcome, _report
from asyncrl.experiments.trial import Trial


def demo_page(out: Path, steps: int = 4) -> Path:
    """``out/report/index.html`` as the demo writes it, over DEMO_SCENARIOS each run for ``steps`` steps."""
    outcomes = []
    for name in DEMO_SCENARIOS:
        scenario = load_scenario(name, [f"run.steps={steps}"])
        trial = Trial(scenario, out / name, Simulator(), Simulator())
        measured = {kind: _summary(trial.measure(kind).summary) for kind in reversed(trial.kinds)}  # sync first
        predicted = {
            kind: _summary(Simulator().run(as_kind(scenario, kind), out / name / f"predicted-{kind}").summary)
            for kind in trial.kinds
        }
        written = scenario.schedule.kind
        speedup = compare_speedup(measured["sync"], measured[written], predicted["sync"], predicted[written])
        comparison = compare_summaries(
            measured[written], predicted[written], a_label="measured", b_label="predicted", speedup=speedup
        )
        outcomes.append(ScenarioOutcome(name, comparison, predicted, measured))
    return _report(out, outcomes) / "index.html"


def _summary(summary: RunSummary | None) -> RunSummary:
    assert summary is not None
    return summary
