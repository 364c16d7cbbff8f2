"""Rewrite the docs' shown outputs that no longer match what their commands print.

    python -m tests.update_shown [PAGE ...]

(and the README's ``## From Python`` output, which ``tests/test_api.py`` checks).

Runs every shown block that ``tests/test_readme.py`` runs (in the same fresh directories, with the same
prerequisites), and where a command's shown lines no longer match what it prints, replaces them with the
printed lines. A block with an elision (``...``) is not rewritten: its difference is printed to fix by hand,
as is any command that exits other than as shown. Prose that quotes a figure from a block is not touched:
read the diff (``git diff``) and update the sentences around it.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from pathlib import Path

import pytest

from tests import test_readme as shown_docs


class _Captured:
    """What ``capsys.readouterr()`` gives the shown-docs runner, from redirected streams."""

    def __init__(self) -> None:
        self.out, self.err = io.StringIO(), io.StringIO()

    def readouterr(self) -> pytest.CaptureFixture[str]:
        out, err = self.out.getvalue(), self.err.getvalue()
        self.out.seek(0), self.out.truncate(), self.err.seek(0), self.err.truncate()
        return _Pair(out, err)  # type: ignore[return-value]


class _Pair:
    def __init__(self, out: str, err: str) -> None:
        self.out, self.err = out, err


class _TempFactory:
    def __init__(self, root: Path) -> None:
        self.root, self.count = root, 0

    def mktemp(self, name: str) -> Path:
        self.count += 1
        path = self.root / f"{name}{self.count}"
        path.mkdir()
        return path


def _printed_raw(lines: list[str], workdir: Path) -> list[str]:
    out = []
    for line in lines:
        for prefix in (f"{workdir}/", f"{workdir.resolve()}/", f"{shown_docs.ROOT}/"):
            line = line.replace(prefix, "")
        out.append(line.rstrip())
    while out and not out[-1]:
        out.pop()
    return out


def update(pages: set[Path] | None, tmp: Path) -> int:
    captured = _Captured()
    workdirs = shown_docs.Workdirs(_TempFactory(tmp))  # type: ignore[arg-type]
    edits: dict[Path, list[tuple[int, int, list[str]]]] = {}
    left = 0
    for block in shown_docs.BLOCKS:
        if block.skipped() is not None or (pages and block.path not in pages):
            continue
        with contextlib.redirect_stdout(captured.out), contextlib.redirect_stderr(captured.err):
            workdir = workdirs.fresh("block")
            back = Path.cwd()

            os.chdir(workdir)
            results = []
            try:
                for command in block.commands:
                    workdirs.prepare(command, workdir, captured)  # type: ignore[arg-type]
                    status, printed = shown_docs.run(command.argv, workdir, captured)  # type: ignore[arg-type]
                    results.append((status, printed.splitlines()))
            finally:
                os.chdir(back)
        for command, (status, printed) in zip(block.commands, results, strict=True):
            shown = shown_docs.normalised(command.shown)
            if shown_docs.matches(shown, shown_docs.normalised(printed, workdir)):
                continue
            where = f"{block.path.relative_to(shown_docs.ROOT)}:{command.line}"
            new = _rewritten(list(command.shown), _printed_raw(printed, workdir))
            if new is None or status != 0:
                left += 1
                print(f"== {where} (fix by hand; exit {status}): $ {command.text}")
                print("\n".join(_printed_raw(printed, workdir)))
                continue
            first = _first_shown_line(block.path, command)
            edits.setdefault(block.path, []).append((first, len(command.shown), new))
            print(f"rewritten: {where} $ {command.text}")
    for path, changes in edits.items():
        lines = path.read_text().splitlines()
        for first, count, new in sorted(changes, reverse=True):
            lines[first - 1 : first - 1 + count] = new
        path.write_text("\n".join(lines) + "\n")
    return 1 if left else 0


def update_python_example(tmp: Path) -> None:
    """The README's ``## From Python`` output block, as tests/test_api.py runs its code."""
    from tests.test_api import readme_python_example

    code, shown = readme_python_example()
    out, back = io.StringIO(), Path.cwd()

    os.chdir(tmp)
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(code, "README.md (From Python)", "exec"), {})
    finally:
        os.chdir(back)
    printed = out.getvalue().strip("\n")
    if printed != shown:
        readme = shown_docs.ROOT / "README.md"
        head, section = readme.read_text().split("## From Python", 1)
        readme.write_text(head + "## From Python" + section.replace(shown, printed, 1))
        print("rewritten: README.md ## From Python")


def _rewritten(shown: list[str], printed: list[str]) -> list[str] | None:
    """``printed`` as the block shows it: whole, or where the block elides, its head and tail as long as shown.

    None where the elided middle no longer matches (that takes a person)."""
    cuts = [at for at, line in enumerate(shown) if line.strip() in shown_docs.ELISION]
    if not cuts:
        return printed
    head, tail = cuts[0], len(shown) - cuts[-1] - 1
    if head + tail > len(printed):
        return None
    new = printed[:head] + shown[cuts[0] : cuts[-1] + 1] + (printed[len(printed) - tail :] if tail else [])
    return new if shown_docs.matches(shown_docs.normalised(new), shown_docs.normalised(printed)) else None


def _first_shown_line(path: Path, command: shown_docs.Command) -> int:
    """The 1-based line of the first shown output line of ``command`` (after its continuation lines)."""
    lines = path.read_text().splitlines()
    at = command.line - 1
    while lines[at].endswith("\\"):
        at += 1
    return at + 2


if __name__ == "__main__":
    import tempfile

    chosen = {Path(arg).resolve() for arg in sys.argv[1:]} or None
    with tempfile.TemporaryDirectory() as tmp:
        if chosen is None or shown_docs.ROOT / "README.md" in chosen:
            update_python_example(Path(tmp))
        sys.exit(update(chosen, Path(tmp)))
