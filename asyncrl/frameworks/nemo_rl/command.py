"""``asyncrl from-nemo-rl``: the scenario of a NeMo-RL GRPO config or recipe.

from-nemo-rl CONFIG.yaml [KEY=VALUE ...] --device D --lengths L --prompt-lengths P ─► Imported
"""

from __future__ import annotations

import argparse
from pathlib import Path

from asyncrl.scenarios.files.errors import ScenarioError

from asyncrl.frameworks.common.command import (
    Imported,
    config_arguments,
    default_file,
    framework_options,
    lengths_assumed,
    run_name,
    settled,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    config_arguments(
        parser,
        "CONFIG.yaml",
        "a NeMo-RL config or recipe: its defaults chain is merged and its ${...} filled as NeMo-RL does",
        "overrides, as NeMo-RL's command line takes them (e.g. cluster.num_nodes=4)",
    )
    parser.add_argument("--name", help="scenario name (default: logger.wandb.name, else the file's name)")


def nemo_rl_scenario(args: argparse.Namespace, write_relative_to: Path | None) -> tuple[Imported, Path]:
    """The scenario of a NeMo-RL GRPO config or recipe (``from-nemo-rl``)."""
    from asyncrl.frameworks.common.provenance import SettingsError
    from asyncrl.frameworks.nemo_rl.config import read_nemo_rl_config
    from asyncrl.frameworks.nemo_rl.importer import plan_from_nemo_rl

    config = read_nemo_rl_config(args.config, [str(item) for item in args.assignments])
    wandb = (config.get("logger") or {}).get("wandb") or {}
    name = args.name or run_name(wandb.get("name") if isinstance(wandb, dict) else None, args.config)
    out = write_relative_to or default_file(name)
    try:
        plan = plan_from_nemo_rl(
            config,
            name=name,
            **framework_options(args, out),
        )
    except SettingsError as exc:
        raise ScenarioError(str(exc)) from None
    lengths_assumed(plan)
    return Imported(settled(plan, out), plan, str(args.config)), out
