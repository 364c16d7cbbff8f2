"""The grid of ``asyncrl study``: schedule labels, the list flags, and the defaults.

    --schedules sync,pipelined-2,streaming-8-inflight ─► parse_schedules ─► ScheduleLabel ─► --set overrides
    --losses, --corrections, --seeds                  ─► parse_losses, split_list, parse_seeds

A label is ``sync``, ``pipelined-N`` (N ≥ 1: ``schedule.off_policy_steps``) or ``streaming-η``,
``streaming-η-inflight`` (η ≥ 0: ``schedule.max_staleness``, ``schedule.in_flight_updates`` false
or true): the schedule's own label (``scenarios.spec.schedules``), the one every table prints. Bad items
are a ScenarioError naming the argument (``schedules: ...``; the command line shows its flag), one
line, exit 2. Losses are checked against the scenario's own ``algorithm.loss`` choices; corrections
are not checked here, the scenario judges them (``algorithm.correction``), except that where the
scenario has no such field yet, ``clip`` (the executor's PPO-style clip, its only correction then)
adds no override.

**Defaults**: every schedule of the question (sync; pipelined 1, 2, 4; streaming 1, 2, 4, 8 with
and without in-flight updates), the four losses, ``clip``, seeds 0, 1, 2, and a target reward of
0.5 (on the copy task the reward climbs from about 0.06 to above 0.9 in 300 steps): 144 cells
of a few tens of seconds each, so narrow the lists for a first look. This module is imported
when the command line is built; it imports nothing heavy.
"""

from __future__ import annotations

from typing import get_args

from asyncrl.scenarios.spec.loading import ScenarioError, did_you_mean
from asyncrl.scenarios.spec.scenario import AlgorithmSpec
from asyncrl.scenarios.spec.schedules import LABEL_FORMS, LabelError, ScheduleLabel, UnknownLabel, parse_label

DEFAULT_SCHEDULES = (
    "sync,pipelined-1,pipelined-2,pipelined-4,streaming-1,streaming-2,streaming-4,streaming-8,"
    "streaming-1-inflight,streaming-2-inflight,streaming-4-inflight,streaming-8-inflight"
)
DEFAULT_LOSSES = ",".join(get_args(AlgorithmSpec.model_fields["loss"].annotation))
DEFAULT_CORRECTIONS = "clip"
DEFAULT_SEEDS = "0,1,2"
DEFAULT_TARGET = 0.5
#: The correction every executor applies where the scenario has no ``algorithm.correction`` yet.
BUILT_IN_CORRECTION = "clip"


def parse_schedule(text: str) -> ScheduleLabel:
    """``sync``, ``pipelined-N``, ``streaming-η`` or ``streaming-η-inflight`` (``scenarios.spec.schedules.parse_label``);
    ScenarioError naming ``schedules``."""
    try:
        return parse_label(text)
    except UnknownLabel as exc:
        hint = did_you_mean(text, ["sync", "pipelined-1", "streaming-1", "streaming-1-inflight"])
        raise ScenarioError(f"schedules: {exc}{hint} (labels: {LABEL_FORMS})") from None
    except LabelError as exc:
        raise ScenarioError(f"schedules: {exc}") from None


def parse_schedules(text: str) -> list[ScheduleLabel]:
    """A comma-separated list of schedule labels, each once."""
    labels = [parse_schedule(part) for part in split_list(text, "schedules")]
    names = [label.label for label in labels]
    repeated = next((name for name in names if names.count(name) > 1), None)
    if repeated:
        raise ScenarioError(f"schedules: {repeated} is given twice")
    return labels


def parse_losses(text: str) -> list[str]:
    """Loss names the scenario knows (``algorithm.loss``), each once."""
    known = get_args(AlgorithmSpec.model_fields["loss"].annotation)
    losses = split_list(text, "losses")
    for loss in losses:
        if loss not in known:
            raise ScenarioError(f"losses: unknown loss {loss!r}{did_you_mean(loss, known)} (one of {', '.join(known)})")
    return losses


def parse_seeds(text: str) -> list[int]:
    """Seeds as integers ≥ 0, each once."""
    seeds = []
    for part in split_list(text, "seeds"):
        if not part.isdigit():
            raise ScenarioError(f"seeds: {part!r} is not an integer ≥ 0 (e.g. --seeds 0,1,2)")
        seeds.append(int(part))
    return seeds


def split_list(text: str, name: str) -> list[str]:
    """``a,b,c`` as its items, stripped; ScenarioError naming the argument ``name`` for an empty item or a repeat."""
    items = [part.strip() for part in text.split(",")]
    if not all(items):
        raise ScenarioError(f"{name}: {text!r} has an empty item; give a comma-separated list such as a,b")
    repeated = next((item for item in items if items.count(item) > 1), None)
    if repeated:
        raise ScenarioError(f"{name}: {repeated} is given twice")
    return items


def correction_overrides(correction: str) -> list[str]:
    """``algorithm.correction=<c>``; nothing for ``clip`` where the scenario has no such field (its built-in)."""
    if correction == BUILT_IN_CORRECTION and "correction" not in AlgorithmSpec.model_fields:
        return []
    return [f"algorithm.correction={correction}"]
