"""Process pools that end with their command (scenarios/files/pools.py): signals held while workers fork, a worker
that outlives SIGTERM killed, and a SIGTERM that comes while the pool forks ending the command (it was dropped
inside a fork hook, and the command finished with exit 0)."""

from __future__ import annotations

import multiprocessing
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from asyncrl.scenarios.files.pools import new_pool, signals_held, stop

ROOT = Path(__file__).parents[1]


@pytest.fixture
def usr1_calls():
    """SIGUSR1 answered by a handler that notes each call; the old handler back after."""
    calls: list[int] = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: calls.append(signum))
    yield calls
    signal.signal(signal.SIGUSR1, previous)


def test_a_held_signal_comes_once_as_the_block_ends(usr1_calls: list[int]) -> None:
    handler = signal.getsignal(signal.SIGUSR1)
    with signals_held((signal.SIGUSR1,)):
        signal.raise_signal(signal.SIGUSR1)
        signal.raise_signal(signal.SIGUSR1)
        assert usr1_calls == []
    assert usr1_calls == [signal.SIGUSR1]
    assert signal.getsignal(signal.SIGUSR1) is handler


def test_a_block_without_the_signal_calls_nothing(usr1_calls: list[int]) -> None:
    with signals_held((signal.SIGUSR1,)):
        pass
    assert usr1_calls == []


def test_a_held_signal_whose_handler_raises_raises_after_the_block() -> None:
    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGUSR1, interrupt)
    reached_the_end = False
    try:
        with pytest.raises(KeyboardInterrupt), signals_held((signal.SIGUSR1,)):
            signal.raise_signal(signal.SIGUSR1)
            reached_the_end = True
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert reached_the_end


def test_a_fork_pool_has_its_workers_when_made() -> None:
    pool = new_pool(2, multiprocessing.get_context("fork"))
    try:
        workers = list(pool._processes.values())
        assert len(workers) == 2 and all(worker.is_alive() for worker in workers)
        assert pool.submit(sum, [1, 2]).result() == 3
    finally:
        pool.shutdown()


def _deaf() -> int:
    """A worker that stops listening to SIGTERM, as one did whose Terminated was dropped in a fork hook."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(60)
    return 0


def test_stop_kills_a_worker_that_outlives_sigterm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("asyncrl.scenarios.files.pools.STOP_WAIT_S", 0.5)
    pool = new_pool(1, multiprocessing.get_context("fork"))
    (worker,) = pool._processes.values()
    pool.submit(_deaf)
    time.sleep(0.5)  # into the task, SIGTERM ignored
    stop(pool)
    assert not worker.is_alive()
    assert worker.exitcode == -signal.SIGKILL


FORK_HOOK_SIGTERM = textwrap.dedent("""
    import multiprocessing, os, signal, sys
    from asyncrl.cli import Terminated, _terminate_as_interrupt
    from asyncrl.scenarios.files.pools import new_pool

    sent = []
    def sigterm_in_fork_hook():  # SIGTERM as the first worker forks: its handler runs inside this hook
        if not sent:
            sent.append(1)
            os.kill(os.getpid(), signal.SIGTERM)

    os.register_at_fork(after_in_parent=sigterm_in_fork_hook)
    with _terminate_as_interrupt():
        try:
            pool = new_pool(2, multiprocessing.get_context("fork"))
        except Terminated:
            print("terminated;", "workers left:", len(multiprocessing.active_children()))
            sys.exit(0)
    print("SIGTERM dropped; the pool was made")
""")


def test_a_sigterm_while_the_workers_fork_ends_the_command_and_its_workers() -> None:
    done = subprocess.run(
        [sys.executable, "-c", FORK_HOOK_SIGTERM], cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "terminated; workers left: 0", done.stderr
    assert "Exception ignored" not in done.stderr
