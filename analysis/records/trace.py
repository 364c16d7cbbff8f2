"""A run's events as a Chrome / Perfetto trace: open it at ui.perfetto.dev or chrome://tracing.

    events.parquet ─► chrome_trace ─► {"traceEvents": [...]} ─► trace.json.gz (gzip: Perfetto and Chrome read it)

Every span is a complete event (``ph: "X"``) with ``ts`` and ``dur`` in
microseconds; ``pid`` is the role (training, generation), ``tid`` the worker,
``name`` the kind, and ``args`` the remaining columns. Metadata events name
the processes and threads and keep workers in natural order.

An engine runs many rollouts at once, but the slices of one trace thread must
nest. So each worker's spans are packed greedily into lanes of non-overlapping
spans: lane 0 keeps the worker's name, later lanes are threads named
``engine-3 ·1``, ``engine-3 ·2``, … sorted right under it (tid = worker
index × lane stride + lane).
"""

from __future__ import annotations

import gzip
import heapq
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ...scenarios.files.writing import written
from .compare import load_events

ROLE_PIDS = {"training": 1, "generation": 2}
ARG_COLUMNS = ("step", "version", "group", "sample", "tokens")


def natural_key(name: str) -> list[int | str]:
    """Sort key that orders embedded numbers by value: engine-2 before engine-10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def assign_lanes(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Lane per span such that spans in one lane never overlap (touching is fine); fewest lanes."""
    lanes = np.zeros(len(starts), dtype=np.int64)
    busy: list[tuple[float, int]] = []  # (end, lane) of spans still open
    free: list[int] = []
    opened = 0
    for index in np.lexsort((-ends, starts)):  # by start, the longer span first at equal starts
        while busy and busy[0][0] <= starts[index]:
            heapq.heappush(free, heapq.heappop(busy)[1])
        if free:
            lane = heapq.heappop(free)
        else:
            lane, opened = opened, opened + 1
        lanes[index] = lane
        heapq.heappush(busy, (float(ends[index]), lane))
    return lanes


def chrome_trace(events: pd.DataFrame, *, run_label: str = "run") -> dict[str, Any]:
    """``{"traceEvents": [...]}`` for the events of one run, metadata events first."""
    ts = (events["start"].to_numpy(dtype=np.float64) * 1e6).round(3)
    end = np.maximum((events["end"].to_numpy(dtype=np.float64) * 1e6).round(3), ts)
    workers = sorted(events["worker"].astype(str).unique(), key=natural_key)
    worker_index = {worker: index for index, worker in enumerate(workers)}
    lanes = np.zeros(len(events), dtype=np.int64)
    for _, rows in events.groupby("worker", sort=False).indices.items():
        lanes[rows] = assign_lanes(ts[rows], end[rows])
    stride = int(lanes.max()) + 1 if len(lanes) else 1
    tids = events["worker"].astype(str).map(worker_index).to_numpy() * stride + lanes
    pids = events["role"].astype(str).map(lambda role: ROLE_PIDS.get(role, 3)).to_numpy()
    spans = _span_events(events, ts, end - ts, pids, tids)
    metadata = _metadata(events, pids, tids, lanes, run_label)
    return {"traceEvents": metadata + spans, "displayTimeUnit": "ms", "otherData": {"run": run_label}}


def _span_events(
    events: pd.DataFrame, ts: np.ndarray, dur: np.ndarray, pids: np.ndarray, tids: np.ndarray
) -> list[dict[str, Any]]:
    columns = {column: events[column].to_numpy().tolist() for column in ARG_COLUMNS}
    kinds = events["kind"].astype(str).tolist()
    roles = events["role"].astype(str).tolist()
    workers = events["worker"].astype(str).tolist()
    return [
        {
            "name": kinds[row],
            "cat": roles[row],
            "ph": "X",
            "ts": float(ts[row]),
            "dur": float(dur[row]),
            "pid": int(pids[row]),
            "tid": int(tids[row]),
            "args": {"worker": workers[row], **{column: values[row] for column, values in columns.items()}},
        }
        for row in range(len(kinds))
    ]


def _metadata(
    events: pd.DataFrame, pids: np.ndarray, tids: np.ndarray, lanes: np.ndarray, run_label: str
) -> list[dict[str, Any]]:
    threads = pd.DataFrame(
        {"pid": pids, "tid": tids, "lane": lanes, "worker": events["worker"].astype(str).to_numpy()}
    ).drop_duplicates(["pid", "tid"])
    processes = pd.DataFrame({"pid": pids, "role": events["role"].astype(str).to_numpy()}).drop_duplicates("pid")
    records: list[dict[str, Any]] = []
    for pid, role in zip(processes["pid"], processes["role"], strict=True):
        records.append(_meta("process_name", int(pid), 0, {"name": f"{run_label}: {role}"}))
        records.append(_meta("process_sort_index", int(pid), 0, {"sort_index": int(pid)}))
    for pid, tid, lane, worker in threads.sort_values(["pid", "tid"]).itertuples(index=False):
        name = worker if lane == 0 else f"{worker} ·{lane}"
        records.append(_meta("thread_name", int(pid), int(tid), {"name": name}))
        records.append(_meta("thread_sort_index", int(pid), int(tid), {"sort_index": int(tid)}))
    return records


def _meta(name: str, pid: int, tid: int, args: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "ph": "M", "ts": 0, "pid": pid, "tid": tid, "args": args}


def write_chrome_trace(events: pd.DataFrame, out: Path, *, run_label: str = "run") -> Path:
    """Write the trace of these events to ``out`` (gzipped when it ends in ``.gz``) and return it."""
    trace = chrome_trace(events, run_label=run_label)
    out.parent.mkdir(parents=True, exist_ok=True)
    opener = gzip.open if out.name.endswith(".gz") else open
    with written(out) as temporary, opener(temporary, "wt") as handle:
        json.dump(trace, handle, separators=(",", ":"))
    return out


def read_chrome_trace(path: Path) -> dict[str, Any]:
    """A trace written by ``write_chrome_trace``, gzipped or not."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as handle:
        return json.load(handle)


def default_trace_path(run_dir: Path) -> Path:
    return run_dir / "trace.json.gz"


def write_trace(run_dir: Path, out: Path | None = None, *, run_label: str | None = None) -> Path:
    """Write the trace of the run in ``run_dir`` (default ``run_dir/trace.json.gz``) and return its path."""
    events = load_events(run_dir)
    label = run_label or run_dir.resolve().name
    return write_chrome_trace(events, out or default_trace_path(run_dir), run_label=label)
