"""asyncrl validate: the scenario draws, and the whole job end to end on one small scenario."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
from asyncrl.analysis.summaries.validation import figure_errors, validation_lines
from asyncrl.scenarios.record.record import RunSummary, validate_summary
from asyncrl.scenarios.spec.loading import dump_scenario, load_scenario

from asyncrl.cli import main
from asyncrl.experiments.draws import LOSSES, SCHEDULE_CELLS, draw_scenarios
from tests.test_analysis import hand_summary


def test_forty_draws_are_valid_deterministic_and_cover_every_schedule_loss_and_refresh(tmp_path: Path) -> None:
    draws = draw_scenarios(40, seed=7, steps=30)
    again = draw_scenarios(40, seed=7, steps=30)
    assert [dump_scenario(d.scenario) for d in draws] == [dump_scenario(d.scenario) for d in again]
    assert [d.scenario for d in draw_scenarios(40, seed=8, steps=30)] != [d.scenario for d in draws]
    for draw in draws:  # each loads back through the scenario loader from its own file
        path = tmp_path / f"{draw.name}.yaml"
        path.write_text(dump_scenario(draw.scenario))
        assert load_scenario(path) == draw.scenario
        assert draw.scenario.model.preset == "tiny" and draw.scenario.workload.task is None
        assert draw.scenario.run.steps == 30 and draw.scenario.cluster.devices_per_engine == 1
        assert draw.scenario.algorithm.updates_per_step <= draw.scenario.workload.prompts_per_step
    schedules = [d.scenario.schedule for d in draws]
    assert {s.kind for s in schedules} == {"sync", "pipelined", "streaming"}
    assert {d.scenario.algorithm.loss for d in draws} == set(LOSSES)
    streaming = [s for s in schedules if s.kind == "streaming"]
    assert {s.in_flight_updates for s in streaming} == {True, False}
    assert {s.refresh for s in streaming if not s.in_flight_updates} == {"lazy", "drain"}
    assert {s.off_policy_steps for s in schedules if s.kind == "pipelined"} == {1, 2}
    assert {s.max_staleness for s in streaming} == {1, 2, 3}
    assert {d.scenario.cluster.engines for d in draws} == {1, 2}
    assert {d.scenario.workload.completion_tokens.kind for d in draws} == {"lognormal", "pareto", "fixed"}
    assert {d.scenario.workload.samples_per_prompt for d in draws} <= set(range(2, 9))
    assert {d.scenario.workload.prompts_per_step for d in draws} <= set(range(2, 7))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_any_five_draws_in_a_row_see_every_schedule_cell(seed: int) -> None:
    settings = [d.settings for d in draw_scenarios(10, seed=seed, steps=5)]
    for block in (settings[:5], settings[5:]):
        cells = {
            s["schedule"]
            if s["schedule"] != "streaming"
            else "streaming " + ("in-flight" if s["in_flight_updates"] else s["refresh"])
            for s in block
        }
        assert cells == set(SCHEDULE_CELLS)


def summary(wall: float, staleness: float = 0.0, generation: float = 0.5, training: float = 0.5) -> RunSummary:
    figures = {
        "wall_time_s": wall,
        "staleness.mean": staleness,
        "utilization.generation": generation,
        "utilization.training": training,
    }
    return validate_summary(hand_summary(**figures))


def test_errors_are_the_predictions_relative_to_each_repeat_of_the_measurement() -> None:
    predicted = {"streaming": summary(10.0, 1.0, 0.6, 0.9), "sync": summary(15.0)}
    measured = {
        "streaming": [summary(8.0, 0.75, 0.5, 1.0), summary(12.5, 1.0, 0.75, 0.9)],
        "sync": [summary(12.0), summary(15.0)],
    }
    errors = figure_errors(predicted, measured, "streaming")
    assert errors["wall_written"] == pytest.approx([10 / 8 - 1, 10 / 12.5 - 1])
    assert errors["wall_sync"] == pytest.approx([15 / 12 - 1, 0.0])
    # Predicted speedup 1.5 against measured 12/8 = 1.5 and 15/12.5 = 1.2.
    assert errors["speedup"] == pytest.approx([0.0, 1.5 / 1.2 - 1])
    assert errors["staleness"] == pytest.approx([0.25, 0.0])
    assert errors["gen_util"] == pytest.approx([0.2, 0.6 / 0.75 - 1])
    assert errors["train_util"] == pytest.approx([-0.1, 0.0])
    sync_only = figure_errors({"sync": summary(15.0)}, {"sync": [summary(12.0)]}, "sync")
    assert "speedup" not in sync_only and "wall_sync" not in sync_only


@pytest.mark.slow
def test_validate_calibrates_predicts_executes_and_reports_one_scenario(tmp_path: Path, capsys) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "validate"
    argv = ["validate", "--count", "1", "--steps", "4", "--calibration-steps", "4", "--out", str(out), "--quiet"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "wall as written" in printed and "median" in printed and "worst wall time: validate-00" in printed
    table = pd.read_csv(out / "validate.csv")
    assert list(table["status"]) == ["complete"]
    row = table.iloc[0]
    written = row["schedule"]
    runs = out / "validate-00"
    for run in (f"calibration-{written}", f"predicted-{written}", f"measured-{written}", "measured-sync"):
        assert (runs / run / "summary.json").is_file()
    assert (runs / "profile.yaml").is_file() and (runs / "fit.txt").is_file()
    assert load_scenario(runs / f"measured-{written}" / "scenario.yaml").run.steps == 4
    assert load_scenario(runs / f"calibration-{written}" / "scenario.yaml").run.seed == row_seed(runs) + 1
    for key in ("wall_written", "speedup", "staleness", "gen_util", "train_util", "decode"):
        assert math.isfinite(row[f"{key}_error"])
    assert row["wall_written_error"] == pytest.approx(
        row["predicted_wall_written_s"] / row["measured_wall_written_s"] - 1
    )
    assert (out / "validate.png").stat().st_size > 0 and (out / "table.txt").read_text().strip() in printed


def row_seed(runs: Path) -> int:
    return load_scenario(runs / "scenario.yaml").run.seed


def test_a_failed_run_is_reported_and_the_exit_status_is_1(tmp_path: Path, monkeypatch, capsys) -> None:
    import asyncrl.experiments.validate

    class Crashing:  # an executor backend whose every run fails
        name = "executor"

        def run(self, scenario, out: Path | None = None) -> None:
            raise RuntimeError("actor 0 failed: out of memory\nTraceback ...")

    monkeypatch.setattr(asyncrl.experiments.validate, "executor", lambda *args, **kwargs: Crashing())
    assert main(["validate", "--count", "2", "--steps", "3", "--out", str(tmp_path), "--quiet"]) == 1
    printed = capsys.readouterr().out
    assert printed.count("failed: actor 0 failed: out of memory") == 2 and "Traceback" not in printed
    assert list(pd.read_csv(tmp_path / "validate.csv")["status"]) == ["failed", "failed"]


def test_the_table_has_median_and_worst_rows_and_names_the_worst_scenario() -> None:
    def record(name: str, wall: float, contention: float) -> dict:
        errors = {
            f"{key}_error{s}": wall
            for key in ("wall_written", "wall_sync", "speedup", "gen_util", "train_util")
            for s in ("", "_min", "_max")
        }
        errors |= {f"staleness_error{s}": 0.5 for s in ("", "_min", "_max")}
        return {
            "scenario": name,
            "label": f"{name} settings",
            "status": "complete",
            "max_concurrency": 8,
            "decode_contention": contention,
            **errors,
        }

    lines = validation_lines(
        [record("validate-00", 0.05, 0.2), record("validate-01", -0.3, 0.1), record("validate-02", 0.1, math.nan)], 1
    )
    median = next(line for line in lines.splitlines() if line.startswith("median"))
    worst = next(line for line in lines.splitlines() if line.startswith("worst  "))
    assert median.split()[1:3] == ["+5%", "+5%"] and median.split()[-1] == "+15%"
    assert worst.split()[1:3] == ["-30%", "-30%"] and worst.split()[-1] == "+20%"
    assert "worst wall time: validate-01 (validate-01 settings, max_concurrency 8)" in lines


@pytest.mark.parametrize(
    "flag", [["--count", "0"], ["--steps", "-1"], ["--repeat", "0"], ["--calibration", "fit"], ["--seed", "x"]]
)
def test_bad_flags_exit_with_status_2(flag: list[str], tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["validate", *flag, "--out", str(tmp_path)])
    assert exit_info.value.code == 2
    assert flag[0] in capsys.readouterr().err and not (tmp_path / "validate.csv").exists()
