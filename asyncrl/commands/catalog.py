"""``asyncrl schema`` and ``asyncrl list``: what a scenario file may say, and what it can name.

schema   the JSON Schema of the scenario file (``scenarios.spec.scenario.Scenario``), on stdout
list     model presets, devices and shipped scenarios with their figures (``asyncrl.commands.listing``)
"""

from __future__ import annotations

import argparse

from asyncrl.commands.common import print_json


def add_parsers(commands: argparse._SubParsersAction) -> None:
    schema = commands.add_parser("schema", help="print the JSON Schema of the scenario file")
    schema.set_defaults(command=run_schema)
    listing = commands.add_parser("list", help="model presets, devices and shipped scenarios, with their figures")
    listing.set_defaults(command=run_list)


def run_schema(args: argparse.Namespace) -> int:
    from asyncrl.scenarios.spec.scenario import Scenario

    return print_json(Scenario.model_json_schema())


def run_list(args: argparse.Namespace) -> int:
    from asyncrl.commands.listing import catalog_lines

    print(catalog_lines())
    return 0
