"""benchmarks/published.py on one of its cases: the user's path from a verl config and a sync log to both predictions."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from asyncrl.scenarios.spec.loading import load_scenario

ROOT = Path(__file__).resolve().parents[1]
CASE = ROOT / "benchmarks" / "published" / "verl-one-step-off-7b.yaml"


def published() -> Any:
    spec = importlib.util.spec_from_file_location("published", ROOT / "benchmarks" / "published.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["published"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_every_case_file_names_its_source_and_the_figures_of_both_runs() -> None:
    for path in sorted((ROOT / "benchmarks" / "published").glob("*.yaml")):
        source = yaml.safe_load(path.read_text())
        assert {"repo", "commit", "file", "table"} <= set(source["source"]), path
        assert {"completion", "prompt"} == set(source["lengths"]), path  # the assumption, one for both runs
        for case in source["cases"]:  # seconds per step, or (AReaL) training hours over the file's batches
            for run in ("sync", "async"):
                assert case[run]["published"].get("step", 0) > 0 or case[run]["published"]["hours"] > 0, path


@pytest.mark.slow
def test_the_sync_run_is_reproduced_after_calibrating_on_its_log(tmp_path: Path) -> None:
    module = published()
    [predictions] = module.predict_file(CASE, 6, tmp_path, intervals=False)  # (their short runs: below)
    printed = module.table(predictions)
    assert "verl-one-step-off-7b: 16 GPUs, 4:12" in printed and "speedup" in printed
    sync = next(item for item in predictions if item.run == "sync")
    assert sync.calibrated_s == pytest.approx(sync.published_s, rel=0.1)  # fitted to it, sampled anew
    kept = tmp_path / "verl-one-step-off-7b-16-gpus-4-12"
    assert {path.name for path in kept.iterdir()} == {"sync.yaml", "async.yaml", "sync.jsonl", "profile.yaml"}
    assert "kind: efficiency" in (kept / "profile.yaml").read_text()
    # the interval `simulate` prints with the profile, about that step
    scenario = module.with_profile(load_scenario(kept / "sync.yaml"), kept / "profile.yaml")
    low, high = module.step_range(scenario, sync.calibrated_s)
    assert low < sync.calibrated_s < high


def test_areal_cases_solve_the_median_that_reproduces_the_sync_step() -> None:
    # A case whose published hours are what the simulator gives at a median of 900 tokens: the bisection finds
    # that median again (the same seed draws the same lengths, each proportional to the median below the cap).
    module = published()
    import published_areal  # (benchmarks/ is on the path once published.py is loaded)

    source = {
        "device": "h100",
        "batches": 10,
        "lengths": {
            "prompt": {"kind": "fixed", "value": 64},
            "completion": {"kind": "lognormal", "sigma": 1.0, "max_tokens": 8192},
        },
    }
    case: dict[str, Any] = {
        "label": "small",
        "model": {"preset": "qwen2.5-1.5b"},
        "scenario": {"workload": {"prompts_per_step": 8, "samples_per_prompt": 4}},
        "sync": {"cluster": {"generation_devices": 2, "training_devices": 2}, "schedule": {"kind": "sync"}},
        "async": {
            "cluster": {"generation_devices": 2, "training_devices": 2},
            "schedule": {
                "kind": "streaming",
                "max_staleness": 2,
                "in_flight_updates": True,
                "kv_on_update": "recompute",
            },
        },
    }
    sync = published_areal.scenario_of(source, case, "sync", 900, published_areal.FIT_STEPS)
    step = module.steady_step_s(sync, 1)
    case["sync"]["published"] = {"hours": step * source["batches"] / 3600}
    assert published_areal.fit_median(source, case, module.steady_step_s) == pytest.approx(900, rel=0.01)


def test_a_sweep_compares_the_steps_fall_between_its_two_values() -> None:
    """verl's staleness ablation: 231.3 s at threshold 0, 146.1 s at 0.3, a fall of 1 - 146.1 / 231.3 = 37%."""
    module = published()
    sweep = {"key": "+async_training.staleness_threshold", "effect": [0, 0.3]}
    case = "verl: 128 GPUs, staleness_threshold sweep"
    points = [
        module.Prediction(case, "0", 231.3, 200.0, 250.0),
        module.Prediction(case, "0.1", 171.3, 180.0, 200.0),
        module.Prediction(case, "0.3", 146.1, 150.0, 175.0),
    ]
    ((label, values, published_fall, catalogue_fall, calibrated_fall),) = module.sweep_effects(
        [{"sweep": sweep}], points
    )
    assert (label, values) == (case, "0 -> 0.3")
    assert (published_fall, catalogue_fall, calibrated_fall) == ("37%", "25%", "30%")  # 1 - 150/200, 1 - 175/250
    rows = module.table(points, [[label, values, published_fall, catalogue_fall, calibrated_fall]]).splitlines()
    assert rows[-1].split()[-4:] == ["0.3", "37%", "25%", "30%"]  # the effect row; no speedup row for a sweep


def test_each_prediction_says_whether_its_interval_holds_the_published_figure() -> None:
    module = published()
    case = "verl: 16 GPUs"
    sync = module.Prediction(case, "sync", 749.0, 715.0, 753.0, (360.0, 1440.0), (760.0, 1240.0))
    other = module.Prediction(case, "async", 520.0, 662.0, 590.0, (300.0, 500.0), (300.0, 1150.0), (0.8, 1.4), None)
    rows = module.table([sync, other]).splitlines()
    assert rows[2].split()[-7:] == ["(-5%)", "360-1,440", "holds", "753.0", "(+1%)", "760-1,240", "misses"]
    assert "300-500 misses" in rows[3] and "300-1,150 holds" in rows[3]  # 749 is below the calibrated 760
    # the speedup, 749 / 520 = 1.44x: the catalogue's 715 / 662 = 1.08x, its interval 0.8-1.4x misses it
    assert "1.44x" in rows[4] and "1.08x (-25%)" in rows[4] and "0.80-1.40x misses" in rows[4]
    assert module.holding([sync, other]) == (
        "intervals holding the published figure: catalogue: 1 of 2 steps and 0 of 1 speedups; "
        "calibrated: 1 of 2 steps and 0 of 0 speedups"
    )


def test_a_verl_case_s_assumed_lengths_carry_from_verl_s_range() -> None:
    """The verl files give the cap alone: the intervals carry half to twice the assumed lengths, as
    `from-verl` writes for lengths given as a distribution."""
    module = published()
    source = yaml.safe_load(CASE.read_text())
    spec = module.runs_of(source, source["cases"][0])["sync"]
    scenario = module.scenario_of(source, spec, "sync", 4)
    assert scenario.workload.length_range == (0.5, 2.0)
