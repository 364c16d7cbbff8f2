"""Which GPU a verl log ran on, read back from verl's own perf/mfu/actor (asyncrl.frameworks.verl.log_device)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from asyncrl.scenarios.spec.loading import load_scenario

from asyncrl.calibration.fit_log import read_runs
from asyncrl.calibration.simulated_log import verl_like_run
from asyncrl.cli import main
from asyncrl.frameworks.common.metrics_log import read_metrics_log
from asyncrl.frameworks.verl.command import scenario_from_log
from asyncrl.frameworks.verl.log_device import devices_with_peak, logged_peak

CONSOLE = Path(__file__).parent / "data" / "verl" / "console.log"


def jsonl_log(path: Path, steps: list[dict[str, float]]) -> Path:
    path.write_text("".join(json.dumps({"step": number, "data": data}) + "\n" for number, data in enumerate(steps, 1)))
    return path


def test_the_peak_is_verls_flops_over_its_mfu_seconds_and_gpus(tmp_path: Path) -> None:
    # Qwen2.5-7B (7,615,616,512 weights a token passes), 8 GPUs, 64 × 8 = 512 samples of 1,000 tokens, one epoch:
    # verl's estimate 6 · 7,615,616,512 · 512,000 + 6 · 512 · 1,000² · 128 · 28 · 28 = 2.37034552688640e16 FLOPs;
    # over 50 s × 8 GPUs × MFU 0.2 = 80: 296.29 TFLOP/s, the A100's 312 within 5%.
    scenario = verl_like_run("qwen2.5-7b", 8)
    step = {"perf/mfu/actor": 0.2, "timing_s/update_actor": 50.0, "perf/total_num_tokens": 512_000.0}
    validation = {"val/test_score": 0.5}  # a line of another kind, as verl logs between steps: left out
    peak = logged_peak(read_metrics_log(jsonl_log(tmp_path / "m.jsonl", [step, validation, step])), scenario)
    assert peak is not None
    assert peak.peak_flops == pytest.approx(23_703_455_268_864_000 / 80, rel=1e-9)
    assert peak.devices == ("a100-40g", "a100-80g", "a800") and peak.steps == 2


def test_without_perf_total_num_tokens_the_lengths_times_the_samples_count(tmp_path: Path) -> None:
    scenario = verl_like_run("qwen2.5-7b", 8)
    by_tokens = {"perf/mfu/actor": 0.2, "timing_s/update_actor": 50.0, "perf/total_num_tokens": 512_000.0}
    by_lengths = {"perf/mfu/actor": 0.2, "timing_s/update_actor": 50.0}
    by_lengths |= {"response_length/mean": 800.0, "prompt_length/mean": 200.0}
    one = logged_peak(read_metrics_log(jsonl_log(tmp_path / "a.jsonl", [by_tokens])), scenario)
    other = logged_peak(read_metrics_log(jsonl_log(tmp_path / "b.jsonl", [by_lengths])), scenario)
    assert one is not None and other is not None and one.peak_flops == pytest.approx(other.peak_flops)


@pytest.mark.parametrize(
    ("tflops", "devices"),
    [(989.0, ("h100", "h200", "h800")), (820.0, ("h100", "h200", "h800")), (150.0, ("h20",)), (350.0, ("l40s",))],
)
def test_the_nearest_catalogued_peak_names_the_devices(tflops: float, devices: tuple[str, ...]) -> None:
    assert devices_with_peak(tflops * 1e12) == devices


def test_a_peak_far_from_every_device_names_none() -> None:
    assert devices_with_peak(60e12) == ()  # 148 (H20) is 2.5 times away


def test_a_log_without_mfu_says_nothing(tmp_path: Path) -> None:
    step = {"timing_s/update_actor": 50.0, "perf/total_num_tokens": 512_000.0}
    assert (
        logged_peak(read_metrics_log(jsonl_log(tmp_path / "m.jsonl", [step])), verl_like_run("qwen2.5-7b", 8)) is None
    )


@pytest.mark.parametrize("mfu", [0.0, -0.2, float("inf"), float("nan")])
def test_an_mfu_that_is_no_share_names_no_gpu(tmp_path: Path, mfu: float) -> None:
    step = {"perf/mfu/actor": mfu, "timing_s/update_actor": 50.0, "perf/total_num_tokens": 512_000.0}
    log = tmp_path / "m.jsonl"
    log.write_text(json.dumps({"step": 1, "data": step}).replace("Infinity", "1e999") + "\n")
    assert logged_peak(read_metrics_log(log), verl_like_run("qwen2.5-7b", 8)) is None


def with_mfu(tmp_path: Path, mfu: float) -> Path:
    """The console fixture with ``perf/mfu/actor`` on each step line (its model: Qwen2.5-0.5B on 8 GPUs)."""
    text = CONSOLE.read_text()
    log = tmp_path / "console.log"
    log.write_text(re.sub(r"(step:\d+ - )", rf"\1perf/mfu/actor:{mfu} - ", text))
    return log


def test_a_console_log_without_hardware_runs_on_the_gpu_its_mfu_names(tmp_path: Path) -> None:
    # The fixture's step 2: 1,073,372,594,012,160 FLOPs by verl's formula over 4.103 s on 8 GPUs: MFU 0.1048 is
    # the A100's 312 TFLOP/s (0.0331 would be the H100's). Of the A100s, the one with the most memory.
    log = with_mfu(tmp_path, 0.1048)
    scenario = scenario_from_log(log, None, None).scenario
    assert scenario.hardware.device == "a100-80g"
    (run,) = read_runs([(scenario, [log])])  # what calibrate --from-log prints among its notes
    assert any("the scenario's a100-80g agrees" in note for note in run.steps.notes)


def test_a_console_log_without_hardware_or_mfu_is_one_line(tmp_path: Path, capsys: Any) -> None:
    status = main(["calibrate", "--from-log", str(CONSOLE), "--out", str(tmp_path / "p.yaml")])
    error = capsys.readouterr().err.strip()
    assert status == 2 and len(error.splitlines()) == 1
    assert "--hardware" in error and "logs no perf/mfu/actor" in error
    assert not (tmp_path / "p.yaml").exists()


def test_from_verl_notes_a_device_its_log_contradicts(tmp_path: Path, capsys: Any) -> None:
    log = with_mfu(tmp_path, 0.1048)
    scenario_file = tmp_path / "run.yaml"
    assert main(["from-verl", str(log), "--device", "h100", "--lengths", str(log), "--out", str(scenario_file)]) == 0
    printed = capsys.readouterr().out
    assert "perf/mfu/actor divides by" in printed and "the scenario's h100 peaks at 989" in printed
    assert load_scenario(scenario_file).hardware.device == "h100"  # a note: --device stays what was asked


def test_from_verl_without_device_runs_on_the_gpu_its_log_names(tmp_path: Path, capsys: Any) -> None:
    log = with_mfu(tmp_path, 0.1048)
    scenario_file = tmp_path / "run.yaml"
    assert main(["from-verl", str(log), "--lengths", str(log), "--out", str(scenario_file)]) == 0
    assert "hardware.device = a100-80g: verl's perf/mfu/actor divides by" in capsys.readouterr().out
    assert load_scenario(scenario_file).hardware.device == "a100-80g"
    assert "perf/mfu/actor = a100-80g" in scenario_file.read_text()  # the file says where its device came from
    status = main(["from-verl", str(CONSOLE), "--lengths", str(CONSOLE), "--out", str(tmp_path / "other.yaml")])
    error = capsys.readouterr().err.strip()
    assert status == 2 and error.startswith("asyncrl: error: --device:") and len(error.splitlines()) == 1
