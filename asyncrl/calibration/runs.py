"""Calibration from short real runs of a scenario: what ``calibrate``, ``demo`` and ``validate`` share.

    scenario ─► for each kind: as written, and sync unless it is sync
                  execute it for N learner steps (run.steps = N), seed + 1  ─► <runs>/calibration-<kind>[-r]/
             ─► analysis.fits.fit.profile_from_runs over all of them             ─► CostProfile, FitReport
             ─► scenarios.costs.profile.save_profile                              ─► profile.yaml

The runs are the scenario's own (its model, learner settings, lengths and
schedule, on this machine, with its processes and their messages), so the
profile charges what a run of it pays; micro-benchmarks of the engine and the
learner (``executor.calibrate``, ``--bench``) time the pieces alone and miss
the rest. The sync variant gives the fit learner steps with no engine
computing beside them, the schedule as written steps it overlapped. Another
seed draws other lengths than the runs the profile is then compared with.
``validate`` executes the runs of several repeats between its measured runs
(a machine drifts over minutes) and fits once on all of them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from asyncrl.scenarios.files.limits import MAX_STEPS
from asyncrl.scenarios.spec.loading import ScenarioError, variant
from asyncrl.scenarios.spec.scenario import Scenario

if TYPE_CHECKING:
    from asyncrl.analysis.fits.fit import FitReport
    from asyncrl.scenarios.costs.profile import CostProfile
    from asyncrl.scenarios.rules.backend import Backend

CALIBRATION_STEPS = 8  # learner steps of each calibration run
MIN_CALIBRATION_STEPS = 2  # the learner's line needs several steps
CALIBRATION_SEED_OFFSET = 1  # calibration runs use the scenario's seed + 1: other lengths than the measured runs


@dataclass(frozen=True)
class RunCalibration:
    """A profile fitted to calibration runs, what it charges against what they spent, and the runs."""

    profile: CostProfile
    report: FitReport
    runs: list[Path]

    def lines(self) -> str:
        """The fitted figures and the per-phase table (``analysis.fits.fit_tables.fit_lines``), runs named."""
        from asyncrl.analysis.fits.fit_tables import fit_lines

        return fit_lines(", ".join(run.name for run in self.runs), self.profile, self.report)


def check_calibration_steps(steps: int) -> None:
    """ScenarioError naming the argument (``calibration_steps: ...``) when the runs would be too short to fit."""
    if steps < MIN_CALIBRATION_STEPS:
        raise ScenarioError(
            f"calibration_steps: give at least {MIN_CALIBRATION_STEPS} (the fit needs several learner steps)"
        )
    if steps > MAX_STEPS:
        raise ScenarioError(f"calibration_steps: at most {MAX_STEPS:,} (run.steps' limit), got {steps:,}")


def calibration_kinds(scenario: Scenario) -> list[str]:
    """The schedules calibrated: as written, then sync (a sync scenario is its own sync variant)."""
    written = scenario.schedule.kind
    return [written] if written == "sync" else [written, "sync"]


def as_kind(scenario: Scenario, kind: str, changes: Mapping[str, Any] | None = None) -> Scenario:
    """``scenario`` as schedule ``kind`` (its own kind: unchanged), with ``changes`` to dotted fields
    (``{"run.steps": 8}``): a variant (``scenarios.spec.loading.variant``)."""
    fields = {} if kind == scenario.schedule.kind else {"schedule.kind": kind}
    return variant(scenario, {**fields, **(changes or {})})


def calibration_scenario(scenario: Scenario, kind: str, steps: int) -> Scenario:
    """The short run calibrating ``kind``: ``steps`` learner steps, the next seed."""
    seed = scenario.run.seed + CALIBRATION_SEED_OFFSET
    return as_kind(scenario, kind, {"run.steps": steps, "run.seed": seed})


def execute_calibration_runs(
    scenario: Scenario, directory: Path, steps: int, backend: Backend, repeat: int = 1, repeats: int = 1
) -> list[Path]:
    """Execute one calibration run of each kind into ``directory``; their run directories.

    With several ``repeats`` the directories carry the repeat's number
    (``calibration-sync-2``), so a caller can put each repeat's runs beside
    its own measured runs and fit once on all of them.
    """
    from asyncrl.analysis.summaries.validation import run_name

    runs = []
    for kind in calibration_kinds(scenario):
        runs.append(directory / run_name("calibration", kind, repeat, repeats))
        backend.run(calibration_scenario(scenario, kind, steps), runs[-1])
    return runs


def fit_calibration_runs(scenario: Scenario, runs: list[Path], profile_path: Path) -> RunCalibration:
    """Fit a profile to ``runs`` (``analysis.fits.fit.profile_from_runs``) and write it to ``profile_path``."""
    from asyncrl.analysis.fits.fit import profile_from_runs
    from asyncrl.scenarios.costs.profile import save_profile

    profile, report = profile_from_runs(runs, scenario)
    save_profile(profile, profile_path)
    return RunCalibration(profile, report, runs)


def calibrate_by_running(
    scenario: Scenario,
    profile_path: Path,
    runs_dir: Path,
    steps: int = CALIBRATION_STEPS,
    backend: Backend | None = None,
) -> RunCalibration:
    """Execute the calibration runs into ``runs_dir``, fit them, write ``profile_path``; the fit.

    ``backend`` runs each (default: ``executor()``, on the CPU; pass one to choose the device or to
    follow the steps).
    """
    check_calibration_steps(steps)
    runs = execute_calibration_runs(scenario, runs_dir, steps, backend or executor())
    return fit_calibration_runs(scenario, runs, profile_path)


def executor(device: str = "cpu", on_step: Callable[[int, dict[str, float]], Any] | None = None) -> Backend:
    """The torch executor on ``device`` as a backend, calling ``on_step`` after each learner step."""
    from asyncrl.executor.backend import Executor

    return Executor(device, on_step=on_step)


def runs_directory(profile_path: Path) -> Path:
    """Where ``asyncrl calibrate`` puts the runs a profile is fitted to: ``<stem>-runs/`` beside the profile."""
    return profile_path.with_name(f"{profile_path.stem}-runs")
