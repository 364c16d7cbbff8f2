"""Length distributions: truncated means worked in closed form, samples within bounds."""

from __future__ import annotations

import math

import numpy as np
import pytest
from asyncrl.scenarios.spec.distributions import Fixed, LogNormal, Pareto
from hypothesis import given
from hypothesis import strategies as st


def test_lognormal_truncated_mean_matches_samples() -> None:
    lengths = LogNormal(kind="lognormal", median=1024, sigma=1.0, max_tokens=8192)
    drawn = lengths.sample(np.random.default_rng(0), 400_000)
    assert drawn.mean() == pytest.approx(lengths.mean, rel=0.01)
    # Without the cap the mean would be median · exp(σ²/2) ≈ 1688; the cap takes some of it.
    assert lengths.mean < 1024 * math.exp(0.5)


def test_pareto_truncated_mean_worked_by_hand() -> None:
    # alpha = 2, scale 100, cap 400: 100 + ∫_100^400 (100/x)² dx = 100 + 100² (1/100 − 1/400) = 175
    assert Pareto(kind="pareto", scale=100, alpha=2.0, max_tokens=400).mean == pytest.approx(175.0)
    # alpha = 1: 100 + 100 ln 4
    assert Pareto(kind="pareto", scale=100, alpha=1.0, max_tokens=400).mean == pytest.approx(100 + 100 * math.log(4))


def test_pareto_samples_match_their_mean() -> None:
    lengths = Pareto(kind="pareto", scale=100, alpha=1.5, max_tokens=4000)
    assert lengths.sample(np.random.default_rng(1), 400_000).mean() == pytest.approx(lengths.mean, rel=0.01)


@given(st.floats(1, 5000), st.floats(0.01, 3), st.integers(1, 20_000), st.integers(0, 2**32 - 1))
def test_samples_are_integers_within_one_and_the_cap(median: float, sigma: float, extra: int, seed: int) -> None:
    lengths = LogNormal(kind="lognormal", median=median, sigma=sigma, max_tokens=math.ceil(median) + extra)
    drawn = lengths.sample(np.random.default_rng(seed), 256)
    assert drawn.dtype == np.int64
    assert drawn.min() >= 1 and drawn.max() <= lengths.cap


def test_fixed_is_fixed_and_capped() -> None:
    assert Fixed(kind="fixed", value=7).sample(np.random.default_rng(0), 3).tolist() == [7, 7, 7]
    assert Fixed(kind="fixed", value=7, max_tokens=5).sample(np.random.default_rng(0), 2).tolist() == [5, 5]
