"""Reading scenario files: paths or shipped names, dotted overrides, readable errors.

    "quickstart" or "my.yaml" ─► YAML dict ─► --set overrides ─► Scenario.model_validate
                                                                  │
                                      ScenarioError("workload.completion_tokens.sigma: ...")

Every failure becomes one ``ScenarioError`` whose message starts with the
field's dotted path, so the command line can print it and exit with status 2.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, get_args

import yaml
from pydantic import BaseModel, ValidationError

from ..files.errors import ScenarioError
from ..files.limits import MAX_SCENARIO_FILE_BYTES
from ..files.textfile import parse_yaml, read_text, safe_load
from .scenario import PipelinedSchedule, Scenario, StreamingSchedule, SyncSchedule

SHIPPED_DIR = Path(__file__).resolve().parent.parent  # scenarios/*.yaml

#: Tags of tagged unions: pydantic puts them in error paths; people do not write them.
_UNION_TAGS = {"sync", "pipelined", "streaming", "fixed", "lognormal", "pareto", "empirical", "catalogue", "datasheet"}
_SCHEDULE_FIELDS = {
    get_args(cls.model_fields["kind"].annotation)[0]: set(cls.model_fields)
    for cls in (SyncSchedule, PipelinedSchedule, StreamingSchedule)
}


def shipped_scenarios() -> dict[str, Path]:
    """Scenario files that ship with asyncrl, by name."""
    return {path.stem: path for path in sorted(SHIPPED_DIR.glob("*.yaml"))}


def resolve_path(name_or_path: str | Path) -> Path:
    """A file path as given, else the shipped scenario of that name."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    shipped = shipped_scenarios()
    stem = path.stem if path.suffix in (".yaml", ".yml") else path.name
    if stem in shipped and len(path.parts) <= 2:
        return shipped[stem]
    known = ", ".join(shipped) or "none"
    raise ScenarioError(f"scenario file not found: {name_or_path} (shipped scenarios: {known})")


def load_scenario(name_or_path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Scenario:
    """Load, override and validate a scenario file; raise ScenarioError on bad input."""
    path = resolve_path(name_or_path)
    try:
        data = parse_yaml(read_text(path, MAX_SCENARIO_FILE_BYTES, "a scenario file"), path)
    except ValueError as exc:
        raise ScenarioError(str(exc)) from None
    if not isinstance(data, dict):
        raise ScenarioError(f"{path}: a scenario file is a mapping of sections (model, hardware, ...)")
    for override in overrides:
        apply_override(data, _from_working_dir(override))
    return validate_scenario(data, base_dir=path.resolve().parent)


# Path fields: written in a scenario file they are relative to that file; given with --set, to the working
# directory, as every other path on a command line is. (model.path may also be a hub name: only an existing
# directory is made absolute.)
_PATH_KEYS = {"hardware.profile": False, "workload.prompts": False, "model.path": True}


def _from_working_dir(override: str) -> str:
    """``--set KEY=PATH`` with a relative PATH made absolute against the working directory."""
    key, _, raw = override.partition("=")
    if key not in _PATH_KEYS or not isinstance(_yaml_value(raw), str) or Path(raw).is_absolute():
        return override  # not a path key, or null / a number: validation says what is wrong with it
    path = Path.cwd() / raw
    if _PATH_KEYS[key] and not path.exists():
        return override
    return f"{key}={path.resolve()}"


def validate_scenario(data: dict[str, Any], base_dir: Path | None = None) -> Scenario:
    """Validate a scenario dict; relative paths inside resolve against ``base_dir``."""
    try:
        return Scenario.model_validate(data, context={"base_dir": base_dir or Path.cwd()})
    except ValidationError as exc:
        raise ScenarioError(describe_validation_errors(exc)) from None


def describe_validation_error(exc: ValidationError) -> str:
    """The first error as ``dotted.field: message``."""
    error = exc.errors()[0]
    path = ".".join(str(part) for part in error["loc"] if part not in _UNION_TAGS)
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        message = "not a setting here" + _kind_hint(error["loc"])
    if error["type"] == "union_tag_invalid":
        path = f"{path}.kind" if path else "kind"
    field, _, rest = message.partition(": ")
    if error["type"] == "value_error" and rest and field.replace("_", "").isalpha():
        path, message = f"{path}.{field}" if path else field, rest  # a section check naming its field
    return f"{path}: {message}" if path else message


def describe_validation_errors(exc: ValidationError) -> str:
    """Every error, one ``dotted.field: message`` line each, with a did-you-mean where a close name exists."""
    lines = [_describe_one(error) for error in exc.errors()]
    return "\n".join(dict.fromkeys(lines))


def _describe_one(error: Any) -> str:
    """One error as ``describe_validation_error`` words it, plus a did-you-mean for a mistyped name."""
    line = describe_validation_error(_OneError(error))  # type: ignore[arg-type]
    return line + _suggestion(error)


class _OneError:
    """One error of a ValidationError, read the way ``describe_validation_error`` reads the first."""

    def __init__(self, error: Any) -> None:
        self.error = error

    def errors(self) -> list[Any]:
        return [self.error]


def _suggestion(error: Any) -> str:
    """``; did you mean X?`` for an unknown key, a value outside a fixed set, or an unknown schedule kind."""
    if error["type"] == "extra_forbidden":
        word, candidates = str(error["loc"][-1]), _keys_at(error["loc"][:-1])
    elif error["type"] == "literal_error":
        word, candidates = str(error["input"]), re.findall(r"'([^']*)'", error["ctx"]["expected"])
    elif error["type"] == "union_tag_invalid":
        word, candidates = str(error["ctx"]["tag"]), re.findall(r"'([^']*)'", error["ctx"]["expected_tags"])
    else:
        return ""
    return did_you_mean(word, candidates)


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """``; did you mean X?`` for the closest candidate, or nothing when none is close (short words: closer)."""
    cutoff = 0.8 if len(word) <= 4 else 0.6
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=cutoff)
    return f"; did you mean {close[0]}?" if close else ""


def _keys_at(loc: tuple[Any, ...]) -> list[str]:
    """The keys the section at ``loc`` accepts (a tagged union's member picked by its tag)."""
    node: Any = Scenario
    for part in loc:
        models = _models(node)
        tagged = [m for m in models if "kind" in m.model_fields and part in get_args(m.model_fields["kind"].annotation)]
        if tagged:
            node = tagged[0]
            continue
        fields = [m.model_fields[part] for m in models if part in m.model_fields]
        if not fields:
            return []
        node = fields[0].annotation
    return sorted({name for model in _models(node) for name in model.model_fields})


def _models(node: Any) -> list[type[BaseModel]]:
    """The pydantic models in an annotation: itself, or the members of a union."""
    members = get_args(node) or (node,)
    return [m for m in members if isinstance(m, type) and issubclass(m, BaseModel)]


def _kind_hint(loc: tuple[Any, ...]) -> str:
    tags = [part for part in loc if part in _SCHEDULE_FIELDS]
    if not tags:
        return ""
    owners = sorted(kind for kind, fields in _SCHEDULE_FIELDS.items() if loc[-1] in fields)
    if owners:
        return f" (the {tags[0]} schedule has no {loc[-1]}; {' and '.join(owners)} do)"
    return ""


def _yaml_value(raw: str) -> Any:
    """A ``--set`` value as YAML reads it; text that is not YAML stays text."""
    try:
        return safe_load(raw)
    except yaml.YAMLError:
        return raw


def apply_override(data: dict[str, Any], override: str) -> None:
    """Apply ``dotted.key=value`` in place; the value is parsed as YAML (``set_field``)."""
    key, sep, raw = override.partition("=")
    if not sep or not all(key.split(".")):
        raise ScenarioError(f"overrides {override}: expected dotted.key=value")
    set_field(data, key, _yaml_value(raw), about=f"overrides {override}")


def set_field(data: dict[str, Any], key: str, value: Any, about: str | None = None) -> None:
    """Set the field at the dotted ``key`` of scenario data in place, making sections that are missing.

    Setting ``schedule.kind`` drops the schedule settings the new kind does not have, so
    ``schedule.kind=sync`` works on any scenario. ``about`` heads the error (default: the key).
    """
    *parents, leaf = key.split(".")
    node = data
    for part in parents:
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise ScenarioError(f"{about or key}: {part} is not a section")
        node = child
    node[leaf] = value
    if parents == ["schedule"] and leaf == "kind" and value in _SCHEDULE_FIELDS:
        for name in [name for name in node if name not in _SCHEDULE_FIELDS[value]]:
            del node[name]


def variant(scenario: Scenario, changes: Mapping[str, Any] | Sequence[str] = ()) -> Scenario:
    """A copy of ``scenario`` with some fields changed, validated again: the one way to make a variant.

    ``changes`` maps dotted keys to values (``{"schedule.kind": "sync", "run.steps": 8}``), applied in order,
    or is a list of ``key=value`` overrides as ``--set`` takes them (values parsed as YAML).
    """
    data = scenario.model_dump(mode="json")
    if isinstance(changes, Mapping):
        for key, value in changes.items():
            set_field(data, key, value)
    else:
        for override in changes:
            apply_override(data, override)
    return validate_scenario(data)


def dump_scenario(scenario: Scenario) -> str:
    """The scenario as YAML, defaults included, in section order."""
    return yaml.safe_dump(scenario.model_dump(mode="json"), sort_keys=False)
