"""The main job: calibrate this machine, predict, execute, compare, report.

    for each CPU scenario:  execute    sync                                          ──► measured-sync/
                            calibrate  short runs of it, as written and sync (8 steps,
                                       another seed), and a profile fitted to them   ──► calibration-*/, profile.yaml
                            execute    as written                                    ──► measured-<kind>/
                            simulate   sync + as written with the profile            ──► predicted-*/
                            compare    predicted with measured (figures and speedup)
    report: one page (report/index.html): the table, then each scenario's figures, predicted against measured
            and its measured sync against async; each of those a report of its own (report/<name>/...)

The loop is ``asyncrl.experiments.trial.Trial``'s, as for ``asyncrl validate``. Each scenario
is calibrated on short runs of its own (``asyncrl.calibration.runs``:
its learner settings, lengths and schedule, and the messages between the
processes), between its two measured runs, so that the three see the host in
the same minutes (this machine's speed wanders by up to a third over tens of
seconds; validate alternates its runs for the same reason).
``--calibration bench`` times micro-benchmarks of the executor's engine and
learner instead (``executor.calibrate``).

A measured run during which other processes took a tenth of a core or more
(the host's busy time in ``/proc/stat`` less the demo's own) gets a note under
the table: such load slows a run beyond what its calibration saw.

It needs no GPU and no download. ``--steps`` and ``--scenario`` shrink it (CI
runs it on one scenario for a few steps). ``--device cuda`` runs the same job on
a GPU (``benchmarks/gpu.sh`` does, on ``gpu-small``), and ``--profile`` uses a
profile measured before instead of calibrating.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

from asyncrl.analysis.records.compare import Comparison, compare_speedup, compare_summaries
from asyncrl.analysis.tables import format_table
from asyncrl.scenarios.record.record import RunRecord, RunSummary
from asyncrl.scenarios.spec.loading import load_scenario
from asyncrl.simulator.backend import Simulator
from tqdm import tqdm

from asyncrl.calibration.runs import CALIBRATION_STEPS, check_calibration_steps, executor
from asyncrl.experiments.trial import Trial

DEMO_SCENARIOS = ("cpu-timing", "cpu-pareto", "cpu-light")
BUSY_HOST = 0.1  # cores other processes (or the hypervisor) took during a measured run: worth a note


@dataclass
class ScenarioOutcome:
    name: str
    comparison: Comparison
    predicted: dict[str, RunSummary]  # kind -> summary
    measured: dict[str, RunSummary]
    others: dict[str, float] = field(default_factory=dict)  # kind -> cores others took during its measured run


def run_demo(
    out: Path,
    scenarios: tuple[str, ...] = DEMO_SCENARIOS,
    steps: int | None = None,
    say: Any = print,
    device: str = "cpu",
    profile: Path | None = None,
    calibration: str = "run",
    calibration_steps: int = CALIBRATION_STEPS,
) -> list[ScenarioOutcome]:
    """Calibrate (unless given ``profile``), predict, execute and compare each scenario; print the table.

    ``calibration`` is ``run`` (short runs of each scenario) or ``bench`` (micro-benchmarks).
    Returns each scenario's comparison and summaries; writes the runs and the report under ``out``.
    """
    out.mkdir(parents=True, exist_ok=True)
    calibrate = _Calibration(profile, calibration, calibration_steps, device)
    outcomes = []
    for index, name in enumerate(scenarios):
        stage = partial(_say_stage, say, f"[{index + 1}/{len(scenarios)}] {name}")
        outcomes.append(_one_scenario(name, out / name, steps, device, calibrate, stage))
    say("writing the report")
    report = _report(out, outcomes)
    print(_table(outcomes))
    for note in load_notes(outcomes):
        print(note)
    print(f"report: {report / 'index.html'}   runs and comparisons: {out}/")
    return outcomes


def _say_stage(say: Callable[[str], object], head: str, message: str) -> None:
    say(f"{head}: {message}")


@dataclass(frozen=True)
class _Calibration:
    """Where each scenario's profile comes from: a given file, or micro-benchmarks, or short runs of it."""

    profile: Path | None
    kind: str  # run | bench
    steps: int
    device: str

    def profile_for(self, trial: Trial, say: Callable[[str], object]) -> Path:
        """The profile to simulate the trial's scenario with: the given one, or one calibrated now.

        Each scenario is calibrated: its learner (loss, minibatches, lengths) and schedule differ.
        """
        if self.profile is not None:
            return self.profile
        if self.kind == "bench":
            say(f"calibrating the executor's engine and learner -> {trial.profile_path}")
            return trial.bench([1, 2, 4, 8, 16, 32], repeats=7, device=self.device)
        check_calibration_steps(self.steps)
        say(f"calibrating from short runs ({self.steps} steps each) -> {trial.profile_path}")
        total = self.steps * len(trial.kinds)
        with tqdm(total=total, desc="  calibrating", unit="step", leave=False, disable=None) as bar:
            counted = replace(trial, executor=executor(self.device, on_step=lambda step, row: bar.update()))
            counted.fit(counted.calibration_runs(self.steps))
        return trial.profile_path


def _one_scenario(
    name: str, out: Path, steps: int | None, device: str, calibrate: _Calibration, say: Callable[[str], object]
) -> ScenarioOutcome:
    """Execute sync, calibrate, execute as written; then simulate both with the profile and compare.

    The calibration sits between the two measured runs: a drift of the host's speed over the
    scenario's minutes then weighs on the profile as on the measured runs, on average.
    """
    scenario = load_scenario(name, [f"run.steps={steps}"] if steps else [])
    trial = Trial(scenario, out, executor(device), Simulator())
    written = scenario.schedule.kind
    measured, others, profile = {}, {}, None
    for kind in reversed(trial.kinds):  # sync first: a sync scenario is its own baseline
        if kind == written:  # calibrate between the measured runs: after sync's, before the one as written
            profile = calibrate.profile_for(trial, say)
        say(f"executing {kind} on {device}")
        measured[kind], others[kind] = _measure(trial, kind, device)
    say("simulating sync and as written with the profile")
    assert profile is not None  # the kinds include the one as written
    predicted = {kind: _summary(record) for kind, record in trial.predict(profile).items()}
    speedup = compare_speedup(measured["sync"], measured[written], predicted["sync"], predicted[written])
    comparison = compare_summaries(  # the measured run is the reference: the errors are the prediction's
        measured[written], predicted[written], a_label="measured", b_label="predicted", speedup=speedup
    )
    return ScenarioOutcome(name, comparison, predicted, measured, {k: v for k, v in others.items() if v is not None})


def _measure(trial: Trial, kind: str, device: str) -> tuple[RunSummary, float | None]:
    """Execute the trial's scenario as ``kind``; its summary, and the cores other processes took meanwhile."""
    bar = tqdm(total=trial.scenario.run.steps, desc=f"  executing {kind}", unit="step", leave=False, disable=None)
    with bar, _others_load() as load:
        record = trial.measure(kind, executor=executor(device, on_step=lambda step, row: bar.update()))
    return _summary(record), load[0]


def _summary(record: RunRecord) -> RunSummary:
    assert record.summary is not None  # a run that returned has ended
    return record.summary


@contextmanager
def _others_load() -> Iterator[list[float | None]]:
    """Cores that other processes and the hypervisor (steal) took from this host while the block ran, on
    average: the host's busy time (``/proc/stat``) less this process's and its finished children's.
    Yields a one-item list, filled in at the end; None where ``/proc/stat`` is not there."""
    load: list[float | None] = [None]
    host, own, start = _host_busy_s(), _own_cpu_s(), time.monotonic()
    yield load
    wall = time.monotonic() - start
    if host is not None and wall > 0:
        load[0] = max(0.0, (_host_busy_s() or 0.0) - host - (_own_cpu_s() - own)) / wall


def _host_busy_s() -> float | None:
    """CPU seconds every core of the host has been busy since boot, steal included; None off Linux."""
    try:
        with open("/proc/stat") as stat:
            user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in stat.readline().split()[1:9])
    except (OSError, ValueError):
        return None
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _own_cpu_s() -> float:
    """CPU seconds of this process and its descendants: its own, its ended children's, and each live child's
    with the children it has reaped (the forkserver's: the run's engines fork from it and end before it)."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system + _live_children_cpu_s()


def _live_children_cpu_s() -> float:
    """utime + stime + cutime + cstime of this process's live children, from ``/proc``; 0 off Linux."""
    total, me = 0, os.getpid()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # ended meanwhile
        if int(fields[1]) == me:  # fields[0] is the state, [1] the parent, [11:15] the four times
            total += sum(int(value) for value in fields[11:15])
    return total / os.sysconf("SC_CLK_TCK")


def load_notes(outcomes: list[ScenarioOutcome]) -> list[str]:
    """One line per measured run during which other processes took a noticeable share of the host."""
    return [
        f"note: other processes took {cores:.2f} cores during {outcome.name}'s measured {kind} run: "
        "its figures carry that load"
        for outcome in outcomes
        for kind, cores in outcome.others.items()
        if cores >= BUSY_HOST
    ]


def _report(out: Path, outcomes: list[ScenarioOutcome]) -> Path:
    """OUT/report/index.html: the table, then each scenario's figures; under it, per scenario, predicted
    against measured (as written; measured the reference: <name>/) and the measured sync and async runs one
    above the other (<name>/sync-vs-async/), each a report of its own."""
    from asyncrl.analysis.plots.report import Section, write_overview, write_report

    report = out / "report"
    sections = []
    for outcome in outcomes:
        runs, written = out / outcome.name, list(outcome.measured)[-1]
        speedup_dirs = (  # the measured runs are the reference, as in the table: the errors are the prediction's
            runs / "measured-sync",
            runs / f"measured-{written}",
            runs / "predicted-sync",
            runs / f"predicted-{written}",
        )
        measured, predicted = runs / f"measured-{written}", runs / f"predicted-{written}"
        files = write_report([measured, predicted], report / outcome.name, speedup_dirs=speedup_dirs)
        pair = write_report([runs / "measured-sync", measured], report / outcome.name / "sync-vs-async")
        about = f"{written} as written: measured (executed here) against predicted (simulated with its profile)."
        sections.append(Section(f"{outcome.name}: predicted against measured", about, files))
        about = f"The measured runs of {outcome.name}: sync above, {written} below, on one time axis."
        sections.append(Section(f"{outcome.name}: sync against {written}, both measured", about, pair))
    header, rows = _table_rows(outcomes)
    return write_overview(report, "asyncrl demo: predicted against measured", (header, rows), sections).parent


def _table(outcomes: list[ScenarioOutcome]) -> str:
    return format_table(*_table_rows(outcomes))


def _table_rows(outcomes: list[ScenarioOutcome]) -> tuple[list[str], list[list[str]]]:
    rows = []
    for outcome in outcomes:
        written = list(outcome.measured)[-1]
        p, m = outcome.predicted[written], outcome.measured[written]
        p_speedup = outcome.predicted["sync"].wall_time_s / p.wall_time_s
        m_speedup = outcome.measured["sync"].wall_time_s / m.wall_time_s
        rows.append(
            [
                f"{outcome.name} ({written})",
                f"{p_speedup:.2f}x",
                f"{m_speedup:.2f}x",
                f"{(p_speedup - m_speedup) / m_speedup:+.0%}",
                f"{(p.wall_time_s - m.wall_time_s) / m.wall_time_s:+.0%}",
                f"{p.staleness.mean:.2f} / {m.staleness.mean:.2f}",
            ]
        )
    header = [
        "scenario",
        "predicted speedup",
        "measured speedup",
        "speedup error",
        "wall time error",
        "staleness pred / meas",
    ]
    return header, rows
