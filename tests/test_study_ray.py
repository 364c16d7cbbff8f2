"""asyncrl study on Ray: one cell of a few steps as a Ray task on a local instance."""

from __future__ import annotations

from pathlib import Path

import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("torch")

from asyncrl.experiments.study import StudyOptions, run_study  # noqa: E402


@pytest.mark.slow
def test_one_cell_runs_as_a_ray_task_and_writes_its_row(tmp_path: Path, local_ray) -> None:
    options = StudyOptions(
        "cpu-study", schedules="streaming-2", losses="grpo", seeds="0", steps=5, out=tmp_path, runtime="ray", quiet=True
    )
    result = run_study(options, say=lambda line: None)
    assert [outcome.status for outcome in result.ran] == ["complete"]
    assert list(result.cells["status"]) == ["complete"] and list(result.cells["steps"]) == [5]
    assert (tmp_path / "cells" / "streaming-2.grpo.clip.s0" / "summary.json").is_file()
