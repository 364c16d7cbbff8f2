"""``asyncrl from-openrlhf``: the scenario of an OpenRLHF launch script, or of its command's words.

from-openrlhf SCRIPT.sh | -- --flag value ...  --device D --lengths L ─► Imported
"""

from __future__ import annotations

import argparse
from pathlib import Path

from asyncrl.scenarios.files.errors import ScenarioError

from asyncrl.frameworks.common.command import Imported, default_file, framework_options, lengths_assumed, settled


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "source",
        nargs="+",
        metavar="SCRIPT | -- COMMAND",
        help="a launch script (its `python3 -m openrlhf.cli.train_ppo_ray …` line is read, the shell variables and "
        "arrays expanded; it is never run), or after `--` the command itself (or just its flags)",
    )
    parser.add_argument("--name", help="scenario name (default: the script's name, else openrlhf)")


def openrlhf_scenario(args: argparse.Namespace, write_relative_to: Path | None) -> tuple[Imported, Path]:
    """The scenario of an OpenRLHF launch script, or of its command's words (``from-openrlhf``)."""
    from asyncrl.frameworks.common.provenance import ImportPlan, SettingsError
    from asyncrl.frameworks.openrlhf.flags import Flags, parse_flags
    from asyncrl.frameworks.openrlhf.importer import plan_from_openrlhf

    words, origin, notes, stem = _openrlhf_words(args.source)
    name = args.name or stem
    out = write_relative_to or default_file(name)
    flags, written = parse_flags(words)
    plan = ImportPlan(scenario={}, framework="OpenRLHF", notes=notes)
    try:
        plan_from_openrlhf(
            Flags(flags, written, plan),
            name=name,
            **framework_options(args, out),
        )
    except SettingsError as exc:
        raise ScenarioError(str(exc)) from None
    lengths_assumed(plan)
    return Imported(settled(plan, out), plan, origin), out


def _openrlhf_words(source: list[str]) -> tuple[list[str], str, list[str], str]:
    """(the flags' words, where they were read, what the script's expansion could not know, a name)."""
    from asyncrl.frameworks.common.launch_script import LaunchScriptError, read_launch_script

    if len(source) == 1 and not source[0].startswith("-"):
        path = Path(source[0])
        if not path.is_file():
            raise ScenarioError(f"SCRIPT: {path}: no such file (or give the command after --)")
        try:
            command = read_launch_script(path, ("openrlhf",))
        except LaunchScriptError as exc:
            raise ScenarioError(str(exc)) from None
        notes = [f"{path}: {', '.join(command.unset)} unset in the script (the environment is not read)"] * bool(
            command.unset
        )
        return command.arguments, f"{path}:{command.line} ({command.module})", notes, path.stem
    start = next(
        (i + 2 for i, word in enumerate(source[:-1]) if word == "-m" and source[i + 1].startswith("openrlhf")), 0
    )
    return source[start:], "the command line", [], "openrlhf"
