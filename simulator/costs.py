"""How long each piece of work takes: analytic (roofline, topology and efficiencies) or measured (profile).

    decode step (one engine of tp devices, b rollouts, C context tokens in the batch)
        analytic: max(device, launches) + decode_step_s + b · decode_seq_s, with device = max(FLOPs / (peak ·
                  decode_mfu), bytes read / (bandwidth · mbu)) + layers · graph_layer_s (kernels' gaps) + all-reduces
                  and launches = layers · decode_layer_s eager (the host launches each kernel as the device runs
                  the last: the slower sets the step), 0 with CUDA graphs (one launch replays them all)
                  FLOPs = 2 · active · b + 4 · layers · heads · head_dim · C
                  bytes = min(params, active · b) · dtype + C · kv_bytes_per_token
                  all-reduces = 2 per layer of b · hidden · dtype bytes over the engine's tp devices
                                (ring, NVLink, NCCL's LL latencies; none when tp = 1)
        measured: table(b) + decode_context_token_s · C
    prefill (one engine, one group of G samples with n prompt tokens)
        analytic: 2 · active · n / (peak · mfu)  (one prefill per group: the samples share the prefix)
        measured: k · (join_s + n · prefill_token_s), k = 1 or G (``prefill_per``: group | sample)
    retirement (one engine, a decode step in which rollouts finish)
        analytic: 0                                     measured: retire_s
    orchestration (messages between the coordinator and the workers)
        analytic: none                                  measured: wake_s before an idle engine's first
                  action (a load or a prefill), train_start_s before each learner step
    learner contention (a learner step while an engine computes on the same host)
        analytic: none                                  measured: × (1 + train_contention)
                  (simulator.host applies it, with the sharing of hardware.host_cores)
    engine contention (an engine's work while the learner computes on the same host)
        analytic: none                                  measured: × (1 + engine_contention)
    time slicing (an engine while the busy threads outnumber hardware.host_cores)
        analytic: none                                  measured: share / (1 + time_slicing)
    learner step (the batch's tokens, real and padded, and how they fall on the data-parallel ranks)
        analytic: ``simulator.learner_costs``: no-grad passes at forward_mfu, the training pass at mfu,
                  train_step_s + sample_overhead_s per sample, and FSDP's collectives where compute does not hide them
        measured: (n · train_token_s + Σ L² · train_token_square_s) / training devices + train_step_overhead_s,
                  n the real tokens and L each row's length, or with ``train_padding: longest`` both counted
                  once every minibatch is padded to its longest row (what a learner without packing computes)
    weight sync (one engine)
        analytic: weights / tp over the engine's link, broadcast down a pipelined ring
                  (``topology.broadcast_s``) + sync_latency_s; the link is NVLink when a training
                  device shares the engine's node, else the network; colocated: each device gathers
                  its engine's shard from the learner's shards of its node over NVLink, and the weights
                  are loaded into the engine at reshard_bytes_per_s
        measured: weight_sync_s
    engine start (a failed engine's replacement, ``run.failures``): from its death to its first weight load
        analytic: ENGINE_PROCESS_START_S + weights per device / MODEL_LOAD_BYTES_PER_S (a guess: calibrate it)
        measured: engine_start_s (fitted from an executor run's restarts), else the analytic guess
    phase switch (colocated only; once after generation, once after training)
        analytic: learner state per device / host link (PCIe) when it does not fit beside the engine's weights
                  and KV cache, else nothing moves; with cluster.free_cache_engine the engine's weights per device
                  to the host after generation and back before it, at host_efficiency of the link; after
                  generation rollout_sample_s per sample (collating the batch for the trainer), before it switch_s
        measured: 0 (calibration times no switch)

The analytic terms (shares of the peaks, launch and fixed seconds) are ``scenarios.costs.efficiency``'s: catalogue
defaults, or a profile fitted to a framework's metrics logs. An engine spans ``devices_per_engine`` devices: their
peak and bandwidth add. For mixture-of-experts models a small batch reads only the experts it uses, hence
``min(params, active · b)`` weight bytes per decode step. Where the devices sit and what each link carries is
``simulator.topology``'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ..scenarios.costs.catalog import DeviceSpec
from ..scenarios.costs.efficiency import Efficiency
from ..scenarios.costs.profile import CostProfile
from ..scenarios.rules.workload import TrainTokens
from ..scenarios.spec.scenario import Scenario
from .learner_costs import (
    AnalyticLearner,
    LearnerLayout,
    LearnerStep,
    PhaseWork,
    learner_layout,
    learner_state_bytes,
)
from .lora import engine_launches, trained_params
from .topology import Placement, all_gather_s, all_reduce_s, broadcast_s, intra_node_link, network_link

__all__ = ["AllReduceCost", "AnalyticCosts", "CostModel", "DecodeTable", "LearnerLayout", "LearnerStep"]
__all__ += ["MeasuredCosts", "cost_model", "learner_layout"]


#: A replacement engine's process start before its model loads: Python, torch and the engine's imports and a
#: device context (seconds). An assumption, not a measurement: calibrate ``engine_start_s`` instead.
ENGINE_PROCESS_START_S = 20.0
#: How fast a replacement reads its model's weights (bytes/s): safetensors from a local NVMe disk.
MODEL_LOAD_BYTES_PER_S = 2e9


@dataclass(frozen=True)
class DecodeTable:
    """decode_step(b, C) = max(first[b] + first_per_context · C, second[b] + second_per_context · C, floor[b]).

    Two affine terms in the context and a floor (an eager engine's launches), one table per batch size: what
    the engine's inner loop evaluates once per batch change.
    """

    first: list[float]
    first_per_context: float
    second: list[float]
    second_per_context: float
    floor: list[float]

    def __call__(self, batch: int, context_tokens: float) -> float:
        return max(
            self.first[batch] + self.first_per_context * context_tokens,
            self.second[batch] + self.second_per_context * context_tokens,
            self.floor[batch],
        )


@dataclass(frozen=True)
class AllReduceCost:
    """Tensor-parallel communication in one decode step of b rollouts: per_step + per_rollout · b seconds."""

    per_step: float = 0.0
    per_rollout: float = 0.0

    def __call__(self, batch: int) -> float:
        return self.per_step + self.per_rollout * batch if batch else 0.0


class CostModel(Protocol):
    def decode_step(self, batch: int, context_tokens: float) -> float: ...
    def decode_step_table(self, max_batch: int) -> DecodeTable: ...
    def tensor_parallel(self) -> AllReduceCost: ...
    def prefill(self, prompt_tokens: int, samples: int) -> float: ...
    def retire(self) -> float: ...
    def learner_step(self, tokens: TrainTokens) -> LearnerStep: ...
    def train_step(self, tokens: TrainTokens) -> float: ...
    def weight_sync(self, engine: int) -> float: ...
    def switch_to_training(self) -> float: ...
    def switch_to_generation(self) -> float: ...
    def learner_contention(self) -> float: ...
    def engine_contention(self) -> float: ...
    def time_slicing(self) -> float: ...
    def engine_wake(self) -> float: ...
    def train_start(self) -> float: ...
    def engine_start(self) -> float: ...


class AnalyticCosts:
    """Roofline costs from datasheet figures, with the topology's transfers (see module docstring)."""

    def __init__(self, scenario: Scenario, efficiency: Efficiency | None = None) -> None:
        """``efficiency``: instead of the scenario's own (``hardware.efficiency()``), as calibration tries them."""
        model, device = scenario.model, scenario.hardware.spec
        tp = scenario.cluster.devices_per_engine
        self.efficiency = efficiency = efficiency or scenario.efficiency()
        self._engine_flops = device.peak_flops * tp * efficiency.decode_mfu
        self._prefill_flops = device.peak_flops * tp * efficiency.mfu
        self._engine_bytes_per_s = device.memory_bytes_per_s * tp * efficiency.mbu
        assert model.params is not None and model.active_params is not None  # ModelSpec fills these at validation
        assert model.layers is not None and model.heads is not None and model.head_dim is not None
        self._gaps_s, self._launch_s = decode_step_parts(scenario, efficiency)
        self._step_s = efficiency.decode_step_s
        self._seq_s = efficiency.decode_seq_s
        self._params, self._active, self._dtype = model.params, model.active_params, model.dtype_bytes
        self._attention_flops_per_context = 4 * model.layers * model.heads * model.head_dim
        self._kv_bytes_per_token = model.kv_bytes_per_token
        self._tensor_parallel = tensor_parallel_cost(scenario)
        placement = Placement.of(scenario.cluster)
        layout = learner_layout(scenario, placement)
        self._learner = AnalyticLearner(scenario, efficiency, layout)
        self._sync_s = weight_sync_seconds(scenario, placement, layout, efficiency)
        self._to_training_s, self._to_generation_s = colocated_switch_s(scenario, layout, efficiency)
        self._tables: dict[int, DecodeTable] = {}
        self._scenario = scenario

    def decode_step(self, batch: int, context_tokens: float) -> float:
        flops = 2.0 * self._active * batch + self._attention_flops_per_context * context_tokens
        weights = min(self._params, self._active * batch) * self._dtype
        read = weights + self._kv_bytes_per_token * context_tokens
        if not batch:
            return 0.0
        device = max(flops / self._engine_flops, read / self._engine_bytes_per_s) + self._gaps_s
        return max(device + self._tensor_parallel(batch), self._launch_s) + self._step_s + self._seq_s * batch

    def decode_step_table(self, max_batch: int) -> DecodeTable:
        """The same roofline, with the batch-dependent terms (all-reduces and the fixed step time included)
        precomputed for speed (one table per batch limit, shared by the engines)."""
        if max_batch in self._tables:
            return self._tables[max_batch]
        host = [self._step_s + self._seq_s * b if b else 0.0 for b in range(max_batch + 1)]
        fixed = [host[b] + self._gaps_s + self._tensor_parallel(b) if b else 0.0 for b in range(max_batch + 1)]
        compute = [2.0 * self._active * b / self._engine_flops + fixed[b] for b in range(max_batch + 1)]
        memory = [
            min(self._params, self._active * b) * self._dtype / self._engine_bytes_per_s + fixed[b]
            for b in range(max_batch + 1)
        ]
        floor = [self._launch_s + host[b] if b else 0.0 for b in range(max_batch + 1)]
        per_context = self._attention_flops_per_context / self._engine_flops
        table = DecodeTable(compute, per_context, memory, self._kv_bytes_per_token / self._engine_bytes_per_s, floor)
        self._tables[max_batch] = table
        return table

    def tensor_parallel(self) -> AllReduceCost:
        return self._tensor_parallel

    def prefill(self, prompt_tokens: int, samples: int) -> float:
        return 2.0 * self._active * prompt_tokens / self._prefill_flops

    def retire(self) -> float:
        return 0.0

    def learner_step(self, tokens: TrainTokens) -> LearnerStep:
        return self._learner.step(tokens)

    def train_step(self, tokens: TrainTokens) -> float:
        return self.learner_step(tokens).total_s

    def weight_sync(self, engine: int) -> float:
        return self._sync_s[engine]

    def switch_to_training(self) -> float:
        return self._to_training_s

    def switch_to_generation(self) -> float:
        return self._to_generation_s

    def learner_contention(self) -> float:
        return 0.0  # separate devices: none assumed

    def engine_contention(self) -> float:
        return 0.0

    def time_slicing(self) -> float:
        return 0.0

    def engine_wake(self) -> float:
        return 0.0

    def train_start(self) -> float:
        return 0.0

    def engine_start(self) -> float:
        return analytic_engine_start_s(self._scenario)


def analytic_engine_start_s(scenario: Scenario) -> float:
    """A replacement engine's start: a process start and its share of the weights read (module docstring)."""
    weights = scenario.model.weight_bytes / scenario.cluster.devices_per_engine
    return ENGINE_PROCESS_START_S + weights / MODEL_LOAD_BYTES_PER_S


def tensor_parallel_cost(scenario: Scenario) -> AllReduceCost:
    """Two ring all-reduces per layer of b · hidden · dtype bytes, over the engine's devices and NVLink."""
    model, tp = scenario.model, scenario.cluster.devices_per_engine
    link = intra_node_link(scenario.hardware.spec)
    assert model.layers is not None and model.hidden is not None  # ModelSpec fills these at validation
    per_layer = 2 * model.layers
    latency = all_reduce_s(0.0, tp, link, "ll")
    per_rollout = all_reduce_s(model.hidden * model.dtype_bytes, tp, link, "ll") - latency
    return AllReduceCost(per_layer * latency, per_layer * per_rollout)


def decode_step_parts(scenario: Scenario, efficiency: Efficiency) -> tuple[float, float]:
    """(the device's gaps between its layers' kernels, an eager host's launches of them; 0 with CUDA graphs):
    seconds per decode step, whatever the batch. LoRA adapters' layers launch more (``simulator.lora``)."""
    layers = scenario.model.layers
    assert layers is not None  # ModelSpec fills it at validation
    kernels = layers * engine_launches(scenario)
    launches = kernels * efficiency.decode_layer_s if scenario.cluster.enforce_eager else 0.0
    return kernels * efficiency.graph_layer_s, launches


def weight_sync_seconds(
    scenario: Scenario, placement: Placement, layout: LearnerLayout, efficiency: Efficiency
) -> list[float]:
    """Each engine's weight sync (module docstring): split pools broadcast, colocated ones reshard in place."""
    cluster, device = scenario.cluster, scenario.hardware.spec
    if cluster.colocated:
        return [colocated_sync_work(scenario, layout).seconds(efficiency)] * cluster.engines
    shard = scenario.model.weight_bytes / cluster.devices_per_engine
    latency = scenario.hardware.sync_latency_s
    near = [placement.shares_learner_node(engine) for engine in range(cluster.engines)]
    links = {True: intra_node_link(device), False: network_link(device)}
    receivers = {True: sum(near), False: len(near) - sum(near)}  # each link's ring carries its own engines
    return [broadcast_s(shard, receivers[side], links[side]) + latency for side in near]


def colocated_sync_work(scenario: Scenario, layout: LearnerLayout) -> PhaseWork:
    """A colocated engine's weight sync as work: its shard gathered from the learner's (NVLink), the whole model
    (with LoRA, verl's ``collect_lora_params``: the adapters alone) loaded into it at ``reshard_bytes_per_s``,
    the sync's fixed latency."""
    model, lora = scenario.model, scenario.learner.lora_rank > 0
    moved = model.weight_bytes * (trained_params(scenario) / (model.params or 1) if lora else 1.0)
    gather = all_gather_s(moved / scenario.cluster.devices_per_engine, layout.shard_ranks, layout.shard_link)
    return PhaseWork({"reshard_bytes_per_s": moved}, gather + scenario.hardware.sync_latency_s)


def colocated_switch_s(scenario: Scenario, layout: LearnerLayout, efficiency: Efficiency) -> tuple[float, float]:
    """(to training, to generation) seconds of a colocated device's phase switch (module docstring); 0 split."""
    to_training, to_generation = colocated_switch_work(scenario, layout)
    return to_training.seconds(efficiency), to_generation.seconds(efficiency)


def colocated_switch_work(scenario: Scenario, layout: LearnerLayout) -> tuple[PhaseWork, PhaseWork]:
    """(to training, to generation) of a colocated device's phase switch as work (module docstring)."""
    if not scenario.cluster.colocated:
        return PhaseWork(), PhaseWork()
    device: DeviceSpec = scenario.hardware.spec
    state = learner_state_bytes(scenario) / layout.state_share
    learner_s = state / device.host_bytes_per_s if offloads(scenario, state) else 0.0
    engine = PhaseWork()
    if scenario.cluster.free_cache_engine:  # the engine's weights per device over the host link, each way
        shard = scenario.model.weight_bytes / scenario.cluster.devices_per_engine
        engine = PhaseWork({"host_efficiency": shard / device.host_bytes_per_s})
    to_training = engine.plus(PhaseWork({"rollout_sample_s": float(scenario.batch_samples)}, learner_s))
    to_generation = engine.plus(PhaseWork({"switch_s": 1.0}, learner_s))
    return to_training, to_generation


def offloads(scenario: Scenario, state_per_device: float) -> bool:
    """Whether the learner state, the engine's weights and its KV cache overflow one device's memory."""
    tp = scenario.cluster.devices_per_engine
    weights = scenario.model.weight_bytes / tp
    kv = scenario.engine_concurrency * scenario.model.kv_bytes_per_token * scenario.expected_rollout_tokens / tp
    return state_per_device + weights + kv > scenario.hardware.spec.memory_bytes


class MeasuredCosts:
    """Costs read from a calibrated profile (``hardware.profile``); no term is added to what it measured."""

    def __init__(self, scenario: Scenario, profile: CostProfile) -> None:
        self._profile = profile
        self._per_context = profile.decode_context_token_s
        self._training_devices = scenario.training_devices
        self._tables: dict[int, DecodeTable] = {}
        measured_start = profile.engine_start_s
        self._engine_start_s = measured_start if measured_start is not None else analytic_engine_start_s(scenario)

    def decode_step(self, batch: int, context_tokens: float) -> float:
        return self._profile.decode_step(batch) + self._per_context * context_tokens

    def decode_step_table(self, max_batch: int) -> DecodeTable:
        if max_batch not in self._tables:
            measured = [self._profile.decode_step(b) for b in range(max_batch + 1)]
            nothing = [0.0] * (max_batch + 1)
            self._tables[max_batch] = DecodeTable(measured, self._per_context, nothing, 0.0, nothing)
        return self._tables[max_batch]

    def tensor_parallel(self) -> AllReduceCost:
        return AllReduceCost()  # inside the measured decode steps, not told apart

    def prefill(self, prompt_tokens: int, samples: int) -> float:
        profile = self._profile
        prefills = samples if profile.prefill_per == "sample" else 1
        return prefills * (profile.join_s + prompt_tokens * profile.prefill_token_s)

    def retire(self) -> float:
        return self._profile.retire_s

    def learner_step(self, tokens: TrainTokens) -> LearnerStep:
        profile = self._profile
        padded = profile.train_padding == "longest"
        linear = (tokens.padded if padded else tokens.actual) * profile.train_token_s
        square = (tokens.padded_square if padded else tokens.actual_square) * profile.train_token_square_s
        return LearnerStep(0.0, (linear + square) / self._training_devices, profile.train_step_overhead_s)

    def train_step(self, tokens: TrainTokens) -> float:
        return self.learner_step(tokens).total_s

    def weight_sync(self, engine: int) -> float:
        return self._profile.weight_sync_s

    def switch_to_training(self) -> float:
        return 0.0

    def switch_to_generation(self) -> float:
        return 0.0

    def learner_contention(self) -> float:
        return self._profile.train_contention

    def engine_contention(self) -> float:
        return self._profile.engine_contention

    def time_slicing(self) -> float:
        return self._profile.time_slicing

    def engine_wake(self) -> float:
        return self._profile.wake_s

    def train_start(self) -> float:
        return self._profile.train_start_s

    def engine_start(self) -> float:
        return self._engine_start_s


def cost_model(scenario: Scenario) -> CostModel:
    """The measured profile when the scenario names one, else the roofline."""
    profile = scenario.hardware.cost_profile()
    return MeasuredCosts(scenario, profile) if profile is not None else AnalyticCosts(scenario)
