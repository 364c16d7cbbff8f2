"""The learner's analytic step: passes over the batch at their utilizations, and FSDP's collectives.

    TrainTokens (T tokens, Σ L² over rows, imbalance across data-parallel ranks)
        ─► no-grad passes    P · (2 · active · T + a · Σ L²) · forward_imbalance / (D · peak · forward_mfu)
        ─► training pass     ((6 + 2r) · active · T + (3 + r) · a · Σ L²) · update_imbalance / (D · peak · mfu)
        ─► fixed             train_step_s + sample_overhead_s · samples
        ─► communication     FSDP's collectives, where the passes do not hide them

``P`` is ``workload.forward_passes`` (old log-probs, reference, values, the tis and decoupled
corrections' π_old), ``r`` 1 with activation checkpointing (the forward is recomputed
in backward) else 0, ``D`` the training devices. Attention adds ``a · L²`` per row of
length ``L`` on top of the weights' FLOPs: ``a = 2 · layers · heads · head_dim`` for the
causal QKᵀ and AV products of a forward pass (a backward costs two forwards).

Data-parallel ranks: ``D / learner.model_parallel`` (the devices that share one copy
of a sequence: Ulysses sequence parallelism, Megatron's tensor × pipeline × context
parallelism). The rows are dealt to them as ``scenarios.workload.rank_loads`` does, and
each minibatch waits for its busiest rank.

FSDP (``LearnerLayout``): weights and their gradients are sharded within shard groups of
``learner.shard_devices`` devices (verl's ``fsdp_size``; by default a node when its devices
hold the learner state, else all of them); the groups replicate each other (HSDP) and
all-reduce their gradient shards. Per learner step: an all-gather of the weights for every
forward and backward pass, one reduce-scatter of the gradients per update, one all-reduce
across the replicas per update; each layer by layer, as FSDP issues them.
"""

from __future__ import annotations

from dataclasses import dataclass

from asyncrl.scenarios.efficiency import Efficiency
from asyncrl.scenarios.scenario import Scenario
from asyncrl.scenarios.workload import TrainTokens, forward_passes, start_of_step_minibatches
from asyncrl.simulator.topology import Link, Placement, all_gather_s, all_reduce_s, intra_node_link, network_link

# Bytes the learner keeps per weight between steps, besides what the engine holds. scenarios/memory.py
# counts the learner's whole memory; these are the three terms the colocated phase switch moves:
MASTER_WEIGHT_BYTES = 4  # an fp32 master copy of each weight
OPTIMIZER_BYTES = 8  # Adam's two fp32 moments
# ... and one gradient of the model's dtype (model.dtype_bytes) per weight.


@dataclass(frozen=True)
class LearnerStep:
    """One learner step's seconds: its passes, its fixed costs, and the communication they did not hide."""

    forward_s: float  # no-grad passes (old log-probs, reference, values)
    update_s: float  # the training pass (forward, backward, recompute)
    overhead_s: float  # fixed per step
    communication_s: float = 0.0

    @property
    def compute_s(self) -> float:
        return self.forward_s + self.update_s + self.overhead_s

    @property
    def total_s(self) -> float:
        return self.compute_s + self.communication_s


@dataclass(frozen=True)
class LearnerLayout:
    """How the learner shards its state: FSDP within shard groups, the groups replicas of each other (HSDP)."""

    shard_ranks: int  # devices of the largest shard group (its collectives take longest)
    shard_link: Link
    state_share: int  # devices of the smallest shard group (its devices hold the most state)
    replicas: int  # shard groups, all-reducing their gradient shards
    replica_link: Link


def learner_state_bytes(scenario: Scenario) -> float:
    """Master weights, optimizer moments and gradients of the whole model (bytes)."""
    model = scenario.model
    assert model.params is not None  # ModelSpec fills these at validation
    return float(model.params * (MASTER_WEIGHT_BYTES + OPTIMIZER_BYTES + model.dtype_bytes))


def learner_layout(scenario: Scenario, placement: Placement) -> LearnerLayout:
    """Shard groups of ``learner.shard_devices``; by default a node's devices when the smallest node group
    holds the state (HSDP), else every training device."""
    device = scenario.hardware.spec
    nvlink, network = intra_node_link(device), network_link(device)
    devices, per_node = scenario.training_devices, scenario.cluster.devices_per_node
    group = scenario.learner.shard_devices
    if group is not None:
        group = min(group, devices)
        link = nvlink if _within_nodes(group, placement, per_node) else network
        replica_link = network if placement.training_nodes > 1 else nvlink
        return LearnerLayout(group, link, group, max(1, devices // group), replica_link)
    smallest = placement.emptiest_training_node
    if placement.training_nodes == 1 or learner_state_bytes(scenario) / smallest <= device.memory_bytes:
        return LearnerLayout(placement.fullest_training_node, nvlink, smallest, placement.training_nodes, network)
    return LearnerLayout(devices, network, devices, 1, network)


def _within_nodes(group: int, placement: Placement, per_node: int) -> bool:
    """Whether shard groups of ``group`` consecutive training devices each stay inside one node."""
    return placement.training_nodes == 1 or (group <= per_node and per_node % group == 0)


def learner_communication_s(scenario: Scenario, layout: LearnerLayout) -> float:
    """FSDP's collectives in one learner step, layer by layer (module docstring)."""
    model, algorithm = scenario.model, scenario.algorithm
    assert model.layers is not None  # ModelSpec fills these at validation
    layer_bytes = model.weight_bytes / model.layers
    gather = model.layers * all_gather_s(layer_bytes, layout.shard_ranks, layout.shard_link)
    gradients = model.layers * all_reduce_s(layer_bytes / layout.state_share, layout.replicas, layout.replica_link)
    start_passes = len(start_of_step_minibatches(scenario))  # one no-grad forward per minibatch, each gathers
    gathers = 2 * algorithm.updates_per_step + algorithm.extra_forward_passes + start_passes
    return (gathers + algorithm.updates_per_step) * gather + algorithm.updates_per_step * gradients


class AnalyticLearner:
    """Seconds of one learner step from the batch's tokens (module docstring)."""

    def __init__(self, scenario: Scenario, efficiency: Efficiency, communication_s: float) -> None:
        model, devices = scenario.model, scenario.training_devices
        peak = scenario.hardware.spec.peak_flops * devices
        recompute = 1 if scenario.learner.activation_checkpointing else 0
        # ModelSpec fills these at validation
        assert model.layers is not None and model.heads is not None and model.head_dim is not None
        assert model.active_params is not None
        attention = 2.0 * model.layers * model.heads * model.head_dim
        passes = forward_passes(scenario)
        self._forward = (passes * 2.0 * model.active_params, passes * attention, peak * efficiency.forward_mfu)
        self._update = (
            (6.0 + 2 * recompute) * model.active_params,
            (3.0 + recompute) * attention,
            peak * efficiency.mfu,
        )
        self._overhead_s = efficiency.train_step_s + efficiency.sample_overhead_s * scenario.batch_samples
        self._communication_s = communication_s

    def step(self, tokens: TrainTokens) -> LearnerStep:
        per_token, per_square, flops = self._forward
        forward = (per_token * tokens.actual + per_square * tokens.actual_square) * tokens.forward_imbalance / flops
        per_token, per_square, flops = self._update
        update = (per_token * tokens.actual + per_square * tokens.actual_square) * tokens.update_imbalance / flops
        exposed = max(0.0, self._communication_s - forward - update)
        return LearnerStep(forward, update, self._overhead_s, exposed)


def data_parallel_ranks(scenario: Scenario) -> int:
    """Training devices over the devices that hold one copy of a sequence (``learner.model_parallel``)."""
    return max(1, scenario.training_devices // scenario.learner.model_parallel)


def attention_weight(scenario: Scenario) -> float:
    """Attention's work per squared row length, in tokens of the weights' work: a row of length L weighs
    L + this · L² (``TrainTokens.of``'s ``square_weight``)."""
    model = scenario.model
    # ModelSpec fills these at validation
    assert model.layers is not None and model.heads is not None and model.head_dim is not None
    assert model.active_params is not None
    return model.layers * model.heads * model.head_dim / model.active_params
