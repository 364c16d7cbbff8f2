"""Snedecor's F distribution without scipy: its quantiles, for the F-interval of an intraclass correlation
(``analysis.fits.lengths.fit_group_correlation``).

    I_x(a, b)  the regularized incomplete beta function (a continued fraction)
    P(F ≤ f) = I_{d1 f / (d1 f + d2)}(d1 / 2, d2 / 2)  ─► bisection ─► the p-quantile
"""

from __future__ import annotations

import math


def beta_cdf(x: float, a: float, b: float) -> float:
    """The regularized incomplete beta function I_x(a, b): the continued fraction of Numerical Recipes (§6.4,
    modified Lentz), on the side of x where it converges fast."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x > (a + 1.0) / (a + b + 2.0):
        return 1.0 - beta_cdf(1.0 - x, b, a)
    tiny, c, d = 1e-300, 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    fraction = d
    for m in range(1, 500):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            fraction *= c * d
        if abs(c * d - 1.0) < 1e-13:
            break
    return math.exp(log_front) * fraction / a


def f_quantile(p: float, d1: float, d2: float) -> float:
    """The p-quantile of Snedecor's F with (d1, d2) degrees of freedom, by bisection on its CDF
    (P(F ≤ f) = I_{d1 f / (d1 f + d2)}(d1 / 2, d2 / 2)), to 1e-10 relative."""
    low, high = 0.0, 1.0
    while beta_cdf(d1 * high / (d1 * high + d2), d1 / 2, d2 / 2) < p:
        high *= 2.0
    while high - low > 1e-10 * high:
        middle = (low + high) / 2
        if beta_cdf(d1 * middle / (d1 * middle + d2), d1 / 2, d2 / 2) < p:
            low = middle
        else:
            high = middle
    return (low + high) / 2
