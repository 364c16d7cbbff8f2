"""Where runs write: run directories checked before any work, kept inside ``runs/``, and locked.

    default_run_dir(name)   runs/<name made safe>: a scenario's name never leaves runs/ ("../x" → runs/x)
    run_directory(out)      before the run: out is (or can be made) a directory, is writable, is empty or a
                            run record (else --force), and no other run holds it ──► OutputError (exit 2)
                            during: an exclusive lock on out/.asyncrl-run (released when the process ends,
                            however it ends), summary.json removed until the run writes its new one
                            after: a directory the run wrote nothing into is removed again
    lock_directory(out)     that lock alone, for any writer of a directory (a study locks out/.asyncrl-study)
    check_output_file(p)    a file a command will write: not a directory, its folder can be made, writable, and
                            not a file already there unless replace (--force, or a name asyncrl chose: own_default)
    output_directory(d)     a directory of a command's files (lengths, report, plan): empty, new, or one this tool
                            wrote (it holds .asyncrl-out), else --force
    written(p)              (scenarios/files/writing.py) a temporary file beside p, renamed onto p once complete

What asyncrl replaces: nothing it did not write, unless told to. An --out (or --plot) that names an existing file
is refused unless --force; so is a directory holding files that are not asyncrl's (a run directory without its
lock file, a report or lengths directory without .asyncrl-out). The names asyncrl picks itself (runs/..., and a
run record's own files such as RUN/trace.json.gz) are its own and are replaced. Every file is written whole to a
temporary file in the same directory and renamed into place: a failed, interrupted or disk-full write leaves the
old file (or none), never a cut one, and a symbolic link planted at the name is replaced, never followed.

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
import tempfile
from collections.abc import Iterator
from pathlib import Path

from ..files.writing import _TEMP_PREFIX, OutputError

RUNS_DIR = Path("runs")
LOCK_FILE = ".asyncrl-run"
#: The mark of a directory of a command's files (lengths, report, plan) that asyncrl wrote.
OUT_MARK = ".asyncrl-out"
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
        "trace.json.gz",
    }
)
_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")


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


def check_output_file(path: Path, option: str = "out", *, replace: bool = False) -> Path:
    """Make sure ``path`` can be written (its folder made, a file created in it) before any work; OutputError if
    not, or if a file is there already and not ``replace`` (--force, or one of asyncrl's own names)."""
    try:
        if path.is_dir():
            raise OutputError(f"{option}: {path} is a directory; give a file name")
        there = path.exists() or path.is_symlink()
    except OSError as exc:  # a name too long, a folder that cannot be searched
        raise OutputError(f"{option}: cannot write {path}: {_reason(exc)}") from None
    if there and not replace:
        raise OutputError(f"{option}: {path} exists; add --force to replace it")
    created = _create(path.parent, option, target=path)
    try:
        fd, probe = tempfile.mkstemp(dir=path.parent, prefix=_TEMP_PREFIX, suffix=f"-{path.name}")
    except OSError as exc:
        _remove_created(created)
        raise OutputError(f"{option}: cannot write {path}: {_reason(exc)}") from None
    os.close(fd)
    os.unlink(probe)
    _remove_created(created)
    return path


def own_default(path: Path) -> bool:
    """A name asyncrl chose, which it may replace: under ``runs/``, or a run record's own file in its directory."""
    if RUNS_DIR in path.parents and not path.is_absolute():
        return True
    try:
        return path.name in RUN_FILES and path.parent.is_dir() and is_run_record(path.parent)
    except OSError:
        return False


@contextlib.contextmanager
def files_directory(out: Path, option: str = "out", *, force: bool = False) -> Iterator[Path]:
    """``output_directory`` for one command's writing: a directory it made and left holding only the mark (the
    command failed before writing a file) is removed again."""
    existed = out.is_dir()
    output_directory(out, option, force=force)
    try:
        yield out
    finally:
        if not existed and [entry.name for entry in out.iterdir()] == [OUT_MARK]:
            (out / OUT_MARK).unlink()
            out.rmdir()


def output_directory(out: Path, option: str = "out", *, force: bool = False) -> Path:
    """``out`` made (if missing) and marked as a directory of asyncrl's files (``OUT_MARK``); OutputError if it
    is a file, or holds files asyncrl did not write (its mark missing) and not ``force``."""
    check_directory(out, option, force=force)
    _create(out, option)
    mark = out / OUT_MARK
    if mark.is_symlink():
        raise OutputError(f"{option}: {mark} is a symbolic link")
    try:
        mark.touch()
    except OSError as exc:
        raise OutputError(f"{option}: cannot write in {out}: {_reason(exc)}") from None
    return out


def check_directory(out: Path, option: str = "out", *, force: bool = False) -> Path:
    """``output_directory``'s checks alone, before any work: nothing is made."""
    try:
        if out.exists() and not out.is_dir():
            raise OutputError(f"{option}: {out} is a file; give a directory")
        names = sorted(entry.name for entry in out.iterdir()) if out.is_dir() else []
    except OSError as exc:
        raise OutputError(f"{option}: cannot use {out}: {_reason(exc)}") from None
    if names and OUT_MARK not in names and not force:
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        raise OutputError(
            f"{option}: {out} holds files asyncrl did not write ({shown}); choose an empty directory or add --force"
        )
    return out


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
    from .record import RunRecordError, validate_summary

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
        try:
            if folder.is_dir():
                break
            there = folder.exists() or folder.is_symlink()
        except OSError as exc:  # a name too long
            raise OutputError(f"{option}: cannot create {target}: {_reason(exc)}") from None
        if there:
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
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)  # a planted link: refused, not followed
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OutputError(f"{option}: {path} is a symbolic link, not a lock asyncrl made") from None
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
