"""One scenario's prediction check, the loop ``asyncrl demo`` and ``asyncrl validate`` share.

    Trial(scenario, directory, executor, simulator)
      calibration_runs(steps)  executor: short runs of each kind, another seed  ─► calibration-<kind>[-r]/
      measure(kind)            executor: the kind, all its steps                ─► measured-<kind>[-r]/
      fit(runs) | bench(...)   a profile for the simulator                      ─► profile.yaml (fit.txt)
      predict(profile)         simulator: every kind with the profile           ─► predicted-<kind>/

The kinds are the scenario's schedule as written and sync, its baseline on the
same devices (a sync scenario is its own). Both backends are given
(``scenarios.rules.backend.Backend``), so the loop runs on any device and never
knows how a backend runs. Where the measured runs fall between the
calibrations is the caller's choice: demo calibrates between its two measured
runs, validate alternates repeats of both (a machine's speed drifts over minutes).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from asyncrl.analysis.summaries.validation import run_name
from asyncrl.scenarios.record.record import RunRecord
from asyncrl.scenarios.rules.backend import Backend
from asyncrl.scenarios.spec.scenario import Scenario

from asyncrl.calibration.runs import (
    RunCalibration,
    as_kind,
    calibration_kinds,
    execute_calibration_runs,
    fit_calibration_runs,
)

PROFILE_FILE = "profile.yaml"


@dataclass(frozen=True)
class Trial:
    """One scenario checked in one directory: its calibration, measured and predicted runs."""

    scenario: Scenario
    directory: Path
    executor: Backend
    simulator: Backend

    @property
    def kinds(self) -> list[str]:
        """The schedules run: as written, then sync (once, for a sync scenario)."""
        return calibration_kinds(self.scenario)

    @property
    def profile_path(self) -> Path:
        return self.directory / PROFILE_FILE

    def calibration_runs(self, steps: int, repeat: int = 1, repeats: int = 1) -> list[Path]:
        """Execute one short calibration run of each kind (``asyncrl.calibration.runs``); their directories."""
        return execute_calibration_runs(self.scenario, self.directory, steps, self.executor, repeat, repeats)

    def measure(self, kind: str, repeat: int = 1, repeats: int = 1, executor: Backend | None = None) -> RunRecord:
        """Execute the scenario as ``kind`` (with ``executor`` instead of the trial's, if given)."""
        out = self.directory / run_name("measured", kind, repeat, repeats)
        return (executor or self.executor).run(as_kind(self.scenario, kind), out)

    def fit(self, runs: list[Path]) -> RunCalibration:
        """Fit the profile to calibration ``runs``; writes profile.yaml and fit.txt (what it charges, per phase)."""
        calibration = fit_calibration_runs(self.scenario, runs, self.profile_path)
        (self.directory / "fit.txt").write_text(calibration.lines() + "\n")
        return calibration

    def bench(self, batch_sizes: list[int], repeats: int, device: str) -> Path:
        """Write the profile micro-benchmarks of the executor's engine and learner measure (``--calibration
        bench``); its path."""
        from asyncrl.executor.calibrate import calibrate
        from asyncrl.scenarios.costs.profile import save_profile

        save_profile(calibrate(self.scenario, batch_sizes, repeats, device=device).profile, self.profile_path)
        return self.profile_path

    def predict(self, profile: Path) -> dict[str, RunRecord]:
        """Simulate every kind with ``profile``, into ``predicted-<kind>/``; the records by kind."""
        with_profile = {"hardware.profile": str(profile.resolve())}
        return {
            kind: self.simulator.run(as_kind(self.scenario, kind, with_profile), self.directory / f"predicted-{kind}")
            for kind in self.kinds
        }
