"""Actor processes die with the learner process that started them, however it ends.

    learner ──► forkserver ──fork──► actor: die_with_parent() first thing
                                       Linux: prctl(PR_SET_PDEATHSIG, SIGKILL): the kernel kills the actor when
                                       the process that forked it (the forkserver) goes
                                       elsewhere: a daemon thread that polls os.getppid() and exits when it changes

Local actors fork from multiprocessing's forkserver (``executor/processes/workers.py``),
and the forkserver exits as soon as the learner's process does (it reads EOF
on a pipe the learner holds), so the chain ends every actor with the learner.
Without this, a SIGKILL of ``asyncrl execute`` (or the OOM killer) leaves the
actors, each holding a model, reparented to PID 1. Once they are gone, the
multiprocessing resource tracker sees its pipe close and exits too.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from typing import Any

from ...scenarios.files.pools import set_parent_death_signal

WATCH_INTERVAL_S = 0.5


def die_with_parent() -> str:
    """Arrange for this process to end when its multiprocessing parent does; how: ``prctl``, ``watchdog`` or ``none``."""
    parent = multiprocessing.parent_process()
    if parent is None or parent.pid is None:
        return "none"  # not started by multiprocessing (a Ray worker): its own runtime owns its lifetime
    _release_forkserver()
    how = "prctl" if set_parent_death_signal(signal.SIGKILL) else _watch(os.getppid())
    if not _alive(parent.pid):  # the learner died before the signal was armed
        os._exit(1)
    return how


def _release_forkserver() -> None:
    """Let go of the forkserver's "alive" pipe, which every process forked from it inherits.

    The forkserver runs until every holder of that pipe's write end has closed it: the learner and, by design,
    each process it forked. An actor that kept it would keep the forkserver running, and the forkserver, the
    actor's kernel parent, would keep the actor from its death signal: both would outlive a killed learner.
    """
    from multiprocessing import forkserver

    # multiprocessing's own forkserver; private, stable since Python 3.4 (Any: typeshed omits its fields)
    server: Any = forkserver._forkserver
    if server._forkserver_alive_fd is not None:
        os.close(server._forkserver_alive_fd)
        server._forkserver_alive_fd = None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _watch(parent_pid: int) -> str:
    """A daemon thread that ends this process as soon as its kernel parent is no longer ``parent_pid``."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(WATCH_INTERVAL_S)
        os._exit(1)

    threading.Thread(target=watch, name="asyncrl-parent-watchdog", daemon=True).start()
    return "watchdog"
