"""The capped lognormal fitted to a metrics log's response_length figures, checked on values worked by hand,
on drawn samples and on any parameters; `asyncrl lengths --from-log` and `from-verl --lengths LOG`."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from asyncrl.scenarios.spec.loading import load_scenario
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from asyncrl.cli import main
from asyncrl.frameworks.common.metrics_log import (
    MetricsLogError,
)
from asyncrl.frameworks.verl.log_lengths import (
    capped_mean,
    clip_probability,
    fit_from_metrics,
    typical_max,
)
from tests.lengths_data import word_counts, write_completions
from tests.metrics_log_data import draw_steps, write_file_logger, write_tensorboard
from tests.test_metrics_log import CONFIG, log_of

# ── the fit: values worked by hand ──────────────────────────────────────────────


def test_the_closed_forms_by_hand() -> None:
    # median 500, sigma 0.8, cap 2048: (ln 2048 − ln 500) / 0.8 = 1.410011 / 0.8 = 1.762514, Φ = 0.961009
    mu = math.log(500)
    assert clip_probability(mu, 0.8, 2048) == pytest.approx(0.038991, abs=1e-6)
    # (1.410011 − 0.64) / 0.8 = 0.962514, Φ = 0.832104; exp(mu + 0.32) = 688.564
    # mean = 688.564 · 0.832104 + 2048 · 0.038991 = 572.956 + 79.854 = 652.811
    assert capped_mean(mu, 0.8, 2048) == pytest.approx(652.811, abs=1e-3)
    # the longest of 512 draws is typically at the 0.5^(1/512) = 0.998647 quantile, z = 2.999326:
    # median 300, sigma 0.5 → 300 · exp(0.5 · 2.999326) = 1344.05
    assert typical_max(math.log(300), 0.5, 8192, 512) == pytest.approx(1344.05, abs=0.01)
    assert typical_max(mu, 0.8, 2048, 1024) == 2048  # beyond the cap: the cap


def test_the_mean_and_clip_ratio_worked_by_hand_give_back_the_lognormal() -> None:
    # the targets above, spread over four steps around their means (652.811 and 0.038991)
    log = log_of(
        {
            "response_length/mean": [642.811, 662.811, 642.811, 662.811],
            "response_length/clip_ratio": [0.028991, 0.048991, 0.028991, 0.048991],
            "response_length/max": [2048, 2048, 2048, 2048],
        }
    )
    fit = fit_from_metrics(log, samples_per_step=None, max_tokens=None)
    assert fit.distribution.median == pytest.approx(500, rel=0.01)
    assert fit.distribution.sigma == pytest.approx(0.8, rel=0.01)
    assert fit.distribution.cap == 2048 and fit.cap_from.startswith("the longest response_length/max")
    assert fit.pinned_by() == "mean and the clip ratio" and fit.steps == 4 and fit.step_range == (1, 4)
    mean, clip, maximum = fit.targets
    assert (mean.logged, mean.fitted) == pytest.approx((652.811, 652.811), abs=1e-6)
    assert (clip.logged, clip.fitted) == pytest.approx((0.038991, 0.038991), abs=1e-9)
    assert (maximum.logged, maximum.fitted, maximum.pins) == (2048, None, False)  # no samples per step: unchecked
    assert fit.snippet() == "completion_tokens: {kind: lognormal, median: 500, sigma: 0.8, max_tokens: 2048}"


def test_without_clipping_the_typical_max_pins_the_tail() -> None:
    # median 300, sigma 0.5, cap 8192: the clip ratio is 1.9e-11 (0 in any log); the mean is
    # 300 · exp(0.125) · Φ(6.114) + 8192 · 1.9e-11 = 339.9445; the typical longest of 512, 1344.05
    columns = {
        "response_length/mean": [339.9445] * 3,
        "response_length/max": [1300.0, 1344.05, 1500.0],  # their median is the target
        "response_length/clip_ratio": [0.0] * 3,
        "prompt_length/mean": [100.0, 120.0, 110.6],
        "prompt_length/max": [300.0, 280.0, 290.0],
    }
    fit = fit_from_metrics(log_of(columns), samples_per_step=512, max_tokens=8192)
    assert fit.distribution.median == pytest.approx(300, rel=0.01)
    assert fit.distribution.sigma == pytest.approx(0.5, rel=0.01)
    assert fit.cap_from == "max_tokens" and fit.pinned_by() == "mean and the typical max"
    assert fit.targets[2].fitted == pytest.approx(1344.05, rel=1e-6)
    assert fit.prompt_tokens() == {"kind": "fixed", "value": 110} and fit.prompt_max == 300  # 330.6 / 3 = 110.2
    assert fit.targets[1].logged == 0
    unlogged = log_of({key: values for key, values in columns.items() if key != "response_length/clip_ratio"})
    fit_unlogged = fit_from_metrics(unlogged, samples_per_step=512, max_tokens=8192)
    assert fit_unlogged.distribution == fit.distribution and fit_unlogged.targets[1].logged is None


def test_the_drift_of_the_mean_is_reported() -> None:
    means = [600.0 + 15 * step for step in range(20)]  # 600 to 885
    log = log_of({"response_length/mean": means, "response_length/clip_ratio": [0.01] * 20})
    drift = fit_from_metrics(log, samples_per_step=None, max_tokens=4096).drift
    assert (drift.window, drift.first, drift.last, drift.lowest, drift.highest) == (2, 607.5, 877.5, 600, 885)


@pytest.mark.parametrize(
    ("columns", "kwargs", "message"),
    [
        ({"response_length/max": [100.0]}, {}, "run.jsonl: no 'response_length/mean' in any step"),
        (
            {"response_length/mean": [50.0], "response_length/max": [300.0], "response_length/clip_ratio": [0.0]},
            {"samples_per_step": 64},
            "max_tokens: no step of run.jsonl shows the cap",
        ),
        (
            {"response_length/mean": [50.0], "response_length/max": [300.0]},
            {"max_tokens": 1024},
            "samples_per_step: no response in run.jsonl hit the cap, so its response_length/max pins the tail",
        ),
        (
            {"response_length/mean": [50.0], "response_length/max": [3000.0]},
            {"max_tokens": 1024},
            "max_tokens: 1024 is below the longest response in run.jsonl (3,000)",
        ),
        (
            {"response_length/mean": [50.0], "response_length/clip_ratio": [0.1]},
            {"max_tokens": 1024},
            "run.jsonl: no capped lognormal has a mean response length of 50.0 with a clip ratio of 0.1 at a cap "
            "of 1,024 (the mean must lie between cap × clip ratio, 102.4, and the cap)",
        ),
        (
            {"response_length/mean": [900.0], "response_length/clip_ratio": [0.7]},
            {"max_tokens": 1024},
            "run.jsonl: 70% of responses hit the cap of 1,024: a lognormal's median would lie above it",
        ),
        (
            {"response_length/mean": [1024.0], "response_length/clip_ratio": [1.0]},
            {"max_tokens": 1024},
            "run.jsonl: every response hit the cap",
        ),
    ],
)
def test_what_the_fit_cannot_do_is_one_line(columns: dict, kwargs: dict, message: str) -> None:
    with pytest.raises(MetricsLogError) as error:
        fit_from_metrics(log_of(columns), **({"samples_per_step": None, "max_tokens": None} | kwargs))
    assert str(error.value).startswith(message) and "\n" not in str(error.value)


# ── the fit: drawn samples, and any parameters ──────────────────────────────────


def test_steps_of_drawn_samples_give_back_the_lognormal_that_drew_them() -> None:
    clipped = log_of(pd.DataFrame.from_dict(draw_steps(steps=100, seed=1), orient="index").to_dict("list"))
    fit = fit_from_metrics(clipped, samples_per_step=512, max_tokens=4096)  # median 600, σ 0.9, 1.6% at the cap
    assert fit.pinned_by() == "mean and the clip ratio"
    assert fit.distribution.median == pytest.approx(600, rel=0.03)
    assert fit.distribution.sigma == pytest.approx(0.9, rel=0.03)
    assert fit.targets[2].fitted == fit.targets[2].logged == 4096  # every step reaches the cap, as predicted
    unclipped = draw_steps(steps=200, samples=512, median=300, sigma=0.5, cap=8192, seed=2)
    fit = fit_from_metrics(
        log_of(pd.DataFrame.from_dict(unclipped, orient="index").to_dict("list")), samples_per_step=512, max_tokens=8192
    )
    assert fit.pinned_by() == "mean and the typical max"
    assert fit.distribution.median == pytest.approx(300, rel=0.03)
    assert fit.distribution.sigma == pytest.approx(0.5, rel=0.03)


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(median=st.floats(20, 5000), sigma=st.floats(0.3, 1.5), headroom=st.floats(1.2, 40))
def test_exact_mean_and_clip_ratio_recover_any_lognormal(median: float, sigma: float, headroom: float) -> None:
    mu, cap = math.log(median), math.ceil(median * headroom)
    clip = clip_probability(mu, sigma, cap)
    assume(clip >= 1e-6)  # a logged ratio is a share of a batch
    log = log_of({"response_length/mean": [capped_mean(mu, sigma, cap)], "response_length/clip_ratio": [clip]})
    fit = fit_from_metrics(log, samples_per_step=None, max_tokens=cap)
    assert fit.distribution.median == pytest.approx(median, rel=1e-4)
    assert fit.distribution.sigma == pytest.approx(sigma, rel=1e-4)


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(
    median=st.floats(20, 5000),
    sigma=st.floats(0.3, 1.5),
    samples=st.integers(64, 16384),
    headroom=st.floats(1.05, 10),
)
def test_exact_mean_and_typical_max_recover_any_lognormal(
    median: float, sigma: float, samples: int, headroom: float
) -> None:
    mu = math.log(median)
    longest = typical_max(mu, sigma, math.inf, samples)
    cap = math.ceil(longest * headroom)
    log = log_of({"response_length/mean": [capped_mean(mu, sigma, cap)], "response_length/max": [longest]})
    fit = fit_from_metrics(log, samples_per_step=samples, max_tokens=cap)
    assert fit.distribution.median == pytest.approx(median, rel=1e-4)
    assert fit.distribution.sigma == pytest.approx(sigma, rel=1e-4)


# ── the commands ────────────────────────────────────────────────────────────────


@pytest.fixture(scope="module")
def verl_log(tmp_path_factory) -> Path:
    return write_file_logger(tmp_path_factory.mktemp("verl") / "metrics.jsonl", draw_steps())


def test_lengths_from_log_prints_the_fit_and_writes_fits_json(verl_log: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "fit"
    assert main(["lengths", "--from-log", str(verl_log), "--samples-per-step", "512", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"{verl_log} (verl-jsonl): 100 steps with response_length/mean, steps 1 to 100; cap 4,096" in printed
    assert "typical max of 512 (median of response_length/max)   4,096   4,096   check" in printed
    assert "response_length/mean drifts from" in printed and "one stationary distribution" in printed
    report = json.loads((out / "fits.json").read_text())
    assert report["fit"]["median"] == pytest.approx(600, rel=0.03) and report["fit"]["sigma"] == pytest.approx(
        0.9, rel=0.03
    )
    assert report["steps"] == 100 and report["prompt_tokens"]["kind"] == "fixed"
    snippets = [line.strip().split("  #")[0] for line in printed.splitlines() if "_tokens: {" in line]
    assert snippets == [report["snippet"], report["prompt_snippet"]]
    for snippet in snippets:
        ((key, value),) = yaml.safe_load(snippet).items()
        scenario = load_scenario("quickstart", [f"workload.{key}={json.dumps(value)}"])
        assert getattr(scenario.workload, key).kind == value["kind"]
    assert main(["lengths", "--from-log", str(verl_log), "--json", "--out", str(out)]) == 0
    assert json.loads(capsys.readouterr().out)["targets"][2]["fitted"] is None  # no samples per step: unchecked


def test_lengths_from_a_tensorboard_directory(tmp_path: Path, capsys) -> None:
    pytest.importorskip("tensorboard")
    run = write_tensorboard(tmp_path / "tensorboard_log" / "gsm8k" / "exp", draw_steps(steps=30))
    assert main(["lengths", "--from-log", str(run), "--max-tokens", "4096", "--out", str(tmp_path / "fit")]) == 0
    assert f"{run} (tensorboard): 30 steps with response_length/mean, steps 1 to 30; cap 4,096 (--max-tokens)" in (
        capsys.readouterr().out
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "give one of FILE.jsonl (a completions log) or --from-log LOG (a metrics log)"),
        (["FILE", "--from-log", "LOG"], "give one of FILE.jsonl (a completions log) or --from-log LOG"),
        (["LOG"], "FILE.jsonl: {log} is a metrics log (a line per step); read it with --from-log"),
        (["--from-log", "LOG", "--field", "output"], "--field, --tokenizer: only for a completions log FILE.jsonl"),
        (["FILE", "--samples-per-step", "8"], "--samples-per-step: only with --from-log"),
        (["--from-log", "LOG", "--max-tokens", "100"], "--max-tokens: 100 is below the longest response in {log}"),
        (["--from-log", "FILE"], "--from-log: {file} is not a metrics log (a completions log is read as FILE.jsonl)"),
        (["--from-log", "nowhere"], "nowhere: no such file or directory"),
    ],
)
def test_lengths_from_log_bad_input_is_one_line(verl_log: Path, tmp_path: Path, capsys, args, message) -> None:
    completions = str(write_completions(tmp_path / "completions.jsonl", word_counts(5)))
    argv = [{"LOG": str(verl_log), "FILE": completions}.get(arg, arg) for arg in args]
    assert main(["lengths", *argv, "--out", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err
    expected = message.format(log=verl_log, file=completions)
    assert error.startswith(f"asyncrl: error: {expected}") and error.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_from_verl_fits_a_metrics_log(tmp_path: Path, capsys) -> None:
    # the config's data.max_response_length is 512, data.train_batch_size 1024, rollout.n 1
    steps = draw_steps(30, samples=1024, median=200, sigma=0.7, cap=512)
    log = write_file_logger(tmp_path / "metrics.jsonl", steps)
    prompt = round(np.mean([step["prompt_length/mean"] for step in steps.values()]))  # 189: 180 · e^(0.3²/2) = 188.3
    out = tmp_path / "plan.yaml"
    args = ["from-verl", str(CONFIG), "--device", "h100", "--preset", "qwen2.5-7b", "--lengths", str(log)]
    assert main([*args, "--out", str(out)]) == 0
    workload = yaml.safe_load(out.read_text())["workload"]
    completion = workload["completion_tokens"]
    assert completion["kind"] == "lognormal" and completion["max_tokens"] == 512
    assert completion["median"] == pytest.approx(200, rel=0.03) and completion["sigma"] == pytest.approx(0.7, rel=0.03)
    assert workload["prompt_tokens"] == {"kind": "fixed", "value": prompt, "max_tokens": 512}  # the logged mean
    printed = capsys.readouterr().out
    assert (
        f"workload.completion_tokens: lognormal fitted to {log}'s response_length/mean, /max, /clip_ratio over 30 "
        "steps (it reproduces the mean and the clip ratio; response_length/mean drifts from"
    ) in printed
    assert f"workload.prompt_tokens: every prompt at {log}'s mean prompt_length/mean, {prompt}" in printed
    assert "every prompt taken at the cap" not in printed
    # --prompt-lengths wins over the log's prompts
    assert main([*args, "--prompt-lengths", "{kind: fixed, value: 64}", "--out", str(out), "--force"]) == 0
    assert yaml.safe_load(out.read_text())["workload"]["prompt_tokens"]["value"] == 64
    assert "every prompt at" not in capsys.readouterr().out


def test_from_verl_refuses_a_log_longer_than_the_config_s_cap(tmp_path: Path, capsys) -> None:
    log = write_file_logger(tmp_path / "metrics.jsonl", draw_steps(5, samples=64, cap=4096))
    args = ["from-verl", str(CONFIG), "--device", "h100", "--preset", "qwen2.5-7b", "--lengths", str(log)]
    assert main([*args, "--out", str(tmp_path / "plan.yaml")]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"asyncrl: error: data.max_response_length: 512 is below the longest response in {log}")
    assert error.count("\n") == 1
