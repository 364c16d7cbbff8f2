"""What every framework's import shares: the flags for what its settings do not say, and the imported scenario.

    from-<framework> ... --device D --lengths L [--prompt-lengths P] [--preset P]   (framework_arguments)
        ─► the framework's scenario(args) ─► Imported(scenario, plan, origin), settled to what the KV cache holds

``asyncrl plan`` asks the same of a framework, without writing the scenario unless asked.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from asyncrl.scenarios.files.errors import ScenarioError
from asyncrl.scenarios.files.textfile import safe_load
from asyncrl.scenarios.record.outputs import safe_file_name

#: The 95% range of the completion lengths' scale where ``--lengths`` is a distribution someone wrote down
#: rather than one measured (a lengths file, rollout dumps) or fitted to a log: half to twice it. verl's fully
#: async case goes from async 1.9x faster to slower than sync between medians of 600 and 1,500 tokens.
ASSUMED_LENGTH_RANGE = (0.5, 2.0)


#: A dotted override, as the scenario commands and the frameworks' own command lines write one (``a.b=1``,
#: Hydra's ``+a.b=1`` and ``++a.b=1``).
ASSIGNMENT = re.compile(r"^\+{0,2}[A-Za-z_][\w-]*(\.[\w-]+)*=")


def assignment(text: str) -> str:
    """A bare override given as a positional argument."""
    if not ASSIGNMENT.match(text):
        raise argparse.ArgumentTypeError(f"expected dotted.key=value, got {text!r}")
    return text


def config_arguments(parser: argparse.ArgumentParser, metavar: str, config_help: str, overrides_help: str) -> None:
    """A framework's config file and its KEY=VALUE overrides, as its own command line takes them."""
    parser.add_argument("config", type=Path, metavar=metavar, help=config_help)
    parser.add_argument("assignments", nargs="*", type=assignment, metavar="KEY=VALUE", help=overrides_help)


def framework_arguments(parser: argparse.ArgumentParser, config: str) -> None:
    """What a framework's settings do not say, asked for with flags (``from-*``, ``plan``)."""
    parser.add_argument(
        "--lengths",
        metavar="FILE|DIST",
        help="completion lengths: a lengths file or JSONL log (see asyncrl lengths), a verl metrics log (a "
        "lognormal fitted to its response_length/*), or a distribution such as '{kind: lognormal, median: 800, "
        "sigma: 1}'; capped at the config's response cap",
    )
    parser.add_argument(
        "--prompt-lengths", metavar="FILE|DIST", help="prompt lengths (default: every prompt at the cap)"
    )
    parser.add_argument(
        "--device",
        help=f"the GPU ({config} does not say): a catalogue name (h100, a100-80g, h200, gb200, ...; asyncrl list), "
        "or its datasheet figures, e.g. '{name: my-gpu, peak_tflops: 989, hbm_gb: 80, hbm_gbps: 3350, nvlink_gbps: 450}'",
    )
    parser.add_argument("--preset", help="model preset, where the model path is neither a preset's name nor local")


@dataclass
class Imported:
    """A scenario imported from a framework's settings: the validated scenario, its plan, and the file header."""

    scenario: Any  # Scenario
    plan: Any  # ImportPlan
    origin: str


def default_file(name: str) -> Path:
    """``<name>.yaml`` in the working directory, the name made one safe component (``../victim/user``, an
    absolute path: ``victim-user.yaml``), so a config's experiment name never chooses where asyncrl writes."""
    return Path(safe_file_name(name) + ".yaml")


def run_name(experiment: Any, config: Path) -> str:
    """trainer.experiment_name, unless unset or made by a command the script was not run for: the file's name."""
    text = str(experiment or "")
    return text if text and "$(" not in text and "`" not in text else config.stem


def framework_options(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """What ``framework_arguments`` asked for, as an importer's keywords (lengths files relative to ``out``)."""
    from asyncrl.frameworks.common.importing import lengths_option

    return {
        "device": device_option(args.device),
        "completion_tokens": lengths_option(args.lengths, "--lengths", out.parent),
        "prompt_tokens": lengths_option(args.prompt_lengths, "--prompt-lengths", out.parent),
        "preset": args.preset,
    }


def device_option(text: str | None) -> str | dict[str, Any] | None:
    """``--device``: a catalogue name, or a mapping of datasheet figures written as YAML (``{peak_tflops: …}``)."""
    import yaml

    if text is None or not text.lstrip().startswith("{"):
        return text
    try:
        value = safe_load(text)
    except yaml.YAMLError:
        value = None
    if not isinstance(value, dict):
        raise ScenarioError(f"--device: {text!r} is neither a device name nor a mapping of its datasheet figures")
    return value


def lengths_assumed(plan: Any) -> None:
    """``workload.length_range`` for lengths given as a distribution: the answers' intervals carry it."""
    completion = plan.scenario.get("workload", {}).get("completion_tokens")
    if not isinstance(completion, dict) or completion.get("kind") == "empirical":
        return
    plan.scenario["workload"]["length_range"] = list(ASSUMED_LENGTH_RANGE)
    plan.source("workload.length_range", "--lengths", "a distribution, not measured: half to twice it (95%)")


def settled(plan: Any, out: Path) -> Any:
    """The scenario, validated again when the engines' concurrency had to come down to what the KV cache holds."""
    from asyncrl.scenarios.spec.loading import validate_scenario

    from asyncrl.frameworks.common.importing import settle_concurrency

    scenario = validate_scenario(plan.scenario, base_dir=out.parent.resolve())
    if settle_concurrency(plan, scenario):
        return validate_scenario(plan.scenario, base_dir=out.parent.resolve())
    return scenario
