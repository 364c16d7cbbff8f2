"""TensorBoard event files read without TensorFlow: every scalar of every event, by step.

What verl writes (verl's ``_TensorboardAdapter``: ``SummaryWriter(dir).add_scalar(key, value, step)``,
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

Errors are ``EventFileError`` (``analysis.metrics_log`` passes them on as its own, naming the file).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

Steps = dict[int, dict[str, float]]
NOT_TFRECORD = "not a TFRecord file (the format of TensorBoard event files)"


class EventFileError(ValueError):
    """An event file that cannot be read, or a directory without one: one line naming it."""


# ── TensorBoard event files ─────────────────────────────────────────────────────


def event_files(directory: Path) -> list[Path]:
    return sorted(path for path in directory.glob("*tfevents*") if path.is_file())


def subdirectories(directory: Path) -> list[Path]:
    return sorted(path for path in directory.iterdir() if path.is_dir())


def directory_steps(directory: Path) -> Steps:
    files = event_files(directory)
    if not files:
        runs = [child.name + "/" for child in subdirectories(directory) if event_files(child)]
        where = f"; its runs: {', '.join(runs)} (name one)" if runs else ""
        raise EventFileError(f"{directory}: no TensorBoard event files (events.out.tfevents.*) in it{where}")
    steps: Steps = {}
    for path in files:
        event_file_steps(path, steps)
    return steps


def looks_like_events(path: Path) -> bool:
    """Named like an event file, or starting with a TFRecord header whose length checksum holds."""
    if "tfevents" in path.name:
        return True
    with path.open("rb") as handle:
        header = handle.read(12)
    return len(header) == 12 and masked_crc(header[:8]) == struct.unpack("<I", header[8:])[0]


def event_file_steps(path: Path, steps: Steps | None = None) -> Steps:
    """Every scalar of every event in the file, merged into ``steps`` (a new dict where None)."""
    steps = {} if steps is None else steps
    for offset, record in _records(path):
        try:
            step, scalars = _event(record)
        except (IndexError, struct.error, UnicodeDecodeError, ValueError):
            raise EventFileError(f"{path}: the record at byte {offset} is not a TensorBoard event") from None
        if scalars:
            steps.setdefault(step, {}).update(scalars)
    return steps


def _records(path: Path) -> Iterator[tuple[int, bytes]]:
    """The data of each TFRecord with its byte offset; a record cut short ends the file."""
    data = path.read_bytes()
    offset = 0
    while offset + 12 <= len(data):
        header = data[offset : offset + 8]
        if masked_crc(header) != struct.unpack_from("<I", data, offset + 8)[0]:
            what = NOT_TFRECORD if offset == 0 else f"corrupt at byte {offset} (a record header's checksum fails)"
            raise EventFileError(f"{path}: {what}")
        length = struct.unpack("<Q", header)[0]
        end = offset + 12 + length
        if end + 4 > len(data):
            return
        yield offset, data[offset + 12 : end]
        offset = end + 4
    if offset == 0 and len(data) > 0:
        raise EventFileError(f"{path}: {NOT_TFRECORD}")


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
