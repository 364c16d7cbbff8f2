"""benchmarks/gpu_figures.py, the GPU entry's derived figures, worked by hand on a written profile and run dirs."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pandas as pd
import pytest
from asyncrl.scenarios.costs.profile import CostProfile, save_profile
from asyncrl.scenarios.spec.loading import load_scenario

QWEN_1_5B_BF16_BYTES = 1_543_714_304 * 2
KV_BYTES_PER_TOKEN = 2 * 28 * 2 * 128 * 2  # keys and values, 28 layers, 2 KV heads of 128, bf16
H200_BYTES_PER_S = 4800e9


@pytest.fixture(scope="module")
def figures() -> ModuleType:
    pytest.importorskip("torch")  # the script reads calibration's constants from the executor
    path = Path(__file__).resolve().parent.parent / "benchmarks" / "gpu_figures.py"
    spec = importlib.util.spec_from_file_location("gpu_figures", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_decode_roofline_mfu_and_sync_bandwidth_by_hand(figures: ModuleType, tmp_path: Path) -> None:
    profile = CostProfile(
        decode_step_s={1: 0.004, 64: 0.008}, prefill_token_s=1e-6, train_token_s=2e-5, weight_sync_s=1.0
    )
    save_profile(profile, tmp_path / "profile.yaml")
    scenario = load_scenario("gpu-small", [f"hardware.profile={tmp_path / 'profile.yaml'}"])

    one, sixty_four = figures.decode_figures(scenario, profile.decode_step_s)
    context = 16 + 16 / 2  # calibration's short prompt, and half its 16 timed decode steps
    assert one["tokens_per_s"] == pytest.approx(250)
    assert one["roofline_fraction"] == pytest.approx(
        (QWEN_1_5B_BF16_BYTES + context * KV_BYTES_PER_TOKEN) / H200_BYTES_PER_S / 0.004
    )
    assert one["roofline_fraction"] == pytest.approx(0.1608, abs=1e-4)
    assert sixty_four["tokens_per_s"] == pytest.approx(8000)
    assert sixty_four["roofline_step_ms"] == pytest.approx(
        (QWEN_1_5B_BF16_BYTES + 64 * context * KV_BYTES_PER_TOKEN) / H200_BYTES_PER_S * 1e3
    )
    # GRPO: forward + backward (6N) and the reference's forward (2N) per trained token, against 989 TFLOP/s.
    assert figures.learner_mfu(scenario, 2e-5) == pytest.approx(8 * 1_543_714_304 / 2e-5 / 989e12)


def test_peak_memory_and_speedup_come_from_the_run_directories(figures: ModuleType, tmp_path: Path) -> None:
    walls = {"predicted-sync": 30.0, "predicted-streaming": 20.0, "measured-sync": 36.0, "measured-streaming": 30.0}
    for name, wall in walls.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "summary.json").write_text(json.dumps({"wall_time_s": wall}))
    pd.DataFrame({"peak_memory_bytes": [2.0 * 2**30, 3.0 * 2**30]}).to_parquet(
        tmp_path / "measured-sync" / "metrics.parquet"
    )
    pd.DataFrame({"loss": [0.1]}).to_parquet(tmp_path / "measured-streaming" / "metrics.parquet")  # a CPU run's

    found = figures.run_figures(tmp_path)

    assert found["learner_peak_memory_gib"] == pytest.approx(3.0)
    assert found["speedup_predicted"] == pytest.approx(1.5) and found["speedup_measured"] == pytest.approx(1.2)
    assert found["speedup_error"] == pytest.approx(0.25)
