"""The exactly-once invariant, checked on a run record: every planned group trained once, none twice, none lost.

    events.parquet ──┬─ train rows ──────────────► each step 0..n−1 once
                     ├─ generate rows, step ≥ 0 ─► each (group, sample) trained by one step, once;
                     │                             each step trains B whole groups (exact schedules: its own)
                     ├─ drop rows ───────────────► a dropped group is never trained
                     └─ lost rows ───────────────► each lost (group, sample) generated again (or still
                                                   running when the run ended): none lost
    metrics.parquet ─► one row per step (executor runs)

A group is one prompt: the executor draws group ``i``'s prompt (and, in timing mode, its lengths) from
``(run.seed, i)``, so "every prompt trained exactly once" is "every group id". Restarts
(``scenarios.spec.failures``) must keep it: a group lost with its engine is generated again under its own id
and trained once. ``exactly_once_violations`` lists what breaks it (empty: it holds); tests and the chaos
runs call it on every record.
"""

from __future__ import annotations

import pandas as pd

from ...scenarios.spec.scenario import Scenario


def exactly_once_violations(scenario: Scenario, events: pd.DataFrame, metrics: pd.DataFrame | None = None) -> list[str]:
    """What in this record breaks exactly-once training (one line each); empty when it holds."""
    steps = sorted(events.loc[events["kind"] == "train", "step"].tolist())
    problems = []
    if steps != list(range(len(steps))):
        problems.append(f"train rows cover steps {_short(steps)}, not 0..{len(steps) - 1} once each")
    if metrics is not None and len(metrics) and sorted(metrics["step"].tolist()) != list(range(len(steps))):
        problems.append(f"metrics rows cover steps {_short(sorted(metrics['step'].tolist()))}")
    problems += _trained_once(scenario, events, len(steps))
    problems += _none_lost(events)
    return problems


def _trained_once(scenario: Scenario, events: pd.DataFrame, steps: int) -> list[str]:
    """Each rollout trained by one step only, each step B whole groups, exact schedules their own batch."""
    trained = events[(events["kind"] == "generate") & (events["step"] >= 0)]
    problems = []
    by_sample = trained.groupby(["group", "sample"])["step"].nunique()
    twice = by_sample[by_sample > 1]
    if len(twice):
        problems.append(f"rollouts trained by more than one step: {_short(list(twice.index))}")
    repeated = trained.duplicated(["group", "sample", "version"])
    if repeated.any():
        problems.append(f"rollouts trained twice: {_short(list(trained.loc[repeated, 'group'].unique()))}")
    size, batch = scenario.workload.samples_per_prompt, scenario.batch_groups
    per_group = trained.drop_duplicates(["group", "sample"]).groupby(["step", "group"]).size()
    partial = per_group[per_group != size]
    if len(partial):
        problems.append(f"groups trained without all {size} samples: {_short(list(partial.index))}")
    groups_per_step = per_group.groupby(level="step").size().reindex(range(steps), fill_value=0)
    wrong = groups_per_step[groups_per_step != batch]
    if len(wrong):
        problems.append(f"steps not of {batch} groups: {_short(list(wrong.items()))}")
    if scenario.schedule.exact_versions:
        stray = [(step, group) for step, group in per_group.index if group // batch != step]
        if stray:
            problems.append(f"(step, group) outside the step's own batch: {_short(stray)}")
    dropped = set(events.loc[events["kind"] == "drop", "group"])
    both = sorted(dropped & set(trained["group"]))
    if both:
        problems.append(f"groups both dropped and trained: {_short(both)}")
    return problems


def _none_lost(events: pd.DataFrame) -> list[str]:
    """Every rollout lost with its engine was generated again, or was running again when the run ended."""
    lost = events[events["kind"] == "lost"]
    if lost.empty:
        return []
    again = events[events["kind"].isin(["generate", "unfinished"])]
    last_loss = lost.groupby(["group", "sample"])["end"].max()
    restarted = again.groupby(["group", "sample"])["start"].max().reindex(last_loss.index)
    never = last_loss.index[~(restarted >= last_loss - 1e-9)]
    return [f"rollouts lost and never generated again: {_short(list(never))}"] if len(never) else []


def _short(items: list) -> str:
    return ", ".join(map(str, items[:8])) + (f" and {len(items) - 8} more" if len(items) > 8 else "")
