"""Process pools that end with the command that started them, however it ends.

    new_pool(workers, context)     a pool whose workers are started at once, SIGTERM and SIGINT held while they
                                   fork; a worker: SIGTERM ends it (not the command's handler, which a forked
                                   worker inherits), and it gets SIGTERM from the kernel when its parent dies
                                   (prctl, Linux)
    with stopping(pool): ...       an exception (Ctrl-C, SIGTERM as asyncrl.cli's Terminated, an error)
                                   terminates the workers at once instead of waiting for the runs they hold;
                                   one that outlives SIGTERM for STOP_WAIT_S is killed

Without these, ``kill -TERM`` of ``asyncrl size --exact``, ``sweep`` or ``speedup`` left the pool's workers
running under PID 1 (a SIGTERM reaches the parent only, where Ctrl-C reaches the whole process group), and a
worker that inherited the command's SIGTERM handler took the signal for its task's error and went on.

Why the signals are held while workers fork: Python runs a signal's handler between bytecodes, and the
``os.register_at_fork`` hooks (logging's, random's) are bytecodes whose exceptions Python prints and drops. A
SIGTERM that came as the pool forked raised its Terminated inside such a hook: in the command, which then went
on to finish (exit 0); in a worker not yet past its initializer, which took no notice of ``stop``'s SIGTERM
and kept its parent waiting at exit, forever. A held signal takes effect when the workers are up.
Here rather than in ``simulator`` because the study's pool (``asyncrl.experiments.study_runs``) uses it too.
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
from multiprocessing.context import BaseContext
from types import FrameType

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


HELD = (signal.SIGTERM, signal.SIGINT)  # the signals whose handlers raise (asyncrl.cli's Terminated, Ctrl-C)


def worker_start(parent: int) -> None:
    """A pool worker's first act: SIGTERM's default action back (SIGINT's usual one: KeyboardInterrupt), and
    SIGTERM when ``parent`` (the pid of the process that made the pool) dies."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    set_parent_death_signal(signal.SIGTERM)
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(1)


def new_pool(workers: int, context: BaseContext) -> ProcessPoolExecutor:
    """A pool of ``workers`` processes that end with this one. Forked workers start now, with SIGTERM and
    SIGINT held until they are up (see the module's docstring); spawned ones start on demand, as usual (no
    fork hooks run in this process for them)."""
    pool = ProcessPoolExecutor(workers, mp_context=context, initializer=worker_start, initargs=(os.getpid(),))
    if context.get_start_method() == "fork":
        with stopping(pool), signals_held(HELD):  # a signal held comes out as the block ends: the pool stops
            pool.submit(int).result()  # a fork pool forks all its workers on its first task
    return pool


@contextlib.contextmanager
def signals_held(signums: tuple[signal.Signals, ...]) -> Iterator[None]:
    """Inside the block, ``signums`` only take note that they came; each one that did is raised again, once,
    as the block ends, to the handler it had before. Nothing held off the main thread (which alone may set
    handlers), nor a signal whose handler Python did not set."""
    previous = {signum: signal.getsignal(signum) for signum in signums}
    held = [signum for signum, handler in previous.items() if handler is not None]
    if threading.current_thread() is not threading.main_thread() or not held:
        yield
        return
    came: list[int] = []

    def note(signum: int, frame: FrameType | None) -> None:
        came.append(signum)

    for signum in held:
        signal.signal(signum, note)
    try:
        yield
    finally:
        for signum in held:
            signal.signal(signum, previous[signum])
        for noted in dict.fromkeys(came):
            signal.raise_signal(noted)


@contextlib.contextmanager
def stopping(pool: ProcessPoolExecutor) -> Iterator[ProcessPoolExecutor]:
    """``pool``, whose workers are terminated if the block raises (anything, KeyboardInterrupt included)."""
    try:
        yield pool
    except BaseException:
        stop(pool)
        raise


def stop(pool: ProcessPoolExecutor) -> None:
    """Terminate the pool's workers, cancel what waits, and reap them (a few seconds at most: a worker still
    there after STOP_WAIT_S is killed)."""
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
            if worker.is_alive():
                worker.kill()
                worker.join()
    if manager is not None and manager.is_alive() and manager is not threading.current_thread():
        manager.join(STOP_WAIT_S)
