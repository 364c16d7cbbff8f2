"""A device given by its datasheet figures: ``hardware.device`` as a mapping instead of a catalogue name.

    hardware:
      device: {name: h100-like, peak_tflops: 989, hbm_gb: 80, hbm_gbps: 3350, nvlink_gbps: 450}
          ─► DeviceSheet ─► .spec(): the catalogue's DeviceSpec (SI units), which the cost model reads

The figures are those of a datasheet in its own units (TFLOP/s, GB, GB/s; a GB is 10⁹ bytes), with the
catalogue's conventions (``scenarios/costs/catalog.py``): the peak is dense bf16 (half a "with sparsity" figure),
and links are per device and per direction (half a datasheet's bidirectional NVLink figure; a 400 Gb/s
network adapter per device is 50 GB/s). What a datasheet often leaves out has a default that says what it
assumes: one 400 Gb/s adapter per device, PCIe Gen5 x16 to the host, eight devices a node. Without
``nvlink_gbps`` the devices of a node talk over PCIe at ``host_gbps``, as the catalogue's ``l40s`` does.
A mapping with a catalogue entry's figures is that entry, to the cost model (``tests/test_device_sheet.py``).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..costs.catalog import DEVICES, GB, DeviceSpec
from ..files.limits import PositiveFloat, PositiveInt

TERA = 1e12
#: The catalogue's usual assumptions where a datasheet is silent (``scenarios/costs/catalog.py``).
DEFAULT_NETWORK_GBPS = 50.0  # one 400 Gb/s adapter per device
DEFAULT_HOST_GBPS = 64.0  # PCIe Gen5 x16, 128 GB/s bidirectional
DEFAULT_NODE_DEVICES = 8


class DeviceSheet(BaseModel):
    """One accelerator by its datasheet: the figures the cost and memory models read."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    name: str = Field(
        "custom",
        min_length=1,
        max_length=60,
        description="what tables and run records call the device (not a catalogue name)",
    )
    peak_tflops: PositiveFloat = Field(description="dense bf16 tensor TFLOP/s (half a figure 'with sparsity')")
    hbm_gb: PositiveFloat = Field(description="device memory, GB (10⁹ bytes)")
    hbm_gbps: PositiveFloat = Field(description="memory bandwidth, GB/s")
    nvlink_gbps: PositiveFloat | None = Field(
        None,
        description="to another device of the same node, GB/s each way (half the bidirectional NVLink figure); "
        "unset: no NVLink, the node's devices talk over PCIe at `host_gbps`",
    )
    network_gbps: PositiveFloat = Field(
        DEFAULT_NETWORK_GBPS,
        description="to a device of another node, GB/s each way (its network adapter: 400 Gb/s is 50)",
    )
    host_gbps: PositiveFloat = Field(
        DEFAULT_HOST_GBPS, description="to host memory, GB/s each way (PCIe Gen5 x16: 64, Gen4: 32)"
    )
    node_devices: PositiveInt = Field(
        DEFAULT_NODE_DEVICES,
        description="devices one NVLink domain joins (a DGX or HGX node: 8; a GB200 NVL72 rack: 72); the scenario's "
        "`cluster.devices_per_node` unless it sets its own",
    )

    @field_validator("name")
    @classmethod
    def _not_a_catalogue_name(cls, name: str) -> str:
        if name in DEVICES:
            raise ValueError(
                f"{name} is a catalogue device: write hardware.device: {name}, or give these figures another name"
            )
        return name

    def spec(self) -> DeviceSpec:
        """The figures in the catalogue's units (FLOP/s, bytes, bytes/s)."""
        nvlink = self.nvlink_gbps if self.nvlink_gbps is not None else self.host_gbps
        return DeviceSpec(
            peak_flops=self.peak_tflops * TERA,
            memory_bytes=self.hbm_gb * GB,
            memory_bytes_per_s=self.hbm_gbps * GB,
            nvlink_bytes_per_s=nvlink * GB,
            network_bytes_per_s=self.network_gbps * GB,
            host_bytes_per_s=self.host_gbps * GB,
            intra_node_link="nvlink" if self.nvlink_gbps is not None else "pcie",
            node_devices=self.node_devices,
        )


def device_tag(value: Any) -> str:
    """Which form ``hardware.device`` takes: a mapping of figures, or (anything else) a catalogue name."""
    return "datasheet" if isinstance(value, dict | DeviceSheet) else "catalogue"


def node_devices(device: Any) -> int | None:
    """The node size of ``hardware.device`` as written (a name or a mapping); None if it names nothing known."""
    if isinstance(device, str):
        spec = DEVICES.get(device)
        return spec.node_devices if spec is not None else None
    if isinstance(device, dict):
        size = device.get("node_devices", DEFAULT_NODE_DEVICES)
        return size if isinstance(size, int) and not isinstance(size, bool) and size > 0 else None
    if isinstance(device, DeviceSheet):
        return device.node_devices
    return None
