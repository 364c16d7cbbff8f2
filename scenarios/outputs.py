"""Where runs write: run directories checked before any work, kept inside ``runs/``, and locked.

    default_run_dir(name)   runs/<name made safe>: a scenario's name never leaves runs/ ("../x" → runs/x)
    run_directory(out)      before the run: out is (or can be made) a directory, is writable, is empty or a
                            run record (else --force), and no other run holds it ──► OutputError (exit 2)
                            during: an exclusive lock on out/.asyncrl-run (released when the process ends,
                            however it ends), summary.json removed until the run writes its new one
                            after: a directory the run wrote nothing into is removed again
    lock_directory(out)     that lock alone, for any writer of a directory (a study locks out/.asyncrl-study)
    check_output_file(p)    a file a command will write: not a directory, its folder can be made, writable

A run directory is marked by its lock file, which stays after the run;
directories written before the marker existed are recognised by their files
(only run-record files, with events.parquet or a summary.json that is a run's).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

from asyncrl.scenarios.loading import ScenarioError

RUNS_DIR = Path("runs")
LOCK_FILE = ".asyncrl-run"
SUMMARY_FILE = "summary.json"
#: Everything a run, ``compare`` or ``trace`` writes into a run directory.
RUN_FILES = frozenset(
    {
        LOCK_FILE,
        SUMMARY_FILE,
        "scenario.yaml",
        "events.parquet",
        "metrics.parquet",
        "engine_steps.parquet",
        "checkpoint",
        "comparison.json",
        "trace.json",
    }
)
_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")


class OutputError(ScenarioError):
    """An output location that cannot be used; one line naming the option and the path."""


def default_run_dir(name: str, suffix: str = "") -> Path:
    """``runs/<name><suffix>`` with every character that could leave ``runs/`` (or hide the file) replaced."""
    return RUNS_DIR / safe_file_name(name + suffix)


def safe_file_name(name: str) -> str:
    """One path component: letters, digits and ``._+-``, no leading dot or dash, at most 200 characters."""
    safe = _UNSAFE.sub("-", name).lstrip(".-")[:200]
    return safe or "run"


@contextlib.contextmanager
def run_directory(out: Path, *, force: bool = False, option: str = "out") -> Iterator[Path]:
    """Check, create and lock ``out`` for one run; OutputError before any work if it cannot be used."""
    created = _create(out, option)
    try:
        _check_contents(out, force, option)
        lock = lock_directory(out, option)
    except BaseException:
        _remove_created(created)
        raise
    try:
        (out / SUMMARY_FILE).unlink(missing_ok=True)  # rewritten when the run ends; until then, incomplete
        yield out
    finally:
        if _only_the_lock(out):
            (out / LOCK_FILE).unlink(missing_ok=True)
            _remove_created(created)
        os.close(lock)


def check_output_file(path: Path, option: str = "out") -> Path:
    """Make sure ``path`` can be written (its folder made, the file opened) before any work; OutputError if not."""
    if path.is_dir():
        raise OutputError(f"{option}: {path} is a directory; give a file name")
    created = _create(path.parent, option, target=path)
    existed = path.exists()
    try:
        with path.open("a"):
            pass
    except OSError as exc:
        _remove_created(created)
        raise OutputError(f"{option}: cannot write {path}: {_reason(exc)}") from None
    if not existed:
        path.unlink()
        _remove_created(created)
    return path


def is_run_record(directory: Path) -> bool:
    """A directory a run wrote: it has the lock file, or only run-record files with events or a run's summary."""
    names = {entry.name for entry in directory.iterdir()}
    if LOCK_FILE in names:
        return True
    if not names <= RUN_FILES:
        return False
    return "events.parquet" in names or (SUMMARY_FILE in names and _is_summary(directory / SUMMARY_FILE))


def _is_summary(path: Path) -> bool:
    """Whether ``path`` holds a run's summary (a RunSummary), not some other JSON of the same name."""
    from asyncrl.scenarios.record import RunRecordError, validate_summary

    try:
        validate_summary(json.loads(path.read_text()), source=path)
    except (OSError, ValueError, RunRecordError):
        return False
    return True


def _create(out: Path, option: str, target: Path | None = None) -> list[Path]:
    """Make ``out`` and its missing parents; the folders made, outermost first (to undo).

    Errors name ``target`` (what the user gave: ``out`` itself, or a file to be written in it).
    """
    target = target or out
    missing = []
    for folder in [out, *out.parents]:
        if folder.is_dir():
            break
        if folder.exists() or folder.is_symlink():
            what = "is a file" if folder == target else f"is inside a file ({folder})"
            raise OutputError(f"{option}: {target} {what}")
        missing.append(folder)
    made: list[Path] = []
    for folder in reversed(missing):
        try:
            folder.mkdir()
        except FileExistsError:
            continue  # made meanwhile by someone else: not ours to remove
        except OSError as exc:
            _remove_created(made)
            raise OutputError(f"{option}: cannot create {target}: {_reason(exc)}") from None
        made.append(folder)
    return made


def _check_contents(out: Path, force: bool, option: str) -> None:
    try:
        if force or not any(out.iterdir()) or is_run_record(out):
            return
        names = sorted(entry.name for entry in out.iterdir())
    except OSError as exc:
        raise OutputError(f"{option}: cannot read {out}: {_reason(exc)}") from None
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    raise OutputError(
        f"{option}: {out} holds files that are not a run record ({shown}); choose an empty directory or add --force"
    )


def lock_directory(out: Path, option: str = "out", *, lock_file: str = LOCK_FILE, writer: str = "run") -> int:
    """An exclusive lock on ``out/lock_file``, held until the descriptor closes (or the process ends).

    The file keeps the holder's pid; OutputError naming ``option`` (and the other ``writer``'s pid) if it is held.
    """
    path = out / lock_file
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise OutputError(f"{option}: cannot write in {out}: {_reason(exc)}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        holder = os.read(fd, 32).decode(errors="replace").strip()
        os.close(fd)
        if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
            raise OutputError(f"{option}: {out} is being written by another {writer} (pid {holder or '?'})") from None
        raise OutputError(f"{option}: cannot lock {out}: {_reason(exc)}") from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def _only_the_lock(out: Path) -> bool:
    try:
        return [entry.name for entry in out.iterdir()] == [LOCK_FILE]
    except OSError:
        return False


def _remove_created(created: list[Path]) -> None:
    """Remove the folders ``_create`` made, innermost first, as long as they are empty."""
    for folder in reversed(created):
        try:
            folder.rmdir()
        except OSError:
            return


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)
