"""A scenario's essentials in a few words: what a report page and each figure title say a run was.

    scenario.yaml ─► Scenario ─► essentials(): "llama-3.1-8b on 8+8 h100 (tp1), streaming-2, 64×8 per step,
                                               lognormal median 1024 σ 1 ≤ 8,192"

``run_essentials`` reads a run directory's resolved ``scenario.yaml``; a run without a readable one
is described as such rather than failing the report.
"""

from __future__ import annotations

from pathlib import Path

from ...scenarios.spec.loading import ScenarioError, load_scenario
from ...scenarios.spec.scenario import Scenario


def devices_text(scenario: Scenario) -> str:
    """``8+8 h100 (tp1)`` or ``16 h100 colocated (tp8)``: the split and the engines' tensor parallelism."""
    cluster = scenario.cluster
    split = (
        f"{cluster.generation_devices} {scenario.hardware.device_name} colocated"
        if cluster.colocated
        else f"{cluster.generation_devices}+{cluster.training_devices} {scenario.hardware.device_name}"
    )
    return f"{split} (tp{cluster.devices_per_engine})"


def schedule_text(scenario: Scenario) -> str:
    """The schedule's label (``scenarios.spec.schedules``): ``streaming-2``, ``streaming-2-inflight``, ``pipelined-1``
    or ``sync``."""
    return scenario.schedule.label


def lengths_text(scenario: Scenario) -> str:
    """The completion length distribution in a few words."""
    lengths = scenario.workload.completion_tokens
    if lengths.kind == "lognormal":
        return f"lognormal median {lengths.median:g} σ {lengths.sigma:g} ≤ {lengths.cap:,}"
    if lengths.kind == "pareto":
        return f"pareto scale {lengths.scale:g} α {lengths.alpha:g} ≤ {lengths.cap:,}"
    if lengths.kind == "fixed":
        return f"fixed {lengths.value:,}"
    return f"empirical ({lengths.path.name}) ≤ {lengths.cap:,}"


def essentials(scenario: Scenario) -> str:
    """Model, devices and split, schedule, batch and completion lengths, in one line."""
    workload = scenario.workload
    return (
        f"{scenario.model.label} on {devices_text(scenario)}, {schedule_text(scenario)}, "
        f"{workload.prompts_per_step}×{workload.samples_per_prompt} per step, {lengths_text(scenario)}"
    )


def essentials_rows(scenario: Scenario | None) -> dict[str, str]:
    """The essentials as labelled fields, for a table."""
    if scenario is None:
        return dict.fromkeys(("model", "devices", "schedule", "batch", "completion tokens"), "?")
    return {
        "model": scenario.model.label,
        "devices": devices_text(scenario),
        "schedule": schedule_text(scenario),
        "batch": f"{scenario.workload.prompts_per_step}×{scenario.workload.samples_per_prompt}",
        "completion tokens": lengths_text(scenario),
    }


def run_scenario(run_dir: Path) -> Scenario | None:
    """The run's resolved scenario, or None where it cannot be read (an old or moved run)."""
    path = run_dir / "scenario.yaml"
    if not path.is_file():
        return None
    try:
        return load_scenario(path)
    except ScenarioError:
        return None


def run_essentials(run_dir: Path) -> str:
    """``essentials`` of the run's scenario, or a note that it has none."""
    scenario = run_scenario(run_dir)
    return essentials(scenario) if scenario is not None else "scenario.yaml missing or unreadable"
