"""``asyncrl from-verl``, ``from-openrlhf``, ``from-nemo-rl``: the scenario of a run a framework user launches.

    from-verl CONFIG.yaml|SCRIPT.sh [KEY=VALUE ...] --device D --lengths L [--out FILE.yaml]
    from-openrlhf SCRIPT.sh | -- --flag value ...   --device D --lengths L [--out FILE.yaml]
    from-nemo-rl CONFIG.yaml [KEY=VALUE ...]        --device D --lengths L --prompt-lengths P [--out FILE.yaml]
        ─► the provenance table (scenario key <- setting = value), and the scenario file, each of its
           fields' lines ending in where it came from

One command per registered framework that reads its settings (``asyncrl.frameworks.registry``): its flags and
its scenario come from the framework's folder, the output checks and the printing from here. ``--out`` is a
scenario file ending in ``.yaml`` or ``.yml`` (default ``<name>.yaml``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from asyncrl.scenarios.files.writing import write_text
from asyncrl.scenarios.record.outputs import check_output_file

from asyncrl.commands.common import REPLACE_HELP, force_argument, output_file
from asyncrl.frameworks.common.command import Imported, framework_arguments
from asyncrl.frameworks.common.framework import Framework
from asyncrl.frameworks.registry import FRAMEWORKS

YAML = (".yaml", ".yml")


def add_parsers(commands: argparse._SubParsersAction) -> None:
    for framework in FRAMEWORKS:
        if framework.command is None or framework.add_arguments is None:
            continue
        parser = commands.add_parser(framework.command, help=framework.help)
        framework.add_arguments(parser)
        framework_arguments(
            parser, f"{framework.label}'s config" if framework.config_keys else f"{framework.label}'s flags"
        )
        out_arguments(parser)
        parser.set_defaults(command=run_import, framework=framework)


def out_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out",
        type=Path,
        metavar="FILE.yaml",
        help="scenario file to write, a name ending in .yaml or .yml (default: <name>.yaml, the name made safe "
        "as a file name in this directory)",
    )
    force_argument(parser, REPLACE_HELP)


def run_import(args: argparse.Namespace) -> int:
    """Build the scenario, print where each field came from, write it."""
    framework: Framework = args.framework
    assert framework.scenario is not None and framework.command is not None
    if args.out is not None:
        output_file(args.out, YAML, force=args.force)
    imported, out = framework.scenario(args, args.out)
    if args.out is None:  # a name from the config: made safe (default_file), and a file there kept unless --force
        check_output_file(out, "--out", replace=args.force)
    _write(imported, out, f"asyncrl {framework.command}", framework.setting)
    return 0


def _write(imported: Imported, out: Path, command: str, setting: str) -> None:
    """The provenance table, then the scenario file with each field's source as a comment."""
    from asyncrl.frameworks.common.provenance import commented_yaml, plan_lines

    scenario = imported.scenario
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text(out, commented_yaml(imported.plan, f"from {imported.origin} by {command}"))
    print(plan_lines(imported.plan, setting))
    print(
        f"wrote {out} ({scenario.schedule.kind} on {scenario.cluster.total_devices} {scenario.hardware.device_name}); "
        f"next: asyncrl simulate {out}, or asyncrl plan {out}"
    )
