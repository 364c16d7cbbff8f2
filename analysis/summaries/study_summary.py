"""The ``asyncrl study`` tables over seeds: per schedule, loss and correction, and the losses' robustness to staleness.

    cells.csv ─► summary_table    ─► summary.csv, summary_lines       (one row per schedule × loss × correction)
              └► robustness_table ─► robustness.csv, robustness_lines (one row per loss × correction)

**Over seeds** (``summary_table``): each figure is a mean over the seeds whose run finished
(``seeds``), with the half-width of its 95% confidence interval from the t-distribution
(``mean ± t(0.975, n − 1) · s / √n``; NaN with one seed: no interval). **No average over survivors**: the
figures at the target (steps, wall time, KL) are means only when every finished seed reached it; where some did
not, the mean of the others would flatter the schedule (a schedule that makes seeds fail would look faster), so
they are NaN and the censored medians stand: ``steps_to_target_median`` and ``wall_to_target_median_s`` take every
finished seed, one that never reached the target counting as later than all, defined when more than half
reached it. ``reached`` says how many did, ``reached_fraction`` what share of the seeds run (a failed one counting
as not reached).

``speedup`` is the speedup at equal quality, paired by seed: sync's wall time to the target (same loss and
correction) over this schedule's, as the geometric mean of the per-seed ratios, over the seeds where both runs
finished (``speedup_pairs``), and only when every one of those pairs reached the target on both sides (an unreached
seed has no time to put in a ratio, and leaving it out is survivorship); NaN otherwise, and ``speedup_reached``
says how many pairs did. ``speedup_low`` and ``speedup_high`` are its 95% paired t-interval on the log ratios
(``analysis.summaries.intervals.paired_log_ratio_ci``; none below ``MIN_PAIRS`` = 4 pairs: the module says why,
and ``benchmarks/interval_coverage.py`` measures its coverage).

**Robustness** (``robustness_table``): per loss and correction, the ratio of the mean steps to
target at the grid's highest staleness bound (every schedule with that bound pooled, e.g.
``streaming-8`` and ``streaming-8-inflight``) to the mean at bound 0 (``sync``), only when every cell of both
reached the target (no average over survivors: NaN otherwise). 1.0 means stale data cost no extra steps; 1.5
means it took half as many steps again. Its 95% interval comes from the delta method for a ratio of two
independent means, ``R · t · √(s_a²/(n_a·ā²) + s_b²/(n_b·b̄²))`` with ``t`` at ``min(n_a, n_b) − 1`` degrees of
freedom (a conservative choice). Losses rank by the fraction of stale cells that reached the target (most
first), then by the ratio (smallest first): a loss that often never gets there at high staleness is the least
robust whatever its ratio. Its ``steps_to_target_sync`` and ``steps_to_target_stale`` are the two groups'
censored medians (defined where more than half reached the target), shown beside the ratio.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
import pandas as pd

from ..statuses import COMPLETE
from ..tables import format_table
from .intervals import MIN_PAIRS, mean_ci, missing, paired_log_ratio_ci, ratio_ci
from .study import KEY_COLUMNS, WINDOW

GROUP_COLUMNS = ("schedule", "loss", "correction")
SUMMARY_COLUMNS = (
    *KEY_COLUMNS[KEY_COLUMNS.index("schedule") : KEY_COLUMNS.index("seed")],  # what names a group of seeds
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
    "reached_fraction",
    "speedup_low",
    "speedup_high",
    "speedup_pairs",
    "speedup_reached",
    "steps_to_target_median",
    "wall_to_target_median_s",
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


def summary_table(cells: pd.DataFrame, curves: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per (schedule, loss, correction), in grid order: means over seeds with 95% half-widths,
    the speedup at equal quality over sync, and (from ``curves``) the KL over the last steps."""
    final_kl = _final_kl(curves) if curves is not None else {}
    rows = []
    for (schedule, loss, correction), group in cells.groupby(list(GROUP_COLUMNS), sort=False):
        ok = group[group["status"] == COMPLETE]
        first = group.iloc[0]
        reward, reward_ci = mean_ci(ok["final_reward"])
        every = ok if bool(ok["reached"].all()) else ok.iloc[0:0]  # no mean over the seeds that reached alone
        steps, steps_ci = mean_ci(every["steps_to_target"])
        wall, wall_ci = mean_ci(every["wall_to_target_s"])
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
                "kl_at_target": _mean(every["kl_at_target"]),
                "kl_final": _mean(final_kl.get(cell, math.nan) for cell in ok["cell"]),
                "staleness_mean": _mean(ok["staleness_mean"]),
                "dropped_fraction": _mean(ok["dropped_fraction"]),
                "speedup": math.nan,
                "samples_generated": _mean(ok["samples_generated"]),
                "samples_dropped": _mean(ok["samples_dropped"]),
                "reached_fraction": float(ok["reached"].sum()) / len(group),
                "steps_to_target_median": censored_median(ok["steps_to_target"]),
                "wall_to_target_median_s": censored_median(ok["wall_to_target_s"]),
                **paired_speedup(cells, group),
            }
        )
    return pd.DataFrame.from_records(rows, columns=list(SUMMARY_COLUMNS))


def censored_median(values: pd.Series) -> float:
    """The median over every finished seed, one that never reached the target counting as later than all:
    defined only when more than half of them reached it (NaN otherwise, and with no seed)."""
    times = pd.to_numeric(values, errors="coerce").fillna(math.inf).to_numpy(dtype=float)
    if not len(times):
        return math.nan
    middle = float(np.median(times))
    return middle if math.isfinite(middle) else math.nan


def paired_speedup(cells: pd.DataFrame, group: pd.DataFrame) -> dict[str, float]:
    """``speedup``, ``speedup_low``, ``speedup_high``, ``speedup_pairs``, ``speedup_reached`` of one schedule's cells
    (``group``) over sync's cells of the same loss and correction, paired by seed (module docstring)."""
    first = group.iloc[0]
    same = (cells["loss"] == first["loss"]) & (cells["correction"] == first["correction"])
    sync = cells[same & (cells["kind"] == "sync") & (cells["status"] == COMPLETE)].drop_duplicates("seed")
    own = group[group["status"] == COMPLETE].drop_duplicates("seed")
    pairs = own.merge(sync, on="seed", suffixes=("", "_sync"))
    both = pairs["reached"].astype(bool) & pairs["reached_sync"].astype(bool)
    figures = {"speedup_pairs": len(pairs), "speedup_reached": int(both.sum())}
    if not len(pairs) or not bool(both.all()):
        return {"speedup": math.nan, "speedup_low": math.nan, "speedup_high": math.nan, **figures}
    ratio, low, high, _ = paired_log_ratio_ci(pairs["wall_to_target_s_sync"], pairs["wall_to_target_s"])
    return {"speedup": ratio, "speedup_low": low, "speedup_high": high, **figures}


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
    ok = cells[cells["status"] == COMPLETE]
    if not len(ok) or not (ok["staleness_bound"] == 0).any() or ok["staleness_bound"].max() == 0:
        return pd.DataFrame(columns=list(ROBUSTNESS_COLUMNS))
    top = int(ok["staleness_bound"].max())
    rows = []
    for (loss, correction), group in ok.groupby(["loss", "correction"], sort=False):
        base = group[group["staleness_bound"] == 0]
        stale = group[group["staleness_bound"] == top]
        every = bool(base["reached"].all() and stale["reached"].all())  # no ratio of the survivors' means
        ratio, ratio_ci_ = (
            ratio_ci(stale["steps_to_target"], base["steps_to_target"]) if every else (math.nan, math.nan)
        )
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
                "steps_to_target_sync": censored_median(base["steps_to_target"]),
                "steps_to_target_stale": censored_median(stale["steps_to_target"]),
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


# ── the terminal ────────────────────────────────────────────────────────────────


def with_ci(mean: float, half: float, digits: str = ".3g") -> str:
    """``mean ± half`` (``mean`` alone without an interval; ``-`` without a mean)."""
    if missing(mean):
        return "-"
    if missing(half):
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
            f"{row.reached}/{row.seeds + row.failed}" + (f" ({row.failed} failed)" if row.failed else ""),
            _at_target(row.steps_to_target, row.steps_to_target_ci, row.steps_to_target_median, ".0f"),
            _at_target(row.wall_to_target_s, row.wall_to_target_s_ci, row.wall_to_target_median_s, ".3g"),
            with_ci(row.kl_at_target, math.nan),
            with_ci(row.kl_final, math.nan),
            with_ci(row.staleness_mean, math.nan),
            "-" if missing(row.dropped_fraction) else f"{row.dropped_fraction:.1%}",
            _speedup_text(row),
            with_ci(row.samples_generated, math.nan, ",.0f"),
        ]
        for row in summary.itertuples()
    ]
    intro = (
        f"time to quality: reward ≥ {target:g} (held-out evaluation where the runs evaluated, else the mean of "
        f"{WINDOW} training steps), {steps} learner steps per cell; at the target: mean ± 95% CI (t) where every seed "
        "reached it, else the median counting the others as later ('median'); speedup = sync's wall to target over "
        f"this one's, geometric mean over paired seeds where all reached it [95% t on log ratios, from {MIN_PAIRS} pairs]"
    )
    return "\n".join([intro, format_table(header, rows)])


def _at_target(mean: float, half: float, median: float, digits: str) -> str:
    """A figure at the target: the mean with its interval where every seed reached it, else the censored median."""
    if not missing(mean):
        return with_ci(mean, half, digits)
    return "-" if missing(median) else f"median {format(median, digits)}"


def _speedup_text(row: object) -> str:
    speedup, low, high = row.speedup, row.speedup_low, row.speedup_high  # type: ignore[attr-defined]
    pairs, reached = row.speedup_pairs, row.speedup_reached  # type: ignore[attr-defined]
    if missing(speedup):
        return f"- ({reached}/{pairs} pairs reached)" if pairs and reached < pairs else "-"
    if missing(low):
        return f"{speedup:.2f}x ({pairs} pairs)"
    return f"{speedup:.2f}x [{low:.2f}, {high:.2f}]"


def robustness_lines(robustness: pd.DataFrame) -> str:
    """The loss ranking as the terminal shows it, or why there is none."""
    if not len(robustness):
        return "robustness: no ranking (the grid needs sync, staleness 0, and a schedule with a higher bound)"
    bound = int(robustness["staleness_bound"].iloc[0])
    header = ["rank", "loss", "correction", "reached stale", "median steps sync", f"median at bound {bound}", "ratio"]
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
