"""Completion lengths from a training framework's metrics log: a capped lognormal pinned by per-step figures.

    LOG (analysis.metrics_log) ─► per step: response_length/mean, /max, /clip_ratio, prompt_length/mean
        ─► fit_from_metrics ─► LogNormal (median, sigma, the cap) + the fixed prompt length
        ─► analysis.metrics_fit: MetricsFit, metrics_fit_lines / metrics_fit_report (``asyncrl lengths --from-log``)
        verl_metrics_fit (from-verl: the cap and the responses per step from the verl config)

A training framework's metrics log (``analysis.metrics_log``: verl's per-step
``response_length/mean``, ``/max``, ``/clip_ratio``) holds no single length,
only per-step figures of each batch; ``fit_from_metrics`` finds the lognormal
whose *capped* draws reproduce two of them, in closed form for L = exp(mu + sigma Z)
capped at c, solved by bisection on sigma:

    E[min(L, c)] = exp(mu + sigma²/2) Φ((ln c − mu − sigma²)/sigma) + c (1 − Φ((ln c − mu)/sigma))  ◄ mean
    P(L ≥ c)     = 1 − Φ((ln c − mu)/sigma)                                                      ◄ clip ratio
    median of the longest of n draws = exp(mu + sigma Φ⁻¹(0.5^(1/n)))                            ◄ max, no clipping

Where the responses drift (the mean of one of ``SCALE_WINDOWS`` consecutive windows of steps more than
``SCALE_DRIFT`` from another's), ``scale_by_step`` follows them: each window's median, sigma held, solved so the
capped mean is the window's, as a factor of the whole log's median at the window's middle step
(``workload.completion_scale_by_step``; verl's step s is the scenario's learner step s − 1).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist
from typing import TYPE_CHECKING, Any

import numpy as np
from asyncrl.scenarios.files.limits import MAX_SIGMA, MAX_TOKENS
from asyncrl.scenarios.spec.distributions import Fixed, LogNormal

from asyncrl.frameworks.common.metrics_fit import (
    CLIP_RATIO,
    PROMPT_MAX,
    PROMPT_MEAN,
    RESPONSE_MAX,
    RESPONSE_MEAN,
    Drift,
    MetricsFit,
    Target,
)
from asyncrl.frameworks.common.metrics_fit import (
    metrics_fit_lines as metrics_fit_lines,  # asyncrl.cli imports it from here
)
from asyncrl.frameworks.common.metrics_fit import metrics_fit_report as metrics_fit_report
from asyncrl.frameworks.common.metrics_log import MetricsLog, MetricsLogError, require

if TYPE_CHECKING:
    import pandas as pd


# ── from a metrics log: a capped lognormal pinned by two per-step figures ───────

#: The sigmas searched: (0, MAX_SIGMA], the scenario's own bounds; the grid finds where the mean turns.
SIGMA_GRID = np.linspace(MAX_SIGMA / 4000, MAX_SIGMA, 4000)
#: The share of the steps at each end of the log whose mean lengths the drift compares.
DRIFT_SHARE = 0.1
SCALE_WINDOWS = 5  # windows of steps whose medians scale_by_step follows ...
SCALE_DRIFT = 0.15  # ... where their mean lengths differ by more than this
_NORMAL = NormalDist()


def capped_mean(mu: float, sigma: float, cap: float) -> float:
    """E[min(L, cap)] for L = exp(mu + sigma Z)."""
    log_cap = math.log(cap)
    below = math.exp(mu + sigma * sigma / 2) * _NORMAL.cdf((log_cap - mu - sigma * sigma) / sigma)
    return below + cap * clip_probability(mu, sigma, cap)


def clip_probability(mu: float, sigma: float, cap: float) -> float:
    """P(L ≥ cap): the share of responses that stop at the cap (as Φ(−z), which keeps a tiny share's digits)."""
    return _NORMAL.cdf((mu - math.log(cap)) / sigma)


def typical_max(mu: float, sigma: float, cap: float, samples: int) -> float:
    """The median of the longest of ``samples`` capped draws: the 0.5^(1/samples) quantile."""
    return min(math.exp(mu + sigma * _max_quantile(samples)), cap)


def _max_quantile(samples: int) -> float:
    """z with Φ(z) = 0.5^(1/samples), written through 1 − Φ(z) so no precision is lost for large samples."""
    return -_NORMAL.inv_cdf(-math.expm1(math.log(0.5) / samples))


def fit_from_metrics(
    log: MetricsLog,
    *,
    samples_per_step: int | None,
    max_tokens: int | None,
    cap_flag: str = "max_tokens",
    samples_flag: str = "samples_per_step",
) -> MetricsFit:
    """The lognormal (median, sigma) whose capped draws have the log's mean response length and, where
    responses were clipped, its mean clip ratio; where none were, the typical response_length/max of
    ``samples_per_step`` draws. The cap: ``max_tokens``, else the longest response when some were clipped.
    A MetricsLogError names what the log lacks, or the argument to give: ``cap_flag``, ``samples_flag`` (the
    command line passes its flags; ``cap_flag`` is also the ``cap_from`` of a cap given)."""
    require(log, [RESPONSE_MEAN])
    rows = log.rows[log.rows[RESPONSE_MEAN].notna()]
    mean, clip, maxima = rows[RESPONSE_MEAN], _column(rows, CLIP_RATIO), _column(rows, RESPONSE_MAX)
    cap, cap_from = _cap(log, maxima, clip, max_tokens, cap_flag)
    logged = _Logged(
        float(mean.mean()), float(clip.mean()), CLIP_RATIO in log.keys, float(maxima.median()) if len(maxima) else None
    )
    if logged.clip > 0:
        mu, sigma = _solve_with_clip(log.source, logged.mean, logged.clip, cap)
    else:
        maximum, samples = _max_and_samples(log, logged.max, samples_per_step, samples_flag)
        mu, sigma = _solve_with_max(log.source, logged.mean, maximum, cap, samples)
    if math.exp(mu) > cap:
        raise MetricsLogError(
            f"{log.source}: {logged.clip:.0%} of responses hit the cap of {cap:,}: a lognormal's median would lie "
            "above it, which a scenario refuses; use {kind: fixed, value: CAP}"
        )
    distribution = LogNormal(kind="lognormal", median=math.exp(mu), sigma=sigma, max_tokens=cap)
    targets = _targets(logged, mu, sigma, cap, samples_per_step)
    prompt, prompt_max = _prompt(rows)
    steps = (int(rows.index.min()), int(rows.index.max()))
    drift = _drift(mean)
    scale = scale_by_step(mean, mu, sigma, cap)
    return MetricsFit(
        log.source,
        len(rows),
        steps,
        distribution,
        cap_from,
        samples_per_step,
        targets,
        drift,
        prompt,
        prompt_max,
        scale,
    )


def scale_by_step(mean: pd.Series, mu: float, sigma: float, cap: float) -> tuple[tuple[int, float], ...] | None:
    """The windows' medians as factors of exp(mu) at their middle steps (module docstring), or None where the
    log's responses hold steady (or it has too few steps for ``SCALE_WINDOWS`` windows of two)."""
    if len(mean) < 2 * SCALE_WINDOWS:
        return None
    steps, values = mean.index.to_numpy(dtype=np.int64), mean.to_numpy(dtype=np.float64)
    windows = np.array_split(np.arange(len(values)), SCALE_WINDOWS)
    means = np.array([values[index].mean() for index in windows])
    if means.max() / means.min() - 1 <= SCALE_DRIFT:
        return None
    points = []
    for index, window_mean in zip(windows, means, strict=True):
        middle = round(float(np.median(steps[index]))) - 1
        points.append((max(0, middle), float(f"{math.exp(_mu_for_mean(window_mean, sigma, cap) - mu):.4g}")))
    return tuple(points)


def _mu_for_mean(target: float, sigma: float, cap: float) -> float:
    """The mu whose capped mean at ``sigma`` is ``target`` (bisection: the capped mean rises with mu), the
    cap's own log where the target is at the cap."""
    low, high = -20.0, math.log(cap)
    if capped_mean(high, sigma, cap) <= target:
        return high
    for _ in range(100):
        middle = (low + high) / 2
        low, high = (middle, high) if capped_mean(middle, sigma, cap) < target else (low, middle)
    return (low + high) / 2


def _column(rows: pd.DataFrame, key: str) -> pd.Series:
    """A key's values over the steps (NaN throughout where the log lacks it), NaN read as 0 for the clip ratio."""
    import pandas as pd

    values = rows[key] if key in rows else pd.Series(np.nan, index=rows.index)
    return values.fillna(0.0) if key == CLIP_RATIO else values.dropna()


@dataclass(frozen=True)
class _Logged:
    """The log's figures over its steps: the mean of the means and of the clip ratios, the median maximum."""

    mean: float
    clip: float  # 0 where the log has no clip ratio
    has_clip: bool
    max: float | None


def _cap(log: MetricsLog, maxima: pd.Series, clip: pd.Series, max_tokens: int | None, flag: str) -> tuple[int, str]:
    """``max_tokens`` when given; else the longest response when some step clipped (those reached the cap)."""
    longest = float(maxima.max()) if len(maxima) else None
    if max_tokens is not None:
        if max_tokens > MAX_TOKENS:
            raise MetricsLogError(
                f"{flag}: {max_tokens:,} is above the longest length a scenario takes ({MAX_TOKENS:,})"
            )
        if longest is not None and longest > max_tokens:
            raise MetricsLogError(
                f"{flag}: {max_tokens} is below the longest response in {log.source} ({longest:,.0f})"
            )
        return max_tokens, flag
    if longest is not None and (clip > 0).any():
        return math.ceil(longest), f"the longest {RESPONSE_MAX}: the steps with {CLIP_RATIO} > 0 reached the cap"
    raise MetricsLogError(
        f"{flag}: no step of {log.source} shows the cap (no {CLIP_RATIO} above 0 with a {RESPONSE_MAX}); "
        "give it (verl's data.max_response_length)"
    )


def _max_and_samples(
    log: MetricsLog, maximum: float | None, samples_per_step: int | None, flag: str
) -> tuple[float, int]:
    """The typical maximum and the responses per step it is the longest of: with no clipping, they pin the tail."""
    require(log, [RESPONSE_MAX])
    if maximum is None:
        raise MetricsLogError(f"{log.source}: no step with a {RESPONSE_MEAN} logged a {RESPONSE_MAX}")
    if samples_per_step is None or samples_per_step < 2:
        given = "unknown" if samples_per_step is None else f"{samples_per_step}, fewer than 2"
        raise MetricsLogError(
            f"{flag}: no response in {log.source} hit the cap, so its {RESPONSE_MAX} pins the tail, and the "
            f"responses per step are {given} (verl: data.train_batch_size × actor_rollout_ref.rollout.n)"
        )
    return maximum, samples_per_step


def _solve_with_clip(source: Path, mean: float, clip: float, cap: int) -> tuple[float, float]:
    """P(L ≥ cap) = clip fixes (ln cap − mu) / sigma = z; the capped mean then falls as sigma grows, from cap to cap·clip."""
    if clip >= 1:
        raise MetricsLogError(f"{source}: every response hit the cap ({CLIP_RATIO} 1 in every step): no tail to fit")
    z = -_NORMAL.inv_cdf(clip)

    def mean_at(sigma: float) -> float:
        return capped_mean(math.log(cap) - sigma * z, sigma, cap)

    sigma = _bisect_falling(mean_at, mean, SIGMA_GRID[0], SIGMA_GRID[-1])
    if sigma is None:
        raise MetricsLogError(
            f"{source}: no capped lognormal has a mean response length of {mean:,.1f} with a clip ratio of {clip:.4g} "
            f"at a cap of {cap:,} (the mean must lie between cap × clip ratio, {cap * clip:,.1f}, and the cap)"
        )
    return math.log(cap) - sigma * z, sigma


def _solve_with_max(source: Path, mean: float, maximum: float, cap: int, samples: int) -> tuple[float, float]:
    """The 0.5^(1/n) quantile at the typical maximum fixes mu + sigma z_u = ln max; the capped mean falls with
    sigma from the maximum until it turns (near sigma = z_u): the fit takes that branch, the narrower tail."""
    z = _max_quantile(samples)

    def mean_at(sigma: float) -> float:
        return capped_mean(math.log(maximum) - sigma * z, sigma, cap)

    means = np.array([mean_at(float(sigma)) for sigma in SIGMA_GRID])
    rising = np.flatnonzero(np.diff(means) > 0)
    widest = float(SIGMA_GRID[rising[0]]) if len(rising) else float(SIGMA_GRID[-1])
    sigma = _bisect_falling(mean_at, mean, SIGMA_GRID[0], widest)
    if sigma is None:
        raise MetricsLogError(
            f"{source}: no capped lognormal whose longest of {samples:,} responses is typically {maximum:,.0f} has a "
            f"mean of {mean:,.1f} (it lies between {mean_at(widest):,.1f} and {maximum:,.0f})"
        )
    return math.log(maximum) - sigma * z, sigma


def _bisect_falling(function: Callable[[float], float], target: float, low: float, high: float) -> float | None:
    """The x in [low, high] where a falling function meets target; None when target is outside its range there."""
    if not function(high) <= target <= function(low):
        return None
    for _ in range(200):
        middle = (low + high) / 2
        low, high = (middle, high) if function(middle) > target else (low, middle)
        if high - low < 1e-12:
            break
    return (low + high) / 2


def _targets(logged: _Logged, mu: float, sigma: float, cap: int, samples: int | None) -> tuple[Target, ...]:
    """Each figure, logged and fitted; the clip ratio pins the fit where responses were clipped, else the maximum."""
    clipped = logged.clip > 0
    fitted_max = typical_max(mu, sigma, cap, samples) if samples is not None else None
    return (
        Target("mean", RESPONSE_MEAN, "mean", logged.mean, capped_mean(mu, sigma, cap), True),
        Target(
            "clip ratio",
            CLIP_RATIO,
            "mean",
            logged.clip if logged.has_clip else None,
            clip_probability(mu, sigma, cap),
            clipped,
        ),
        Target("typical max", RESPONSE_MAX, "median", logged.max, fitted_max, not clipped),
    )


def _drift(mean: pd.Series) -> Drift:
    window = max(1, int(len(mean) * DRIFT_SHARE))
    values = mean.to_numpy(dtype=np.float64)
    first, last = float(values[:window].mean()), float(values[-window:].mean())
    return Drift(window, first, last, float(values.min()), float(values.max()))


def _prompt(rows: pd.DataFrame) -> tuple[Fixed | None, float | None]:
    """Every prompt at the logged mean prompt length (rounded), with the longest logged for context."""
    if PROMPT_MEAN not in rows or rows[PROMPT_MEAN].isna().all():
        return None, None
    value = max(1, round(float(rows[PROMPT_MEAN].mean())))
    longest = float(rows[PROMPT_MAX].max()) if PROMPT_MAX in rows and rows[PROMPT_MAX].notna().any() else None
    return Fixed(kind="fixed", value=value), longest


def verl_metrics_fit(lengths: str | None, config: dict[str, Any]) -> MetricsFit | None:
    """``from-verl --lengths LOG``'s fit where LOG is a metrics log (else None): the cap is
    data.max_response_length, the responses per step data.train_batch_size × actor_rollout_ref.rollout.n."""
    from asyncrl.frameworks.common.metrics_log import is_metrics_log, read_metrics_log
    from asyncrl.frameworks.verl.importer import lookup

    path = Path(lengths).expanduser() if lengths is not None else None
    if path is None or not is_metrics_log(path):
        return None
    batch, group = lookup(config, "data.train_batch_size"), lookup(config, "actor_rollout_ref.rollout.n", 1)
    cap = lookup(config, "data.max_response_length", 512)
    if not _positive_int(cap):
        raise MetricsLogError(f"data.max_response_length: expected a positive integer, got {cap!r}")
    known = _positive_int(batch) and _positive_int(group)
    return fit_from_metrics(
        read_metrics_log(path),
        samples_per_step=batch * group if known else None,
        max_tokens=cap,
        cap_flag="data.max_response_length",
        samples_flag="data.train_batch_size",
    )


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
