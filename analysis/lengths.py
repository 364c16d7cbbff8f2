"""Completion lengths from logs: count them, fit the scenario's length distributions, say how well each fits.

    FILE.jsonl ─► read_field ─► counts (token counts / ids) or text ─► count_text (tokenizer, words, characters)
                                                                        │
                    lengths.txt (kind: empirical) ◄──────── lengths ────┤
                    fits: lognormal, pareto (closed-form MLE) ◄─────────┤
                    KS distance of each fit to the lengths  ◄───────────┘

Both fits are maximum-likelihood in closed form, so no scipy is needed: lognormal
``median = exp(mean(ln x))``, ``sigma = std(ln x)``; Pareto ``scale = min(x)``,
``alpha = n / Σ ln(x / scale)``. Each is capped at the longest length seen
(``--max-tokens`` to change it) the way the scenario's distributions are. The
goodness of fit is the Kolmogorov-Smirnov distance between the observed lengths
and the fitted distribution *as the scenario draws it* (rounded to integers,
truncated at the cap), over every integer length, so the mass the cap gathers
is counted. The fits ignore that logged completions were themselves cut at a
cap (the ones that hit it are counted at the cap): where many did, prefer the
empirical file.

A training framework's metrics log (``analysis.metrics_log``: verl's per-step
``response_length/mean``, ``/max``, ``/clip_ratio``) holds no single length,
only per-step figures of each batch; ``fit_from_metrics`` finds the lognormal
whose *capped* draws reproduce two of them, in closed form for L = exp(mu + sigma Z)
capped at c, solved by bisection on sigma:

    E[min(L, c)] = exp(mu + sigma²/2) Φ((ln c − mu − sigma²)/sigma) + c (1 − Φ((ln c − mu)/sigma))  ◄ mean
    P(L ≥ c)     = 1 − Φ((ln c − mu)/sigma)                                                      ◄ clip ratio
    median of the longest of n draws = exp(mu + sigma Φ⁻¹(0.5^(1/n)))                            ◄ max, no clipping
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist
from typing import TYPE_CHECKING, Any

import numpy as np
from asyncrl.analysis.metrics_log import MetricsLog, MetricsLogError, require
from asyncrl.scenarios.distributions import Fixed, LogNormal, Pareto
from asyncrl.scenarios.jsonl import is_text, read_field, token_counts
from asyncrl.scenarios.limits import MAX_SIGMA, MAX_TOKENS
from asyncrl.scenarios.loading import ScenarioError

if TYPE_CHECKING:
    import pandas as pd

QUANTILES = (0.5, 0.9, 0.99)
#: Standard normal quantiles of QUANTILES.
NORMAL_QUANTILES = {0.5: 0.0, 0.9: 1.2815515655446004, 0.99: 2.3263478740408408}


@dataclass(frozen=True)
class Lengths:
    """Lengths read from a log, and what one length counts."""

    source: Path
    field: str
    values: np.ndarray
    unit: str  # tokens, words or characters
    how: str  # how they were counted, in words
    counted_from_text: bool


@dataclass(frozen=True)
class Fit:
    """One fitted distribution and how far the observed lengths are from it."""

    distribution: LogNormal | Pareto
    ks: float
    parameters: dict[str, float] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return self.distribution.kind

    def snippet(self) -> str:
        """The scenario's ``completion_tokens`` line for this fit."""
        fields = ", ".join(f"{name}: {_round(value)}" for name, value in self.parameters.items())
        return f"completion_tokens: {{kind: {self.kind}, {fields}, max_tokens: {self.distribution.cap}}}"


# ── reading ─────────────────────────────────────────────────────────────────────


def read_lengths(path: Path, field: str | None, tokenizer: str | None, count: str) -> Lengths:
    """The lengths in a JSONL log: counts and id lists as they are, text counted by ``tokenizer`` or ``count``."""
    try:
        name, values = read_field(path, field)
        if not is_text(values):
            if tokenizer is not None:
                raise ValueError(f"--tokenizer: field {name!r} holds token counts or ids, not text")
            return Lengths(
                path, name, token_counts(values, f"{path.name}:{name}"), "tokens", "token counts as logged", False
            )
        if any(not isinstance(value, str) for value in values):
            raise ValueError(f"field: {name!r} mixes text with other values")
        counted, unit, how = count_text(values, tokenizer, count)
    except ValueError as exc:
        raise ScenarioError(_flagged(str(exc))) from None
    if counted.min() < 1:
        empty = int(np.argmin(counted)) + 1
        raise ScenarioError(f"--field: record {empty} of {path} is an empty completion ({unit}: 0)")
    return Lengths(path, name, counted, unit, how, True)


def count_text(texts: list[str], tokenizer: str | None, count: str) -> tuple[np.ndarray, str, str]:
    """Lengths of texts: tokens of a local tokenizer, else whitespace-separated words or characters."""
    if tokenizer is not None:
        from asyncrl.executor.hf_tokenizer import load_hf_tokenizer

        try:
            loaded = load_hf_tokenizer(tokenizer)
        except ValueError as exc:
            raise ValueError(f"--tokenizer: {exc}") from None
        ids = loaded(texts, add_special_tokens=False)["input_ids"]
        return (
            np.asarray([len(row) for row in ids], dtype=np.int64),
            "tokens",
            f"tokens of the tokenizer at {tokenizer}",
        )
    if count == "chars":
        return np.asarray([len(text) for text in texts], dtype=np.int64), "characters", "characters (no --tokenizer)"
    words = np.asarray([len(text.split()) for text in texts], dtype=np.int64)
    return words, "words", "whitespace-separated words (no --tokenizer; not model tokens)"


def _flagged(message: str) -> str:
    """A reader's ``field:``/``path:`` message as the command's flag."""
    if message.startswith("field: "):
        return "--field: " + message.removeprefix("field: ")
    return message.removeprefix("path: ")


# ── fitting ─────────────────────────────────────────────────────────────────────


def fit_lognormal(lengths: np.ndarray, cap: int) -> Fit:
    """Maximum likelihood: median = exp(mean ln x), sigma = std ln x (ddof 0)."""
    logs = np.log(lengths.astype(np.float64))
    median, sigma = float(np.exp(logs.mean())), float(logs.std())
    distribution = LogNormal(kind="lognormal", median=median, sigma=sigma, max_tokens=max(cap, math.ceil(median)))
    return Fit(distribution, ks_distance(lengths, distribution), {"median": median, "sigma": sigma})


def fit_pareto(lengths: np.ndarray, cap: int) -> Fit:
    """Maximum likelihood: scale = the smallest length, alpha = n / Σ ln(x / scale)."""
    scale = float(lengths.min())
    alpha = float(len(lengths) / np.log(lengths / scale).sum())
    distribution = Pareto(kind="pareto", scale=scale, alpha=alpha, max_tokens=cap)
    return Fit(distribution, ks_distance(lengths, distribution), {"scale": scale, "alpha": alpha})


def fit_all(lengths: np.ndarray, cap: int | None = None) -> list[Fit]:
    """Lognormal and Pareto fits, capped at ``cap`` (default: the longest length)."""
    if len(np.unique(lengths)) < 2:
        raise ScenarioError(f"--field: every completion has the same length ({int(lengths[0])}); use kind: fixed")
    cap = int(lengths.max()) if cap is None else cap
    return [fit_lognormal(lengths, cap), fit_pareto(lengths, cap)]


def drawn_cdf(distribution: LogNormal | Pareto, k: np.ndarray) -> np.ndarray:
    """P(length ≤ k) for integer k as the scenario draws lengths: rounded, at least 1, at most the cap."""
    x = k.astype(np.float64) + 0.5
    if isinstance(distribution, LogNormal):
        z = (np.log(x) - math.log(distribution.median)) / distribution.sigma
        cdf = 0.5 * (1.0 + _erf(z / math.sqrt(2.0)))
    else:
        cdf = np.where(x < distribution.scale, 0.0, 1.0 - (distribution.scale / x) ** distribution.alpha)
    return np.where(k >= distribution.cap, 1.0, cdf)


def ks_distance(lengths: np.ndarray, distribution: LogNormal | Pareto) -> float:
    """Kolmogorov-Smirnov distance: the largest gap between the observed and the drawn CDF at any length."""
    k = np.arange(1, max(int(lengths.max()), distribution.cap) + 1)
    observed = np.searchsorted(np.sort(lengths), k, side="right") / len(lengths)
    return float(np.abs(observed - drawn_cdf(distribution, k)).max())


def fitted_quantile(distribution: LogNormal | Pareto, p: float) -> float:
    """The p-quantile of the fitted distribution, capped."""
    if isinstance(distribution, LogNormal):
        value = distribution.median * math.exp(distribution.sigma * NORMAL_QUANTILES[p])
    else:
        value = distribution.scale * (1.0 - p) ** (-1.0 / distribution.alpha)
    return min(value, distribution.cap)


def _erf(values: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(values)


# ── output ──────────────────────────────────────────────────────────────────────


def write_lengths(lengths: np.ndarray, out: Path) -> Path:
    """One integer per line: what ``kind: empirical`` reads."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(f"{int(value)}\n" for value in lengths))
    return out


def summary_rows(lengths: np.ndarray, fits: list[Fit]) -> list[list[Any]]:
    """Observed figures against each fit's: mean, quantiles, the cap, the KS distance."""
    rows: list[list[Any]] = [["mean", float(lengths.mean()), *(fit.distribution.mean for fit in fits)]]
    for p in QUANTILES:
        rows.append(
            [f"p{p * 100:g}", float(np.quantile(lengths, p)), *(fitted_quantile(fit.distribution, p) for fit in fits)]
        )
    rows.append(["max / cap", int(lengths.max()), *(fit.distribution.cap for fit in fits)])
    rows.append(["KS distance", "-", *(f"{fit.ks:.3f}" for fit in fits)])
    return rows


def lengths_report(lengths: Lengths, fits: list[Fit], lengths_file: Path) -> dict[str, Any]:
    """What ``asyncrl lengths`` found, as JSON."""
    return {
        "source": str(lengths.source),
        "field": lengths.field,
        "unit": lengths.unit,
        "counted": lengths.how,
        "records": len(lengths.values),
        "lengths_file": str(lengths_file),
        "fits": [
            {
                "kind": fit.kind,
                **fit.parameters,
                "max_tokens": fit.distribution.cap,
                "ks": fit.ks,
                "snippet": fit.snippet(),
            }
            for fit in fits
        ],
    }


def lengths_lines(lengths: Lengths, fits: list[Fit], lengths_file: Path, plot: Path | None) -> str:
    """The terminal's account: what was read and counted, observed against fitted, and a snippet per choice."""
    from asyncrl.analysis.tables import format_table

    header = ["figure", f"observed ({lengths.unit})", *(fit.kind for fit in fits)]
    snippets = [(f"{fit.kind} (KS {fit.ks:.3f})", fit.snippet()) for fit in fits]
    snippets.append(("empirical", f"completion_tokens: {{kind: empirical, path: {lengths_file}}}"))
    if not lengths.counted_from_text:
        direct = f"completion_tokens: {{kind: empirical, path: {lengths.source}, field: {lengths.field}}}"
        snippets.append(("empirical, the log itself", direct))
    width = max(len(label) for label, _ in snippets)
    lines = [
        f"{lengths.source}: {len(lengths.values):,} completions, field {lengths.field}, counted as {lengths.how}",
        format_table(header, summary_rows(lengths.values, fits)),
        "",
        "scenario snippets (workload.completion_tokens; a path is relative to the scenario file):",
        *(f"  {label.ljust(width)}  {text}" for label, text in snippets),
    ]
    if lengths.unit != "tokens":
        lines.append(f"note: these lengths are {lengths.unit}, not model tokens; give --tokenizer PATH to count tokens")
    written = [str(lengths_file), str(lengths_file.with_name("fits.json")), *([str(plot)] if plot else [])]
    lines.append(f"wrote {', '.join(written)}")
    return "\n".join(lines)


def _round(value: float) -> str:
    """Four significant digits: enough for a length distribution, short enough to paste."""
    return f"{float(f'{value:.4g}'):g}"


# ── from a metrics log: a capped lognormal pinned by two per-step figures ───────

RESPONSE_MEAN, RESPONSE_MAX, CLIP_RATIO = "response_length/mean", "response_length/max", "response_length/clip_ratio"
PROMPT_MEAN, PROMPT_MAX = "prompt_length/mean", "prompt_length/max"
#: The sigmas searched: (0, MAX_SIGMA], the scenario's own bounds; the grid finds where the mean turns.
SIGMA_GRID = np.linspace(MAX_SIGMA / 4000, MAX_SIGMA, 4000)
#: The share of the steps at each end of the log whose mean lengths the drift compares.
DRIFT_SHARE = 0.1
_NORMAL = NormalDist()


@dataclass(frozen=True)
class Target:
    """One figure of the log against the fitted distribution's value of it."""

    figure: str
    key: str
    logged_as: str  # how the steps' values make the log's figure: their mean or their median
    logged: float | None
    fitted: float | None
    pins: bool  # one of the two figures the fit reproduces


@dataclass(frozen=True)
class Drift:
    """How response_length/mean moves over the log: the means of its first and last steps, and its range."""

    window: int  # steps averaged at each end
    first: float
    last: float
    lowest: float
    highest: float


@dataclass(frozen=True)
class MetricsFit:
    """The capped lognormal whose mean and clip ratio (or typical maximum) are a metrics log's."""

    source: Path
    steps: int  # steps with a response_length/mean
    step_range: tuple[int, int]
    distribution: LogNormal
    cap_from: str
    samples_per_step: int | None
    targets: tuple[Target, ...]
    drift: Drift
    prompt: Fixed | None = None
    prompt_max: float | None = None

    def completion_tokens(self) -> dict[str, Any]:
        """The scenario's ``completion_tokens``, rounded as the snippet is."""
        lognormal = self.distribution
        median, sigma = float(_round(lognormal.median)), float(_round(lognormal.sigma))
        return {"kind": "lognormal", "median": median, "sigma": sigma, "max_tokens": lognormal.cap}

    def prompt_tokens(self) -> dict[str, Any] | None:
        return None if self.prompt is None else {"kind": "fixed", "value": self.prompt.value}

    def snippet(self) -> str:
        return "completion_tokens: " + _flow(self.completion_tokens())

    def prompt_snippet(self) -> str | None:
        prompt = self.prompt_tokens()
        return None if prompt is None else "prompt_tokens: " + _flow(prompt)

    def pinned_by(self) -> str:
        """The two figures the fit reproduces, in words."""
        return " and the ".join(target.figure for target in self.targets if target.pins)

    def verl_notes(self, prompt_from_log: bool) -> list[str]:
        """What from-verl says about the lengths it planned with (the prompts' only where they came from the log)."""
        notes = [
            f"workload.completion_tokens: lognormal fitted to {self.source}'s response_length/mean, /max, /clip_ratio "
            f"over {self.steps} steps (it reproduces the {self.pinned_by()}; {self.drift_words()})"
        ]
        if prompt_from_log and self.prompt is not None:
            longest = f", the longest {self.prompt_max:,.0f}" if self.prompt_max is not None else ""
            notes.append(
                f"workload.prompt_tokens: every prompt at {self.source}'s mean {PROMPT_MEAN}, {self.prompt.value}"
                f"{longest}"
            )
        return notes

    def drift_words(self) -> str:
        drift = self.drift
        steps = "step" if drift.window == 1 else f"{drift.window} steps"
        return (
            f"response_length/mean drifts from {drift.first:,.0f} (its first {steps}) to {drift.last:,.0f} "
            f"(its last {steps}), per step {drift.lowest:,.0f} to {drift.highest:,.0f}: "
            "one stationary distribution stands for all of them"
        )


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
    cap_flag: str = "--max-tokens",
    samples_flag: str = "--samples-per-step",
) -> MetricsFit:
    """The lognormal (median, sigma) whose capped draws have the log's mean response length and, where
    responses were clipped, its mean clip ratio; where none were, the typical response_length/max of
    ``samples_per_step`` draws. The cap: ``max_tokens``, else the longest response when some were clipped.
    A MetricsLogError names what the log lacks, or the flag (``cap_flag``, ``samples_flag``) to give."""
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
    return MetricsFit(
        log.source, len(rows), steps, distribution, cap_from, samples_per_step, targets, drift, prompt, prompt_max
    )


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
        f"--max-tokens: no step of {log.source} shows the cap (no {CLIP_RATIO} above 0 with a {RESPONSE_MAX}); "
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


def _flow(mapping: dict[str, Any]) -> str:
    """A mapping as a one-line YAML flow mapping, numbers as the snippets write them."""
    shown = (f"{key}: {_round(value) if isinstance(value, float) else value}" for key, value in mapping.items())
    return "{" + ", ".join(shown) + "}"


def verl_metrics_fit(lengths: str | None, config: dict[str, Any]) -> MetricsFit | None:
    """``from-verl --lengths LOG``'s fit where LOG is a metrics log (else None): the cap is
    data.max_response_length, the responses per step data.train_batch_size × actor_rollout_ref.rollout.n."""
    from asyncrl.analysis.metrics_log import is_metrics_log, read_metrics_log
    from asyncrl.scenarios.verl import lookup

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


def metrics_fit_report(fit: MetricsFit, log: MetricsLog) -> dict[str, Any]:
    """What ``asyncrl lengths --from-log`` found, as JSON."""
    lognormal = fit.distribution
    return {
        "source": str(fit.source),
        "format": log.format,
        "steps": fit.steps,
        "first_step": fit.step_range[0],
        "last_step": fit.step_range[1],
        "samples_per_step": fit.samples_per_step,
        "fit": {"kind": "lognormal", "median": lognormal.median, "sigma": lognormal.sigma, "max_tokens": lognormal.cap},
        "cap_from": fit.cap_from,
        "targets": [
            {"figure": t.figure, "key": t.key, "logged_as": t.logged_as, "logged": t.logged, "fitted": t.fitted}
            | {"pins": t.pins}
            for t in fit.targets
        ],
        "drift": vars(fit.drift),
        "prompt_tokens": fit.prompt_tokens(),
        "prompt_max": fit.prompt_max,
        "snippet": fit.snippet(),
        "prompt_snippet": fit.prompt_snippet(),
    }


def metrics_fit_lines(fit: MetricsFit, log: MetricsLog, fits_file: Path) -> str:
    """The terminal's account: the steps read, logged against fitted, the drift, and the snippet."""
    from asyncrl.analysis.tables import format_table

    first, last = fit.step_range
    rows = [
        [f"{_figure(target, fit)} ({target.logged_as} of {target.key})", *_cells(target), _role(target)]
        for target in fit.targets
    ]
    snippets = [fit.snippet()]
    if fit.prompt is not None:
        longest = f", longest {fit.prompt_max:,.0f}" if fit.prompt_max is not None else ""
        snippets.append(f"{fit.prompt_snippet()}  # the mean {PROMPT_MEAN}{longest}")
    return "\n".join(
        [
            f"{fit.source} ({log.format}): {fit.steps:,} steps with {RESPONSE_MEAN}, steps {first:,} to {last:,}; "
            f"cap {fit.distribution.cap:,} ({fit.cap_from})",
            format_table(["figure (over the steps)", "logged", "fitted", "role"], rows),
            *(["(give --samples-per-step to check the typical max)"] if fit.samples_per_step is None else []),
            fit.drift_words(),
            "",
            "scenario snippet (workload):",
            *(f"  {snippet}" for snippet in snippets),
            f"wrote {fits_file}",
        ]
    )


def _figure(target: Target, fit: MetricsFit) -> str:
    """The figure's name; the typical maximum says of how many responses."""
    if target.key == RESPONSE_MAX and fit.samples_per_step is not None:
        return f"{target.figure} of {fit.samples_per_step:,}"
    return target.figure


def _cells(target: Target) -> list[str | float]:
    return ["-" if value is None else float(value) for value in (target.logged, target.fitted)]


def _role(target: Target) -> str:
    """A figure the fit reproduces (target), one it predicts (check), or one it cannot without the responses per step."""
    if target.pins:
        return "target"
    return "check" if target.fitted is not None else "-"
