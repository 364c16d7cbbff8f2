"""Reading a verl config for ``asyncrl from-verl``: its keys, its interpolations, the flags, the report.

    ppo_trainer.yaml + key=value overrides ─┐
    run_recipe.sh (its `python -m verl…` /  ├─► read_verl ─► VerlInput(config over verl's defaults, the keys given)
      `python3 -m recipe…` key=value lines, ┘       ─► Reader.into(asyncrl key, verl key): the value, recorded in
      expanded: scenarios.launch_script)                the plan as that field's source (or verl's default)
    VerlPlan ─► plan_lines: where each field came from, what has no counterpart, what was approximated

A launch script is read, never run (``asyncrl/frameworks/common/launch_script.py``); its keys apply over the defaults of the
module it launches (``asyncrl/frameworks/verl/defaults.py``), then the command line's. The mapping rules that turn the keys into a scenario are in ``asyncrl/frameworks/verl/importer.py`` (cluster, schedule,
workload) and ``asyncrl/frameworks/verl/learner.py`` (algorithm, learner); this module only reads and reports.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from asyncrl.scenarios.files.limits import MAX_SCENARIO_FILE_BYTES
from asyncrl.scenarios.files.textfile import parse_yaml, read_text, safe_load

from asyncrl.frameworks.common.launch_script import LaunchScriptError, read_launch_script
from asyncrl.frameworks.common.provenance import ImportPlan, SettingsError
from asyncrl.frameworks.common.provenance import plan_lines as import_plan_lines
from asyncrl.frameworks.verl.defaults import PPO_TRAINER, base_config, merge
from asyncrl.frameworks.verl.printed import PrintedConfigError, has_printed_config, read_printed_config

#: The modules a verl launch script runs: verl's trainers and recipes, and the recipe folder's own mains.
VERL_MODULES = ("verl", "recipe")
YAML_SUFFIXES = (".yaml", ".yml")
_INTERPOLATION = re.compile(r"^\$\{(?:oc\.select:)?([\w.]+)(?:,(.*))?\}$")


VerlError = SettingsError  # what keeps a verl config from becoming a scenario; one line per problem


VerlPlan = ImportPlan  # the scenario dict, each field's source, what has no counterpart, what was approximated


@dataclass
class VerlInput:
    """A verl config (verl's defaults under what was given), the keys given, and where they were read."""

    config: dict[str, Any]
    given: set[str]
    origin: str  # the file, and for a script the line of its launch command and the module
    notes: list[str] = field(default_factory=list)  # what the script's expansion could not know


def lookup(config: dict[str, Any], dotted: str, default: Any = None, _following: tuple[str, ...] = ()) -> Any:
    """``a.b.c`` of the config, following ``${a.b}`` and ``${oc.select:a.b,default}`` interpolations
    (VerlError naming the keys when they go round in a cycle)."""
    if dotted in _following:
        raise VerlError(
            f"{_following[0]}: its interpolation goes round in a cycle ({' -> '.join([*_following, dotted])})"
        )
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, dict):
            return default
        node = node.get(part, node.get(False) if part == "n" else None)  # YAML 1.1 reads a bare n as false
        if node is None:
            return default
    return _resolved(config, node, default, (*_following, dotted))


def _resolved(config: dict[str, Any], value: Any, default: Any, following: tuple[str, ...]) -> Any:
    if isinstance(value, str):
        match = _INTERPOLATION.match(value.strip())
        if match:
            fallback = _scalar(match.group(2)) if match.group(2) is not None else default
            return lookup(config, match.group(1), fallback, following)
        if value.strip() == "???":  # a mandatory value left unset
            return default
    return value


def _scalar(text: str) -> Any:
    import yaml

    try:
        return safe_load(text)
    except yaml.YAMLError:
        return text


class Reader:
    """Reads verl keys and records which asyncrl field each one fed (and which were verl's defaults)."""

    def __init__(self, config: dict[str, Any], plan: VerlPlan, given: set[str] | None = None) -> None:
        self.config, self.plan, self.given = config, plan, given

    def value(self, key: str, default: Any = None) -> Any:
        self.plan.read.add(key)
        return lookup(self.config, key, default)

    def is_given(self, key: str) -> bool:
        """The key (or a section holding it) was in the config, the script or the overrides."""
        if self.given is None:  # a config read whole: given where it holds the key
            return lookup(self.config, key) is not None
        parts = key.split(".")
        return any(".".join(parts[:size]) in self.given for size in range(1, len(parts) + 1))

    def into(self, target: str, key: str, default: Any = None, convert: Any = None) -> Any:
        """The verl value of ``key`` (converted), recorded as the source of ``target``."""
        raw = self.value(key, default)
        check_value(key, raw)
        value = convert(raw) if convert is not None and raw is not None else raw
        self.plan.source(target, key, raw)
        if not self.is_given(key):
            self.plan.defaulted.add(key)
        return value

    def integer(self, target: str, key: str, default: int | None = None) -> int:
        value = self.into(target, key, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise VerlError(f"{key}: expected an integer, got {value!r}")
        return value


def check_value(key: str, value: Any) -> None:
    """VerlError for a value a scenario field cannot take: an interpolation left unresolved (``${oc.env:...}``
    and other resolvers are not evaluated), or a section where a value belongs."""
    if isinstance(value, str) and "${" in value:
        raise VerlError(
            f"{key}: {value!r} is an interpolation asyncrl does not resolve (it follows ${{a.b}} and "
            "${oc.select:a.b,default}); give the value"
        )
    if isinstance(value, dict | list):
        raise VerlError(f"{key}: expected a value, got a {'mapping' if isinstance(value, dict) else 'list'}")


def read_verl(path: Path, overrides: list[str]) -> VerlInput:
    """A verl trainer config (YAML) or a recipe's launch script, over verl's defaults, with the overrides."""
    notes: list[str] = []
    if path.suffix in YAML_SUFFIXES:
        raw = read_config(path, [])
        config, given, origin = merge(_copy(PPO_TRAINER), raw), dotted_keys(raw), str(path)
    elif path.is_file() and has_printed_config(path):  # a console log: the resolved config the run printed
        # A printed config holds every key its verl had: one it lacks (use_remove_padding before 2025) was off.
        try:
            raw = read_printed_config(path)
        except PrintedConfigError as exc:
            raise VerlError(str(exc)) from None
        given = dotted_keys(raw)
        algorithm = raw.get("algorithm")
        if isinstance(algorithm, dict) and "kl_penalty" in algorithm and "use_kl_in_reward" not in algorithm:
            algorithm["use_kl_in_reward"] = True  # verl before 2025 always put the KL penalty in the reward
        actor = raw.get("actor_rollout_ref", {}).get("actor", {})
        if isinstance(actor, dict) and actor.get("strategy", "fsdp") != "megatron":  # Megatron packs its sequences
            raw.setdefault("actor_rollout_ref", {}).setdefault("model", {}).setdefault("use_remove_padding", False)
        config, origin = merge(_copy(PPO_TRAINER), raw), f"{path} (the config it printed)"
    else:
        config, given, origin, notes = _from_script(path)
    for override in overrides:
        _override(config, override)
        given.add(override.partition("=")[0].lstrip("+~"))
    check_given_types(config, given)
    return VerlInput(config, given, origin, notes)


_MISSING = object()


def check_given_types(config: dict[str, Any], given: set[str]) -> None:
    """VerlError for a key given with a value of another kind than verl's default: a value where verl has a
    section (``trainer=5``), a section or list where it has a value, text where it has a number
    (``clip_ratio=abc``). Without this such a key was listed, then dropped, and verl's defaults under it shown
    as if the config had them."""
    for key in sorted(given):
        default, value = _at(PPO_TRAINER, key), _at(config, key)
        if default is _MISSING or value is _MISSING or value is None:
            continue
        if isinstance(default, dict) and not isinstance(value, dict):
            raise VerlError(f"{key}: a section of verl's config ({', '.join(list(default)[:3])}, ...), got {value!r}")
        if not isinstance(default, dict) and isinstance(value, dict | list) and default is not None:
            raise VerlError(f"{key}: expected a value like verl's default {default!r}, got a {type(value).__name__}")
        if _is_number(default) and isinstance(value, str) and not _number_text(value):
            raise VerlError(f"{key}: expected a number like verl's default {default!r}, got {value!r}")


def _at(config: Any, dotted: str) -> Any:
    node = config
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _number_text(text: str) -> bool:
    """Text verl's config takes for a number: a number YAML 1.1 left as text (``1e-6``), an interpolation, ``???``."""
    stripped = text.strip()
    if stripped.startswith("${") or stripped == "???":
        return True
    try:
        float(stripped)
    except ValueError:
        return False
    return True


def _from_script(path: Path) -> tuple[dict[str, Any], set[str], str, list[str]]:
    """The keys of a launch script's ``python -m verl…`` (or ``recipe…``) command, over its module's defaults."""
    if not path.is_file():
        raise VerlError(f"{path}: no such file")
    try:
        command = read_launch_script(path, VERL_MODULES)
    except LaunchScriptError as exc:
        raise VerlError(f"{exc} (a verl config is a .yaml file)") from None
    config, given, notes = base_config(command.module, command.arguments), set(), []
    for word in command.arguments:
        if word.startswith("-") or "=" not in word:
            continue  # hydra's own flags (--config-path, --config-name), or "$@"
        _override(config, word)
        given.add(word.partition("=")[0].lstrip("+~"))
    if command.unset:
        notes.append(
            f"{path}: {', '.join(command.unset)} unset in the script (the environment is not read): expanded to "
            "nothing, or to the script's ${X:-default}"
        )
    if command.unexpanded:
        notes.append(f"{path}: not run, left as written: {', '.join(dict.fromkeys(command.unexpanded))}")
    return config, given, f"{path}:{command.line} ({command.module})", notes


def dotted_keys(config: dict[str, Any], prefix: str = "") -> set[str]:
    """Every key of a nested config, dotted (sections too)."""
    keys = set()
    for key, value in config.items():
        dotted = f"{prefix}{key}"
        keys.add(dotted)
        if isinstance(value, dict):
            keys |= dotted_keys(value, f"{dotted}.")
    return keys


def _copy(config: dict[str, Any]) -> dict[str, Any]:
    import copy

    return copy.deepcopy(config)


def read_config(path: Path, overrides: list[str]) -> dict[str, Any]:
    """The verl config at ``path`` with ``key=value`` overrides applied (``+key`` and ``++key`` as verl takes them)."""

    if not path.is_file():
        raise VerlError(f"{path}: no such file")
    try:
        config = parse_yaml(read_text(path, MAX_SCENARIO_FILE_BYTES, "a verl config"), path)
    except ValueError as exc:
        raise VerlError(str(exc)) from None
    if not isinstance(config, dict):
        raise VerlError(f"{path}: a verl config is a mapping (data, actor_rollout_ref, trainer, ...)")
    for override in overrides:
        _override(config, override)
    return config


def _override(config: dict[str, Any], override: str) -> None:
    """``key=value`` (``+key``, ``++key``: added or forced) as verl's Hydra command line takes it; ``~key``
    deletes the key."""
    import yaml

    key, _, raw = override.partition("=")
    *parents, leaf = key.lstrip("+~").split(".")
    if key.startswith("~"):
        node = lookup(config, ".".join(parents)) if parents else config
        if isinstance(node, dict):
            node.pop(leaf, None)
        return
    node = config
    for part in parents:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise VerlError(f"{override}: {part} is not a section of the verl config")
        node = child
    try:
        node[leaf] = safe_load(raw)
    except yaml.YAMLError:
        node[leaf] = raw


def plan_lines(plan: VerlPlan) -> str:
    """Where each scenario field came from, what has no counterpart, and what was approximated."""
    return import_plan_lines(plan, "verl key")
