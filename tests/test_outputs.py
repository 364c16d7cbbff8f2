"""Run directories and output files: checked before any work, kept inside runs/, never shared, never clobbering."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from asyncrl.scenarios.record.outputs import LOCK_FILE, check_output_file, default_run_dir, run_directory

from asyncrl.cli import main
from asyncrl.commands.common import overrides_tag

ROOT = Path(__file__).parents[1]
QUICK = ["--steps", "2", "--quiet"]


def simulate(capsys, out: Path | None, *extra: str, scenario: str = "quickstart") -> tuple[int, str]:
    """``asyncrl simulate`` in this process: the exit status and stderr."""
    args = ["simulate", scenario, *QUICK, *extra, *(["--out", str(out)] if out is not None else [])]
    status = main(args)
    return status, capsys.readouterr().err


def one_error(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("asyncrl: error: "), err
    return lines[0]


@pytest.mark.parametrize(
    ("name", "directory"),
    [
        ("../../x", "runs/x"),
        ("/etc/cron.d/evil", "runs/etc-cron.d-evil"),
        ("..", "runs/run"),
        (".hidden", "runs/hidden"),
        ("quickstart-8b", "runs/quickstart-8b"),
    ],
)
def test_default_run_directories_stay_inside_runs(name: str, directory: str) -> None:
    assert default_run_dir(name) == Path(directory)


def test_a_scenario_named_to_escape_writes_under_runs(tmp_path: Path, monkeypatch, capsys) -> None:
    data = yaml.safe_load((ROOT / "scenarios" / "quickstart.yaml").read_text())
    data["name"] = "../../escaped"
    (tmp_path / "work" / "deep").mkdir(parents=True)
    scenario = tmp_path / "work" / "deep" / "s.yaml"
    scenario.write_text(yaml.safe_dump(data))
    monkeypatch.chdir(tmp_path / "work" / "deep")
    assert simulate(capsys, None, scenario=str(scenario))[0] == 0
    steps = overrides_tag(["run.steps=2"])  # QUICK's --steps: an override, so the name carries its hash
    assert (tmp_path / "work" / "deep" / "runs" / f"escaped{steps}" / "summary.json").is_file()
    assert not (tmp_path / "escaped").exists() and not (tmp_path / "work" / "escaped").exists()


def test_unusable_locations_are_refused_before_any_work(tmp_path: Path, capsys) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("mine\n")
    cases = [(a_file, "is a file"), (a_file / "run", "is inside a file")]
    if Path("/proc").is_dir():
        cases.append((Path("/proc/asyncrl-run"), "cannot create /proc/asyncrl-run"))
    for out, message in cases:
        started = time.perf_counter()
        status, err = simulate(capsys, out, "--steps", "10000000")  # refused before the memory check
        assert status == 2 and message in one_error(err) and err.count("--out") == 1
        assert time.perf_counter() - started < 5
    assert a_file.read_text() == "mine\n"


def test_a_directory_of_other_files_is_refused_unless_forced(tmp_path: Path, capsys) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "summary.json").write_text('{"my": "notes"}\n')
    (out / "scenario.yaml").write_text("my: scenario\n")
    status, err = simulate(capsys, out)
    assert status == 2 and "holds files that are not a run record" in one_error(err) and "--force" in err
    assert (out / "summary.json").read_text() == '{"my": "notes"}\n'
    assert sorted(p.name for p in out.iterdir()) == ["scenario.yaml", "summary.json"]

    assert simulate(capsys, out, "--force")[0] == 0
    assert json.loads((out / "summary.json").read_text())["backend"] == "simulator"


def test_a_run_directory_is_rewritten_and_an_empty_one_used(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    assert simulate(capsys, out)[0] == 0
    assert (out / LOCK_FILE).is_file()
    assert simulate(capsys, out, "--seed", "3")[0] == 0  # a run record: no --force needed
    empty = tmp_path / "empty"
    empty.mkdir()
    assert simulate(capsys, empty)[0] == 0


def test_a_run_refused_after_the_directory_was_made_leaves_nothing(tmp_path: Path, capsys) -> None:
    out = tmp_path / "new" / "run"
    status, err = simulate(capsys, out, "--steps", "10000000")
    assert status == 2 and "run.steps:" in one_error(err) and "steps fit" in err
    assert not (tmp_path / "new").exists()


def test_a_failed_run_leaves_no_old_summary_behind(tmp_path: Path, capsys, monkeypatch) -> None:
    out = tmp_path / "run"
    assert simulate(capsys, out)[0] == 0

    def broken(*args, **kwargs):
        raise RuntimeError("the simulation broke")

    monkeypatch.setattr("asyncrl.simulator.backend.simulate_to", broken)
    status, err = simulate(capsys, out)
    assert status == 1 and "RuntimeError: the simulation broke" in one_error(err)
    assert not (out / "summary.json").exists()  # the old summary no longer claims a complete run


def test_a_directory_held_by_another_run_is_refused(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    with run_directory(out):
        status, err = simulate(capsys, out)
    assert status == 2 and "is being written by another run" in one_error(err)
    assert simulate(capsys, out)[0] == 0  # released


@pytest.mark.slow
def test_the_lock_goes_with_a_killed_process(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path\n"
            "from asyncrl.scenarios.record.outputs import run_directory\n"
            "with run_directory(Path(sys.argv[1])):\n    print('held', flush=True); time.sleep(60)",
            str(out),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        status, err = simulate(capsys, out)
        assert status == 2 and f"(pid {holder.pid})" in one_error(err)
    finally:
        holder.kill()
        holder.wait()
    assert simulate(capsys, out)[0] == 0


def test_output_files_are_checked_and_left_untouched(tmp_path: Path) -> None:
    from asyncrl.scenarios.record.outputs import OutputError

    target = tmp_path / "deeper" / "table.csv"
    assert check_output_file(target) == target
    assert not target.exists() and not target.parent.exists()
    with pytest.raises(OutputError, match="is a directory"):
        check_output_file(tmp_path)
    (tmp_path / "f").write_text("")
    with pytest.raises(OutputError, match="is inside a file"):
        check_output_file(tmp_path / "f" / "x.csv")


def test_size_refuses_an_unwritable_csv_before_simulating(tmp_path: Path, capsys) -> None:
    started = time.perf_counter()
    status = main(["size", "quickstart", "--devices", "16", "--out", str(tmp_path), "--quiet"])
    assert status == 2 and "--out: " in one_error(capsys.readouterr().err)
    assert time.perf_counter() - started < 5


# ── one meaning per --out, and default names that carry the overrides ──────────


def test_a_variant_never_replaces_the_record_as_written(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    runs = {
        "as written": ["--steps", "2"],
        "sync": ["--steps", "2", "schedule.kind=sync"],
        "sync again": ["--set", "run.steps=2", "--set", "schedule.kind=sync"],  # other words, other order
    }
    wrote = {}
    for label, args in runs.items():
        assert main(["simulate", "quickstart", "--quiet", *args]) == 0
        wrote[label] = Path(capsys.readouterr().out.splitlines()[-1].split()[1].rstrip("/"))
    assert wrote["as written"] == Path("runs") / f"quickstart-8b{overrides_tag(['run.steps=2'])}"
    assert wrote["sync"] == Path("runs") / f"quickstart-8b{overrides_tag(['schedule.kind=sync', 'run.steps=2'])}"
    assert wrote["sync again"] == Path("runs") / f"quickstart-8b{overrides_tag(['run.steps=2', 'schedule.kind=sync'])}"
    assert len(set(wrote.values())) == 3 and all(path.is_dir() for path in wrote.values())
    assert yaml.safe_load((wrote["as written"] / "scenario.yaml").read_text())["schedule"]["kind"] == "streaming"
    assert yaml.safe_load((wrote["sync"] / "scenario.yaml").read_text())["schedule"]["kind"] == "sync"
    assert overrides_tag([]) == "" and default_run_dir("quickstart-8b") == Path("runs/quickstart-8b")  # none


@pytest.mark.parametrize("command", [["size", "--devices", "16"], ["sweep", "--vary", "run.seed=1,2"]])
def test_a_csv_out_without_csv_is_refused_with_the_name_to_give(
    command: list[str], tmp_path: Path, monkeypatch, capsys
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main([command[0], "quickstart", *command[1:], "--quiet", "--out", "sw"]) == 2
    assert one_error(capsys.readouterr().err) == "asyncrl: error: --out: sw does not end in .csv; give e.g. sw.csv"
    Path("sw").mkdir()
    assert main([command[0], "quickstart", *command[1:], "--quiet", "--out", "sw"]) == 2
    error = one_error(capsys.readouterr().err)
    assert error.startswith("asyncrl: error: --out: sw is a directory; give a file name")
    assert list(tmp_path.iterdir()) == [tmp_path / "sw"] and not any(Path("sw").iterdir())


def test_compare_writes_into_no_run_and_out_is_a_json_file(tmp_path: Path, capsys) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    assert simulate(capsys, a)[0] == 0 and simulate(capsys, b, "--seed", "1")[0] == 0
    before = {run: sorted(p.name for p in run.iterdir()) for run in (a, b)}
    assert main(["compare", str(a), str(b)]) == 0
    assert "wrote" not in capsys.readouterr().out
    assert {run: sorted(p.name for p in run.iterdir()) for run in (a, b)} == before
    out = tmp_path / "c.json"
    assert main(["compare", str(a), str(b), "--out", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out and json.loads(out.read_text())["b"]["run"] == str(b)
    for bad, message in ((tmp_path, "is a directory"), (tmp_path / "c.txt", "does not end in .json")):
        assert main(["compare", str(a), str(b), "--out", str(bad)]) == 2
        assert message in one_error(capsys.readouterr().err)


def test_from_verl_out_is_a_yaml_file(tmp_path: Path, capsys) -> None:
    config = ROOT / "tests" / "data" / "verl_ppo_trainer.yaml"
    assert main(["from-verl", str(config), "--device", "h100", "--out", str(tmp_path / "plan")]) == 2
    assert "--out: " in (error := one_error(capsys.readouterr().err)) and error.endswith("plan.yaml")
    assert main(["from-verl", str(config), "--device", "h100", "--out", str(tmp_path)]) == 2
    assert "is a directory" in one_error(capsys.readouterr().err)


@pytest.mark.parametrize(
    "command",
    [["lengths", "tests/data/none.jsonl"], ["report", "runs/x"], ["validate"], ["demo"]],
)
def test_a_directory_out_refuses_a_file(command: list[str], tmp_path: Path, capsys) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("mine\n")
    assert main([*command, "--out", str(a_file)]) == 2
    assert one_error(capsys.readouterr().err) == f"asyncrl: error: --out: {a_file} is a file; give a directory"
    assert a_file.read_text() == "mine\n"
