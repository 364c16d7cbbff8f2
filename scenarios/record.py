"""The run record both backends write, and the summary computed from it.

    run dir/
      scenario.yaml     the resolved scenario (defaults written out)
      events.parquet    one row per span (EVENT_COLUMNS)
      summary.json      figures computed from the events by ``summarize``

Event kinds, by role:

    generation  generate    one rollout (prefill included) under one policy version;
                            with in-flight updates, one row per version it saw
                unfinished  a rollout still running when the run ended, cut there
                sync        an engine loading new weights (``version`` = loaded)
                drop        a finished rollout discarded (too stale, or pushed out
                            of a full queue); zero length
    training    train       one learner step (``tokens`` = prompt + completion)

``step`` on a generate row is the learner step that trained the rollout, −1 if
none did. ``version`` on a generate row is the policy version that produced its
tokens; on a train row the version being trained (= step). Because the summary
is computed from the events alone, the simulator and the executor are
summarized by the same code.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

EVENT_COLUMNS: dict[str, str] = {
    "worker": "string",
    "role": "string",
    "kind": "string",
    "start": "float64",
    "end": "float64",
    "step": "int64",
    "version": "int64",
    "group": "int64",
    "sample": "int64",
    "tokens": "int64",
}
BUSY_KINDS = {"generation": ("generate", "unfinished", "sync"), "training": ("train",)}


def empty_events() -> pd.DataFrame:
    return pd.DataFrame({name: pd.Series(dtype=dtype) for name, dtype in EVENT_COLUMNS.items()})


def summarize(
    events: pd.DataFrame, *, backend: str, scenario_name: str, engines: int, concurrency: int
) -> dict[str, Any]:
    """Every summary figure, from the event table of one run."""
    train = events[events["kind"] == "train"].sort_values("step")
    wall = float(train["end"].max()) if len(train) else 0.0
    events = events.assign(start=events["start"].clip(upper=wall), end=events["end"].clip(upper=wall))
    per_sample = _trained_samples(events)
    generation_busy = _busy_seconds(events, "generation")
    sample_seconds = _span_seconds(events, ("generate", "unfinished"))
    syncs = events[events["kind"] == "sync"]
    return {
        "backend": backend,
        "scenario": scenario_name,
        "steps": len(train),
        "wall_time_s": wall,
        "step_time_s": _stats(np.diff(np.concatenate([[0.0], train["end"].to_numpy()]))),
        "throughput": {
            "samples_per_s": _ratio(len(per_sample), wall),
            "tokens_per_s": _ratio(float(per_sample["tokens"].sum()), wall),
        },
        "staleness": {
            **_stats(per_sample["staleness"].to_numpy(), with_max=True),
            "token_mean": float(per_sample["token_staleness"].mean()) if len(per_sample) else 0.0,
            "histogram": {str(k): int(v) for k, v in per_sample["staleness"].value_counts().sort_index().items()},
        },
        "utilization": {
            "generation": _ratio(generation_busy, engines * wall),
            "training": _ratio(_busy_seconds(events, "training"), wall),
            "generation_slots": _ratio(sample_seconds, engines * concurrency * wall),
        },
        "idle": {
            "generation": 1.0 - _ratio(generation_busy, engines * wall),
            "training": 1.0 - _ratio(_busy_seconds(events, "training"), wall),
        },
        "weight_sync_s": _ratio(float((syncs["end"] - syncs["start"]).sum()), engines),
        "samples": _sample_counts(events, trained=len(per_sample)),
    }


def _trained_samples(events: pd.DataFrame) -> pd.DataFrame:
    """One row per trained rollout: staleness (oldest version) and token-mean staleness."""
    rows = events[(events["kind"] == "generate") & (events["step"] >= 0)]
    if rows.empty:
        return pd.DataFrame({"tokens": [], "staleness": [], "token_staleness": []})
    weighted = rows.assign(weight=rows["version"] * rows["tokens"])
    by_sample = weighted.groupby(["group", "sample"], sort=False)
    tokens = by_sample["tokens"].sum()
    oldest = by_sample["version"].min()
    step = by_sample["step"].first()
    mean_version = (by_sample["weight"].sum() / tokens.where(tokens > 0)).fillna(oldest)
    return pd.DataFrame(
        {"tokens": tokens, "staleness": (step - oldest).astype(np.int64), "token_staleness": step - mean_version}
    )


def _sample_counts(events: pd.DataFrame, *, trained: int) -> dict[str, int]:
    kinds = events["kind"]
    finished = events.loc[kinds == "generate", ["group", "sample"]].drop_duplicates()
    in_flight = events.loc[kinds == "unfinished", ["group", "sample"]].drop_duplicates()
    dropped = int((kinds == "drop").sum())
    return {
        "generated": len(finished) + len(in_flight),
        "trained": trained,
        "queued": len(finished) - trained - dropped,
        "in_flight": len(in_flight),
        "dropped": dropped,
    }


def _busy_seconds(events: pd.DataFrame, role: str) -> float:
    """Seconds each worker of ``role`` had any span open, added over workers."""
    spans = events[(events["role"] == role) & events["kind"].isin(BUSY_KINDS[role])]
    total = 0.0
    for _, worker in spans.groupby("worker", sort=False):
        total += _union_length(worker["start"].to_numpy(), worker["end"].to_numpy())
    return total


def _union_length(starts: np.ndarray, ends: np.ndarray) -> float:
    """Length of the union of intervals [starts[i], ends[i]]."""
    if len(starts) == 0:
        return 0.0
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], ends[order]
    reach = np.maximum.accumulate(ends)
    opens_block = np.concatenate([[True], starts[1:] > reach[:-1]])
    block_end = np.maximum.reduceat(ends, np.flatnonzero(opens_block))
    return float((block_end - starts[opens_block]).sum())


def _span_seconds(events: pd.DataFrame, kinds: tuple[str, ...]) -> float:
    spans = events[events["kind"].isin(kinds)]
    return float((spans["end"] - spans["start"]).sum())


def _stats(values: np.ndarray, with_max: bool = False) -> dict[str, float]:
    if len(values) == 0:
        stats = {"mean": 0.0, "p50": 0.0, "p95": 0.0}
        return {**stats, "max": 0} if with_max else stats
    stats = {
        "mean": float(np.mean(values)),
        "p50": float(np.percentile(values, 50)),
        "p95": float(np.percentile(values, 95)),
    }
    return {**stats, "max": int(np.max(values))} if with_max else stats


def _ratio(numerator: float, denominator: float) -> float:
    return float(numerator / denominator) if denominator > 0 else 0.0


def write_run(out_dir: Path, *, scenario_yaml: str, events: pd.DataFrame, summary: dict[str, Any]) -> None:
    """Write a run directory; summary.json goes last, so its presence means complete."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "summary.json").unlink(missing_ok=True)
    (out_dir / "scenario.yaml").write_text(scenario_yaml)
    events.astype(EVENT_COLUMNS).to_parquet(out_dir / "events.parquet", index=False)
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")


def read_summary(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "summary.json").read_text())


def read_events(run_dir: Path) -> pd.DataFrame:
    return pd.read_parquet(run_dir / "events.parquet")
