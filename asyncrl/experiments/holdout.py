"""The study's staleness penalty, and the check that simulator plus penalty predict a run they never saw.

    cells.csv ──► analysis.fits.penalty.fit_penalty ──► OUT/penalty.json          (every schedule of the grid)

    --holdout LABEL (or all: every schedule in turn), per (loss, correction) of the grid:
        the other schedules' cells ──► fit_penalty ─────────────────────────────► fit
        the other schedules' run records ──► analysis.fits.fit.profile_from_runs ───► profile (calibrated)
        the held-out schedule's scenario + profile ──► simulate ──► step ends, staleness, dropped fraction
                                   fit.steps(staleness, dropped) steps ──► predicted wall time to target
        the held-out cells' measured wall_to_target_s: the mean and its 95% t-interval over the seeds where every
        seed reached the target, else the median counting the others as later (no mean over survivors)
    ──► OUT/holdout.csv, and one line per pair: predicted against measured, and whether the interval holds it

What a user would do before a long run on a cluster, in miniature: calibrate the simulator from short
real runs, fit the penalty from a study on the same task, predict a schedule nobody ran. The held-out
schedule's own runs play no part in the prediction: not in the profile, not in the fit.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from asyncrl.analysis.fits.penalty import fit_penalty, penalty_lines
from asyncrl.analysis.statuses import COMPLETE
from asyncrl.analysis.summaries.intervals import mean_ci
from asyncrl.analysis.summaries.study_summary import censored_median
from asyncrl.scenarios.record.record import read_scenario
from asyncrl.scenarios.spec.loading import ScenarioError, variant
from asyncrl.scenarios.spec.scenario import Scenario
from asyncrl.scenarios.staleness.penalty import Penalty, PenaltyError, write_penalty

PENALTY_FILE = "penalty.json"
HOLDOUT_FILE = "holdout.csv"


def write_study_penalty(cells: pd.DataFrame, out: Path) -> tuple[Penalty | None, str]:
    """Fit the penalty to every ok cell and write OUT/penalty.json; (None, why) where the cells cannot be fitted."""
    try:
        penalty = fit_penalty(cells, source=str(out / "cells.csv"))
    except PenaltyError as exc:
        return None, f"penalty: not fitted ({exc})"
    path = write_penalty(penalty, out / PENALTY_FILE)
    return penalty, f"{penalty_lines(penalty)}\nwrote {path}"


@dataclass(frozen=True)
class HeldOut:
    """One (loss, correction) of the held-out schedule: what was predicted and what the runs measured."""

    schedule: str
    loss: str
    correction: str
    predicted_s: float  # simulated wall time to the target (s)
    predicted_steps: float  # steps to the target, from the fit at the simulated staleness
    predicted_staleness: float  # the simulation's token-mean staleness (steps)
    measured_s: float  # mean over the held-out cells that reached the target (s)
    measured_steps: float
    measured_staleness: float
    measured_low_s: float  # the seeds' spread: least and most wall time to the target among those that reached it
    measured_high_s: float
    reached: int  # held-out cells that reached the target
    seeds: int  # held-out cells that ran
    measured_ci_s: float = math.nan  # half-width of the measured mean's 95% t-interval (every seed reached)
    refused: str = ""  # why the fit predicted no time (past its reach limit)

    @property
    def error(self) -> float:
        """(predicted − measured) / measured; NaN when there is no measured figure or no prediction."""
        if self.refused or not self.measured_s > 0:
            return math.nan
        return self.predicted_s / self.measured_s - 1

    @property
    def judged(self) -> bool:
        """Whether the prediction can be held against an interval: predicted, every seed reached, two or more."""
        return self.every_seed and not self.refused and self.measured_ci_s == self.measured_ci_s

    @property
    def inside(self) -> bool:
        """Whether the measured mean's 95% interval holds the prediction (False where it cannot be judged)."""
        return self.judged and abs(self.predicted_s - self.measured_s) <= self.measured_ci_s

    @property
    def every_seed(self) -> bool:
        """Whether every held-out seed reached the target: ``measured_s`` is then a mean, else a median."""
        return self.reached == self.seeds


#: ``--holdout all``: every schedule of the grid held out in turn.
EVERY_SCHEDULE = "all"


def check_holdout(
    cells: pd.DataFrame, cell_dirs: dict[str, Path], holdout: str, out: Path, say: Callable[[str], None] = print
) -> list[HeldOut]:
    """Predict each (loss, correction) of schedule ``holdout`` (``all``: of every schedule in turn) from the rest of
    the study; write OUT/holdout.csv."""
    ok = cells[cells["status"] == COMPLETE]
    labels = list(dict.fromkeys(ok["schedule"])) if holdout == EVERY_SCHEDULE else [holdout]
    results = []
    for label in labels:
        held = ok[ok["schedule"] == label]
        for (loss, correction), runs in held.groupby(["loss", "correction"], sort=False):
            others = ok[(ok["schedule"] != label) & (ok["loss"] == loss) & (ok["correction"] == correction)]
            try:
                results.append(_predict(runs, others, cell_dirs, out / "holdout" / label / f"{loss}.{correction}"))
            except (PenaltyError, ScenarioError, ValueError) as exc:
                say(f"holdout {label}, {loss}/{correction}: not predicted ({_first_line(exc)})")
    if results:
        pd.DataFrame([_row(result) for result in results]).to_csv(out / HOLDOUT_FILE, index=False)
    return results


def _predict(held: pd.DataFrame, others: pd.DataFrame, cell_dirs: dict[str, Path], work: Path) -> HeldOut:
    from asyncrl.analysis.fits.fit import profile_from_runs
    from asyncrl.scenarios.costs.profile import save_profile
    from asyncrl.simulator.backend import Simulator
    from asyncrl.simulator.target import step_ends_of_events, time_to_target

    first = held.iloc[0]
    fit = fit_penalty(others).fit_for(str(first["loss"]), str(first["correction"]))
    scenario = _scenario(cell_dirs[str(first["cell"])])
    runs = [cell_dirs[str(cell)] for cell in others["cell"]]
    profile, _ = profile_from_runs(runs, scenario)
    profile_path = work / "profile.yaml"
    save_profile(profile, profile_path)
    record = Simulator().run(variant(scenario, {"hardware.profile": str(profile_path.resolve())}))
    assert record.summary is not None  # a simulated run always ends
    predicted = time_to_target(fit, record.summary, step_ends_of_events(record.events))
    reached = held[held["reached"].astype(bool)]
    every = len(reached) == len(held)
    wall, wall_ci = (
        mean_ci(held["wall_to_target_s"]) if every else (censored_median(held["wall_to_target_s"]), math.nan)
    )
    steps = mean_ci(held["steps_to_target"])[0] if every else censored_median(held["steps_to_target"])
    return HeldOut(
        schedule=str(first["schedule"]),
        loss=str(first["loss"]),
        correction=str(first["correction"]),
        predicted_s=predicted.time_s,
        predicted_steps=predicted.steps,
        predicted_staleness=predicted.staleness,
        measured_s=wall,
        measured_steps=steps,
        measured_staleness=float(held["staleness_mean"].mean()),
        measured_low_s=float(reached["wall_to_target_s"].min()) if len(reached) else math.nan,
        measured_high_s=float(reached["wall_to_target_s"].max()) if len(reached) else math.nan,
        reached=len(reached),
        seeds=len(held),
        measured_ci_s=wall_ci,
        refused=predicted.refused or "",
    )


def _scenario(cell_dir: Path) -> Scenario:
    """The scenario a cell ran, as its run record wrote it."""
    return read_scenario(cell_dir)


def _row(result: HeldOut) -> dict[str, Any]:
    return {**result.__dict__, "error": result.error}


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def holdout_lines(results: list[HeldOut], target: float) -> str:
    """Predicted against measured wall time to the target, one line per (loss, correction), with the measured
    mean's 95% interval and whether it holds the prediction; a count of the intervals that do at the end."""
    lines = [f"held out of the fit and the calibration, time to reward {target:g}:"]
    for r in results:
        lines.append(f"  {r.schedule} {r.loss}/{r.correction}: {_predicted(r)}, {_measured(r)}{_verdict(r)}")
    judged = [r for r in results if r.judged]
    if judged:
        inside = sum(r.inside for r in judged)
        errors = sorted(abs(r.error) for r in judged)
        lines.append(
            f"  the measured mean's 95% interval holds the prediction in {inside} of {len(judged)}; "
            f"|error| median {errors[len(errors) // 2]:.0%}, worst {errors[-1]:.0%}"
        )
    return "\n".join(lines)


def _predicted(r: HeldOut) -> str:
    if r.refused:
        return f"not predicted ({r.refused})"
    return f"predicted {r.predicted_s:.2f} s ({r.predicted_steps:.0f} steps at staleness {r.predicted_staleness:.2f})"


def _measured(r: HeldOut) -> str:
    if r.every_seed and r.seeds:
        interval = f" ± {r.measured_ci_s:.2f}" if r.measured_ci_s == r.measured_ci_s else ""
        return (
            f"measured {r.measured_s:.2f}{interval} s ({r.measured_steps:.0f} steps at staleness "
            f"{r.measured_staleness:.2f}, mean of {r.seeds} seeds{_spread(r)})"
        )
    if r.measured_s == r.measured_s:
        return (
            f"measured: {r.reached} of {r.seeds} seeds reached it, median {r.measured_s:.2f} s (the others counted "
            "as later)"
        )
    return f"measured: reached by {r.reached} of {r.seeds} seeds, no median"


def _verdict(r: HeldOut) -> str:
    if r.error != r.error:
        return ""
    if not r.every_seed:
        return f": {r.error:+.0%} against the median"
    if not r.judged:
        return f": {r.error:+.0%}"
    return f": {r.error:+.0%}, {'inside' if r.inside else 'outside'} the interval"


def _spread(result: HeldOut) -> str:
    """The seeds' spread (``, seeds 3.41-4.20 s``): least and most wall time to the target, when two or more reached it."""
    if result.reached < 2:
        return ""
    return f", seeds {result.measured_low_s:.2f}-{result.measured_high_s:.2f} s"
