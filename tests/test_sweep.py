"""What a plan costs (device-hours per 1,000 trained samples) and what-if sweeps over any scenario key."""

from __future__ import annotations

import json
import math
import sys
import types
from pathlib import Path

import pandas as pd
import pytest
from asyncrl.analysis.plots import plots
from asyncrl.analysis.tables import cost_cells, device_hours_per_1k
from asyncrl.scenarios.record.record import validate_summary
from asyncrl.simulator import sweep
from asyncrl.simulator.sweep import grid_points, parse_axis, parse_scalar

from asyncrl.cli import main
from asyncrl.commands.common import overrides_tag
from tests.conftest import small_scenario
from tests.test_analysis import hand_summary

# ── device-hours per 1,000 trained samples ──────────────────────────────────────


def test_device_hours_per_1k_samples_worked_by_hand() -> None:
    summary = validate_summary(hand_summary(wall_time_s=7200.0, **{"samples.trained": 600}))
    split = small_scenario()  # 1 generation + 2 training devices
    # 3 devices for 2 hours = 6 device-hours, for 600 samples: 10 device-hours per 1,000
    assert device_hours_per_1k(split, summary) == pytest.approx(10.0)
    colocated = small_scenario(cluster={"generation_devices": 2, "training_devices": 2, "colocated": True})
    # colocated devices are counted once: 2 devices for 2 hours = 4 device-hours per 600 samples
    assert device_hours_per_1k(colocated, summary) == pytest.approx(4 / 600 * 1000)
    assert cost_cells(split, summary, None) == [pytest.approx(10.0)]
    assert cost_cells(split, summary, 2.5) == [pytest.approx(10.0), "25.00"]
    assert math.isnan(device_hours_per_1k(split, validate_summary(hand_summary(**{"samples.trained": 0}))))


@pytest.mark.slow
def test_size_csv_appends_device_hours_and_cost_per_1k_samples(tmp_path: Path, capsys) -> None:
    out = tmp_path / "size.csv"
    args = ["size", "quickstart", "--devices", "16", "--steps", "3", "--splits", "2", "--max-staleness", "1"]
    assert main([*args, "--out", str(out), "--quiet", "--price-per-device-hour", "2"]) == 0
    header = capsys.readouterr().out.splitlines()[1].split()
    assert header[-2:] == ["dev-h/1k", "USD/1k"]
    rows = pd.read_csv(out)
    assert list(rows.columns[-2:]) == ["device_hours_per_1k_samples", "cost_per_1k_samples_usd"]
    assert rows.columns[0] == "label" and rows.columns[-3] == "steps_simulated"  # the older columns keep their places
    rows = rows[rows["fits"]]  # plans that do not fit in memory are not simulated: no figures
    devices = rows["generation_devices"].where(rows["colocated"], rows["generation_devices"] + rows["training_devices"])
    # samples/s = trained / wall, so device-hours per 1,000 samples = devices / 3600 / (samples/s) · 1000
    expected = devices / 3600 / rows["samples_per_s"] * 1000
    assert rows["device_hours_per_1k_samples"].to_numpy() == pytest.approx(expected.to_numpy())
    assert rows["cost_per_1k_samples_usd"].to_numpy() == pytest.approx(2 * expected.to_numpy())


@pytest.mark.slow
def test_speedup_appends_device_hours_and_leaves_cost_out_without_a_price(capsys) -> None:
    assert main(["speedup", "quickstart", "--steps", "3", "--quiet"]) == 0
    header = capsys.readouterr().out.splitlines()[1]
    assert header.split("  ")[-1].strip() == "dev-h/1k"
    assert header.index("as written vs this") < header.index("dev-h/1k") and "USD" not in header


# ── what-if sweeps ──────────────────────────────────────────────────────────────

SIGMA, GENERATION = "workload.completion_tokens.sigma", "cluster.generation_devices"
FIGURES = [
    "samples_per_s",
    "tokens_per_s",
    "step_s",
    "staleness_mean",
    "staleness_max",
    "generation_utilization",
    "training_utilization",
    "dropped",
    "wall_time_s",
    "device_hours_per_1k_samples",
]


@pytest.mark.slow
def test_sweep_writes_the_grid_product_in_order_with_its_figures(tmp_path: Path, capsys) -> None:
    out = tmp_path / "grid.csv"
    args = ["sweep", "quickstart", "--steps", "3", "--vary", f"{SIGMA}=0.5,1.5", "--vary", f"{GENERATION}=4,8,16"]
    assert main([*args, "--out", str(out), "--quiet"]) == 0
    rows = pd.read_csv(out)
    assert list(rows.columns) == [SIGMA, GENERATION, *FIGURES, "status", "reason"]
    assert list(zip(rows[SIGMA], rows[GENERATION], strict=True)) == [
        (0.5, 4), (0.5, 8), (0.5, 16), (1.5, 4), (1.5, 8), (1.5, 16)
    ]  # fmt: skip
    assert (rows["status"] == "ok").all() and rows["reason"].isna().all()
    assert (rows["samples_per_s"] > 0).all()
    assert rows["dropped"].dtype.kind == "i" and rows["staleness_max"].dtype.kind == "i"
    assert rows[["generation_utilization", "training_utilization"]].stack().between(0, 1).all()
    # 3 steps of 512 samples each: the figures are the summary's own
    assert rows["samples_per_s"].to_numpy() == pytest.approx(3 * 512 / rows["wall_time_s"].to_numpy())
    # a heavier tail on the same devices is slower
    by_point = rows.set_index([SIGMA, GENERATION])["samples_per_s"]
    assert all(by_point[(1.5, devices)] < by_point[(0.5, devices)] for devices in (4, 8, 16))
    assert out.with_suffix(".png").read_bytes().startswith(b"\x89PNG")
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "quickstart-8b: 6 grid points, 3 steps simulated per point, in grid order"
    assert printed[1].split()[:3] == ["sigma", "generation_devices", "samples/s"]
    assert [line.split()[:2] for line in printed[3:9]] == [
        ["0.5", "4"],
        ["0.5", "8"],
        ["0.5", "16"],
        ["1.5", "4"],
        ["1.5", "8"],
        ["1.5", "16"],
    ]


def test_a_grid_point_the_scenario_rejects_keeps_its_row_and_reason(tmp_path: Path, capsys) -> None:
    out = tmp_path / "grid.csv"
    args = ["sweep", "quickstart", "--steps", "3", "--vary", "cluster.devices_per_engine=2,3", "--out", str(out)]
    assert main([*args, "--plot", str(tmp_path / "grid.png"), "--quiet", "--price-per-device-hour", "3"]) == 0
    rows = pd.read_csv(out)
    assert list(rows["status"]) == ["ok", "invalid"]
    assert rows["reason"].iloc[1] == "cluster.devices_per_engine: 3 does not divide generation_devices (8)"
    assert rows.loc[1, FIGURES].isna().all() and rows.loc[0, FIGURES].notna().all()
    assert rows["cost_per_1k_samples_usd"].iloc[0] == pytest.approx(3 * rows["device_hours_per_1k_samples"].iloc[0])
    printed = capsys.readouterr().out
    assert "skipped 1 of 2 grid points" in printed
    assert "devices_per_engine=3: cluster.devices_per_engine: 3 does not divide" in printed


@pytest.mark.slow
def test_sweep_writes_under_runs_by_default_and_prints_json(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["sweep", "quickstart", "--steps", "3", "--vary", f"{GENERATION}=4,8", "--json", "--quiet"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert [(record[GENERATION], record["status"]) for record in records] == [(4, "ok"), (8, "ok")]
    name = f"quickstart-8b{overrides_tag(['run.steps=3'])}-sweep"  # --steps 3: the overrides' hash in the name
    table = pd.read_csv(tmp_path / "runs" / f"{name}.csv")
    assert table["samples_per_s"].to_numpy() == pytest.approx([record["samples_per_s"] for record in records])
    assert (tmp_path / "runs" / f"{name}.png").is_file()


@pytest.mark.parametrize(
    ("vary", "message"),
    [
        ("workload.completion_tokens.sigmaa=0.5,1", "workload.completion_tokens.sigmaa: not a setting here"),
        ("cluster.devices_per_engine=3,5", "cluster.devices_per_engine: 3 does not divide generation_devices (8)"),
        ("cluster.generation_devices", "--vary cluster.generation_devices: expected dotted.key=value,value,..."),
    ],
)
def test_a_key_or_value_failing_every_grid_point_is_one_line(tmp_path: Path, capsys, vary: str, message: str) -> None:
    out = tmp_path / "grid.csv"
    assert main(["sweep", "quickstart", "--steps", "3", "--vary", vary, "--out", str(out), "--quiet"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith(f"asyncrl: error: {message}")
    assert not out.exists()


def test_an_unknown_metric_is_one_line_naming_the_flag(tmp_path: Path, capsys) -> None:
    args = ["sweep", "quickstart", "--vary", f"{SIGMA}=0.5,1", "--metric", "speed", "--out", str(tmp_path / "g.csv")]
    assert main(args) == 2
    error = capsys.readouterr().err
    assert error.startswith("asyncrl: error: --metric: speed is not a figure of the sweep") and error.count("\n") == 1


def test_values_are_read_as_yaml_scalars() -> None:
    axis = parse_axis("algorithm.learning_rate=1e-4, 3.0e-4 ,2")
    assert axis.key == "algorithm.learning_rate" and axis.texts == ("1e-4", "3.0e-4", "2")
    assert [parse_scalar(text) for text in ("1e-4", "true", "bf16", "0.5", "16", "-2E3")] == [
        1e-4, True, "bf16", 0.5, 16, -2000.0
    ]  # fmt: skip


def test_grid_points_apply_each_combination_over_the_overrides() -> None:
    axes = [parse_axis("schedule.kind=sync,pipelined"), parse_axis("model.dtype=bf16,fp8")]
    points = grid_points("quickstart", ["run.steps=7"], axes)
    assert [point.values for point in points] == [
        {"schedule.kind": kind, "model.dtype": dtype} for kind in ("sync", "pipelined") for dtype in ("bf16", "fp8")
    ]
    assert [(p.scenario.schedule.kind, p.scenario.model.dtype, p.scenario.run.steps) for p in points if p.scenario] == [
        ("sync", "bf16", 7), ("sync", "fp8", 7), ("pipelined", "bf16", 7), ("pipelined", "fp8", 7)
    ]  # fmt: skip


# ── the sweep's plot ────────────────────────────────────────────────────────────


def grid_table(keys: list[str], values: list[list[object]], metric: list[float | None]) -> pd.DataFrame:
    return pd.DataFrame(
        [dict(zip(keys, row, strict=True)) | {"samples_per_s": m} for row, m in zip(values, metric, strict=True)]
    )


def test_sweep_figure_draws_one_line_per_value_of_the_second_key() -> None:
    rows = [[sigma, devices] for sigma in (0.5, 1.0, 1.5) for devices in (4, 8)]
    table = grid_table([SIGMA, GENERATION], rows, [10, 20, 8, 16, None, 12])  # (1.5, 4) skipped
    figure = plots.sweep_figure(table, [SIGMA, GENERATION], "samples_per_s", "quickstart-8b")
    (ax,) = figure.axes
    assert len(ax.lines) == 2
    assert [text.get_text() for text in ax.get_legend().get_texts()] == ["generation_devices=4", "generation_devices=8"]
    four, eight = ax.lines
    assert list(four.get_xdata()) == [0.5, 1.0, 1.5] and list(eight.get_ydata()) == [20, 16, 12]
    assert math.isnan(four.get_ydata()[2])  # the skipped point is a gap
    assert ax.get_xlabel() == f"{SIGMA} (σ of log length)"
    assert ax.get_ylabel() == "throughput (trained samples/s)"
    assert ax.get_title() == "quickstart-8b: throughput against sigma"


def test_sweep_figure_with_three_keys_draws_a_line_per_combination_of_the_rest() -> None:
    keys = ["schedule.kind", "model.dtype", GENERATION]
    rows = [[kind, dtype, devices] for kind in ("sync", "streaming") for dtype in ("bf16", "fp8") for devices in (4, 8)]
    figure = plots.sweep_figure(grid_table(keys, rows, list(range(1, 9))), keys, "samples_per_s", "q")
    (ax,) = figure.axes
    assert [text.get_text() for text in ax.get_legend().get_texts()] == [
        "dtype=bf16, generation_devices=4", "dtype=bf16, generation_devices=8",
        "dtype=fp8, generation_devices=4", "dtype=fp8, generation_devices=8",
    ]  # fmt: skip
    assert [tick.get_text() for tick in ax.get_xticklabels()] == ["sync", "streaming"]  # categories in grid order
    assert ax.get_xlabel() == "schedule.kind"
    assert list(ax.lines[0].get_xdata()) == [0.0, 1.0] and list(ax.lines[0].get_ydata()) == [1, 5]


def test_sweep_figure_with_one_key_draws_one_unlabelled_line() -> None:
    figure = plots.sweep_figure(
        grid_table([GENERATION], [[4], [8], [16]], [1, 2, 3]), [GENERATION], "samples_per_s", "q"
    )
    (ax,) = figure.axes
    assert len(ax.lines) == 1 and ax.get_legend() is None
    assert ax.get_xlabel() == f"{GENERATION} (devices)"
    assert [tick.get_text() for tick in ax.get_xticklabels()] == ["4", "8", "16"]


@pytest.mark.slow
def test_size_with_one_split_tries_the_middle_one(tmp_path: Path, capsys) -> None:
    args = ["size", "quickstart", "--devices", "16", "--steps", "3", "--splits", "1", "--kind", "streaming", "--quiet"]
    assert main([*args, "--out", str(tmp_path / "size.csv")]) == 0
    assert "8:8" in capsys.readouterr().out  # 16 devices at tp1: 1..15 generation devices, the middle is 8


def test_the_pool_forks_unless_torch_or_ray_is_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fork needs no main guard in a user's script; a process holding torch's or Ray's threads spawns instead."""
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    monkeypatch.delitem(sys.modules, "ray", raising=False)
    assert sweep._pool_context().get_start_method() == "fork"
    monkeypatch.setitem(sys.modules, "ray", types.ModuleType("ray"))
    assert sweep._pool_context().get_start_method() == "spawn"


def test_simulations_of_a_pool_share_the_memory_budget(monkeypatch) -> None:
    # Each of a pool's N simulations plans on 1/N of the memory available, so together they fit in it.
    from asyncrl.simulator import budget
    from asyncrl.simulator.simulation import Simulation

    monkeypatch.setattr(budget, "available_bytes", lambda: 4 << 30)
    scenario = small_scenario(run={"steps": 50, "seed": 0})
    alone, shared = Simulation(scenario), Simulation(scenario, memory_share=4)
    assert alone.rollouts.max_samples == budget.plan(scenario, 4 << 30).rollouts
    assert shared.rollouts.max_samples == budget.plan(scenario, 1 << 30).rollouts < alone.rollouts.max_samples
