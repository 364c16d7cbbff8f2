"""The study's staleness penalty, and the check that simulator plus penalty predict a run they never saw.

    cells.csv ──► analysis.fits.penalty.fit_penalty ──► OUT/penalty.json          (every schedule of the grid)

    --holdout LABEL, per (loss, correction) of the grid:
        the other schedules' cells ──► fit_penalty ─────────────────────────────► fit
        the other schedules' run records ──► analysis.fits.fit.profile_from_runs ───► profile (calibrated)
        the held-out schedule's scenario + profile ──► simulate ──► step ends, staleness, dropped fraction
                                   fit.steps(staleness, dropped) steps ──► predicted wall time to target
        the held-out cells' measured wall_to_target_s (mean, least and most over the seeds that reached the target)
    ──► OUT/holdout.csv, and one line per pair: predicted against measured

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

    @property
    def error(self) -> float:
        """(predicted − measured) / measured; NaN when no held-out cell reached the target."""
        return self.predicted_s / self.measured_s - 1 if self.measured_s > 0 else math.nan


def check_holdout(
    cells: pd.DataFrame, cell_dirs: dict[str, Path], holdout: str, out: Path, say: Callable[[str], None] = print
) -> list[HeldOut]:
    """Predict each (loss, correction) of schedule ``holdout`` from the rest of the study; write OUT/holdout.csv."""
    ok = cells[cells["status"] == COMPLETE]
    held = ok[ok["schedule"] == holdout]
    results = []
    for (loss, correction), runs in held.groupby(["loss", "correction"], sort=False):
        others = ok[(ok["schedule"] != holdout) & (ok["loss"] == loss) & (ok["correction"] == correction)]
        try:
            results.append(_predict(runs, others, cell_dirs, out / "holdout" / f"{loss}.{correction}"))
        except (PenaltyError, ScenarioError, ValueError) as exc:
            say(f"holdout {holdout}, {loss}/{correction}: not predicted ({_first_line(exc)})")
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
    return HeldOut(
        schedule=str(first["schedule"]),
        loss=str(first["loss"]),
        correction=str(first["correction"]),
        predicted_s=predicted.time_s,
        predicted_steps=predicted.steps,
        predicted_staleness=predicted.staleness,
        measured_s=float(reached["wall_to_target_s"].mean()) if len(reached) else math.nan,
        measured_steps=float(reached["steps_to_target"].mean()) if len(reached) else math.nan,
        measured_staleness=float(held["staleness_mean"].mean()),
        measured_low_s=float(reached["wall_to_target_s"].min()) if len(reached) else math.nan,
        measured_high_s=float(reached["wall_to_target_s"].max()) if len(reached) else math.nan,
        reached=len(reached),
        seeds=len(held),
    )


def _scenario(cell_dir: Path) -> Scenario:
    """The scenario a cell ran, as its run record wrote it."""
    return read_scenario(cell_dir)


def _row(result: HeldOut) -> dict[str, Any]:
    return {**result.__dict__, "error": result.error}


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def holdout_lines(results: list[HeldOut], target: float) -> str:
    """Predicted against measured wall time to the target, one line per (loss, correction)."""
    lines = [f"held out of the fit and the calibration, time to reward {target:g}:"]
    for r in results:
        measured = (
            f"measured {r.measured_s:.2f} s ({r.measured_steps:.0f} steps at staleness {r.measured_staleness:.2f}, "
            f"mean of {r.reached} of {r.seeds} seeds{_spread(r)})"
            if r.reached
            else f"measured: not reached by any of {r.seeds} seeds"
        )
        error = f": {r.error:+.0%}" if r.error == r.error else ""
        lines.append(
            f"  {r.schedule} {r.loss}/{r.correction}: predicted {r.predicted_s:.2f} s ({r.predicted_steps:.0f} steps "
            f"at staleness {r.predicted_staleness:.2f}), {measured}{error}"
        )
    return "\n".join(lines)


def _spread(result: HeldOut) -> str:
    """The seeds' spread (``, seeds 3.41-4.20 s``): least and most wall time to the target, when two or more reached it."""
    if result.reached < 2:
        return ""
    return f", seeds {result.measured_low_s:.2f}-{result.measured_high_s:.2f} s"
