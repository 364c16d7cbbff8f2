"""Hand-made run records for the tests, and the checks of what is made from them.

hand_summary(**changes) ─► summary.json fields (round numbers; B_CHANGES: B against A, EXPECTED_RELATIVE)
hand_events()           ─► events.parquet rows (one engine, a sync, one learner step, one drop)
write_hand_run(path, summary) ─► a run directory; check_chrome_trace(trace) ─► its complete spans
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
from asyncrl.scenarios.record.record import EVENT_COLUMNS, write_run


def hand_summary(**changes: Any) -> dict[str, Any]:
    """A summary with round numbers; ``changes`` replace fields, dotted keys reach into sections."""
    summary: dict[str, Any] = {
        "backend": "simulator",
        "scenario": "hand",
        "steps": 10,
        "wall_time_s": 100.0,
        "step_time_s": {"mean": 10.0, "p50": 10.0, "p95": 12.0},
        "throughput": {"samples_per_s": 5.0, "tokens_per_s": 500.0},
        "staleness": {"mean": 0.0, "p50": 0.0, "p95": 0.0, "max": 0, "token_mean": 0.0, "histogram": {"0": 500}},
        "utilization": {"generation": 0.5, "training": 0.25, "generation_slots": 0.1},
        "idle": {"generation": 0.5, "training": 0.75},
        "weight_sync_s": 1.0,
        "samples": {"generated": 500, "trained": 500, "queued": 0, "in_flight": 0, "dropped": 0},
    }
    for dotted, value in changes.items():
        *sections, leaf = dotted.split(".")
        node = summary
        for section in sections:
            node = node[section]
        node[leaf] = value
    return summary


# B against A: +10% wall, +10% step mean, -10% p50, 0 p95, -20% samples/s, +20% tokens/s,
# staleness from exactly 0 to 0.5 / 1 / 1 (infinite relative error), utilizations +20%, 0, -50%.
B_CHANGES: dict[str, Any] = {
    "backend": "executor",
    "wall_time_s": 110.0,
    "step_time_s.mean": 11.0,
    "step_time_s.p50": 9.0,
    "throughput.samples_per_s": 4.0,
    "throughput.tokens_per_s": 600.0,
    "staleness.mean": 0.5,
    "staleness.p95": 1.0,
    "staleness.max": 1,
    "staleness.histogram": {"0": 250, "1": 250},
    "utilization.generation": 0.6,
    "utilization.generation_slots": 0.05,
}
EXPECTED_RELATIVE = {
    "wall_time_s": 0.1,
    "step_time_s.mean": 0.1,
    "step_time_s.p50": -0.1,
    "step_time_s.p95": 0.0,
    "throughput.samples_per_s": -0.2,
    "throughput.tokens_per_s": 0.2,
    "staleness.mean": math.inf,
    "staleness.p95": math.inf,
    "staleness.max": math.inf,
    "utilization.generation": 0.2,
    "utilization.training": 0.0,
    "utilization.generation_slots": -0.5,
}


def hand_events() -> pd.DataFrame:
    """One engine running two rollouts of group 0 at once, a weight sync, one learner step, one drop."""
    rows = [
        ("engine-0", "generation", "generate", 0.0, 2.0, 0, 0, 0, 0, 100, 0.0),
        ("engine-0", "generation", "generate", 1.0, 3.0, 0, 0, 0, 1, 200, 0.0),
        ("engine-0", "generation", "sync", 5.0, 5.5, -1, 1, -1, -1, 0, 0.0),
        ("learner", "training", "train", 3.5, 5.0, 0, 0, -1, -1, 300, 0.0),
        ("queue", "generation", "drop", 4.0, 4.0, -1, 0, 1, 0, 50, 0.0),
    ]
    return pd.DataFrame(rows, columns=list(EVENT_COLUMNS)).astype(EVENT_COLUMNS)


def write_hand_run(path: Path, summary: dict[str, Any]) -> Path:
    """A run directory whose summary.json is ``summary`` as given, well-formed or not."""
    write_run(path, scenario_yaml="name: hand\n", events=hand_events(), summary=None)
    (path / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return path


def check_chrome_trace(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Assert the Chrome trace format; return the complete ("X") events."""
    assert isinstance(data["traceEvents"], list)
    for event in data["traceEvents"]:
        assert {"name", "ph", "ts", "pid", "tid"} <= event.keys()
        if event["ph"] == "X":
            assert event["dur"] >= 0
    spans = [event for event in data["traceEvents"] if event["ph"] == "X"]
    by_thread: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for event in spans:
        by_thread.setdefault((event["pid"], event["tid"]), []).append((event["ts"], event["ts"] + event["dur"]))
    for intervals in by_thread.values():  # slices of one thread never partly overlap
        intervals.sort()
        assert all(end <= next_start for (_, end), (next_start, _) in itertools.pairwise(intervals))
    return spans
