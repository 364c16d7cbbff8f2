"""Actor processes die with the learner process that started them, however it ends.

    learner ──spawn──► actor: die_with_parent() first thing
                         Linux: prctl(PR_SET_PDEATHSIG, SIGKILL): the kernel kills the actor when its parent goes
                         elsewhere: a daemon thread that polls os.getppid() and exits when it changes

Without this, a SIGKILL of ``asyncrl execute`` (or the OOM killer) leaves the
actors, each holding a model, reparented to PID 1. Once they are gone, the
multiprocessing resource tracker sees its pipe close and exits too.

The kernel sends the signal when the *thread* that started the actor exits;
the runtime starts actors from the thread that runs the whole execution, so
that is when the run ends anyway.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import multiprocessing
import os
import signal
import sys
import threading
import time

PR_SET_PDEATHSIG = 1
WATCH_INTERVAL_S = 0.5


def die_with_parent() -> str:
    """Arrange for this process to end when its multiprocessing parent does; how: ``prctl``, ``watchdog`` or ``none``."""
    parent = multiprocessing.parent_process()
    if parent is None or parent.pid is None:
        return "none"  # not started by multiprocessing (a Ray worker): its own runtime owns its lifetime
    how = "prctl" if set_parent_death_signal(signal.SIGKILL) else _watch(parent.pid)
    if os.getppid() != parent.pid:  # the parent died before the signal was armed
        os._exit(1)
    return how


def set_parent_death_signal(signum: int) -> bool:
    """prctl(PR_SET_PDEATHSIG, signum) through libc; False where the platform has no prctl."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch(parent_pid: int) -> str:
    """A daemon thread that ends this process as soon as its parent is no longer ``parent_pid``."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(WATCH_INTERVAL_S)
        os._exit(1)

    threading.Thread(target=watch, name="asyncrl-parent-watchdog", daemon=True).start()
    return "watchdog"
