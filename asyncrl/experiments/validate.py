"""``asyncrl validate``: predictions checked on scenarios nobody tuned.

    draws.draw_scenarios(N, seed) ─► for each scenario (and its sync variant), R times:
        calibrate  run:   execute a short run of each (another seed)        ─► calibration-<kind>[-r]/
        execute    each, K steps                                             ─► measured-<kind>[-r]/
    then
        fit        run:   analysis.fits.fit.profile_from_runs on the R·2 short runs ─► profile.yaml
                   bench: executor.calibrate.calibrate (micro-benchmarks)
        predict    simulate each with the profile, the full K steps          ─► predicted-<kind>/
        compare    analysis.summaries.validation.validation_record                     ─► one row

The loop is ``asyncrl.experiments.trial.Trial``'s, the one ``asyncrl demo`` runs too.

Calibrations and executions alternate, so that a machine whose speed drifts
over minutes (a shared host; seen here: one scenario's six calibration runs
all 10-20% slower than its six executions minutes later) weighs on both alike.
    ─► validate.csv, validate.png, table.txt under --out; the table printed

The calibration runs and their fit are ``asyncrl.calibration.runs``'s, as for
``asyncrl calibrate`` and ``asyncrl demo``.

It reports and asserts nothing: the exit status is 0, or 1 if a run failed
(that scenario's row says why). A sync scenario is its own sync variant, so it
is calibrated, predicted and executed once per repeat, and has no speedup.

On two cores a scenario with two engines runs three busy processes (two
engines and the learner): they are oversubscribed and time-share the cores.
Each drawn scenario carries this machine's core count (``hardware.host_cores``),
so calibration fits full-speed costs and the simulator shares the cores again
(``scenarios.rules.cores``); the command says which scenarios are oversubscribed.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from asyncrl.analysis.summaries.validation import (
    failed_record,
    validation_lines,
    validation_record,
    write_validation_csv,
)
from asyncrl.scenarios.files.writing import write_text
from asyncrl.scenarios.spec.loading import ScenarioError, dump_scenario
from asyncrl.simulator.backend import Simulator
from tqdm import tqdm

from asyncrl.calibration.runs import CALIBRATION_STEPS, check_calibration_steps, executor
from asyncrl.experiments.draws import Draw, draw_scenarios
from asyncrl.experiments.trial import Trial

BENCH_REPEATS = 5


@dataclass(frozen=True)
class ValidateOptions:
    count: int = 10
    seed: int = 0
    steps: int = 30
    calibration: str = "run"  # run | bench
    calibration_steps: int = CALIBRATION_STEPS
    repeat: int = 1
    out: Path = Path("runs/validate")
    quiet: bool = False


@dataclass(frozen=True)
class ValidateResult:
    records: list[dict[str, Any]]
    table: str
    files: list[Path]

    @property
    def failed(self) -> bool:
        return any(record["status"] != "complete" for record in self.records)


def run_validate(options: ValidateOptions, say: Callable[[str], None] = print) -> ValidateResult:
    """Draw, calibrate, predict, execute and compare; write and return the results."""
    check_options(options)
    draws = draw_scenarios(options.count, options.seed, options.steps, host_cores=os.cpu_count() or 1)
    note = oversubscription_note(draws)
    if note:
        say(note)
    options.out.mkdir(parents=True, exist_ok=True)
    records = []
    with tqdm(total=len(draws), desc="validate", unit="scenario", disable=options.quiet or None) as bar:
        for draw in draws:
            records.append(
                _one_scenario(draw, options, lambda stage, d=draw: bar.set_postfix_str(f"{d.name}: {stage}"))
            )
            bar.update()
    table = validation_lines(records, options.repeat)
    files = _write(options, records, table)
    return ValidateResult(records, table, files)


def oversubscription_note(draws: list[Draw]) -> str | None:
    """A line saying which scenarios run more busy processes than this machine has cores, if any do."""
    cores = os.cpu_count() or 1
    crowded = [draw.name for draw in draws if draw.scenario.cluster.engines + 1 > cores]
    if not crowded:
        return None
    return (
        f"note: {len(crowded)} of {len(draws)} scenarios run 2 engines and a learner, 3 busy processes on {cores} "
        f"cores ({', '.join(crowded)}): oversubscribed; the simulator shares the cores among them "
        "(hardware.host_cores, processor sharing)"
    )


def _one_scenario(draw: Draw, options: ValidateOptions, stage: Any) -> dict[str, Any]:
    directory = options.out / draw.name
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "scenario.yaml").write_text(dump_scenario(draw.scenario))
    trial = Trial(draw.scenario, directory, executor(), Simulator())
    try:
        calibration_runs = _calibrate_and_execute(trial, options, stage)
        stage("simulating")
        trial.predict(_profile(trial, calibration_runs, options))
    except (RuntimeError, ValueError) as exc:  # a failed run (ScenarioError is a ValueError): say so, go on
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return failed_record(draw.name, draw.label, draw.settings, reason)
    written = draw.scenario.schedule.kind
    return validation_record(draw.name, draw.label, draw.settings, directory, written, options.repeat)


def _calibrate_and_execute(trial: Trial, options: ValidateOptions, stage: Any) -> list[Path]:
    """Each repeat's calibration runs (``--calibration run``), then its measured runs; the calibration runs.

    Calibrations beside executions: a machine whose speed drifts over minutes weighs on both alike.
    """
    runs, repeats = [], options.repeat
    for repeat in range(1, repeats + 1):
        if options.calibration == "run":
            stage(f"calibrating ({repeat}/{repeats})")
            runs += trial.calibration_runs(options.calibration_steps, repeat, repeats)
        for kind in trial.kinds:
            stage(f"executing {kind} ({repeat}/{repeats})")
            trial.measure(kind, repeat, repeats)
    return runs


def _profile(trial: Trial, calibration_runs: list[Path], options: ValidateOptions) -> Path:
    """Write the scenario's profile (fitted to the calibration runs, or from micro-benchmarks); its path."""
    if options.calibration == "bench":
        return trial.bench(_batch_sizes(trial.scenario.engine_concurrency), BENCH_REPEATS, "cpu")
    trial.fit(calibration_runs)
    return trial.profile_path


def _batch_sizes(concurrency: int) -> list[int]:
    """Powers of two below the engine's concurrency, and the concurrency itself."""
    sizes = [1]
    while sizes[-1] * 2 < concurrency:
        sizes.append(sizes[-1] * 2)
    return sorted({*sizes, concurrency})


def _write(options: ValidateOptions, records: list[dict[str, Any]], table: str) -> list[Path]:
    files = [write_validation_csv(options.out / "validate.csv", records)]
    write_text(options.out / "table.txt", table + "\n")
    files.append(options.out / "table.txt")
    plot = _plot(options, records)
    return [*files, plot] if plot else files


def _plot(options: ValidateOptions, records: list[dict[str, Any]]) -> Path | None:
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None or not any(r["status"] == "complete" for r in records):
        return None
    import pandas as pd
    from asyncrl.analysis.plots.plots import validation

    title = (
        f"asyncrl validate: prediction error on {_count(len(records), 'drawn scenario')} (seed {options.seed}), "
        f"{options.steps} steps, calibration: {options.calibration}, {_count(options.repeat, 'repeat')}"
    )
    return validation(pd.DataFrame.from_records(records), title, options.out / "validate.png")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def check_options(options: ValidateOptions) -> None:
    """ScenarioError naming the argument (``calibration: ...``) for options no scenario could run with."""
    if options.calibration not in ("run", "bench"):
        raise ScenarioError(f"calibration: {options.calibration!r}; use run or bench")
    if options.calibration == "run":
        check_calibration_steps(options.calibration_steps)
