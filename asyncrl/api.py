"""The Python API, for notebooks and scripts: what the command line does, as values.

    load_scenario("quickstart", {"schedule.kind": "sync"}) ──► Scenario
    simulate(scenario, out=None)  ──► RunRecord   (predicted: summary, events DataFrame)
    execute(scenario, out=None)   ──► RunRecord   (measured: summary, events, metrics DataFrames)
    compare(a, b)                 ──► DataFrame   (one row per figure: a, b, B's error relative to A)

A record's ``summary`` is the typed ``RunSummary`` (``record.summary.throughput.samples_per_s``);
``record.events`` and ``record.metrics`` are pandas tables; ``record.write(dir)`` writes the run
directory the command line would, and ``RunRecord.read(dir)`` reads one back. Nothing here prints.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from asyncrl.scenarios.record.record import RunRecord
from asyncrl.scenarios.spec import loading
from asyncrl.scenarios.spec.scenario import Scenario

__all__ = ["RunRecord", "Scenario", "compare", "execute", "load_scenario", "simulate"]

Changes = Mapping[str, Any] | Sequence[str]


def load_scenario(name_or_path: str | Path, changes: Changes = ()) -> Scenario:
    """A shipped scenario by name (``"quickstart"``) or a scenario file, with dotted ``changes``: a mapping
    (``{"run.steps": 20}``) or ``key=value`` overrides as ``--set`` takes them. ScenarioError names a bad field."""
    scenario = loading.load_scenario(name_or_path)
    return loading.variant(scenario, changes) if changes else scenario


def simulate(scenario: Scenario | str | Path, out: str | Path | None = None) -> RunRecord:
    """Predict a run with the simulator; written to the run directory ``out`` too when given."""
    from asyncrl import simulator

    return simulator.run(_scenario(scenario), _path(out))


def execute(
    scenario: Scenario | str | Path, out: str | Path | None = None, *, device: str = "cpu", runtime: str = "local"
) -> RunRecord:
    """Run the scenario for real (torch); written to ``out`` when given, else kept in memory only."""
    from asyncrl import executor

    return executor.run(_scenario(scenario), _path(out), device=device, runtime=runtime)


def compare(a: RunRecord | str | Path, b: RunRecord | str | Path) -> pd.DataFrame:
    """Run B's figures against run A's (records or run directories): one row per figure, with ``a``, ``b``
    and ``error``, B's relative error against A (``(b − a) / |a|``, ``analysis.records.compare``)."""
    from asyncrl.analysis.records.compare import compare_summaries

    comparison = compare_summaries(_summary(a), _summary(b))
    rows = [(figure.label, figure.a, figure.b, figure.relative_error) for figure in comparison.figures]
    return pd.DataFrame(rows, columns=["figure", "a", "b", "error"]).set_index("figure")


def _scenario(scenario: Scenario | str | Path) -> Scenario:
    return scenario if isinstance(scenario, Scenario) else load_scenario(scenario)


def _path(out: str | Path | None) -> Path | None:
    return None if out is None else Path(out)


def _summary(run: RunRecord | str | Path) -> Any:
    from asyncrl.scenarios.record.record import RunRecordError, read_summary

    if isinstance(run, RunRecord):
        if run.summary is None:
            raise RunRecordError("compare: a run that has not ended has no summary")
        return run.summary
    return read_summary(Path(run))
