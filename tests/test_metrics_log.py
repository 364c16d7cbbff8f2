"""Metrics logs: verl's FileLogger JSONL and TensorBoard event files read into one row per step, told from
a completions log (the fit to their lengths: tests/test_log_lengths.py)."""

from __future__ import annotations

import json
import math
import re
import shutil
import struct
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncrl.frameworks.common.metrics_log import (
    MetricsLog,
    MetricsLogError,
    is_metrics_log,
    read_metrics_log,
    require,
)
from asyncrl.frameworks.common.tfevents import masked_crc
from tests.lengths_data import word_counts, write_completions

CONFIG = Path(__file__).parent / "data" / "verl_ppo_trainer.yaml"


def write_lines(path: Path, records: list[dict], tail: str = "") -> Path:
    path.write_text("".join(json.dumps(record) + "\n" for record in records) + tail)
    return path


def log_of(columns: dict[str, list[float]], first_step: int = 1) -> MetricsLog:
    """A MetricsLog with these per-step values, as read_metrics_log would build it."""
    steps = len(next(iter(columns.values())))
    rows = pd.DataFrame(columns, index=pd.Index(range(first_step, first_step + steps), name="step"), dtype="float64")
    return MetricsLog(Path("run.jsonl"), "verl-jsonl", rows)


# ── JSON lines ──────────────────────────────────────────────────────────────────


def test_nested_and_flat_lines_merge_by_step(tmp_path: Path) -> None:
    records = [
        {"step": 0, "data": {"val-core/reward/mean@1": 0.25, "timing_s/testing": 40.5}},  # before training
        {"step": 1, "data": {"timing_s/gen": 357.4, "timing_s/old_log_prob": 107.7, "response_length/mean": 800}},
        {"step": 2, "timing_s/gen": 360.0, "response_length/mean": 810, "note": "flat, and text is left out"},
        {"step": 2, "data": {"timing_s/testing": 41.0, "timing_s/gen": 361.5}},  # validation, same step: merged
        {"step": 3, "data": {"timing_s/gen": None, "response_length/mean": 790.0}},  # orjson writes NaN as null
    ]
    log = read_metrics_log(write_lines(tmp_path / "metrics.jsonl", records))
    assert log.format == "verl-jsonl" and log.rows.index.name == "step"
    assert log.rows.index.tolist() == [0, 1, 2, 3] and log.rows.index.dtype == np.int64
    assert log.rows.loc[2, "timing_s/gen"] == 361.5  # the later call wins
    assert log.rows.loc[2, "timing_s/testing"] == 41.0 and log.rows.loc[2, "response_length/mean"] == 810
    assert log.rows.loc[1, "timing_s/old_log_prob"] == 107.7
    assert math.isnan(log.rows.loc[2, "timing_s/old_log_prob"])  # step 2 lacks it
    assert math.isnan(log.rows.loc[3, "timing_s/gen"])
    assert "note" not in log.rows and (log.rows.dtypes == np.float64).all()


def test_a_last_line_being_written_ends_the_log(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "metrics.jsonl", [{"step": 1, "data": {"timing_s/gen": 1.5}}], '{"step": 2, "da')
    assert read_metrics_log(path).rows.index.tolist() == [1]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '{"step": 1, "data": {"a/b": 1}}\nnot json\n{"step": 2}\n',
            "metrics.jsonl: line 2 is not JSON (Expecting value)",
        ),
        ('{"data": {"timing_s/gen": 1}}\n', 'metrics.jsonl: line 1 has no "step" (its keys: data)'),
        ('{"step": "one", "data": {}}\n', "metrics.jsonl: line 1: \"step\" is 'one', not a step number (0 to 10^12)"),
        ("[1, 2]\n", "metrics.jsonl: line 1 is not a JSON object"),
        (
            '{"step": 1' + "0" * 30 + ', "data": {}}\n',
            'metrics.jsonl: line 1: "step" is a 31-digit number, not a step number (0 to 10^12)',
        ),
        ('{"step": -1, "data": {}}\n', 'metrics.jsonl: line 1: "step" is -1, not a step number (0 to 10^12)'),
        ('{"step": 1, "data": {}}\n\n', "metrics.jsonl: no steps with metrics"),
    ],
)
def test_jsonl_errors_are_one_line_naming_the_file(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "metrics.jsonl").write_text(text)
    with pytest.raises(MetricsLogError) as error:
        read_metrics_log(tmp_path / "metrics.jsonl")
    assert str(error.value) == f"{tmp_path}/{message}" and "\n" not in str(error.value)


def test_a_missing_path_is_named(tmp_path: Path) -> None:
    with pytest.raises(MetricsLogError, match=r"nowhere\.jsonl: no such file or directory$"):
        read_metrics_log(tmp_path / "nowhere.jsonl")


def test_require_names_the_first_missing_key_and_some_present() -> None:
    log = log_of({f"timing_s/k{index}": [1.0] for index in range(10)} | {"timing_s/ref": [math.nan]})
    require(log, ["timing_s/k1", "timing_s/k2"])  # present: nothing raised
    with pytest.raises(MetricsLogError) as error:
        require(log, ["timing_s/k1", "timing_s/ref", "timing_s/old_log_prob"])  # ref: NaN in every step
    shown = ", ".join(sorted(f"timing_s/k{index}" for index in range(10))[:8])
    assert str(error.value) == f"run.jsonl: no 'timing_s/ref' in any step (keys it has: {shown}, and 2 more)"


# ── TensorBoard ─────────────────────────────────────────────────────────────────


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, wire: int, payload: bytes | int) -> bytes:
    """A protobuf field: a varint (wire 0), fixed-width bytes (1, 5) or length-delimited bytes (2)."""
    key = _varint(number << 3 | wire)
    if isinstance(payload, int):
        return key + _varint(payload)
    return key + (_varint(len(payload)) + payload if wire == 2 else payload)


def _record(data: bytes) -> bytes:
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked_crc(length)) + data + struct.pack("<I", masked_crc(data))


def _event(step: int, tag: str, tensor: bytes | None = None, simple: float | None = None) -> bytes:
    value = _field(1, 2, tag.encode())
    value += _field(2, 5, struct.pack("<f", simple)) if simple is not None else _field(8, 2, tensor or b"")
    return _record(_field(1, 1, struct.pack("<d", 1.7e9)) + _field(2, 0, step) + _field(5, 2, _field(1, 2, value)))


def test_the_masked_crc_is_tfrecords() -> None:
    # CRC-32C("123456789") = 0xE3069283 (the standard check value); masked: rotate right 15, add 0xa282ead8
    crc = 0xE3069283
    assert masked_crc(b"123456789") == (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def test_hand_encoded_events_simple_values_and_scalar_tensors(tmp_path: Path) -> None:
    version = _record(_field(1, 1, struct.pack("<d", 1.7e9)) + _field(3, 2, b"brain.Event:2"))
    events = [
        version,  # file_version: skipped
        _event(1, "timing_s/gen", simple=357.5),
        _event(1, "float/content", _field(1, 0, 1) + _field(4, 2, struct.pack("<f", 2.5))),  # DT_FLOAT, tensor_content
        _event(2, "float/packed", _field(1, 0, 1) + _field(5, 2, struct.pack("<f", 0.75))),  # float_val, packed
        _event(2, "float/unpacked", _field(1, 0, 1) + _field(5, 5, struct.pack("<f", 1.25))),  # float_val, one field
        _event(3, "double/value", _field(1, 0, 2) + _field(6, 1, struct.pack("<d", 0.1))),  # DT_DOUBLE, double_val
        _event(3, "text/skipped", _field(1, 0, 7) + _field(8, 2, b"hello")),  # DT_STRING: not a scalar
        _event(3, "vector/skipped", _field(1, 0, 1) + _field(4, 2, struct.pack("<2f", 1, 2))),  # two numbers
    ]
    path = tmp_path / "events.out.tfevents.1700000000.host"
    path.write_bytes(b"".join(events))
    log = read_metrics_log(path)
    assert log.format == "tensorboard" and log.rows.index.tolist() == [1, 2, 3]
    assert list(log.rows) == ["timing_s/gen", "float/content", "float/packed", "float/unpacked", "double/value"]
    assert log.rows.loc[1, "timing_s/gen"] == 357.5 and log.rows.loc[1, "float/content"] == 2.5
    assert log.rows.loc[2, "float/packed"] == 0.75 and log.rows.loc[2, "float/unpacked"] == 1.25
    assert log.rows.loc[3, "double/value"] == 0.1  # a double stays a double
    # a record cut short (the writer is mid-record, in its data or its header): the file ends before it
    for cut in (events[5][:-3], events[5][:5]):
        path.write_bytes(b"".join(events[:5]) + cut)
        rows = read_metrics_log(path).rows
        assert rows.index.tolist() == [1, 2] and "double/value" not in rows


def test_summary_writer_scalars_old_and_new_style(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path / "exp"))
    for step in (1, 2, 3):
        writer.add_scalar("timing_s/gen", 350.0 + step / 4, step)  # simple_value (float32)
    writer.add_scalar("response_length/mean", 812.5, 2, new_style=True)  # a DT_FLOAT tensor
    writer.add_scalar("perf/throughput", 1234.125, 3, new_style=True, double_precision=True)  # DT_DOUBLE
    writer.add_text("notes", "not a number", 1)
    writer.close()
    log = read_metrics_log(tmp_path / "exp")
    assert log.rows.index.tolist() == [1, 2, 3]
    assert log.rows["timing_s/gen"].tolist() == [350.25, 350.5, 350.75]
    assert log.rows.loc[2, "response_length/mean"] == 812.5 and log.rows.loc[3, "perf/throughput"] == 1234.125
    assert math.isnan(log.rows.loc[1, "response_length/mean"]) and "notes" not in log.rows
    (event_file,) = (tmp_path / "exp").glob("events.out.tfevents.*")
    assert read_metrics_log(event_file).rows.equals(log.rows)  # one event file reads the same


def test_a_restarted_run_s_event_files_merge_and_parents_are_refused(tmp_path: Path) -> None:
    run = tmp_path / "tensorboard_log" / "project" / "exp"
    run.mkdir(parents=True)
    (run / "events.out.tfevents.1.host").write_bytes(_event(1, "a/b", simple=1.0) + _event(2, "a/b", simple=2.0))
    (run / "events.out.tfevents.2.host").write_bytes(_event(2, "a/b", simple=2.5) + _event(3, "a/b", simple=3.0))
    assert read_metrics_log(run).rows["a/b"].tolist() == [1.0, 2.5, 3.0]  # the later file's step 2 wins
    with pytest.raises(MetricsLogError) as error:
        read_metrics_log(run.parent)
    assert str(error.value) == (
        f"{run.parent}: no TensorBoard event files (events.out.tfevents.*) in it; its runs: exp/ (name one)"
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"this is not a TFRecord at all", "not a TFRecord file (the format of TensorBoard event files)"),
        (b"short", "not a TFRecord"),
    ],
)
def test_an_event_file_that_is_not_a_tfrecord(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "events.out.tfevents.1.host"
    path.write_bytes(content)
    with pytest.raises(MetricsLogError, match=f"^{re.escape(str(path))}: {re.escape(message)}"):
        read_metrics_log(path)


def test_a_corrupt_header_and_a_record_that_is_no_event(tmp_path: Path) -> None:
    path = tmp_path / "events.out.tfevents.1.host"
    good = _event(1, "a/b", simple=1.0)
    path.write_bytes(good + b"\xff" * 16)
    with pytest.raises(MetricsLogError, match=f"^{path}: corrupt at byte {len(good)} "):
        read_metrics_log(path)
    path.write_bytes(good + _record(b"\x0a\xff"))  # field 1 says 127 bytes follow; 0 do
    with pytest.raises(MetricsLogError, match=f"^{path}: the record at byte {len(good)} is not a TensorBoard event$"):
        read_metrics_log(path)


# ── telling a metrics log from a completions log ────────────────────────────────


def test_is_metrics_log_on_both_kinds_and_on_completions(tmp_path: Path) -> None:
    nested = write_lines(tmp_path / "nested.jsonl", [{"step": 1, "data": {"timing_s/gen": 1.0}}])
    flat = write_lines(tmp_path / "flat.jsonl", [{"step": 1, "response_length/mean": 800.0}])
    completions = write_completions(tmp_path / "completions.jsonl", word_counts(5))  # has a "step" too
    events = tmp_path / "exp" / "events.out.tfevents.1.host"
    events.parent.mkdir()
    events.write_bytes(_event(1, "a/b", simple=1.0))
    renamed = tmp_path / "renamed.bin"  # a TFRecord however it is named
    shutil.copy(events, renamed)
    assert all(is_metrics_log(path) for path in (nested, flat, events, events.parent, tmp_path, renamed))
    assert not any(is_metrics_log(path) for path in (completions, tmp_path / "nowhere", CONFIG))
    assert read_metrics_log(renamed).format == "tensorboard"


def test_reading_imports_no_heavy_library_nor_pandas() -> None:
    from tests.test_imports import HEAVY, imported

    assert imported("asyncrl.frameworks.common.metrics_log", f"name in {(*HEAVY, 'pandas')!r}") == "[]"


def test_a_401_digit_or_infinite_timing_is_refused_by_name_not_overflowed(tmp_path: Path) -> None:
    from asyncrl.frameworks.verl.log_phases import logged_steps

    for value, name in (("1" + "0" * 400, "digits.jsonl"), ("Infinity", "infinite.log")):
        log = tmp_path / name
        if name.endswith(".log"):
            lines = [f"step:{s} - timing_s/gen:{value} - timing_s/update_actor:5" for s in range(1, 5)]
        else:
            lines = [
                f'{{"step": {s}, "data": {{"timing_s/gen": {value}, "timing_s/update_actor": 5}}}}' for s in range(1, 5)
            ]
        log.write_text("\n".join(lines) + "\n")
        with pytest.raises(MetricsLogError, match=r"step 2: timing_s/gen is inf, not a finite number of seconds"):
            logged_steps(read_metrics_log(log), samples=8)


JSON_VALUE = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)
LOG_KEYS = st.sampled_from(["timing_s/gen", "timing_s/update_actor", "timing_s/step", "perf/total_num_tokens", "x"])


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.fixed_dictionaries(
            {"step": JSON_VALUE | st.integers(-3, 10**31), "data": st.dictionaries(LOG_KEYS, JSON_VALUE)}
        ),
        min_size=1,
        max_size=6,
    )
)
def test_any_json_log_gives_steps_or_one_line(records: list[dict[str, object]]) -> None:
    """Arbitrary JSON under verl's keys: the phases of its steps (finite seconds, >= 0), or a MetricsLogError of
    one line."""
    import tempfile

    from asyncrl.frameworks.verl.log_phases import logged_steps

    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "log.jsonl"
        log.write_text("".join(json.dumps(record) + "\n" for record in records))
        try:
            steps = logged_steps(read_metrics_log(log), samples=8)
        except MetricsLogError as error:
            assert "\n" not in str(error)
            return
    timed = [values for values in (steps.gen, steps.forward, steps.update, steps.step) if values is not None]
    assert timed  # a log timing whole steps only (a published table) has a step and no phases
    assert all(np.all(np.isfinite(values)) and np.all(values >= 0) for values in timed)
