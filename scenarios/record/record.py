"""A run as a value (``RunRecord``), and the run directory both backends write it to.

    simulator.run(scenario) ──┐                          run dir/
                              ├──► RunRecord ──write──►    scenario.yaml     the resolved scenario (defaults written out)
    executor.run(scenario) ───┘        ▲                   events.parquet    one row per span (EVENT_COLUMNS)
                                       │                   metrics.parquet   executor: loss, reward, KL per step
                                       │                   engine_steps.parquet  executor: what each decode step did
                                       └─────read───────   summary.json      RunSummary, written last

A record is what a backend hands back (``scenarios.rules.backend.Backend``): the
scenario it ran, its summary (``scenarios.record.run_summary.RunSummary``, computed
from the events by ``scenarios.record.summarize``), the event table, and any other
tables (the executor's ``metrics`` and ``engine_steps``). ``summary.json`` goes
last, so its presence means the run is complete; a record whose summary is None
is a run still going (an executor checkpoint) or one that never started.

``read_summary`` reads only ``summary.json`` (what analysis needs); a malformed
or truncated one is one ``RunRecordError`` naming the file and the field.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Generic, NamedTuple, TypeVar

from ..files.textfile import dumps, parse_json
from ..files.writing import write_text, written
from ..spec.loading import dump_scenario, load_scenario
from ..spec.scenario import Scenario
from .busy import union_length
from .run_summary import (
    SUMMARY_FILE,
    Breakdown,
    RunRecordError,
    RunStatus,
    RunSummary,
    validate_summary,
)
from .summarize import (
    EVENT_COLUMNS,
    DevicePools,
    Labels,
    Tally,
    empty_events,
    event_row,
    summarize,
    summary_of,
)

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "EVENT_COLUMNS",
    "SUMMARY_FILE",
    "Breakdown",
    "DevicePools",
    "Labels",
    "RunRecord",
    "RunRecordError",
    "RunStatus",
    "RunSummary",
    "Simulated",
    "Tally",
    "empty_events",
    "event_row",
    "read_events",
    "read_scenario",
    "read_summary",
    "summarize",
    "summary_of",
    "union_length",
    "validate_summary",
    "write_run",
]

SCENARIO_FILE = "scenario.yaml"
EVENTS_FILE = "events.parquet"


@dataclass(frozen=True)
class RunRecord:
    """One run: the scenario it ran, its summary (None: not ended), its events and its other tables by name."""

    scenario: Scenario
    summary: RunSummary | None
    events: pd.DataFrame
    tables: Mapping[str, pd.DataFrame] = field(default_factory=dict)

    @classmethod
    def of(cls, scenario: Scenario, events: pd.DataFrame, backend: str, **tables: pd.DataFrame) -> RunRecord:
        """The record of a run that has ended, its summary computed from ``events``."""
        summary = summarize(
            events,
            backend=backend,
            scenario_name=scenario.name,
            engines=scenario.cluster.engines,
            concurrency=scenario.engine_concurrency,
            devices=DevicePools.of(scenario.cluster),
        )
        return cls(scenario, summary, events, tables)

    @property
    def metrics(self) -> pd.DataFrame:
        """The executor's per-step metrics (loss, reward, KL, staleness); empty for a simulated run."""
        import pandas as pd

        return self.tables.get("metrics", pd.DataFrame())

    @property
    def evaluation(self) -> pd.DataFrame:
        """The executor's held-out evaluation (eval.parquet: ``run.eval_every``); empty when none ran."""
        import pandas as pd

        return self.tables.get("eval", pd.DataFrame())

    def write(self, out: Path | str) -> Path:
        """Write the run directory ``out`` (made if missing); summary.json last, and only if the run ended."""
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        (out / SUMMARY_FILE).unlink(missing_ok=True)
        for name, table in self.tables.items():
            with written(out / f"{name}.parquet") as temporary:
                table.to_parquet(temporary, index=False)
        write_run(out, scenario_yaml=dump_scenario(self.scenario.resolved()), events=self.events, summary=self.summary)
        return out

    @classmethod
    def read(cls, run_dir: Path | str) -> RunRecord:
        """The record a run directory holds; RunRecordError, one line naming the file, if it is not a whole one."""
        import pandas as pd

        run_dir = Path(run_dir)
        summary = read_summary(run_dir)
        scenario = read_scenario(run_dir)
        tables = {
            path.stem: pd.read_parquet(path) for path in sorted(run_dir.glob("*.parquet")) if path.name != EVENTS_FILE
        }
        return cls(scenario, summary, read_events(run_dir), tables)


def write_run(out: Path, *, scenario_yaml: str, events: pd.DataFrame, summary: RunSummary | None) -> None:
    """Write the files of a run directory; summary.json goes last, so its presence means complete (none: the
    run goes on). ``RunRecord.write`` calls this; tests write hand-made records with it."""
    out.mkdir(parents=True, exist_ok=True)
    (out / SUMMARY_FILE).unlink(missing_ok=True)
    write_text(out / SCENARIO_FILE, scenario_yaml)  # a planted link at any of these names is replaced, not followed
    with written(out / EVENTS_FILE) as temporary:
        events.astype(EVENT_COLUMNS).to_parquet(temporary, index=False)
    if summary is not None:
        write_text(out / SUMMARY_FILE, dumps(summary.to_json(), indent=2) + "\n")


def read_summary(run_dir: Path) -> RunSummary:
    """``summary.json`` of a run directory, checked against RunSummary.

    RunRecordError (one line, naming the directory or the file and the field) when the directory or the
    file is missing, the file is not JSON, or a field is missing or of the wrong type.
    """
    path = run_dir / SUMMARY_FILE
    if not run_dir.is_dir():
        raise RunRecordError(f"{run_dir}: no such run directory")
    if not path.is_file():
        raise RunRecordError(f"{run_dir}: no {SUMMARY_FILE} (not a run directory, or the run did not finish)")
    try:
        data = parse_json(path.read_bytes(), path, strict=True)
    except json.JSONDecodeError as exc:
        raise RunRecordError(f"{path}: not valid JSON ({exc})") from None
    except OSError as exc:
        raise RunRecordError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    except ValueError as exc:  # not UTF-8, nested too deeply, NaN
        raise RunRecordError(str(exc) if str(exc).startswith(str(path)) else f"{path}: {exc}") from None
    return validate_summary(data, source=path)


def read_scenario(run_dir: Path) -> Scenario:
    """The scenario a run directory's run ran (``scenario.yaml``, defaults written out); RunRecordError if not."""
    path = run_dir / SCENARIO_FILE
    try:
        return load_scenario(path)
    except (OSError, ValueError) as exc:
        raise RunRecordError(f"{path}: {str(exc).splitlines()[0]}") from None


#: The columns every run's events table has had (later ones, e.g. ``comm_s``, are absent from older runs).
REQUIRED_EVENT_COLUMNS = ("worker", "role", "kind", "start", "end", "step", "version")


def read_events(run_dir: Path, columns: list[str] | None = None) -> pd.DataFrame:
    """``events.parquet`` of a run directory, as written (EVENT_COLUMNS, or those ``columns``); RunRecordError
    (one line, naming the file) when it is missing, is not a Parquet table, or lacks one of the columns."""
    import pandas as pd

    path = run_dir / EVENTS_FILE
    if not path.is_file():
        raise RunRecordError(f"{run_dir}: no {EVENTS_FILE} (not a run directory, or the run did not finish)")
    try:
        events = pd.read_parquet(path, columns=columns)
    except Exception as exc:  # pyarrow's ArrowInvalid and friends, an OSError
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RunRecordError(f"{path}: not a readable events table ({reason})") from None
    missing = [column for column in columns or REQUIRED_EVENT_COLUMNS if column not in events.columns]
    if missing:
        raise RunRecordError(f"{path}: not a run's events table (no column {', '.join(missing)})")
    return events


Subject = TypeVar("Subject", covariant=True)  # read-only: a Simulated[Variant] is a Simulated[Labelled]


class Simulated(NamedTuple, Generic[Subject]):
    """What a sweep hands back per case: the case (a variant, a grid point) and its simulated summary, read by
    name (``result.summary``); summary None: not simulated (it does not fit in memory, or does not validate)."""

    subject: Subject
    summary: RunSummary | None
