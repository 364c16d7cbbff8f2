"""verl metrics logs the tests (and docs/lengths.md's `asyncrl lengths --from-log` example) read, written in code.

    python -m tests.metrics_log_data runs/verl-metrics.jsonl

writes what verl's FileLogger writes for a sync run: a validation line at step 0, then 100 training
steps, one line each, ``{"step": N, "data": {...}}``. Each step draws 512 response lengths
lognormal (median 600, σ 0.9) and cuts them at 4,096, as data.max_response_length would, and
logs their ``response_length/mean``, ``/max``, ``/min``, ``/clip_ratio`` (the share at the cap),
the prompts' (lognormal median 180, σ 0.3, cut at 512), and timings that follow the lengths.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

MEDIAN, SIGMA, CAP = 600.0, 0.9, 4096
SAMPLES, STEPS = 512, 100
PROMPT_MEDIAN, PROMPT_SIGMA, PROMPT_CAP = 180.0, 0.3, 512


def capped_lognormal(rng: np.random.Generator, n: int, median: float, sigma: float, cap: int) -> np.ndarray:
    """Lengths as a scenario draws them: rounded, at least 1, at most ``cap``."""
    return np.clip(np.rint(median * np.exp(sigma * rng.standard_normal(n))), 1, cap).astype(np.int64)


def step_metrics(responses: np.ndarray, prompts: np.ndarray, cap: int) -> dict[str, float]:
    """verl's per-step length metrics (metric_utils.compute_data_metrics) and timings that grow with them."""
    generate = float(responses.max()) * 0.05  # a sync batch waits for its longest response
    return {
        "response_length/mean": float(responses.mean()),
        "response_length/max": float(responses.max()),
        "response_length/min": float(responses.min()),
        "response_length/clip_ratio": float((responses == cap).mean()),
        "prompt_length/mean": float(prompts.mean()),
        "prompt_length/max": float(prompts.max()),
        "prompt_length/min": float(prompts.min()),
        "perf/total_num_tokens": float(responses.sum() + prompts.sum()),
        "timing_s/gen": generate,
        "timing_s/old_log_prob": float(responses.sum()) * 2e-5,
        "timing_s/update_actor": float(responses.sum()) * 6e-5,
        "timing_s/step": generate + float(responses.sum()) * 8e-5,
    }


def draw_steps(
    steps: int = STEPS,
    samples: int = SAMPLES,
    median: float = MEDIAN,
    sigma: float = SIGMA,
    cap: int = CAP,
    seed: int = 0,
) -> dict[int, dict[str, float]]:
    """Steps 1..steps, each the metrics of ``samples`` fresh responses and prompts."""
    rng = np.random.default_rng(seed)
    drawn = {}
    for step in range(1, steps + 1):
        responses = capped_lognormal(rng, samples, median, sigma, cap)
        prompts = capped_lognormal(rng, samples, PROMPT_MEDIAN, PROMPT_SIGMA, PROMPT_CAP)
        drawn[step] = step_metrics(responses, prompts, cap)
    return drawn


def write_file_logger(path: Path, steps: dict[int, dict[str, float]], nested: bool = True) -> Path:
    """One JSON line per step as verl's FileLogger writes it (``nested``), or flat; a validation line first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [{"val-core/gsm8k/reward/mean@1": 0.21, "timing_s/testing": 41.5}, *steps.values()]
    with path.open("w") as handle:
        for step, data in zip([0, *steps], lines, strict=True):
            record = {"step": step, "data": data} if nested else {"step": step, **data}
            handle.write(json.dumps(record) + "\n")
    return path


def write_tensorboard(directory: Path, steps: dict[int, dict[str, float]]) -> Path:
    """The same steps as verl's _TensorboardAdapter writes them: add_scalar per key (torch's SummaryWriter)."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(directory))
    for step, data in steps.items():
        for key, value in data.items():
            writer.add_scalar(key, value, step)
    writer.close()
    return directory


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "runs/verl-metrics.jsonl")
    print(f"wrote {write_file_logger(target, draw_steps())}")
