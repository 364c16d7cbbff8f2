"""Where the devices sit, which link a transfer crosses, and how long a collective takes.

    node 0 (devices 0-7)              node 1 (devices 8-15)
    ┌ engine-0 … engine-3 │ learner ┐ ┌ learner …                ┐   devices numbered node by node:
    └─────────────────────┴─────────┘ └──────────────────────────┘   engines first, then the training pool

**Placement.** Devices are numbered node by node (device ``d`` is on node
``d // devices_per_node``). Engine ``i`` holds devices ``[i·tp, (i+1)·tp)``; the
training pool holds the ``training_devices`` devices after the last engine, or,
colocated, the generation devices themselves. An engine never straddles two
nodes (the scenario checks that ``tp`` divides ``devices_per_node``); the
training pool may, and then shares a node with the last engines.

**Links.** Two devices of one node talk over NVLink (``nvlink_bytes_per_s``;
PCIe peer-to-peer on a device without NVLink), devices of two nodes over their
network adapters (``network_bytes_per_s``), a device and host memory over PCIe
(``host_bytes_per_s``). Bandwidths are per device and per direction.

**Collectives** follow NCCL's ring algorithms and NCCL's own cost model
(``src/graph/tuning.cc``): time = a base latency + one hop latency per ring
step + the bytes each device sends over the slowest link of the ring. A ring
that crosses nodes runs at the network's speed; one within a node at NVLink's.

    all-gather / reduce-scatter of S bytes over n ranks   base + (n−1)·hop + (n−1)/n · S / link
    all-reduce of S bytes over n ranks                    base + 2(n−1)·hop + 2(n−1)/n · S / link
    pipelined ring broadcast of S bytes to r receivers    base + r·hop + S / link

The broadcast is pipelined (chunks flow down the ring while later chunks leave
the source), so for large messages its time is nearly independent of the
number of receivers: only the hop latencies grow with them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from ..scenarios.costs.catalog import DeviceSpec
from ..scenarios.spec.scenario import ClusterSpec

# NCCL's latency figures for ring algorithms (src/graph/tuning.cc, baseLat and hwLat), in seconds.
# "Simple" is the protocol NCCL picks for large messages (weights, gradients); LL for small ones
# (a decode step's tensor-parallel all-reduce of a few hundred kB at most).
BASE_S = {"simple": 8.4e-6, "ll": 6.6e-6}
HOP_S = {
    "nvlink": {"simple": 3.4e-6, "ll": 0.6e-6},
    "pcie": {"simple": 5.7e-6, "ll": 1.0e-6},
    "network": {"simple": 14.0e-6, "ll": 2.7e-6},
}


@dataclass(frozen=True)
class Link:
    """One device's side of a link: bytes per second one way, and the latency of one ring hop."""

    name: str
    bytes_per_s: float
    kind: str  # "nvlink", "pcie" or "network": which of NCCL's latency figures apply

    def hop_s(self, protocol: str) -> float:
        return HOP_S[self.kind][protocol]


def intra_node_link(device: DeviceSpec) -> Link:
    return Link("nvlink", device.nvlink_bytes_per_s, device.intra_node_link)


def network_link(device: DeviceSpec) -> Link:
    return Link("network", device.network_bytes_per_s, "network")


def all_gather_s(total_bytes: float, ranks: int, link: Link, protocol: str = "simple") -> float:
    """Ring all-gather (or reduce-scatter) of a ``total_bytes`` tensor over ``ranks`` devices."""
    if ranks <= 1:
        return 0.0
    steps = ranks - 1
    return BASE_S[protocol] + steps * link.hop_s(protocol) + steps / ranks * total_bytes / link.bytes_per_s


def all_reduce_s(total_bytes: float, ranks: int, link: Link, protocol: str = "simple") -> float:
    """Ring all-reduce (reduce-scatter, then all-gather) of ``total_bytes`` over ``ranks`` devices."""
    if ranks <= 1:
        return 0.0
    steps = 2 * (ranks - 1)
    return BASE_S[protocol] + steps * link.hop_s(protocol) + steps / ranks * total_bytes / link.bytes_per_s


def broadcast_s(total_bytes: float, receivers: int, link: Link) -> float:
    """Pipelined ring broadcast of ``total_bytes`` from one source to ``receivers`` devices down a chain."""
    if receivers <= 0:
        return 0.0
    return BASE_S["simple"] + receivers * link.hop_s("simple") + total_bytes / link.bytes_per_s


@dataclass(frozen=True)
class Placement:
    """Which node each engine sits on and how many training devices each node holds (see module docstring)."""

    engine_nodes: tuple[int, ...]
    training_per_node: dict[int, int]

    @classmethod
    def of(cls, cluster: ClusterSpec) -> Placement:
        per_node, tp = cluster.devices_per_node, cluster.devices_per_engine
        engine_nodes = tuple(engine * tp // per_node for engine in range(cluster.engines))
        first = 0 if cluster.colocated else cluster.generation_devices
        devices = range(first, first + cluster.training_devices)
        return cls(engine_nodes, dict(sorted(Counter(device // per_node for device in devices).items())))

    def shares_learner_node(self, engine: int) -> bool:
        """Whether a training device sits on this engine's node."""
        return self.engine_nodes[engine] in self.training_per_node

    @property
    def training_nodes(self) -> int:
        return len(self.training_per_node)

    @property
    def fullest_training_node(self) -> int:
        """Most training devices on one node."""
        return max(self.training_per_node.values())

    @property
    def emptiest_training_node(self) -> int:
        """Fewest training devices on one node the training pool uses."""
        return min(self.training_per_node.values())
