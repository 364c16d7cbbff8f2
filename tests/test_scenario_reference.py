"""docs/scenario.md's table of fields is the one ``scenarios/spec/reference.py`` builds from the models' descriptions.

The models' ``Field(description=...)`` are the one source of what a field means; the page holds the table
generated from them between two marker comments, and it must be the current one, byte for byte. The
length-distribution table is written by hand: it must still name every kind and every field of each.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Literal, cast, get_args, get_origin

from asyncrl.scenarios.spec.device_sheet import DeviceSheet
from asyncrl.scenarios.spec.distributions import LengthDistribution
from asyncrl.scenarios.spec.reference import FIELDS_END, FIELDS_START, field_rows, field_table
from asyncrl.scenarios.spec.scenario import Scenario
from asyncrl.scenarios.spec.sections import Section
from pydantic import BaseModel
from pydantic.fields import FieldInfo

PAGE = Path(__file__).resolve().parent.parent / "docs" / "scenario.md"
REGENERATE = (
    "docs/scenario.md's table of fields is not the models' own: run `python -m asyncrl.scenarios.spec.reference` "
    f"and paste what it prints between {FIELDS_START} and {FIELDS_END} (a blank line on each side)"
)


def page_block() -> str:
    text = PAGE.read_text(encoding="utf-8")
    assert text.count(FIELDS_START) == 1 and text.count(FIELDS_END) == 1, f"docs/scenario.md: one {FIELDS_START}"
    return text.split(FIELDS_START, 1)[1].split(FIELDS_END, 1)[0]


def table_rows() -> dict[str, list[str]]:
    """The generated table's rows by field key, each as its cells (default, meaning)."""
    rows = {}
    for line in field_table().splitlines()[2:]:
        key, *cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]]
        rows[key.strip("`")] = cells
    return rows


def sections_of(annotation: Any) -> list[type[Section]]:
    """The section classes a field of ``Scenario`` holds (a union's members); none for a plain field."""
    members = get_args(annotation) or (annotation,)
    return [
        cast("type[Section]", member) for member in members if isinstance(member, type) and issubclass(member, Section)
    ]


def every_field() -> dict[str, FieldInfo]:
    """Every dotted field of the scenario, walked here from the models (not by the code under test)."""
    keys: dict[str, FieldInfo] = {}
    for name, info in Scenario.model_fields.items():
        sections = sections_of(info.annotation)
        if not sections:
            keys[name] = info
        for section in sections:
            add_fields(keys, name, section)
    for field, sub in DeviceSheet.model_fields.items():  # hardware.device given as a mapping of datasheet figures
        keys[f"hardware.device.{field}"] = sub
    return keys


def add_fields(keys: dict[str, FieldInfo], prefix: str, section: type[Section]) -> None:
    """A section's fields under ``prefix``, and those of a section nested in one (``run.failures``)."""
    for field, sub in section.model_fields.items():
        keys.setdefault(f"{prefix}.{field}", sub)
        for nested in sections_of(sub.annotation):
            add_fields(keys, f"{prefix}.{field}", nested)


def test_the_page_holds_the_generated_table() -> None:
    assert page_block() == f"\n\n{field_table()}\n\n", REGENERATE


def test_every_field_of_every_section_has_a_row() -> None:
    keys = every_field()
    assert {"name", "model.preset", "schedule.kind", "schedule.off_policy_steps", "run.checkpoint_every"} <= set(keys)
    assert {"run.failures", "run.failures.every_s", "run.failures.restart_s"} <= set(keys)
    assert list(table_rows()) == [row.key for row in field_rows()]
    assert set(table_rows()) == set(keys)


def test_rows_written_by_hand() -> None:
    rows = table_rows()
    assert rows["schedule.max_staleness"] == [
        "1",
        "streaming: no trained sample is staler than this (η, in learner steps)",
    ]
    assert rows["workload.prompt_tokens"] == [
        "`{kind: fixed, value: 256}`",
        "prompt lengths in tokens: a length distribution",
    ]
    assert rows["hardware.device"][0] == "required" and "`h100`" in rows["hardware.device"][1]
    assert rows["schedule.kind"] == ["required", "`sync`, `pipelined` or `streaming`"]
    assert rows["schedule.max_concurrency"][1].startswith("rollouts in flight per engine")  # every kind: no prefix
    assert rows["algorithm.learning_rate"][0] == "1e-4"
    assert rows["run.checkpoint_every"] == [
        "unset",
        "executor: learner checkpoint interval, in steps; unset: no checkpoints",
    ]


def test_every_name_a_field_takes_is_in_its_row() -> None:
    rows = table_rows()
    for key, info in every_field().items():
        literals = [arg for arg in get_args(info.annotation) if get_origin(arg) is Literal]
        literals += [info.annotation] if get_origin(info.annotation) is Literal else []
        for choice in (value for literal in literals for value in get_args(literal)):
            assert f"`{choice}`" in rows[key][1], f"{key}: {choice}"


def test_the_length_distribution_table_names_every_kind_and_field() -> None:
    text = PAGE.read_text(encoding="utf-8").split("## Length distributions", 1)[1].split("\n## ", 1)[0]
    rows = {line.split("|")[1].strip().strip("`"): line for line in text.splitlines() if line.startswith("| `")}
    kinds: tuple[type[BaseModel], ...] = get_args(get_args(LengthDistribution)[0])
    assert len(kinds) == len(rows) == 4
    for kind in kinds:
        name = get_args(kind.model_fields["kind"].annotation)[0]
        assert name in rows, name
        for field in kind.model_fields:
            if field != "kind":
                assert f"`{field}`" in rows[name], f"{name}: {field}"


def test_the_command_the_marker_names_prints_the_table() -> None:
    assert "python -m asyncrl.scenarios.spec.reference" in FIELDS_START
    command = [sys.executable, "-m", "asyncrl.scenarios.spec.reference"]
    printed = subprocess.run(command, cwd=PAGE.parent.parent, capture_output=True, text=True, check=True).stdout
    assert printed == field_table() + "\n"
