"""A scenario imported from a framework's settings, with where each field came from.

    framework settings (verl keys, OpenRLHF flags) ─► ImportPlan
        .scenario   the scenario dict
        .sources    (scenario field, framework setting or flag, value): one or more per field
        .unmapped   (setting, value, why): what a scenario has no counterpart for
        .notes      what was approximated, and how
    ImportPlan ─► plan_lines: the provenance table a command prints
               ─► commented_yaml: the scenario file, each field's line ending in ``# <- setting = value``
               ─► unsourced: the fields no source names (none, for a complete import: tests check it)

Shared by ``asyncrl from-verl`` (``asyncrl/frameworks/verl/importer.py``) and ``asyncrl from-openrlhf``
(``asyncrl/frameworks/openrlhf/importer.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


class SettingsError(ValueError):
    """What keeps a framework's settings from becoming a scenario; one line per problem."""


@dataclass
class ImportPlan:
    """The scenario dict, where each field came from, and what was left out or approximated."""

    scenario: dict[str, Any]
    sources: list[tuple[str, str, Any]] = field(default_factory=list)  # (scenario field, setting, value)
    unmapped: list[tuple[str, Any, str]] = field(default_factory=list)  # (setting, value, why)
    notes: list[str] = field(default_factory=list)
    defaulted: set[str] = field(default_factory=set)  # settings read from the framework's defaults
    read: set[str] = field(default_factory=set)  # every setting the import looked at
    framework: str = "verl"

    def source(self, target: str, setting: str, value: Any) -> None:
        """Record ``setting = value`` as (one of) the source(s) of the scenario field ``target``."""
        self.sources.append((target, setting, value))


def plan_lines(plan: ImportPlan, setting: str = "verl key") -> str:
    """Where each scenario field came from, what has no counterpart, and what was approximated."""
    width = max(len(target) for target, _, _ in plan.sources)
    lines = [f"from {plan.framework} (scenario key <- {setting} = value):"]
    lines += [f"  {target.ljust(width)} <- {_said(plan, key, value)}" for target, key, value in plan.sources]
    if plan.unmapped:
        lines.append("no counterpart in a scenario (not modelled):")
        lines += [f"  {key} = {show(value)}: {why}" for key, value, why in plan.unmapped]
    if plan.notes:
        lines.append("approximated:")
        lines += [f"  {note}" for note in plan.notes]
    return "\n".join(lines)


def _said(plan: ImportPlan, key: str, value: Any) -> str:
    return f"{key} = {show(value)}" + (f" ({plan.framework}'s default)" if key in plan.defaulted else "")


def show(value: Any) -> str:
    """A setting's value as a line shows it (a mapping as ``{key: value, ...}``)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key}: {show(item)}" for key, item in value.items()) + "}"
    return "unset" if value is None else str(value)


def leaves(data: dict[str, Any], prefix: str = "") -> list[str]:
    """The dotted fields of a scenario dict (a length distribution is one field)."""
    found = []
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and not ("kind" in value and prefix.startswith("workload")):
            found += leaves(value, f"{dotted}.")
        else:
            found.append(dotted)
    return found


def unsourced(plan: ImportPlan) -> list[str]:
    """The scenario's fields that no source names (itself, a field inside it, or the section it is in)."""
    targets = {target for target, _, _ in plan.sources}
    return [
        name
        for name in leaves(plan.scenario)
        if not any(
            target == name or target.startswith(f"{name}.") or name.startswith(f"{target}.") for target in targets
        )
    ]


def commented_yaml(plan: ImportPlan, header: str) -> str:
    """The scenario as YAML, each field's line ending in where it came from (``# <- setting = value``)."""
    lines = [f"# {header}"]
    for section, value in plan.scenario.items():
        if not isinstance(value, dict):
            lines.append(f"{section}: {_flow(value)}{_comment(plan, section)}")
            continue
        lines.append(f"{section}:")
        for name, item in value.items():
            lines.append(f"  {name}: {_flow(item)}{_comment(plan, f'{section}.{name}')}")
    return "\n".join(lines) + "\n"


def _comment(plan: ImportPlan, name: str) -> str:
    said = [
        _said(plan, key, value)
        for target, key, value in plan.sources
        if target == name or target.startswith(f"{name}.") or name.startswith(f"{target}.")
    ]
    return f"  # <- {'; '.join(dict.fromkeys(said))}" if said else ""


def _flow(value: Any) -> str:
    """One value as YAML on one line (a mapping in flow style)."""
    import yaml

    text = yaml.safe_dump({"x": value}, default_flow_style=True, width=1 << 16, allow_unicode=True, sort_keys=False)
    return text.strip()[len("{x: ") : -1]


def reason_for(name: str, table: dict[str, str]) -> str | None:
    """The reason a table gives for a setting: its own entry, or a prefix's (an entry ending in "." or "_")."""
    for prefix, why in table.items():
        if name == prefix or (prefix.endswith((".", "_")) and name.startswith(prefix)):
            return why
    return None
