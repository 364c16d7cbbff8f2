"""The learner's analytic step: its passes micro-batch by micro-batch, their fixed costs, FSDP's collectives.

    TrainTokens (T tokens in n rows, Σ L², imbalance across data-parallel ranks)
        ─► each pass over the batch, on the busiest rank, in micro-batches of m tokens:
               FLOPs   k · (2 · active · m + a · Σ L²) / (peak · mfu)      (k: 1 forward, 3 + r training)
             + reads   k · weights + m · vocab · logit bytes, at LEARNER_MBU of the bandwidth
             + launch  k · layers · learner_layer_s
             + FSDP's collectives of the micro-batch, where they outlast the rest
        ─► per phase     phase_s, and the offloads between phases at host_efficiency of the host link
        ─► the rest      train_step_s + sample_overhead_s · samples

``P`` no-grad passes (``workload.forward_passes``: old log-probs, reference, values, the tis and decoupled
corrections' π_old) and ``1 + algorithm.extra_training_passes`` training passes (more PPO epochs, a
critic) make up a step; ``r`` is 1 with activation checkpointing (the forward recomputed in backward).
Attention adds ``a · L²`` per row of length ``L``: ``a = 2 · layers · heads · head_dim`` for the causal QKᵀ
and AV products of a forward pass (a backward costs two forwards). Without ``learner.remove_padding``
every row is computed at the prompt cap plus the completion cap.

Micro-batches: ``learner.micro_batch_rows`` (``forward_micro_batch_rows`` for no-grad passes) rows each, or
rows packed up to ``learner.micro_batch_tokens``; per minibatch (``algorithm.updates_per_step``) for a
training pass, over the whole batch for a no-grad one. Each launches every kernel of the model again, which
is why a small model's passes are launch-bound: what a micro-batch of a 0.5B model computes takes
microseconds per kernel, its launches tens.

Data-parallel ranks: ``D / learner.model_parallel`` (the devices that share one copy of a sequence: Ulysses
sequence parallelism, Megatron's tensor × pipeline × context parallelism). The rows are dealt to them as
``scenarios.rules.workload.rank_loads`` does, and each minibatch waits for its busiest rank. With
``learner.pipeline_stages`` p, a device runs layers / p of each micro-batch, and a minibatch of m micro-batches
takes m + p − 1 of its slots: every part of the pass is (m + p − 1) / m longer (1F1B's bubble).

FSDP (``LearnerLayout``): weights and their gradients are sharded within shard groups of
``learner.shard_devices`` devices (verl's ``fsdp_size``; by default a node when its devices hold the
learner state, else all of them); the groups replicate each other (HSDP) and all-reduce their gradient
shards. Per micro-batch: an all-gather of the weights for its forward, another for its backward and a
reduce-scatter of its fp32 gradients (twice the bytes), layer by layer, at ``link_efficiency`` of the link;
per update one all-reduce across the replicas. They add to the compute (``communication_s``): verl runs FSDP
with ``forward_prefetch: False``, and a public A100 log's training time rises with its micro-batches'
collectives, not with the larger of the two (docs/calibration.md). ``learner.backend: megatron`` keeps its
share of the weights (tensor and pipeline parallel): its distributed optimizer reduces the gradients and
gathers the weights once per update.

LoRA (``learner.lora_rank``): the model's weights are frozen, so a training pass computes no gradient of them
(``k − 1`` forwards' worth of their products, the adapters' at ``k``), reduces none, and Adam updates the
adapters alone; each adapted linear layer launches peft's four kernels more forward (``LORA_LAYER_KERNELS``),
in the training passes and in one no-grad pass (the old log-probs; verl's reference is the actor with its
adapters off). Every training pass is taken to carry the adapters (a critic's too). ``simulator.lora`` holds
the kernel counts, and an engine's (vLLM's LoRA layers in each decode step).

Every second but the collectives' is a term of ``scenarios.costs.efficiency`` times a work figure
(``PhaseWork``): the same decomposition the log calibration fits (``analysis.log_fit``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..scenarios.costs.efficiency import Efficiency, coefficient
from ..scenarios.costs.memory import adapter_params
from ..scenarios.rules.workload import TrainTokens, forward_passes
from ..scenarios.spec.scenario import Scenario
from .lora import adapter_forward_launches, lora_launches, trained_params
from .topology import Link, Placement, all_gather_s, all_reduce_s, intra_node_link, network_link

# Bytes the learner keeps per weight between steps, besides what the engine holds. scenarios/costs/memory.py
# counts the learner's whole memory; these are the terms the colocated phase switch and the offloads move:
MASTER_WEIGHT_BYTES = 4  # an fp32 master copy of each weight (verl's FSDP holds its parameters in fp32)
OPTIMIZER_BYTES = 8  # Adam's two fp32 moments
# ... and one gradient of the model's dtype (model.dtype_bytes) per weight.
#: Share of the HBM bandwidth a training pass's streaming reads reach (weights, logits): large sequential reads.
LEARNER_MBU = 0.8
#: Bytes per logit per forward pass: fp32 logits written, log-softmax read and written, the label gathered.
LOGIT_BYTES_FORWARD = 16
#: Per logit of a training pass: the forward's, and its backward through the softmax and the cast.
LOGIT_BYTES_TRAINING = 32
#: Bytes Adam touches per weight of a shard per update: weight, gradient, two moments read, three written.
OPTIMIZER_STEP_BYTES = 28
#: Megatron's distributed optimizer per update, in weight all-gathers: fp32 gradients reduce-scattered (two),
#: the updated weights gathered (one).
MEGATRON_GATHERS = 3


@dataclass(frozen=True)
class LearnerStep:
    """One learner step's seconds by phase; ``communication_s`` is the collectives' part of the first two."""

    forward_s: float  # no-grad passes (old log-probs, reference, values), their phases, offloads, collectives
    update_s: (
        float  # the training passes (forward, backward, recompute), their phases, offloads, optimizer, collectives
    )
    overhead_s: float  # fixed per step and per sample (the rest of a step)
    communication_s: float = 0.0  # of forward_s and update_s: collectives (the run record's all-reduce time)

    @property
    def total_s(self) -> float:
        return self.forward_s + self.update_s + self.overhead_s


@dataclass(frozen=True)
class PhaseWork:
    """A phase's seconds as the model adds them up: per term, the seconds one unit of its coefficient costs
    (``scenarios.costs.efficiency.coefficient``: 1 / a share or a rate, seconds as they are), plus what no term scales."""

    terms: dict[str, float] = field(default_factory=dict)
    fixed_s: float = 0.0

    def seconds(self, efficiency: Efficiency) -> float:
        return self.fixed_s + sum(work * coefficient(efficiency, term) for term, work in self.terms.items())

    def plus(self, other: PhaseWork) -> PhaseWork:
        terms = dict(self.terms)
        for term, work in other.terms.items():
            terms[term] = terms.get(term, 0.0) + work
        return PhaseWork(terms, self.fixed_s + other.fixed_s)


@dataclass(frozen=True)
class LearnerWork:
    """One learner step as work: no-grad passes, training passes, the rest; and the seconds of the first two
    that are collectives."""

    forward: PhaseWork
    update: PhaseWork
    rest: PhaseWork
    collectives_s: tuple[float, float] = (0.0, 0.0)


@dataclass(frozen=True)
class LearnerLayout:
    """How the learner shards its state: FSDP within shard groups, the groups replicas of each other (HSDP)."""

    shard_ranks: int  # devices of the largest shard group (its collectives take longest)
    shard_link: Link
    state_share: int  # devices of the smallest shard group (its devices hold the most state)
    replicas: int  # shard groups, all-reducing their gradient shards
    replica_link: Link


def learner_state_bytes(scenario: Scenario) -> float:
    """Master weights, optimizer moments and gradients of the whole model (bytes); with LoRA, the moments and
    gradients of the adapters alone."""
    model = scenario.model
    assert model.params is not None  # ModelSpec fills these at validation
    trained = trained_params(scenario)
    return float(model.params * MASTER_WEIGHT_BYTES + trained * (OPTIMIZER_BYTES + model.dtype_bytes))


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


@dataclass(frozen=True)
class Collectives:
    """FSDP's collectives, layer by layer: one all-gather of the weights, one all-reduce of the gradient
    shards across the replicas (seconds)."""

    gather_s: float
    replica_s: float

    @classmethod
    def of(cls, scenario: Scenario, layout: LearnerLayout) -> Collectives:
        model = scenario.model
        assert model.layers is not None  # ModelSpec fills these at validation
        layer_bytes = model.weight_bytes / model.layers
        gather = model.layers * all_gather_s(layer_bytes, layout.shard_ranks, layout.shard_link)
        replica = model.layers * all_reduce_s(layer_bytes / layout.state_share, layout.replicas, layout.replica_link)
        return cls(gather, replica)


@dataclass(frozen=True)
class _Pass:
    """One kind of pass over the batch: its multiple of a forward's work, its term, its micro-batch rows."""

    multiple: int  # forward-pass equivalents: 1 for a no-grad pass, 3 + recompute for a training pass
    mfu_term: str  # "forward_mfu" or "mfu"
    rows: int | None  # fixed rows per micro-batch, or None: packed to micro_batch_tokens
    gathers: int  # weight all-gathers' worth of collectives per micro-batch (module docstring)
    logit_bytes: int
    weight_multiple: float  # of the weights' products: multiple, or with LoRA one fewer (no weight gradient)
    adapters: float  # LoRA: the adapters' weights, computed at ``multiple`` (0 without)
    launch_multiple: float  # forward-pass equivalents of kernel launches (multiple, more with LoRA: simulator.lora)


class AnalyticLearner:
    """Seconds of one learner step from the batch's tokens (module docstring)."""

    def __init__(self, scenario: Scenario, efficiency: Efficiency, layout: LearnerLayout) -> None:
        model, learner = scenario.model, scenario.learner
        assert model.layers is not None and model.heads is not None and model.head_dim is not None
        assert model.active_params is not None and model.params is not None  # ModelSpec fills these
        device = scenario.hardware.spec
        self._efficiency = efficiency
        self._collectives = Collectives.of(scenario, layout)
        self._layers = model.layers
        self._active = float(model.active_params)
        self._attention = 2.0 * model.layers * model.heads * model.head_dim
        self._split = learner.model_parallel  # devices sharing one sequence: they split its work
        self._stages = min(learner.pipeline_stages, learner.model_parallel)
        self._peak = device.peak_flops
        self._bandwidth = device.memory_bytes_per_s * LEARNER_MBU
        self._weight_bytes = model.weight_bytes / self._split
        self._vocab = float(model.vocab or 0)
        self._ranks = data_parallel_ranks(scenario)
        self._updates = scenario.algorithm.updates_per_step
        self._token_budget = learner.micro_batch_tokens
        self._samples = scenario.batch_samples
        self._padded_row = (
            None
            if learner.remove_padding
            else scenario.workload.prompt_tokens.cap + (scenario.workload.completion_tokens.cap)
        )
        recompute = 1 if learner.activation_checkpointing else 0
        lora, adapters = learner.lora_rank > 0, adapter_params(model, learner.lora_rank)
        self._forward_passes = forward_passes(scenario)
        # the old log-probs' pass runs the adapters; a reference pass (verl: the actor, adapters off) does not
        forward_launches = adapter_forward_launches(self._forward_passes) if lora else 1.0
        self._forward = _Pass(
            1, "forward_mfu", learner.forward_micro_batch_rows, 1, LOGIT_BYTES_FORWARD, 1, 0.0, forward_launches
        )
        # forward and backward all-gathers, and the reduce-scatter of fp32 gradients (twice the bf16 bytes); with
        # LoRA the frozen weights get no gradient (one forward's worth fewer products) and none is reduced
        self._training = _Pass(
            3 + recompute,
            "mfu",
            learner.micro_batch_rows,
            2 if lora else 4,
            LOGIT_BYTES_TRAINING,
            2 + recompute if lora else 3 + recompute,
            adapters,
            (3 + recompute) * (lora_launches(recompute) if lora else 1.0),
        )
        self._training_passes = 1 + scenario.algorithm.extra_training_passes
        self._shard_params = model.params / layout.state_share  # the weights whose state one device holds
        self._shard_trained = trained_params(scenario) / layout.state_share  # ... and those the optimizer updates
        self._offload = learner.phase_offload
        self._backend = learner.backend
        self._host_bytes_per_s = device.host_bytes_per_s

    def step(self, tokens: TrainTokens) -> LearnerStep:
        work = self.work(tokens)
        efficiency = self._efficiency
        return LearnerStep(
            work.forward.seconds(efficiency),
            work.update.seconds(efficiency),
            work.rest.seconds(efficiency),
            sum(work.collectives_s),
        )

    def work(self, tokens: TrainTokens) -> LearnerWork:
        """The step's work by phase (``PhaseWork``): what the terms multiply, for the step and for the fit."""
        rows = tokens.rows or self._samples
        if self._padded_row is None:
            total, square = float(tokens.actual), float(tokens.actual_square)
        else:
            total, square = float(rows * self._padded_row), float(rows * self._padded_row**2)
        forward, forward_collectives = self._passes(
            self._forward, self._forward_passes, 1, rows, total, square, tokens.forward_imbalance
        )
        update, update_collectives = self._passes(
            self._training, self._training_passes, self._updates, rows, total, square, tokens.update_imbalance
        )
        update = update.plus(self._optimizer())
        rest = PhaseWork({"train_step_s": 1.0, "sample_overhead_s": float(self._samples)})
        return LearnerWork(forward, update, rest, (forward_collectives, update_collectives))

    def _passes(
        self, kind: _Pass, count: float, minibatches: int, rows: int, total: float, square: float, imbalance: float
    ) -> tuple[PhaseWork, float]:
        """``count`` passes of ``kind`` over the batch, each split into ``minibatches``: (work, the seconds of
        it that are collectives)."""
        if count <= 0:
            return PhaseWork(), 0.0
        busiest_tokens = total * imbalance / self._ranks  # summed over the minibatches
        busiest_square = square * imbalance / self._ranks
        if kind.rows is not None:
            per_minibatch = math.ceil(rows / (self._ranks * minibatches) / kind.rows)
        else:
            # the budget is per device: devices that share a sequence hold that many tokens each
            per_minibatch = math.ceil(busiest_tokens / minibatches / (self._token_budget * self._split))
        micro_batches = minibatches * max(1, per_minibatch)
        bubble = (max(1, per_minibatch) + self._stages - 1) / max(1, per_minibatch)  # 1F1B: m + p − 1 slots
        products = kind.weight_multiple * 2.0 * self._active + kind.multiple * 2.0 * kind.adapters
        flops = (products * busiest_tokens + kind.multiple * self._attention * busiest_square) / self._split
        compute_s = bubble * flops / self._peak
        reads = kind.multiple * micro_batches * self._weight_bytes + busiest_tokens / self._split * self._vocab * (
            kind.logit_bytes
        )
        reads_s = bubble * reads / self._bandwidth
        launches = bubble * kind.launch_multiple * micro_batches * self._layers / self._stages  # a stage's layers
        fixed = PhaseWork({"phase_s": count}).plus(self._phase_offload(kind, count))
        passes = PhaseWork({kind.mfu_term: count * compute_s, "learner_layer_s": count * launches}, count * reads_s)
        collectives = self._collective_work(kind, count, micro_batches, minibatches)
        return passes.plus(fixed).plus(collectives), collectives.seconds(self._efficiency)

    def _collective_work(self, kind: _Pass, count: float, micro_batches: int, minibatches: int) -> PhaseWork:
        """The pass's collectives at the link's full bandwidth (``link_efficiency`` scales them): FSDP's per
        micro-batch, Megatron's per update (its distributed optimizer: gradients reduce-scattered, weights
        gathered); the replicas' gradient all-reduce per update."""
        gather_s = self._collectives.gather_s
        if self._backend == "fsdp":
            work = micro_batches * kind.gathers * gather_s
        else:
            work = minibatches * MEGATRON_GATHERS * gather_s if kind.mfu_term == "mfu" else 0.0
        replica = minibatches * self._collectives.replica_s if kind.mfu_term == "mfu" else 0.0
        return PhaseWork({"link_efficiency": count * work} if work else {}, count * replica)

    def _phase_offload(self, kind: _Pass, count: float) -> PhaseWork:
        """The weights (and, for a training pass, gradients and Adam's states) to the host after the phase and
        back before it: ``learner.phase_offload``."""
        moved = 0.0
        if self._offload in ("params", "both"):
            moved += MASTER_WEIGHT_BYTES * self._shard_params * (2 if kind.mfu_term == "mfu" else 1)
        if self._offload in ("optimizer", "both") and kind.mfu_term == "mfu":
            moved += OPTIMIZER_BYTES * self._shard_trained
        if not moved:
            return PhaseWork()
        return PhaseWork({"host_efficiency": count * 2 * moved / self._host_bytes_per_s})

    def _optimizer(self) -> PhaseWork:
        """Adam's update of each minibatch: a streaming pass over the shard's weights, gradients and moments."""
        return PhaseWork({}, self._updates * OPTIMIZER_STEP_BYTES * self._shard_trained / self._bandwidth)


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
