"""Time by phase (decode, prefill, retirements, weight sync, overhead, waiting, learner) and decode contention.

The hand-made records are worked by hand in the comments; the simulated one is checked against a
closed form that holds for a sync run on one engine with a flat decode step.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from asyncrl.analysis.records.phases import (
    Contention,
    breakdown_lines,
    decode_contention,
    executor_phases,
    simulator_phases,
)
from asyncrl.scenarios.costs.profile import save_profile
from asyncrl.scenarios.record.record import EVENT_COLUMNS, summarize, write_run
from asyncrl.scenarios.spec.loading import dump_scenario

from asyncrl.cli import main
from tests.conftest import profile, run, small_scenario

STEP_COLUMNS = ["worker", "start", "end", "batch", "context", "joins", "prefill_tokens", "retired"]


def events(*rows: tuple) -> pd.DataFrame:
    """Event rows (worker, kind, start, end, group, sample); the other columns are filler."""
    table = [
        (worker, "training" if kind == "train" else "generation", kind, start, end, 0, 0, group, sample, 1, 0.0)
        for worker, kind, start, end, group, sample in rows
    ]
    return pd.DataFrame(table, columns=list(EVENT_COLUMNS)).astype(EVENT_COLUMNS)


def steps(*rows: tuple[float, int, int, int, int]) -> pd.DataFrame:
    """Engine steps (seconds, batch, context, joins, retired), laid end to end on engine-0 from time 0."""
    table, clock = [], 0.0
    for seconds, batch, context, joins, retired in rows:
        table.append(("engine-0", clock, clock + seconds, batch, context, joins, 16 * joins, retired))
        clock += seconds
    return pd.DataFrame(table, columns=STEP_COLUMNS)


# Decode-only steps on the line 8 ms + 2 ms per row (context plays no part): 5 × (10 + 12 + 12 + 16) ms.
PLAIN = [(0.010, 1, 10, 0, 0), (0.012, 2, 20, 0, 0), (0.012, 2, 40, 0, 0), (0.016, 4, 40, 0, 0)] * 5


def test_executor_steps_split_into_decode_prefill_and_retirements_by_the_runs_own_decode_line() -> None:
    recorded = steps(
        *PLAIN,  # decode 0.250
        (0.032, 2, 20, 2, 0),  # admits: decode 0.012 (the line), prefill 0.020
        (0.005, 0, 0, 1, 0),  # admits only: prefill 0.005
        (0.019, 4, 40, 0, 1),  # retires: decode 0.016, retirement 0.003
        (0.015, 1, 10, 1, 1),  # admits and retires: decode 0.010, the rest (0.005) is prefill
        (0.014, 4, 40, 1, 0),  # faster than its line: all 0.014 decode, no prefill
    )
    spans = events(
        ("engine-0", "generate", 0.0, 1.0, 0, 0),
        ("engine-0", "sync", 1.2, 1.3, -1, -1),
        ("learner", "train", 0.0, 0.5, -1, -1),
        ("learner", "train", 1.0, 2.0, -1, -1),
    )
    phases = executor_phases(recorded, spans, engines=1, wall=2.0).seconds
    expected = {
        "decode": 0.250 + 0.012 + 0.016 + 0.010 + 0.014,
        "prefill": 0.020 + 0.005 + 0.005,
        "retirements": 0.003,
        "weight sync": 0.1,
        # busy 1.1 s (rollouts 0–1, load 1.2–1.3), of which 0.335 s in steps and 0.1 s loading
        "engine overhead": 1.1 - 0.335 - 0.1,
        "engine waiting": 2.0 - 1.1,
        "learner": 1.5,
        "learner waiting": 0.5,
    }
    assert phases == pytest.approx(expected, abs=1e-12)


def test_simulator_prefill_and_retirements_are_charged_and_decode_is_the_busy_rest() -> None:
    scenario = small_scenario()  # fixed 10-token prompts, groups of 2
    costs = profile(join_s=0.1, prefill_token_s=0.01, retire_s=0.02, weight_sync_s=0.5)
    spans = events(
        ("engine-0", "generate", 0.0, 1.0, 0, 0),
        ("engine-0", "generate", 0.0, 1.5, 0, 1),
        ("engine-0", "generate", 1.0, 2.0, 1, 0),  # group 1 starts as sample 0 of group 0 finishes
        ("engine-0", "generate", 1.0, 2.0, 1, 1),
        ("engine-0", "sync", 2.0, 2.5, -1, -1),
        ("engine-0", "unfinished", 2.5, 3.0, 2, 0),
        ("engine-0", "unfinished", 2.5, 3.0, 2, 1),
        ("learner", "train", 1.5, 3.0, -1, -1),
    )
    phases = simulator_phases(spans, scenario, costs, wall=3.0).seconds
    # Three groups prefilled once each (prefill_per: group): 3 × (0.1 + 10 × 0.01) = 0.6.
    # Finishes at 1.0 and 1.5 leave rollouts in flight (charged); at 2.0 the engine empties (not charged).
    expected = {
        "decode": 3.0 - 0.6 - 2 * 0.02 - 0.5,
        "prefill": 0.6,
        "retirements": 0.04,
        "weight sync": 0.5,
        "engine overhead": 0.0,
        "engine waiting": 0.0,
        "learner": 1.5,
        "learner waiting": 1.5,
    }
    assert phases == pytest.approx(expected, abs=1e-12)


def test_a_simulated_sync_run_on_one_engine_decodes_for_its_longest_rollout_per_step() -> None:
    # One engine holding the whole batch, a flat decode step: each step decodes for exactly as many
    # steps as its longest rollout has tokens, whatever prefill, retirements and loads cost around it.
    scenario = small_scenario(
        workload={
            "prompts_per_step": 3,
            "prompt_tokens": {"kind": "lognormal", "median": 20, "sigma": 0.8, "max_tokens": 200},
            "completion_tokens": {"kind": "lognormal", "median": 50, "sigma": 1.0, "max_tokens": 400},
        },
        schedule={"kind": "sync", "max_concurrency": 6},
        run={"steps": 5, "seed": 3},
    )
    costs = profile(decode_step_s={1: 0.01}, join_s=0.05, prefill_token_s=0.001, retire_s=0.003, weight_sync_s=0.2)
    result = run(scenario, costs)
    generated = result.events[result.events["kind"] == "generate"]
    longest = generated.groupby("step")["tokens"].max()
    phases = simulator_phases(result.events, scenario, costs, result.summary.wall_time_s).seconds
    assert phases["decode"] == pytest.approx(0.01 * longest.sum(), rel=1e-9)
    assert phases["weight sync"] == pytest.approx(0.2 * 4)


def test_decode_steps_inside_train_spans_are_compared_with_those_outside_at_the_same_batch_size() -> None:
    recorded = steps(
        *[(0.010, 2, 20, 0, 0)] * 10,  # 0.000–0.100 outside
        *[(0.020, 4, 40, 0, 0)] * 10,  # 0.100–0.300 outside
        *[(0.012, 2, 20, 0, 0)] * 10,  # 0.300–0.420 inside the train span
        *[(0.030, 4, 40, 0, 0)] * 5,  # 0.420–0.570 inside
        *[(1.000, 8, 80, 0, 0)] * 3,  # inside, but no batch of 8 ran outside: not compared
        (0.500, 2, 20, 1, 0),  # admits: not a decode-only step
    )
    spans = events(("learner", "train", 0.3, 5.0, -1, -1))
    contention = decode_contention(recorded, spans)
    # Inside: 10 × 12 ms + 5 × 30 ms = 0.27 s where the same steps outside take 10 × 10 + 5 × 20 ms = 0.2 s.
    assert isinstance(contention, Contention)
    assert contention.slower == pytest.approx(0.27 / 0.2 - 1)
    assert (contention.inside_steps, contention.outside_steps, contention.batch_sizes) == (15, 20, 2)


def test_no_contention_figure_without_enough_decode_steps_during_training() -> None:
    recorded = steps(*[(0.010, 2, 20, 0, 0)] * 30)  # 0–0.3
    reason = decode_contention(recorded, events(("learner", "train", 0.5, 1.0, -1, -1)))  # as in a sync run
    assert isinstance(reason, str) and "no decode-only step ran during a train span" in reason
    reason = decode_contention(recorded, events(("learner", "train", 0.25, 1.0, -1, -1)))  # the last 5 steps
    assert isinstance(reason, str) and "too few" in reason and "(5 and 25" in reason


def test_compare_prints_the_breakdown_with_a_profile_and_says_why_not_without(tmp_path: Path, capsys) -> None:
    analytic = tmp_path / "analytic"
    assert main(["simulate", "cpu-timing", "--steps", "3", "--out", str(analytic), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["compare", str(analytic), str(analytic)]) == 0
    printed = capsys.readouterr().out
    assert "no phase breakdown" in printed and "analytic costs" in printed
    save_profile(profile(retire_s=0.001), tmp_path / "profile.yaml")
    profiled = tmp_path / "profiled"
    argv = ["simulate", "cpu-timing", "--steps", "3", "--out", str(profiled), "--quiet"]
    assert main([*argv, "--set", f"hardware.profile={tmp_path / 'profile.yaml'}"]) == 0
    capsys.readouterr()
    assert main(["compare", str(profiled), str(profiled)]) == 0
    printed = capsys.readouterr().out
    assert "time by phase" in printed and "retirements" in printed
    assert "no phase breakdown" in breakdown_lines(analytic, profiled)


def test_an_executor_record_without_engine_steps_gets_a_reason(tmp_path: Path) -> None:
    scenario = small_scenario()
    table = events(("engine-0", "generate", 0.0, 1.0, 0, 0), ("learner", "train", 0.0, 1.0, -1, -1))
    summary = summarize(table, backend="executor", scenario_name="small", engines=1, concurrency=4)
    write_run(tmp_path / "run", scenario_yaml=dump_scenario(scenario), events=table, summary=summary)
    reason = breakdown_lines(tmp_path / "run", tmp_path / "run")
    assert reason.startswith("no phase breakdown") and "engine_steps.parquet" in reason
