"""A NeMo-RL config read as NeMo-RL reads it: the ``defaults:`` chain merged, overrides applied, ``${...}`` filled.

    recipe.yaml ─defaults─► parent.yaml ─defaults─► grpo_math_1B.yaml
        each file over its parents (its own keys win; a list of defaults merges in order)
        ─► KEY=VALUE overrides (dotted keys, YAML values, as NeMo-RL's command line takes them)
        ─► interpolations: ${a.b} (another key's value) and NeMo-RL's resolvers ${mul:x,y}, ${add:x,y},
           ${div:x,y}, ${max:x,y} (``nemo_rl/utils/config.py``), nested as NeMo-RL writes them

What is read is plain data: no file is run and nothing is imported. An interpolation that cannot be filled
(an environment variable, an unknown resolver, a missing key) stays as written; the mapping reports it only
if it reads that key.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from asyncrl.scenarios.files.errors import ScenarioError
from asyncrl.scenarios.files.limits import MAX_SCENARIO_FILE_BYTES
from asyncrl.scenarios.files.textfile import parse_yaml, read_text, safe_load

#: Parents a chain of ``defaults:`` may have before it is taken for a cycle.
MAX_DEPTH = 16
RESOLVERS = {
    "add": lambda a, b: a + b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "max": lambda a, b: max(a, b),
}
_WHOLE = re.compile(r"^\$\{(.*)\}$", re.DOTALL)


def read_nemo_rl_config(path: Path, overrides: list[str] | None = None) -> dict[str, Any]:
    """The resolved config of ``path`` with ``overrides`` (``key.path=value``) applied."""
    config = _with_defaults(path, depth=0)
    for override in overrides or []:
        key, value = _override(override)
        _assign(config, key, value)
    return _resolve(config, config, depth=0)


def _load(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ScenarioError(f"{path}: no such file")
    try:
        data = parse_yaml(read_text(path, MAX_SCENARIO_FILE_BYTES, "a NeMo-RL config"), path)
    except ValueError as exc:
        raise ScenarioError(str(exc)) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ScenarioError(f"{path}: a NeMo-RL config is a mapping, not {type(data).__name__}")
    return data


def _with_defaults(path: Path, depth: int) -> dict[str, Any]:
    if depth > MAX_DEPTH:
        raise ScenarioError(f"{path}: defaults nest more than {MAX_DEPTH} deep (a cycle?)")
    config = _load(path)
    parents = config.pop("defaults", None)
    if parents is None:
        return config
    names = [parents] if isinstance(parents, str) else parents
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        raise ScenarioError(f"{path}: defaults: expected a file name or a list of them, got {parents!r}")
    merged: dict[str, Any] = {}
    for name in names:
        merged = _merge(merged, _with_defaults((path.parent / name).resolve(), depth + 1))
    return _merge(merged, config)


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``over`` onto ``base``, mapping by mapping (a value that is not a mapping replaces)."""
    merged = dict(base)
    for key, value in over.items():
        below = merged.get(key)
        merged[key] = _merge(below, value) if isinstance(below, dict) and isinstance(value, Mapping) else value
    return merged


def _override(text: str) -> tuple[str, Any]:
    import yaml

    key, sep, raw = text.lstrip("+").partition("=")
    if not sep or not key:
        raise ScenarioError(f"{text}: an override is key.path=value")
    try:
        return key, safe_load(raw) if raw else None
    except yaml.YAMLError:
        return key, raw


def _assign(config: dict[str, Any], key: str, value: Any) -> None:
    node = config
    *parents, last = key.split(".")
    for part in parents:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[last] = value


def _resolve(value: Any, root: Mapping[str, Any], depth: int) -> Any:
    if isinstance(value, dict):
        return {key: _resolve(item, root, depth) for key, item in value.items()}
    if isinstance(value, list):
        return [_resolve(item, root, depth) for item in value]
    if isinstance(value, str) and "${" in value:
        return _interpolate(value, root, depth)
    return value


def _interpolate(text: str, root: Mapping[str, Any], depth: int) -> Any:
    """A string holding ``${...}``: the value itself when the string is one interpolation, else the text with
    each filled in; what cannot be filled stays as written."""
    if depth > MAX_DEPTH:
        return text
    whole = _WHOLE.match(text)
    if whole and _balanced(whole.group(1)):
        found = _evaluate(whole.group(1), root, depth)
        return text if found is None else found
    pieces, index = [], 0
    while (start := text.find("${", index)) >= 0:
        end = _closing(text, start + 2)
        if end < 0:
            break
        found = _evaluate(text[start + 2 : end], root, depth)
        pieces.append(text[index:start] + (text[start : end + 1] if found is None else str(found)))
        index = end + 1
    return "".join(pieces) + text[index:]


def _evaluate(body: str, root: Mapping[str, Any], depth: int) -> Any:
    """One interpolation's body: ``a.b`` or ``resolver:arg,arg``; None if it cannot be filled."""
    name, sep, args = body.partition(":")
    if sep:
        resolver = RESOLVERS.get(name.strip())
        values = [_interpolate(arg.strip(), root, depth + 1) for arg in _split_arguments(args)]
        numbers = [value for value in values if isinstance(value, int | float) and not isinstance(value, bool)]
        if resolver is None or len(numbers) != 2 or len(values) != 2:
            return None
        return resolver(*numbers)
    node: Any = root
    for part in body.strip().split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return _resolve(node, root, depth + 1)


def _split_arguments(args: str) -> list[str]:
    """Arguments split at the commas outside nested ``${...}``."""
    parts, level, current = [], 0, ""
    for char in args:
        level += (char == "{") - (char == "}")
        if char == "," and level == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    return [*parts, current]


def _closing(text: str, start: int) -> int:
    """Index of the brace closing the ``${`` opened just before ``start``, or -1."""
    level = 1
    for index in range(start, len(text)):
        level += (text[index] == "{") - (text[index] == "}")
        if level == 0:
            return index
    return -1


def _balanced(body: str) -> bool:
    return _closing(body + "}", 0) == len(body)
