"""Process pools that end with the command that started them, however it ends.

    ProcessPoolExecutor(..., **pool_options())            a worker: SIGTERM ends it (not the command's handler,
                                                          which a forked worker inherits), and it gets SIGTERM
                                                          from the kernel when its parent dies (prctl, Linux)
    with stopping(pool): ...                              an exception (Ctrl-C, SIGTERM as asyncrl.cli's
                                                          Terminated, an error) terminates the workers at once
                                                          instead of waiting for the runs they hold

Without these, ``kill -TERM`` of ``asyncrl size --exact``, ``sweep`` or ``speedup`` left the pool's workers
running under PID 1 (a SIGTERM reaches the parent only, where Ctrl-C reaches the whole process group), and a
worker that inherited the command's SIGTERM handler took the signal for its task's error and went on.
Here rather than in ``simulator`` because the study's pool (``asyncrl.study_runs``) uses it too.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from typing import Any

PR_SET_PDEATHSIG = 1
STOP_WAIT_S = 5.0


def set_parent_death_signal(signum: int) -> bool:
    """prctl(PR_SET_PDEATHSIG, signum) through libc; False where the platform has no prctl."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def worker_start(parent: int) -> None:
    """A pool worker's first act: SIGTERM's default action back, and SIGTERM when ``parent`` (the pid of the
    process that made the pool: ``initargs=(os.getpid(),)``) dies."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    set_parent_death_signal(signal.SIGTERM)
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(1)


def pool_options() -> dict[str, Any]:
    """``ProcessPoolExecutor``'s ``initializer`` and ``initargs`` for workers that end with this process."""
    return {"initializer": worker_start, "initargs": (os.getpid(),)}


@contextlib.contextmanager
def stopping(pool: ProcessPoolExecutor) -> Iterator[ProcessPoolExecutor]:
    """``pool``, whose workers are terminated if the block raises (anything, KeyboardInterrupt included)."""
    try:
        yield pool
    except BaseException:
        stop(pool)
        raise


def stop(pool: ProcessPoolExecutor) -> None:
    """Terminate the pool's workers, cancel what waits, and reap them (a few seconds at most)."""
    workers = list((getattr(pool, "_processes", None) or {}).values())  # private, stable since Python 3.2
    # The pool's manager thread closes its wake-up pipe as it ends; Python's exit hook writes to that pipe
    # without the pool's lock (CPython 3.11), so a command exiting while the thread still ends could print
    # "OSError: Bad file descriptor" after its own last line. Waiting for the thread leaves the pipe closed;
    # taken now, since shutdown forgets it.
    manager = getattr(pool, "_executor_manager_thread", None)  # private, stable since Python 3.9
    for worker in workers:
        with contextlib.suppress(OSError, ValueError):
            worker.terminate()
    pool.shutdown(wait=False, cancel_futures=True)
    for worker in workers:
        with contextlib.suppress(OSError, ValueError, AssertionError):
            worker.join(STOP_WAIT_S)
    if manager is not None and manager is not threading.current_thread():
        manager.join(STOP_WAIT_S)
