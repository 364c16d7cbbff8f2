"""``asyncrl plan``: should this run switch to asynchronous training, on which split, how stale will samples be?

    CONFIG ─┬─ a framework's config or launch script ──► its from-* scenario  ┐
            │  (asyncrl.frameworks.registry: verl, OpenRLHF, NeMo-RL)         ├─► scenario (OUT/scenario.yaml)
            └─ an asyncrl scenario (or a shipped name)                        ┘
    --log METRICS (a run of CONFIG's) ─► calibrate --from-log's fit ─► OUT/profile.yaml, the scenario's hardware.profile
    scenario ─► asyncrl size's sizing over its own devices: the sync plans (colocated and split, each engine
                size) and the async ones (the scenario's own schedule when it is async; else one step off and
                streaming) ─► OUT/size.csv, OUT/size.png, the table
             ─► analysis.summaries.verdict: one line, the best async plan against the best sync plan

Nothing here is a second planner: the plans are ``simulator.sweep.simulate_sizing``'s (what ``asyncrl size``
runs), the fit is ``asyncrl.calibration.fit_log``'s (what ``asyncrl calibrate --from-log`` runs).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from asyncrl.scenarios.files.textfile import safe_load
from asyncrl.scenarios.files.writing import write_text
from asyncrl.scenarios.spec.loading import ScenarioError

if TYPE_CHECKING:
    from asyncrl.scenarios.spec.scenario import Scenario

    from asyncrl.frameworks.common.framework import Framework

#: Bounds sized for a synchronous config's async plans: one step off (verl's recipe), streaming at one step.
ASYNC_KINDS = ("pipelined", "streaming")
DEFAULT_BOUND = 1
#: Learner steps each plan is sized over (unless --steps): the verdict compares rates per step, and a run of
#: thousands of steps (a recipe's total_rollout_steps) would only make each plan slower to size.
PLAN_STEPS = 100


@dataclass
class Planned:
    """What ``plan`` builds before sizing: the scenario, where it came from, its file's text (written once the
    plan is sized, so a failed plan leaves no scenario file behind), and what to print about it."""

    scenario: Scenario
    origin: str
    notes: list[str]
    file_text: str | None = None

    def write(self, out: Path) -> list[Path]:
        """OUT/scenario.yaml, each field's source beside it (an imported scenario only)."""
        if self.file_text is None:
            return []
        target = out / "scenario.yaml"
        target.parent.mkdir(parents=True, exist_ok=True)
        write_text(target, self.file_text)
        return [target]


def config_framework(config: str) -> Framework | None:
    """The framework CONFIG is a config or launch script of, from its name and contents; None for a scenario."""
    import yaml

    from asyncrl.frameworks.registry import config_of, launched_by

    path = Path(config)
    if not path.is_file():
        return None  # a shipped scenario's name (load_scenario says so if it is not one)
    if path.suffix in (".yaml", ".yml"):
        try:
            data = safe_load(path.read_text(encoding="utf-8", errors="replace"))
        except yaml.YAMLError:
            return None  # the scenario loader words the YAML error
        if not isinstance(data, dict) or "workload" in data or "schedule" in data:
            return None
        return config_of(data)
    return launched_by(path.read_text(encoding="utf-8", errors="replace"))


def build_scenario(args: argparse.Namespace, out: Path) -> Planned:
    """CONFIG's scenario (for OUT/scenario.yaml, each field's source beside it when imported)."""
    from asyncrl.frameworks.common.provenance import commented_yaml, plan_lines
    from asyncrl.frameworks.registry import importable

    found = config_framework(args.config)
    target = out / "scenario.yaml"
    if found is None:
        return Planned(_own_scenario(args), str(args.config), [])
    framework = importable(found, "CONFIG")
    assert framework.scenario is not None
    if args.lengths is None and args.log is not None and framework.metrics_lengths is not None:
        args.lengths = str(args.log)  # the log's response_length/* pin the lengths, as from-verl --lengths LOG
    # CONFIG as each framework's command takes it: a config file (verl, NeMo-RL) or a script's words (OpenRLHF)
    imported, _ = framework.scenario(_as(args, config=Path(args.config), source=[args.config]), target)
    text = commented_yaml(imported.plan, f"from {imported.origin} by asyncrl plan")
    return Planned(imported.scenario, imported.origin, [plan_lines(imported.plan, framework.setting)], text)


def _own_scenario(args: argparse.Namespace) -> Scenario:
    """An asyncrl scenario as CONFIG, with its overrides; ``--device`` replaces its device."""
    from asyncrl.scenarios.spec.loading import load_scenario, variant

    from asyncrl.frameworks.common.command import device_option

    for flag in ("lengths", "prompt_lengths", "preset"):
        if getattr(args, flag) is not None:
            raise ScenarioError(f"--{flag.replace('_', '-')}: {args.config} is a scenario; set its fields instead")
    scenario = load_scenario(args.config, list(args.assignments))
    device = device_option(args.device)
    return variant(scenario, {"hardware.device": device}) if device is not None else scenario


def _as(args: argparse.Namespace, **changes: Any) -> argparse.Namespace:
    return argparse.Namespace(**{**vars(args), **changes})


def calibrated(
    scenario: Scenario, log: Path, out: Path, progress: Callable[[str], object] | None = None
) -> tuple[Scenario, str]:
    """The scenario with ``hardware.profile`` fitted to ``log`` (OUT/profile.yaml), and the fit's table."""
    from asyncrl.analysis.fits.fit_tables import log_fit_lines
    from asyncrl.scenarios.costs.efficiency import save_efficiency
    from asyncrl.scenarios.spec.loading import variant

    from asyncrl.calibration.fit_log import fit_from_logs

    fit = fit_from_logs(scenario, [log], progress=progress)
    profile = out / "profile.yaml"
    save_efficiency(fit.efficiency, profile, header=f"fitted by asyncrl plan --log {log}")
    return variant(scenario, {"hardware.profile": str(profile.resolve())}), log_fit_lines(
        str(log), fit.rows, fit.terms, fit.notes
    )


def sized_kinds(scenario: Scenario, kinds: list[str] | None, bounds: list[int] | None) -> tuple[list[str], list[int]]:
    """The schedules sized: sync and the scenario's own async schedule at its bound, or (a sync scenario) one
    step off and streaming at one step; ``--kind`` and ``--max-staleness`` replace them (sync is always in)."""
    own = scenario.schedule.kind
    asynchronous = kinds or ([own] if own != "sync" else list(ASYNC_KINDS))
    chosen = ["sync", *(kind for kind in asynchronous if kind != "sync")]
    return chosen, bounds or [scenario.staleness_bound if own != "sync" else DEFAULT_BOUND]


def sizing_steps(scenario: Scenario, steps: int | None) -> tuple[Scenario, str | None]:
    """The scenario with the learner steps each plan is sized over, and a line saying so when they changed."""
    from asyncrl.scenarios.spec.loading import variant

    wanted = steps or min(scenario.run.steps, PLAN_STEPS)
    if wanted == scenario.run.steps:
        return scenario, None
    note = f"sized over {wanted} learner steps of the run's {scenario.run.steps:,} (the verdict compares rates)"
    return variant(scenario, {"run.steps": wanted}), note
