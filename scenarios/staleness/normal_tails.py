"""The normal distribution's tails in logs, for the penalty's censored likelihood (``penalty_forms``).

log_normal_cdf(x)               log Φ(x), also far in the left tail where Φ underflows
log_interval_probability(a, b)  log(Φ(b) − Φ(a)), from the tail both lie on, without cancellation
"""

from __future__ import annotations

import math

import numpy as np


def log_normal_cdf(x: np.ndarray) -> np.ndarray:
    """log Φ(x), accurate in the far left tail (where Φ underflows) through the asymptotic series."""
    out = np.empty_like(x)
    for i, value in enumerate(x.flat):
        if value > -30.0:
            out.flat[i] = math.log(max(0.5 * math.erfc(-value / math.sqrt(2.0)), 1e-300))
        else:
            out.flat[i] = -0.5 * value * value - math.log(-value) - 0.5 * math.log(2.0 * math.pi)
    return out


def log_interval_probability(low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """log(Φ(high) − Φ(low)) for low < high, from the tail on the side both lie on (no cancellation); far out,
    where the difference underflows, the nearer end's tail."""
    out = np.empty_like(high)
    root = math.sqrt(2.0)
    for i, (a, b) in enumerate(zip(low.flat, high.flat, strict=True)):
        if a > 0:  # both in the upper tail: Q(a) − Q(b)
            probability = 0.5 * (math.erfc(a / root) - math.erfc(b / root))
            tail = -a
        else:
            probability = 0.5 * (math.erfc(-b / root) - math.erfc(-a / root))
            tail = b
        out.flat[i] = math.log(probability) if probability > 1e-300 else float(log_normal_cdf(np.array([tail]))[0])
    return out
