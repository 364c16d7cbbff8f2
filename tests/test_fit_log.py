"""Calibration from frameworks' metrics logs (``asyncrl calibrate [SCENARIO] --from-log LOG ...``).

Most logs here are written by the simulator itself (``asyncrl.calibration.simulated_log``) with terms chosen in the test,
away from the catalogue's: the fit must find again what a log can tell (within its interval), say which terms
it cannot, and the profile it writes must predict another run of the same cluster. One log is a fixture in
verl's console layout (Ray's prefixes, colour codes, the printed config).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from asyncrl.scenarios.costs.efficiency import Efficiency, coefficient, save_efficiency
from asyncrl.scenarios.spec.loading import ScenarioError, load_scenario, validate_scenario
from asyncrl.scenarios.spec.scenario import Scenario

from asyncrl.calibration.fit_log import fit_from_logs, fit_runs
from asyncrl.calibration.log_work import simulate_steps
from asyncrl.calibration.simulated_log import verl_like_run, write_simulated_log
from asyncrl.cli import main
from asyncrl.planning.uncertainty import run_uncertainty

CONSOLE = Path(__file__).parent / "data" / "verl" / "console.log"
#: What the "real" cluster reaches: terms away from the catalogue's, so that a fit left at the defaults fails.
TRUE = Efficiency(
    mfu=0.62, forward_mfu=0.55, decode_seq_s=3e-5, learner_layer_s=6e-4, sample_overhead_s=1e-3, decode_layer_s=2e-4
)


def colocated(devices: int, preset: str = "qwen2.5-7b", **learner: Any) -> Scenario:
    """A verl-like colocated sync GRPO run on H100s, eager engines of two devices: 64 prompts of 8."""
    return verl_like_run(preset, devices, **learner)


def within(fit: Any, term: str, truth: Efficiency) -> bool:
    row = next(row for row in fit.terms if row.term == term)
    value = getattr(truth, term)
    return row.low * 0.999 <= value <= row.high * 1.001


@pytest.mark.slow
def test_one_log_fixes_what_it_can_tell_and_says_what_it_cannot(tmp_path: Path) -> None:
    scenario = colocated(8)
    fit = fit_from_logs(scenario, [write_simulated_log(scenario, TRUE, tmp_path / "log.jsonl", noise=0.01)])
    for row in fit.rows:  # per phase, the fitted model charges what the log says
        if row.logged_s:
            assert row.model_s == pytest.approx(row.logged_s, rel=0.04), row.phase
    identified = {row.term for row in fit.terms if row.identified}
    assert {"mfu", "forward_mfu", "sample_overhead_s"} <= identified
    for term in identified:  # what the log identified, its interval holds the truth
        assert within(fit, term, TRUE), term
    assert not next(row for row in fit.terms if row.term == "mbu").identified  # one run cannot tell it apart
    assert fit.efficiency.covariance and fit.efficiency.intervals["mfu"][0] < fit.efficiency.mfu
    assert fit.efficiency.fitted_to["device"] == "h100"


@pytest.mark.slow
def test_two_runs_of_one_cluster_predict_a_third(tmp_path: Path) -> None:
    """Leave one out on logs the simulator wrote with known terms: a 1.5B and a 7B run fit one profile, which
    predicts a 7B run on twice the GPUs (another model and size than the first, another GPU count than both)."""
    small, large, held_out = colocated(8, "qwen2.5-1.5b"), colocated(8), colocated(16)
    logs = [
        (small, [write_simulated_log(small, TRUE, tmp_path / "small.jsonl", noise=0.01, seed=1)]),
        (large, [write_simulated_log(large, TRUE, tmp_path / "large.jsonl", noise=0.01, seed=2)]),
    ]
    fitted = fit_runs(logs).efficiency
    truth = simulate_steps(held_out, TRUE).mean("step")
    predicted = simulate_steps(held_out, fitted).mean("step")
    assert predicted == pytest.approx(truth, rel=0.10)
    small_truth = simulate_steps(small, TRUE).mean("step")  # the catalogue misses a run the fit saw; the fit does not
    assert abs(simulate_steps(small, small.efficiency()).mean("step") / small_truth - 1) > 0.15
    assert simulate_steps(small, fitted).mean("step") == pytest.approx(small_truth, rel=0.05)
    # Twice the GPUs halve each engine's batch, which neither log varies: the interval says so, and holds the truth.
    save_efficiency(fitted, tmp_path / "profile.yaml")
    with_profile = held_out.model_copy(
        update={"hardware": held_out.hardware.model_copy(update={"profile": tmp_path / "profile.yaml"})}
    )
    step = run_uncertainty(with_profile, {"step_time_s": predicted, "samples_per_s": 1.0}).intervals["step_time_s"]
    assert step.low < truth < step.high


@pytest.mark.slow
def test_a_console_log_gives_its_config_and_its_steps(tmp_path: Path, capsys: Any) -> None:
    # The fixture: verl's console lines behind Ray's prefixes, a config line cut by another process's output,
    # 5 steps (the first left out: it loads weights).
    scenario_file = tmp_path / "run.yaml"
    assert (
        main(["from-verl", str(CONSOLE), "--device", "h100", "--lengths", str(CONSOLE), "--out", str(scenario_file)])
        == 0
    )
    scenario = load_scenario(scenario_file)
    assert scenario.model.preset == "qwen2.5-0.5b" and scenario.cluster.enforce_eager
    assert scenario.cluster.generation_devices == 8 and scenario.workload.samples_per_prompt == 5
    assert scenario.learner.micro_batch_rows == 16 and scenario.learner.forward_micro_batch_rows == 32
    assert scenario.algorithm.extra_forward_passes == 2  # old log-probs and the reference (use_kl_loss)
    capsys.readouterr()
    out = tmp_path / "profile.yaml"
    status = main(["calibrate", "--from-log", str(CONSOLE), "--hardware", "h100", "--out", str(out), "--quiet"])
    printed = capsys.readouterr().out
    assert status == 0 and "kind: efficiency" in out.read_text()
    assert "console.log: generation" in printed and "its first step (1) left out" in printed
    assert "terms identified by the logs" in printed


def test_legacy_timing_keys_are_read_as_timing_s(tmp_path: Path) -> None:
    from asyncrl.frameworks.common.metrics_log import read_metrics_log

    log = tmp_path / "old.log"
    log.write_text("(main_task pid=1) step:0 - timing/gen:20.0 - timing/ref:4.0 - timing/update_actor:9.0\n")
    read = read_metrics_log(log)
    assert read.legacy_timing and read.rows["timing_s/gen"].iloc[0] == 20.0


@pytest.mark.parametrize(
    ("value", "message"),
    [("Infinity", "not a finite number"), ("-3.0", "not a finite number"), ("1e400", "not a finite number")],
)
def test_a_timing_that_is_no_time_is_one_line(tmp_path: Path, capsys: Any, value: str, message: str) -> None:
    log = tmp_path / "log.jsonl"
    lines = [
        f'{{"step": {step}, "data": {{"timing_s/gen": {value}, "timing_s/update_actor": 5}}}}' for step in range(4)
    ]
    log.write_text("\n".join(lines) + "\n")
    out = tmp_path / "p.yaml"
    status = main(["calibrate", "quickstart", "--from-log", str(log), "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert status == 2 and len(err.strip().splitlines()) == 1 and "timing_s/gen" in err and not out.exists()


def test_a_log_without_a_phase_is_a_one_line_error_naming_the_key(tmp_path: Path, capsys: Any) -> None:
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps({"step": s, "data": {"timing_s/gen": 5.0}}) + "\n" for s in range(3)))
    with pytest.raises(ScenarioError, match="timing_s/update_actor"):
        fit_from_logs(colocated(8), [log])


def test_no_grad_passes_in_the_log_but_not_in_the_scenario_name_the_field(tmp_path: Path) -> None:
    scenario = colocated(8)
    log = write_simulated_log(scenario, TRUE, tmp_path / "log.jsonl", steps=3)
    data = scenario.model_dump(mode="json")
    data["algorithm"]["extra_forward_passes"] = 0
    with pytest.raises(ScenarioError, match=r"algorithm\.extra_forward_passes"):
        fit_from_logs(validate_scenario(data), [log])


def test_a_log_of_console_lines_without_a_scenario_or_config_is_refused(tmp_path: Path, capsys: Any) -> None:
    log = tmp_path / "bare.log"
    log.write_text("step:1 - timing_s/gen:5.0 - timing_s/update_actor:2.0\n")
    status = main(["calibrate", "--from-log", str(log), "--out", str(tmp_path / "p.yaml")])
    assert status == 2 and "give the SCENARIO it comes from" in capsys.readouterr().err


def test_the_profile_is_read_back_with_its_intervals(tmp_path: Path) -> None:
    fitted = TRUE.model_copy(update={"intervals": {"mfu": (0.5, 0.7)}, "covariance": {"mfu": {"mfu": 0.01}}})
    save_efficiency(fitted, tmp_path / "profile.yaml", header="a test profile")
    data = colocated(8).model_dump(mode="json")
    data["hardware"]["profile"] = str(tmp_path / "profile.yaml")
    with_profile = validate_scenario(data)
    read = with_profile.efficiency()
    assert read.mfu == TRUE.mfu and read.intervals["mfu"] == (0.5, 0.7) and read.covariance["mfu"]["mfu"] == 0.01
    assert with_profile.hardware.cost_profile() is None  # not a measured table: the analytic model runs
    data["hardware"]["mfu"] = 0.3  # a what-if in the scenario wins over the profile, for both learner passes
    explicit = validate_scenario(data).efficiency()
    assert (explicit.mfu, explicit.forward_mfu, explicit.decode_seq_s) == (0.3, 0.3, TRUE.decode_seq_s)


@pytest.mark.slow
def test_a_fully_async_log_summing_k_updates_per_line_gives_one_learner_steps_terms(tmp_path: Path) -> None:
    """verl's fully async trainer logs once per trigger_parameter_sync_step (k) local updates, its timings
    summed over them: the fit divides by k, and finds the learner's terms within 5%."""
    sync = colocated(8)
    streaming = validate_scenario(
        {
            **sync.model_dump(mode="json"),
            "cluster": {"generation_devices": 8, "training_devices": 8, "devices_per_engine": 2},
            "schedule": {"kind": "streaming", "max_staleness": 9, "sync_every": 4, "staleness_threshold": 0.1},
        }
    )
    phases = simulate_steps(streaming, TRUE, 8)
    lines = [
        {"step": step, "data": {
            "timing_s/gen": 1.0, "timing_s/old_log_prob": 4 * phases.forward[step],
            "timing_s/update_actor": 4 * phases.update[step], "perf/total_num_tokens": 4 * phases.tokens[step],
            "fully_async/count/stale_samples_processed": 0,
        }}
        for step in range(len(phases.update))
    ]  # fmt: skip
    log = tmp_path / "async.jsonl"
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    found = fit_from_logs(streaming, [log]).efficiency
    assert coefficient(found, "mfu") == pytest.approx(coefficient(TRUE, "mfu"), rel=0.05)
    assert coefficient(found, "forward_mfu") == pytest.approx(coefficient(TRUE, "forward_mfu"), rel=0.05)


def test_a_printed_config_missing_a_closing_line_is_closed_where_its_indentation_says(tmp_path: Path) -> None:
    """Ray drops lines of a busy console: the line that closed ``fsdp_config`` is gone (as in verl's public
    gemma-2-2b gsm8k log), and the keys after it still land where pprint's columns put them."""
    from asyncrl.frameworks.verl.printed import read_printed_config

    printed = (
        "{'reward_model': {'model': {'fsdp_config': {'min_num_params': 0,\n"
        "                            'path': '~/rm'},\n"  # the line "'param_offload': False}," was dropped
        "                  'strategy': 'fsdp'},\n"
        " 'trainer': {'logger': ['console',\n"
        "                        'wandb'],\n"
        "             'n_gpus_per_node': 2}}\n"
    )
    log = tmp_path / "console.log"
    log.write_text("".join(f"(main_task pid=7) {line}\n" for line in printed.splitlines()))
    config = read_printed_config(log)
    assert config["trainer"] == {"logger": ["console", "wandb"], "n_gpus_per_node": 2}
    assert config["reward_model"] == {
        "model": {"fsdp_config": {"min_num_params": 0}, "path": "~/rm"},
        "strategy": "fsdp",
    }


def test_the_simulated_generation_mean_is_within_a_percent_whatever_the_seed() -> None:
    # 16 samples a step: each step waits for its longest, which moves by about a quarter from step to step, so 12
    # simulated steps put 4% of seed luck into the decode terms. generation_steps simulates enough steps for one
    # standard error of 1%: over six seeds the means' spread is then about 1% or less (measured 0.6%).
    from asyncrl.scenarios.costs.efficiency import resolve
    from asyncrl.scenarios.spec.loading import variant

    from asyncrl.calibration.log_work import SIMULATED_STEPS, generation_steps, simulate_steps
    from asyncrl.calibration.simulated_log import verl_like_run

    small = variant(
        verl_like_run("qwen2.5-0.5b", 8), {"workload.prompts_per_step": 16, "workload.samples_per_prompt": 1}
    )
    efficiency = resolve(None, {}, small.framework)
    means = []
    for seed in range(6):
        run = variant(small, {"run.seed": seed})
        means.append(simulate_steps(run, efficiency, generation_steps(run, efficiency)).mean("gen"))
    assert np.std(means, ddof=1) / np.mean(means) < 0.015
    large = verl_like_run("qwen2.5-7b", 16)  # 512 samples a step: the pilot already suffices
    assert generation_steps(large, resolve(None, {}, large.framework)) == SIMULATED_STEPS
