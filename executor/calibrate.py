"""Calibration: measure the executor's own costs and write the profile the simulator reads.

    engine (ContinuousBatchingEngine) ──► decode step at batch b, per context token, prefill per token
    learner (Learner.train_step)      ──► per step, per padded token, per padded row·length² (attention),
                                          least squares over five row lengths
    executor.sync_probe               ──► one weight synchronization as a run does it: flatten, send over
                                          torch.distributed to a receiver process, load_weights there
                                            │ median of repeats
                                            ▼
                                   profiles/<name>.yaml  (hardware.profile)

The engine runs in ``model.dtype`` and the learner as a run's does (fp32 weights, bf16 autocast for bf16), on
``device``. On CUDA every timed region starts and ends with ``torch.cuda.synchronize``, so a figure is the work's,
not the time to queue it. Every figure is the median of ``repeats`` measurements; ``Calibration.noise``
keeps, per figure, the spread (max − min) / median so the command can say how
noisy the machine was.
"""

from __future__ import annotations

import copy
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from asyncrl.executor.engine import ContinuousBatchingEngine, Request, Rollout
from asyncrl.scenarios.loading import ScenarioError
from asyncrl.scenarios.profile import CostProfile
from asyncrl.scenarios.scenario import Scenario

DECODE_STEPS = 16  # decode steps timed per measurement
SHORT_PROMPT, LONG_PROMPT = 16, 128


@dataclass
class Calibration:
    profile: CostProfile
    noise: dict[str, float] = field(default_factory=dict)  # figure -> (max - min) / median over repeats


def check_device(device: str) -> None:
    """Raise ScenarioError when ``device`` is cuda and torch sees no GPU."""
    if device == "cuda" and not torch.cuda.is_available():
        raise ScenarioError("--device: cuda asked for, but torch sees no GPU")


def calibrate(
    scenario: Scenario,
    batch_sizes: list[int],
    repeats: int = 5,
    progress: Callable[[str], None] | None = None,
    device: str = "cpu",
) -> Calibration:
    """Measure on the scenario's model and learner settings (the executor's code paths), on ``device``."""
    from asyncrl.executor.placement import use_device
    from asyncrl.executor.sync_probe import time_weight_syncs
    from asyncrl.executor.work import load_scenario_task, policy_model

    use_device("cuda:0" if device == "cuda" else device)
    task = load_scenario_task(scenario)
    policy = policy_model(scenario, task)  # built once: the learner's fp32 copy, and the engine's, cast
    noise: dict[str, float] = {}
    tick = progress or (lambda label: None)
    decode, per_context, prefill = _measure_engine(scenario, policy, device, batch_sizes, repeats, noise, tick)
    learner = _learner(scenario, policy, task, device)
    tick("learner step")
    lengths = _train_lengths(scenario)
    times = [
        _median(noise, f"train_step_s[{n}]", repeats, lambda n=n: _train_step(learner, scenario, n)) for n in lengths
    ]
    overhead, per_token, per_square = _fit_train(scenario, lengths, times)
    tick("weight sync")
    syncs = time_weight_syncs(scenario, learner.model, device, rounds=repeats + 1)[1:]  # the first warms up
    profile = CostProfile(
        decode_step_s=decode,
        decode_context_token_s=per_context,
        prefill_token_s=prefill,
        train_token_s=per_token * scenario.training_devices,
        train_token_square_s=per_square * scenario.training_devices,
        train_step_overhead_s=overhead,
        train_padding="longest",  # the executor's learner pads each minibatch to its longest row
        weight_sync_s=_record(noise, "weight_sync_s", syncs),
    )
    return Calibration(profile, noise)


def _measure_engine(
    scenario: Scenario,
    policy: Any,
    device: str,
    batch_sizes: list[int],
    repeats: int,
    noise: dict[str, float],
    tick: Callable[[str], None],
) -> tuple[dict[int, float], float, float]:
    """Decode step per batch size, decode time per context token, prefill time per prompt token, of one engine."""
    from asyncrl.executor.precision import executor_dtype

    torch.set_num_threads(scenario.cluster.devices_per_engine)
    model = copy.deepcopy(policy).to(device, executor_dtype(scenario.model.dtype)).eval()
    decode: dict[int, float] = {}
    for batch in batch_sizes:
        tick(f"decode step, batch {batch}")
        decode[batch] = _median(
            noise, f"decode_step_s[{batch}]", repeats, lambda b=batch: _decode_step(model, b, SHORT_PROMPT)
        )
    tick("decode step, long context")
    wide = batch_sizes[len(batch_sizes) // 2]
    long_context = _median(
        noise, "decode_step_s[long context]", repeats, lambda: _decode_step(model, wide, LONG_PROMPT)
    )
    per_context = max(0.0, (long_context - decode[wide]) / (wide * (LONG_PROMPT - SHORT_PROMPT)))
    tick("prefill")
    alone = decode[min(decode)]
    prefill = _median(noise, "prefill_token_s", repeats, lambda: _prefill_token(model, LONG_PROMPT, alone))
    return decode, per_context, prefill


def _learner(scenario: Scenario, policy: Any, task: Any, device: str) -> Any:
    from asyncrl.executor.learner import Learner

    if device == "cuda":
        torch.cuda.empty_cache()  # the engine's copy is gone: its memory goes back before the learner's is taken
    torch.set_num_threads(scenario.training_devices)
    pad = task.tokenizer.pad_token_id if task else 0
    return Learner.from_scenario(scenario, policy, pad, device=device)


def _median(noise: dict[str, float], name: str, repeats: int, measure: Callable[[], float]) -> float:
    measure()  # warm-up: allocations, lazy initialisation
    return _record(noise, name, [measure() for _ in range(repeats)])


def _record(noise: dict[str, float], name: str, values: list[float]) -> float:
    """The median of ``values``; their spread goes to ``noise``."""
    middle = statistics.median(values)
    noise[name] = (max(values) - min(values)) / middle if middle > 0 else 0.0
    return middle


def _now(device: torch.device) -> float:
    """The clock, read once the device's queued work is done (on CUDA), so a region times the work itself."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def _engine(model: Any, batch: int) -> ContinuousBatchingEngine:
    return ContinuousBatchingEngine(
        model, max_batch=batch, eos_token_id=None, pad_token_id=0, seed=0, device=next(model.parameters()).device
    )


def _requests(batch: int, prompt: int, length: int, vocab: int) -> Iterator[Request]:
    generator = torch.Generator().manual_seed(batch * 1000 + prompt)
    for index in range(batch):
        ids = torch.randint(3, vocab, (prompt,), generator=generator).tolist()
        yield Request(id=index, prompt=ids, max_new_tokens=length, forced_length=length)


def _decode_step(model: Any, batch: int, prompt: int) -> float:
    """Seconds per decode step with ``batch`` rollouts of ``prompt``-token prompts in flight."""
    engine = _engine(model, batch)
    for request in _requests(batch, prompt, DECODE_STEPS + 2, model.config.vocab_size):
        engine.add(request)
    engine.step()  # admission (prefill) and the first token
    start = _now(engine.device)
    for _ in range(DECODE_STEPS):
        engine.step()
    return (_now(engine.device) - start) / DECODE_STEPS


def _prefill_token(model: Any, prompt: int, decode_alone: float) -> float:
    """Seconds per prompt token: an admitting step of one rollout minus a plain decode step."""
    engine = _engine(model, 1)
    engine.add(next(_requests(1, prompt, 2, model.config.vocab_size)))
    start = _now(engine.device)
    engine.step()
    return max(0.0, (_now(engine.device) - start - decode_alone) / prompt)


def _train_lengths(scenario: Scenario) -> tuple[int, ...]:
    """Completion lengths of the synthetic batches the learner is timed on: short to past the scenario's cap."""
    cap = max(64, scenario.workload.completion_tokens.cap)
    return cap // 8, cap // 4, cap // 2, cap, 2 * cap


def _fit_train(scenario: Scenario, lengths: tuple[int, ...], times: list[float]) -> tuple[float, float, float]:
    """Least squares of t = overhead + rows·L·per_token + rows·L²·per_square over the measured points."""
    rows = scenario.batch_samples
    widths = [SHORT_PROMPT + length for length in lengths]
    design = torch.tensor([[1.0, rows * w, rows * w * w] for w in widths], dtype=torch.float64)
    observed = torch.tensor(times, dtype=torch.float64).unsqueeze(1)
    overhead, per_token, per_square = torch.linalg.lstsq(design, observed).solution.squeeze(1).tolist()
    if min(overhead, per_token, per_square) < 0:  # noise: keep the terms that stay positive, refit
        keep = [i for i, value in enumerate((overhead, per_token, per_square)) if value > 0] or [1]
        partial = torch.linalg.lstsq(design[:, keep], observed).solution.squeeze(1).tolist()
        fitted = [0.0, 0.0, 0.0]
        for index, value in zip(keep, partial, strict=True):
            fitted[index] = max(0.0, value)
        overhead, per_token, per_square = fitted
    return overhead, per_token, per_square


def _train_step(learner: Any, scenario: Scenario, completion: int) -> float:
    group = scenario.workload.samples_per_prompt
    vocab = learner.model.config.vocab_size
    groups = []
    for g in range(scenario.batch_groups):
        prompt = torch.randint(3, vocab, (SHORT_PROMPT,)).tolist()
        rollouts = [
            Rollout(
                g * group + j,
                prompt,
                torch.randint(3, vocab, (completion,)).tolist(),
                [-1.0] * completion,
                [0] * completion,
                "length",
            )
            for j in range(group)
        ]
        groups.append([(rollout, float(j % 2)) for j, rollout in enumerate(rollouts)])
    start = _now(learner.device)
    learner.train_step(groups)
    return _now(learner.device) - start
