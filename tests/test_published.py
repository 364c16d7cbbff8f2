"""benchmarks/published.py on one of its cases: the user's path from a verl config and a sync log to both predictions."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CASE = ROOT / "benchmarks" / "published" / "verl-one-step-off-7b.yaml"


def published() -> Any:
    spec = importlib.util.spec_from_file_location("published", ROOT / "benchmarks" / "published.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["published"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_every_case_file_names_its_source_and_the_figures_of_both_runs() -> None:
    for path in sorted((ROOT / "benchmarks" / "published").glob("*.yaml")):
        source = yaml.safe_load(path.read_text())
        assert {"repo", "commit", "file", "table"} <= set(source["source"]), path
        assert {"completion", "prompt"} == set(source["lengths"]), path  # the assumption, one for both runs
        for case in source["cases"]:
            assert case["sync"]["published"]["step"] > 0 and case["async"]["published"]["step"] > 0


@pytest.mark.slow
def test_the_sync_run_is_reproduced_after_calibrating_on_its_log(tmp_path: Path, capsys: Any) -> None:
    module = published()
    assert module.main([str(CASE), "--steps", "6", "--keep", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "verl-one-step-off-7b: 16 GPUs, 4:12" in printed and "speedup" in printed
    [predictions] = module.predict_file(CASE, 6)
    sync = next(item for item in predictions if item.run == "sync")
    assert sync.calibrated_s == pytest.approx(sync.published_s, rel=0.1)  # fitted to it, sampled anew
    kept = tmp_path / "verl-one-step-off-7b-16-gpus-4-12"
    assert {path.name for path in kept.iterdir()} == {"sync.yaml", "async.yaml", "sync.jsonl", "profile.yaml"}
    assert "kind: efficiency" in (kept / "profile.yaml").read_text()
