"""Reading the small text files a scenario points to, with one-line errors and a size limit.

    path ──read_text(path, limit, what)──► str ──parse_yaml(text, path)──► data
         └─ ValueError "<path>: not a file" / "... bytes, more than ..." / "not UTF-8 text" / OS error
                                                    └─ ValueError "<path>:<line>:<column>: not valid YAML: ..."

Scenario files, cost profiles and lengths files all go through here, so a
directory, a binary file, a huge file or one that cannot be read is one line
naming the file instead of a traceback or a read that fills memory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def read_text(path: Path, limit: int, what: str) -> str:
    """The file's text; ValueError (one line, naming ``path``) if it is not a readable UTF-8 file of at most ``limit`` bytes."""
    try:
        if not path.is_file():
            raise ValueError(f"file not found: {path}" if not path.exists() else f"{path}: not a file")
        size = path.stat().st_size
        if size > limit:
            raise ValueError(f"{path}: {size:,} bytes, more than {limit:,} for {what}")
        with path.open("rb") as file:
            data = file.read(limit + 1)
    except OSError as exc:
        raise ValueError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    if len(data) > limit:
        raise ValueError(f"{path}: more than {limit:,} bytes for {what}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text (byte {exc.start:,} cannot be decoded); expected {what}") from None


def parse_yaml(text: str, path: Path) -> Any:
    """``text`` as YAML; ValueError ``"<path>:<line>:<column>: not valid YAML: <problem>"`` on one line."""
    try:
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        problem = " ".join(str(exc.problem or exc.context or "syntax error").split())
        raise ValueError(f"{where}: not valid YAML: {problem}") from None
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow, before any parsing
        line = text.count("\n", 0, exc.position) + 1
        column = exc.position - text.rfind("\n", 0, exc.position)
        raise ValueError(
            f"{path}:{line}:{column}: not valid YAML: character #x{exc.character:04x} is not allowed"
        ) from None
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: not valid YAML: {' '.join(str(exc).split())}") from None
