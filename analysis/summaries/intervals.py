"""95% confidence intervals over seeds: of a mean (the t-distribution) and of a ratio of two means (the delta method).

    values ─► mean_ci  ─► (mean, half-width)    mean ± t(0.975, n − 1) · s / √n
    a, b   ─► ratio_ci ─► (ā / b̄, half-width)   R · t · √(s_a²/(n_a·ā²) + s_b²/(n_b·b̄²)), t at min(n_a, n_b) − 1
    a_i, b_i paired ─► paired_log_ratio_ci ─► (exp d̄, low, high, pairs)   d_i = log(a_i / b_i): exp(d̄ ± t · s_d / √n)

Missing values (None, NaN) are left out; with one value there is no interval (NaN).

**Why a t-interval on log ratios for paired seeds.** A ratio of two positive times is skewed and its log is not,
and seeds pair (one seed's draws are shared by both schedules), so the paired log ratios are about normal and
Student's t covers at its level from two pairs on where they are. The percentile bootstrap does not at the
study's sizes: resampling 3-5 pairs has only 10-126 distinct resamples, and its interval is too narrow by the
factor √((n − 1)/n) and more; ``python benchmarks/interval_coverage.py`` measures both on simulated lognormal
pairs (the bootstrap covers 73-83% where it claims 95%, the t-interval 95%). Below ``MIN_PAIRS`` pairs no interval
is printed at all: with 2-3 pairs t's quantile (12.7, 4.3) makes an interval that says little, and its coverage
rests wholly on the normality of the logs, which so few pairs cannot check.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np


def t_quantile(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` degrees of freedom (a 95% two-sided interval)."""
    if df < 1:
        return math.nan
    if df < len(_T975):
        return _T975[df]
    z = 1.959963984540054  # Cornish-Fisher expansion around the normal quantile: within 1e-5 from df = 10
    terms = (
        (z**3 + z) / 4,
        (5 * z**5 + 16 * z**3 + 3 * z) / 96,
        (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384,
        (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160,
    )
    return z + sum(term / df**power for power, term in enumerate(terms, start=1))


_T975 = (math.nan, 12.706205, 4.302653, 3.182446, 2.776445, 2.570582, 2.446912, 2.364624, 2.306004, 2.262157)


def mean_ci(values: Iterable[float]) -> tuple[float, float]:
    """The mean of the values that are numbers and the half-width of its 95% t-interval (NaN for one value)."""
    array = np.asarray([value for value in values if not missing(value)], dtype=float)
    if not array.size:
        return math.nan, math.nan
    mean = float(array.mean())
    if array.size < 2:
        return mean, math.nan
    return mean, t_quantile(array.size - 1) * float(array.std(ddof=1)) / math.sqrt(array.size)


def ratio_ci(numerator: Iterable[float], denominator: Iterable[float]) -> tuple[float, float]:
    """Mean of ``numerator`` over mean of ``denominator`` (independent samples), and its 95% half-width
    by the delta method with min(n_a, n_b) − 1 degrees of freedom (NaN with fewer than two of either)."""
    a = np.asarray([value for value in numerator if not missing(value)], dtype=float)
    b = np.asarray([value for value in denominator if not missing(value)], dtype=float)
    if not a.size or not b.size or b.mean() == 0:
        return math.nan, math.nan
    ratio = float(a.mean() / b.mean())
    if a.size < 2 or b.size < 2:
        return ratio, math.nan
    relative = a.var(ddof=1) / (a.size * a.mean() ** 2) + b.var(ddof=1) / (b.size * b.mean() ** 2)
    return ratio, t_quantile(min(a.size, b.size) - 1) * abs(ratio) * math.sqrt(relative)


MIN_PAIRS = 4  # the fewest paired seeds for which a ratio's interval is printed (module docstring)


def paired_log_ratio_ci(
    numerator: Iterable[float], denominator: Iterable[float], min_pairs: int = MIN_PAIRS
) -> tuple[float, float, float, int]:
    """The geometric mean of the paired ratios a_i / b_i over the pairs where both are positive numbers, the 95%
    t-interval of it (``exp(d̄ ± t(0.975, n − 1) · s_d / √n)`` with d_i = log(a_i / b_i)), and the pairs used.
    No interval (NaN) with fewer than ``min_pairs`` pairs."""
    pairs = [
        (float(a), float(b))
        for a, b in zip(numerator, denominator, strict=True)
        if not missing(a) and not missing(b) and float(a) > 0 and float(b) > 0
    ]
    if not pairs:
        return math.nan, math.nan, math.nan, 0
    logs = np.array([math.log(a / b) for a, b in pairs])
    centre = float(logs.mean())
    if len(pairs) < max(2, min_pairs):
        return math.exp(centre), math.nan, math.nan, len(pairs)
    half = t_quantile(len(pairs) - 1) * float(logs.std(ddof=1)) / math.sqrt(len(pairs))
    return math.exp(centre), math.exp(centre - half), math.exp(centre + half), len(pairs)


def paired_ratio_bootstrap(
    numerator: Iterable[float], denominator: Iterable[float], draws: int = 10_000, seed: int = 0
) -> tuple[float, float, float, int]:
    """Σ numerator / Σ denominator over the pairs, and the 2.5th and 97.5th percentiles of it over ``draws``
    resamples of the pairs: the percentile bootstrap the study used to print, kept to measure its coverage
    against ``paired_log_ratio_ci``'s (``benchmarks/interval_coverage.py``). No interval with fewer than 2 pairs."""
    pairs = [
        (float(a), float(b)) for a, b in zip(numerator, denominator, strict=True) if not missing(a) and not missing(b)
    ]
    if not pairs:
        return math.nan, math.nan, math.nan, 0
    a, b = (np.array(values) for values in zip(*pairs, strict=True))
    ratio = float(a.sum() / b.sum())
    if len(pairs) < 2:
        return ratio, math.nan, math.nan, 1
    picks = np.random.default_rng(seed).integers(0, len(pairs), size=(draws, len(pairs)))
    low, high = np.quantile(a[picks].sum(axis=1) / b[picks].sum(axis=1), [0.025, 0.975])
    return ratio, float(low), float(high), len(pairs)


def missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))
