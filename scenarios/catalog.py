"""Datasheet figures for devices and architecture figures for model presets.

A scenario names a device (``hardware.device``) and usually a model preset
(``model.preset``); the cost model reads these figures. All figures are dense
bf16 datasheet values (no sparsity), in SI units: FLOP/s, bytes, bytes/s.

``interconnect_bytes_per_s`` is the per-device bandwidth between the training
pool and the generation pool, used for weight synchronization: the network
adapter each GPU has in a typical cluster node (e.g. a 400 Gb/s NIC = 50 GB/s),
not NVLink, because the two pools usually sit on different nodes.
"""

from __future__ import annotations

from dataclasses import dataclass

GB = 1e9


@dataclass(frozen=True)
class DeviceSpec:
    """One accelerator as its datasheet describes it."""

    peak_flops: float  # dense bf16 tensor FLOP/s
    memory_bytes: float  # device memory
    memory_bytes_per_s: float  # memory bandwidth
    interconnect_bytes_per_s: float  # per-device bandwidth to the other pool


DEVICES: dict[str, DeviceSpec] = {
    "a100-40g": DeviceSpec(312e12, 40 * GB, 1555 * GB, 25 * GB),
    "a100-80g": DeviceSpec(312e12, 80 * GB, 2039 * GB, 25 * GB),
    "h100": DeviceSpec(989e12, 80 * GB, 3350 * GB, 50 * GB),
    "h200": DeviceSpec(989e12, 141 * GB, 4800 * GB, 50 * GB),
    "h20": DeviceSpec(148e12, 96 * GB, 4000 * GB, 50 * GB),
    "l40s": DeviceSpec(362e12, 48 * GB, 864 * GB, 25 * GB),
    "b200": DeviceSpec(2250e12, 180 * GB, 8000 * GB, 100 * GB),
    # Two cores of a current x86 server with AVX-512 FMA, and its DRAM share.
    "cpu": DeviceSpec(0.2e12, 24 * GB, 20 * GB, 10 * GB),
}


@dataclass(frozen=True)
class ModelPreset:
    """Architecture figures of a decoder-only transformer.

    ``params`` counts every weight (what memory and weight sync move);
    ``active_params`` counts the weights one token passes through (what FLOPs
    scale with); they differ only for mixture-of-experts models.
    """

    params: int
    active_params: int
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    family: str  # architecture family, for building a transformers config


MODEL_PRESETS: dict[str, ModelPreset] = {
    "pythia-410m": ModelPreset(405_334_016, 405_334_016, 24, 1024, 16, 16, 64, 4096, 50304, "gpt_neox"),
    "pythia-1b": ModelPreset(1_011_781_632, 1_011_781_632, 16, 2048, 8, 8, 256, 8192, 50304, "gpt_neox"),
    "pythia-2.8b": ModelPreset(2_775_208_960, 2_775_208_960, 32, 2560, 32, 32, 80, 10240, 50304, "gpt_neox"),
    "rho-1b": ModelPreset(1_100_048_384, 1_100_048_384, 22, 2048, 32, 4, 64, 5632, 32000, "llama"),
    "llama-3.1-8b": ModelPreset(8_030_261_248, 8_030_261_248, 32, 4096, 32, 8, 128, 14336, 128256, "llama"),
    "qwen2.5-1.5b": ModelPreset(1_543_714_304, 1_543_714_304, 28, 1536, 12, 2, 128, 8960, 151936, "qwen2"),
    "qwen2.5-7b": ModelPreset(7_615_616_512, 7_615_616_512, 28, 3584, 28, 4, 128, 18944, 152064, "qwen2"),
    "qwen3-8b": ModelPreset(8_190_735_360, 8_190_735_360, 36, 4096, 32, 8, 128, 12288, 151936, "qwen3"),
    "qwen3-30b-a3b": ModelPreset(30_532_122_624, 3_338_511_360, 48, 2048, 32, 4, 128, 768, 151936, "qwen3_moe"),
    # A few hundred thousand parameters: trains and generates on two CPU cores.
    "tiny": ModelPreset(385_344, 385_344, 2, 64, 4, 2, 16, 256, 2048, "llama"),
}

DTYPE_BYTES: dict[str, int] = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
