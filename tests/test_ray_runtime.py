"""The executor on Ray: the same schedule with actors placed by Ray (a local instance here)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("torch")

from asyncrl.executor.processes.runtime import execute  # noqa: E402
from asyncrl.scenarios.spec.loading import load_scenario  # noqa: E402


@pytest.mark.slow
def test_streaming_on_ray_actors_keeps_the_bound_and_writes_the_record(tmp_path: Path, local_ray) -> None:
    scenario = load_scenario("cpu-timing", ["run.steps=3", "workload.prompts_per_step=2", "schedule.max_staleness=1"])
    result = execute(scenario, tmp_path / "run", runtime="ray")
    assert result.summary.status == "complete"
    assert result.summary.samples.trained == 3 * scenario.batch_samples
    events = pd.read_parquet(tmp_path / "run" / "events.parquet")
    trained = events[(events["kind"] == "generate") & (events["step"] >= 0)]
    oldest = trained.groupby(["group", "sample"]).agg(step=("step", "first"), version=("version", "min"))
    assert (oldest["step"] - oldest["version"]).max() <= 1
    assert set(events.loc[events["kind"] == "generate", "worker"]) == {"engine-0"}
