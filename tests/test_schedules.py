"""The schedule classes: one label each, parsed back to the same schedule, and the rules each kind owns."""

from __future__ import annotations

import pytest
from asyncrl.scenarios.spec.schedules import (
    SCHEDULES,
    LabelError,
    ScheduleLabel,
    UnknownLabel,
    parse_label,
    schedule_label,
)


@pytest.mark.parametrize(
    ("section", "label"),
    [
        ({"kind": "sync"}, "sync"),
        ({"kind": "pipelined", "off_policy_steps": 2}, "pipelined-2"),
        ({"kind": "streaming", "max_staleness": 0}, "streaming-0"),
        ({"kind": "streaming", "max_staleness": 8, "in_flight_updates": True}, "streaming-8-inflight"),
    ],
)
def test_a_schedule_label_parses_back_to_the_schedule(section: dict[str, object], label: str) -> None:
    schedule = SCHEDULES[str(section["kind"])].model_validate(section)
    assert schedule.label == label
    parsed = parse_label(label)
    assert parsed.label == label and parsed.bound == schedule.staleness_bound
    assert SCHEDULES[parsed.kind].model_validate(parsed.fields) == SCHEDULES[parsed.kind].model_validate(section)


def test_the_label_function_and_the_overrides_follow_the_classes() -> None:
    assert set(SCHEDULES) == {"sync", "pipelined", "streaming"}
    assert schedule_label("sync", 0) == "sync" and schedule_label("pipelined", 1) == "pipelined-1"
    assert ScheduleLabel("streaming", 2, True).overrides == [
        "schedule.kind=streaming",
        "schedule.max_staleness=2",
        "schedule.in_flight_updates=true",
    ]


@pytest.mark.parametrize(
    ("text", "error"), [("stream-2", UnknownLabel), ("sync-1", UnknownLabel), ("pipelined-0", LabelError)]
)
def test_a_text_that_names_no_schedule_is_refused(text: str, error: type[Exception]) -> None:
    with pytest.raises(error):
        parse_label(text)


def test_exact_schedules_own_no_queue_rules_and_streaming_does() -> None:
    sync = SCHEDULES["sync"].model_validate({"kind": "sync"})
    assert sync.exact_versions and sync.may_colocate and not sync.in_flight_updates and sync.sync_every == 1
    assert sync.overflow(10, 2) == 0 and not sync.blocks(10, 2) and not sync.draining(0, 5)
    streaming = SCHEDULES["streaming"].model_validate(
        {"kind": "streaming", "max_staleness": 2, "queue_policy": "drop_oldest"}
    )
    assert not streaming.exact_versions and not streaming.may_colocate
    assert streaming.overflow(2, 2) == 1 and not streaming.blocks(2, 2)
    assert streaming.admission_end(1, 4) == (1 + 2 + 1) * 4
