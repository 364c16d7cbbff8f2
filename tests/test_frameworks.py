"""Every registered framework answers the same protocol (``asyncrl.frameworks.common.framework.Framework``),
and every framework folder is registered: adding a framework is adding its folder and its registration."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from asyncrl.scenarios.files.errors import ScenarioError

from asyncrl.cli import main
from asyncrl.frameworks.registry import FRAMEWORKS, config_of, framework, importable, launched_by

FOLDER = Path(__file__).resolve().parent.parent / "asyncrl" / "frameworks"


def test_every_framework_folder_is_registered_once() -> None:
    folders = sorted(path.parent.name for path in FOLDER.glob("*/__init__.py") if path.parent.name != "common")
    assert sorted(known.name for known in FRAMEWORKS) == folders
    assert len({known.label for known in FRAMEWORKS}) == len(FRAMEWORKS)


@pytest.mark.parametrize("known", FRAMEWORKS, ids=lambda known: known.name)
def test_a_framework_answers_the_protocol(known) -> None:
    assert framework(known.name) is known
    costs = known.fixed_costs()  # its per-step costs are in the catalogue, each a duration
    assert all(value >= 0 for value in costs.values()), costs
    # Its launch commands are recognised as its, and no other framework's are.
    for module in known.modules:
        assert launched_by(f"python3 -m {module}.main key=value") is known
    # A YAML config with its keys is its.
    if known.config_keys:
        assert config_of({key: {} for key in known.config_keys}) is known
    # An import command comes whole: flags and the scenario, and its --help prints.
    assert (known.command is None) == (known.add_arguments is None) == (known.scenario is None)
    if known.command is not None:
        assert known.command.startswith("from-")
        with pytest.raises(SystemExit) as exit_info:
            main([known.command, "--help"])
        assert exit_info.value.code == 0
    else:  # a framework asyncrl reads nothing of: a one-line error that says what to give instead
        with pytest.raises(ScenarioError, match=f"{known.label}.*write its scenario"):
            importable(known, "CONFIG")
    if known.scenario_from_log is not None:
        assert known.prints_config is not None


def test_the_import_commands_are_the_registered_ones() -> None:
    parser = argparse.ArgumentParser()
    commands = parser.add_subparsers()
    from asyncrl.commands import importers

    importers.add_parsers(commands)
    assert set(commands.choices) == {known.command for known in FRAMEWORKS if known.command}
    assert {"from-verl", "from-openrlhf", "from-nemo-rl"} <= set(commands.choices)


def test_plan_names_a_framework_it_cannot_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "areal.yaml"
    config.write_text("allocation_mode: sglang.d4p1t1+d4p1t1\ngconfig:\n  n_samples: 8\n")
    assert main(["plan", str(config), "--out", str(tmp_path / "plan")]) == 2
    assert "an AReaL run; asyncrl reads no AReaL settings yet" in capsys.readouterr().err
