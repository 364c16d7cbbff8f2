"""Calibration from a framework's metrics log (``asyncrl calibrate SCENARIO --from-log LOG``).

The logs here are written by the simulator itself, with efficiencies chosen in the test: the fit must
find them again, and the profile it writes must transfer to another GPU count the way the efficiencies do.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from asyncrl.scenarios.efficiency import Efficiency, save_efficiency
from asyncrl.scenarios.loading import ScenarioError, validate_scenario
from asyncrl.scenarios.scenario import Scenario
from asyncrl.simulator.costs import AnalyticCosts
from asyncrl.simulator.simulation import Simulation

from asyncrl.cli import main
from asyncrl.fit_log import fit_from_logs, simulate_phases

#: What the "real" run reached: efficiencies away from the catalogue's, so that a fit left at the defaults fails.
TRUE = Efficiency(decode_step_s=0.0065, mfu=0.52, forward_mfu=0.31, sample_overhead_s=0.004, switch_s=1.5)


def colocated(devices: int, **learner: Any) -> Scenario:
    """A verl-like colocated sync run of the 7B model on H100s: 64 prompts of 8, a long tail."""
    return validate_scenario(
        {
            "name": f"sync-{devices}",
            "model": {"preset": "qwen2.5-7b"},
            "hardware": {"device": "h100"},
            "cluster": {
                "generation_devices": devices,
                "training_devices": devices,
                "devices_per_engine": 2,
                "colocated": True,
            },
            "workload": {
                "prompts_per_step": 64,
                "samples_per_prompt": 8,
                "prompt_tokens": {"kind": "fixed", "value": 200},
                "completion_tokens": {"kind": "lognormal", "median": 500, "sigma": 1.0, "max_tokens": 8192},
            },
            "schedule": {"kind": "sync", "max_concurrency": 256},
            "algorithm": {"updates_per_step": 4, "extra_forward_passes": 1},
            "learner": learner,
            "run": {"steps": 20, "seed": 3},
        }
    )


def write_log(scenario: Scenario, efficiency: Efficiency, path: Path, **drop: bool) -> Path:
    """verl's file-logger JSONL of ``scenario`` run with ``efficiency``: per step, its phases as verl times them."""
    phases = simulate_phases(scenario, efficiency, steps=scenario.run.steps)
    data = {
        "timing_s/gen": phases.gen_s,
        "timing_s/old_log_prob": phases.forward_s,
        "timing_s/update_actor": phases.update_s + efficiency.train_step_s + phases.communication_s,
        "timing_s/update_weights": phases.switch_s,
        "timing_s/reward": efficiency.sample_overhead_s * scenario.batch_samples,
        "timing_s/step": phases.step_s,
    }
    data = {key: value for key, value in data.items() if not drop.get(key.split("/")[1])}
    path.write_text("".join(json.dumps({"step": step, "data": data}) + "\n" for step in range(1, 6)))
    return path


@pytest.mark.slow
def test_the_fit_finds_the_efficiencies_the_log_was_made_with(tmp_path: Path) -> None:
    scenario = colocated(8)
    fit = fit_from_logs(scenario, [write_log(scenario, TRUE, tmp_path / "log.jsonl")])
    found = fit.efficiency
    assert found.mfu == pytest.approx(TRUE.mfu, rel=1e-3)
    assert found.forward_mfu == pytest.approx(TRUE.forward_mfu, rel=1e-3)
    assert found.switch_s == pytest.approx(TRUE.switch_s, rel=1e-6)  # beyond the weight load the model charges
    assert found.decode_step_s == pytest.approx(TRUE.decode_step_s, rel=0.01)
    # The log's reward time is outside every phase the model times: it is the per-sample overhead.
    assert found.sample_overhead_s == pytest.approx(TRUE.sample_overhead_s, rel=1e-6)
    assert (found.mbu, found.decode_mfu) == (TRUE.mbu, TRUE.decode_mfu)  # not told apart: the catalogue's
    assert any(item.startswith("mbu and decode_mfu") for item in fit.undetermined)
    for row in fit.rows:  # per phase, the fitted model charges what the log says
        if row.logged_s:
            assert row.model_s == pytest.approx(row.logged_s, rel=0.01), row.phase
    assert found.sources["mfu"].startswith("timing_s/update_actor")
    assert found.fitted_to["device"] == "h100"


@pytest.mark.slow
def test_a_profile_fitted_at_32_devices_gives_the_simulators_own_answer_at_64(tmp_path: Path) -> None:
    fitted = fit_from_logs(colocated(32), [write_log(colocated(32), TRUE, tmp_path / "log.jsonl")]).efficiency
    larger = colocated(64)
    truth = Simulation(larger, AnalyticCosts(larger, TRUE))
    truth.run()
    predicted = Simulation(larger, AnalyticCosts(larger, fitted))
    predicted.run()
    assert predicted.env.now == pytest.approx(truth.env.now, rel=0.01)


def test_the_profile_is_read_back_as_efficiencies(tmp_path: Path) -> None:
    scenario = colocated(8)
    save_efficiency(TRUE, tmp_path / "profile.yaml", header="a test profile")
    data = scenario.model_dump(mode="json")
    data["hardware"]["profile"] = str(tmp_path / "profile.yaml")
    with_profile = validate_scenario(data)
    assert with_profile.hardware.efficiency().decode_step_s == TRUE.decode_step_s
    assert with_profile.hardware.cost_profile() is None  # not a measured table: the analytic model runs
    data["hardware"]["mfu"] = 0.3  # a what-if in the scenario wins over the profile, for both learner passes
    explicit = validate_scenario(data).hardware.efficiency()
    assert (explicit.mfu, explicit.forward_mfu, explicit.decode_step_s) == (0.3, 0.3, TRUE.decode_step_s)


def test_a_log_without_a_phase_is_a_one_line_error_naming_the_key(tmp_path: Path, capsys: Any) -> None:
    scenario = colocated(8)
    log = write_log(scenario, TRUE, tmp_path / "log.jsonl", update_actor=True)
    with pytest.raises(ScenarioError, match="timing_s/update_actor"):
        fit_from_logs(scenario, [log])
    (tmp_path / "scenario.yaml").write_text(json.dumps(scenario.model_dump(mode="json")))
    status = main(
        ["calibrate", str(tmp_path / "scenario.yaml"), "--from-log", str(log), "--out", str(tmp_path / "p.yaml")]
    )
    err = capsys.readouterr().err
    assert status == 2
    assert len(err.strip().splitlines()) == 1 and "timing_s/update_actor" in err
    assert not (tmp_path / "p.yaml").exists()


def test_no_grad_passes_in_the_log_but_not_in_the_scenario_name_the_field(tmp_path: Path) -> None:
    scenario = colocated(8)
    log = write_log(scenario, TRUE, tmp_path / "log.jsonl")
    data = scenario.model_dump(mode="json")
    data["algorithm"]["extra_forward_passes"] = 0
    with pytest.raises(ScenarioError, match=r"algorithm\.extra_forward_passes"):
        fit_from_logs(validate_scenario(data), [log])


@pytest.mark.slow
def test_calibrate_from_log_prints_each_phase_and_writes_the_profile(tmp_path: Path, capsys: Any) -> None:
    scenario = colocated(8)
    log = write_log(scenario, TRUE, tmp_path / "log.jsonl")
    (tmp_path / "scenario.yaml").write_text(json.dumps(scenario.model_dump(mode="json")))
    out = tmp_path / "profile.yaml"
    assert (
        main(["calibrate", str(tmp_path / "scenario.yaml"), "--from-log", str(log), "--out", str(out), "--quiet"]) == 0
    )
    printed = capsys.readouterr().out
    for phase in ("generation (gen)", "no-grad passes", "training (update_actor", "switch (update_weights)", "step"):
        assert phase in printed
    assert "undetermined: mbu and decode_mfu" in printed
    assert "kind: efficiency" in out.read_text()
