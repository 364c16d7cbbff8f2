"""A metrics log written by the simulator, as verl writes its own: what the calibration is checked against.

    scenario + the terms it ran with (known) ─► simulate_steps: per learner step, each phase's seconds and
        its tokens ─► one line per step, verl's keys, in verl's JSONL layout or its console layout
        ─► asyncrl calibrate --from-log finds the terms again (tests/test_fit_log.py, benchmarks/transfer.py)

The log holds what verl's timers hold: ``timing_s/gen`` (everything between two learner phases),
``timing_s/old_log_prob`` (the no-grad passes), ``timing_s/update_actor`` (the training passes), ``timing_s/step``,
and each step's ``perf/total_num_tokens``, ``response_length/mean`` and ``prompt_length/mean``. ``noise``
multiplies each phase by a log-normal factor of that sd (seeded), as a real run's steps scatter.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import numpy as np
from asyncrl.scenarios.costs.efficiency import Efficiency
from asyncrl.scenarios.spec.loading import validate_scenario
from asyncrl.scenarios.spec.scenario import Scenario

from asyncrl.calibration.log_work import simulate_steps


def verl_like_run(preset: str, devices: int, devices_per_engine: int = 2, **learner: object) -> Scenario:
    """A verl-like colocated sync GRPO run on H100s to write logs of: eager engines, 64 prompts of 8 (lognormal
    completions, median 400), 4 updates a step, one no-grad pass; ``learner`` fields over 8 rows per micro-batch."""
    return validate_scenario(
        {
            "name": f"{preset} on {devices}",
            "framework": "verl",
            "model": {"preset": preset},
            "hardware": {"device": "h100"},
            "cluster": {
                "generation_devices": devices,
                "training_devices": devices,
                "devices_per_engine": devices_per_engine,
                "colocated": True,
                "enforce_eager": True,
            },
            "workload": {
                "prompts_per_step": 64,
                "samples_per_prompt": 8,
                "prompt_tokens": {"kind": "fixed", "value": 200},
                "completion_tokens": {"kind": "lognormal", "median": 400, "sigma": 0.8, "max_tokens": 2048},
            },
            "schedule": {"kind": "sync", "max_concurrency": 256},
            "algorithm": {"updates_per_step": 4, "extra_forward_passes": 1},
            "learner": {"micro_batch_rows": 8, **learner},
            "run": {"steps": 20, "seed": 3},
        }
    )


def write_simulated_log(
    scenario: Scenario,
    efficiency: Efficiency,
    path: Path,
    steps: int = 12,
    layout: Literal["jsonl", "console"] = "jsonl",
    noise: float = 0.0,
    seed: int = 0,
) -> Path:
    """``steps`` logged steps of ``scenario`` run with ``efficiency`` (module docstring); returns ``path``."""
    phases = simulate_steps(scenario, efficiency, steps)
    rng = np.random.default_rng(seed)
    prompt = scenario.workload.prompt_tokens.mean
    samples = scenario.batch_samples
    lines = []
    for index in range(len(phases.gen)):
        scatter = np.exp(noise * rng.standard_normal(3)) if noise else np.ones(3)
        gen, forward, update = (
            phases.gen[index] * scatter[0],
            phases.forward[index] * scatter[1],
            phases.update[index] * scatter[2],
        )
        rest = phases.rest[index]
        tokens = float(phases.tokens[index])
        data = {
            "timing_s/gen": gen,
            "timing_s/old_log_prob": forward,
            "timing_s/update_actor": update,
            "timing_s/step": gen + forward + update + rest,
            "perf/total_num_tokens": tokens,
            "response_length/mean": tokens / samples - prompt,
            "prompt_length/mean": prompt,
        }
        if not forward:
            del data["timing_s/old_log_prob"]
        lines.append(_line(index + 1, data, layout))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(lines))
    return path


def _line(step: int, data: dict[str, float], layout: str) -> str:
    if layout == "jsonl":
        return json.dumps({"step": step, "data": data}) + "\n"
    metrics = " - ".join(f"{key}:{value:.3f}" for key, value in data.items())
    return f"(TaskRunner pid=4242) step:{step} - {metrics}\n"
