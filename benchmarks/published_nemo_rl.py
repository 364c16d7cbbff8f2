"""NeMo-RL's published runs (``framework: nemo-rl`` case files), predicted with the catalogue's efficiencies.

    benchmarks/published/nemo-rl-*.yaml   per run: the recipe's NeMo-RL settings, the published step time
        │                                 and mean sequence (prompt + completion)
        ├─ the run's lengths: the file's prompt, and a capped lognormal of the file's sigma whose mean
        │  completion is the published mean sequence less the prompt (``completion_for``)
        ├─ scenarios.nemo_rl.plan_from_nemo_rl ─► the scenario
        └─ simulate ─► seconds per step over the second half of the run

NeMo-RL publishes step times only, no phases, so there is nothing to calibrate on: the "calibrated" column
of these cases stays empty and the catalogue column is the whole check.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from asyncrl.scenarios.spec.loading import validate_scenario
from asyncrl.scenarios.spec.model_config import figures_from_config
from asyncrl.scenarios.spec.scenario import Scenario

from asyncrl.frameworks.nemo_rl.importer import plan_from_nemo_rl
from asyncrl.frameworks.verl.log_lengths import capped_mean


def completion_for(mean: float, sigma: float, cap: int) -> dict[str, Any]:
    """The lognormal of ``sigma`` whose draws capped at ``cap`` average ``mean`` (mu by bisection)."""
    if not 0 < mean < cap:
        raise ValueError(f"mean completion {mean:.0f} is not between 0 and the cap {cap}")
    low, high = math.log(mean) - 10 * sigma, math.log(cap) + 10 * sigma
    for _ in range(200):
        middle = (low + high) / 2
        low, high = (middle, high) if capped_mean(middle, sigma, cap) < mean else (low, middle)
    return {"kind": "lognormal", "median": round(math.exp(low), 1), "sigma": sigma}


def model_section(case: dict[str, Any]) -> dict[str, Any]:
    """A preset, or the figures of the config.json the case file quotes."""
    model = case["model"]
    return {"preset": model["preset"]} if "preset" in model else dict(figures_from_config(model["config"]))


def scenario_of(source: dict[str, Any], case: dict[str, Any], run: str, steps: int) -> Scenario:
    spec, lengths = case[run], source["lengths"]
    prompt = dict(lengths["prompt"])
    cap = spec["config"]["policy"]["max_total_sequence_length"] - int(prompt["value"])
    completion = completion_for(
        spec["published"]["mean_sequence"] - prompt["value"], lengths["completion"]["sigma"], cap
    )
    plan = plan_from_nemo_rl(
        spec["config"],
        name=f"{case['label']} ({run})",
        device=source["device"],
        completion_tokens=completion,
        prompt_tokens=prompt,
        model=model_section(case),
    )
    plan.scenario["run"] = {"steps": steps}
    return validate_scenario(plan.scenario)


def predict_file(path: Path, steps: int, predict_runs: Any, run_of: Any) -> list[list[Any]]:
    """One list of predictions (sync, async) per case of a NeMo-RL case file (``published.predict_runs`` on
    ``published.Run``s, without a profile)."""
    import yaml

    source = yaml.safe_load(path.read_text())
    cases = []
    for case in source["cases"]:
        runs = [
            run_of(run, float(case[run]["published"]["step"]), scenario_of(source, case, run, steps))
            for run in ("sync", "async")
        ]
        cases.append(predict_runs(f"{path.stem}: {case['label']}", runs, None))
    return cases
