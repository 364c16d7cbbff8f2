"""Weight sync timed on the path a run takes, for calibration: flatten, torch.distributed, load_weights.

    this process (rank 0, the learner's place)             a spawned receiver (rank 1, an engine's place)
    learner.model.state_dict() ──flatten, cast──► flat ──send──► buffer ──unflatten──► engine.load_weights
                                  ◄───────────────────── ack (after the load, synchronized) ──┘

Both ends sit where a one-engine run puts them (``executor.processes.placement``): on two GPUs, NCCL between them; on one GPU
or on CPU, gloo through host memory. A measurement runs from the flatten to the ack, so it covers what an engine
waits for when it loads a new version (the learner's flatten included), with the clock read after
``torch.cuda.synchronize``. The receiver's model is built empty (no random initialisation): only its layout matters,
its values are overwritten by the first load.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from multiprocessing.queues import Queue
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from ..scenarios.spec.scenario import Scenario

if TYPE_CHECKING:
    from torch import nn

RECEIVER_RANK = 1
JOIN_TIMEOUT_S = 300.0


def time_weight_syncs(scenario: Scenario, learner_model: nn.Module, device: str, rounds: int) -> list[float]:
    """Seconds of ``rounds`` weight syncs of ``learner_model`` to a receiver process, one engine's way."""
    from .generation.precision import executor_dtype
    from .processes.distributed import join_process_group, leave_process_group, rendezvous_address
    from .processes.placement import place
    from .processes.weights import WeightLayout, send_weights, staging_device

    placement = place(device, torch.cuda.device_count() if device == "cuda" else 0, engines=1)
    staging = staging_device(placement.backend, placement.learner)
    layout = WeightLayout.of(learner_model.state_dict(), executor_dtype(scenario.model.dtype))
    context = mp.get_context("spawn")
    failures = context.Queue()
    rendezvous = rendezvous_address("127.0.0.1")
    args = (scenario, placement.engines[0], placement.backend, rendezvous, rounds, failures)
    receiver = context.Process(target=_receiver_main, args=args, daemon=True, name="asyncrl-sync-probe")
    receiver.start()
    try:
        join_process_group(placement.backend, rendezvous, 2, lambda: _check(receiver, failures), JOIN_TIMEOUT_S)
        ack = torch.zeros(1, device=staging)
        times = []
        for _ in range(rounds):
            start = _now(device)
            send_weights(layout.flatten(learner_model.state_dict(), staging), RECEIVER_RANK).wait()
            dist.recv(ack, src=RECEIVER_RANK)
            times.append(_now(device) - start)
        return times
    finally:
        leave_process_group()
        receiver.join(timeout=30)
        if receiver.is_alive():
            receiver.terminate()


def _now(device: str) -> float:
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter()


def _check(receiver: mp.process.BaseProcess, failures: Queue) -> None:
    if receiver.exitcode is not None:
        detail = failures.get(timeout=1) if not failures.empty() else f"exit code {receiver.exitcode}"
        raise RuntimeError(f"the weight-sync receiver failed: {detail}")


def _receiver_main(
    scenario: Scenario, device: str, backend: str, rendezvous: str, rounds: int, failures: Queue
) -> None:
    """The engine's end: receive, unflatten, load, acknowledge, ``rounds`` times."""
    import traceback

    try:
        _receive(scenario, device, backend, rendezvous, rounds)
    except BaseException:
        failures.put(traceback.format_exc())
        raise SystemExit(1) from None


def _receive(scenario: Scenario, device: str, backend: str, rendezvous: str, rounds: int) -> None:
    from .generation.engine import ContinuousBatchingEngine
    from .processes.placement import use_device
    from .processes.weights import WeightLayout, receive_weights, staging_device
    from .tasks.work import empty_engine_model, load_scenario_task

    torch.set_num_threads(scenario.cluster.devices_per_engine if device == "cpu" else 1)
    use_device(device)
    dist.init_process_group(backend, init_method=rendezvous, rank=RECEIVER_RANK, world_size=2)
    model = empty_engine_model(scenario, load_scenario_task(scenario), device)
    engine = ContinuousBatchingEngine(model, max_batch=1, eos_token_id=None, pad_token_id=0, device=device)
    layout = WeightLayout.of(model.state_dict())
    buffer = layout.empty(staging_device(backend, device))
    ack = torch.ones(1, device=staging_device(backend, device))
    for version in range(rounds):
        engine.load_weights(layout.unflatten(receive_weights(buffer)), version)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        dist.send(ack, dst=0)
    dist.destroy_process_group()
