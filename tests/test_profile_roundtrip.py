"""A synthetic profile, simulated twice through the command line and compared: zero error everywhere."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from asyncrl.cli import main

PROFILE = {
    "decode_step_s": {1: 0.004, 8: 0.005, 32: 0.009},
    "decode_context_token_s": 1.0e-7,
    "prefill_token_s": 2.0e-5,
    "train_token_s": 3.0e-4,
    "train_token_square_s": 1.0e-7,
    "train_step_overhead_s": 0.01,
    "train_padding": "longest",
    "weight_sync_s": 0.002,
}


def test_a_synthetic_profile_compared_with_itself_has_zero_error(tmp_path: Path, capsys) -> None:
    profile = tmp_path / "synthetic.yaml"
    profile.write_text(yaml.safe_dump(PROFILE))
    runs = {}
    for name, kind in [("a-sync", "sync"), ("a-async", "streaming"), ("b-sync", "sync"), ("b-async", "streaming")]:
        runs[name] = tmp_path / name
        args = ["simulate", "cpu-timing", "--set", f"hardware.profile={profile}", "--set", f"schedule.kind={kind}"]
        assert main([*args, "--out", str(runs[name]), "--quiet", "--steps", "8"]) == 0
    speedup = [str(runs[name]) for name in ("a-sync", "a-async", "b-sync", "b-async")]
    assert main(["compare", str(runs["a-async"]), str(runs["b-async"]), "--speedup", *speedup, "--tolerance", "0"]) == 0
    comparison = json.loads((runs["b-async"] / "comparison.json").read_text())
    assert comparison["figures"]["wall_time_s"]["a"] > 0
    assert all(figure["absolute_error"] == 0 for figure in comparison["figures"].values())
    assert comparison["staleness.histogram_tv"] == 0
    assert comparison["speedup"]["absolute_error"] == 0
