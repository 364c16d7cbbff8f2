"""A training framework's metrics log, read into one row per step: what verl logs each step of a run.

    FILE.log (console) ──────► _console_steps ┐   (TaskRunner pid=7) step:3 - timing_s/gen:357.4 - ...  (verl's console)
    FILE.jsonl ──────────────► _jsonl_steps ─┤   {"step": 3, "data": {"timing_s/gen": 357.4, ...}}   (verl's FileLogger)
                                             │   {"step": 3, "timing_s/gen": 357.4, ...}             (flat: other loggers)
    DIR/ or events.out.tfevents.* ─► TFRecord ─► Event ─► Summary.Value ─┤   simple_value, or a scalar tensor
                                                                         ▼
                            merge by step (a key logged twice: the later value) ─► MetricsLog.rows
                            (index ``step``, one float column per key, NaN where a step lacks it)

verl's console logger (``trainer.logger=['console']``, what a terminal or a ``tee``d file holds) prints one
line per step, ``step:N - key:value - key:value ...``, often behind Ray's ``(TaskRunner pid=...)`` prefix
and its colour codes; those lines are read, every other line skipped. verl before 2025 named its timers
``timing/<phase>`` and timed the old log-probs inside ``gen``: such keys are read as ``timing_s/<phase>``
and the log says so (``MetricsLog.legacy_timing``).

Two layouts of JSON lines are read: verl's FileLogger (``trainer.logger=['console','file']``) writes
one object per ``log`` call, ``{"step": N, "data": {key: value}}``; a flat ``{"step": N, key: value}``
is read too. Values that are not numbers are left out (orjson writes NaN as ``null``). A last line
cut short (a log still being written) is where the log ends.

TensorBoard (verl's ``_TensorboardAdapter``): an event file, or a directory of them (``analysis.tfevents``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from asyncrl.scenarios.files.textfile import parse_json, shown_value

from asyncrl.frameworks.common.tfevents import (
    EventFileError,
    Steps,
    directory_steps,
    event_file_steps,
    event_files,
    looks_like_events,
    subdirectories,
)

if TYPE_CHECKING:
    import pandas as pd

#: How much of a JSONL file ``is_metrics_log`` reads to find its first line.
SNIFF_BYTES = 1 << 20
#: Keys listed when a required one is missing.
KEYS_SHOWN = 8
#: The largest step number read (a run of 10^12 steps is none a framework logs; larger breaks the index).
MAX_STEP = 10**12


class MetricsLogError(ValueError):
    """A metrics log that cannot be read, or lacks what is asked of it: one line naming the file."""


@dataclass(frozen=True)
class MetricsLog:
    """One row per logged step (index ``step``, sorted), one float column per metric key (NaN where absent)."""

    source: Path
    format: Literal["verl-jsonl", "tensorboard", "verl-console"]
    rows: pd.DataFrame
    legacy_timing: bool = False  # verl before 2025: ``timing/<phase>`` keys, old log-probs timed inside gen

    @property
    def keys(self) -> list[str]:
        """The keys some step logged."""
        return [str(key) for key in self.rows.columns if self.rows[key].notna().any()]


def read_metrics_log(path: Path) -> MetricsLog:
    """The steps of a verl JSONL log, a TensorBoard event file, or a directory of event files."""
    if path.is_dir():
        return _log(path, "tensorboard", _events(directory_steps, path))
    if not path.is_file():
        raise MetricsLogError(f"{path}: no such file or directory")
    if looks_like_events(path):
        return _log(path, "tensorboard", _events(event_file_steps, path))
    if _first_console_step(path):
        steps, legacy = _console_steps(path)
        return _log(path, "verl-console", steps, legacy)
    return _log(path, "verl-jsonl", _jsonl_steps(path))


def is_metrics_log(path: Path) -> bool:
    """A cheap sniff: event files (or a directory of them), or JSONL whose first line is a step's metrics.

    A completions log (one object per completion, what ``asyncrl lengths FILE`` reads) is not one:
    its records have no ``data`` mapping and no ``group/name`` keys.
    """
    if path.is_dir():
        return bool(event_files(path)) or any(event_files(child) for child in subdirectories(path))
    if not path.is_file():
        return False
    return looks_like_events(path) or _first_line_is_metrics(path) or _first_console_step(path)


def require(log: MetricsLog, keys: Sequence[str]) -> None:
    """A MetricsLogError naming the first of ``keys`` that no step logged, and some keys the log has."""
    present = set(log.keys)
    for key in keys:
        if key not in present:
            raise MetricsLogError(f"{log.source}: no {key!r} in any step (keys it has: {_some(log.keys)})")


def _some(keys: list[str]) -> str:
    shown = ", ".join(sorted(keys)[:KEYS_SHOWN]) or "none"
    more = len(keys) - KEYS_SHOWN
    return f"{shown}, and {more} more" if more > 0 else shown


def _log(
    path: Path, kind: Literal["verl-jsonl", "tensorboard", "verl-console"], steps: Steps, legacy: bool = False
) -> MetricsLog:
    """The steps that logged a number, as a frame: one row per step, sorted, one column per key."""
    import pandas as pd

    logged = {step: metrics for step, metrics in steps.items() if metrics}
    if not logged:
        raise MetricsLogError(f"{path}: no steps with metrics")
    rows = pd.DataFrame.from_dict(logged, orient="index", dtype="float64").sort_index()
    rows.index = rows.index.astype("int64")
    rows.index.name = "step"
    return MetricsLog(path, kind, rows, legacy)


def _events(read: Callable[[Path], Steps], path: Path) -> Steps:
    """TensorBoard's steps (``analysis.tfevents``), its errors as this module's."""
    try:
        return read(path)
    except EventFileError as exc:
        raise MetricsLogError(str(exc)) from None


def _merge(steps: Steps, step: int, metrics: dict[str, float]) -> None:
    """One call's metrics into its step's row: a key logged twice keeps the later value."""
    steps.setdefault(step, {}).update(metrics)


# ── JSON lines ──────────────────────────────────────────────────────────────────


def _jsonl_steps(path: Path) -> Steps:
    """Every line's metrics, merged by step; a last line with no newline that is not JSON is still being written."""
    steps: Steps = {}
    lines = path.read_bytes().split(b"\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = parse_json(line, f"{path}: line {number}")
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            if number == len(lines):  # no newline after it: a line still being written
                break
            raise MetricsLogError(f"{path}: line {number} is not JSON ({getattr(exc, 'msg', 'not UTF-8')})") from None
        except ValueError as exc:  # nested too deeply
            raise MetricsLogError(str(exc)) from None
        step, metrics = _jsonl_record(record, path, number)
        _merge(steps, step, metrics)
    return steps


def _jsonl_record(record: object, path: Path, number: int) -> tuple[int, dict[str, float]]:
    """The step and the numeric metrics of one line, nested under ``data`` or flat beside ``step``."""
    if not isinstance(record, dict):
        raise MetricsLogError(f"{path}: line {number} is not a JSON object")
    if "step" not in record:
        raise MetricsLogError(f'{path}: line {number} has no "step" (its keys: {_some(list(record))})')
    step = record["step"]
    if not _is_number(step) or not 0 <= _as_float(step) <= MAX_STEP or not float(step).is_integer():
        shown = shown_value(step, MAX_STEP)
        raise MetricsLogError(f'{path}: line {number}: "step" is {shown}, not a step number (0 to 10^12)')
    data = record["data"] if isinstance(record.get("data"), dict) else record
    metrics = {str(key): _as_float(value) for key, value in data.items() if key != "step" and _is_number(value)}
    return int(step), metrics


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _as_float(value: float) -> float:
    """A JSON number as a float; an integer too large for one (a 401-digit number) is infinite, which the
    readers of timings refuse by name."""
    try:
        return float(value)
    except OverflowError:
        return float("inf") if value > 0 else float("-inf")


def _first_line_is_metrics(path: Path) -> bool:
    with path.open("rb") as handle:
        head = handle.read(SNIFF_BYTES)
    line = next((line for line in head.split(b"\n") if line.strip()), b"")
    try:
        record = parse_json(line, path)
    except (ValueError, UnicodeDecodeError):
        return False
    if not isinstance(record, dict) or "step" not in record:
        return False
    return isinstance(record.get("data"), dict) or any("/" in str(key) for key in record)


# ── console lines ───────────────────────────────────────────────────────────────

#: A step's metrics line as verl's console logger prints it, after any prefix (Ray's, a timestamp).
CONSOLE_STEP = re.compile(rb"(?:^|[\s)\]])step:(\d{1,9}) - (.*)$")
ANSI = re.compile(rb"\x1b\[[0-9;]*m")
LEGACY_TIMING = "timing/"


def _first_console_step(path: Path) -> bool:
    """Whether the first MiB holds a line with a step's metrics as verl's console prints them."""
    with path.open("rb") as handle:
        head = handle.read(SNIFF_BYTES)
    return any(_console_match(line) is not None for line in head.split(b"\n"))


def _console_match(line: bytes) -> re.Match[bytes] | None:
    return CONSOLE_STEP.search(ANSI.sub(b"", line.rstrip(b"\r")))


def _console_steps(path: Path) -> tuple[Steps, bool]:
    """Every step line's numeric metrics, merged by step; (steps, whether the keys were verl's legacy timers)."""
    steps: Steps = {}
    legacy = False
    with path.open("rb") as handle:
        for line in handle:
            match = _console_match(line)
            if match is None:
                continue
            metrics: dict[str, float] = {}
            for item in match.group(2).split(b" - "):
                key, colon, value = item.decode("utf-8", "replace").strip().rpartition(":")
                number = _console_number(value) if colon else None
                if not key or number is None:
                    continue
                if key.startswith(LEGACY_TIMING):
                    key, legacy = "timing_s/" + key[len(LEGACY_TIMING) :], True
                metrics[key] = number
            _merge(steps, int(match.group(1)), metrics)
    return steps, legacy


def _console_number(text: str) -> float | None:
    """A number as the console prints it (``1.5``, ``-3``, ``2e-05``, ``inf``: the readers of timings refuse an
    infinite one by name), else None (text, NaN: as a step that did not log the key)."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value == value else None
