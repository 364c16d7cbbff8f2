"""Completions that grow over a run (``workload.completion_scale_by_step``): the factor per step, the stream that
applies it for both backends, the fit that follows a metrics log's drift, and the calibration that does not
apply it twice."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from asyncrl.scenarios.rules.workload import LengthStream, scale_at_step
from asyncrl.scenarios.spec.loading import load_scenario

from asyncrl.calibration.log_work import steady_lengths
from asyncrl.cli import main
from asyncrl.frameworks.common.metrics_log import read_metrics_log
from asyncrl.frameworks.verl.log_lengths import fit_from_metrics
from tests.metrics_log_data import (
    PROMPT_CAP,
    PROMPT_MEDIAN,
    PROMPT_SIGMA,
    capped_lognormal,
    step_metrics,
    write_file_logger,
)


def test_the_factor_between_and_beyond_the_points_worked_by_hand() -> None:
    points = [(0, 1.0), (100, 4.0), (200, 4.0)]
    factors = scale_at_step(points, np.array([0, 50, 100, 150, 300]))
    assert factors.tolist() == pytest.approx([1.0, 2.0, 4.0, 4.0, 4.0])  # geometric: √(1 · 4) halfway
    assert scale_at_step([(10, 0.5)], np.array([0, 10, 99])).tolist() == [0.5, 0.5, 0.5]  # one point: held


def test_each_group_takes_the_factor_of_the_step_it_is_drawn_for() -> None:
    overrides = [
        "workload.completion_tokens={kind: fixed, value: 100, max_tokens: 1000}",
        "workload.prompts_per_step=4",
    ]
    grows = load_scenario("quickstart", [*overrides, "workload.completion_scale_by_step=[[0, 1], [10, 2]]"])
    stream = LengthStream(grows)
    per_step = [[stream.next_group()[1][0] for _ in range(4)] for _ in range(12)]  # 4 groups a step
    assert per_step[0] == [100] * 4
    assert per_step[5] == [round(100 * math.sqrt(2))] * 4  # 141: halfway, geometric
    assert per_step[10] == per_step[11] == [200] * 4  # held after the last point


def test_growth_leaves_a_steady_scenarios_draws_alone_and_capped() -> None:
    steady = load_scenario("quickstart")
    grows = load_scenario("quickstart", ["workload.completion_scale_by_step=[[0, 1], [5, 1000]]"])
    first = [LengthStream(steady).next_group()[1] for _ in range(1)]
    assert LengthStream(grows).next_group()[1] == first[0]  # step 0's factor is 1: the same draws
    late = LengthStream(grows)
    for _ in range(steady.workload.prompts_per_step * 6):
        lengths = late.next_group()[1]
    assert set(lengths) == {steady.workload.completion_tokens.cap}  # a thousandfold stops at the cap


@pytest.mark.parametrize(
    ("value", "says"),
    [("[[5, 1], [5, 2]]", "must be above"), ("[]", "at least one"), ("[[0, 0]]", "greater than 0"),
     ("[[0, 5000]]", "above 1000")],
)  # fmt: skip
def test_bad_points_are_refused_by_name(value: str, says: str, capsys) -> None:
    assert main(["simulate", "quickstart", f"workload.completion_scale_by_step={value}"]) == 2
    err = capsys.readouterr().err
    assert "workload.completion_scale_by_step" in err and says in err


def drifting_log(path: Path, first: float, last: float, steps: int = 100, samples: int = 512) -> Path:
    """A verl FileLogger log whose responses' median grows geometrically from ``first`` to ``last``."""
    rng = np.random.default_rng(0)
    drawn = {}
    for step in range(1, steps + 1):
        median = first * (last / first) ** ((step - 1) / (steps - 1))
        responses = capped_lognormal(rng, samples, median, 0.6, 8192)
        prompts = capped_lognormal(rng, samples, PROMPT_MEDIAN, PROMPT_SIGMA, PROMPT_CAP)
        drawn[step] = step_metrics(responses, prompts, 8192)
    return write_file_logger(path, drawn)


def test_a_drifting_log_is_followed_step_by_step(tmp_path: Path) -> None:
    fit = fit_from_metrics(read_metrics_log(drifting_log(tmp_path / "m.jsonl", 300, 1200)), samples_per_step=512,
                           max_tokens=8192)  # fmt: skip
    assert fit.scale_by_step is not None and len(fit.scale_by_step) == 5
    (first_step, first), (last_step, last) = fit.scale_by_step[0], fit.scale_by_step[-1]
    truth = 4 ** ((last_step - first_step) / 99)  # the drawn medians' ratio between the two middle steps
    assert last / first == pytest.approx(truth, rel=0.1)
    assert [step for step, _ in fit.scale_by_step] == [9, 29, 49, 69, 89]  # verl's step s is learner step s − 1


def test_a_steady_log_has_no_growth(tmp_path: Path) -> None:
    fit = fit_from_metrics(read_metrics_log(drifting_log(tmp_path / "m.jsonl", 500, 520)), samples_per_step=512,
                           max_tokens=8192)  # fmt: skip
    assert fit.scale_by_step is None


def test_lengths_from_log_prints_the_growth_snippet(tmp_path: Path, capsys) -> None:
    log = drifting_log(tmp_path / "m.jsonl", 300, 1200)
    assert main(["lengths", "--from-log", str(log), "--max-tokens", "8192", "--out", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    assert "completion_scale_by_step: [[9, " in printed and "workload.completion_scale_by_step follows it" in printed


def test_the_calibration_fits_each_window_at_its_own_lengths_not_twice() -> None:
    grows = load_scenario("quickstart", ["workload.completion_scale_by_step=[[0, 1], [10, 2]]"])
    assert steady_lengths(grows).workload.completion_scale_by_step is None
    assert steady_lengths(grows).workload.completion_tokens == grows.workload.completion_tokens
