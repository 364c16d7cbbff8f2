"""The ``asyncrl study`` tables of its cells: how soon each cell's run reached a reward, and its curve.

    OUT/cells/<cell>/summary.json, metrics.parquet ─► cell_record ─► cells.csv  (one row per cell)
                                                   └─► curve_frame ─► curves.csv (one row per learner step)
    cells.csv ─► analysis.summaries.study_summary: summary.csv, robustness.csv (over seeds)

Nothing here runs anything: every function reads run records or the frames made from them,
so the tables can be rebuilt (with another ``target``) from a finished study's directory.

**Quality** is the reward averaged over a window of ``WINDOW`` = 10 learner steps (one step's
``reward_mean`` is noisy). A cell *reaches* the target at the first step count k (k learner
steps done: the metrics row of step index k − 1) at which the mean ``reward_mean`` of the 10
steps ending there is at least ``target``; a window needs 10 whole steps, so k ≥ 10.
``steps_to_target`` is that k, ``wall_to_target_s`` the end of that step on the run's clock
(0 when generation starts; process start-up is not counted), ``kl_at_target`` its ``kl`` (to the
initial policy); all three NaN if the target is never reached. ``final_reward`` is the mean
``reward_mean`` of the last 10 steps. ``staleness_mean`` is the run's token-weighted mean
staleness (``summary.json`` ``staleness.token_mean``).

**On the evaluation reward** (a run with ``run.eval_every``: eval.parquet, ``executor.learning.evaluation``): the
training batch's reward is sampled by the behaviour policies, so an asynchronous run's curve lags its policy by
its staleness; the held-out evaluation measures the policy itself. Where a run has eval.parquet, ``quality`` names
the evaluation read: ``expected`` where the task gives the reward's exact expected value (one answer token: its
probability at ``algorithm.temperature``, no sampling noise), else ``sampled`` (one answer per prompt at the
temperature, as the training reward is). A cell reaches the target at the first evaluated step count k from which
``HOLD`` = 3 evaluations in a row (k and the next two) are at least ``target``: one evaluation of 32 sampled
answers has an SD of about 0.09 at a reward of 0.5, and a policy at 0.40 crosses 0.5 by chance about once in seven
evaluations, three in a row about once in 350. A crossing the run's last evaluations cannot confirm is not a
reach: the run is censored. k may be 0. The policy crossed the target somewhere after the evaluation before k, so
the steps to target are *interval-censored*: ``steps_to_target_low`` is that previous evaluated step count (0 when
k is 0), ``steps_to_target`` is k; the penalty fit takes the interval (``scenarios.staleness.penalty_forms``), the
tables take k. ``final_reward`` is then the last evaluation's. The training-batch figures stay as a second curve:
``steps_to_target_train``, ``wall_to_target_train_s``, ``final_reward_train`` (the same as the main ones where
``quality`` is ``train``, where ``steps_to_target_low`` is k − 1: every step is measured). ``kl_to_behaviour_mean``
is the mean over steps of the learner's k3 KL to the behaviour policy (the penalty fit scores it as a covariate).
Every wall time to the target excludes the weight snapshots taken for the evaluation before that step (the
metrics' ``eval_snapshot_s``); the answers are generated after the run's clock stops.

**Status** is in the run summaries' words (``analysis.statuses``): ``complete`` when the run
finished (summary.json complete, metrics.parquet readable), ``interrupted`` when its summary says
so, else ``failed``; ``reason`` says why in a few words. Only complete cells have figures.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from ...scenarios.files.writing import written
from ...scenarios.record.record import RunRecordError, RunStatus, RunSummary, read_summary
from ..statuses import COMPLETE, FAILED, INTERRUPTED

WINDOW = 10
#: The evaluation modes a target is measured on, the first the run has: the exact expected reward, else one sampled
#: answer per prompt at the training temperature, as the training reward is.
EVAL_MODES = ("expected", "sampled")
EVAL_MODE = "sampled"  # what a run's curve shows as its eval_reward when it has no exact one
#: Evaluations in a row at or above the target for it to count as reached (module docstring).
HOLD = 3
#: Tolerance of "reaches the target": a rolling mean of floats may miss an exact target by rounding.
REACH_TOLERANCE = 1e-9

#: What identifies a cell; the first columns of every per-cell and per-step table.
KEY_COLUMNS = (
    "cell",
    "schedule",
    "kind",
    "staleness_bound",
    "in_flight_updates",
    "loss",
    "correction",
    "seed",
    "task",
)
#: cells.csv, exactly (other tools fit from it: change it only with them).
CELL_COLUMNS = (
    *KEY_COLUMNS,
    "target",
    "steps",
    "status",
    "reason",
    "final_reward",
    "reached",
    "steps_to_target",
    "wall_to_target_s",
    "kl_at_target",
    "step_time_s",
    "wall_s",
    "staleness_mean",
    "dropped_fraction",
    "samples_generated",
    "samples_dropped",
    "quality",
    "final_reward_train",
    "steps_to_target_train",
    "wall_to_target_train_s",
    "kl_to_behaviour_mean",
    "steps_to_target_low",
)
CURVE_FIGURES = ("step", "end", "reward_mean", "kl", "staleness_mean", "eval_reward", "entropy")
CURVE_COLUMNS = (*KEY_COLUMNS, *CURVE_FIGURES)
_FIGURES_OF_A_FAILED_CELL = {
    "final_reward": math.nan,
    "reached": False,
    "steps_to_target": math.nan,
    "wall_to_target_s": math.nan,
    "kl_at_target": math.nan,
    "step_time_s": math.nan,
    "wall_s": math.nan,
    "staleness_mean": math.nan,
    "dropped_fraction": math.nan,
    "samples_generated": math.nan,
    "samples_dropped": math.nan,
    "quality": "",
    "final_reward_train": math.nan,
    "steps_to_target_train": math.nan,
    "wall_to_target_train_s": math.nan,
    "kl_to_behaviour_mean": math.nan,
    "steps_to_target_low": math.nan,
}


@dataclass(frozen=True)
class CellKey:
    """One cell of the grid: the schedule (its label and what it means), the loss, the correction, the seed."""

    cell: str  # the cell's directory name under OUT/cells/
    schedule: str  # the label as given: sync, pipelined-2, streaming-8-inflight
    kind: str  # sync | pipelined | streaming
    staleness_bound: int  # 0 for sync, N for pipelined, η for streaming
    in_flight_updates: bool
    loss: str
    correction: str
    seed: int
    task: str


class Reach(NamedTuple):
    """When a run first reached the target: step count, end of that step (s), KL then, and the step count before
    which it had not (the previous evaluation's; ``steps`` − 1 on the training curve); NaN if never."""

    steps: float
    wall_s: float
    kl: float
    low: float = math.nan

    @property
    def reached(self) -> bool:
        return not math.isnan(self.steps)


NEVER = Reach(math.nan, math.nan, math.nan)


# ── one cell ────────────────────────────────────────────────────────────────────


def steps_to_target(metrics: pd.DataFrame, target: float, window: int = WINDOW) -> Reach:
    """The first step count whose trailing ``window``-step mean ``reward_mean`` is ≥ ``target``; its wall time
    without the evaluation's weight snapshots before it (``eval_snapshot_s``, where the run evaluated)."""
    rows = metrics.sort_values("step")
    rolling = rows["reward_mean"].astype(float).rolling(window, min_periods=window).mean().to_numpy()
    hits = np.flatnonzero(rolling >= target - REACH_TOLERANCE)
    if not hits.size:
        return NEVER
    row = rows.iloc[hits[0]]
    steps = float(row["step"]) + 1
    return Reach(steps, _wall_at(rows, hits[0]), float(row["kl"]), steps - 1)


def eval_mode(evaluation: pd.DataFrame | None) -> str | None:
    """The evaluation mode a run's target is read on (``EVAL_MODES``' first it has), or None without one."""
    if evaluation is None:
        return None
    return next((mode for mode in EVAL_MODES if (evaluation["mode"] == mode).any()), None)


def held_from(rewards: np.ndarray, target: float, hold: int = HOLD) -> int | None:
    """The first position from which ``hold`` readings in a row are ≥ ``target``, or None."""
    above = rewards >= target - REACH_TOLERANCE
    for position in range(len(above) - hold + 1):
        if above[position : position + hold].all():
            return position
    return None


def eval_to_target(
    evaluation: pd.DataFrame, metrics: pd.DataFrame, target: float, mode: str = EVAL_MODE, hold: int = HOLD
) -> Reach:
    """The first evaluated step count from which ``hold`` ``mode`` evaluations in a row are ≥ ``target``: the end of
    that step (0 for the initial weights) without the snapshots before it, ``kl`` then (NaN at step 0), and the
    evaluated step count before it (the interval the crossing lies in)."""
    rows = evaluation[evaluation["mode"] == mode].sort_values("step")
    first = held_from(rows["reward_mean"].astype(float).to_numpy(), target, hold)
    if first is None:
        return NEVER
    steps = int(rows["step"].iloc[first])
    low = float(rows["step"].iloc[first - 1]) if first > 0 else 0.0
    if steps == 0:
        return Reach(0.0, 0.0, math.nan, 0.0)
    ordered = metrics.sort_values("step").reset_index(drop=True)
    position = int(np.flatnonzero(ordered["step"].to_numpy() == steps - 1)[0])
    return Reach(float(steps), _wall_at(ordered, position), float(ordered["kl"].iloc[position]), low)


def _wall_at(rows: pd.DataFrame, position: int) -> float:
    """The end of the step at ``position`` of the sorted metrics, less the evaluation snapshots up to it."""
    end = float(rows["end"].iloc[position])
    if "eval_snapshot_s" not in rows:
        return end
    return end - float(rows["eval_snapshot_s"].astype(float).fillna(0.0).iloc[: position + 1].sum())


def final_reward(metrics: pd.DataFrame, window: int = WINDOW) -> float:
    """The mean ``reward_mean`` of the last ``window`` steps (of all of them when fewer)."""
    return float(metrics.sort_values("step")["reward_mean"].tail(window).mean())


def final_eval_reward(evaluation: pd.DataFrame, mode: str = EVAL_MODE) -> float:
    """The last evaluation's ``mode`` reward."""
    rows = evaluation[evaluation["mode"] == mode].sort_values("step")
    return float(rows["reward_mean"].iloc[-1]) if len(rows) else math.nan


def read_finished(run: Path) -> tuple[RunSummary, pd.DataFrame] | None:
    """The run's summary and metrics if it finished (summary.json says ``complete``), else None."""
    try:
        summary = read_summary(run)
        if summary.status != COMPLETE:
            return None
        return summary, pd.read_parquet(run / "metrics.parquet")
    except (RunRecordError, OSError, ValueError):
        return None


def read_evaluation(run: Path) -> pd.DataFrame | None:
    """The run's eval.parquet, or None where it did not evaluate (or the file cannot be read)."""
    path = run / "eval.parquet"
    try:
        return pd.read_parquet(path) if path.is_file() else None
    except (OSError, ValueError):
        return None


def run_finished(run: Path) -> bool:
    """Whether ``run`` holds a finished run: summary.json complete, metrics.parquet readable."""
    return read_finished(run) is not None


def unfinished_reason(run: Path) -> str:
    """Why ``run`` holds no finished run, in a few words."""
    if not run.is_dir():
        return "not run"
    if not (run / "summary.json").is_file():
        return "the run did not end (no summary.json)"
    try:
        status = read_summary(run).status or "unknown"
    except RunRecordError:
        return "summary.json is not a run summary"
    return f"run {status}" if status != COMPLETE else "metrics.parquet is missing"


def unfinished_status(run: Path) -> RunStatus:
    """A cell without a finished run: ``interrupted`` if its summary says so, else ``failed``."""
    try:
        return INTERRUPTED if read_summary(run).status == INTERRUPTED else FAILED
    except (RunRecordError, OSError):
        return FAILED


def cell_record(key: CellKey, run: Path, target: float, steps: int, reason: str = "") -> dict[str, Any]:
    """One cells.csv row: the cell's keys, ``target`` and ``steps`` asked for, and its figures (NaN if it
    did not finish; ``reason`` says why, or the run directory does)."""
    head = {**asdict(key), "target": target, "steps": steps}
    finished = read_finished(run)
    if finished is None:
        status, why = unfinished_status(run), reason or unfinished_reason(run)
        return {**head, "status": status, "reason": why, **_FIGURES_OF_A_FAILED_CELL}
    summary, metrics = finished
    train = steps_to_target(metrics, target)
    evaluation = read_evaluation(run)
    mode = eval_mode(evaluation)
    reach = eval_to_target(evaluation, metrics, target, mode) if evaluation is not None and mode else train
    final = final_eval_reward(evaluation, mode) if evaluation is not None and mode else final_reward(metrics)
    wall = summary.wall_time_s
    generated, dropped = summary.samples.generated, summary.samples.dropped
    return {
        **head,
        "status": COMPLETE,
        "reason": "",
        "final_reward": final,
        "reached": reach.reached,
        "steps_to_target": reach.steps,
        "wall_to_target_s": reach.wall_s,
        "kl_at_target": reach.kl,
        "step_time_s": wall / max(1, summary.steps),
        "wall_s": wall,
        "staleness_mean": summary.staleness.token_mean,  # token-weighted
        "dropped_fraction": dropped / generated if generated else math.nan,
        "samples_generated": generated,
        "samples_dropped": dropped,
        "quality": mode or "train",
        "final_reward_train": final_reward(metrics),
        "steps_to_target_train": train.steps,
        "wall_to_target_train_s": train.wall_s,
        "kl_to_behaviour_mean": _mean_of(metrics, "kl_to_behaviour"),
        "steps_to_target_low": reach.low,
    }


def _mean_of(metrics: pd.DataFrame, column: str) -> float:
    """The mean of a metrics column over the run's steps; NaN where the run did not log it."""
    return float(metrics[column].astype(float).mean()) if column in metrics else math.nan


def curve_frame(key: CellKey, run: Path) -> pd.DataFrame:
    """The cell's per-step curve (curves.csv rows); empty if the run did not finish."""
    finished = read_finished(run)
    if finished is None:
        return pd.DataFrame(columns=list(CURVE_COLUMNS))
    metrics = finished[1].sort_values("step").reset_index(drop=True)
    evaluation = read_evaluation(run)
    if evaluation is not None:  # the evaluation after k steps sits on the row of step k − 1
        sampled = evaluation[evaluation["mode"] == (eval_mode(evaluation) or EVAL_MODE)]
        by_row = dict(zip(sampled["step"] - 1, sampled["reward_mean"], strict=True))
        metrics["eval_reward"] = metrics["step"].map(by_row)
    frame = pd.DataFrame({name: metrics.get(name, math.nan) for name in CURVE_FIGURES})
    for name, value in reversed(asdict(key).items()):
        frame.insert(0, name, value)
    return frame.reset_index(drop=True)


# ── tables from many cells ──────────────────────────────────────────────────────


def cells_table(records: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """cells.csv as a frame: exactly ``CELL_COLUMNS``, in that order."""
    frame = pd.DataFrame.from_records(list(records), columns=list(CELL_COLUMNS))
    return frame.astype({"reached": bool, "in_flight_updates": bool})


def curves_table(frames: Iterable[pd.DataFrame]) -> pd.DataFrame:
    """curves.csv as a frame: every finished cell's steps."""
    kept = [frame for frame in frames if len(frame)]
    if not kept:
        return pd.DataFrame(columns=list(CURVE_COLUMNS))
    return pd.concat(kept, ignore_index=True)[list(CURVE_COLUMNS)]


def study_tables(
    cells: Sequence[tuple[CellKey, Path]], target: float, steps: int, reasons: Mapping[str, str] | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """cells.csv and curves.csv from the cells' run directories (``reasons``: why a cell failed, by cell)."""
    reasons = reasons or {}
    records = [cell_record(key, run, target, steps, reasons.get(key.cell, "")) for key, run in cells]
    return cells_table(records), curves_table(curve_frame(key, run) for key, run in cells)


def write_csv(frame: pd.DataFrame, out: Path) -> Path:
    """A tidy CSV: one row per record, NaN as an empty cell, booleans as True/False."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with written(out) as temporary:
        frame.to_csv(temporary, index=False)
    return out
