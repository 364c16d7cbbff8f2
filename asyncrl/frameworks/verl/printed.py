"""The config a verl run printed at its start, read back from its console log.

    (TaskRunner pid=7) {'actor_rollout_ref': {'actor': {'clip_ratio': 0.2,      verl's main_ppo pprints the
    (TaskRunner pid=7)                                  'entropy_coeff': 0,     resolved config (every key,
    ...                                                                          defaults included) before it
        ─► the lines of that block, Ray's prefix and colour codes removed       trains
        ─► ast.literal_eval (Python literals only: nothing is run)  ─► the config, as a YAML file would give it

A console log (what ``trainer.logger=['console']`` prints, or a ``tee``d file) thus gives both the run's
config (``asyncrl from-verl LOG``) and its per-step timings (``asyncrl calibrate --from-log LOG``). The block
is at most ``MAX_CONFIG_BYTES``, searched for in the log's first ``SEARCH_BYTES``; nested at most
``MAX_DEPTH`` deep (deeper is refused before it is parsed, as Python's parser would overflow).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: Where the printed config may begin: the log's first 8 MiB (it comes before the first step).
SEARCH_BYTES = 8 << 20
#: The printed config's largest size: verl's resolved config is 10-40 KB.
MAX_CONFIG_BYTES = 1 << 20
MAX_DEPTH = 64
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_PREFIX = re.compile(r"^\([^()]*\bpid=\d+[^()]*\)\s?")  # Ray's: (TaskRunner pid=7), (W_0:0 WorkerDict pid=8)
_TRAILING_PREFIX = re.compile(r"\([^()]*\bpid=\d+[^()]*\).*$")  # another process's output, cut in
_CONTINUATION = re.compile(r"^\s+['\"\])}]")  # a pprinted mapping's next line: indented, a key or a closer
_CLOSER = {"{": "}", "[": "]", "(": ")"}
_START = re.compile(r"^\{'(actor_rollout_ref|algorithm|data|trainer|critic|reward_model)'\s*:")


class PrintedConfigError(ValueError):
    """A console log whose printed config cannot be read back: one line naming the file."""


def has_printed_config(path: Path) -> bool:
    """Whether the start of the file holds a printed verl config."""
    return _start_line(_head(path)) is not None


def read_printed_config(path: Path) -> dict[str, Any]:
    """The verl config the run printed (module docstring)."""
    lines = _head(path)
    start = _start_line(lines)
    if start is None:
        raise PrintedConfigError(f"{path}: no printed verl config (a line starting {{'actor_rollout_ref': ...)")
    text = _block(lines, start, path)
    if _depth(text) > MAX_DEPTH:
        raise PrintedConfigError(f"{path}: the printed config nests deeper than {MAX_DEPTH} levels")
    try:
        config = ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError) as exc:  # TypeError: {{...}}, a set
        raise PrintedConfigError(
            f"{path}: line {start + 1}: the printed config is not a Python literal ({exc})"
        ) from None
    if not isinstance(config, dict):
        raise PrintedConfigError(f"{path}: line {start + 1}: the printed config is not a mapping")
    return config


def _head(path: Path) -> list[tuple[str, str]]:
    """The first ``SEARCH_BYTES`` as (Ray's prefix, the rest) per line, colour codes removed."""
    with path.open("rb") as handle:
        head = handle.read(SEARCH_BYTES)
    return [_split(line) for line in head.decode("utf-8", "replace").splitlines()]


def _split(line: str) -> tuple[str, str]:
    text = _ANSI.sub("", line).strip("\r")
    prefix = _PREFIX.match(text)
    head, rest = (prefix.group(0).strip(), text[prefix.end() :]) if prefix else ("", text)
    return head, _TRAILING_PREFIX.sub("", rest)


def _start_line(lines: list[tuple[str, str]]) -> int | None:
    return next((number for number, (_, line) in enumerate(lines) if _START.match(line.lstrip())), None)


def _block(lines: list[tuple[str, str]], start: int, path: Path) -> str:
    """The lines from ``start`` that the same process printed (Ray interleaves the others'), until the braces
    balance (outside string literals), or until that process prints a line that is no part of a pprinted
    mapping: a log with lines cut out of its config (Ray drops some under load) is closed there."""
    size, taken, columns = 0, list[str](), list[tuple[int, str]]()
    process = lines[start][0]
    for prefix, line in lines[start:]:
        if prefix != process:
            continue
        if taken and not _CONTINUATION.match(line):
            return "\n".join(taken) + "".join(_CLOSER[kind] for _, kind in reversed(columns))
        size += len(line)
        if size > MAX_CONFIG_BYTES:
            raise PrintedConfigError(f"{path}: the printed config runs past {MAX_CONFIG_BYTES >> 10} KiB")
        line = _close_dropped(line, columns) if taken else line
        taken.append(line)
        if _track(line, columns) <= 0:
            return "\n".join(taken)
    raise PrintedConfigError(f"{path}: line {start + 1}: the printed config never closes its braces")


def _close_dropped(line: str, columns: list[tuple[int, str]]) -> str:
    """``line`` with the closers of the brackets a dropped line would have closed put before it.

    pprint starts each item of a mapping or a list at the column after its opening bracket, so a line that
    starts left of the innermost open bracket's column belongs to an outer one: the lines between (Ray drops
    some under load) held the closers, which are put back::

        'fsdp_config': {'min_num_params': 0,          'fsdp_config': {'min_num_params': 0,
                        [dropped: 'param_offload': False},]   ─►       },'input_tokenizer': ...
        'input_tokenizer': ...
    """
    column = len(line) - len(line.lstrip())
    left_open = [kind for item_column, kind in reversed(columns) if column < item_column]
    closers = "".join(_CLOSER[kind] + "," for kind in left_open)
    return line[:column] + closers + line[column:] if closers else line


def _track(line: str, columns: list[tuple[int, str]]) -> int:
    """Opens and closes ``line``'s brackets on ``columns`` (each open bracket's item column and kind); the number
    left open."""
    for position, char in _brackets(line):
        if char in _CLOSER:
            columns.append((position + 1, char))
        elif columns:
            columns.pop()
    return len(columns)


def _depth(text: str) -> int:
    """The deepest bracket nesting of ``text``, strings skipped."""
    deepest = depth = 0
    for line in text.splitlines():
        for _, char in _brackets(line):
            depth += 1 if char in _CLOSER else -1
            deepest = max(deepest, depth)
    return deepest


def _brackets(line: str) -> Iterator[tuple[int, str]]:
    """Each bracket of a line outside string literals, with its position, in order."""
    quote, escaped = "", False
    for position, char in enumerate(line):
        if quote:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char in "{[()]}":
            yield position, char
