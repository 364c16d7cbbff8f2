"""SIGTERM ``asyncrl sweep`` at many moments around its pool's start and count what goes wrong.

    python scripts/sigterm_storm.py [TRIES]     # default 100, about a second each (Linux: reads /proc)

Each try starts a two-point sweep long enough to be simulating, waits for the pool's first worker, its second,
or its second plus up to 50 ms (chosen at random), then sends SIGTERM. A try is right when the command ends
within 20 s with status 143 and no worker left; otherwise the storm prints its status and the command's stderr.
Timing-dependent by nature, so a script to run when the pools change, not a test (tests/test_pools.py holds
the mechanisms one by one).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from asyncrl.cli import EXIT_TERMINATED

ROOT = Path(__file__).parents[1]
COMMAND = ["sweep", "quickstart", "--vary", "run.seed=1,2", "--out", "s.csv", "--force", "--steps", "3000", "--quiet"]
DEADLINE_S = 20.0


def children(pid: int) -> list[int]:
    """Live (not zombie) processes whose parent is ``pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split() if entry.name.isdigit() else []
        except OSError:
            continue
        if fields and int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(entry.name))
    return found


def one_try(moment: str, cwd: str) -> str:
    """'' when the command ended as it should, else what happened."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "PYTHONFAULTHANDLER": "1"}
    command = subprocess.Popen(
        [sys.executable, "-m", "asyncrl", *COMMAND], cwd=cwd, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    wanted = 1 if moment == "first worker" else 2
    start = time.monotonic()
    while len(children(command.pid)) < wanted and time.monotonic() - start < DEADLINE_S:
        time.sleep(0.0005)
    if moment == "second worker + up to 50 ms":
        time.sleep(random.uniform(0, 0.05))
    workers = children(command.pid)
    command.send_signal(signal.SIGTERM)
    try:
        _, err = command.communicate(timeout=DEADLINE_S)
    except subprocess.TimeoutExpired:
        for pid in [*children(command.pid), command.pid]:  # tracebacks of every thread (PYTHONFAULTHANDLER)
            os.kill(pid, signal.SIGABRT)
        _, err = command.communicate()
        return f"still running {DEADLINE_S:.0f} s after SIGTERM\n{err}"
    if command.returncode != EXIT_TERMINATED:
        return f"exit {command.returncode}\n{err}"
    start = time.monotonic()  # the kernel ends a worker whose parent died; give it a moment
    while any(_alive(pid) for pid in workers) and time.monotonic() - start < 5:
        time.sleep(0.05)
    left = [pid for pid in workers if _alive(pid)]
    return f"workers left: {left}" if left else ""


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def main() -> int:
    tries = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    moments = ["first worker", "second worker", "second worker + up to 50 ms"]
    wrong = 0
    with tempfile.TemporaryDirectory() as cwd:
        for index in range(tries):
            moment = random.choice(moments)
            what = one_try(moment, cwd)
            if what:
                wrong += 1
                print(f"try {index} (SIGTERM at the {moment}): {what}", flush=True)
    print(f"{wrong} of {tries} tries went wrong")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
