"""What LoRA (``learner.lora_rank``) changes in the costs: the weights the optimizer updates, and the kernels
each layer launches, in the learner and in the engine.

    learner   a decoder layer's kernels forward and backward (LAYER_KERNELS), with peft's adapters on its
              seven linear layers (LORA_LAYER_KERNELS): counted by ``python benchmarks/lora_launches.py``
    engine    a decode step's kernels per layer (ENGINE_LAYER_KERNELS), and what vLLM's LoRA layers add
              (ENGINE_LORA_KERNELS): counted from vLLM's code
    ─► the launch terms (``learner_layer_s``; ``decode_layer_s`` or ``graph_layer_s``) scaled by the ratio
"""

from __future__ import annotations

from ..scenarios.costs.memory import adapter_params
from ..scenarios.spec.scenario import Scenario

#: Kernels of one decoder layer (Qwen2's, transformers' SDPA attention), forward and backward, without and with
#: LoRA on its seven linear layers (peft's ``lora.Linear``: the base layer, then lora_B(lora_A(x)) · scaling
#: added; the base weights frozen): ``python benchmarks/lora_launches.py`` counts them (every aten call that
#: computes, views left out).
LAYER_KERNELS = (34, 70)
LORA_LAYER_KERNELS = (62, 98)
#: Kernels of one layer of an engine's decode step (vLLM's ``Qwen2DecoderLayer.forward``: two fused RMSNorms, the
#: qkv, o, gate_up and down products, rotary, the KV cache write, attention, the activation), and what its LoRA
#: layers add: three for each of the four (packed) linear layers (``PunicaWrapperGPU.add_lora_linear``: the
#: shrink's buffer zeroed, ``lora_shrink``, ``lora_expand``).
ENGINE_LAYER_KERNELS = 10
ENGINE_LORA_KERNELS = 12


def trained_params(scenario: Scenario) -> float:
    """The weights the optimizer updates: the model's, or its LoRA adapters' (``learner.lora_rank``)."""
    rank = scenario.learner.lora_rank
    assert scenario.model.params is not None  # ModelSpec fills these at validation
    return adapter_params(scenario.model, rank) if rank else float(scenario.model.params)


def lora_launches(recompute: int) -> float:
    """How many times a training pass's kernels LoRA on every linear layer launches (``LORA_LAYER_KERNELS``):
    its forward twice with recompute."""
    forward, backward = LAYER_KERNELS
    lora_forward, lora_backward = LORA_LAYER_KERNELS
    return ((1 + recompute) * lora_forward + lora_backward) / ((1 + recompute) * forward + backward)


def adapter_forward_launches(forward_passes: float) -> float:
    """How many times their kernels ``forward_passes`` no-grad passes launch when one of them (the old log-probs)
    runs the adapters and the others (verl's reference: the actor with its adapters off) do not, on average."""
    extra = LORA_LAYER_KERNELS[0] / LAYER_KERNELS[0] - 1
    return 1 + min(1.0, forward_passes) * extra / forward_passes if forward_passes > 0 else 1.0


def engine_launches(scenario: Scenario) -> float:
    """How many times its kernels an engine's decode step launches per layer with the run's LoRA adapters."""
    if not scenario.learner.lora_rank:
        return 1.0
    return (ENGINE_LAYER_KERNELS + ENGINE_LORA_KERNELS) / ENGINE_LAYER_KERNELS
