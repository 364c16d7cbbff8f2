"""The staleness penalty fitted to a study: executor runs that trained to a target reward at several staleness
bounds, one fit per (loss, correction) (the model and the file: ``scenarios.staleness.penalty``).

    cells.csv (one row per run) ─► read_cells ─► fit_penalty ─► Penalty ─► write_penalty ─► penalty.json
                                                                        └► penalty_lines (the terminal)

The form of each fit (linear, exponential or quadratic in staleness) is the one with the smallest
leave-one-schedule-out error (``scenarios.staleness.penalty_forms``; the ``schedule`` column names the schedules, else
each staleness value is one), and unfinished runs enter the likelihood as censored. Of each run the fit reads
``staleness_mean`` (token-weighted mean staleness of the trained samples, steps),
``dropped_fraction`` (dropped / generated samples) and how far it got: ``steps_to_target`` where it
``reached`` the target, else ``steps`` (the steps it ran, a lower bound on its steps to target: the run is
censored). Runs whose ``status`` is not ``complete`` (``failed``, ``interrupted``) say nothing about learning and are left out. All the runs
must share one ``target`` and one ``task``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ...scenarios.staleness.penalty import Penalty, PenaltyError, PenaltyFit
from ...scenarios.staleness.penalty_forms import select_form
from ..statuses import COMPLETE, STATUSES, read_status
from ..tables import format_table

CELL_COLUMNS = (
    "loss",
    "correction",
    "status",
    "reached",
    "steps",
    "steps_to_target",
    "staleness_mean",
    "dropped_fraction",
    "target",
    "task",
)


def read_cells(path: Path) -> pd.DataFrame:
    """A study table (CSV); PenaltyError (one line) if it cannot be read."""
    try:
        cells = pd.read_csv(path)
    except FileNotFoundError:
        raise PenaltyError(f"file not found: {path}") from None
    except (OSError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        reason = " ".join(str(exc).split())
        raise PenaltyError(f"{path}: cannot read the study table ({reason})") from None
    if not isinstance(cells.index, pd.RangeIndex):  # pandas made the extra fields of a long row an index
        raise PenaltyError(f"{path}: {_long_row(path)} has more fields than the header")
    return cells


def _long_row(path: Path) -> str:
    """Which row of a CSV has more fields than its header, as ``row N`` (1 is the first after the header)."""
    import csv

    with path.open(newline="") as handle:
        rows = csv.reader(handle)
        width = len(next(rows, []))
        return next((f"row {number}" for number, row in enumerate(rows, start=1) if len(row) > width), "a row")


def fit_penalty(cells: pd.DataFrame, source: str = "") -> Penalty:
    """One fit per (loss, correction) of the study table's runs, in the order the pairs first appear.

    PenaltyError (one line, naming the column, or the pair whose runs cannot be fitted) when a column is
    missing or holds a value of the wrong kind, the runs have several targets or tasks, or a pair's runs
    reached the target at fewer than two staleness values.
    """
    missing = [column for column in CELL_COLUMNS if column not in cells.columns]
    if missing:
        raise PenaltyError(f"{source or 'study table'}: missing columns {', '.join(missing)}")
    runs = _usable_runs(cells)
    if runs.empty:
        raise PenaltyError("status: no run is complete; there is nothing to fit")
    target, task = (_the_one(runs, column) for column in ("target", "task"))
    fits = [_fit_pair(str(loss), str(correction), group) for (loss, correction), group in _pairs(runs)]
    return Penalty(target=float(target), task=str(task), source=source, fits=fits)


def _usable_runs(cells: pd.DataFrame) -> pd.DataFrame:
    """The runs that did not fail, with ``reached`` as booleans; PenaltyError for a value out of place."""
    status = cells["status"].map(read_status)  # an older cells.csv says ok for complete
    unknown = status[~status.isin(STATUSES)]
    if not unknown.empty:
        raise PenaltyError(
            f"status: {_row(cells, unknown.index[0])}: {unknown.iloc[0]!r} is not complete, interrupted or failed"
        )
    runs = cells[status == COMPLETE]
    runs = runs.assign(reached=[_boolean(value, runs, index) for index, value in runs["reached"].items()])
    _check_numbers(runs, "staleness_mean", runs.index, low=0.0)
    _check_numbers(runs, "dropped_fraction", runs.index, low=0.0, high=1.0)
    _check_numbers(runs, "steps_to_target", runs.index[runs["reached"]], low=0.0, strict=True)
    _check_numbers(runs, "steps", runs.index[~runs["reached"]], low=0.0, strict=True)
    return runs


def _check_numbers(
    runs: pd.DataFrame, column: str, rows: pd.Index, low: float, high: float = np.inf, strict: bool = False
) -> None:
    values = pd.to_numeric(runs.loc[rows, column], errors="coerce")
    above_low = values > low if strict else values >= low
    bad = values.index[~(above_low & (values <= high))]  # NaN and text fail both
    if len(bad):
        bound = f"> {low:g}" if strict else f"≥ {low:g}"
        within = f"a number {bound}" + (f" and ≤ {high:g}" if high < np.inf else "")
        value = runs.at[bad[0], column]
        shown = repr(value) if isinstance(value, str) else str(value)
        raise PenaltyError(f"{column}: {_row(runs, bad[0])}: {shown} is not {within}")


def _boolean(value: Any, runs: pd.DataFrame, index: Any) -> bool:
    text = str(value).strip().lower()
    if text in ("true", "1", "1.0"):
        return True
    if text in ("false", "0", "0.0"):
        return False
    raise PenaltyError(f"reached: {_row(runs, index)}: {value!r} is not true or false")


def _row(cells: pd.DataFrame, index: Any) -> str:
    """``row 3 (cell c, seed 1)``: a data row by its position, and its cell and seed where the table has them."""
    position = cells.index.get_loc(index)
    named = [f"{column} {cells.at[index, column]}" for column in ("cell", "seed") if column in cells.columns]
    return f"row {position + 1}" + (f" ({', '.join(named)})" if named else "")


def _the_one(runs: pd.DataFrame, column: str) -> Any:
    values = runs[column].drop_duplicates().tolist()
    if len(values) > 1:
        shown = ", ".join(str(value) for value in values)
        raise PenaltyError(f"{column}: the runs have {len(values)} ({shown}); fit a table of one {column}")
    return values[0]


def _pairs(runs: pd.DataFrame) -> Any:
    return runs.groupby([runs["loss"].astype(str), runs["correction"].astype(str)], sort=False)


def _fit_pair(loss: str, correction: str, runs: pd.DataFrame) -> PenaltyFit:
    reached = runs["reached"].to_numpy(dtype=bool)
    steps = np.where(reached, pd.to_numeric(runs["steps_to_target"]), pd.to_numeric(runs["steps"]))
    staleness = pd.to_numeric(runs["staleness_mean"]).to_numpy(dtype=float)
    dropped = pd.to_numeric(runs["dropped_fraction"]).to_numpy(dtype=float)
    schedules = runs["schedule"].astype(str).tolist() if "schedule" in runs else None
    kl = pd.to_numeric(runs["kl_to_behaviour_mean"], errors="coerce") if "kl_to_behaviour_mean" in runs else None
    low = pd.to_numeric(runs["steps_to_target_low"], errors="coerce") if "steps_to_target_low" in runs else None
    try:
        choice = select_form(staleness, dropped, steps, reached, schedules, kl, low)
    except ValueError as exc:
        raise PenaltyError(f"loss {loss}, correction {correction}: {exc}") from None
    fit = choice.fit
    fitted = fit.steps(staleness[reached], dropped[reached])
    residual = float(np.sqrt(np.mean(((fitted - steps[reached]) / steps[reached]) ** 2)))
    return PenaltyFit(
        loss=loss,
        correction=correction,
        steps_at_zero=fit.steps_at_zero,
        per_staleness=fit.per_staleness,
        per_dropped=fit.per_dropped,
        points=int(reached.sum()),
        censored=int((~reached).sum()),
        residual_rel=residual,
        form=fit.form,
        per_staleness_squared=fit.per_staleness_squared,
        form_error=choice.error,
        form_errors=choice.errors,
        reach_limit=reach_limit(staleness, reached, schedules),
    )


def reach_limit(staleness: np.ndarray, reached: np.ndarray, schedules: list[str] | None) -> float | None:
    """The highest mean staleness of a schedule where more than half the seeds reached the target, if a schedule of
    higher staleness had half or fewer reach it (``PenaltyFit.reach_limit``; 0 when none mostly reached); else None."""
    frame = pd.DataFrame({"s": staleness, "hit": reached, "group": schedules or [f"{value:g}" for value in staleness]})
    groups = frame.groupby("group", sort=False).agg(s=("s", "mean"), share=("hit", "mean"))
    mostly = groups[groups["share"] > 0.5]
    last = float(mostly["s"].max()) if len(mostly) else 0.0
    failing_above = groups[(groups["share"] <= 0.5) & (groups["s"] > last)]
    return last if len(failing_above) else None


def failed_runs(cells: pd.DataFrame) -> int:
    """Runs the fit left out because they failed (or were interrupted)."""
    return int((cells["status"].map(read_status) != COMPLETE).sum())


def penalty_lines(penalty: Penalty, failed: int = 0) -> str:
    """The fits as a table, under the forms they are fits of."""
    rows = [
        [
            fit.loss,
            fit.correction,
            fit.form,
            f"{fit.steps_at_zero:.4g}",
            f"{fit.per_staleness:.3g}",
            f"{fit.per_staleness_squared:.3g}" if fit.form == "quadratic" else "-",
            f"{fit.per_dropped:.3g}" if fit.per_dropped is not None else "-",
            fit.points,
            fit.censored,
            f"{fit.residual_rel:.1%}",
            _errors_text(fit),
        ]
        for fit in penalty.fits
    ]
    header = ["loss", "correction", "form", "S0 steps", "a", "c", "b (dropped)", "points", "censored", "rms",
              "held-out error (linear/exp/quad/KL)"]  # fmt: skip
    lines = [
        f"steps to reward {penalty.target:g} on {penalty.task}: linear S0·(1 + a·s + b·d), exponential "
        f"S0·exp(a·s + b·d) or quadratic S0·(1 + a·s + c·s² + b·d), the form with the least leave-one-schedule-out "
        f"error; fitted to {penalty.source or 'the study table'}, unfinished runs censored",
        format_table(header, rows),
    ]
    if any(fit.per_dropped is None for fit in penalty.fits):
        lines.append("b -: the dropped fraction did not vary enough, or apart from the staleness, to be fitted")
    for fit in penalty.fits:
        if fit.reach_limit is not None:
            lines.append(
                f"{fit.pair}: no time to target predicted past staleness {fit.reach_limit:.2f}: above it, most seeds of a "
                "schedule did not reach the target, which a penalty of extra steps cannot express"
            )
    if failed:
        lines.append(f"left out {failed} failed run{'s' if failed != 1 else ''}")
    return "\n".join(lines)


def _errors_text(fit: PenaltyFit) -> str:
    """Each form's held-out error, ``-`` where it was not a candidate or the schedules were too few."""
    errors = [fit.form_errors.get(form) for form in ("linear", "exponential", "quadratic", "kl_linear")]
    if all(error is None for error in errors):
        return "-"
    return "/".join("-" if error is None else f"{error:.1%}" for error in errors)
