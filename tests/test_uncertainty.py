"""The intervals under every answer (``asyncrl.planning.uncertainty``): what widens them, what they are made of."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from asyncrl.scenarios.spec.loading import load_scenario

from asyncrl.cli import main
from asyncrl.planning.uncertainty import Z95, _length_inputs, run_uncertainty

ROOT = Path(__file__).resolve().parents[1]


def step_interval(overrides: list[str]) -> tuple[float, float, dict[str, float]]:
    scenario = load_scenario("quickstart", ["run.steps=6", *overrides])
    found = run_uncertainty(scenario, {"step_time_s": 60.0, "samples_per_s": 8.0}).intervals["step_time_s"]
    return found.low, found.high, found.moves


def test_lengths_range_is_a_95_percent_range_of_their_scale() -> None:
    # [0.5, 2]: the scale's log spans ln 4, so its sd is ln 4 / 2 / 1.96 = 0.3537 (worked by hand)
    scenario = load_scenario("quickstart", ["workload.length_range=[0.5, 2.0]"])
    (lengths,) = _length_inputs(scenario)
    assert lengths.log_sd == pytest.approx(0.3537, abs=1e-4)
    assert _length_inputs(load_scenario("quickstart")) == []


def test_the_interval_widens_when_the_lengths_are_a_guess() -> None:
    low, high, moves = step_interval([])
    guessed_low, guessed_high, guessed_moves = step_interval(["workload.length_range=[0.5, 2.0]"])
    assert "lengths" not in moves and "lengths" in guessed_moves
    assert guessed_low < low and guessed_high > high
    assert guessed_moves["lengths"] > 0.1  # longer completions: a longer step, by more than a tenth at one sd
    # the interval is symmetric in logs about the figure: value² = low · high
    assert math.sqrt(guessed_low * guessed_high) == pytest.approx(60.0)
    assert math.log(guessed_high / 60.0) / Z95 > math.log(high / 60.0) / Z95


def test_from_verl_marks_lengths_written_down_as_an_assumption(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = ROOT / "tests" / "data" / "verl" / "dapo_7b_math_fsdp2_16_16.sh"
    guess = ["--device", "h100", "--lengths", "{kind: lognormal, median: 2048, sigma: 1}"]
    assert main(["from-verl", str(script), *guess, "--out", str(tmp_path / "guess.yaml")]) == 0
    assert load_scenario(str(tmp_path / "guess.yaml")).workload.length_range == (0.5, 2.0)
    lengths = tmp_path / "lengths.txt"
    lengths.write_text("\n".join(str(n) for n in (300, 800, 1200, 4000)) + "\n")
    measured = ["--device", "h100", "--lengths", str(lengths)]
    assert main(["from-verl", str(script), *measured, "--out", str(tmp_path / "measured.yaml")]) == 0
    assert load_scenario(str(tmp_path / "measured.yaml")).workload.length_range is None
    capsys.readouterr()


def test_terms_no_run_reads_are_skipped_and_move_nothing(monkeypatch) -> None:
    """A split cluster on CUDA graphs never reads the colocated switch terms nor the eager launch term: their runs
    are skipped, their moves exactly 0, and every interval is the one nudging all of them gives."""
    from asyncrl.scenarios.spec.loading import load_scenario

    from asyncrl.planning import uncertainty as module

    scenario = load_scenario("large-streaming", ["run.steps=4", "workload.prompts_per_step=64"])
    figures = {"step_time_s": 1.0, "samples_per_s": 1.0}
    calls: list[object] = []
    real = module.run_figures
    monkeypatch.setattr(module, "run_figures", lambda *args: calls.append(args) or real(*args))
    skipping = module.run_uncertainty(scenario, figures)
    skipped_runs = len(calls)

    class ReadsAll(module.ReadTerms):
        def __getattr__(self, name: str) -> object:
            self.read.update(module.PRIOR_LOG_SD)
            return super().__getattr__(name)

    monkeypatch.setattr(module, "ReadTerms", ReadsAll)
    calls.clear()
    every = module.run_uncertainty(scenario, figures)
    assert len(calls) == len(module.PRIOR_LOG_SD) + 1 > skipped_runs
    for name in ("switch_s", "rollout_sample_s", "decode_layer_s"):
        assert skipping.intervals["step_time_s"].moves[name] == 0.0
    for name, item in skipping.intervals.items():
        assert (item.low, item.high) == (every.intervals[name].low, every.intervals[name].high)
