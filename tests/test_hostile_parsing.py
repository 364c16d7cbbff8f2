"""The hostile-input round (issue 22), reading: deep nesting, alias bombs, duplicate keys, huge numbers, bytes that
are not UTF-8, corrupt tables, interpolation cycles. Each is one line naming the file or field, exit 2, nothing
written; each case was an exception's text with exit 1 (or silently accepted) before."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from asyncrl.cli import main
from tests.refusals import refused

ROOT = Path(__file__).parents[1]
DEPTH = 20_000  # far past Python's recursion limit
BOMB = "\n".join(
    [
        'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]',
        *(
            f"{name}: &{name} [{', '.join([f'*{previous}'] * 9)}]"
            for previous, name in zip("abcdefgh", "bcdefghi", strict=True)
        ),
        "trainer: {experiment_name: bomb}",
    ]
)


def write(path: Path, content: str | bytes) -> Path:
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


def test_deeply_nested_yaml_is_refused_naming_the_file(tmp_path: Path, capsys) -> None:
    scenario = write(tmp_path / "deep.yaml", "name: x\nmodel: " + "[" * DEPTH + "]" * DEPTH + "\n")
    message = refused(capsys, "simulate", str(scenario), "--out", str(tmp_path / "out"))
    assert message.startswith(f"{scenario}:2:") and "nested more than" in message
    verl = refused(capsys, "from-verl", str(scenario), "--out", str(tmp_path / "v.yaml"))
    assert verl.startswith(f"{scenario}:2:") and "nested more than" in verl
    assert sorted(path.name for path in tmp_path.iterdir()) == ["deep.yaml"]


def test_a_billion_laughs_is_refused_at_once_and_writes_nothing(tmp_path: Path, capsys) -> None:
    """A few hundred bytes whose aliases expand to 9⁹ strings: refused while reading, not after filling memory."""
    bomb = write(tmp_path / "bomb.yaml", BOMB)
    for command in (["from-verl", str(bomb), "--out", str(tmp_path / "v.yaml")], ["simulate", str(bomb)]):
        message = (
            refused(capsys, *command, "--device", "h100") if command[0] == "from-verl" else refused(capsys, *command)
        )
        assert message.startswith(f"{bomb}:") and "aliases expand to more than" in message
    assert sorted(path.name for path in tmp_path.iterdir()) == ["bomb.yaml"]


def test_a_key_given_twice_is_refused_with_both_lines(tmp_path: Path, capsys) -> None:
    """Two ``schedule:`` sections: YAML would keep the last silently."""
    data = yaml.safe_load((ROOT / "scenarios" / "quickstart.yaml").read_text())
    text = yaml.safe_dump(data) + "schedule: {kind: sync}\n"
    scenario = write(tmp_path / "twice.yaml", text)
    message = refused(capsys, "simulate", str(scenario), "--out", str(tmp_path / "out"))
    line = text.splitlines().index("schedule:") + 1
    assert message.startswith(f"{scenario}:{len(text.splitlines())}:1:")
    assert f"key 'schedule' given twice (first on line {line})" in message


def test_a_verl_config_that_is_not_utf8_or_interpolates_itself_is_refused(tmp_path: Path, capsys) -> None:
    binary = write(tmp_path / "latin1.yaml", b"trainer:\n  experiment_name: caf\xe9\n")
    assert refused(capsys, "from-verl", str(binary)).startswith(f"{binary}: not UTF-8 text")
    cycle = write(
        tmp_path / "cycle.yaml",
        "actor_rollout_ref:\n  model:\n    path: ${data.path}\ndata:\n  path: ${actor_rollout_ref.model.path}\n",
    )
    message = refused(capsys, "from-verl", str(cycle), "--device", "h100", "--preset", "tiny")
    assert "interpolation goes round in a cycle" in message
    assert not list(tmp_path.glob("*.scenario.yaml")) and not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('{"completion_tokens": 1e300}', "record 1 of big.jsonl:completion_tokens: 1e+300 tokens is above the longest"),
        ('{"completion_tokens": 100000000000000000000000000}', "tokens is above the longest a scenario takes"),
        ('{"completion_tokens": 2.5}', "2.5 is not a whole number of tokens"),
        ('{"completion_tokens": ' + "[" * DEPTH + "]" * DEPTH + "}", "big.jsonl:1: nested too deeply to read"),
        (b'{"completion_tokens": 5}\n\xff\xfe', "big.jsonl:2: not UTF-8 text"),
    ],
)
def test_lengths_files_with_hostile_values_name_the_file_and_record(
    line: str | bytes, expected: str, tmp_path: Path, capsys
) -> None:
    path = write(tmp_path / "big.jsonl", line)
    message = refused(capsys, "lengths", str(path), "--out", str(tmp_path / "out"))
    assert expected in message and "Error" not in message
    assert not (tmp_path / "out").exists()


def test_mixed_types_blame_the_record_that_differs(tmp_path: Path, capsys) -> None:
    path = write(tmp_path / "mixed.jsonl", '{"output": "two words"}\n{"output": "three more words"}\n{"output": 7}\n')
    assert "record 3 of mixed.jsonl:output: not text like the records before it" in refused(
        capsys, "lengths", str(path), "--out", str(tmp_path / "out")
    )


def test_an_empirical_length_out_of_range_names_the_length_not_another_field(tmp_path: Path, capsys) -> None:
    """An empirical JSONL length of 2e9 was blamed on cluster.devices_per_engine."""
    write(tmp_path / "lengths.jsonl", '{"completion_tokens": 2000000000}\n')
    data = yaml.safe_load((ROOT / "scenarios" / "cpu-timing.yaml").read_text())
    data["workload"]["completion_tokens"] = {"kind": "empirical", "path": "lengths.jsonl"}
    scenario = write(tmp_path / "s.yaml", yaml.safe_dump(data))
    message = refused(capsys, "simulate", str(scenario), "--out", str(tmp_path / "out"))
    assert message.startswith("workload.completion_tokens") and "2,000,000,000 tokens is above the longest" in message


@pytest.fixture
def run_dir(tmp_path: Path, capsys) -> Path:
    out = tmp_path / "run"
    assert main(["simulate", "cpu-timing", "--steps", "2", "--quiet", "--out", str(out)]) == 0
    capsys.readouterr()
    return out


def test_a_corrupt_or_columnless_events_table_is_named(run_dir: Path, tmp_path: Path, capsys) -> None:
    (run_dir / "events.parquet").write_bytes(b"not parquet at all")
    for command in (["trace", str(run_dir), "--out", str(tmp_path / "t.json.gz")], ["report", str(run_dir)]):
        message = refused(capsys, *command, *(["--out", str(tmp_path / "report")] if command[0] == "report" else []))
        assert message.startswith(f"{run_dir / 'events.parquet'}: not a readable events table")
    pd.DataFrame({"x": [1]}).to_parquet(run_dir / "events.parquet")
    message = refused(capsys, "trace", str(run_dir), "--out", str(tmp_path / "t.json.gz"))
    assert message.startswith(f"{run_dir / 'events.parquet'}: not a run's events table (no column worker")
    assert not (tmp_path / "t.json.gz").exists()


def test_a_summary_holding_nan_or_nested_too_deeply_is_refused(run_dir: Path, tmp_path: Path, capsys) -> None:
    summary = json.loads((run_dir / "summary.json").read_text())
    other = tmp_path / "other"
    other.mkdir()
    for name in ("events.parquet", "scenario.yaml"):
        (other / name).write_bytes((run_dir / name).read_bytes())
    (other / "summary.json").write_text(json.dumps({**summary, "wall_time_s": float("nan")}))
    message = refused(capsys, "compare", str(run_dir), str(other))
    assert message == f"{other / 'summary.json'}: holds NaN, which is not a number"
    (other / "summary.json").write_text("[" * DEPTH + "]" * DEPTH)
    assert (
        refused(capsys, "compare", str(run_dir), str(other)) == f"{other / 'summary.json'}: nested too deeply to read"
    )


def test_a_study_table_row_longer_than_its_header_is_named(tmp_path: Path, capsys) -> None:
    """pandas made the extra fields an index: "Invalid call for scalar access"."""
    rows = (ROOT / "tests" / "data" / "study-synthetic.csv").read_text().splitlines()
    rows[1] += ",extra,fields"  # the first row: pandas reads the header as naming the last columns
    table = write(tmp_path / "cells.csv", "\n".join(rows) + "\n")
    assert refused(capsys, "penalty", str(table), "--out", str(tmp_path / "p.json")) == (
        f"{table}: row 1 has more fields than the header"
    )
    assert not (tmp_path / "p.json").exists()


def test_a_sweep_value_that_is_a_mapping_is_refused_before_any_csv(tmp_path: Path, capsys) -> None:
    out = tmp_path / "sweep.csv"
    message = refused(
        capsys, "sweep", "cpu-timing", "--steps", "2", "--quiet", "--vary", "run.seed=1,{a: 1}", "--out", str(out)
    )
    assert message == "--vary run.seed=1,{a: 1}: '{a: 1}' is not a single value (a number, a word, true or false)"
    assert not out.exists()


def test_simulate_json_with_a_penalty_is_json(tmp_path: Path, capsys) -> None:
    """A target never reached was printed as bare Infinity, which no JSON reader but Python's takes."""
    penalty = {
        "target": 0.5,
        "task": "add",
        "source": "hand-written",
        "fits": [
            {
                "loss": "grpo",
                "correction": "clip",
                "steps_at_zero": 1e308,  # times (1 + a·staleness): past the largest float, so never
                "per_staleness": 1e308,
                "per_dropped": 0.0,
                "points": 2,
                "censored": 0,
                "residual_rel": 0.0,
            }
        ],
    }
    path = write(tmp_path / "penalty.json", json.dumps(penalty))
    status = main(
        [
            "simulate",
            "cpu-timing",
            "--steps",
            "2",
            "--quiet",
            "--json",
            "--penalty",
            str(path),
            "--out",
            str(tmp_path / "o"),
        ]
    )
    out = capsys.readouterr().out
    assert status == 0, out
    assert "Infinity" not in out and "NaN" not in out
    json.loads(out, parse_constant=lambda constant: pytest.fail(f"{constant} in --json output"))


# ── case 7: wrong-typed verl values were listed, then dropped, and verl's defaults shown as the config's ──


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("trainer=5", "trainer: a section of verl's config (n_gpus_per_node, nnodes, total_epochs, ...), got 5"),
        ("actor_rollout_ref.actor.clip_ratio=abc", "actor_rollout_ref.actor.clip_ratio: expected a number like verl's default 0.2, got 'abc'"),
        ("actor_rollout_ref.model.path=${oc.env:HOME}", "actor_rollout_ref.model.path: '${oc.env:HOME}' is an interpolation asyncrl does not resolve"),
        ("actor_rollout_ref.model.path={a: 1}", "actor_rollout_ref.model.path: expected a value, got a mapping"),
    ],
)  # fmt: skip
def test_wrong_typed_verl_values_are_refused_naming_the_key(
    override: str, message: str, tmp_path: Path, capsys
) -> None:
    config = ROOT / "tests" / "data" / "verl_ppo_trainer.yaml"
    out = tmp_path / "plan.yaml"
    args = ["from-verl", str(config), override, "--device", "h100", "--preset", "qwen2.5-7b", "--out", str(out)]
    assert refused(capsys, *args, "--lengths", "{kind: fixed, value: 64}").startswith(message)
    assert not out.exists()


# ── case 8: messages ──


def test_a_scenario_name_with_control_characters_is_refused_not_printed(tmp_path: Path, capsys) -> None:
    """ESC[31m in a name was printed raw to the terminal (and obeyed)."""
    message = refused(capsys, "simulate", "cpu-timing", "name=x\x1b[31mred", "--out", str(tmp_path / "o"))
    assert message == "name: holds the control character \\x1b; use printable text"


def test_a_huge_calibration_steps_is_refused_up_front(tmp_path: Path, capsys) -> None:
    """``validate --calibration-steps 99999999999`` ran each scenario to a failure, exit 1, nothing on stderr."""
    message = refused(capsys, "validate", "--calibration-steps", "99999999999", "--out", str(tmp_path / "v"))
    assert message == "--calibration-steps: at most 10,000,000 (run.steps' limit), got 99,999,999,999"
    assert not (tmp_path / "v").exists()


def test_demo_refuses_a_scenario_it_cannot_execute_on_the_cpu(tmp_path: Path, capsys) -> None:
    """``demo --scenario quickstart`` died in torch's allocation after 9 s."""
    message = refused(capsys, "demo", "--scenario", "quickstart", "--out", str(tmp_path / "d"))
    assert message.startswith("--scenario: quickstart runs on h100 devices; the demo executes it here, on the CPU")


def test_a_memory_refusal_below_a_gigabyte_says_megabytes() -> None:
    """Under a 4 GB cap with torch loaded: "need about 0.0 GB ... more than the 0.0 GB usable"."""
    from asyncrl.scenarios.spec.loading import load_scenario
    from asyncrl.simulator.budget import MemoryBudgetError, plan

    with pytest.raises(MemoryBudgetError) as refusal:
        plan(load_scenario("cpu-timing"), available=50 << 20)
    assert "0.0 GB" not in str(refusal.value) and " MB usable here" in str(refusal.value)


def test_a_csv_value_holding_a_newline_stays_on_one_error_line(tmp_path: Path, capsys) -> None:
    header = "loss,correction,status,reached,steps,steps_to_target,staleness_mean,dropped_fraction,target,task"
    table = write(tmp_path / "cells.csv", f'{header}\ngrpo,clip,"com\nplete",True,10,5,0.5,0,0.5,add\n')
    assert (
        refused(capsys, "penalty", str(table)) == "status: row 1: 'com\\nplete' is not complete, interrupted or failed"
    )


# ── case 5: resource limits ──


def test_a_lengths_log_is_read_a_line_at_a_time(tmp_path: Path) -> None:
    """A 400 MB JSONL took 11x its size: every record was held whole. Now only the field's values are."""
    import tracemalloc

    from asyncrl.scenarios.files.jsonl import read_field

    path = tmp_path / "log.jsonl"
    prompt = "p" * 2000
    with path.open("w") as handle:
        for number in range(10_000):  # 20 MB of prompts beside the counts
            handle.write(json.dumps({"prompt": prompt, "response_length": 10 + number % 4000}) + "\n")
    tracemalloc.start()
    try:
        name, values = read_field(path, "response_length")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert name == "response_length" and len(values) == 10_000
    assert peak < path.stat().st_size / 10, f"peak {peak:,} bytes for a {path.stat().st_size:,}-byte file"


def test_study_workers_beyond_reason_are_refused(tmp_path: Path, capsys) -> None:
    message = refused(capsys, "study", "cpu-study", "--workers", "100000", "--out", str(tmp_path / "s"))
    assert message.startswith("--workers: at most 1,024")
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize(
    ("cap", "message"),
    [
        ("1", "--max-tokens: 1 is below the longest length in the log (40); give at least that"),
        ("99999999999999", "--max-tokens: 99,999,999,999,999 is above the longest length a scenario takes"),
    ],
)
def test_lengths_max_tokens_out_of_range_is_named(cap: str, message: str, tmp_path: Path, capsys) -> None:
    """A pydantic ValidationError for the Pareto or lognormal fit, exit 1."""
    path = write(tmp_path / "log.jsonl", "".join(f'{{"completion_tokens": {n}}}\n' for n in (10, 20, 30, 40)))
    assert refused(capsys, "lengths", str(path), "--max-tokens", cap, "--out", str(tmp_path / "o")).startswith(message)
    assert not (tmp_path / "o").exists()


def test_demo_refuses_a_simulation_that_will_not_fit_before_executing(tmp_path: Path, monkeypatch, capsys) -> None:
    """``demo --profile`` under a 4 GB cap ran 82 s, then said "0.0 GB ... more than the 0.0 GB usable"."""
    import asyncrl.simulator.budget as budget

    monkeypatch.setattr(budget, "available_bytes", lambda: 20 << 20)
    message = refused(capsys, "demo", "--scenario", "cpu-timing", "--out", str(tmp_path / "d"))
    assert message.endswith("MB usable here") and "0.0 GB" not in message
    assert not (tmp_path / "d").exists()
