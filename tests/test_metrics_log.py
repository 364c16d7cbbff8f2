"""Metrics logs: verl's FileLogger JSONL and TensorBoard event files read into one row per step; the
capped lognormal fitted to their response_length figures, checked on values worked by hand, on
drawn samples and on any parameters; `asyncrl lengths --from-log` and `from-verl --lengths LOG`."""

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
import yaml
from asyncrl.analysis.log_lengths import (
    capped_mean,
    clip_probability,
    fit_from_metrics,
    typical_max,
)
from asyncrl.analysis.metrics_log import (
    MetricsLog,
    MetricsLogError,
    is_metrics_log,
    masked_crc,
    read_metrics_log,
    require,
)
from asyncrl.scenarios.loading import load_scenario
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from asyncrl.cli import main
from tests.lengths_data import word_counts, write_completions
from tests.metrics_log_data import draw_steps, write_file_logger, write_tensorboard

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
        ('{"step": "one", "data": {}}\n', "metrics.jsonl: line 1: \"step\" is 'one', not an integer"),
        ("[1, 2]\n", "metrics.jsonl: line 1 is not a JSON object"),
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


# ── the fit: values worked by hand ──────────────────────────────────────────────


def test_the_closed_forms_by_hand() -> None:
    # median 500, sigma 0.8, cap 2048: (ln 2048 − ln 500) / 0.8 = 1.410011 / 0.8 = 1.762514, Φ = 0.961009
    mu = math.log(500)
    assert clip_probability(mu, 0.8, 2048) == pytest.approx(0.038991, abs=1e-6)
    # (1.410011 − 0.64) / 0.8 = 0.962514, Φ = 0.832104; exp(mu + 0.32) = 688.564
    # mean = 688.564 · 0.832104 + 2048 · 0.038991 = 572.956 + 79.854 = 652.811
    assert capped_mean(mu, 0.8, 2048) == pytest.approx(652.811, abs=1e-3)
    # the longest of 512 draws is typically at the 0.5^(1/512) = 0.998647 quantile, z = 2.999326:
    # median 300, sigma 0.5 → 300 · exp(0.5 · 2.999326) = 1344.05
    assert typical_max(math.log(300), 0.5, 8192, 512) == pytest.approx(1344.05, abs=0.01)
    assert typical_max(mu, 0.8, 2048, 1024) == 2048  # beyond the cap: the cap


def test_the_mean_and_clip_ratio_worked_by_hand_give_back_the_lognormal() -> None:
    # the targets above, spread over four steps around their means (652.811 and 0.038991)
    log = log_of(
        {
            "response_length/mean": [642.811, 662.811, 642.811, 662.811],
            "response_length/clip_ratio": [0.028991, 0.048991, 0.028991, 0.048991],
            "response_length/max": [2048, 2048, 2048, 2048],
        }
    )
    fit = fit_from_metrics(log, samples_per_step=None, max_tokens=None)
    assert fit.distribution.median == pytest.approx(500, rel=0.01)
    assert fit.distribution.sigma == pytest.approx(0.8, rel=0.01)
    assert fit.distribution.cap == 2048 and fit.cap_from.startswith("the longest response_length/max")
    assert fit.pinned_by() == "mean and the clip ratio" and fit.steps == 4 and fit.step_range == (1, 4)
    mean, clip, maximum = fit.targets
    assert (mean.logged, mean.fitted) == pytest.approx((652.811, 652.811), abs=1e-6)
    assert (clip.logged, clip.fitted) == pytest.approx((0.038991, 0.038991), abs=1e-9)
    assert (maximum.logged, maximum.fitted, maximum.pins) == (2048, None, False)  # no samples per step: unchecked
    assert fit.snippet() == "completion_tokens: {kind: lognormal, median: 500, sigma: 0.8, max_tokens: 2048}"


def test_without_clipping_the_typical_max_pins_the_tail() -> None:
    # median 300, sigma 0.5, cap 8192: the clip ratio is 1.9e-11 (0 in any log); the mean is
    # 300 · exp(0.125) · Φ(6.114) + 8192 · 1.9e-11 = 339.9445; the typical longest of 512, 1344.05
    columns = {
        "response_length/mean": [339.9445] * 3,
        "response_length/max": [1300.0, 1344.05, 1500.0],  # their median is the target
        "response_length/clip_ratio": [0.0] * 3,
        "prompt_length/mean": [100.0, 120.0, 110.6],
        "prompt_length/max": [300.0, 280.0, 290.0],
    }
    fit = fit_from_metrics(log_of(columns), samples_per_step=512, max_tokens=8192)
    assert fit.distribution.median == pytest.approx(300, rel=0.01)
    assert fit.distribution.sigma == pytest.approx(0.5, rel=0.01)
    assert fit.cap_from == "--max-tokens" and fit.pinned_by() == "mean and the typical max"
    assert fit.targets[2].fitted == pytest.approx(1344.05, rel=1e-6)
    assert fit.prompt_tokens() == {"kind": "fixed", "value": 110} and fit.prompt_max == 300  # 330.6 / 3 = 110.2
    assert fit.targets[1].logged == 0
    unlogged = log_of({key: values for key, values in columns.items() if key != "response_length/clip_ratio"})
    fit_unlogged = fit_from_metrics(unlogged, samples_per_step=512, max_tokens=8192)
    assert fit_unlogged.distribution == fit.distribution and fit_unlogged.targets[1].logged is None


def test_the_drift_of_the_mean_is_reported() -> None:
    means = [600.0 + 15 * step for step in range(20)]  # 600 to 885
    log = log_of({"response_length/mean": means, "response_length/clip_ratio": [0.01] * 20})
    drift = fit_from_metrics(log, samples_per_step=None, max_tokens=4096).drift
    assert (drift.window, drift.first, drift.last, drift.lowest, drift.highest) == (2, 607.5, 877.5, 600, 885)


@pytest.mark.parametrize(
    ("columns", "kwargs", "message"),
    [
        ({"response_length/max": [100.0]}, {}, "run.jsonl: no 'response_length/mean' in any step"),
        (
            {"response_length/mean": [50.0], "response_length/max": [300.0], "response_length/clip_ratio": [0.0]},
            {"samples_per_step": 64},
            "--max-tokens: no step of run.jsonl shows the cap",
        ),
        (
            {"response_length/mean": [50.0], "response_length/max": [300.0]},
            {"max_tokens": 1024},
            "--samples-per-step: no response in run.jsonl hit the cap, so its response_length/max pins the tail",
        ),
        (
            {"response_length/mean": [50.0], "response_length/max": [3000.0]},
            {"max_tokens": 1024},
            "--max-tokens: 1024 is below the longest response in run.jsonl (3,000)",
        ),
        (
            {"response_length/mean": [50.0], "response_length/clip_ratio": [0.1]},
            {"max_tokens": 1024},
            "run.jsonl: no capped lognormal has a mean response length of 50.0 with a clip ratio of 0.1 at a cap "
            "of 1,024 (the mean must lie between cap × clip ratio, 102.4, and the cap)",
        ),
        (
            {"response_length/mean": [900.0], "response_length/clip_ratio": [0.7]},
            {"max_tokens": 1024},
            "run.jsonl: 70% of responses hit the cap of 1,024: a lognormal's median would lie above it",
        ),
        (
            {"response_length/mean": [1024.0], "response_length/clip_ratio": [1.0]},
            {"max_tokens": 1024},
            "run.jsonl: every response hit the cap",
        ),
    ],
)
def test_what_the_fit_cannot_do_is_one_line(columns: dict, kwargs: dict, message: str) -> None:
    with pytest.raises(MetricsLogError) as error:
        fit_from_metrics(log_of(columns), **({"samples_per_step": None, "max_tokens": None} | kwargs))
    assert str(error.value).startswith(message) and "\n" not in str(error.value)


# ── the fit: drawn samples, and any parameters ──────────────────────────────────


def test_steps_of_drawn_samples_give_back_the_lognormal_that_drew_them() -> None:
    clipped = log_of(pd.DataFrame.from_dict(draw_steps(steps=100, seed=1), orient="index").to_dict("list"))
    fit = fit_from_metrics(clipped, samples_per_step=512, max_tokens=4096)  # median 600, σ 0.9, 1.6% at the cap
    assert fit.pinned_by() == "mean and the clip ratio"
    assert fit.distribution.median == pytest.approx(600, rel=0.03)
    assert fit.distribution.sigma == pytest.approx(0.9, rel=0.03)
    assert fit.targets[2].fitted == fit.targets[2].logged == 4096  # every step reaches the cap, as predicted
    unclipped = draw_steps(steps=200, samples=512, median=300, sigma=0.5, cap=8192, seed=2)
    fit = fit_from_metrics(
        log_of(pd.DataFrame.from_dict(unclipped, orient="index").to_dict("list")), samples_per_step=512, max_tokens=8192
    )
    assert fit.pinned_by() == "mean and the typical max"
    assert fit.distribution.median == pytest.approx(300, rel=0.03)
    assert fit.distribution.sigma == pytest.approx(0.5, rel=0.03)


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(median=st.floats(20, 5000), sigma=st.floats(0.3, 1.5), headroom=st.floats(1.2, 40))
def test_exact_mean_and_clip_ratio_recover_any_lognormal(median: float, sigma: float, headroom: float) -> None:
    mu, cap = math.log(median), math.ceil(median * headroom)
    clip = clip_probability(mu, sigma, cap)
    assume(clip >= 1e-6)  # a logged ratio is a share of a batch
    log = log_of({"response_length/mean": [capped_mean(mu, sigma, cap)], "response_length/clip_ratio": [clip]})
    fit = fit_from_metrics(log, samples_per_step=None, max_tokens=cap)
    assert fit.distribution.median == pytest.approx(median, rel=1e-4)
    assert fit.distribution.sigma == pytest.approx(sigma, rel=1e-4)


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(
    median=st.floats(20, 5000),
    sigma=st.floats(0.3, 1.5),
    samples=st.integers(64, 16384),
    headroom=st.floats(1.05, 10),
)
def test_exact_mean_and_typical_max_recover_any_lognormal(
    median: float, sigma: float, samples: int, headroom: float
) -> None:
    mu = math.log(median)
    longest = typical_max(mu, sigma, math.inf, samples)
    cap = math.ceil(longest * headroom)
    log = log_of({"response_length/mean": [capped_mean(mu, sigma, cap)], "response_length/max": [longest]})
    fit = fit_from_metrics(log, samples_per_step=samples, max_tokens=cap)
    assert fit.distribution.median == pytest.approx(median, rel=1e-4)
    assert fit.distribution.sigma == pytest.approx(sigma, rel=1e-4)


# ── the commands ────────────────────────────────────────────────────────────────


@pytest.fixture(scope="module")
def verl_log(tmp_path_factory) -> Path:
    return write_file_logger(tmp_path_factory.mktemp("verl") / "metrics.jsonl", draw_steps())


def test_lengths_from_log_prints_the_fit_and_writes_fits_json(verl_log: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "fit"
    assert main(["lengths", "--from-log", str(verl_log), "--samples-per-step", "512", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"{verl_log} (verl-jsonl): 100 steps with response_length/mean, steps 1 to 100; cap 4,096" in printed
    assert "typical max of 512 (median of response_length/max)   4,096   4,096   check" in printed
    assert "response_length/mean drifts from" in printed and "one stationary distribution" in printed
    report = json.loads((out / "fits.json").read_text())
    assert report["fit"]["median"] == pytest.approx(600, rel=0.03) and report["fit"]["sigma"] == pytest.approx(
        0.9, rel=0.03
    )
    assert report["steps"] == 100 and report["prompt_tokens"]["kind"] == "fixed"
    snippets = [line.strip().split("  #")[0] for line in printed.splitlines() if "_tokens: {" in line]
    assert snippets == [report["snippet"], report["prompt_snippet"]]
    for snippet in snippets:
        ((key, value),) = yaml.safe_load(snippet).items()
        scenario = load_scenario("quickstart", [f"workload.{key}={json.dumps(value)}"])
        assert getattr(scenario.workload, key).kind == value["kind"]
    assert main(["lengths", "--from-log", str(verl_log), "--json", "--out", str(out)]) == 0
    assert json.loads(capsys.readouterr().out)["targets"][2]["fitted"] is None  # no samples per step: unchecked


def test_lengths_from_a_tensorboard_directory(tmp_path: Path, capsys) -> None:
    pytest.importorskip("tensorboard")
    run = write_tensorboard(tmp_path / "tensorboard_log" / "gsm8k" / "exp", draw_steps(steps=30))
    assert main(["lengths", "--from-log", str(run), "--max-tokens", "4096", "--out", str(tmp_path / "fit")]) == 0
    assert f"{run} (tensorboard): 30 steps with response_length/mean, steps 1 to 30; cap 4,096 (--max-tokens)" in (
        capsys.readouterr().out
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "give one of FILE.jsonl (a completions log) or --from-log LOG (a metrics log)"),
        (["FILE", "--from-log", "LOG"], "give one of FILE.jsonl (a completions log) or --from-log LOG"),
        (["LOG"], "FILE.jsonl: {log} is a metrics log (a line per step); read it with --from-log"),
        (["--from-log", "LOG", "--field", "output"], "--field, --tokenizer: only for a completions log FILE.jsonl"),
        (["FILE", "--samples-per-step", "8"], "--samples-per-step: only with --from-log"),
        (["--from-log", "LOG", "--max-tokens", "100"], "--max-tokens: 100 is below the longest response in {log}"),
        (["--from-log", "FILE"], "--from-log: {file} is not a metrics log (a completions log is read as FILE.jsonl)"),
        (["--from-log", "nowhere"], "nowhere: no such file or directory"),
    ],
)
def test_lengths_from_log_bad_input_is_one_line(verl_log: Path, tmp_path: Path, capsys, args, message) -> None:
    completions = str(write_completions(tmp_path / "completions.jsonl", word_counts(5)))
    argv = [{"LOG": str(verl_log), "FILE": completions}.get(arg, arg) for arg in args]
    assert main(["lengths", *argv, "--out", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err
    expected = message.format(log=verl_log, file=completions)
    assert error.startswith(f"asyncrl: error: {expected}") and error.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_from_verl_fits_a_metrics_log(tmp_path: Path, capsys) -> None:
    # the config's data.max_response_length is 512, data.train_batch_size 1024, rollout.n 1
    steps = draw_steps(30, samples=1024, median=200, sigma=0.7, cap=512)
    log = write_file_logger(tmp_path / "metrics.jsonl", steps)
    prompt = round(np.mean([step["prompt_length/mean"] for step in steps.values()]))  # 189: 180 · e^(0.3²/2) = 188.3
    out = tmp_path / "plan.yaml"
    args = ["from-verl", str(CONFIG), "--device", "h100", "--preset", "qwen2.5-7b", "--lengths", str(log)]
    assert main([*args, "--out", str(out)]) == 0
    workload = yaml.safe_load(out.read_text())["workload"]
    completion = workload["completion_tokens"]
    assert completion["kind"] == "lognormal" and completion["max_tokens"] == 512
    assert completion["median"] == pytest.approx(200, rel=0.03) and completion["sigma"] == pytest.approx(0.7, rel=0.03)
    assert workload["prompt_tokens"] == {"kind": "fixed", "value": prompt, "max_tokens": 512}  # the logged mean
    printed = capsys.readouterr().out
    assert (
        f"workload.completion_tokens: lognormal fitted to {log}'s response_length/mean, /max, /clip_ratio over 30 "
        "steps (it reproduces the mean and the clip ratio; response_length/mean drifts from"
    ) in printed
    assert f"workload.prompt_tokens: every prompt at {log}'s mean prompt_length/mean, {prompt}" in printed
    assert "every prompt taken at the cap" not in printed
    # --prompt-lengths wins over the log's prompts
    assert main([*args, "--prompt-lengths", "{kind: fixed, value: 64}", "--out", str(out)]) == 0
    assert yaml.safe_load(out.read_text())["workload"]["prompt_tokens"]["value"] == 64
    assert "every prompt at" not in capsys.readouterr().out


def test_from_verl_refuses_a_log_longer_than_the_config_s_cap(tmp_path: Path, capsys) -> None:
    log = write_file_logger(tmp_path / "metrics.jsonl", draw_steps(5, samples=64, cap=4096))
    args = ["from-verl", str(CONFIG), "--device", "h100", "--preset", "qwen2.5-7b", "--lengths", str(log)]
    assert main([*args, "--out", str(tmp_path / "plan.yaml")]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"asyncrl: error: data.max_response_length: 512 is below the longest response in {log}")
    assert error.count("\n") == 1


def test_reading_imports_no_heavy_library_nor_pandas() -> None:
    from tests.test_imports import HEAVY, imported

    assert imported("asyncrl.analysis.metrics_log", f"name in {(*HEAVY, 'pandas')!r}") == "[]"
