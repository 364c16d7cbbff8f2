"""The main job: calibrate this machine, predict, execute, compare, report.

    for each CPU scenario:  calibrate (the executor's code paths, its learner settings) ──► profile.yaml
                            simulate sync + as written (with the profile) ──► predicted runs
                            execute  sync + as written                     ──► measured runs
                            compare predicted with measured (figures and speedup)
    report: plots and one page for the first scenario, a table for all

It needs no GPU and no download. ``--steps`` and ``--scenario`` shrink it (CI
runs it on one scenario for a few steps). ``--device cuda`` runs the same job on
a GPU (``benchmarks/gpu.sh`` does, on ``gpu-small``), and ``--profile`` uses a
profile measured before instead of calibrating.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from asyncrl.analysis.compare import Comparison, compare_speedup, compare_summaries
from asyncrl.analysis.tables import format_table
from asyncrl.scenarios.loading import load_scenario
from asyncrl.scenarios.record import read_summary, write_run
from asyncrl.scenarios.scenario import Scenario

DEMO_SCENARIOS = ("cpu-timing", "cpu-pareto", "cpu-light")


@dataclass
class ScenarioOutcome:
    name: str
    comparison: Comparison
    predicted: dict[str, dict[str, Any]]  # kind -> summary
    measured: dict[str, dict[str, Any]]


def run_demo(
    out: Path,
    scenarios: tuple[str, ...] = DEMO_SCENARIOS,
    steps: int | None = None,
    say: Any = print,
    device: str = "cpu",
    profile: Path | None = None,
) -> list[ScenarioOutcome]:
    from asyncrl.executor.calibrate import calibrate
    from asyncrl.scenarios.profile import save_profile

    out.mkdir(parents=True, exist_ok=True)
    outcomes = []
    for index, name in enumerate(scenarios):
        # Each scenario's learner differs (loss, minibatches, lengths), so each is calibrated.
        profile_path = profile or out / name / "profile.yaml"
        if profile is None:
            say(
                f"[{index + 1}/{len(scenarios)}] {name}: calibrating the executor's engine and learner -> {profile_path}"
            )
            calibration = calibrate(_load(name, steps, []), [1, 2, 4, 8, 16, 32], repeats=7, device=device)
            save_profile(calibration.profile, profile_path)
        say(f"[{index + 1}/{len(scenarios)}] {name}: simulating and executing sync and as written on {device}")
        outcomes.append(_one_scenario(name, out / name, profile_path, steps, device))
    say("writing the report")
    report = _report(out, outcomes[0])
    print(_table(outcomes))
    print(f"report: {report / 'index.html'}   runs and comparisons: {out}/")
    return outcomes


def _load(name: str, steps: int | None, overrides: list[str]) -> Scenario:
    return load_scenario(name, [*overrides, *([f"run.steps={steps}"] if steps else [])])


def _one_scenario(name: str, out: Path, profile: Path, steps: int | None, device: str) -> ScenarioOutcome:
    from asyncrl.executor.runtime import execute
    from asyncrl.scenarios.loading import dump_scenario
    from asyncrl.simulator.simulation import simulate

    predicted, measured = {}, {}
    written = _load(name, steps, []).schedule.kind
    for kind in ("sync", written):
        kind_override = [] if kind == written else [f"schedule.kind={kind}"]
        predicted_scenario = _load(name, steps, [*kind_override, f"hardware.profile={profile.resolve()}"])
        result = simulate(predicted_scenario)
        write_run(
            out / f"predicted-{kind}",
            scenario_yaml=dump_scenario(predicted_scenario.resolved()),
            events=result.events,
            summary=result.summary,
        )
        predicted[kind] = result.summary
        executed = _load(name, steps, kind_override)
        with tqdm(total=executed.run.steps, desc=f"  executing {kind}", unit="step", leave=False, disable=None) as bar:
            execute(executed, out / f"measured-{kind}", device=device, on_step=lambda step, row: bar.update())
        measured[kind] = read_summary(out / f"measured-{kind}")
    speedup = compare_speedup(predicted["sync"], predicted[written], measured["sync"], measured[written])
    comparison = compare_summaries(
        predicted[written], measured[written], a_label="predicted", b_label="measured", speedup=speedup
    )
    return ScenarioOutcome(name, comparison, predicted, measured)


def _report(out: Path, outcome: ScenarioOutcome) -> Path:
    """Predicted against measured (as written), and the measured sync and async runs one above the other."""
    from asyncrl.analysis.report import write_report

    runs = out / outcome.name
    written = list(outcome.measured)[-1]
    speedup_dirs = (
        runs / "predicted-sync",
        runs / f"predicted-{written}",
        runs / "measured-sync",
        runs / f"measured-{written}",
    )
    write_report(
        [runs / f"predicted-{written}", runs / f"measured-{written}"], out / "report", speedup_dirs=speedup_dirs
    )
    write_report([runs / "measured-sync", runs / f"measured-{written}"], out / "report-sync-vs-async")
    return out / "report"


def _table(outcomes: list[ScenarioOutcome]) -> str:
    rows = []
    for outcome in outcomes:
        written = list(outcome.measured)[-1]
        p, m = outcome.predicted[written], outcome.measured[written]
        p_speedup = outcome.predicted["sync"]["wall_time_s"] / p["wall_time_s"]
        m_speedup = outcome.measured["sync"]["wall_time_s"] / m["wall_time_s"]
        rows.append(
            [
                f"{outcome.name} ({written})",
                f"{p_speedup:.2f}x",
                f"{m_speedup:.2f}x",
                f"{(p_speedup - m_speedup) / m_speedup:+.0%}",
                f"{(p['wall_time_s'] - m['wall_time_s']) / m['wall_time_s']:+.0%}",
                f"{p['staleness']['mean']:.2f} / {m['staleness']['mean']:.2f}",
            ]
        )
    header = [
        "scenario",
        "predicted speedup",
        "measured speedup",
        "speedup error",
        "wall time error",
        "staleness pred / meas",
    ]
    return format_table(header, rows)
