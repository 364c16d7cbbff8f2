"""``asyncrl plan``: should this run switch to asynchronous training, on which split, how stale will samples be?

    CONFIG ─┬─ a verl config or launch script ──► from-verl's scenario  ┐
            ├─ an OpenRLHF launch script     ──► from-openrlhf's       ├─► scenario (OUT/scenario.yaml)
            └─ an asyncrl scenario (or a shipped name)                 ┘
    --log METRICS (a run of CONFIG's) ─► calibrate --from-log's fit ─► OUT/profile.yaml, the scenario's hardware.profile
    scenario ─► asyncrl size's sizing over its own devices: the sync plans (colocated and split, each engine
                size) and the async ones (the scenario's own schedule when it is async; else one step off and
                streaming) ─► OUT/size.csv, OUT/size.png, the table
             ─► analysis.verdict: one line, the best async plan against the best sync plan

Nothing here is a second planner: the plans are ``simulator.sweep.simulate_sizing``'s (what ``asyncrl size``
runs), the fit is ``asyncrl.fit_log``'s (what ``asyncrl calibrate --from-log`` runs).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from asyncrl.scenarios.loading import ScenarioError
from asyncrl.scenarios.textfile import safe_load
from asyncrl.scenarios.writing import write_text

if TYPE_CHECKING:
    from asyncrl.scenarios.scenario import Scenario

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


def config_kind(config: str) -> str:
    """``verl``, ``openrlhf`` or ``scenario``: what CONFIG is, from its name and contents."""
    import yaml

    path = Path(config)
    if not path.is_file():
        return "scenario"  # a shipped scenario's name (load_scenario says so if it is not one)
    if path.suffix in (".yaml", ".yml"):
        try:
            data = safe_load(path.read_text(encoding="utf-8", errors="replace"))
        except yaml.YAMLError:
            return "scenario"  # the scenario loader words the YAML error
        return "scenario" if isinstance(data, dict) and ("workload" in data or "schedule" in data) else "verl"
    text = path.read_text(encoding="utf-8", errors="replace")
    return "openrlhf" if "openrlhf." in text and "-m verl" not in text and "-m recipe" not in text else "verl"


def build_scenario(args: argparse.Namespace, out: Path) -> Planned:
    """CONFIG's scenario (for OUT/scenario.yaml, each field's source beside it when imported)."""
    from asyncrl.commands.importers import openrlhf_scenario, verl_scenario
    from asyncrl.scenarios.provenance import commented_yaml, plan_lines

    kind = config_kind(args.config)
    target = out / "scenario.yaml"
    if kind == "scenario":
        return Planned(_own_scenario(args), str(args.config), [])
    if args.lengths is None and args.log is not None and kind == "verl":
        args.lengths = str(args.log)  # the log's response_length/* pin the lengths, as from-verl --lengths LOG
    if kind == "verl":
        imported, _ = verl_scenario(_as(args, config=Path(args.config)), write_relative_to=target)
    else:
        imported, _ = openrlhf_scenario(_as(args, source=[args.config]), write_relative_to=target)
    setting = "verl key" if imported.plan.framework == "verl" else "flag"
    text = commented_yaml(imported.plan, f"from {imported.origin} by asyncrl plan")
    return Planned(imported.scenario, imported.origin, [plan_lines(imported.plan, setting)], text)


def _own_scenario(args: argparse.Namespace) -> Scenario:
    """An asyncrl scenario as CONFIG, with its overrides; ``--device`` replaces its device."""
    from asyncrl.commands.importers import device_option
    from asyncrl.scenarios.loading import load_scenario, variant

    for flag in ("lengths", "prompt_lengths", "preset"):
        if getattr(args, flag) is not None:
            raise ScenarioError(f"--{flag.replace('_', '-')}: {args.config} is a scenario; set its fields instead")
    scenario = load_scenario(args.config, list(args.assignments))
    device = device_option(args.device)
    return variant(scenario, {"hardware.device": device}) if device is not None else scenario


def _as(args: argparse.Namespace, **changes: Any) -> argparse.Namespace:
    return argparse.Namespace(**{**vars(args), **changes})


def calibrated(scenario: Scenario, log: Path, out: Path, quiet: bool) -> tuple[Scenario, str]:
    """The scenario with ``hardware.profile`` fitted to ``log`` (OUT/profile.yaml), and the fit's table."""
    from asyncrl.analysis.fit_tables import log_fit_lines
    from asyncrl.commands.common import progress
    from asyncrl.fit_log import fit_from_logs
    from asyncrl.scenarios.efficiency import save_efficiency
    from asyncrl.scenarios.loading import variant

    with progress(None, "fitting", "look", quiet) as bar:
        fit = fit_from_logs(scenario, [log], progress=lambda label: (bar.set_postfix_str(label[-40:]), bar.update()))
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
    from asyncrl.scenarios.loading import variant

    wanted = steps or min(scenario.run.steps, PLAN_STEPS)
    if wanted == scenario.run.steps:
        return scenario, None
    note = f"sized over {wanted} learner steps of the run's {scenario.run.steps:,} (the verdict compares rates)"
    return variant(scenario, {"run.steps": wanted}), note
