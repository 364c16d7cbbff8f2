"""The one check every hostile-input test makes: a command refused in one line, exit 2."""

from __future__ import annotations

from asyncrl.cli import main


def refused(capsys, *args: str) -> str:
    """``asyncrl ARGS`` must exit 2 with one error line; the line, without its prefix."""
    status = main(list(args))
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert status == 2 and len(lines) == 1 and lines[0].startswith("asyncrl: error: "), (status, err)
    return lines[0].removeprefix("asyncrl: error: ")
