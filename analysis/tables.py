"""Plain-text tables for the terminal: one run's summary, or many runs side by side.

Everything the ``asyncrl`` command prints about a run, a calibration or a sweep
is formatted here from run records (summaries, scenarios, profiles); nothing
here runs a simulation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ..scenarios.costs.memory import memory_problem
from ..scenarios.record.record import Simulated

if TYPE_CHECKING:
    import pandas as pd

    from ..scenarios.record.record import Breakdown, RunSummary
    from ..scenarios.record.run_summary import Restarts
    from ..scenarios.spec.scenario import Scenario
    from ..scenarios.staleness.penalty import Penalty, PenaltyFit, TimeToTarget

FIGURE_HEADER = ["samples/s", "step s", "stale mean", "stale max", "gen util", "train util", "dropped"]
SAMPLES_PER_UNIT = 1000  # device-hours and cost are per 1,000 trained samples
NOT_PREDICTED = "time to target: not predicted (give --penalty FILE from `asyncrl study`)"


class Labelled(Protocol):
    """A labelled scenario, such as one variant of a sweep."""

    @property
    def label(self) -> str: ...

    @property
    def scenario(self) -> Scenario: ...


def format_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Columns padded to their widest cell; the first column left-aligned, the rest right-aligned."""
    cells = [[str(cell) for cell in header], *[[format_cell(cell) for cell in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = []
    for index, row in enumerate(cells):
        parts = [row[0].ljust(widths[0]), *(cell.rjust(width) for cell, width in zip(row[1:], widths[1:], strict=True))]
        lines.append("  ".join(parts).rstrip())
        if index == 0:
            lines.append("  ".join("-" * width for width in widths))
    return "\n".join(lines)


def format_cell(value: Any) -> str:
    """A table cell: 3 significant digits below 100, whole numbers above, thousands separated."""
    if isinstance(value, float):
        return f"{value:,.3g}" if abs(value) < 100 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def summary_lines(summary: RunSummary) -> str:
    """One run's summary as a short labelled block."""
    step, stale, util, samples = summary.step_time_s, summary.staleness, summary.utilization, summary.samples
    histogram = " ".join(f"{k}:{v:,}" for k, v in stale.histogram.items()) or "-"
    rows = [
        ("wall time", f"{summary.wall_time_s:,.1f} s for {summary.steps} steps"),
        ("step time", f"mean {step.mean:,.2f} s   p50 {step.p50:,.2f} s   p95 {step.p95:,.2f} s"),
        (
            "throughput",
            f"{summary.throughput.samples_per_s:,.2f} samples/s   {summary.throughput.tokens_per_s:,.0f} tokens/s",
        ),
        ("staleness", f"mean {stale.mean:.2f}   p95 {stale.p95:g}   max {stale.max}   (steps)"),
        ("  histogram", histogram),
        (
            "utilization",
            f"generation {util.generation:.0%}   training {util.training:.0%}   "
            f"engine slots {util.generation_slots:.0%}",
        ),
        ("weight sync", f"{summary.weight_sync_s:,.1f} s per engine"),
        (
            "samples",
            f"generated {samples.generated:,}   trained {samples.trained:,}   queued {samples.queued:,}   "
            f"in flight {samples.in_flight:,}   dropped {samples.dropped:,}",
        ),
    ]
    if summary.restarts is not None:
        rows.append(("restarts", restarts_text(summary.restarts)))
    if summary.breakdown is not None and summary.device_hours is not None:
        hours = summary.device_hours
        rows.append(("device time", breakdown_text(summary.breakdown)))
        rows.append(
            ("cost", f"{hours.per_step:,.3g} device-hours per step   {hours.per_1k_samples:,.3g} per 1,000 samples")
        )
    width = max(len(label) for label, _ in rows)
    return "\n".join(f"{label.ljust(width)}  {text}" for label, text in rows)


def restarts_text(restarts: Restarts) -> str:
    """Workers restarted, their time down and the rollouts generated again."""
    learner = f"   learner {restarts.learner}" if restarts.learner else ""
    return (
        f"engines {restarts.engines}{learner}   down {restarts.down_s:,.1f} s   "
        f"regenerated {restarts.regenerated_samples:,} samples"
    )


BREAKDOWN_WORDS = {"tensor_parallel": "all-reduce", "weight_sync": "sync", "phase_switch": "switch"}


def breakdown_text(breakdown: Breakdown) -> str:
    """Each role's device time by activity, as shares of that role's device time; activities at 0 left out."""
    parts = []
    for role in ("generation", "training"):
        seconds = getattr(breakdown, role).model_dump()
        whole = sum(seconds.values()) or 1.0
        shares = [f"{BREAKDOWN_WORDS.get(name, name)} {value / whole:.0%}" for name, value in seconds.items() if value]
        parts.append(f"{role} {', '.join(shares) or '-'}")
    return "   ".join(parts)


def figure_cells(summary: RunSummary) -> list[Any]:
    """One run's figures under ``FIGURE_HEADER`` (device-hours and cost come after, from ``cost_cells``)."""
    return [
        summary.throughput.samples_per_s,
        summary.step_time_s.mean,
        summary.staleness.mean,
        summary.staleness.max,
        f"{summary.utilization.generation:.0%}",
        f"{summary.utilization.training:.0%}",
        summary.samples.dropped,
    ]


def device_hours_per_1k(scenario: Scenario, summary: RunSummary) -> float:
    """Device-hours per 1,000 trained samples: every device of the plan (colocated ones counted once)
    held for the run's wall time; NaN when nothing was trained."""
    trained = summary.samples.trained
    if not trained:
        return math.nan
    return scenario.cluster.total_devices * summary.wall_time_s / 3600 / trained * SAMPLES_PER_UNIT


def cost_header(price_per_device_hour: float | None) -> list[str]:
    """Headers of ``cost_cells``: device-hours per 1,000 samples, and their cost when priced."""
    return ["dev-h/1k", *(["USD/1k"] if price_per_device_hour is not None else [])]


def cost_cells(scenario: Scenario, summary: RunSummary, price_per_device_hour: float | None) -> list[Any]:
    """Device-hours per 1,000 trained samples, and (when priced) what they cost in USD."""
    hours = device_hours_per_1k(scenario, summary)
    if price_per_device_hour is None:
        return [hours]
    return [hours, f"{hours * price_per_device_hour:,.2f}"]


def devices_label(scenario: Scenario) -> str:
    """The devices a scenario runs on, e.g. ``8+8 h100`` or ``16 h100 (colocated)``."""
    cluster = scenario.cluster
    if cluster.colocated:
        return f"{cluster.generation_devices} {scenario.hardware.device_name} (colocated)"
    return f"{cluster.generation_devices}+{cluster.training_devices} {scenario.hardware.device_name}"


def simulation_lines(
    scenario: Scenario, summary: RunSummary, about_target: str | None = None, interval: Sequence[str] = ()
) -> str:
    """A simulated run: what ran where, its summary, its figures' intervals (``interval``'s lines), then its time
    to target (``about_target`` says to what and under which penalty; without it, that it is not predicted)."""
    lines = [
        f"{scenario.name}: {scenario.schedule.kind} on {devices_label(scenario)} (simulated)",
        summary_lines(summary),
        *interval,
    ]
    if about_target is None:
        return "\n".join([*lines, NOT_PREDICTED])
    reached = summary.time_to_target
    assert reached is not None, "a time to target is printed for a summary that has one"
    past = ""
    if reached.extrapolated:
        simulated = summary.steps_run
        past = f"; steps past the {simulated:,} simulated take the steady {reached.steady_step_s:,.2f} s each"
    return "\n".join([*lines, f"time to target  {target_text(reached)}{past}", f"  target        {about_target}"])


def about_target(penalty: Penalty, fit: PenaltyFit, path: object) -> str:
    """What a time to target is a time to: the reward, the task, and the penalty fit used (from file ``path``)."""
    return f"reward {penalty.target:g} on {penalty.task}, steps from the {fit.pair} fit in {path}"


def target_text(reached: TimeToTarget) -> str:
    """``1,234.5 s (125 steps at staleness 1.33, 12% dropped)``: a run's ``time_to_target``."""
    if reached.refused:
        return f"not predicted ({reached.refused})"
    return (
        f"{reached.time_s:,.1f} s ({reached.steps:,.1f} steps at staleness {reached.staleness:.2f}, "
        f"{reached.dropped_fraction:.0%} dropped)"
    )


def execution_header(scenario: Scenario, device: str, runtime: str) -> str:
    """What an executed run is about to start."""
    where = "Ray actor(s)" if runtime == "ray" else "engine process(es)"
    return f"{scenario.name}: {scenario.schedule.kind}, {scenario.cluster.engines} {where} and a learner on {device}"


def execution_lines(
    summary: RunSummary, metrics: pd.DataFrame, synthetic: bool, evaluation: pd.DataFrame | None = None
) -> str:
    """An executed run: its summary, how the reward moved from the first steps to the last, and the held-out
    evaluation's first and last readings where the run evaluated (``run.eval_every``)."""
    first, last = metrics["reward_mean"].head(3).mean(), metrics["reward_mean"].tail(3).mean()
    kind = " (synthetic: timing mode)" if synthetic else ""
    lines = [
        summary_lines(summary),
        f"reward       {first:.3f} over the first 3 steps -> {last:.3f} over the last 3{kind}",
    ]
    if evaluation is not None and len(evaluation):
        lines.append(evaluation_line(evaluation))
    return "\n".join(lines)


def evaluation_line(evaluation: pd.DataFrame) -> str:
    """``evaluation greedy 0.10 -> 0.29, sampled 0.02 -> 0.16 (steps 0 -> 40, 32 held-out prompts, 0.2 s after
    the run)``: eval.parquet's first and last readings per mode, and the time its answers took."""
    steps = evaluation["step"]
    modes = [
        f"{mode} {rows['reward_mean'].iloc[0]:.3f} -> {rows['reward_mean'].iloc[-1]:.3f}"
        for mode, rows in evaluation.sort_values("step").groupby("mode", sort=True)
    ]
    prompts = int(evaluation["prompts"].iloc[0])
    seconds = float(evaluation["seconds"].sum())
    return (
        f"evaluation   {', '.join(modes)} (steps {steps.min()} -> {steps.max()}, {prompts} held-out prompts, "
        f"{seconds:.1f} s after the run's clock)"
    )


def with_equal_quality(
    results: Sequence[Simulated[Labelled]],
) -> list[Simulated[Labelled]]:
    """The results with, in each ``time_to_target``, ``as_written_vs_this``: this run's predicted time to target
    over the scenario as written's (the first result): how much sooner the scenario reaches the same reward.
    Results without a time to target (no penalty, or not simulated) are left as they are."""
    written = results[0].summary
    if written is None or written.time_to_target is None:
        return list(results)
    soonest = math.nan if written.time_to_target.refused else written.time_to_target.time_s
    return [Simulated(variant, _with_ratio(summary, soonest) if summary else None) for variant, summary in results]


def _with_ratio(summary: RunSummary, written_time_s: float) -> RunSummary:
    reached = summary.time_to_target
    if reached is None:
        return summary
    ratio = (
        reached.time_s / written_time_s if written_time_s > 0 and not reached.refused else math.nan
    )  # NaN: no prediction
    return summary.model_copy(update={"time_to_target": reached.model_copy(update={"as_written_vs_this": ratio})})


def speedup_lines(
    scenario: Scenario,
    results: Sequence[Simulated[Labelled]],
    price_per_device_hour: float | None = None,
    about_target: str | None = None,
    interval: str | None = None,
) -> str:
    """The scenario as written (the first result) against each baseline: figures, how much faster it is,
    and device-hours (and cost, when priced) per 1,000 trained samples; ``interval``, the speedups' intervals.

    With ``about_target`` (the results then come from ``with_equal_quality``), a column says how much
    sooner the scenario as written reaches the target reward, and a block below the table each run's time
    to it; without, one line says it is not predicted. A baseline that does not fit in device memory
    (summary None) has dashes for figures and a line below the table giving its reason.
    """
    as_written = results[0].summary
    assert as_written is not None, "the CLI refuses a scenario that does not fit"
    written = as_written.throughput.samples_per_s
    quality = about_target is not None
    rows = [
        [
            variant.label,
            devices_label(variant.scenario),
            *_speedup_cells(variant, summary, written, price_per_device_hour, quality),
        ]
        for variant, summary in results
    ]
    equal = ["at equal quality"] if quality else []
    header = ["schedule", "devices", *FIGURE_HEADER, "as written vs this", *equal, *cost_header(price_per_device_hour)]
    reasons = [
        f"{variant.label}: not simulated, {memory_problem(variant.scenario)}"
        for variant, summary in results
        if summary is None
    ]
    return "\n".join(
        [
            f"{scenario.name}: {scenario.run.steps} steps of {scenario.batch_samples} samples, simulated",
            format_table(header, rows),
            *reasons,
            baselines_line(scenario),
            *([interval] if interval else []),
            *(_target_block(results, about_target) if about_target is not None else [NOT_PREDICTED]),
        ]
    )


def baselines_line(scenario: Scenario) -> str:
    """Which sync baselines ``speedup`` used, and where the best sync plan is found instead."""
    tp = scenario.cluster.devices_per_engine
    return (
        f"sync baselines keep the scenario's engines (tp{tp}); asyncrl size and asyncrl plan take the best sync plan "
        "over engine sizes and splits instead"
    )


def _target_block(results: Sequence[Simulated[Labelled]], about_target: str) -> list[str]:
    """``time to target (...)`` and one line per simulated run: its time to target."""
    simulated = [
        (variant.label, summary.time_to_target)
        for variant, summary in results
        if summary is not None and summary.time_to_target is not None
    ]
    width = max(len(label) for label, _ in simulated)
    return [
        f"time to target ({about_target}):",
        *(f"  {label.ljust(width)}  {target_text(reached)}" for label, reached in simulated),
    ]


def _speedup_cells(
    variant: Labelled,
    summary: RunSummary | None,
    written: float,
    price_per_device_hour: float | None,
    quality: bool = False,
) -> list[Any]:
    if summary is None:
        return ["-"] * (len(FIGURE_HEADER) + 1 + quality + len(cost_header(price_per_device_hour)))
    reached = summary.time_to_target
    ratio = reached.as_written_vs_this if reached is not None and reached.as_written_vs_this is not None else math.nan
    equal = [f"{ratio:.2f}x" if ratio == ratio else "-"] if quality else []
    return [
        *figure_cells(summary),
        f"{written / summary.throughput.samples_per_s:.2f}x",
        *equal,
        *cost_cells(variant.scenario, summary, price_per_device_hour),
    ]
