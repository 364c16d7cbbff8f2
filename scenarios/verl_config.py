"""Reading a verl config for ``asyncrl from-verl``: its keys, its interpolations, the flags, the report.

    ppo_trainer.yaml + key=value overrides ─► read_config ─► config dict
        ─► Reader.into(asyncrl key, verl key): the value, recorded in the VerlPlan as that field's source
    VerlPlan ─► plan_lines: where each field came from, what has no counterpart, what was approximated

The mapping rules that turn the keys into a scenario are in ``scenarios/verl.py`` (cluster, schedule,
workload) and ``scenarios/verl_learner.py`` (algorithm, learner); this module only reads and reports.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_INTERPOLATION = re.compile(r"^\$\{(?:oc\.select:)?([\w.]+)(?:,(.*))?\}$")


class VerlError(ValueError):
    """What keeps a verl config from becoming a scenario; one line per problem."""


@dataclass
class VerlPlan:
    """The scenario dict, where each field came from, and what was left out or approximated."""

    scenario: dict[str, Any]
    sources: list[tuple[str, str, Any]] = field(default_factory=list)  # (asyncrl key, verl key, value)
    unmapped: list[tuple[str, Any, str]] = field(default_factory=list)  # (verl key, value, why)
    notes: list[str] = field(default_factory=list)


def lookup(config: dict[str, Any], dotted: str, default: Any = None) -> Any:
    """``a.b.c`` of the config, following ``${a.b}`` and ``${oc.select:a.b,default}`` interpolations."""
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, dict):
            return default
        node = node.get(part, node.get(False) if part == "n" else None)  # YAML 1.1 reads a bare n as false
        if node is None:
            return default
    return _resolved(config, node, default)


def _resolved(config: dict[str, Any], value: Any, default: Any) -> Any:
    if isinstance(value, str):
        match = _INTERPOLATION.match(value.strip())
        if match:
            fallback = _scalar(match.group(2)) if match.group(2) is not None else default
            return lookup(config, match.group(1), fallback)
        if value.strip() == "???":  # a mandatory value left unset
            return default
    return value


def _scalar(text: str) -> Any:
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


class Reader:
    """Reads verl keys and records which asyncrl field each one fed."""

    def __init__(self, config: dict[str, Any], plan: VerlPlan) -> None:
        self.config, self.plan = config, plan

    def value(self, key: str, default: Any = None) -> Any:
        return lookup(self.config, key, default)

    def into(self, target: str, key: str, default: Any = None, convert: Any = None) -> Any:
        """The verl value of ``key`` (converted), recorded as the source of ``target``."""
        raw = self.value(key, default)
        value = convert(raw) if convert is not None and raw is not None else raw
        self.plan.sources.append((target, key, raw))
        return value

    def integer(self, target: str, key: str, default: int | None = None) -> int:
        value = self.into(target, key, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise VerlError(f"{key}: expected an integer, got {value!r}")
        return value


def read_config(path: Path, overrides: list[str]) -> dict[str, Any]:
    """The verl config at ``path`` with ``key=value`` overrides applied (``+key`` and ``++key`` as verl takes them)."""
    import yaml

    if not path.is_file():
        raise VerlError(f"{path}: no such file")
    try:
        config = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise VerlError(f"{path}: not valid YAML ({' '.join(str(exc).split())})") from None
    if not isinstance(config, dict):
        raise VerlError(f"{path}: a verl config is a mapping (data, actor_rollout_ref, trainer, ...)")
    for override in overrides:
        _override(config, override)
    return config


def _override(config: dict[str, Any], override: str) -> None:
    import yaml

    key, _, raw = override.partition("=")
    *parents, leaf = key.lstrip("+").split(".")
    node = config
    for part in parents:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise VerlError(f"{override}: {part} is not a section of the verl config")
        node = child
    try:
        node[leaf] = yaml.safe_load(raw)
    except yaml.YAMLError:
        node[leaf] = raw


def lengths_option(text: str | None, flag: str, out_dir: Path) -> dict[str, Any] | None:
    """``--lengths``: a lengths file or JSONL log (kind: empirical, its path relative to the scenario), or a
    distribution written as YAML (``{kind: lognormal, median: 800, sigma: 1}``). A verl metrics log never
    gets here: the command fits it first (``analysis.lengths.verl_metrics_fit``; scenarios imports no analysis)."""
    import os

    import yaml

    if text is None:
        return None
    path = Path(text).expanduser()
    if path.is_file():
        return {"kind": "empirical", "path": os.path.relpath(path.resolve(), out_dir.resolve())}
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        value = None
    if not isinstance(value, dict) or "kind" not in value:
        raise VerlError(
            f"{flag}: {text!r} is neither a file nor a distribution like '{{kind: lognormal, median: 800, sigma: 1}}'"
        )
    return value


def plan_lines(plan: VerlPlan) -> str:
    """Where each scenario field came from, what has no counterpart, and what was approximated."""
    width = max(len(target) for target, _, _ in plan.sources)
    lines = ["from verl (scenario key <- verl key = value):"]
    lines += [f"  {target.ljust(width)} <- {key} = {_show(value)}" for target, key, value in plan.sources]
    if plan.unmapped:
        lines.append("no counterpart in a scenario (not modelled):")
        lines += [f"  {key} = {_show(value)}: {why}" for key, value, why in plan.unmapped]
    if plan.notes:
        lines.append("approximated:")
        lines += [f"  {note}" for note in plan.notes]
    return "\n".join(lines)


def _show(value: Any) -> str:
    return "unset" if value is None else str(value)
