"""The ``asyncrl study`` tables: how soon each schedule and loss reaches a reward, per cell and over seeds.

    OUT/cells/<cell>/summary.json, metrics.parquet ─► cell_record ─► cells.csv  (one row per cell)
                                                   └─► curve_frame ─► curves.csv (one row per learner step)
    cells.csv ─► summary_table    ─► summary.csv, summary_lines    (one row per schedule × loss × correction)
              └─► robustness_table ─► robustness.csv, robustness_lines (one row per loss × correction)

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

**Over seeds** (``summary_table``): each figure is a mean over the seeds whose run finished
(``seeds``), with the half-width of its 95% confidence interval from the t-distribution
(``mean ± t(0.975, n − 1) · s / √n``; NaN with one seed: no interval). Figures at the target are
means over the seeds that reached it (``reached`` says how many), so read them with that count.
``speedup`` is the speedup at equal quality: the mean ``wall_to_target_s`` of ``sync`` with the
same loss and correction divided by this schedule's (NaN where either never reached the target).

**Robustness** (``robustness_table``): per loss and correction, the ratio of the mean steps to
target at the grid's highest staleness bound (every schedule with that bound pooled, e.g.
``streaming-8`` and ``streaming-8-inflight``) to the mean at bound 0 (``sync``). 1.0 means stale
data cost no extra steps; 1.5 means it took half as many steps again. Its 95% interval comes from
the delta method for a ratio of two independent means, ``R · t · √(s_a²/(n_a·ā²) + s_b²/(n_b·b̄²))``
with ``t`` at ``min(n_a, n_b) − 1`` degrees of freedom (a conservative choice). Losses rank by the
fraction of stale cells that reached the target (most first), then by the ratio (smallest first):
a loss that often never gets there at high staleness is the least robust whatever its ratio.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
from asyncrl.analysis.tables import format_table
from asyncrl.scenarios.record import RunRecordError, RunSummary, read_summary

WINDOW = 10
#: Tolerance of "reaches the target": a rolling mean of floats may miss an exact target by rounding.
REACH_TOLERANCE = 1e-9
OK, FAILED = "ok", "failed"

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
)
CURVE_FIGURES = ("step", "end", "reward_mean", "kl", "staleness_mean")
CURVE_COLUMNS = (*KEY_COLUMNS, *CURVE_FIGURES)
GROUP_COLUMNS = ("schedule", "loss", "correction")
SUMMARY_COLUMNS = (
    "schedule",
    "kind",
    "staleness_bound",
    "in_flight_updates",
    "loss",
    "correction",
    "seeds",
    "failed",
    "final_reward",
    "final_reward_ci",
    "reached",
    "steps_to_target",
    "steps_to_target_ci",
    "wall_to_target_s",
    "wall_to_target_s_ci",
    "kl_at_target",
    "kl_final",
    "staleness_mean",
    "dropped_fraction",
    "speedup",
    "samples_generated",
    "samples_dropped",
)
ROBUSTNESS_COLUMNS = (
    "rank",
    "loss",
    "correction",
    "staleness_bound",
    "stale_schedules",
    "reached_stale",
    "cells_stale",
    "reached_sync",
    "cells_sync",
    "steps_to_target_sync",
    "steps_to_target_stale",
    "ratio",
    "ratio_ci",
)
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
    """When a run first reached the target: step count, end of that step (s), KL then; NaN if never."""

    steps: float
    wall_s: float
    kl: float

    @property
    def reached(self) -> bool:
        return not math.isnan(self.steps)


# ── one cell ────────────────────────────────────────────────────────────────────


def steps_to_target(metrics: pd.DataFrame, target: float, window: int = WINDOW) -> Reach:
    """The first step count whose trailing ``window``-step mean ``reward_mean`` is ≥ ``target``."""
    rows = metrics.sort_values("step")
    rolling = rows["reward_mean"].astype(float).rolling(window, min_periods=window).mean().to_numpy()
    hits = np.flatnonzero(rolling >= target - REACH_TOLERANCE)
    if not hits.size:
        return Reach(math.nan, math.nan, math.nan)
    row = rows.iloc[hits[0]]
    return Reach(float(row["step"]) + 1, float(row["end"]), float(row["kl"]))


def final_reward(metrics: pd.DataFrame, window: int = WINDOW) -> float:
    """The mean ``reward_mean`` of the last ``window`` steps (of all of them when fewer)."""
    return float(metrics.sort_values("step")["reward_mean"].tail(window).mean())


def read_finished(run: Path) -> tuple[RunSummary, pd.DataFrame] | None:
    """The run's summary and metrics if it finished (summary.json says ``complete``), else None."""
    try:
        summary = read_summary(run)
        if summary.status != "complete":
            return None
        return summary, pd.read_parquet(run / "metrics.parquet")
    except (RunRecordError, OSError, ValueError):
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
    return f"run {status}" if status != "complete" else "metrics.parquet is missing"


def cell_record(key: CellKey, run: Path, target: float, steps: int, reason: str = "") -> dict[str, Any]:
    """One cells.csv row: the cell's keys, ``target`` and ``steps`` asked for, and its figures (NaN if it
    did not finish; ``reason`` says why, or the run directory does)."""
    head = {**asdict(key), "target": target, "steps": steps}
    finished = read_finished(run)
    if finished is None:
        return {**head, "status": FAILED, "reason": reason or unfinished_reason(run), **_FIGURES_OF_A_FAILED_CELL}
    summary, metrics = finished
    reach = steps_to_target(metrics, target)
    wall = summary.wall_time_s
    generated, dropped = summary.samples.generated, summary.samples.dropped
    return {
        **head,
        "status": OK,
        "reason": "",
        "final_reward": final_reward(metrics),
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
    }


def curve_frame(key: CellKey, run: Path) -> pd.DataFrame:
    """The cell's per-step curve (curves.csv rows); empty if the run did not finish."""
    finished = read_finished(run)
    if finished is None:
        return pd.DataFrame(columns=list(CURVE_COLUMNS))
    metrics = finished[1].sort_values("step")
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


def t_quantile(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` degrees of freedom (a 95% two-sided interval)."""
    if df < 1:
        return math.nan
    if df < len(_T975):
        return _T975[df]
    z = 1.959963984540054  # Cornish-Fisher expansion around the normal quantile: within 1e-5 from df = 10
    terms = (
        (z**3 + z) / 4,
        (5 * z**5 + 16 * z**3 + 3 * z) / 96,
        (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384,
        (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160,
    )
    return z + sum(term / df**power for power, term in enumerate(terms, start=1))


_T975 = (math.nan, 12.706205, 4.302653, 3.182446, 2.776445, 2.570582, 2.446912, 2.364624, 2.306004, 2.262157)


def mean_ci(values: Iterable[float]) -> tuple[float, float]:
    """The mean of the values that are numbers and the half-width of its 95% t-interval (NaN for one value)."""
    array = np.asarray([value for value in values if not _missing(value)], dtype=float)
    if not array.size:
        return math.nan, math.nan
    mean = float(array.mean())
    if array.size < 2:
        return mean, math.nan
    return mean, t_quantile(array.size - 1) * float(array.std(ddof=1)) / math.sqrt(array.size)


def ratio_ci(numerator: Iterable[float], denominator: Iterable[float]) -> tuple[float, float]:
    """Mean of ``numerator`` over mean of ``denominator`` (independent samples), and its 95% half-width
    by the delta method with min(n_a, n_b) − 1 degrees of freedom (NaN with fewer than two of either)."""
    a = np.asarray([value for value in numerator if not _missing(value)], dtype=float)
    b = np.asarray([value for value in denominator if not _missing(value)], dtype=float)
    if not a.size or not b.size or b.mean() == 0:
        return math.nan, math.nan
    ratio = float(a.mean() / b.mean())
    if a.size < 2 or b.size < 2:
        return ratio, math.nan
    relative = a.var(ddof=1) / (a.size * a.mean() ** 2) + b.var(ddof=1) / (b.size * b.mean() ** 2)
    return ratio, t_quantile(min(a.size, b.size) - 1) * abs(ratio) * math.sqrt(relative)


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def summary_table(cells: pd.DataFrame, curves: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per (schedule, loss, correction), in grid order: means over seeds with 95% half-widths,
    the speedup at equal quality over sync, and (from ``curves``) the KL over the last steps."""
    final_kl = _final_kl(curves) if curves is not None else {}
    rows = []
    for (schedule, loss, correction), group in cells.groupby(list(GROUP_COLUMNS), sort=False):
        ok = group[group["status"] == OK]
        first = group.iloc[0]
        reward, reward_ci = mean_ci(ok["final_reward"])
        steps, steps_ci = mean_ci(ok["steps_to_target"])
        wall, wall_ci = mean_ci(ok["wall_to_target_s"])
        rows.append(
            {
                "schedule": schedule,
                "kind": first["kind"],
                "staleness_bound": int(first["staleness_bound"]),
                "in_flight_updates": bool(first["in_flight_updates"]),
                "loss": loss,
                "correction": correction,
                "seeds": len(ok),
                "failed": len(group) - len(ok),
                "final_reward": reward,
                "final_reward_ci": reward_ci,
                "reached": int(ok["reached"].sum()),
                "steps_to_target": steps,
                "steps_to_target_ci": steps_ci,
                "wall_to_target_s": wall,
                "wall_to_target_s_ci": wall_ci,
                "kl_at_target": _mean(ok["kl_at_target"]),
                "kl_final": _mean(final_kl.get(cell, math.nan) for cell in ok["cell"]),
                "staleness_mean": _mean(ok["staleness_mean"]),
                "dropped_fraction": _mean(ok["dropped_fraction"]),
                "speedup": math.nan,
                "samples_generated": _mean(ok["samples_generated"]),
                "samples_dropped": _mean(ok["samples_dropped"]),
            }
        )
    table = pd.DataFrame.from_records(rows, columns=list(SUMMARY_COLUMNS))
    table["speedup"] = speedups(table)
    return table


def speedups(summary: pd.DataFrame) -> pd.Series:
    """Per row, sync's mean wall time to target (same loss and correction) over the row's: the speedup
    at equal quality. NaN where sync is not in the grid or either never reached the target."""
    sync = summary[summary["kind"] == "sync"].set_index(["loss", "correction"])["wall_to_target_s"]
    sync = sync[~sync.index.duplicated()]
    baseline = [
        sync.get((loss, correction), math.nan)
        for loss, correction in zip(summary["loss"], summary["correction"], strict=True)
    ]
    return pd.Series(baseline, index=summary.index, dtype=float) / summary["wall_to_target_s"].astype(float)


def _final_kl(curves: pd.DataFrame, window: int = WINDOW) -> dict[str, float]:
    """Each cell's mean ``kl`` over its last ``window`` steps, by cell."""
    if not len(curves):
        return {}
    last = curves.sort_values("step").groupby("cell", sort=False).tail(window)
    return last.groupby("cell")["kl"].mean().to_dict()


def _mean(values: Iterable[float]) -> float:
    return mean_ci(values)[0]


def robustness_table(cells: pd.DataFrame) -> pd.DataFrame:
    """Per (loss, correction): steps to target at the grid's highest staleness bound over those at bound 0,
    with a 95% half-width, ranked most robust first. Empty if the grid has no bound 0 or nothing above it."""
    ok = cells[cells["status"] == OK]
    if not len(ok) or not (ok["staleness_bound"] == 0).any() or ok["staleness_bound"].max() == 0:
        return pd.DataFrame(columns=list(ROBUSTNESS_COLUMNS))
    top = int(ok["staleness_bound"].max())
    rows = []
    for (loss, correction), group in ok.groupby(["loss", "correction"], sort=False):
        base = group[group["staleness_bound"] == 0]
        stale = group[group["staleness_bound"] == top]
        ratio, ratio_ci_ = ratio_ci(stale["steps_to_target"], base["steps_to_target"])
        rows.append(
            {
                "rank": 0,
                "loss": loss,
                "correction": correction,
                "staleness_bound": top,
                "stale_schedules": " ".join(dict.fromkeys(stale["schedule"])),
                "reached_stale": int(stale["reached"].sum()),
                "cells_stale": len(stale),
                "reached_sync": int(base["reached"].sum()),
                "cells_sync": len(base),
                "steps_to_target_sync": _mean(base["steps_to_target"]),
                "steps_to_target_stale": _mean(stale["steps_to_target"]),
                "ratio": ratio,
                "ratio_ci": ratio_ci_,
            }
        )
    table = pd.DataFrame.from_records(rows, columns=list(ROBUSTNESS_COLUMNS))
    share = table["reached_stale"] / table["cells_stale"].where(table["cells_stale"] > 0)
    order = pd.DataFrame({"share": -share.fillna(0), "ratio": table["ratio"].fillna(math.inf)})
    table = table.loc[order.sort_values(["share", "ratio"], kind="stable").index].reset_index(drop=True)
    table["rank"] = range(1, len(table) + 1)
    return table


# ── files and the terminal ──────────────────────────────────────────────────────


def write_csv(frame: pd.DataFrame, out: Path) -> Path:
    """A tidy CSV: one row per record, NaN as an empty cell, booleans as True/False."""
    out.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out, index=False)
    return out


def with_ci(mean: float, half: float, digits: str = ".3g") -> str:
    """``mean ± half`` (``mean`` alone without an interval; ``-`` without a mean)."""
    if _missing(mean):
        return "-"
    if _missing(half):
        return format(mean, digits)
    return f"{format(mean, digits)} ± {format(half, digits)}"


def summary_lines(summary: pd.DataFrame, target: float, steps: int) -> str:
    """The per-schedule table as the terminal shows it."""
    header = [
        "schedule",
        "loss",
        "correction",
        "final reward",
        "reached",
        f"steps to {target:g}",
        "wall to target (s)",
        "KL at target",
        "KL at end",
        "staleness",
        "dropped",
        "speedup",
        "generated",
    ]
    rows = [
        [
            row.schedule,
            row.loss,
            row.correction,
            with_ci(row.final_reward, row.final_reward_ci),
            f"{row.reached}/{row.seeds}" + (f" ({row.failed} failed)" if row.failed else ""),
            with_ci(row.steps_to_target, row.steps_to_target_ci, ".0f"),
            with_ci(row.wall_to_target_s, row.wall_to_target_s_ci),
            with_ci(row.kl_at_target, math.nan),
            with_ci(row.kl_final, math.nan),
            with_ci(row.staleness_mean, math.nan),
            "-" if _missing(row.dropped_fraction) else f"{row.dropped_fraction:.1%}",
            "-" if _missing(row.speedup) else f"{row.speedup:.2f}x",
            with_ci(row.samples_generated, math.nan, ",.0f"),
        ]
        for row in summary.itertuples()
    ]
    intro = (
        f"time to quality: reward (mean of {WINDOW} steps) ≥ {target:g}, {steps} learner steps per cell; "
        "means over seeds ± 95% CI (t); speedup = sync's wall to target / this one's"
    )
    return "\n".join([intro, format_table(header, rows)])


def robustness_lines(robustness: pd.DataFrame) -> str:
    """The loss ranking as the terminal shows it, or why there is none."""
    if not len(robustness):
        return "robustness: no ranking (the grid needs sync, staleness 0, and a schedule with a higher bound)"
    bound = int(robustness["staleness_bound"].iloc[0])
    header = ["rank", "loss", "correction", "reached stale", "steps sync", f"steps at bound {bound}", "ratio"]
    rows = [
        [
            row.rank,
            row.loss,
            row.correction,
            f"{row.reached_stale}/{row.cells_stale}",
            with_ci(row.steps_to_target_sync, math.nan, ".0f"),
            with_ci(row.steps_to_target_stale, math.nan, ".0f"),
            with_ci(row.ratio, row.ratio_ci, ".2f"),
        ]
        for row in robustness.itertuples()
    ]
    intro = (
        f"robustness to stale data: steps to target at staleness bound {bound} "
        f"({robustness['stale_schedules'].iloc[0]}) over sync's, most robust first"
    )
    return "\n".join([intro, format_table(header, rows)])
