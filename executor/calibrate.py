"""Calibration: measure the executor's own costs and write the profile the simulator reads.

    engine (ContinuousBatchingEngine) ──► decode step at batch b, per context token, prefill per token
    learner (Learner.train_step)      ──► per step, per padded token, per padded row·length² (attention),
                                          least squares over five row lengths
    WeightLayout + engine             ──► one weight synchronization (flatten, copy, load)
                                            │ median of repeats
                                            ▼
                                   profiles/<name>.yaml  (hardware.profile)

Every figure is the median of ``repeats`` measurements; ``Calibration.noise``
keeps, per figure, the spread (max − min) / median so the command can say how
noisy the machine was.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from asyncrl.executor.engine import ContinuousBatchingEngine, Request, Rollout
from asyncrl.scenarios.loading import ScenarioError
from asyncrl.scenarios.profile import CostProfile, running_maximum
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
    from asyncrl.executor.learner import Learner
    from asyncrl.executor.work import load_scenario_task, policy_model

    torch.set_num_threads(scenario.cluster.devices_per_engine)
    task = load_scenario_task(scenario)
    model = policy_model(scenario, task).to(device).eval()
    noise: dict[str, float] = {}
    tick = progress or (lambda label: None)

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
    prefill = _median(noise, "prefill_token_s", repeats, lambda: _prefill_token(model, LONG_PROMPT, decode[1]))

    torch.set_num_threads(scenario.training_devices)
    pad = task.tokenizer.pad_token_id if task else 0
    learner = Learner.from_scenario(scenario, policy_model(scenario, task), pad, device=device)
    tick("learner step")
    lengths = _train_lengths(scenario)
    times = [
        _median(noise, f"train_step_s[{n}]", repeats, lambda n=n: _train_step(learner, scenario, n)) for n in lengths
    ]
    overhead, per_token, per_square = _fit_train(scenario, lengths, times)

    tick("weight sync")
    sync = _median(noise, "weight_sync_s", repeats, lambda: _weight_sync(model))
    profile = CostProfile(
        decode_step_s=running_maximum(decode),  # timing noise can make a larger batch look faster
        decode_context_token_s=per_context,
        prefill_token_s=prefill,
        train_token_s=per_token * scenario.training_devices,
        train_token_square_s=per_square * scenario.training_devices,
        train_step_overhead_s=overhead,
        train_padding="longest",  # the executor's learner pads each minibatch to its longest row
        weight_sync_s=sync,
    )
    return Calibration(profile, noise)


def _median(noise: dict[str, float], name: str, repeats: int, measure: Callable[[], float]) -> float:
    measure = _synchronized(measure)
    measure()  # warm-up: allocations, lazy initialisation
    values = [measure() for _ in range(repeats)]
    middle = statistics.median(values)
    noise[name] = (max(values) - min(values)) / middle if middle > 0 else 0.0
    return middle


def _synchronized(measure: Callable[[], float]) -> Callable[[], float]:
    """On CUDA, wait for queued kernels before and after, so a measurement times the work itself."""
    if not torch.cuda.is_available():
        return measure

    def timed() -> float:
        torch.cuda.synchronize()
        return measure()

    return timed


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
    start = time.perf_counter()
    for _ in range(DECODE_STEPS):
        engine.step()
    return (time.perf_counter() - start) / DECODE_STEPS


def _prefill_token(model: Any, prompt: int, decode_alone: float) -> float:
    """Seconds per prompt token: an admitting step of one rollout minus a plain decode step."""
    engine = _engine(model, 1)
    engine.add(next(_requests(1, prompt, 2, model.config.vocab_size)))
    start = time.perf_counter()
    engine.step()
    return max(0.0, (time.perf_counter() - start - decode_alone) / prompt)


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
    start = time.perf_counter()
    learner.train_step(groups)
    return time.perf_counter() - start


def _weight_sync(model: Any) -> float:
    """One synchronization as the runtime does it, less the wire: flatten, copy the bytes, load into an engine.

    On one machine the gloo transfer of a small model is a memory copy; the
    runtime's own sync spans (events.parquet) show the full cost, wire included.
    """
    from asyncrl.executor.weights import WeightLayout

    layout = WeightLayout.of(model.state_dict())
    engine = _engine(model, 1)
    start = time.perf_counter()
    flat = layout.flatten(model.state_dict())
    received = flat.clone()  # the transfer; in-process, a copy of the same bytes
    engine.load_weights(layout.unflatten(received), 1)
    return time.perf_counter() - start
