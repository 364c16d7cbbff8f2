"""``staleness.token_mean`` of the run summary weighs every trained token once, at the version that produced it.

The simulator computes the same figure without the event table (``simulator.summary``);
``tests/test_early_stopping.py`` holds the two to each other, in-flight updates included.
"""

from __future__ import annotations

import pandas as pd
import pytest
from asyncrl.scenarios.record.record import EVENT_COLUMNS, summarize


def event_table(*rows: tuple[str, float, float, int, int, int, int, int]) -> pd.DataFrame:
    """Rows (kind, start, end, step, version, group, sample, tokens) on one engine and the learner."""
    table = [
        (
            "learner" if kind == "train" else "engine-0",
            "training" if kind == "train" else "generation",
            kind,
            start,
            end,
            step,
            version,
            group,
            sample,
            tokens,
            0.0,
        )
        for kind, start, end, step, version, group, sample, tokens in rows
    ]
    return pd.DataFrame(table, columns=list(EVENT_COLUMNS)).astype(EVENT_COLUMNS)


def test_token_mean_counts_each_token_once() -> None:
    # Both rollouts trained at step 2:
    #   A: 30 tokens at version 1                     → staleness 1 (oldest), 30 tokens 1 step stale
    #   B: 4 tokens at version 0, then 6 at version 2 → staleness 2 (oldest), 4 tokens 2 stale, 6 tokens 0
    # token_mean = (30·1 + 4·2 + 6·0) / 40 = 38/40 = 0.95
    # (a mean of per-rollout token means would give (1 + (4·2 + 6·0)/10) / 2 = (1 + 0.8)/2 = 0.9)
    events = event_table(
        ("train", 0.0, 1.0, 0, 0, -1, -1, 0),
        ("train", 1.0, 2.0, 1, 1, -1, -1, 0),
        ("generate", 1.0, 2.5, 2, 1, 0, 0, 30),
        ("generate", 0.5, 1.2, 2, 0, 0, 1, 4),
        ("generate", 1.2, 2.6, 2, 2, 0, 1, 6),
        ("train", 3.0, 4.0, 2, 2, -1, -1, 0),
    )
    summary = summarize(events, backend="executor", scenario_name="hand", engines=1, concurrency=2)
    staleness = summary.staleness
    assert staleness.token_mean == pytest.approx(38 / 40)
    assert staleness.mean == pytest.approx(1.5)  # per rollout, oldest version: (1 + 2)/2
    assert staleness.histogram == {"1": 1, "2": 1}


def test_rows_of_one_piece_each_give_the_grouped_answer() -> None:
    # The same three rollouts, each in one piece: as listed (sorted by group, sample: no group-by needed) and
    # in another order (the group-by path). Staleness 1, 2, 0 and token staleness the same, weighted 30, 10, 5.
    rows = [
        ("train", 0.0, 1.0, 0, 0, -1, -1, 0),
        ("train", 1.0, 2.0, 1, 1, -1, -1, 0),
        ("generate", 1.0, 2.5, 2, 1, 0, 0, 30),
        ("generate", 0.5, 1.2, 2, 0, 0, 1, 10),
        ("generate", 1.2, 2.6, 2, 2, 1, 0, 5),
        ("train", 3.0, 4.0, 2, 2, -1, -1, 0),
    ]
    sorted_rows = summarize(event_table(*rows), backend="executor", scenario_name="hand", engines=1, concurrency=2)
    shuffled = summarize(
        event_table(*rows[:2], rows[4], rows[2], rows[3], rows[5]),
        backend="executor",
        scenario_name="hand",
        engines=1,
        concurrency=2,
    )
    assert sorted_rows.staleness.token_mean == pytest.approx((30 * 1 + 10 * 2 + 5 * 0) / 45)
    assert sorted_rows.staleness.histogram == {"0": 1, "1": 1, "2": 1}
    assert sorted_rows.staleness == shuffled.staleness
