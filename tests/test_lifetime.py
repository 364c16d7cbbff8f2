"""Killing ``asyncrl execute`` with SIGKILL leaves no actor process (nor the resource tracker) behind."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

ROOT = Path(__file__).parents[1]


def has_prctl() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        return hasattr(ctypes.CDLL(None), "prctl")
    except OSError:
        return False


pytestmark = pytest.mark.skipif(not has_prctl(), reason="needs Linux prctl(PR_SET_PDEATHSIG)")


def children(pid: int) -> dict[int, str]:
    """Live processes whose parent is ``pid``, with their command lines."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and parent_of(int(entry.name)) == pid:
            found[int(entry.name)] = command_line(int(entry.name))
    return found


def descendants(pid: int) -> dict[int, str]:
    """Live processes under ``pid``: its children, theirs, and so on, with their command lines."""
    found = children(pid)
    for child in list(found):
        found |= descendants(child)
    return found


def parent_of(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def alive(pid: int) -> bool:
    """Running, not gone and not a zombie waiting for PID 1 to reap it."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def wait_for(condition, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return condition()


@pytest.mark.slow
def test_sigkill_of_execute_takes_its_actors_and_the_resource_tracker_along(tmp_path: Path) -> None:
    out = tmp_path / "run"
    command = [sys.executable, "-m", "asyncrl", "execute", "cpu-timing", "--steps", "5000", "--quiet"]
    overrides = ["workload.completion_tokens.max_tokens=48", "run.checkpoint_every=1"]
    command += [arg for override in overrides for arg in ("--set", override)] + ["--out", str(out)]
    main = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        progress = out / "checkpoint" / "progress.json"
        assert wait_for(lambda: progress.exists() or main.poll() is not None, 180), "the run never checkpointed"
        assert main.poll() is None, "the run ended by itself"
        started = descendants(main.pid)
        forkservers = [pid for pid, line in children(main.pid).items() if "forkserver" in line]
        actors = [pid for pid in started if parent_of(pid) in forkservers]
        assert actors, started  # the engine process, forked from the learner's forkserver
        os.kill(main.pid, signal.SIGKILL)
        main.wait(timeout=30)
        assert wait_for(lambda: not any(alive(pid) for pid in started), 30), {
            pid: command_line(pid) for pid in started if alive(pid)
        }
    finally:
        if main.poll() is None:
            main.kill()
    assert not (out / "summary.json").exists()  # killed: the directory does not claim a finished run
    assert progress.exists()
