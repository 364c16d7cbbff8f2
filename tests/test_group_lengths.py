"""Lengths correlated within a prompt's group (``workload.group_correlation``): the copula that draws them, the
fit that recovers ρ from grouped lengths, its F-interval's coverage, and the dumps and commands that carry it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from asyncrl.analysis.fits.f_distribution import beta_cdf, f_quantile
from asyncrl.analysis.fits.lengths import OneWayAnova, fit_group_correlation, normal_scores
from asyncrl.scenarios.rules.workload import LengthStream
from asyncrl.scenarios.spec.distributions import Empirical, Fixed, LogNormal, Pareto
from asyncrl.scenarios.spec.loading import load_scenario
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncrl.cli import main

LOGNORMAL = LogNormal(kind="lognormal", median=300, sigma=0.9, max_tokens=1024)


# ── the copula ──────────────────────────────────────────────────────────────────


def test_no_correlation_draws_the_stream_as_before() -> None:
    """ρ = 0 reads the generator exactly as ``sample`` does: every existing scenario draws the same lengths."""
    grouped = LOGNORMAL.sample_groups(np.random.default_rng(7), 50, 8, 0.0)
    flat = LOGNORMAL.sample(np.random.default_rng(7), 400)
    assert np.array_equal(grouped, flat.reshape(50, 8))


def test_each_kind_at_a_normal_score_worked_by_hand(tmp_path: Path) -> None:
    zero, one = np.array([0.0]), np.array([1.0])
    assert LOGNORMAL._at_normal_scores(zero)[0] == 300.0  # the median at z = 0
    assert LOGNORMAL._at_normal_scores(one)[0] == pytest.approx(300 * math.exp(0.9))  # 737.9
    pareto = Pareto(kind="pareto", scale=100, alpha=2, max_tokens=10_000)
    assert pareto._at_normal_scores(zero)[0] == pytest.approx(100 * math.sqrt(2))  # P(X > x) = ½ at 141.4
    (tmp_path / "l.txt").write_text("\n".join(str(n) for n in range(10, 0, -1)))
    empirical = Empirical(kind="empirical", path=tmp_path / "l.txt")
    assert empirical._at_normal_scores(zero)[0] == 6  # Φ(0) = ½: the 6th of 1..10 (index ⌊0.5 · 10⌋)
    assert (
        empirical._at_normal_scores(np.array([-9.0]))[0] == 1 and empirical._at_normal_scores(np.array([9.0]))[0] == 10
    )
    fixed = Fixed(kind="fixed", value=64)
    assert fixed.sample_groups(np.random.default_rng(0), 3, 4, 0.9).tolist() == [[64] * 4] * 3


@pytest.mark.parametrize("correlation", [0.3, 0.8])
def test_every_length_keeps_its_law(correlation: float) -> None:
    """The copula moves lengths within groups, not their distribution: quantiles as the independent draws'."""
    grouped = LOGNORMAL.sample_groups(np.random.default_rng(1), 20_000, 4, correlation).ravel()
    independent = LOGNORMAL.sample(np.random.default_rng(2), 80_000)
    for p in (0.1, 0.5, 0.9):
        assert np.quantile(grouped, p) == pytest.approx(np.quantile(independent, p), rel=0.04)
    assert (grouped == 1024).mean() == pytest.approx((independent == 1024).mean(), abs=0.01)  # the cap's mass


@given(correlation=st.floats(0.05, 0.95), sigma=st.floats(0.3, 1.5))
@settings(max_examples=25, deadline=None)
def test_a_lognormals_log_lengths_correlate_by_rho(correlation: float, sigma: float) -> None:
    lengths = LogNormal(kind="lognormal", median=5_000, sigma=sigma, max_tokens=10**6)
    logs = np.log(lengths.sample_groups(np.random.default_rng(3), 4_000, 2, correlation).astype(float))
    assert np.corrcoef(logs[:, 0], logs[:, 1])[0, 1] == pytest.approx(correlation, abs=0.06)


def test_the_length_stream_of_both_backends_groups_them() -> None:
    scenario = load_scenario("quickstart", ["workload.group_correlation=0.9", "workload.samples_per_prompt=8"])
    stream = LengthStream(scenario)
    groups = np.log(np.array([stream.next_group()[1] for _ in range(2_000)], dtype=float))
    sigma = scenario.workload.completion_tokens.sigma  # type: ignore[union-attr]
    within = float(np.sqrt(groups.var(axis=1, ddof=1).mean()))  # σ √(1 − ρ) below the cap
    assert within == pytest.approx(sigma * math.sqrt(0.1), rel=0.15)


@pytest.mark.parametrize("value", ["1", "-0.1", "nan"])
def test_a_correlation_outside_0_to_1_is_refused_by_name(value: str, capsys) -> None:
    assert main(["simulate", "quickstart", f"workload.group_correlation={value}"]) == 2
    assert "workload.group_correlation" in capsys.readouterr().err


# ── the fit ─────────────────────────────────────────────────────────────────────


def test_anova_worked_by_hand() -> None:
    # groups {1, 2} and {3, 4}: means 1.5 and 3.5 around 2.5; MSB = 2 · (1² + 1²) / 1 = 4, MSW = 4 · ¼ / 2 = ½, k₀ = 2
    anova = OneWayAnova.of(np.array([1.0, 2.0, 3.0, 4.0]), np.array([0, 0, 1, 1]))
    assert (anova.between, anova.within, anova.k0) == (pytest.approx(4.0), pytest.approx(0.5), pytest.approx(2.0))
    assert anova.icc(anova.between / anova.within) == pytest.approx(3.5 / 4.5)  # (8 − 1) / (8 + 1)


def test_f_quantiles_and_the_incomplete_beta_against_tables() -> None:
    assert beta_cdf(0.5, 2, 2) == pytest.approx(0.5) and beta_cdf(0.3, 1, 1) == pytest.approx(0.3)
    assert beta_cdf(0.2, 2, 3) == pytest.approx(0.1808)  # 1 − (1 − x)³(1 + 3x) at x = 0.2
    assert f_quantile(0.975, 1, 10) == pytest.approx(6.9367, abs=1e-4)  # the F table's 2.5% points
    assert f_quantile(0.975, 10, 10) == pytest.approx(3.7168, abs=1e-4)
    assert f_quantile(0.95, 5, 10) == pytest.approx(3.3258, abs=1e-4)


def test_normal_scores_share_ties() -> None:
    scores = normal_scores(np.array([5, 1, 5, 9]))
    assert scores[0] == scores[2] == pytest.approx(0.0)  # mid-rank ½ of two tied in the middle
    assert scores[1] == pytest.approx(-1.150349, abs=1e-6)  # Φ⁻¹(1/8)


@pytest.mark.parametrize(("correlation", "groups", "size"), [(0.0, 64, 8), (0.3, 32, 4), (0.6, 16, 16), (0.3, 8, 5)])
def test_the_interval_covers_at_its_level(correlation: float, groups: int, size: int) -> None:
    """400 simulated dump sets per case: the F-interval holds the true ρ in 95% of them (±3 binomial SEs); the
    percentile bootstrap over groups held it in 82-90% at these sizes."""
    index = np.repeat(np.arange(groups), size)
    covered = 0
    for seed in range(400):
        lengths = LOGNORMAL.sample_groups(np.random.default_rng(seed), groups, size, correlation).ravel()
        fitted = fit_group_correlation(lengths, index)
        assert fitted is not None
        covered += fitted.low <= correlation <= fitted.high
    assert 0.92 <= covered / 400 <= 0.99


def test_too_few_groups_tell_nothing() -> None:
    assert fit_group_correlation(np.arange(1, 15), np.repeat(np.arange(7), 2)) is None  # 7 groups
    assert fit_group_correlation(np.arange(1, 21), np.arange(20)) is None  # all alone


# ── dumps and commands ──────────────────────────────────────────────────────────


def write_grouped_dumps(directory: Path, correlation: float, prompts: int = 48, samples: int = 4) -> Path:
    """Two steps of verl dumps, ``prompts`` prompts of ``samples`` responses each, the same prompt texts in both
    steps (a group is a prompt in one step)."""
    directory.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for step in (1, 2):
        counts = LOGNORMAL.sample_groups(rng, prompts, samples, correlation)
        records = [
            {"input": f"prompt {p}", "output": " ".join(["w"] * int(n)), "gts": "1", "score": 0.0, "step": step}
            for p, row in enumerate(counts)
            for n in row
        ]
        (directory / f"{step}.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    return directory


def test_lengths_of_grouped_dumps_print_and_report_the_correlation(tmp_path: Path, capsys) -> None:
    dumps = write_grouped_dumps(tmp_path / "dumps", 0.7)
    assert main(["lengths", str(dumps), "--out", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    assert "96 groups of 4 samples" in printed  # 48 prompts in each of two steps
    report = json.loads((tmp_path / "out" / "fits.json").read_text())["group_correlation"]
    low, high = report["interval_95"]
    assert low <= 0.7 <= high and report["groups"] == 96
    assert f"group_correlation: {report['value']:.4g}" in printed


def test_dumps_of_one_sample_a_prompt_say_so(tmp_path: Path, capsys) -> None:
    dumps = write_grouped_dumps(tmp_path / "dumps", 0.0, samples=1)
    assert main(["lengths", str(dumps), "--out", str(tmp_path / "out")]) == 0
    assert "workload.group_correlation not fitted" in capsys.readouterr().out
    assert "group_correlation" not in json.loads((tmp_path / "out" / "fits.json").read_text())
