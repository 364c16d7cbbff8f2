"""What a plan costs (device-hours per 1,000 trained samples) and what-if sweeps over any scenario key."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
from asyncrl.analysis.tables import cost_cells, device_hours_per_1k

from asyncrl.cli import main
from tests.conftest import small_scenario

# ── device-hours per 1,000 trained samples ──────────────────────────────────────


def test_device_hours_per_1k_samples_worked_by_hand() -> None:
    summary = {"wall_time_s": 7200.0, "samples": {"trained": 600}}
    split = small_scenario()  # 1 generation + 2 training devices
    # 3 devices for 2 hours = 6 device-hours, for 600 samples: 10 device-hours per 1,000
    assert device_hours_per_1k(split, summary) == pytest.approx(10.0)
    colocated = small_scenario(cluster={"generation_devices": 2, "training_devices": 2, "colocated": True})
    # colocated devices are counted once: 2 devices for 2 hours = 4 device-hours per 600 samples
    assert device_hours_per_1k(colocated, summary) == pytest.approx(4 / 600 * 1000)
    assert cost_cells(split, summary, None) == [pytest.approx(10.0)]
    assert cost_cells(split, summary, 2.5) == [pytest.approx(10.0), "25.00"]
    assert math.isnan(device_hours_per_1k(split, {"wall_time_s": 1.0, "samples": {"trained": 0}}))


def test_size_csv_appends_device_hours_and_cost_per_1k_samples(tmp_path: Path, capsys) -> None:
    out = tmp_path / "size.csv"
    args = ["size", "quickstart", "--devices", "16", "--steps", "3", "--splits", "2", "--max-staleness", "1"]
    assert main([*args, "--out", str(out), "--quiet", "--price-per-device-hour", "2"]) == 0
    header = capsys.readouterr().out.splitlines()[1].split()
    assert header[-2:] == ["dev-h/1k", "USD/1k"]
    rows = pd.read_csv(out)
    assert list(rows.columns[-2:]) == ["device_hours_per_1k_samples", "cost_per_1k_samples_usd"]
    assert rows.columns[0] == "label" and rows.columns[-3] == "dropped"  # the older columns keep their places
    devices = rows["generation_devices"].where(rows["colocated"], rows["generation_devices"] + rows["training_devices"])
    # samples/s = trained / wall, so device-hours per 1,000 samples = devices / 3600 / (samples/s) · 1000
    expected = devices / 3600 / rows["samples_per_s"] * 1000
    assert rows["device_hours_per_1k_samples"].to_numpy() == pytest.approx(expected.to_numpy())
    assert rows["cost_per_1k_samples_usd"].to_numpy() == pytest.approx(2 * expected.to_numpy())


def test_speedup_appends_device_hours_and_leaves_cost_out_without_a_price(capsys) -> None:
    assert main(["speedup", "quickstart", "--steps", "3", "--quiet"]) == 0
    header = capsys.readouterr().out.splitlines()[1]
    assert header.split("  ")[-1].strip() == "dev-h/1k"
    assert header.index("as written vs this") < header.index("dev-h/1k") and "USD" not in header
