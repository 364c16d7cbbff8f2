"""Hostile input: every path from a scenario to a failure is one line and exit 2, within a memory budget."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from asyncrl.cli import main

ROOT = Path(__file__).parents[1]
QUICKSTART = yaml.safe_load((ROOT / "scenarios" / "quickstart.yaml").read_text())
BUDGET_MB = 1536


@pytest.mark.slow
def test_generated_scenarios_run_or_are_refused_on_one_line_within_a_memory_budget(tmp_path: Path) -> None:
    """tests/hostile.py: 100 hypothesis scenarios (the same ones every run) under RLIMIT_AS = mapped + budget."""
    env = {**os.environ, "MALLOC_ARENA_MAX": "2", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.hostile",
            "--examples",
            "100",
            "--budget-mb",
            str(BUDGET_MB),
            "--dir",
            str(tmp_path),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    figures = json.loads(done.stdout.splitlines()[-1])
    assert figures["ran"] >= 1 and figures["refused"] >= 1  # both outcomes were exercised
    assert figures["peak_mb"] - figures["baseline_mb"] <= BUDGET_MB


def write(tmp_path: Path, name: str, content: str | bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


def scenario_with(tmp_path: Path, dotted: str, value: object) -> Path:
    data = json.loads(json.dumps(QUICKSTART))
    *parents, leaf = dotted.split(".")
    node = data
    for part in parents:
        node = node[part]
    node[leaf] = value
    return write(tmp_path, "scenario.yaml", yaml.safe_dump(data))


def refused(capsys, tmp_path: Path, scenario: str | Path, *extra: str) -> str:
    """The one error line of ``asyncrl simulate``, which must exit 2 and write nothing."""
    out = tmp_path / "out"
    assert main(["simulate", str(scenario), "--quiet", "--out", str(out), *extra]) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert captured.out == "" and len(lines) == 1 and lines[0].startswith("asyncrl: error: "), captured.err
    assert not out.exists()
    return lines[0].removeprefix("asyncrl: error: ")


PROFILE = "decode_step_s: {1: 0.01, 8: 0.02}\nprefill_token_s: 1.0e-5\ntrain_token_s: 4.0e-4\nweight_sync_s: 0.3\n"


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "schedule.max_concurrency=1000000000",
            "schedule.max_concurrency: Input should be less than or equal to 65536",
        ),
        (
            "cluster.generation_devices=1000000",
            "cluster.generation_devices: Input should be less than or equal to 65536",
        ),
        ("run.steps=100000000000000000000000", "run.steps: Input should be less than or equal to 10000000"),
        ("run.steps=true", "run.steps: Input should be an integer, not true"),
        ("hardware.mfu=true", "hardware.mfu: Input should be a number, not true"),
        ("hardware.sync_latency_s=.inf", "hardware.sync_latency_s: Input should be a finite number"),
        ("workload.completion_tokens.sigma=.inf", "workload.completion_tokens.sigma: Input should be a finite number"),
        (
            "workload.completion_tokens.sigma=1e300",
            "workload.completion_tokens.sigma: Input should be less than or equal to 10",
        ),
        (
            "workload.completion_tokens.max_tokens=10000001",
            "max_tokens: Input should be less than or equal to 10000000",
        ),
        ("run.seed=4294967296", "run.seed: Input should be less than or equal to 4294967295"),
        ("workload.prompts_per_step=10000000", "workload.prompts_per_step: one step of 80,000,000 rollouts needs"),
        ("run.steps=10000000", "run.steps: 10,000,000 steps of 512 rollouts need about"),
        (".x=1", "--set .x=1: expected dotted.key=value"),
    ],
)
def test_hostile_overrides_are_one_line_naming_the_field(capsys, tmp_path: Path, override: str, message: str) -> None:
    assert message in refused(capsys, tmp_path, "quickstart", "--set", override)


def test_files_that_are_not_scenarios(capsys, tmp_path: Path) -> None:
    binary = write(tmp_path, "binary.yaml", b"\x89PNG\r\n\x1a\n\x00\xff\xfe")
    assert refused(capsys, tmp_path, binary).endswith(
        "not UTF-8 text (byte 0 cannot be decoded); expected a scenario file"
    )
    malformed = write(tmp_path, "malformed.yaml", "name: x\nmodel: {preset: tiny\nhardware: [\n")
    assert refused(capsys, tmp_path, malformed) == f"{malformed}:3:9: not valid YAML: expected ',' or '}}', but got ':'"
    nul = write(tmp_path, "nul.yaml", "name: x\nmodel: \x00\n")
    assert refused(capsys, tmp_path, nul) == f"{nul}:2:8: not valid YAML: character #x0000 is not allowed"
    huge = write(tmp_path, "huge.yaml", b"#" * (2 << 20))
    assert "bytes, more than 1,048,576 for a scenario file" in refused(capsys, tmp_path, huge)
    assert "scenario file not found" in refused(capsys, tmp_path, tmp_path)


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        ("100\n200\n100000000000000000000000\n", "line 3: a 24-digit length is outside [1, 10,000,000] tokens"),
        ("1000000000\n", "line 1: length 1,000,000,000 is outside [1, 10,000,000] tokens"),
        ("100\n0\n", "line 2: length 0 is outside"),
        ("12\n1.5\n", "line 2: '1.5' is not an integer length"),
        ("\n\n", "needs at least one length"),
    ],
)
def test_lengths_files_are_read_with_limits(capsys, tmp_path: Path, lines: str, message: str) -> None:
    lengths = write(tmp_path, "lengths.txt", lines)
    path = scenario_with(tmp_path, "workload.completion_tokens", {"kind": "empirical", "path": str(lengths)})
    error = refused(capsys, tmp_path, path)
    assert error.startswith(f"workload.completion_tokens.path: {lengths}: ") and message in error


@pytest.mark.parametrize(
    ("profile", "message"),
    [
        (PROFILE.replace("4.0e-4", ".inf"), "train_token_s: Input should be a finite number"),
        (PROFILE.replace("8: 0.02", "8: 0.005"), "decode_step_s: 0.005 s at batch 8 is less than 0.01 s at batch 1"),
        (PROFILE.replace("{1: 0.01", "{true: 0.01"), "decode_step_s.1.[key]: Input should be an integer, not true"),
        (PROFILE.replace("{1: 0.01, 8: 0.02}", "{1: [\n"), "not valid YAML"),
    ],
)
def test_cost_profiles_refuse_what_they_cannot_mean(capsys, tmp_path: Path, profile: str, message: str) -> None:
    path = scenario_with(tmp_path, "hardware.profile", str(write(tmp_path, "profile.yaml", profile)))
    error = refused(capsys, tmp_path, path)
    assert error.startswith("hardware.profile: ") and message in error


def test_a_heavy_pareto_tail_index_does_not_overflow(capsys, tmp_path: Path) -> None:
    tail = "workload.completion_tokens={kind: pareto, scale: 100, alpha: 1e300, max_tokens: 1000}"
    assert main(["simulate", "quickstart", "--steps", "2", "--quiet", "--set", tail, "--out", str(tmp_path / "r")]) == 0


@pytest.mark.slow
def test_a_run_that_outgrows_its_memory_budget_is_stopped(capsys, tmp_path: Path, monkeypatch) -> None:
    """Dropping most of what it generates, a run starts ~35x the rollouts it trains; the budget stops it."""
    monkeypatch.setattr("asyncrl.simulator.budget.available_bytes", lambda: 300 << 20)
    drops = ["schedule.queue_policy=drop_oldest", "schedule.max_staleness=1000", "cluster.training_devices=1"]
    drops.append("learner.optimizer_offload=true")  # one H100 holds the 8B learner only with Adam on the CPU
    args = [a for o in [*drops, "cluster.generation_devices=64"] for a in ("--set", o)]
    error = refused(capsys, tmp_path, "quickstart", "--steps", "20", *args)
    assert error.startswith("run.steps: the run started ") and "drops most of what it generates" in error


@pytest.mark.slow
def test_the_memory_estimate_covers_what_a_run_uses() -> None:
    """The budget charges BYTES_PER_ROW per rollout; a measured run grows by less (benchmarks/simulator_memory.py)."""
    from asyncrl.simulator.budget import BASE_BYTES, BYTES_PER_ROW

    from benchmarks.simulator_memory import measure

    figures = measure("quickstart", ["run.steps=150"])
    growth = (figures["peak_kb"] - figures["before_kb"]) * 1024
    assert figures["rollouts"] > 80_000
    assert growth < BASE_BYTES + BYTES_PER_ROW * figures["rollouts"]
