"""The command line meets users where they are: bare overrides, every error at once with a did-you-mean,
readable flag errors, --version, asyncrl list, and a worked example in every command's --help."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from asyncrl.scenarios.costs.catalog import DEVICES, MODEL_PRESETS
from asyncrl.scenarios.spec.loading import shipped_scenarios

from asyncrl import __version__
from asyncrl.cli import _parse, _parser, main
from asyncrl.commands.arguments import EXAMPLES


def asyncrl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "asyncrl", *args], capture_output=True, text=True)


def resolved(run: Path) -> dict:
    return yaml.safe_load((run / "scenario.yaml").read_text())


def test_bare_overrides_apply_like_set_before_and_after_flags(tmp_path: Path, capsys) -> None:
    bare = ["simulate", "quickstart", "schedule.max_staleness=1", "--steps", "3", "cluster.training_devices=4"]
    assert main([*bare, "--quiet", "--out", str(tmp_path / "bare")]) == 0
    flags = ["simulate", "quickstart", "--set", "schedule.max_staleness=1", "--set", "cluster.training_devices=4"]
    assert main([*flags, "--steps", "3", "--quiet", "--out", str(tmp_path / "set")]) == 0
    assert resolved(tmp_path / "bare") == resolved(tmp_path / "set")
    assert resolved(tmp_path / "bare")["schedule"]["max_staleness"] == 1
    assert resolved(tmp_path / "bare")["cluster"]["training_devices"] == 4
    assert (tmp_path / "bare" / "summary.json").read_text() == (tmp_path / "set" / "summary.json").read_text()


def test_bare_overrides_come_after_set() -> None:
    args = _parse(["simulate", "quickstart", "run.steps=7", "--set", "run.steps=5"])
    assert args.overrides == ["run.steps=5"] and args.assignments == ["run.steps=7"]


def test_every_scenario_error_at_once_with_did_you_mean(tmp_path: Path, capsys) -> None:
    data = yaml.safe_load((shipped_scenarios()["quickstart"]).read_text())
    data["hardware"]["device"] = "h10"
    data["cluster"]["devices_per_engin"] = 1
    data["workload"]["samples_per_prompt"] = -8
    data["schedule"]["max_stalness"] = 3
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["simulate", str(path), "--quiet", "--out", str(tmp_path / "out")]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "asyncrl: error: hardware.device: Input should be 'a100-40g', 'a100-80g', 'a800', 'h100', 'h200', 'h800', "
        "'h20', 'l40s', 'b200', 'gb200', 'mi300x' or 'cpu'; did you mean h100?",
        "asyncrl: error: cluster.devices_per_engin: not a setting here; did you mean devices_per_engine?",
        "asyncrl: error: workload.samples_per_prompt: Input should be greater than 0",
        "asyncrl: error: schedule.max_stalness: not a setting here; did you mean max_staleness?",
    ]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("schedule.kind=streamin", "schedule.kind: Input tag 'streamin'"),
        ("schedul.kind=sync", "schedul: not a setting here; did you mean schedule?"),
        (
            "workload.completion_tokens.sigm=2",
            "workload.completion_tokens.sigm: not a setting here; did you mean sigma?",
        ),
        ("cluster.nodes=2", "cluster.nodes: not a setting here"),
    ],
)
def test_mistyped_override_names_the_field(override: str, message: str, capsys) -> None:
    assert main(["simulate", "quickstart", override, "--quiet"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and message in error
    if override.startswith("schedule.kind"):
        assert error.rstrip().endswith("did you mean streaming?")
    if override.startswith("cluster.nodes"):
        assert "did you mean" not in error  # nothing close: no guess


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["simulate", "quickstart", "--steps", "abc"], "--steps: expected a positive integer, got 'abc'"),
        (["simulate", "quickstart", "--steps", "0"], "--steps: expected a positive integer, got '0'"),
        (["simulate", "quickstart", "--seed", "-1"], "--seed: expected an integer ≥ 0, got '-1'"),
        (
            ["speedup", "quickstart", "--price-per-device-hour", "x"],
            "--price-per-device-hour: expected a number, got 'x'",
        ),
        (["simulat", "quickstart"], "COMMAND: invalid choice 'simulat'; did you mean simulate?"),
        (["simulate", "quickstart", "--stepz", "3"], "--stepz: unknown flag; did you mean --steps?"),
        (["execute", "cpu-timing", "--device", "gpu"], "--device: invalid choice 'gpu' (choose from cpu, cuda)"),
        (["simulate", "quickstart", "nonsense"], "KEY=VALUE: expected dotted.key=value, got 'nonsense'"),
        (["trace", "runs/x", "a.b=1"], "unexpected argument 'a.b=1' (asyncrl trace reads no scenario)"),
    ],
)
def test_bad_flag_values_are_one_readable_line(args: list[str], message: str) -> None:
    done = asyncrl(*args)
    assert done.returncode == 2
    assert done.stderr.startswith(f"asyncrl: error: {message}") and done.stderr.count("\n") == 1
    assert done.stdout == ""


def test_version() -> None:
    done = asyncrl("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"asyncrl {__version__}"


def test_list_shows_presets_devices_and_shipped_scenarios(capsys) -> None:
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0] for line in out.splitlines() if line.strip()}
    assert set(MODEL_PRESETS) <= rows and set(DEVICES) <= rows and set(shipped_scenarios()) <= rows
    quickstart = next(line for line in out.splitlines() if line.startswith("quickstart "))
    assert quickstart.split()[1:5] == ["quickstart-8b", "llama-3.1-8b", "8+8", "h100"]
    assert "8.03B" in next(line for line in out.splitlines() if line.startswith("llama-3.1-8b "))


def test_every_command_shows_an_example_that_parses(capsys) -> None:
    commands = _parser()._subparsers._group_actions[0].choices
    for name, parser in commands.items():
        assert name in EXAMPLES, f"{name} has no worked example"
        assert "example:\n  asyncrl " + name in parser.format_help()
        argv = shlex.split(EXAMPLES[name].splitlines()[0].split(">")[0])
        assert argv[0] == "asyncrl" and _parse(argv[1:]).command is not None
