"""Kernels one decoder layer launches, without and with LoRA: the source of ``simulator.learner_costs``'
``LAYER_KERNELS`` and ``LORA_LAYER_KERNELS``, which scale a training pass's launch term (``learner_layer_s``).

    python benchmarks/lora_launches.py

A tiny Qwen2 decoder layer (transformers' own, SDPA attention, bf16) runs one forward and one backward under a
dispatch mode that records every aten call; the calls that compute are counted (views, allocations and
copies of dtype left out), a stand-in for the kernels a GPU launches for them. Then each of its seven linear
layers is wrapped as peft's ``lora.Linear`` computes at ``lora_dropout: 0``: the base layer, then
``lora_B(lora_A(x)) · scaling`` added, the base weights (and the norms') frozen, and the same is counted.
The counts do not depend on the layer's width.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

#: aten calls that launch no kernel of their own: views, allocations, dtype copies on the way in
NOT_KERNELS = frozenset(
    [
        "view",
        "_unsafe_view",
        "t",
        "transpose",
        "expand",
        "slice",
        "unsqueeze",
        "as_strided",
        "permute",
        "select",
        "squeeze",
        "alias",
        "detach",
        "split",
        "split_with_sizes",
        "unbind",
        "_reshape_alias",
        "empty",
        "empty_like",
        "empty_strided",
        "lift_fresh",
        "new_empty",
        "new_empty_strided",
        "_to_copy",
        "clone",
        "zeros_like",
    ]
)


class Calls(TorchDispatchMode):
    """Records the name of every aten call made while it is active."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.names.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


class LoraLinear(torch.nn.Module):
    """peft's ``lora.Linear.forward`` at lora_dropout 0: ``base(x) + lora_B(lora_A(x)) * scaling``."""

    def __init__(self, base: torch.nn.Linear, rank: int = 8) -> None:
        super().__init__()
        self.base = base.requires_grad_(False)
        self.lora_a = torch.nn.Linear(base.in_features, rank, bias=False, dtype=base.weight.dtype)
        self.lora_b = torch.nn.Linear(rank, base.out_features, bias=False, dtype=base.weight.dtype)
        self.scaling = 2.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + self.lora_b(self.lora_a(x)) * self.scaling


def layer_kernels(lora: bool) -> tuple[int, int]:
    """(forward, backward) kernels of one tiny Qwen2 decoder layer, with or without LoRA on its linears."""
    from transformers import Qwen2Config
    from transformers.models.qwen2.modeling_qwen2 import Qwen2DecoderLayer, Qwen2RotaryEmbedding

    torch.manual_seed(0)
    config = Qwen2Config(
        hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, vocab_size=100
    )
    config._attn_implementation = "sdpa"
    layer = Qwen2DecoderLayer(config, 0).to(torch.bfloat16)
    if lora:
        for block in (layer.self_attn, layer.mlp):
            for name, child in list(block.named_children()):
                if isinstance(child, torch.nn.Linear):
                    setattr(block, name, LoraLinear(child))
        layer.input_layernorm.requires_grad_(False)
        layer.post_attention_layernorm.requires_grad_(False)
    x = torch.randn(1, 16, 64, dtype=torch.bfloat16, requires_grad=True)
    rotary = Qwen2RotaryEmbedding(config)
    position = tuple(part.to(torch.bfloat16) for part in rotary(x, torch.arange(16)[None]))
    with Calls() as forward:
        out = layer(x, position_embeddings=position, attention_mask=None)
        out = out[0] if isinstance(out, tuple) else out
    with Calls() as backward:
        out.sum().backward()
    return tuple(sum(1 for name in calls.names if name not in NOT_KERNELS) for calls in (forward, backward))  # type: ignore[return-value]


def main() -> None:
    base, lora = layer_kernels(False), layer_kernels(True)
    print(f"decoder layer kernels   forward {base[0]}, backward {base[1]}")
    print(f"with LoRA on 7 linears  forward {lora[0]}, backward {lora[1]}")
    for recompute in (0, 1):
        ratio = ((1 + recompute) * lora[0] + lora[1]) / ((1 + recompute) * base[0] + base[1])
        print(f"training pass{' with recompute' if recompute else ''}: x{ratio:.2f} the launches")
    print(f"no-grad pass with the adapters: x{lora[0] / base[0]:.2f}")


if __name__ == "__main__":
    main()
