"""The study's tables on hand-made run records: time to target with its 10-step window worked by hand,
confidence intervals over seeds, speedup at equal quality and the robustness ranking. Nothing runs."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from asyncrl.analysis.summaries.intervals import mean_ci, ratio_ci, t_quantile
from asyncrl.analysis.summaries.study import (
    CELL_COLUMNS,
    CellKey,
    cell_record,
    cells_table,
    curve_frame,
    steps_to_target,
)
from asyncrl.analysis.summaries.study_summary import robustness_table, summary_lines, summary_table

from tests.test_analysis import hand_summary

#: The contract with the tools that read cells.csv: these columns, in this order.
CELLS_CSV = [
    "cell", "schedule", "kind", "staleness_bound", "in_flight_updates", "loss", "correction", "seed", "task",
    "target", "steps", "status", "reason", "final_reward", "reached", "steps_to_target", "wall_to_target_s",
    "kl_at_target", "step_time_s", "wall_s", "staleness_mean", "dropped_fraction", "samples_generated",
    "samples_dropped", "quality", "final_reward_train", "steps_to_target_train", "wall_to_target_train_s",
    "kl_to_behaviour_mean", "steps_to_target_low",
]  # fmt: skip
KEY = CellKey("sync.grpo.clip.s0", "sync", "sync", 0, False, "grpo", "clip", 0, "copy")
# Five steps at 0, five at 0.5, then 0.9: the 10-step means ending at step counts 10..14 are
# 2.5/10, 3.4/10, 4.3/10, 5.2/10 and 6.1/10.
REWARDS = [0.0] * 5 + [0.5] * 5 + [0.9] * 4


def metrics(rewards: list[float]) -> pd.DataFrame:
    steps = range(len(rewards))
    return pd.DataFrame(
        {
            "step": list(steps),
            "start": [0.5 * step for step in steps],
            "end": [0.5 * step + 0.4 for step in steps],
            "reward_mean": rewards,
            "kl": [0.01 * step for step in steps],
            "staleness_mean": [1.0] * len(rewards),
        }
    )


def write_run(run: Path, rewards: list[float], status: str = "complete", **summary: object) -> Path:
    run.mkdir(parents=True)
    metrics(rewards).to_parquet(run / "metrics.parquet", index=False)
    figures = {"wall_time_s": 7.0, "staleness.mean": 1.0, "staleness.token_mean": 0.75}
    record = hand_summary(
        steps=len(rewards), **figures, **{"samples.generated": 200, "samples.dropped": 10}, status=status, **summary
    )
    (run / "summary.json").write_text(json.dumps(record))
    return run


@pytest.mark.parametrize(
    ("target", "steps"),
    [(0.25, 10), (0.3, 11), (0.5, 13), (0.52, 13), (0.61, 14)],
)
def test_steps_to_target_is_the_first_full_ten_step_window_at_the_target(target: float, steps: int) -> None:
    reach = steps_to_target(metrics(REWARDS), target)
    assert reach.steps == steps  # a step count: the row of step index steps - 1
    assert reach.wall_s == pytest.approx(0.5 * (steps - 1) + 0.4)
    assert reach.kl == pytest.approx(0.01 * (steps - 1))
    assert reach.reached


def test_a_target_never_reached_is_nan_and_a_short_head_start_does_not_count() -> None:
    assert math.isnan(steps_to_target(metrics(REWARDS), 0.62).steps)
    # The first five steps alone average 1.0, but no whole window of 10 reaches 0.6.
    never = steps_to_target(metrics([1.0] * 5 + [0.0] * 10), 0.6)
    assert math.isnan(never.steps) and math.isnan(never.wall_s) and math.isnan(never.kl) and not never.reached
    assert math.isnan(steps_to_target(metrics([1.0] * 9), 0.5).steps)  # fewer than 10 steps: no window


def test_a_finished_cell_becomes_one_row_of_exactly_the_cells_csv_columns(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", REWARDS)
    record = cell_record(KEY, run, target=0.5, steps=14)
    assert list(record) == CELLS_CSV == list(CELL_COLUMNS)
    assert record["status"] == "complete" and record["reason"] == ""
    assert record["final_reward"] == pytest.approx(6.1 / 10)  # the last 10 steps
    assert record["reached"] and record["steps_to_target"] == 13
    assert record["wall_to_target_s"] == pytest.approx(6.4) and record["kl_at_target"] == pytest.approx(0.12)
    assert record["wall_s"] == 7.0 and record["step_time_s"] == pytest.approx(0.5)
    assert record["staleness_mean"] == 0.75  # token-weighted, from the summary
    assert record["dropped_fraction"] == pytest.approx(0.05)
    assert (record["samples_generated"], record["samples_dropped"]) == (200, 10)
    table = cells_table([record])
    assert list(table.columns) == CELLS_CSV and table["reached"].dtype == bool
    curve = curve_frame(KEY, run)
    figures = ["step", "end", "reward_mean", "kl", "staleness_mean", "eval_reward", "entropy"]
    assert list(curve.columns[-7:]) == figures
    assert record["quality"] == "train" and record["steps_to_target_train"] == 13
    assert len(curve) == 14 and set(curve["cell"]) == {KEY.cell}


def write_evaluation(run: Path, sampled: dict[int, float], modes: tuple[str, ...] = ("greedy", "sampled")) -> None:
    rows = [
        {"step": step, "mode": mode, "reward_mean": reward, "reward_std": 0.0, "prompts": 8.0,
         "completion_tokens_mean": 4.0, "seconds": 0.1}
        for step, reward in sampled.items() for mode in modes
    ]  # fmt: skip
    pd.DataFrame(rows).to_parquet(run / "eval.parquet", index=False)


def test_with_an_evaluation_the_target_is_measured_on_the_held_out_reward(tmp_path: Path) -> None:
    # Evaluations after 0, 4, 8, 12 and 14 steps: 0.1, 0.3, 0.55, 0.8, 0.85. Target 0.5: held three evaluations in
    # a row from 8 steps (crossed between 4 and 8), where the training batch's 10-step mean reaches it at 13. Step index 7 ends at
    # 0.5·7 + 0.4 = 3.9 s; snapshots of 0.01 s after steps 0, 4 and 8 (logged on rows 0, 3 and 7) come off:
    # 3.9 − 0.03 = 3.87 s. The training curve's 6.4 s at 13 steps loses them too, and the one after 12: 6.36 s.
    run = write_run(tmp_path / "run", REWARDS)
    frame = metrics(REWARDS).assign(eval_snapshot_s=[0.01 if step in (0, 3, 7, 11) else 0.0 for step in range(14)])
    frame.to_parquet(run / "metrics.parquet", index=False)
    write_evaluation(run, {0: 0.1, 4: 0.3, 8: 0.55, 12: 0.8, 14: 0.85})
    record = cell_record(KEY, run, target=0.5, steps=14)
    assert record["quality"] == "sampled" and record["reached"]
    assert (
        record["steps_to_target"] == 8
        and record["steps_to_target_low"] == 4
        and record["wall_to_target_s"] == pytest.approx(3.87)
    )
    assert record["kl_at_target"] == pytest.approx(0.07)
    assert record["final_reward"] == 0.85 and record["final_reward_train"] == pytest.approx(0.61)
    assert record["steps_to_target_train"] == 13 and record["wall_to_target_train_s"] == pytest.approx(6.36)
    curve = curve_frame(KEY, run)
    assert curve["eval_reward"].tolist()[3] == 0.3 and curve["eval_reward"].tolist()[7] == 0.55
    assert math.isnan(curve["eval_reward"].tolist()[0])
    assert cell_record(KEY, run, target=0.05, steps=14)["steps_to_target"] == 0  # the initial weights
    assert not cell_record(KEY, run, target=0.9, steps=14)["reached"]
    assert not cell_record(KEY, run, target=0.82, steps=14)["reached"]  # 0.85 at the last evaluation: not confirmed


def test_a_crossing_by_noise_is_not_a_reach_and_the_exact_evaluation_wins(tmp_path: Path) -> None:
    # Sampled: 0.2, 0.6 (noise), 0.4, 0.55, 0.6, 0.7 after 0, 10, ..., 50 steps. One evaluation at 0.6 is not the
    # target held: three in a row from 30 steps (crossed between 20 and 30), not 10.
    run = write_run(tmp_path / "run", [0.1] * 50)
    write_evaluation(run, {0: 0.2, 10: 0.6, 20: 0.4, 30: 0.55, 40: 0.6, 50: 0.7})
    record = cell_record(KEY, run, target=0.5, steps=50)
    assert (record["steps_to_target"], record["steps_to_target_low"]) == (30, 20)
    # Where the run also has the exact expected reward, that is the curve read.
    exact = {0: 0.2, 10: 0.45, 20: 0.5, 30: 0.52, 40: 0.58, 50: 0.6}
    rows = pd.read_parquet(run / "eval.parquet")
    extra = pd.DataFrame(
        [{**rows.iloc[0].to_dict(), "step": s, "mode": "expected", "reward_mean": r} for s, r in exact.items()]
    )
    pd.concat([rows, extra]).to_parquet(run / "eval.parquet", index=False)
    record = cell_record(KEY, run, target=0.5, steps=50)
    assert record["quality"] == "expected" and (record["steps_to_target"], record["steps_to_target_low"]) == (20, 10)
    assert record["final_reward"] == 0.6


def test_an_unfinished_cell_is_interrupted_or_failed_with_a_reason_and_no_figures(tmp_path: Path) -> None:
    interrupted = cell_record(KEY, write_run(tmp_path / "run", REWARDS, status="interrupted"), 0.5, 14)
    assert interrupted["status"] == "interrupted" and interrupted["reason"] == "run interrupted"
    assert math.isnan(interrupted["final_reward"]) and interrupted["reached"] is False
    failed = cell_record(KEY, write_run(tmp_path / "failed", REWARDS, status="failed"), 0.5, 14)
    assert failed["status"] == "failed" and failed["reason"] == "run failed"
    absent = cell_record(KEY, tmp_path / "absent", 0.5, 14)
    assert absent["status"] == "failed" and absent["reason"] == "not run"
    given = cell_record(KEY, tmp_path / "absent", 0.5, 14, reason="RuntimeError: actor 0 exited")
    assert given["reason"] == "RuntimeError: actor 0 exited"
    assert curve_frame(KEY, tmp_path / "absent").empty


def test_the_confidence_interval_over_three_seeds_is_the_t_interval() -> None:
    # 0.6, 0.7, 0.8: mean 0.7, s = 0.1; t(0.975, 2) = 4.302653; 4.302653 · 0.1 / √3 = 0.248414
    mean, half = mean_ci([0.6, 0.7, 0.8])
    assert mean == pytest.approx(0.7) and half == pytest.approx(0.248414, abs=1e-6)
    one_seed = mean_ci([0.6, math.nan])  # a missing value is left out; one seed has no interval
    assert one_seed[0] == 0.6 and math.isnan(one_seed[1])
    assert all(math.isnan(value) for value in mean_ci([]))
    assert t_quantile(1) == pytest.approx(12.7062, abs=1e-4)
    assert t_quantile(10) == pytest.approx(2.228139, abs=1e-5)
    assert t_quantile(30) == pytest.approx(2.042272, abs=1e-5)
    assert t_quantile(1000) == pytest.approx(1.962339, abs=1e-5)


def row(key: CellKey, **figures: object) -> dict[str, object]:
    """A cells.csv row for ``key``: reached where steps_to_target is given."""
    steps = figures.get("steps_to_target", math.nan)
    base = {
        "target": 0.5,
        "steps": 100,
        "status": "complete",
        "reason": "",
        "final_reward": 0.6,
        "reached": not math.isnan(steps),
        "steps_to_target": steps,
        "wall_to_target_s": math.nan,
        "kl_at_target": math.nan,
        "step_time_s": 0.1,
        "wall_s": 10.0,
        "staleness_mean": float(key.staleness_bound),
        "dropped_fraction": 0.0,
        "samples_generated": 100,
        "samples_dropped": 0,
    }
    return {**key.__dict__, **base, **figures}


def key(schedule: str, loss: str, seed: int) -> CellKey:
    kind = schedule.split("-")[0]
    bound = int(schedule.split("-")[1]) if "-" in schedule else 0
    return replace(KEY, cell=f"{schedule}.{loss}.clip.s{seed}", schedule=schedule, kind=kind, staleness_bound=bound, loss=loss, seed=seed)  # fmt: skip


def test_summary_means_over_seeds_and_the_speedup_at_equal_quality() -> None:
    records = [
        *(row(key("sync", "grpo", s), final_reward=r, steps_to_target=40.0, wall_to_target_s=30.0) for s, r in enumerate([0.6, 0.7, 0.8])),
        *(row(key("streaming-2", "grpo", s), steps_to_target=50.0, wall_to_target_s=w) for s, w in enumerate([18.0, 20.0, 22.0])),
        *(row(key("sync", "rloo", s)) for s in range(3)),  # never reached: no speedup for rloo
        *(row(key("streaming-2", "rloo", s), steps_to_target=60.0, wall_to_target_s=25.0) for s in range(2)),
        row(key("streaming-2", "rloo", 2), status="failed", reason="run failed", final_reward=math.nan),
    ]  # fmt: skip
    summary = summary_table(cells_table(records)).set_index(["schedule", "loss"])
    sync = summary.loc[("sync", "grpo")]
    assert sync["final_reward"] == pytest.approx(0.7) and sync["final_reward_ci"] == pytest.approx(0.248414, abs=1e-6)
    assert sync["speedup"] == pytest.approx(1.0) and sync["reached"] == 3 and sync["seeds"] == 3
    streaming = summary.loc[("streaming-2", "grpo")]
    assert streaming["wall_to_target_s"] == pytest.approx(20.0)
    assert streaming["wall_to_target_s_ci"] == pytest.approx(4.302653 * 2 / math.sqrt(3), abs=1e-5)
    # The geometric mean of the paired ratios 30/18, 30/20, 30/22: 30 / (18·20·22)^(1/3); three pairs, no interval.
    assert streaming["speedup"] == pytest.approx(30.0 / (18 * 20 * 22) ** (1 / 3)) and math.isnan(
        streaming["speedup_low"]
    )
    assert math.isnan(summary.loc[("sync", "rloo")]["steps_to_target"])
    late = summary.loc[("streaming-2", "rloo")]
    assert late["seeds"] == 2 and late["failed"] == 1 and late["reached"] == 2 and math.isnan(late["speedup"])
    assert list(summary.index) == [("sync", "grpo"), ("streaming-2", "grpo"), ("sync", "rloo"), ("streaming-2", "rloo")]


def test_no_speedup_or_mean_over_the_seeds_that_reached_alone() -> None:
    # sync reached in 10 s (seed 0), 12 s (seed 1), 50 s (seed 2); streaming-2 in 5 s and 8 s, seed 2 never.
    # The two pairs that reached would say 1.7x; the schedule that lost a seed is not faster for it: no speedup, no
    # mean (6.5 s over the two), the median over all three, the one that never got there last: 5, 8, ∞ → 8.
    records = [
        *(row(key("sync", "grpo", s), steps_to_target=40.0, wall_to_target_s=w) for s, w in enumerate([10.0, 12.0, 50.0])),
        *(row(key("streaming-2", "grpo", s), steps_to_target=50.0, wall_to_target_s=w) for s, w in enumerate([5.0, 8.0])),
        row(key("streaming-2", "grpo", 2)),  # never reached
    ]  # fmt: skip
    summary = summary_table(cells_table(records)).set_index("schedule")
    streaming = summary.loc["streaming-2"]
    assert math.isnan(streaming["speedup"]) and (streaming["speedup_pairs"], streaming["speedup_reached"]) == (3, 2)
    assert streaming["reached"] == 2 and streaming["reached_fraction"] == pytest.approx(2 / 3)
    assert streaming["wall_to_target_median_s"] == 8.0 and math.isnan(streaming["wall_to_target_s"])
    assert summary.loc["sync", "wall_to_target_median_s"] == 12.0 and summary.loc["sync", "wall_to_target_s"] == 24.0
    assert "- (2/3 pairs reached)" in summary_lines(summary.reset_index(), 0.5, 100)
    assert "median 8" in summary_lines(summary.reset_index(), 0.5, 100)


def test_the_speedup_interval_is_a_paired_t_interval_on_log_ratios_from_four_pairs() -> None:
    # Ratios 10/5, 12/8, 20/10, 16/8 = 2, 1.5, 2, 2: logs 0.693147 (×3) and 0.405465, mean d = 0.621227,
    # s_d = 0.143840, t(0.975, 3) = 3.182446: exp(0.621227 ± 3.182446 · 0.143840 / 2) = 1.861 [1.480, 2.340].
    records = [
        *(row(key("sync", "grpo", s), steps_to_target=40.0, wall_to_target_s=w) for s, w in enumerate([10.0, 12.0, 20.0, 16.0])),
        *(row(key("streaming-2", "grpo", s), steps_to_target=50.0, wall_to_target_s=w) for s, w in enumerate([5.0, 8.0, 10.0, 8.0])),
    ]  # fmt: skip
    streaming = summary_table(cells_table(records)).set_index("schedule").loc["streaming-2"]
    assert streaming["speedup"] == pytest.approx(1.861210, abs=1e-6)
    assert streaming["speedup_low"] == pytest.approx(1.480446, abs=1e-6)
    assert streaming["speedup_high"] == pytest.approx(2.339904, abs=1e-6)
    three = summary_table(cells_table(records[:3] + records[4:7])).set_index("schedule").loc["streaming-2"]
    assert three["speedup_pairs"] == 3 and math.isnan(three["speedup_low"])  # below four pairs: none


def test_a_censored_median_needs_more_than_half_the_seeds_to_reach() -> None:
    from asyncrl.analysis.summaries.study_summary import censored_median

    assert censored_median(pd.Series([40.0, math.nan, 60.0])) == 60.0  # 40, 60, ∞
    assert math.isnan(censored_median(pd.Series([40.0, math.nan])))  # 40, ∞: the middle is ∞
    assert math.isnan(censored_median(pd.Series([], dtype=float)))


def test_robustness_ranks_by_reaching_at_the_highest_bound_then_by_the_ratio_to_sync() -> None:
    # grpo: sync 90, 100, 110 (mean 100); at bound 8 110, 120, 130 (mean 120): ratio 1.2, and by the
    # delta method 4.302653 · 1.2 · √(100/(3·120²) + 100/(3·100²)) = 0.388035.
    # online_dpo: ratio 1.0 but one of three stale cells never reached the target: ranked second.
    records = [
        *(row(key("sync", "grpo", s), steps_to_target=v) for s, v in enumerate([90.0, 100.0, 110.0])),
        *(row(key("streaming-8", "grpo", s), steps_to_target=v) for s, v in enumerate([110.0, 130.0])),
        row(key("streaming-8-inflight", "grpo", 0), steps_to_target=120.0),
        row(key("streaming-2", "grpo", 0), steps_to_target=500.0),  # not the highest bound: left out
        *(row(key("sync", "online_dpo", s), steps_to_target=100.0) for s in range(3)),
        *(row(key("streaming-8", "online_dpo", s), steps_to_target=v) for s, v in enumerate([100.0, 100.0, math.nan])),
    ]  # fmt: skip
    ranking = robustness_table(cells_table(records))
    assert list(ranking["loss"]) == ["grpo", "online_dpo"] and list(ranking["rank"]) == [1, 2]
    grpo = ranking.iloc[0]
    assert grpo["staleness_bound"] == 8 and grpo["stale_schedules"] == "streaming-8 streaming-8-inflight"
    assert grpo["ratio"] == pytest.approx(1.2) and grpo["ratio_ci"] == pytest.approx(0.388035, abs=1e-5)
    assert (grpo["reached_stale"], grpo["cells_stale"]) == (3, 3)
    dpo = ranking.iloc[1]  # no ratio of the two survivors' steps: 2 of 3 reached
    assert math.isnan(dpo["ratio"]) and (dpo["reached_stale"], dpo["cells_stale"]) == (2, 3)
    assert dpo["steps_to_target_stale"] == 100.0 and grpo["steps_to_target_sync"] == 100.0  # censored medians
    assert ratio_ci([120.0], [100.0])[0] == pytest.approx(1.2) and math.isnan(ratio_ci([120.0], [100.0])[1])
    assert robustness_table(cells_table(records[:3])).empty  # sync alone: nothing to rank


def test_the_plots_name_the_reward_they_show() -> None:
    from asyncrl.analysis.plots.study_plots import quality_label

    trained = pd.DataFrame({"step": [1, 2], "reward_mean": [0.1, 0.2], "eval_reward": [math.nan, math.nan]})
    assert quality_label(trained) == "training batch, mean of 10 steps"
    assert quality_label(trained.drop(columns="eval_reward")) == "training batch, mean of 10 steps"
    assert quality_label(trained.assign(eval_reward=[0.05, math.nan])) == "held-out evaluation"


def test_the_held_out_line_shows_the_measured_interval_and_whether_it_holds_the_prediction() -> None:
    from asyncrl.experiments.holdout import HeldOut, holdout_lines

    held = HeldOut("streaming-2", "grpo", "clip", 4.4, 125, 1.99, 4.0, 118, 1.99, 3.5, 4.6, reached=3, seeds=3,
                   measured_ci_s=0.5)  # fmt: skip
    lines = holdout_lines([held, replace(held, loss="rloo", measured_ci_s=0.3)], 0.5).splitlines()
    assert lines[1] == (
        "  streaming-2 grpo/clip: predicted 4.40 s (125 steps at staleness 1.99), measured 4.00 ± 0.50 s (118 steps at "
        "staleness 1.99, mean of 3 seeds, seeds 3.50-4.60 s): +10%, inside the interval"
    )
    assert lines[2].endswith("+10%, outside the interval")
    assert (
        lines[3] == "  the measured mean's 95% interval holds the prediction in 1 of 2; |error| median 10%, worst 10%"
    )
    some = replace(held, reached=2, measured_s=4.2, measured_ci_s=math.nan)  # a median: the third seed never reached
    assert "2 of 3 seeds reached it, median 4.20 s" in holdout_lines([some], 0.5)
    refused = replace(held, refused="staleness 7.90 is past 4.00")
    assert "not predicted (staleness 7.90 is past 4.00)" in holdout_lines([refused], 0.5)


@pytest.mark.parametrize("pairs", [4, 5])
def test_the_speedup_interval_covers_at_its_level_on_simulated_seeds(pairs: int) -> None:
    # Lognormal wall times with a luck shared by a seed's two runs (SD 0.3 in logs) and their own noise (0.2), true
    # speedup 1.5: the paired t-interval on log ratios holds it in ≥ 93% of 2,000 trials (its nominal 95%; the
    # binomial standard error is 0.5 points). benchmarks/interval_coverage.py prints it beside the bootstrap's.
    from asyncrl.analysis.summaries.intervals import paired_log_ratio_ci

    rng = np.random.default_rng([7, pairs])
    held = 0
    for _ in range(2000):
        luck = rng.normal(0, 0.3, pairs)
        sync, schedule = (
            np.exp(luck + rng.normal(0, 0.2, pairs)),
            np.exp(luck - math.log(1.5) + rng.normal(0, 0.2, pairs)),
        )
        _, low, high, _ = paired_log_ratio_ci(sync, schedule)
        held += low <= 1.5 <= high
    assert held / 2000 >= 0.93
