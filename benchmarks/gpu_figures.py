"""What a calibrated profile and the runs beside it say about the GPU: roofline fractions, MFU, sync bandwidth.

    python benchmarks/gpu_figures.py --scenario gpu-small --profile runs/gpu/profile.yaml \
        [--runs runs/gpu/speedup/gpu-small] [--out runs/gpu/figures.json]

* decode: tokens/s of one engine at each calibrated batch size, and the fraction of the HBM roofline it reaches:
  the bytes one decode step must read (every weight once, plus the batch's KV cache at calibration's context
  length) over the device's datasheet bandwidth (h200: 4.8 TB/s), divided by the measured step time;
* learner: model-FLOPs utilisation, (6 + 2 · extra_forward_passes) · active params per trained token (forward,
  backward, and the reference's forward) over the measured time per token, against the datasheet bf16 peak;
* weight sync: the engine's weights (params × dtype bytes) over the measured sync time (flatten, send, load);
* with ``--runs``, the peak learner memory of the measured runs (metrics.parquet) and the predicted against
  the measured speedup of the scenario as written over sync (the demo's run directories).

Every figure is computed from files the other steps wrote; nothing is measured here.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from asyncrl.analysis.tables import format_table
from asyncrl.executor.calibrate import DECODE_STEPS, SHORT_PROMPT
from asyncrl.scenarios.spec.loading import load_scenario
from asyncrl.scenarios.spec.scenario import Scenario


def decode_figures(scenario: Scenario, decode_step_s: dict[int, float]) -> list[dict[str, float]]:
    """Tokens/s and the fraction of the memory-bandwidth roofline, per calibrated batch size."""
    model, bandwidth = scenario.model, scenario.hardware.spec.memory_bytes_per_s
    context = SHORT_PROMPT + DECODE_STEPS / 2  # mean context of calibration's timed decode steps
    rows = []
    for batch, seconds in sorted(decode_step_s.items()):
        step_bytes = model.weight_bytes + batch * context * model.kv_bytes_per_token
        rows.append(
            {
                "batch": batch,
                "step_ms": seconds * 1e3,
                "tokens_per_s": batch / seconds,
                "roofline_step_ms": step_bytes / bandwidth * 1e3,
                "roofline_fraction": step_bytes / bandwidth / seconds,
            }
        )
    return rows


def learner_mfu(scenario: Scenario, train_token_s: float) -> float:
    """Model-FLOPs utilisation of the learner: useful FLOPs per trained token over time per token and peak."""
    passes = 6 + 2 * scenario.algorithm.extra_forward_passes
    return passes * scenario.model.active_params / train_token_s / scenario.hardware.spec.peak_flops


def run_figures(runs: Path) -> dict[str, Any]:
    """Peak learner memory and predicted vs measured speedup, from the demo's run directories."""
    import pandas as pd

    figures: dict[str, Any] = {}
    peaks = []
    for path in sorted(runs.glob("measured-*/metrics.parquet")):
        metrics = pd.read_parquet(path)
        if "peak_memory_bytes" in metrics:  # a CUDA run's
            peaks.append(float(metrics["peak_memory_bytes"].max()))
    if peaks:
        figures["learner_peak_memory_gib"] = max(peaks) / 2**30
    walls = {}
    for kind in ("predicted", "measured"):
        summaries = {
            path.parent.name.removeprefix(f"{kind}-"): json.loads(path.read_text())["wall_time_s"]
            for path in runs.glob(f"{kind}-*/summary.json")
        }
        written = [name for name in summaries if name != "sync"]
        if "sync" in summaries and written:
            walls[kind] = summaries["sync"] / summaries[written[0]]
    if len(walls) == 2:
        figures["speedup_predicted"], figures["speedup_measured"] = walls["predicted"], walls["measured"]
        figures["speedup_error"] = (walls["predicted"] - walls["measured"]) / walls["measured"]
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="gpu-small")
    parser.add_argument("--profile", type=Path, required=True)
    parser.add_argument("--runs", type=Path, help="the demo's directory of this scenario (predicted-*, measured-*)")
    parser.add_argument("--out", type=Path, help="JSON file of every figure")
    args = parser.parse_args()
    scenario = load_scenario(args.scenario, [f"hardware.profile={args.profile.resolve()}"])
    profile = scenario.hardware.cost_profile()
    assert profile is not None
    decode = decode_figures(scenario, profile.decode_step_s)
    figures: dict[str, Any] = {
        "scenario": scenario.name,
        "device": scenario.hardware.device_name,
        "decode": decode,
        "learner_mfu": learner_mfu(scenario, profile.train_token_s),
        "weight_sync_gb_per_s": scenario.model.weight_bytes / profile.weight_sync_s / 1e9,
        "weight_sync_s": profile.weight_sync_s,
    }
    if args.runs is not None and args.runs.is_dir():
        figures.update(run_figures(args.runs))
    print(f"{scenario.name}: {scenario.model.label} in {scenario.model.dtype} on {scenario.hardware.device_name}")
    rows = [
        [r["batch"], f"{r['step_ms']:.2f}", f"{r['tokens_per_s']:,.0f}", f"{r['roofline_fraction']:.1%}"]
        for r in decode
    ]
    print(format_table(["decode batch", "step ms", "tokens/s", "of HBM roofline"], rows))
    for name, value in figures.items():
        if isinstance(value, float):
            print(f"{name:28} {value:.4g}")
    if args.out is not None:
        args.out.write_text(json.dumps(figures, indent=2) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
