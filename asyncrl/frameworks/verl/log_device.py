"""Which GPU a verl log ran on, by verl's own arithmetic: its ``perf/mfu/actor`` divided back into the peak.

verl's trainer logs ``perf/mfu/actor`` each step (``verl/workers/fsdp_workers.py`` and ``megatron_workers.py``):
the FLOPs its ``FlopsCounter`` estimates for the actor's update over the update's seconds, times ``ppo_epochs``,
over the GPU count and over the peak it looked up in ``verl/utils/flops_counter.py``'s ``_DEVICE_FLOPS`` by the
GPU's name (A100 and A800 312 TFLOP/s, H100, H800 and H200 989, H20 148, L40S 362, ...). Its estimate is
6 · N · tokens + 6 · Σ seqlen² · head_dim · heads · layers, with N the layers' linear weights plus the embedding
and the output head (counted twice even where tied). Doing the same arithmetic on the log's own tokens and
seconds gives back the peak, so a log says which GPU it ran on even where its run's description does not:

    per kept step:  verl's FLOPs of the update (its formula, on the scenario's model and the step's tokens)
                    × ppo_epochs / (timing_s/update_actor × actor GPUs × perf/mfu/actor)
        ─► the median over the steps, TFLOP/s ─► the catalogue's devices with that dense bf16 peak

``timing_s/update_actor`` also holds the dispatch around verl's own timer, so the figure comes out a percent or
two under the peak (public Qwen2-7B logs of 8 A100s: 306 and 309 against 312). ``ppo_epochs`` is the scenario's:
1 + its extra training passes, halved with a critic (verl's critic takes the actor's epochs unless told
otherwise). Models asyncrl knows as a parameter count alone count their embedding once: a tied model's output
head is then under-counted by a sixth or so, which the nearest-device match (devices lie 16% or more apart,
A100 to L40S the closest) absorbs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from asyncrl.scenarios.costs.catalog import DEVICES
from asyncrl.scenarios.spec.scenario import Scenario

from asyncrl.frameworks.common.metrics_log import MetricsLog
from asyncrl.frameworks.verl.log_phases import step_tokens

MFU = "perf/mfu/actor"
UPDATE_KEYS = ("timing_s/update_actor", "timing/update_actor")
#: How far (a ratio) the log's peak may lie from a device's for the log to be taken as that device's.
MATCH = 1.25


@dataclass(frozen=True)
class LoggedPeak:
    """The peak FLOP/s per GPU that verl divided by, and the catalogue's devices with it (none: no match)."""

    peak_flops: float
    steps: int
    devices: tuple[str, ...]

    def agrees_with(self, device: str) -> bool:
        return device in self.devices

    def text(self) -> str:
        names = ", ".join(self.devices) if self.devices else "no catalogued device"
        return f"{self.peak_flops / 1e12:,.0f} TFLOP/s per GPU ({names})"


def logged_peak(log: MetricsLog, scenario: Scenario) -> LoggedPeak | None:
    """The peak behind ``log``'s ``perf/mfu/actor`` (module docstring); None where the log has no MFU, update
    time or tokens to divide it back."""
    update = next((key for key in UPDATE_KEYS if key in log.rows), None)
    if MFU not in log.rows or update is None:
        return None
    rows = log.rows[log.rows[MFU].notna()]  # the training steps (not a validation-only line)
    tokens = step_tokens(rows, scenario.batch_samples)  # as the phases count them: perf/total_num_tokens, or means
    if tokens is None:
        return None
    mfu, seconds = rows[MFU].to_numpy(dtype=float), rows[update].to_numpy(dtype=float)
    usable = _positive(mfu) & _positive(seconds) & _positive(tokens)
    if not usable.any():
        return None
    flops = verl_update_flops(scenario, tokens[usable], scenario.batch_samples)
    peaks = flops * actor_epochs(scenario) / (seconds[usable] * scenario.cluster.training_devices * mfu[usable])
    peak = float(np.median(peaks))
    return LoggedPeak(peak, int(usable.sum()), devices_with_peak(peak))


def _positive(values: np.ndarray) -> np.ndarray:
    """Which steps logged a finite number above 0 (a missing, infinite or zero figure divides nothing back)."""
    return np.isfinite(values) & (values > 0)


def verl_update_flops(scenario: Scenario, tokens: np.ndarray, samples: int) -> np.ndarray:
    """verl's ``FlopsCounter`` estimate of one pass of the actor's update over ``tokens`` per step (module
    docstring); every sample taken at the step's mean length for the attention's square."""
    model = scenario.model
    assert model.active_params is not None
    assert model.layers is not None and model.heads is not None and model.head_dim is not None
    dense = model.active_params  # the weights a token passes through, the embedding once or twice as the model has it
    mean_length = tokens / samples
    attention = 6 * samples * mean_length**2 * model.head_dim * model.heads * model.layers
    return 6.0 * dense * tokens + attention


def actor_epochs(scenario: Scenario) -> float:
    """The actor's ``ppo_epochs`` as the scenario has them: 1 + its extra training passes, halved with a critic."""
    passes = 1 + scenario.algorithm.extra_training_passes
    return passes / 2 if scenario.algorithm.loss == "ppo" else float(passes)


def devices_with_peak(peak_flops: float) -> tuple[str, ...]:
    """The catalogue's devices (CPU aside) whose dense bf16 peak is the nearest to ``peak_flops``, within MATCH."""
    gpus = {name: spec.peak_flops for name, spec in DEVICES.items() if name != "cpu"}
    nearest = min(gpus.values(), key=lambda flops: abs(math.log(flops / peak_flops)))
    if abs(math.log(nearest / peak_flops)) > math.log(MATCH):
        return ()
    return tuple(name for name, flops in gpus.items() if flops == nearest)


def roomiest(devices: tuple[str, ...]) -> str:
    """Of devices sharing a peak, the one with the most memory (the first in the catalogue of those)."""
    return max(devices, key=lambda name: DEVICES[name].memory_bytes)


def device_notes(log: MetricsLog, scenario: Scenario, disagreeing_only: bool = False) -> list[str]:
    """What ``log``'s ``perf/mfu/actor`` says of the scenario's device, as a note (none where the log says
    nothing of its GPUs; with ``disagreeing_only``, none where it agrees)."""
    peak = logged_peak(log, scenario)
    if peak is None:
        return []
    device = scenario.hardware.device
    name = device if isinstance(device, str) else "device sheet"
    if isinstance(device, str) and peak.agrees_with(device):
        agreeing = f"{log.source}: verl's perf/mfu/actor divides by {peak.text()}: the scenario's {name} agrees"
        return [] if disagreeing_only else [agreeing]
    mine = scenario.hardware.spec.peak_flops / 1e12
    return [
        f"{log.source}: verl's perf/mfu/actor divides by {peak.text()}, the scenario's {name} peaks at "
        f"{mine:,.0f}: it is costed as {name} (set hardware.device, or --device, to the log's GPU)"
    ]
