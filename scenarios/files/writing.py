"""Writing a file whole: to a temporary file beside it, renamed onto its name once complete.

    with written(path) as temporary: ...   a writer that takes a path (pandas, matplotlib, gzip) writes temporary
    write_text(path, text)                 text, the same way

A write that fails (a full disk), is interrupted or raises leaves the old file, or none, never a cut one; a
symbolic link planted at the name is replaced, not followed. An OSError is an ``OutputError`` naming the
option and the path. Its own module, importing only ``errors``, so that every writer in ``scenarios/`` and
``analysis/`` can use it (``outputs`` has the rules of what may be written where).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from .errors import ScenarioError


class OutputError(ScenarioError):
    """An output location that cannot be used; one line naming the option and the path."""


_TEMP_PREFIX = ".asyncrl-tmp-"


@contextlib.contextmanager
def written(path: Path, option: str = "out") -> Iterator[Path]:
    """A temporary file beside ``path`` (its name ends in ``path``'s, so writers that go by the suffix still do),
    renamed onto ``path`` when the block ends; removed instead on any error, and an OSError (a full disk, a
    folder taken away) becomes an OutputError naming ``option`` and ``path``."""
    try:
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=_TEMP_PREFIX, suffix=f"-{path.name}")
    except OSError as exc:
        raise OutputError(f"{option}: cannot write {path}: {_reason(exc)}") from None
    os.close(fd)
    temporary = Path(name)
    try:
        yield temporary
        os.chmod(temporary, 0o666 & ~_umask())
        os.replace(temporary, path)
    except OSError as exc:
        temporary.unlink(missing_ok=True)
        raise OutputError(f"{option}: cannot write {path}: {_reason(exc)}") from None
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def write_text(path: Path, text: str, option: str = "out") -> Path:
    """``path`` holding ``text`` (UTF-8), written whole (``written``)."""
    with written(path, option) as temporary:
        temporary.write_text(text, encoding="utf-8")
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)
