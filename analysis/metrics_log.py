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

TensorBoard (verl's ``_TensorboardAdapter``: ``SummaryWriter(dir).add_scalar(key, value, step)``,
into ``tensorboard_log/{project}/{experiment}``): a directory is read non-recursively, every
``*tfevents*`` file directly in it in name order (a restarted run adds a file), since the
directory above holds one experiment per subdirectory and mixing them would mix runs; a
directory whose event files are all one level down is an error naming those subdirectories.
The reader is the format itself, no tensorflow or tensorboard: records are
``uint64 length | uint32 masked CRC of the length | data | uint32 masked CRC of the data``
(little-endian). The length's CRC is checked (it tells a TFRecord from any other file, and a
corrupt header from a short one); the data's is not. A record cut short at the end of a file
is where a file still being written ends. From each ``Event`` (step: field 2), the ``Summary``
(field 5) values' tags with a ``simple_value`` (what ``add_scalar`` writes) or a one-element
``DT_FLOAT``/``DT_DOUBLE`` tensor (newer writers) are kept; everything else is skipped.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, NamedTuple

from asyncrl.scenarios.textfile import parse_json

if TYPE_CHECKING:
    import pandas as pd

Steps = dict[int, dict[str, float]]
#: How much of a JSONL file ``is_metrics_log`` reads to find its first line.
SNIFF_BYTES = 1 << 20
#: Keys listed when a required one is missing.
KEYS_SHOWN = 8
NOT_TFRECORD = "not a TFRecord file (the format of TensorBoard event files)"


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
        return _log(path, "tensorboard", _directory_steps(path))
    if not path.is_file():
        raise MetricsLogError(f"{path}: no such file or directory")
    if _looks_like_events(path):
        return _log(path, "tensorboard", _event_file_steps(path, {}))
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
        return bool(_event_files(path)) or any(_event_files(child) for child in _subdirectories(path))
    if not path.is_file():
        return False
    return _looks_like_events(path) or _first_line_is_metrics(path) or _first_console_step(path)


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
    if isinstance(step, bool) or not isinstance(step, int | float) or not float(step).is_integer():
        raise MetricsLogError(f'{path}: line {number}: "step" is {step!r}, not an integer')
    data = record["data"] if isinstance(record.get("data"), dict) else record
    metrics = {str(key): float(value) for key, value in data.items() if key != "step" and _is_number(value)}
    return int(step), metrics


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


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
    """A finite number as the console prints it (``1.5``, ``-3``, ``2e-05``), else None (text, NaN, inf)."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if abs(value) < float("inf") and value == value else None


# ── TensorBoard event files ─────────────────────────────────────────────────────


def _event_files(directory: Path) -> list[Path]:
    return sorted(path for path in directory.glob("*tfevents*") if path.is_file())


def _subdirectories(directory: Path) -> list[Path]:
    return sorted(path for path in directory.iterdir() if path.is_dir())


def _directory_steps(directory: Path) -> Steps:
    files = _event_files(directory)
    if not files:
        runs = [child.name + "/" for child in _subdirectories(directory) if _event_files(child)]
        where = f"; its runs: {', '.join(runs)} (name one)" if runs else ""
        raise MetricsLogError(f"{directory}: no TensorBoard event files (events.out.tfevents.*) in it{where}")
    steps: Steps = {}
    for path in files:
        _event_file_steps(path, steps)
    return steps


def _looks_like_events(path: Path) -> bool:
    """Named like an event file, or starting with a TFRecord header whose length checksum holds."""
    if "tfevents" in path.name:
        return True
    with path.open("rb") as handle:
        header = handle.read(12)
    return len(header) == 12 and masked_crc(header[:8]) == struct.unpack("<I", header[8:])[0]


def _event_file_steps(path: Path, steps: Steps) -> Steps:
    """Every scalar of every event in the file, merged into ``steps``."""
    for offset, record in _records(path):
        try:
            step, scalars = _event(record)
        except (IndexError, struct.error, UnicodeDecodeError, ValueError):
            raise MetricsLogError(f"{path}: the record at byte {offset} is not a TensorBoard event") from None
        if scalars:
            _merge(steps, step, scalars)
    return steps


def _records(path: Path) -> Iterator[tuple[int, bytes]]:
    """The data of each TFRecord with its byte offset; a record cut short ends the file."""
    data = path.read_bytes()
    offset = 0
    while offset + 12 <= len(data):
        header = data[offset : offset + 8]
        if masked_crc(header) != struct.unpack_from("<I", data, offset + 8)[0]:
            what = NOT_TFRECORD if offset == 0 else f"corrupt at byte {offset} (a record header's checksum fails)"
            raise MetricsLogError(f"{path}: {what}")
        length = struct.unpack("<Q", header)[0]
        end = offset + 12 + length
        if end + 4 > len(data):
            return
        yield offset, data[offset + 12 : end]
        offset = end + 4
    if offset == 0 and len(data) > 0:
        raise MetricsLogError(f"{path}: {NOT_TFRECORD}")


# ── protobuf: Event, Summary, Summary.Value, TensorProto ────────────────────────

EVENT_STEP, EVENT_SUMMARY = 2, 5
SUMMARY_VALUE = 1
VALUE_TAG, VALUE_SIMPLE, VALUE_TENSOR = 1, 2, 8
TENSOR_DTYPE, TENSOR_CONTENT, TENSOR_FLOATS, TENSOR_DOUBLES = 1, 4, 5, 6
#: TensorProto dtypes read, with their struct format and the repeated field that lists their values.
SCALAR_DTYPES = {1: ("<f", TENSOR_FLOATS), 2: ("<d", TENSOR_DOUBLES)}  # DT_FLOAT, DT_DOUBLE


class _Field(NamedTuple):
    """One protobuf field as written: a varint's value, or the bytes of any other wire type."""

    number: int
    wire: int
    varint: int
    data: bytes


def _event(record: bytes) -> tuple[int, dict[str, float]]:
    """An Event's step and the scalars in its summary (none for file_version, graphs and the rest)."""
    step, scalars = 0, {}
    for field in _fields(record):
        if field.number == EVENT_STEP:
            step = _signed(field.varint)
        elif field.number == EVENT_SUMMARY:
            scalars.update(_summary(field.data))
    return step, scalars


def _summary(summary: bytes) -> dict[str, float]:
    scalars = {}
    for field in _fields(summary):
        if field.number == SUMMARY_VALUE:
            tag, scalar = _value(field.data)
            if tag is not None and scalar is not None:
                scalars[tag] = scalar
    return scalars


def _value(value: bytes) -> tuple[str | None, float | None]:
    """A Summary.Value's tag and scalar: its simple_value, or a one-element float/double tensor."""
    tag, scalar = None, None
    for field in _fields(value):
        if field.number == VALUE_TAG:
            tag = field.data.decode()
        elif field.number == VALUE_SIMPLE and field.wire == 5:
            scalar = struct.unpack("<f", field.data)[0]
        elif field.number == VALUE_TENSOR:
            scalar = _tensor_scalar(field.data)
    return tag, scalar


def _tensor_scalar(tensor: bytes) -> float | None:
    """The one number of a DT_FLOAT or DT_DOUBLE TensorProto, from tensor_content or float_val/double_val."""
    dtype, content, listed = 0, b"", {TENSOR_FLOATS: b"", TENSOR_DOUBLES: b""}
    for field in _fields(tensor):
        if field.number == TENSOR_DTYPE:
            dtype = field.varint
        elif field.number == TENSOR_CONTENT:
            content = field.data
        elif field.number in listed:  # packed (one field of all values) or one field per value: same bytes
            listed[field.number] += field.data
    if dtype not in SCALAR_DTYPES:
        return None
    code, values_field = SCALAR_DTYPES[dtype]
    raw = content or listed[values_field]
    if len(raw) != struct.calcsize(code):  # not a scalar
        return None
    return float(struct.unpack(code, raw)[0])


def _fields(message: bytes) -> Iterator[_Field]:
    """A protobuf message's fields in order; a field running past the end is a ValueError."""
    offset = 0
    while offset < len(message):
        key, offset = _varint(message, offset)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, offset = _varint(message, offset)
            yield _Field(number, wire, value, b"")
            continue
        if wire == 2:
            size, offset = _varint(message, offset)
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
        else:
            raise ValueError(f"wire type {wire} (groups are not used by event files)")
        if offset + size > len(message):
            raise ValueError("a field runs past the end of its message")
        yield _Field(number, wire, 0, message[offset : offset + size])
        offset += size


def _varint(data: bytes, offset: int) -> tuple[int, int]:
    """The varint at ``offset`` and the offset after it."""
    value, shift = 0, 0
    while True:
        byte = data[offset]
        offset += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, offset
        shift += 7
        if shift > 63:
            raise ValueError("a varint longer than 10 bytes")


def _signed(value: int) -> int:
    """An int64 written as a varint: two's complement over 64 bits."""
    return value - (1 << 64) if value >= 1 << 63 else value


# ── CRC-32C, masked as TFRecord writes it ───────────────────────────────────────


def _crc_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC_TABLE = _crc_table()


def masked_crc(data: bytes) -> int:
    """TFRecord's checksum: CRC-32C of the data, rotated right by 15 bits plus 0xa282ead8."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF
