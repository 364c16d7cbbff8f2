"""``asyncrl list``: what a scenario can name, with the figures the cost model reads.

MODEL_PRESETS ─► presets table     (parameters, architecture)
DEVICES       ─► devices table     (datasheet peak, memory, bandwidths)
shipped YAML  ─► scenarios table   (model, devices, schedule, completion lengths)
"""

from __future__ import annotations

from asyncrl.analysis.records.essentials import lengths_text, schedule_text
from asyncrl.analysis.tables import devices_label, format_table
from asyncrl.scenarios.costs.catalog import DEVICES, MODEL_PRESETS
from asyncrl.scenarios.spec.loading import load_scenario, shipped_scenarios

GIGA, TERA = 1e9, 1e12


def catalog_lines() -> str:
    """Presets, devices and shipped scenarios, one table each."""
    return "\n\n".join([preset_table(), device_table(), scenario_table()])


def preset_table() -> str:
    header = [
        "model.preset",
        "params",
        "active",
        "layers",
        "hidden",
        "heads",
        "kv heads",
        "head dim",
        "vocab",
        "family",
    ]
    rows = [
        [
            name,
            _count(p.params),
            _count(p.active_params),
            p.layers,
            p.hidden,
            p.heads,
            p.kv_heads,
            p.head_dim,
            p.vocab,
            p.family,
        ]
        for name, p in MODEL_PRESETS.items()
    ]
    return "model presets (model.preset)\n" + format_table(header, rows)


def device_table() -> str:
    header = ["hardware.device", "bf16 TFLOP/s", "memory GB", "memory GB/s", "in-node GB/s", "network GB/s", "node"]
    rows = [
        [
            name,
            d.peak_flops / TERA,
            d.memory_bytes / GIGA,
            d.memory_bytes_per_s / GIGA,
            d.nvlink_bytes_per_s / GIGA,
            d.network_bytes_per_s / GIGA,
            d.node_devices,
        ]
        for name, d in DEVICES.items()
    ]
    return (
        "devices (hardware.device; dense datasheet figures; links per direction; or a mapping of a device's own "
        "figures: docs/scenario.md)\n" + format_table(header, rows)
    )


def scenario_table() -> str:
    header = ["scenario", "name", "model", "devices", "schedule", "batch", "completion tokens"]
    rows = []
    for stem in shipped_scenarios():
        scenario = load_scenario(stem)
        rows.append(
            [
                stem,
                scenario.name,
                scenario.model.label,
                devices_label(scenario),
                schedule_text(scenario),
                f"{scenario.workload.prompts_per_step}x{scenario.workload.samples_per_prompt}",
                lengths_text(scenario),
            ]
        )
    return "shipped scenarios (asyncrl simulate NAME)\n" + format_table(header, rows)


def _count(value: int) -> str:
    return f"{value / GIGA:.2f}B" if value >= GIGA else f"{value / 1e6:.1f}M" if value >= 1e6 else f"{value / 1e3:.0f}K"
