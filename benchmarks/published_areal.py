"""AReaL's published runs (``framework: areal`` case files): the sync run fixes the lengths, the async run is predicted.

    benchmarks/published/areal-*.yaml   per case: the scenario fields both runs share, and per run its split,
        │                               schedule and published training hours over the file's ``batches``
        ├─ the sync run: the median completion solved so that its simulated step is the published one
        │  (AReaL publishes no response lengths: ``fit_median``, a bisection on a lognormal of the file's sigma)
        └─ the async run with the same lengths ─► seconds per step over the second half of the run

Efficiencies are the catalogue's: the one figure taken from a published run is the sync run's mean length,
so the sync row's error is zero by construction and the async row is the prediction.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from asyncrl.scenarios.spec.loading import dump_scenario, validate_scenario
from asyncrl.scenarios.spec.scenario import Scenario

from asyncrl.frameworks.verl.defaults import merge

FIT_STEPS = 12  # sync steps simulated per trial median (the second half is averaged)
FIT_ROUNDS = 16  # bisection rounds on log(median): the bracket shrinks 65,536-fold


def scenario_of(source: dict[str, Any], case: dict[str, Any], run: str, median: float, steps: int) -> Scenario:
    """One run of a case: the shared fields, the run's own, the file's lengths with this median."""
    spec = {key: value for key, value in case[run].items() if key != "published"}
    lengths = source["lengths"]
    workload = {"prompt_tokens": lengths["prompt"], "completion_tokens": {**lengths["completion"], "median": median}}
    data: dict[str, Any] = {}
    for section in (
        {"name": f"{case['label']} ({run})", "framework": "areal", "model": case["model"]},
        {"hardware": {"device": source["device"]}},
        case["scenario"],
        spec,
        {"workload": workload, "run": {"steps": steps, "seed": 0}},
    ):
        merge(data, section)  # (copies: the case file's shared sections stay as read)
    return validate_scenario(data)


def published_step_s(source: dict[str, Any], case: dict[str, Any], run: str) -> float:
    """Seconds per batch: the published training hours over the file's number of batches."""
    return float(case[run]["published"]["hours"]) * 3600 / int(source["batches"])


def fit_median(source: dict[str, Any], case: dict[str, Any], steady_step_s: Any) -> float:
    """The median completion at which the simulated sync step is the published one (bisection on its log)."""
    target = published_step_s(source, case, "sync")
    low, high = math.log(64), math.log(int(source["lengths"]["completion"]["max_tokens"]))
    for _ in range(FIT_ROUNDS):
        middle = (low + high) / 2
        step = steady_step_s(scenario_of(source, case, "sync", math.exp(middle), FIT_STEPS), 1)
        low, high = (middle, high) if step < target else (low, middle)
    return round(math.exp((low + high) / 2))


def predict_file(
    path: Path, steps: int, steady_step_s: Any, predict_runs: Any, run_of: Any, keep: Any = None
) -> list[list[Any]]:
    """One list of predictions (sync, async) per case of an AReaL case file (``published.predict_runs`` on
    ``published.Run``s, without a profile); with ``keep`` (a function of the case giving a directory), each
    run's scenario, with the solved median, is written there as RUN.yaml."""
    import yaml

    source = yaml.safe_load(path.read_text())
    cases = []
    for case in source["cases"]:
        median = fit_median(source, case, steady_step_s)
        label = f"{path.stem}: {case['label']}"
        runs = []
        for run in ("sync", "async"):
            scenario = scenario_of(source, case, run, median, steps)
            if keep is not None:
                folder = keep(case)
                folder.mkdir(parents=True, exist_ok=True)
                (folder / f"{run}.yaml").write_text(dump_scenario(scenario))
            runs.append(run_of(run, published_step_s(source, case, run), scenario))
        cases.append(predict_runs(label, runs, None))
    return cases
