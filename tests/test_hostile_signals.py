"""The hostile-input round (issue 22), signals: SIGTERM to a command ends it with a message and status 143, its
process pool's workers with it (they were left running under PID 1), a run directory it wrote nothing into is
removed, and ``compare`` and ``report`` say when a run they read did not complete."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from asyncrl.cli import EXIT_TERMINATED, main

ROOT = Path(__file__).parents[1]
DEADLINE_S = 60.0  # generous: how long to wait for a process to appear or go (not a timing being measured)
LONG = ["--steps", "3000", "--quiet"]  # long enough to be still simulating when the signal comes


def children(pid: int) -> list[int]:
    """Live (not zombie) processes whose parent is ``pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat is not None and stat[1] == pid and stat[0] != "Z":
                found.append(int(entry.name))
    return found


def _stat(pid: int) -> tuple[str, int] | None:
    """The process's state letter and parent pid; None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0], int(fields[1])


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    stat = _stat(pid)
    return stat is not None and stat[0] != "Z"


def wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"still waiting after {DEADLINE_S:.0f} s for {what}")
        time.sleep(0.1)


def start(args: list[str], cwd: Path) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "asyncrl", *args], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL])
@pytest.mark.parametrize(
    "command",
    [
        ["sweep", "quickstart", "--vary", "run.seed=1,2", "--out", "s.csv"],
        ["size", "quickstart", "--devices", "16", "--splits", "1", "--kind", "streaming", "--exact", "--out", "z.csv"],
        ["speedup", "quickstart"],
    ],
    ids=["sweep", "size --exact", "speedup"],
)
def test_a_killed_pool_command_leaves_no_worker(command: list[str], how: signal.Signals, tmp_path: Path) -> None:
    process = start([*command, *LONG], tmp_path)
    try:
        wait_for(lambda: len(children(process.pid)) >= 2, "the pool's workers")
        workers = children(process.pid)
        process.send_signal(how)
        _, err = process.communicate(timeout=DEADLINE_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    wait_for(lambda: not any(alive(worker) for worker in workers), f"the workers {workers} to end")
    if how == signal.SIGTERM:
        assert process.returncode == EXIT_TERMINATED
        assert err.splitlines()[-1].startswith("asyncrl: terminated (SIGTERM)"), err
    assert not list(tmp_path.glob("*.csv"))  # nothing written, not even a cut file


@pytest.mark.slow
def test_a_terminated_simulate_says_so_and_leaves_no_lock_only_directory(tmp_path: Path) -> None:
    """``--out`` was left holding only ``.asyncrl-run``, exit 143 and no message."""
    out = tmp_path / "run"
    process = start(["simulate", "quickstart", *LONG, "--out", str(out)], tmp_path)
    try:
        wait_for(lambda: (out / ".asyncrl-run").exists(), "the run directory's lock")
        time.sleep(0.5)  # into the simulation itself
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=DEADLINE_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == EXIT_TERMINATED
    assert err.strip() == "asyncrl: terminated (SIGTERM); a run directory being written keeps a partial record"
    assert not out.exists()


@pytest.fixture
def interrupted(tmp_path: Path, capsys) -> tuple[Path, Path]:
    """A complete run and the same run as an execution interrupted after 1 of its 2 steps would leave it."""
    complete, cut = tmp_path / "complete", tmp_path / "cut"
    for out in (complete, cut):
        assert main(["simulate", "cpu-timing", "--steps", "2", "--quiet", "--out", str(out)]) == 0
    summary = json.loads((cut / "summary.json").read_text())
    (cut / "summary.json").write_text(json.dumps({**summary, "status": "interrupted", "steps": 1}))
    capsys.readouterr()
    return complete, cut


def test_compare_says_a_run_is_interrupted(interrupted: tuple[Path, Path], capsys) -> None:
    complete, cut = interrupted
    assert main(["compare", str(complete), str(cut)]) == 0
    out = capsys.readouterr().out
    assert "note: B ended interrupted after 1 of 2 planned steps: its figures are those of a partial run" in out
    assert main(["compare", str(complete), str(cut), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["b"]["status"], data["b"]["steps"], data["b"]["planned_steps"]) == ("interrupted", 1, 2)
    assert "status" not in data["a"]


def test_report_says_a_run_is_interrupted(interrupted: tuple[Path, Path], tmp_path: Path, capsys) -> None:
    complete, cut = interrupted
    assert main(["report", str(complete), str(cut), "--out", str(tmp_path / "report")]) == 0
    note = "cut ended interrupted after 1 of 2 planned steps: its figures are those of a partial run"
    assert f"note: {note}" in capsys.readouterr().out
    assert f"<p class='warning'>{note}</p>" in (tmp_path / "report" / "index.html").read_text()


def test_sigterm_raises_where_the_command_is_and_the_handler_is_put_back(capsys) -> None:
    """In process: the command sees SIGTERM as an interrupt (a run records itself as interrupted)."""

    def terminated(args) -> int:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(DEADLINE_S)  # never reached: the handler raises in this frame
        return 0

    before = signal.getsignal(signal.SIGTERM)
    from asyncrl import cli

    args = cli._parser().parse_args(["schema"])
    args.command = terminated
    with cli._terminate_as_interrupt():
        assert cli._run(args) == EXIT_TERMINATED
    assert signal.getsignal(signal.SIGTERM) is before
    assert "terminated (SIGTERM)" in capsys.readouterr().err


def descendants(pid: int) -> list[int]:
    found = children(pid)
    for child in list(found):
        found += descendants(child)
    return found


@pytest.mark.slow
def test_a_terminated_execution_records_itself_interrupted_and_leaves_no_process(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "run"
    args = ["execute", "cpu-timing", "run.checkpoint_every=2", "--steps", "400", "--quiet", "--out", str(out)]
    process = start(args, tmp_path)
    try:
        wait_for(lambda: (out / "checkpoint" / "learner").exists(), "the run's first checkpoint")  # it is training
        every = descendants(process.pid)
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=DEADLINE_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == EXIT_TERMINATED, err
    assert err.splitlines()[-1].startswith("asyncrl: terminated (SIGTERM)")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["steps"] < 400
    wait_for(lambda: not any(alive(pid) for pid in every), f"the run's processes {every} to end")


def test_a_stopped_pool_has_no_thread_left_to_wake() -> None:
    # Python 3.11's exit hook wakes every pool's manager thread through a pipe, without the pool's lock; a
    # thread still ending then could close that pipe under it ("OSError: Bad file descriptor" after the
    # command's last line). ``stop`` waits for the thread, which shutdown forgets.
    import multiprocessing
    import time

    from asyncrl.scenarios.files.pools import new_pool, stop

    pool = new_pool(2, multiprocessing.get_context("spawn"))
    busy = [pool.submit(time.sleep, 30) for _ in range(3)]
    wait_for(lambda: all(worker.is_alive() for worker in pool._processes.values()), "the pool's workers")
    manager = pool._executor_manager_thread
    assert manager is not None and manager.is_alive()
    stop(pool)
    assert not manager.is_alive()
    assert all(future.cancelled() or future.done() for future in busy)


@pytest.mark.slow
@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL])
def test_a_second_writer_is_refused_and_a_killed_auto_resumed_run_resumes_to_a_whole_record(
    how: signal.Signals, tmp_path: Path
) -> None:
    """``execute --auto-resume --max-restarts 1`` killed from outside (SIGTERM, or SIGKILL: no handler runs)
    after its first checkpoint: a second ``execute`` on the same ``--out`` meanwhile is refused in one line,
    no process of the run outlives it, and ``--resume`` ends the run with every step trained once."""
    pytest.importorskip("torch")
    from asyncrl.analysis.records.exactly_once import exactly_once_violations
    from asyncrl.scenarios.record.record import RunRecord

    out = tmp_path / "run"
    settings = ["cpu-timing", "run.checkpoint_every=2", "run.steps=40", "--quiet", "--out", str(out)]
    process = start(["execute", *settings, "--auto-resume", "--max-restarts", "1"], tmp_path)
    try:
        wait_for(lambda: (out / "checkpoint" / "learner").exists(), "the run's first checkpoint")
        second = start(["execute", *settings], tmp_path)
        _, second_err = second.communicate(timeout=DEADLINE_S)
        every = descendants(process.pid)
        process.send_signal(how)
        process.communicate(timeout=DEADLINE_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert second.returncode == 2 and len(second_err.strip().splitlines()) == 1, second_err
    assert "is being written by another run" in second_err
    wait_for(lambda: not any(alive(pid) for pid in every), f"the run's processes {every} to end")
    resumed = start(["execute", "cpu-timing", "--resume", str(out), "--quiet"], tmp_path)
    _, err = resumed.communicate(timeout=4 * DEADLINE_S)
    assert resumed.returncode == 0, err
    record = RunRecord.read(out)
    assert record.summary is not None and record.summary.status == "complete" and record.summary.steps == 40
    assert exactly_once_violations(record.scenario, record.events, record.metrics) == []
