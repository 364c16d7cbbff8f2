"""What a recorded run's clock says between the engine's steps: its cycles and the messages' delays.

    engine_steps.parquet + events ──► engine_cycles: each step up to its engine's next one while rows stay in flight
                                  ──► wake_delays, train_start_delays, engine_start_seconds (messages, start-up)

``analysis.fits.fit`` fits a profile to these; ``analysis.records.phases`` counts engine time by them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

CYCLE_BOUNDS = ("sync", "restart")  # an engine's spans that end the cycle of the step before them


def engine_start_seconds(events: pd.DataFrame) -> float | None:
    """Mean seconds from an engine's death to its replacement's start (restart rows); None without one."""
    restarts = events[(events["kind"] == "restart") & (events["worker"] != "learner")]
    return float((restarts["end"] - restarts["start"]).mean()) if len(restarts) else None


def engine_cycles(steps: pd.DataFrame, events: pd.DataFrame) -> pd.DataFrame:
    """The engine steps as the engine's cycles: a step that left rows in flight ends where its engine's next
    step starts, so the actor's work between two steps (its reports of the steps and finishes, the loop that
    looks for commands) counts as part of the step that caused it; a weight load or a restart in between ends
    the cycle at its start. A step that emptied the batch keeps its end: what follows is idle time (wake_s).

    The actor times ``engine.step`` alone (``executor.processes.actor``), but the engine cannot start its next step
    before that work is done. In a sync run of cpu-timing on two cores it was 0.05 ms after a plain step and
    0.6 ms after one where rows finished (two pipe sends): 0.7 s beside 9.1 s of steps, which a profile
    fitted to the bare steps never charged.
    """
    if steps.empty:
        return steps.copy()
    ordered = steps.sort_values(["worker", "start"], kind="stable")
    end = ordered["end"].to_numpy(float).copy()
    bounds = events[events["kind"].isin(CYCLE_BOUNDS)]
    for worker, rows in ordered.groupby("worker", sort=False):
        at = ordered.index.get_indexer(rows.index)
        starts, ends = rows["start"].to_numpy(float), rows["end"].to_numpy(float)
        following = np.append(starts[1:], np.nan)
        marks = np.sort(bounds.loc[bounds["worker"] == worker, "start"].to_numpy(float))
        nearest = np.searchsorted(marks, ends, side="left")
        mark = np.append(marks, np.inf)[nearest]
        until = np.minimum(following, mark)
        carry_on = (rows["batch"] > rows["retired"]).to_numpy() & np.isfinite(following) & (until > ends)
        end[at[carry_on]] = until[carry_on]
    cycles = ordered.assign(end=end)
    return cycles.loc[steps.index]


def train_start_delays(events: pd.DataFrame) -> np.ndarray:
    """Per learner step: seconds from the moment it could start (its batch's last rollout finished and the
    previous step ended) to its train span's start: the report's way to the learner and the batch's collation."""
    train = events[events["kind"] == "train"].sort_values("step")
    ready = events[events["kind"] == "generate"].groupby("step")["end"].max()
    delays, free = [], 0.0
    for step, start, end in zip(train["step"], train["start"], train["end"], strict=True):
        if step in ready.index:
            delays.append(max(0.0, start - max(float(ready[step]), free)))
        free = end
    return np.asarray(delays, float)


def wake_delays(steps: pd.DataFrame, events: pd.DataFrame) -> np.ndarray:
    """Seconds an idle engine took to act on new work, less the weight loads in between: from the decision
    that gave it work (the latest publish, a train span's end, or finish, an engine step where rows retired,
    before it) to its next step. An engine is idle after a step that retired every row it had; the run's
    first start (process start-up, not modelled) is left out."""
    decisions = np.sort(
        np.concatenate(
            [
                events.loc[events["kind"] == "train", "end"].to_numpy(float),
                steps.loc[steps["retired"] > 0, "end"].to_numpy(float),
            ]
        )
    )
    syncs = events[events["kind"] == "sync"]
    delays = []
    for worker, rows in steps.groupby("worker"):
        rows = rows.sort_values("start")
        emptied = (rows["batch"] == rows["retired"]).to_numpy()
        starts, ends = rows["start"].to_numpy(float), rows["end"].to_numpy(float)
        loads = syncs[syncs["worker"] == worker]
        for index in np.flatnonzero(emptied[:-1]):
            idle_from, resumed = ends[index], starts[index + 1]
            before = decisions[(decisions >= idle_from - 1e-9) & (decisions <= resumed)]
            if not len(before):
                continue
            decided = before[-1] if before[-1] < resumed else before[0]
            between = loads[(loads["start"] >= decided) & (loads["end"] <= resumed)]
            delays.append(max(0.0, resumed - decided - float((between["end"] - between["start"]).sum())))
    return np.asarray(delays, float)
