"""Calibration: measure the executor's own costs and write the profile the simulator reads.

    engine (ContinuousBatchingEngine) ──► decode step at batch b, per context token, prefill per token
    learner (Learner.train_step)      ──► per step, per padded token, per padded row·length² (attention),
                                          least squares over five row lengths
    executor.sync_probe               ──► one weight synchronization as a run does it: flatten, send over
                                          torch.distributed to a receiver process, load_weights there
                                            │ median of repeats (interleaved, but the sync's, taken after)
                                            ▼
                                   profiles/<name>.yaml  (hardware.profile)

The engine runs in ``model.dtype`` and the learner as a run's does (fp32 weights, bf16 autocast for bf16), on
``device``. On CUDA every timed region starts and ends with ``torch.cuda.synchronize``, so a figure is the work's,
not the time to queue it. Every figure is the median of ``repeats`` measurements; ``Calibration.noise``
keeps, per figure, the spread (max − min) / median so the command can say how
noisy the machine was.

The repeats are interleaved (``interleaved``): one warm-up round measures
every figure once and is thrown away, then each round measures every figure
once more, round after round. Timed back to back, all repeats of one figure
would fall in the same few seconds: a burst of load from another process
(on a shared two-core machine, the usual case) would shift that one figure
and none of the others, and the profile would be skewed in a way its noise
figure does not show. Round-robin spreads every figure over the whole
calibration, so a burst costs each figure at most one or two of its repeats,
which the median discards.
"""

from __future__ import annotations

import copy
import functools
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from ..scenarios.costs.profile import CostProfile, running_maximum
from ..scenarios.spec.loading import ScenarioError
from ..scenarios.spec.scenario import Scenario
from .generation.engine import ContinuousBatchingEngine, Request, Rollout

DECODE_STEPS = 16  # decode steps timed per measurement
SHORT_PROMPT, LONG_PROMPT = 16, 128


@dataclass
class Calibration:
    profile: CostProfile
    noise: dict[str, float] = field(default_factory=dict)  # figure -> (max - min) / median over repeats


def check_device(device: str) -> None:
    """Raise ScenarioError when ``device`` is cuda and torch sees no GPU."""
    if device == "cuda" and not torch.cuda.is_available():
        raise ScenarioError("device: cuda asked for, but torch sees no GPU")


def calibrate(
    scenario: Scenario,
    batch_sizes: list[int],
    repeats: int = 5,
    progress: Callable[[str], object] | None = None,  # its result is ignored
    device: str = "cpu",
) -> Calibration:
    """Measure on the scenario's model and learner settings (the executor's code paths), on ``device``.

    ``progress`` is called once per round (the warm-up, then each of the ``repeats``), then for the sync."""
    from .generation.precision import executor_dtype
    from .processes.placement import use_device
    from .sync_probe import time_weight_syncs
    from .tasks.work import load_scenario_task, policy_model

    use_device("cuda:0" if device == "cuda" else device)
    task = load_scenario_task(scenario)
    policy = policy_model(scenario, task)  # built once: the learner's fp32 copy, and the engine's, cast
    model = copy.deepcopy(policy).to(device, executor_dtype(scenario.model.dtype)).eval()
    learner = _learner(scenario, policy, task, device)
    wide = batch_sizes[len(batch_sizes) // 2]
    lengths = _train_lengths(scenario)
    engine_threads, learner_threads = scenario.cluster.devices_per_engine, scenario.training_devices

    measures: dict[str, Measure] = {}
    for batch in batch_sizes:
        measures[f"decode_step_s[{batch}]"] = _on_threads(
            engine_threads, functools.partial(_decode_step, model, batch, SHORT_PROMPT)
        )
    measures["decode_step_s[long context]"] = _on_threads(
        engine_threads, lambda: _decode_step(model, wide, LONG_PROMPT)
    )
    measures["prefill_step_s"] = _on_threads(engine_threads, lambda: _admitting_step(model, LONG_PROMPT))
    for n in lengths:
        measures[f"train_step_s[{n}]"] = _on_threads(
            learner_threads, functools.partial(_train_step, learner, scenario, n)
        )
    values = interleaved(measures, repeats, progress)
    # The sync runs a receiver process: timed apart, after the rounds (its first warms up).
    values["weight_sync_s"] = time_weight_syncs(scenario, learner.model, device, rounds=repeats + 1)[1:]
    if progress is not None:
        progress("weight sync")

    # The admitting step decodes one token too: what it took beyond a decode step at batch 1 is prefill.
    decode_alone = statistics.median(values[f"decode_step_s[{batch_sizes[0]}]"])
    values["prefill_token_s"] = [max(0.0, (v - decode_alone) / LONG_PROMPT) for v in values.pop("prefill_step_s")]
    noise = {name: _spread(series) for name, series in values.items()}
    median = {name: statistics.median(series) for name, series in values.items()}
    decode = {batch: median[f"decode_step_s[{batch}]"] for batch in batch_sizes}
    long_context = median["decode_step_s[long context]"]
    per_context = max(0.0, (long_context - decode[wide]) / (wide * (LONG_PROMPT - SHORT_PROMPT)))
    times = [median[f"train_step_s[{n}]"] for n in lengths]
    overhead, per_token, per_square = _fit_train(scenario, lengths, times)
    profile = CostProfile(
        decode_step_s=running_maximum(decode),  # timing noise can make a larger batch look faster
        decode_context_token_s=per_context,
        prefill_token_s=median["prefill_token_s"],
        prefill_per="sample",  # the executor prefills each sample's prompt (no prefix cache)
        train_token_s=per_token * scenario.training_devices,
        train_token_square_s=per_square * scenario.training_devices,
        train_step_overhead_s=overhead,
        train_padding="longest",  # the executor's learner pads each minibatch to its longest row
        weight_sync_s=median["weight_sync_s"],
    )
    return Calibration(profile, noise)


def _learner(scenario: Scenario, policy: Any, task: Any, device: str) -> Any:
    from .learning.learner import Learner

    torch.set_num_threads(scenario.training_devices)
    pad = task.tokenizer.pad_token_id if task else 0
    return Learner.from_scenario(scenario, policy, pad, device=device)


Measure = Callable[[], float]


def interleaved(
    measures: dict[str, Measure], repeats: int, progress: Callable[[str], object] | None = None
) -> dict[str, list[float]]:
    """Every figure's ``repeats`` measurements, taken round-robin after one warm-up round that is discarded.

    Round r measures each figure once, in the order given, before round r + 1 starts (see the module
    docstring for why)."""
    tick = progress or (lambda label: None)
    for measure in measures.values():  # warm-up: allocations, lazy initialisation, caches
        measure()
    tick("warm-up")
    values: dict[str, list[float]] = {name: [] for name in measures}
    for round_index in range(repeats):
        for name, measure in measures.items():
            values[name].append(measure())
        tick(f"round {round_index + 1}/{repeats}")
    return values


def _spread(values: list[float]) -> float:
    """(max − min) / median: how far apart the repeats of one figure fell."""
    middle = statistics.median(values)
    return (max(values) - min(values)) / middle if middle > 0 else 0.0


def _on_threads(threads: int, measure: Measure) -> Measure:
    """``measure`` with torch's intra-op threads set to the budget of the process it stands for."""

    def timed() -> float:
        torch.set_num_threads(threads)
        return measure()

    return timed


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


def _admitting_step(model: Any, prompt: int) -> float:
    """Seconds of an engine step that admits one rollout of ``prompt`` tokens (its prefill) and decodes it once."""
    engine = _engine(model, 1)
    engine.add(next(_requests(1, prompt, 2, model.config.vocab_size)))
    start = _now(engine.device)
    engine.step()
    return _now(engine.device) - start


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
