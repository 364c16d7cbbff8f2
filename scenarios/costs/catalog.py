"""Datasheet figures for devices and architecture figures for model presets.

A scenario names a device (``hardware.device``) and usually a model preset
(``model.preset``); the cost model reads these figures. All figures are dense
bf16 datasheet values (no sparsity), in SI units: FLOP/s, bytes, bytes/s.

Links are per device and per direction (a datasheet's "900 GB/s bidirectional"
NVLink is 450 GB/s each way), because a transfer moves bytes one way:

    nvlink_bytes_per_s   to another device of the same node (NVLink through the
                         node's NVSwitch; PCIe peer-to-peer on a device without NVLink)
    network_bytes_per_s  to a device of another node: the network adapter each
                         device has in the vendor's reference node (DGX), e.g. one
                         400 Gb/s ConnectX-7 per GPU = 50 GB/s
    host_bytes_per_s     to host memory (PCIe), what offloading optimizer state uses
    node_devices         devices one NVLink domain joins in the reference node: 8 in a DGX or HGX,
                         72 in a GB200 NVL72 rack (``cluster.devices_per_node`` unless the scenario sets it)

A device the catalogue lacks is given by its figures instead of a name (``hardware.device`` as a
mapping: ``scenarios/spec/device_sheet.py``). Where a figure is not on a datasheet (a node's network for a device sold
without a reference node, the ``cpu`` entry), the comment says it is assumed.
"""

from __future__ import annotations

from dataclasses import dataclass

GB = 1e9


@dataclass(frozen=True)
class DeviceSpec:
    """One accelerator as its datasheet (and its vendor's reference node) describes it."""

    peak_flops: float  # dense bf16 tensor FLOP/s
    memory_bytes: float  # device memory
    memory_bytes_per_s: float  # memory bandwidth
    nvlink_bytes_per_s: float  # to a device of the same node, one direction
    network_bytes_per_s: float  # to a device of another node (its network adapter), one direction
    host_bytes_per_s: float  # to host memory over PCIe, one direction
    intra_node_link: str = "nvlink"  # "nvlink", or "pcie" where devices of a node talk over PCIe
    node_devices: int = 8  # devices of one NVLink domain (a node) in the reference system


DEVICES: dict[str, DeviceSpec] = {
    # A100 SXM: NVLink 3, 600 GB/s bidirectional (A100 datasheet; HGX A100 8-GPU NVSwitch baseboard);
    # DGX A100: 8 single-port ConnectX-6 HDR 200 Gb/s for compute = 25 GB/s per GPU;
    # PCIe Gen4 x16: 64 GB/s bidirectional (A100 datasheet).
    "a100-40g": DeviceSpec(312e12, 40 * GB, 1555 * GB, 300 * GB, 25 * GB, 32 * GB),
    "a100-80g": DeviceSpec(312e12, 80 * GB, 2039 * GB, 300 * GB, 25 * GB, 32 * GB),
    # A800 SXM 80GB (the A100 sold in China): the A100 80GB's figures, NVLink cut to 400 GB/s bidirectional
    # (NVIDIA's A800 datasheet); the DGX A100's adapters and PCIe Gen4 assumed.
    "a800": DeviceSpec(312e12, 80 * GB, 2039 * GB, 200 * GB, 25 * GB, 32 * GB),
    # H100 SXM: NVLink 4, 900 GB/s bidirectional; PCIe Gen5 128 GB/s bidirectional (H100 datasheet);
    # DGX H100: 8 single-port ConnectX-7, 400 Gb/s each = 50 GB/s per GPU (DGX BasePOD reference architecture).
    "h100": DeviceSpec(989e12, 80 * GB, 3350 * GB, 450 * GB, 50 * GB, 64 * GB),
    # H200 SXM: NVLink 900 GB/s and PCIe Gen5 128 GB/s bidirectional (H200 datasheet);
    # DGX H200: the DGX H100's eight 400 Gb/s ConnectX-7 (DGX BasePOD reference architecture).
    "h200": DeviceSpec(989e12, 141 * GB, 4800 * GB, 450 * GB, 50 * GB, 64 * GB),
    # H800 SXM (the H100 sold in China): the H100's compute, 80 GB HBM3 at 3.35 TB/s, NVLink cut to 400 GB/s
    # bidirectional (NVIDIA's H800 specifications); assumed as on the H100: PCIe Gen5, one 400 Gb/s adapter per GPU.
    "h800": DeviceSpec(989e12, 80 * GB, 3350 * GB, 200 * GB, 50 * GB, 64 * GB),
    # H20: NVLink 900 GB/s bidirectional (its published specifications; NVIDIA posts no public datasheet).
    # Assumed as on the other Hopper SXM parts: PCIe Gen5 x16 (128 GB/s bidirectional) to the host, and,
    # no DGX existing for it, one 400 Gb/s adapter per GPU as in the HGX H100 designs.
    "h20": DeviceSpec(148e12, 96 * GB, 4000 * GB, 450 * GB, 50 * GB, 64 * GB),
    # L40S: no NVLink; PCIe Gen4 x16, 64 GB/s bidirectional (L40S datasheet), also between the devices
    # of a node. No reference node fixes its network: one 200 Gb/s adapter per GPU is assumed.
    "l40s": DeviceSpec(362e12, 48 * GB, 864 * GB, 32 * GB, 25 * GB, 32 * GB, intra_node_link="pcie"),
    # B200 (HGX/DGX B200): NVLink 5, 1.8 TB/s bidirectional; DGX B200: 8 single-port ConnectX-7 at 400 Gb/s
    # = 50 GB/s per GPU (DGX BasePOD reference architecture; the 100 GB/s this entry had was twice that);
    # its Xeon hosts are PCIe Gen5, 128 GB/s bidirectional per x16 link (the B200 itself speaks Gen6).
    "b200": DeviceSpec(2250e12, 180 * GB, 8000 * GB, 900 * GB, 50 * GB, 64 * GB),
    # GB200 (one Blackwell GPU of a GB200 NVL72 rack; NVIDIA's GB200 NVL72 specifications, per rack of 72 GPUs):
    # FP16/BF16 360 PFLOP/s with sparsity = 2.5 PFLOP/s dense per GPU; up to 13.4 TB HBM3e at 576 TB/s = 186 GB
    # at 8 TB/s per GPU (the superchip's 372 GB and 16 TB/s for two); NVLink 130 TB/s = 1.8 TB/s bidirectional
    # per GPU, all 72 in one NVLink domain (node_devices 72). Assumed: one 400 Gb/s adapter per GPU (the compute
    # tray's four ConnectX-7 for its four GPUs), and the host link the Grace CPU's NVLink-C2C, 900 GB/s
    # bidirectional, shared by the superchip's two GPUs (225 GB/s each way per GPU).
    "gb200": DeviceSpec(2500e12, 186 * GB, 8000 * GB, 900 * GB, 50 * GB, 225 * GB, node_devices=72),
    # MI300X (OAM, AMD Instinct MI300X data sheet): 1,307.4 TFLOP/s dense bf16, 192 GB HBM3 at 5.3 TB/s, seven
    # Infinity Fabric links of 128 GB/s bidirectional to the node's other seven GPUs (896 GB/s in all; one
    # direction 448 GB/s), PCIe Gen5 x16 to the host; one 400 Gb/s adapter per GPU assumed (as in AMD's
    # reference platform with eight 400G NICs).
    "mi300x": DeviceSpec(1307.4e12, 192 * GB, 5300 * GB, 448 * GB, 50 * GB, 64 * GB),
    # Two cores of a current x86 server with AVX-512 FMA, and its DRAM share. Assumed: "devices" of a node
    # share its DRAM (a copy at DRAM bandwidth, so do host transfers), 10 GB/s to another machine.
    "cpu": DeviceSpec(0.2e12, 24 * GB, 20 * GB, 20 * GB, 10 * GB, 20 * GB, intra_node_link="pcie"),
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
    # Qwen2.5-0.5B and -3B (their config.json: tied embeddings, so params count the embedding once).
    "qwen2.5-0.5b": ModelPreset(494_032_768, 494_032_768, 24, 896, 14, 2, 64, 4864, 151936, "qwen2"),
    "qwen2.5-3b": ModelPreset(3_085_938_688, 3_085_938_688, 36, 2048, 16, 2, 128, 11008, 151936, "qwen2"),
    "qwen2.5-1.5b": ModelPreset(1_543_714_304, 1_543_714_304, 28, 1536, 12, 2, 128, 8960, 151936, "qwen2"),
    "qwen2-7b": ModelPreset(7_615_616_512, 7_615_616_512, 28, 3584, 28, 4, 128, 18944, 152064, "qwen2"),  # as 2.5's
    "qwen2.5-7b": ModelPreset(7_615_616_512, 7_615_616_512, 28, 3584, 28, 4, 128, 18944, 152064, "qwen2"),
    "qwen3-8b": ModelPreset(8_190_735_360, 8_190_735_360, 36, 4096, 32, 8, 128, 12288, 151936, "qwen3"),
    "qwen3-30b-a3b": ModelPreset(30_532_122_624, 3_338_511_360, 48, 2048, 32, 4, 128, 768, 151936, "qwen3_moe"),
    # A few hundred thousand parameters: trains and generates on two CPU cores.
    "tiny": ModelPreset(385_344, 385_344, 2, 64, 4, 2, 16, 256, 2048, "llama"),
}

DTYPE_BYTES: dict[str, int] = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
