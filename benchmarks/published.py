"""Predicted against published: verl's own tables of sync and async runs, one calibration per case.

    benchmarks/published/<table>.yaml  source (repository, commit, file, table), every verl setting of the
        │                              runs, the assumptions the source does not settle (lengths), and per
        │                              case (a row pair) the published seconds per step
        ├─ from-verl (scenarios.verl) ─► the sync and the async scenario, the same lengths for both
        ├─ the sync run's metrics log, written from its published phase means (verl's JSONL layout)
        ├─ calibrate --from-log (asyncrl.calibration.fit_log) ─► one efficiency profile, fitted to the sync run only
        └─ simulate both runs, with the catalogue's efficiencies and with the profile ─► the table

Nothing is fitted per case beyond that one calibration from the sync run: the async prediction is the
profile used on another split, GPU count and schedule. Seconds per step are per *verl* step (a fully
async run logs one step per parameter sync, ``learner_steps_per_step`` of asyncrl's learner steps), taken
over the second half of the simulated run (the steady state a 400-step mean reports). A case's ``sweep``
(a verl key and the published step at each of its values) predicts the async run at each value with the
case's profile, and a row compares the step's fall between two of them (verl's staleness ablation).

Every predicted step and speedup carries the 95% interval ``asyncrl simulate`` and ``asyncrl speedup`` print for
that scenario (``asyncrl.planning.uncertainty``: the terms' priors or the profile's covariance, the model's own
error, and, where the case's lengths are an assumption, ``from-verl``'s range of them, half to twice), and
whether it holds the published figure.

    python benchmarks/published.py [FILE.yaml ...] [--steps N] [--json] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from asyncrl.scenarios.costs.efficiency import save_efficiency  # noqa: E402
from asyncrl.scenarios.spec.loading import dump_scenario, validate_scenario  # noqa: E402
from asyncrl.scenarios.spec.scenario import Scenario  # noqa: E402
from asyncrl.simulator.simulation import Simulation  # noqa: E402
from published_table import holding, table  # noqa: E402

from asyncrl.calibration.fit_log import fit_from_logs  # noqa: E402
from asyncrl.frameworks.common.command import lengths_assumed  # noqa: E402
from asyncrl.frameworks.verl.importer import plan_from_verl, read_config, settle_concurrency  # noqa: E402
from asyncrl.planning.uncertainty import ratio_uncertainty, run_uncertainty  # noqa: E402

CASES = ROOT / "benchmarks" / "published"
BASE_CONFIG = ROOT / "tests" / "data" / "verl_ppo_trainer.yaml"  # verl's trainer config layout, trimmed
LOGGED_STEPS = 10  # lines of the written sync log (the same published means on each)
VERL_TIMING = {"step": "timing_s/step", "gen": "timing_s/gen", "old_log_prob": "timing_s/old_log_prob"}
VERL_TIMING |= {"ref": "timing_s/ref", "update_actor": "timing_s/update_actor"}


Range = tuple[float, float]


@dataclass(frozen=True)
class Prediction:
    """One run of a case: its published seconds per step, the catalogue's and the calibrated prediction, each
    with its 95% interval; on an async run, the speedup over its case's sync run with the intervals of both."""

    case: str
    run: str
    published_s: float
    catalogue_s: float
    calibrated_s: float | None  # None where the source publishes no phases to calibrate on (NeMo-RL)
    catalogue_range: Range | None = None
    calibrated_range: Range | None = None
    speedup_catalogue_range: Range | None = None
    speedup_calibrated_range: Range | None = None

    def error(self, predicted: float) -> float:
        return (predicted - self.published_s) / self.published_s


@dataclass(frozen=True)
class Run:
    """What one run of a case is predicted from: its label, published step, scenario and learner steps per
    published step."""

    name: str
    published_s: float
    scenario: Scenario
    per_step: int = 1


def runs_of(source: dict[str, Any], case: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each run of one case: its verl overrides (the file's, the run's, the case's) and what was published."""
    runs = {}
    for run, shared in source["runs"].items():
        overrides = [*source["common"], *shared["overrides"], *case[run].get("overrides", [])]
        overrides.append(f"actor_rollout_ref.model.path={source['model_path']}")
        steps = shared.get("learner_steps_per_step", 1)
        runs[run] = {"overrides": overrides, "published": case[run]["published"], "learner_steps_per_step": steps}
    return runs


def scenario_of(source: dict[str, Any], run: dict[str, Any], name: str, steps: int) -> Scenario:
    """The scenario ``from-verl`` writes for one run, with the source's lengths."""
    plan = plan_from_verl(
        read_config(BASE_CONFIG, run["overrides"]),
        name=name,
        device=source["device"],
        completion_tokens=dict(source["lengths"]["completion"]),
        prompt_tokens=dict(source["lengths"]["prompt"]),
    )
    plan.scenario["run"] = {"steps": steps * run["learner_steps_per_step"]}
    lengths_assumed(plan)  # the source gives the cap alone: the intervals carry from-verl's range of lengths
    scenario = validate_scenario(plan.scenario)
    if settle_concurrency(plan, scenario):
        scenario = validate_scenario(plan.scenario)
    return scenario


def write_sync_log(published: dict[str, float], path: Path) -> Path:
    """verl's file-logger JSONL of the sync run: the published phase means, one line per step."""
    data = {VERL_TIMING[phase]: seconds for phase, seconds in published.items() if phase in VERL_TIMING}
    lines = [json.dumps({"step": step, "data": data}) for step in range(1, LOGGED_STEPS + 1)]
    path.write_text("\n".join(lines) + "\n")
    return path


def steady_step_s(scenario: Scenario, per_verl_step: int) -> float:
    """Seconds per verl step over the second half of a simulated run."""
    sim = Simulation(scenario)
    ends: list[float] = []
    sim.run(on_step=lambda step, now: ends.append(now))
    half = len(ends) // 2
    return (ends[-1] - ends[half - 1]) / (len(ends) - half) * per_verl_step


def with_profile(scenario: Scenario, profile: Path) -> Scenario:
    data = scenario.model_dump(mode="json")
    data["hardware"]["profile"] = str(profile)
    return validate_scenario(data)


def step_range(scenario: Scenario, step_s: float) -> Range:
    """The 95% interval ``asyncrl simulate`` prints for ``scenario``'s step, about ``step_s``."""
    found = run_uncertainty(scenario, {"step_time_s": step_s}).intervals["step_time_s"]
    return found.low, found.high


def speedup_range(sync: Scenario, other: Scenario, speedup: float) -> Range:
    """The 95% interval ``asyncrl speedup`` prints for ``other``'s throughput over ``sync``'s, about ``speedup``."""
    found = ratio_uncertainty([other, sync], {"sync": speedup}).intervals["sync"]
    return found.low, found.high


def predict_runs(label: str, runs: Sequence[Run], profile: Path | None, intervals: bool = True) -> list[Prediction]:
    """Each run's step with the catalogue's terms and (given a profile) with the profile's, with intervals (unless
    ``intervals`` is false); an async run's speedup over the sync run among ``runs``, with its intervals."""
    sync = next((run for run in runs if run.name == "sync"), None)
    predictions: list[Prediction] = []
    for run in runs:
        as_calibrated = None if profile is None else with_profile(run.scenario, profile)
        catalogue = steady_step_s(run.scenario, run.per_step)
        calibrated = None if as_calibrated is None else steady_step_s(as_calibrated, run.per_step)
        prediction = Prediction(label, run.name, run.published_s, catalogue, calibrated)
        if not intervals:
            predictions.append(prediction)
            continue
        prediction = replace(
            prediction,
            catalogue_range=step_range(run.scenario, catalogue),
            calibrated_range=None
            if as_calibrated is None or calibrated is None
            else step_range(as_calibrated, calibrated),
        )
        if run.name == "async" and sync is not None:
            sync_prediction = next(item for item in predictions if item.run == "sync")
            prediction = _with_speedup_ranges(prediction, sync_prediction, sync.scenario, run.scenario, profile)
        predictions.append(prediction)
    return predictions


def _with_speedup_ranges(
    prediction: Prediction, sync: Prediction, sync_scenario: Scenario, scenario: Scenario, profile: Path | None
) -> Prediction:
    catalogue = speedup_range(sync_scenario, scenario, sync.catalogue_s / prediction.catalogue_s)
    calibrated = None
    if profile is not None and sync.calibrated_s is not None and prediction.calibrated_s is not None:
        pair = (with_profile(sync_scenario, profile), with_profile(scenario, profile))
        calibrated = speedup_range(*pair, sync.calibrated_s / prediction.calibrated_s)
    return replace(prediction, speedup_catalogue_range=catalogue, speedup_calibrated_range=calibrated)


def predict_case(
    source: dict[str, Any],
    case: dict[str, Any],
    label: str,
    steps: int,
    keep: Path | None = None,
    intervals: bool = True,
) -> list[Prediction]:
    """Calibrate on the case's sync run (its published phases as a log), then predict both runs; with
    ``keep``, the scenarios, the log and the profile stay in that directory."""
    runs = runs_of(source, case)
    scenarios = {run: scenario_of(source, spec, f"{label} ({run})", steps) for run, spec in runs.items()}
    with tempfile.TemporaryDirectory() as scratch:
        folder = keep or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        for run, scenario in scenarios.items():
            (folder / f"{run}.yaml").write_text(dump_scenario(scenario))
        log = write_sync_log(runs["sync"]["published"], folder / "sync.jsonl")
        profile = folder / "profile.yaml"
        save_efficiency(fit_from_logs(scenarios["sync"], [log]).efficiency, profile)
        predictions = predict_runs(
            label,
            [
                Run(run, float(spec["published"]["step"]), scenarios[run], spec["learner_steps_per_step"])
                for run, spec in runs.items()
            ],
            profile,
            intervals,
        )
        if "sweep" in case:
            predictions += predict_sweep(source, case["sweep"], runs["async"], label, steps, profile, intervals)
        return predictions


def predict_sweep(
    source: dict[str, Any],
    sweep: dict[str, Any],
    spec: dict[str, Any],
    label: str,
    steps: int,
    profile: Path,
    intervals: bool = True,
) -> list[Prediction]:
    """The async run at each published value of the swept verl key (the case's profile, nothing refitted)."""
    key = sweep_name(sweep)
    points = []
    for value, published in sweep["published"].items():
        run = {**spec, "overrides": [*spec["overrides"], f"{sweep['key']}={value}"]}
        scenario = scenario_of(source, run, f"{label} ({key}={value})", steps)
        points.append(Run(f"{value}", float(published), scenario, spec["learner_steps_per_step"]))
    return predict_runs(f"{label}, {key} sweep", points, profile, intervals)


def sweep_name(sweep: dict[str, Any]) -> str:
    """``+async_training.staleness_threshold`` -> ``staleness_threshold``."""
    return str(sweep["key"]).rsplit(".", 1)[-1]


def sweep_effects(source_cases: list[dict[str, Any]], predictions: list[Prediction]) -> list[list[str]]:
    """Per sweep, the step's fall between its ``effect`` values, published against predicted (a table row)."""
    rows = []
    for case in source_cases:
        sweep = case.get("sweep")
        if sweep is None:
            continue
        points = {item.run: item for item in predictions if item.case.endswith(f"{sweep_name(sweep)} sweep")}
        start, end = (points[str(value)] for value in sweep["effect"])

        def fall(first: float | None, last: float | None) -> str:
            return "-" if first is None or last is None else f"{1 - last / first:.0%}"

        rows.append(
            [
                start.case,
                f"{sweep['effect'][0]} -> {sweep['effect'][1]}",
                fall(start.published_s, end.published_s),
                fall(start.catalogue_s, end.catalogue_s),
                fall(start.calibrated_s, end.calibrated_s),
            ]
        )
    return rows


def predict_file(path: Path, steps: int, keep: Path | None = None, intervals: bool = True) -> list[list[Prediction]]:
    source = yaml.safe_load(path.read_text())
    if source.get("framework") == "nemo-rl":
        from published_nemo_rl import predict_file as predict_nemo_rl

        return predict_nemo_rl(path, steps, partial(predict_runs, intervals=intervals), Run)
    if source.get("framework") == "areal":
        from published_areal import predict_file as predict_areal

        folders = None if keep is None else (lambda case: keep / _slug(path, case))
        return predict_areal(path, steps, steady_step_s, partial(predict_runs, intervals=intervals), Run, folders)
    return [
        predict_case(source, case, f"{path.stem}: {case['label']}", steps, keep and keep / _slug(path, case), intervals)
        for case in source["cases"]
    ]


def _slug(path: Path, case: dict[str, Any]) -> str:
    """A directory name for one case: the file's stem and the case's label, lowercase, words joined by -."""
    words = "".join(char if char.isalnum() else " " for char in case["label"].lower()).split()
    return "-".join([path.stem, *words])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*", type=Path, help="case files (default: benchmarks/published/*.yaml)")
    parser.add_argument("--steps", type=int, default=20, help="verl steps simulated per run (default 20)")
    parser.add_argument("--json", action="store_true", help="print the predictions as JSON")
    parser.add_argument(
        "--no-intervals",
        dest="intervals",
        action="store_false",
        help="leave out the 95%% intervals (their short runs take most of the time)",
    )
    parser.add_argument(
        "--keep",
        type=Path,
        help="write each case's scenarios (verl: and its sync log and profile) under this directory",
    )
    args = parser.parse_args(argv)
    files = args.cases or sorted(CASES.glob("*.yaml"))
    predictions = [
        item for path in files for case in predict_file(path, args.steps, args.keep, args.intervals) for item in case
    ]
    cases = [case for path in files for case in yaml.safe_load(path.read_text()).get("cases", [])]
    if args.json:
        print(json.dumps([asdict(item) for item in predictions], indent=2))
    else:
        print(table(predictions, sweep_effects(cases, predictions)))
        if args.intervals:
            print(holding(predictions))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
