"""The asyncrl command: shipped scenarios, outputs, and one-line errors for bad input."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from asyncrl.analysis.tables import format_cell
from asyncrl.scenarios.record.record import EVENT_COLUMNS, read_summary
from asyncrl.scenarios.spec.loading import load_scenario, shipped_scenarios

from asyncrl.cli import main

DELETE = object()
QUICKSTART = yaml.safe_load((Path(__file__).parents[1] / "scenarios" / "quickstart.yaml").read_text())


def write_scenario(tmp_path: Path, **changes) -> Path:
    """quickstart.yaml with some sections changed, written to a temporary file."""
    data = json.loads(json.dumps(QUICKSTART))
    for dotted, value in changes.items():
        *parents, leaf = dotted.split("__")
        node = data
        for part in parents:
            node = node.setdefault(part, {})
        if value is DELETE:
            node.pop(leaf, None)
        else:
            node[leaf] = value
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(shipped_scenarios()))
def test_every_shipped_scenario_loads_and_simulates(name: str, tmp_path: Path, capsys) -> None:
    assert main(["simulate", name, "--steps", "3", "--out", str(tmp_path / name), "--quiet"]) == 0
    summary = json.loads((tmp_path / name / "summary.json").read_text())
    assert summary["steps"] == 3
    assert summary["samples"]["trained"] == 3 * load_scenario(name).batch_samples


def test_simulate_writes_a_complete_run_record(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    assert main(["simulate", "quickstart", "--steps", "5", "--out", str(out), "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "throughput" in printed and "staleness" in printed
    summary = read_summary(out)  # every field of RunSummary is there, of its type
    hours = summary.device_hours.per_step
    assert f"cost         {hours:,.3g} device-hours per step" in printed
    generation = summary.breakdown.generation
    assert (
        f"device time  generation decode {generation.decode / sum(generation.model_dump().values()):.0%}, " in printed
    )
    assert summary.backend == "simulator" and summary.status is None
    assert summary.steps == 5
    events = pd.read_parquet(out / "events.parquet")
    assert list(events.columns) == list(EVENT_COLUMNS)
    resolved = load_scenario(out / "scenario.yaml")
    assert resolved.schedule.max_concurrency == load_scenario("quickstart").engine_concurrency
    assert resolved.run.steps == 5


def test_json_output_and_overrides(tmp_path: Path, capsys) -> None:
    args = [
        "simulate",
        "quickstart",
        "--steps",
        "4",
        "--set",
        "schedule.kind=sync",
        "--set",
        "cluster.generation_devices=16",
    ]
    assert main([*args, "--out", str(tmp_path / "r"), "--json", "--quiet"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["staleness"]["max"] == 0
    assert yaml.safe_load((tmp_path / "r" / "scenario.yaml").read_text())["cluster"]["generation_devices"] == 16


def test_a_path_given_with_set_is_relative_to_the_working_directory(tmp_path: Path, monkeypatch) -> None:
    from asyncrl.scenarios.costs.profile import CostProfile, save_profile

    profile = CostProfile(decode_step_s={1: 0.01}, prefill_token_s=1e-5, train_token_s=1e-4, weight_sync_s=0.1)
    save_profile(profile, tmp_path / "p.yaml")
    monkeypatch.chdir(tmp_path)
    # a shipped scenario lives elsewhere: read beside it, "p.yaml" would not be found
    assert load_scenario("quickstart", ["hardware.profile=p.yaml"]).hardware.profile == tmp_path / "p.yaml"
    assert load_scenario("quickstart", ["hardware.profile=null"]).hardware.profile is None
    # model.path may name a hub model: left as written unless the directory exists here
    assert load_scenario("quickstart", ["model.path=org/model"]).model.path == Path("org/model")
    (tmp_path / "ckpt").mkdir()
    assert load_scenario("quickstart", ["model.path=ckpt"]).model.path == tmp_path / "ckpt"


@pytest.mark.slow
def test_speedup_compares_against_both_sync_baselines(capsys) -> None:
    assert main(["speedup", "quickstart", "--steps", "5", "--quiet"]) == 0
    table = capsys.readouterr().out
    assert "sync, same split" in table and "sync, colocated on 16" in table
    assert "dev-h/1k" in table and "cost/1k" not in table


@pytest.mark.slow
def test_speedup_prices_device_hours_per_1k_samples(capsys) -> None:
    assert main(["speedup", "quickstart", "--steps", "3", "--quiet", "--price-per-device-hour", "2.5", "--json"]) == 0
    summaries = json.loads(capsys.readouterr().out)
    assert main(["speedup", "quickstart", "--steps", "3", "--quiet", "--price-per-device-hour", "2.5"]) == 0
    header, _, *rows, baselines, interval, not_predicted = capsys.readouterr().out.splitlines()[1:]
    assert baselines.startswith("sync baselines keep the scenario's engines (tp1)")
    assert interval.startswith("as written vs sync, same split") and "(95%: " in interval
    assert header.split()[-6:] == ["as", "written", "vs", "this", "dev-h/1k", "USD/1k"]
    assert not_predicted.startswith("time to target: not predicted")
    assert set(summaries.pop("uncertainty")) >= {"sources", "sync, same split"}
    for row, summary in zip(rows, summaries.values(), strict=True):
        # 16 devices × wall / 3600 per 1,000 of the 3 × 512 trained samples, then × 2.5 per device-hour
        hours = 16 * summary["wall_time_s"] / 3600 / (3 * 512) * 1000
        assert row.split()[-2:] == [format_cell(hours), f"{hours * 2.5:,.2f}"]


@pytest.mark.slow
def test_size_search_wide_screens_every_plan_and_says_how_many_it_simulated(tmp_path: Path, capsys) -> None:
    out = tmp_path / "wide.csv"
    args = ["size", "quickstart", "--devices", "8", "--max-staleness", "1", "--search", "wide", "--quiet"]
    assert main([*args, "--out", str(out)]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("screened "))
    screened, simulated = (int(word.replace(",", "")) for word in line.split()[1:5:3])
    written = pd.read_csv(out)
    assert 0 < screened <= 11 * 3  # of 11 splits (tp 1, 2, 4) × 3 micro-batches × 1 schedule, those that fit
    assert len(written) == simulated + 1 < screened + 1  # the baseline and the plans simulated, not the rest
    assert main([*args, "--exact"]) == 2
    assert "--search wide: ranks by throughput; it takes no --exact" in capsys.readouterr().err


@pytest.mark.slow
def test_size_ranks_splits_and_writes_csv(tmp_path: Path, capsys) -> None:
    out = tmp_path / "size.csv"
    args = ["size", "quickstart", "--devices", "16", "--steps", "3", "--splits", "3", "--max-staleness", "1"]
    assert main([*args, "--out", str(out), "--quiet"]) == 0
    written = pd.read_csv(out)
    rows = written[written["fits"]]  # the rows that do not fit in memory come last, unsimulated (test_memory.py)
    assert not written["fits"].iloc[len(rows) :].any()
    assert rows["label"].iloc[0].startswith("sync colocated 16")  # the baseline on top
    baseline, splits = rows.iloc[0], rows.iloc[1:]
    assert (baseline["schedule"], baseline["bound"], bool(baseline["colocated"])) == ("sync", 0, True)
    assert baseline["generation_devices"] == baseline["training_devices"] == 16
    throughput = splits["samples_per_s"].to_numpy()
    assert (throughput[:-1] >= throughput[1:]).all()  # then best first
    assert len(rows) > 2
    assert not splits["colocated"].any() and set(splits["schedule"]) == {"streaming"} and set(splits["bound"]) == {1}
    assert ((splits["generation_devices"] + splits["training_devices"]) == 16).all()
    assert (splits["generation_devices"] % splits["devices_per_engine"] == 0).all()
    assert rows[["generation_utilization", "training_utilization"]].stack().between(0, 1).all()
    assert (rows["device_hours_per_1k_samples"] > 0).all()
    cells = pd.read_csv(out, dtype=str, keep_default_na=False).loc[rows.index, ["dropped", "staleness_max"]]
    assert cells.map(str.isdigit).all().all()  # counts written as integers


def test_schema_is_json_schema(capsys) -> None:
    assert main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert {"model", "hardware", "cluster", "workload", "schedule"} <= set(schema["properties"])


BAD_INPUT = [
    ({"workload__completion_tokens__sigmaa": 1.0}, "workload.completion_tokens.sigmaa: not a setting here"),
    ({"workload__prompts_per_step": "many"}, "workload.prompts_per_step: Input should be a valid integer"),
    ({"cluster__generation_devices": 0}, "cluster.generation_devices: Input should be greater than 0"),
    ({"workload__samples_per_prompt": -4}, "workload.samples_per_prompt: Input should be greater than 0"),
    ({"workload__completion_tokens__sigma": -1}, "workload.completion_tokens.sigma: Input should be greater than 0"),
    ({"workload__completion_tokens__max_tokens": 0}, "workload.completion_tokens.max_tokens: Input should be greater"),
    ({"schedule": {"kind": "sync", "off_policy_steps": 1}}, "schedule.off_policy_steps: not a setting here"),
    ({"hardware__profile": "missing.yaml"}, "hardware.profile: file not found"),
    ({"hardware__device": "h300"}, "hardware.device: Input should be"),
    ({"model__preset": "llama-9"}, "model.preset: Input should be"),
    ({"cluster__devices_per_engine": 3}, "cluster.devices_per_engine: 3 does not divide generation_devices (8)"),
    (
        {"cluster__devices_per_engine": 8, "cluster__devices_per_node": 4},
        "cluster.devices_per_engine: 8 does not divide devices_per_node (4); an engine's devices share one node",
    ),
]


@pytest.mark.slow
@pytest.mark.parametrize(("changes", "message"), BAD_INPUT)
def test_bad_input_is_one_line_naming_the_field_and_writes_nothing(tmp_path: Path, capsys, changes, message) -> None:
    path = write_scenario(tmp_path, **changes)
    out = tmp_path / "out"
    assert main(["simulate", str(path), "--out", str(out), "--quiet"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and message in captured.err
    assert not out.exists()


def test_profile_lacking_a_field_is_named(tmp_path: Path, capsys) -> None:
    (tmp_path / "profile.yaml").write_text("decode_step_s: {1: 0.01}\nprefill_token_s: 1.0e-5\nweight_sync_s: 0.3\n")
    path = write_scenario(tmp_path, hardware__profile="profile.yaml")
    assert main(["simulate", str(path), "--quiet", "--out", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err
    assert error.startswith("asyncrl: error: hardware.profile: ")
    assert error.rstrip().endswith("profile.yaml: train_token_s: Field required")


def test_bare_asyncrl_lists_every_command_and_exits_0(capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([])
    assert exit_info.value.code == 0
    printed = capsys.readouterr().out
    for command in ("simulate", "execute", "calibrate", "demo", "speedup", "size", "sweep", "from-verl"):
        assert f"\n    {command} " in printed or f"\n    {command}\n" in printed, command


@pytest.mark.slow
def test_the_installed_command_exits_2_without_a_traceback(tmp_path: Path) -> None:
    path = write_scenario(tmp_path, workload__completion_tokens__sigma=-1)
    done = subprocess.run(
        [sys.executable, "-m", "asyncrl", "simulate", str(path), "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert done.stderr.strip() == "asyncrl: error: workload.completion_tokens.sigma: Input should be greater than 0"


class _Terminal(io.StringIO):
    """A stderr that says it is a terminal, so progress bars show unless asked not to."""

    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    "command",
    [
        ["speedup", "quickstart"],
        ["size", "quickstart", "--devices", "16", "--splits", "1", "--kind", "streaming"],
        ["sweep", "quickstart", "--vary", "cluster.generation_devices=4,8"],
    ],
)
@pytest.mark.slow
def test_quiet_hides_the_progress_bar_of_every_simulating_command(
    command: list[str], tmp_path: Path, monkeypatch, capsys
) -> None:
    out = ["--out", str(tmp_path / "t.csv"), "--force"] if command[0] != "speedup" else []
    for quiet, shown in (([], True), (["--quiet"], False)):
        terminal = _Terminal()
        monkeypatch.setattr(sys, "stderr", terminal)
        assert main([*command, "--steps", "2", *out, *quiet]) == 0
        assert ("simulating" in terminal.getvalue()) == shown, terminal.getvalue()
    capsys.readouterr()


def test_compare_reports_b_relative_to_a(tmp_path: Path, capsys) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    assert main(["simulate", "quickstart", "--steps", "3", "--quiet", "--out", str(a)]) == 0
    assert main(["simulate", "quickstart", "--steps", "3", "--quiet", "--out", str(b), "schedule.kind=sync"]) == 0
    capsys.readouterr()
    assert main(["compare", str(a), str(b), "--json"]) == 0
    wall = json.loads(capsys.readouterr().out)["figures"]["wall_time_s"]
    assert wall["relative_error"] == pytest.approx((wall["b"] - wall["a"]) / wall["a"]) and wall["b"] > wall["a"]
    assert "reference" in _parser_help("compare") and "(B - A) / |A|" in _parser_help("compare")


def _parser_help(command: str) -> str:
    from asyncrl.cli import _parser

    return _parser()._subparsers._group_actions[0].choices[command].format_help()


def test_an_error_about_an_argument_is_printed_with_its_flag() -> None:
    import argparse

    from asyncrl.cli import _parser
    from asyncrl.commands.arguments import as_flag

    calibrate = _parser()._subparsers._group_actions[0].choices["calibrate"]
    assert as_flag("calibration_steps: give at least 4", calibrate) == "--calibration-steps: give at least 4"
    assert as_flag("from_log: no step has a timing", calibrate) == "--from-log: no step has a timing"
    assert (
        as_flag("run.steps: Input should be greater than 0", calibrate) == "run.steps: Input should be greater than 0"
    )
    assert as_flag("scenario: not a dest of a flag", calibrate) == "scenario: not a dest of a flag"
    simulate = _parser()._subparsers._group_actions[0].choices["simulate"]
    assert as_flag("overrides .x=1: expected dotted.key=value", simulate) == "--set .x=1: expected dotted.key=value"
    assert as_flag("out of memory", simulate) == "out of memory"  # prose starting with a dest's name
    args = argparse.Namespace(overrides=["a.b=x y"])
    assert as_flag("overrides a.b=x y: a is not a section", simulate, args) == "--set a.b=x y: a is not a section"
    assert as_flag("overrides a.b=x y: a is not a section", simulate) == "overrides a.b=x y: a is not a section"
