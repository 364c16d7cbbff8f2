"""The hostile-input round (issue 22), writing: files where the user did not point, existing files replaced
silently, planted symbolic links followed, files cut short by a full disk.

The rule (``scenarios/files/outputs.py``): an --out that names an existing file is refused unless --force; the names
asyncrl picks itself (under runs/, a run record's own files) are its own; every file is written to a temporary
file beside it and renamed into place, so a link planted at the name is replaced, never followed."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from asyncrl.scenarios.files.writing import written
from asyncrl.scenarios.record import outputs
from asyncrl.scenarios.record.outputs import LOCK_FILE, OUT_MARK, OutputError

from asyncrl.cli import main
from tests.refusals import refused

ROOT = Path(__file__).parents[1]
VERL = ROOT / "tests" / "data" / "verl_ppo_trainer.yaml"
USER_TEXT = "the user's own file\n"
QUICK = ["--steps", "2", "--quiet"]


def user_file(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(USER_TEXT)
    return path


@pytest.fixture
def run_dir(tmp_path: Path, capsys) -> Path:
    out = tmp_path / "run"
    assert main(["simulate", "cpu-timing", *QUICK, "--out", str(out)]) == 0
    capsys.readouterr()
    return out


def test_from_verl_writes_its_default_name_here_whatever_the_experiment_is_called(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """``trainer.experiment_name=../victim/user`` overwrote ../victim/user.yaml; an absolute name made folders."""
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    victim = user_file(tmp_path / "victim" / "user.yaml")
    args = [
        "from-verl",
        str(VERL),
        "--device",
        "h100",
        "--preset",
        "qwen2.5-7b",
        "--lengths",
        "{kind: fixed, value: 64}",
    ]
    assert main([*args, "trainer.experiment_name=../victim/user"]) == 0
    assert victim.read_text() == USER_TEXT
    assert (tmp_path / "work" / "victim-user.yaml").is_file()
    assert main([*args, f"trainer.experiment_name={tmp_path}/abs/name"]) == 0
    assert not (tmp_path / "abs").exists()
    assert sorted(path.name for path in (tmp_path / "work").iterdir()) == [
        f"{str(tmp_path).strip('/').replace('/', '-')}-abs-name.yaml",
        "victim-user.yaml",
    ]
    capsys.readouterr()
    # the default name, once there, is not replaced either: it is in the user's directory, not under runs/
    message = refused(capsys, *args, "trainer.experiment_name=../victim/user")
    assert message == "--out: victim-user.yaml exists; add --force to replace it"


def _commands(tmp_path: Path, run: Path) -> dict[str, tuple[list[str], Path]]:
    """Each command whose --out replaced a user's file silently, with the file it would replace."""
    cells = ROOT / "tests" / "data" / "study-synthetic.csv"
    lengths = tmp_path / "lengths.jsonl"
    lengths.write_text("".join(f'{{"completion_tokens": {n}}}\n' for n in (10, 20, 30, 40)))
    verl = [
        "from-verl",
        str(VERL),
        "--device",
        "h100",
        "--preset",
        "qwen2.5-7b",
        "--lengths",
        "{kind: fixed, value: 64}",
    ]
    sweep = ["sweep", "cpu-timing", *QUICK, "--vary", "run.seed=1,2"]
    return {
        "from-verl": ([*verl, "--out", str(tmp_path / "u.yaml")], tmp_path / "u.yaml"),
        "size": (["size", "cpu-timing", "--devices", "2", *QUICK, "--out", str(tmp_path / "u.csv")], tmp_path / "u.csv"),
        "sweep --out": ([*sweep, "--out", str(tmp_path / "u.csv")], tmp_path / "u.csv"),
        "sweep --plot": ([*sweep, "--out", str(tmp_path / "s.csv"), "--plot", str(tmp_path / "u.png")], tmp_path / "u.png"),
        "penalty": (["penalty", str(cells), "--out", str(tmp_path / "u.json")], tmp_path / "u.json"),
        "compare": (["compare", str(run), str(run), "--out", str(tmp_path / "u.json")], tmp_path / "u.json"),
        "trace": (["trace", str(run), "--out", str(tmp_path / "u.json.gz")], tmp_path / "u.json.gz"),
        "calibrate": (["calibrate", "cpu-timing", "--from-run", str(run), "--out", str(tmp_path / "u.yaml")], tmp_path / "u.yaml"),
        "lengths": (["lengths", str(lengths), "--out", str(tmp_path / "L")], tmp_path / "L" / "fits.json"),
        "report": (["report", str(run), "--out", str(tmp_path / "R")], tmp_path / "R" / "index.html"),
    }  # fmt: skip


@pytest.mark.parametrize(
    "command",
    [
        "from-verl",
        "size",
        "sweep --out",
        "sweep --plot",
        "penalty",
        "compare",
        "trace",
        "calibrate",
        "lengths",
        "report",
    ],
)
def test_an_existing_user_file_is_refused_unless_forced(command: str, run_dir: Path, tmp_path: Path, capsys) -> None:
    args, target = _commands(tmp_path, run_dir)[command]
    user_file(target)
    message = refused(capsys, *args)
    assert str(target if target.parent == tmp_path else target.parent) in message
    assert "add --force" in message
    assert target.read_text() == USER_TEXT
    assert not list(tmp_path.glob(".asyncrl-tmp-*"))
    if command == "calibrate":  # --force gets past the check, to a fit this simulated run cannot give
        assert "add --force" not in refused(capsys, *args, "--force")
        return
    assert main([*args, "--force"]) == 0, capsys.readouterr().err
    assert target.read_bytes() != USER_TEXT.encode()
    if target.parent != tmp_path:  # a directory of asyncrl's files, marked: run again without --force
        assert (target.parent / OUT_MARK).is_file()
        capsys.readouterr()
        assert main(args) == 0


def test_default_names_under_runs_are_asyncrls_own_and_replaced(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    for _ in range(2):
        assert main(["size", "cpu-timing", "--devices", "2", *QUICK]) == 0
    assert len(list((tmp_path / "runs").glob("cpu-timing-*-size.csv"))) == 1


def test_a_planted_lock_link_is_refused_and_its_target_untouched(tmp_path: Path, capsys) -> None:
    """``D/.asyncrl-run`` linking to a user file: the file came to hold a PID."""
    victim = user_file(tmp_path / "victim.txt")
    out = tmp_path / "out"
    out.mkdir()
    (out / LOCK_FILE).symlink_to(victim)
    message = refused(capsys, "simulate", "cpu-timing", *QUICK, "--out", str(out))
    assert message == f"--out: {out / LOCK_FILE} is a symbolic link, not a lock asyncrl made"
    assert victim.read_text() == USER_TEXT


def test_a_planted_record_file_link_is_replaced_not_followed(run_dir: Path, tmp_path: Path, capsys) -> None:
    """``D/scenario.yaml`` (or summary.json) as a link: its target was overwritten."""
    victims = {name: user_file(tmp_path / f"victim-{name}") for name in ("scenario.yaml", "summary.json")}
    for name, victim in victims.items():
        (run_dir / name).unlink()
        (run_dir / name).symlink_to(victim)
    assert main(["simulate", "cpu-timing", *QUICK, "--out", str(run_dir)]) == 0
    for name, victim in victims.items():
        assert victim.read_text() == USER_TEXT
        assert not (run_dir / name).is_symlink() and (run_dir / name).stat().st_size > 0
    capsys.readouterr()


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    """A disk that fills during a write: the old file stays whole, the error names the file."""
    target = user_file(tmp_path / "table.csv")
    full = pytest.raises(OutputError, match=rf"^out: cannot write {target}: No space left on device$")
    with full, written(target) as temporary:
        temporary.write_text("half a row")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    assert target.read_text() == USER_TEXT
    assert sorted(path.name for path in tmp_path.iterdir()) == ["table.csv"]


def test_a_full_disk_during_size_leaves_no_csv_and_names_it(tmp_path: Path, monkeypatch, capsys) -> None:
    """A truncated CSV whose last row was cut (or a 0-byte one) looked complete."""
    import csv

    class FullDisk:
        def __init__(self, handle, **_) -> None:
            self.rows = 0

        def writeheader(self) -> None:
            pass

        def writerows(self, rows) -> None:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(csv, "DictWriter", FullDisk)
    out = tmp_path / "size.csv"
    message = refused(capsys, "size", "cpu-timing", "--devices", "2", *QUICK, "--out", str(out))
    assert message == f"--out: cannot write {out}: No space left on device"
    assert sorted(path.name for path in tmp_path.iterdir()) == []


def test_an_out_name_too_long_is_one_line(tmp_path: Path, capsys) -> None:
    long = tmp_path / ("a" * 300 + ".csv")
    assert "File name too long" in refused(capsys, "size", "cpu-timing", "--devices", "2", *QUICK, "--out", str(long))
    directory = tmp_path / ("b" * 300)
    assert "File name too long" in refused(capsys, "simulate", "cpu-timing", *QUICK, "--out", str(directory))


def test_a_report_that_fails_leaves_no_directory(tmp_path: Path, capsys) -> None:
    out = tmp_path / "report"
    assert refused(capsys, "report", str(tmp_path / "missing"), "--out", str(out)).endswith("no such run directory")
    assert not out.exists()


def test_own_default_names(tmp_path: Path, run_dir: Path) -> None:
    assert outputs.own_default(Path("runs/x-size.csv"))
    assert not outputs.own_default(Path("x.yaml")) and not outputs.own_default(tmp_path / "runs" / "x.csv")
    assert outputs.own_default(run_dir / "trace.json.gz") and not outputs.own_default(tmp_path / "trace.json.gz")
