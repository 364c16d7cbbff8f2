"""Completion lengths logged as JSON lines: one record per completion, one field holding it.

    {"input": "...", "output": "the completion text", "score": 1.0, "step": 3}     text (to be tokenized)
    {"response_length": 812}                                                        a token count
    {"response_ids": [151644, 872, ...]}                                           token ids (counted)

``read_field`` reads one field of every record (the field named, or the first of ``COUNT_FIELDS``
then ``TEXT_FIELDS`` that the first record has); ``token_counts`` turns counts or id lists into
lengths. Text needs a tokenizer: ``asyncrl lengths`` counts it (``analysis.fits.lengths``); a scenario's
``kind: empirical`` reads counts and id lists only. Errors are ValueErrors that start with the
scenario field they concern (``path:`` or ``field:``).
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from .limits import MAX_TOKENS
from .textfile import parse_json

#: Fields that hold a token count or token ids, tried first when no field is named.
COUNT_FIELDS = ("response_length", "completion_tokens", "num_tokens", "response_ids", "completion_ids", "length")
#: Fields that hold the completion's text (verl's rollout dumps write ``output``).
TEXT_FIELDS = ("output", "response", "completion", "text", "generated_text")


def iter_records(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Every non-blank line of ``path`` as a JSON object, with its line number, read one line at a time."""
    if not path.is_file():
        raise ValueError(f"path: file not found: {path}")
    empty = True
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise ValueError(f"path: {path}:{number}: not UTF-8 text") from None
            if not line.strip():
                continue
            try:
                record = parse_json(line, f"path: {path}:{number}")
            except json.JSONDecodeError as exc:
                raise ValueError(f"path: {path}:{number}: not JSON ({exc.msg})") from None
            if not isinstance(record, dict):
                raise ValueError(f"path: {path}:{number}: expected a JSON object per line")
            empty = False
            yield number, record
    if empty:
        raise ValueError(f"path: {path}: no records")


def read_records(path: Path) -> list[dict[str, Any]]:
    """Every non-blank line of ``path`` as a JSON object."""
    return [record for _, record in iter_records(path)]


def read_field(path: Path, field: str | None = None) -> tuple[str, list[Any]]:
    """The field used and its value in every record; a record without it is an error naming its line.

    Only the field's values are kept (a log of long texts is read a line at a time, not held whole)."""
    name = field
    values = []
    for number, (_, record) in enumerate(iter_records(path), start=1):
        name = name or guess_field(record, path)
        if name not in record:
            keys = ", ".join(sorted(record)) or "none"
            close = difflib.get_close_matches(name, list(record), n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise ValueError(f"field: record {number} of {path} has no {name!r} (its keys: {keys}){hint}")
        value = record[name]
        values.append(len(value) if isinstance(value, list) and all(isinstance(v, int) for v in value) else value)
    assert name is not None  # iter_records yields at least one record
    return name, values


def guess_field(record: dict[str, Any], path: Path) -> str:
    """The first known length or text field the record has."""
    for name in (*COUNT_FIELDS, *TEXT_FIELDS):
        if name in record:
            return name
    known = ", ".join(sorted(record)) or "none"
    raise ValueError(f"field: none of the usual length or text fields in {path} (its keys: {known}); name one")


def is_text(values: list[Any]) -> bool:
    return bool(values) and all(isinstance(value, str) for value in values)


def token_counts(values: list[Any], where: str) -> np.ndarray:
    """Lengths from token counts (integers) or token ids (lists); text is an error (it needs a tokenizer)."""
    if is_text(values):
        raise ValueError(
            f"field: {where} holds text; count its tokens with `asyncrl lengths` and use the lengths file it writes"
        )
    if isinstance(values[0], str):  # text first: the record that is not text is the odd one
        number = next(number for number, value in enumerate(values, start=1) if not isinstance(value, str))
        raise ValueError(f"field: record {number} of {where}: not text like the records before it")
    counts = []
    for number, value in enumerate(values, start=1):
        if isinstance(value, list):
            counts.append(len(value))
        elif isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            if not float(value).is_integer():
                raise ValueError(f"field: record {number} of {where}: {value!r} is not a whole number of tokens")
            if value > MAX_TOKENS:
                shown = f"{value:,.0f}" if value < 1e15 else f"{value:.3g}"
                raise ValueError(
                    f"field: record {number} of {where}: {shown} tokens is above the longest a scenario takes "
                    f"({MAX_TOKENS:,})"
                )
            counts.append(int(value))
        else:
            raise ValueError(f"field: record {number} of {where}: expected a token count or a list of token ids")
    lengths = np.asarray(counts, dtype=np.int64)
    if lengths.min() < 1:
        raise ValueError(f"field: {where}: every length must be ≥ 1 (record {int(np.argmin(lengths)) + 1})")
    return lengths
