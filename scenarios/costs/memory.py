"""Device memory of the two pools: does a plan fit before anything is simulated or run?

    training pool, per device   weights + gradients + optimizer   sharded per ``learner.sharding``,
                                                                  minus what is offloaded to CPU
                                + activations of one micro-batch  (Korthikanti et al. 2022)
                                + logits of one micro-batch       (fp32, tokens × vocab)
    generation pool, per device (weights + KV cache of the engine's rollouts) / devices_per_engine

Model states follow the accounting of ZeRO (Rajbhandari et al. 2020, "ZeRO: Memory
Optimizations Toward Training Trillion Parameter Models"): weights in ``param_dtype``,
gradients in ``grad_dtype``, and "optimizer" = the fp32 master copy (``master_weights``)
plus Adam's two fp32 moments, which with bf16 weights and fp32 gradients is
2 + 4 + (4 + 8) = 18 bytes per parameter. What each sharding divides by the training
devices:

    fsdp, zero3   weights, gradients, optimizer
    zero2                  gradients, optimizer
    zero1                             optimizer
    ddp           nothing

Activations per token of the micro-batch, in bytes, for ``L`` layers of width ``h``
(Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
Models", eq. 1 and table 2, with FlashAttention so that the 5·a·s/h attention-score
term is never materialized; their constants are for 16-bit activations and scale with
``param_dtype``'s bytes / 2):

    without checkpointing   34 · h · L
    with checkpointing      2 · h · L  +  34 · h    (each layer's input kept; one layer
                                                     recomputed at a time in backward)

A micro-batch holds ``learner.micro_batch_tokens`` tokens, or one whole rollout when the
longest possible rollout (prompt and completion caps) is longer: a sequence is not split.

An engine holds its weights and the KV cache of ``engine_concurrency`` rollouts of the
expected length, split over its ``devices_per_engine``, in ``cluster.gpu_memory_utilization``
of each device's memory (vLLM's setting of that name, 0.9 by default), and never more
rollouts than vLLM batches by default (``engine_max_batch``: its ``max_num_seqs``, 1,024 on
devices of 70 GiB or more that are not A100s, else 256); ``rollouts_that_fit`` is the one
place that decides how many rollouts that is.

Colocated devices train and generate in turn; each phase is checked on its own, the
other side's memory assumed released meanwhile (verl's sleep mode and offload between
phases). Left out: CUDA context and allocator fragmentation, communication buckets, the
all-gathered layers of FSDP in flight, a reference model or critic on the same devices.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..files.errors import ScenarioError
from .catalog import DTYPE_BYTES

if TYPE_CHECKING:
    from ..spec.scenario import Scenario
    from ..spec.sections import ModelSpec

GB = 1e9
GIB = 2**30
#: Most rollouts one engine batches, whatever memory allows: vLLM's default ``max_num_seqs`` (V1 engine,
#: ``EngineArgs.get_batch_defaults``): 1,024 for the offline engine on a device of at least 70 GiB whose
#: name does not contain "a100", else 256 (``engine_max_batch``).
ENGINE_MAX_BATCH = 256
LARGE_DEVICE_MAX_BATCH = 1024
LARGE_DEVICE_BYTES = 70 * GIB

MASTER_BYTES = 4  # fp32 master copy of each weight
OPTIMIZER_STATE_BYTES = {"adam": 2 * 4, "sgd": 0}  # Adam: two fp32 moments; plain SGD: none
LAYER_ACTIVATION_BYTES = 34  # × hidden, per token and layer, 16-bit activations (Korthikanti et al.)
LAYER_INPUT_BYTES = 2  # × hidden, per token and layer: a checkpointed layer keeps its 16-bit input
ACTIVATION_REFERENCE_BYTES = 2  # the activation width those two constants assume
LOGIT_BYTES = 4  # the fp32 logits the log-probabilities are computed from

SHARDED_PARTS: dict[str, frozenset[str]] = {
    "fsdp": frozenset({"weights", "gradients", "optimizer"}),
    "zero3": frozenset({"weights", "gradients", "optimizer"}),
    "zero2": frozenset({"gradients", "optimizer"}),
    "zero1": frozenset({"optimizer"}),
    "ddp": frozenset(),
}


@dataclass(frozen=True)
class PoolMemory:
    """Bytes one device of a pool needs, by what holds them, against what it may use."""

    pool: str  # "training pool" or "generation pool"
    parts: dict[str, float]  # bytes per device, in the order they are printed
    available: float  # bytes per device the pool may use
    capacity: str  # how ``available`` came about, e.g. "80 GB (h100)"
    hint: str  # what would make it fit
    detail: str = ""  # printed after the parts, e.g. which rollouts the KV cache holds

    @property
    def needed(self) -> float:
        return sum(self.parts.values())

    @property
    def fits(self) -> bool:
        return self.needed <= self.available

    def reason(self) -> str:
        """One line: the pool, what it needs against what it has, the parts, and the way out."""
        parts = ", ".join(f"{name} {_gb(size)}" for name, size in self.parts.items())
        return (
            f"{self.pool}: needs {_gb(self.needed)} GB per device, has {self.capacity}: "
            f"{parts}{self.detail} — {self.hint}"
        )


# ── training pool ───────────────────────────────────────────────────────────────


def model_state_bytes(
    params: int, param_dtype: str, master_weights: str, grad_dtype: str, optimizer: str
) -> dict[str, float]:
    """Weights, gradients and optimizer (master copy and states) of the whole model, unsharded."""
    master = MASTER_BYTES if master_weights == "fp32" and param_dtype != "fp32" else 0
    return {
        "weights": float(params * DTYPE_BYTES[param_dtype]),
        "gradients": float(params * DTYPE_BYTES[grad_dtype]),
        "optimizer": float(params * (master + OPTIMIZER_STATE_BYTES[optimizer])),
    }


def adapter_params(model: ModelSpec, rank: int) -> float:
    """Weights of rank-``rank`` LoRA adapters on every linear layer of each block (q, k, v, o, gate, up, down):
    ``rank · (inputs + outputs)`` per layer adapted. The MLP's width is what the block's weights leave after
    attention's, over 3 · hidden (a gated MLP), with the embedding counted once (tied)."""
    if rank <= 0:
        return 0.0
    assert model.params is not None and model.layers is not None and model.hidden is not None  # ModelSpec fills
    assert model.heads is not None and model.kv_heads is not None and model.head_dim is not None
    hidden, query, key = model.hidden, model.heads * model.head_dim, model.kv_heads * model.head_dim
    attention = 2 * hidden * query + 2 * hidden * key
    block = (model.params - (model.vocab or 0) * hidden) / model.layers
    width = max(0.0, (block - attention) / (3 * hidden))
    per_layer = (hidden + query) * 2 + (hidden + key) * 2 + 3 * (hidden + width)
    return float(rank * model.layers * per_layer)


def per_device_states(
    states: dict[str, float], sharding: str, devices: int, offloaded: frozenset[str] = frozenset()
) -> dict[str, float]:
    """Each model state on one of ``devices``: divided where ``sharding`` shards it, 0 where offloaded."""
    sharded = SHARDED_PARTS[sharding]
    return {
        name: 0.0 if name in offloaded else size / devices if name in sharded else size for name, size in states.items()
    }


def activation_bytes(tokens: int, layers: int, hidden: int, dtype_bytes: int, checkpointing: bool) -> float:
    """Activations of ``tokens`` tokens kept for backward (Korthikanti et al. 2022, FlashAttention)."""
    if checkpointing:
        per_token = LAYER_INPUT_BYTES * hidden * layers + LAYER_ACTIVATION_BYTES * hidden
    else:
        per_token = LAYER_ACTIVATION_BYTES * hidden * layers
    return float(tokens * per_token * dtype_bytes / ACTIVATION_REFERENCE_BYTES)


def logits_bytes(tokens: int, vocab: int | None) -> float:
    """The fp32 logits of ``tokens`` tokens; 0 when the vocabulary is unknown."""
    return float(tokens * (vocab or 0) * LOGIT_BYTES)


def micro_batch_tokens(scenario: Scenario) -> int:
    """Tokens of one learner micro-batch: the budget, or the longest rollout if that is longer."""
    longest = scenario.workload.prompt_tokens.cap + scenario.workload.completion_tokens.cap
    return max(scenario.learner.micro_batch_tokens, longest)


def param_dtype(scenario: Scenario) -> str:
    """The learner's weight dtype: ``learner.param_dtype``, else the model's."""
    return scenario.learner.param_dtype or scenario.model.dtype


def learner_memory(scenario: Scenario) -> PoolMemory:
    """What one training device holds at the peak of a step."""
    learner, model, device = scenario.learner, scenario.model, scenario.hardware.spec
    dtype = param_dtype(scenario)
    # ModelSpec fills these at validation
    assert model.params is not None and model.layers is not None and model.hidden is not None
    states = model_state_bytes(model.params, dtype, learner.master_weights, learner.grad_dtype, learner.optimizer)
    if learner.lora_rank:  # the model's weights frozen: gradients and optimizer states of the adapters alone
        adapters = model_state_bytes(
            int(adapter_params(model, learner.lora_rank)),
            dtype,
            learner.master_weights,
            learner.grad_dtype,
            learner.optimizer,
        )
        states = {**states, "gradients": adapters["gradients"], "optimizer": adapters["optimizer"]}
    offloaded = frozenset(
        name for name, on in (("optimizer", learner.optimizer_offload), ("weights", learner.param_offload)) if on
    )
    tokens = micro_batch_tokens(scenario)
    parts = per_device_states(states, learner.sharding, scenario.training_devices, offloaded)
    parts["activations"] = activation_bytes(
        tokens, model.layers, model.hidden, DTYPE_BYTES[dtype], learner.activation_checkpointing
    )
    parts["logits"] = logits_bytes(tokens, model.vocab)
    capacity = f"{_gb(device.memory_bytes)} GB ({scenario.hardware.device_name})"
    return PoolMemory("training pool", parts, device.memory_bytes, capacity, _learner_hint(scenario, parts))


def _learner_hint(scenario: Scenario, parts: dict[str, float]) -> str:
    learner = scenario.learner
    ways = ["add training devices" if learner.sharding != "ddp" else "set learner.sharding=fsdp"]
    if not learner.optimizer_offload and parts["optimizer"] > 0:
        ways.append("set learner.optimizer_offload")
    elif not learner.param_offload:
        ways.append("set learner.param_offload")
    if not learner.activation_checkpointing:
        ways.append("set learner.activation_checkpointing")
    return ", ".join(ways[:-1]) + f" or {ways[-1]}" if len(ways) > 1 else ways[0]


# ── generation pool ─────────────────────────────────────────────────────────────


def engine_max_batch(device: str, device_memory: float) -> int:
    """vLLM's default ``max_num_seqs`` on this device (its catalogue name and memory): see ENGINE_MAX_BATCH."""
    large = device_memory >= LARGE_DEVICE_BYTES and "a100" not in device
    return LARGE_DEVICE_MAX_BATCH if large else ENGINE_MAX_BATCH


def engine_budget_bytes(device_memory: float, devices_per_engine: int, utilization: float) -> float:
    """Memory one engine may fill: ``utilization`` (vLLM's gpu_memory_utilization) of each of its devices."""
    return device_memory * devices_per_engine * utilization


def rollouts_that_fit(
    weight_bytes: float,
    kv_bytes_per_token: float,
    device_memory: float,
    devices_per_engine: int,
    rollout_tokens: float,
    utilization: float,
    limit: int = ENGINE_MAX_BATCH,
) -> int:
    """Rollouts whose KV cache fits in one engine next to its weights in ``utilization`` of its devices' memory,
    at most ``limit`` (vLLM's max_num_seqs)."""
    free = engine_budget_bytes(device_memory, devices_per_engine, utilization) - weight_bytes
    if free <= 0:
        return 0
    return min(limit, math.floor(free / (kv_bytes_per_token * rollout_tokens)))


def engine_memory(scenario: Scenario) -> PoolMemory:
    """What one device of a generation engine holds: its share of the weights and of the KV cache."""
    model, device, engine_devices = scenario.model, scenario.hardware.spec, scenario.cluster.devices_per_engine
    rollouts, tokens = scenario.engine_concurrency, scenario.expected_rollout_tokens
    parts = {
        "weights": model.weight_bytes / engine_devices,
        "KV cache": rollouts * tokens * model.kv_bytes_per_token / engine_devices,
    }
    share = scenario.cluster.gpu_memory_utilization
    capacity = (
        f"{_gb(device.memory_bytes * share)} GB ({share:.0%} of {_gb(device.memory_bytes)} GB, "
        f"{scenario.hardware.device_name})"
    )
    split = f", split over {engine_devices} devices" if engine_devices > 1 else ""
    detail = f" for {rollouts:,} rollouts of {tokens:,.0f} tokens{split}"
    hint = "raise cluster.devices_per_engine"
    if scenario.schedule.max_concurrency is not None:
        hint = "lower schedule.max_concurrency or " + hint
    available = engine_budget_bytes(device.memory_bytes, 1, share)
    return PoolMemory("generation pool", parts, available, capacity, hint, detail)


# ── the check ───────────────────────────────────────────────────────────────────


def pools(scenario: Scenario) -> tuple[PoolMemory, PoolMemory]:
    """The training pool's device, then the generation pool's."""
    return learner_memory(scenario), engine_memory(scenario)


def misfit(scenario: Scenario) -> PoolMemory | None:
    """The first pool whose devices cannot hold their share, or None when the plan fits."""
    return next((pool for pool in pools(scenario) if not pool.fits), None)


def memory_problem(scenario: Scenario) -> str:
    """Why the plan does not fit in device memory, in one line; empty when it fits."""
    pool = misfit(scenario)
    return pool.reason() if pool is not None else ""


def check_memory(scenario: Scenario) -> None:
    """Raise ScenarioError naming the pool and its figures when the plan does not fit."""
    problem = memory_problem(scenario)
    if problem:
        raise ScenarioError(problem)


def _gb(size: float) -> str:
    """Bytes as GB with one decimal, without a trailing .0: 80, 126.9."""
    return f"{round(size / GB, 1):g}"
