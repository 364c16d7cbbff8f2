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

Where the lengths come in groups (verl's rollout dumps: the samples of one prompt in one step), how alike a
group's lengths are is fitted too (``fit_group_correlation``), as ``workload.group_correlation`` takes it: the
intraclass correlation (one-way ANOVA, ICC(1)) of the lengths' normal scores, Φ⁻¹ of their mid-ranks, so
neither the tail nor the cap's pile of equal lengths sways it. Its 95% interval is the F-interval of ICC(1)
(Shrout and Fleiss 1979; exact for normal scores in equal groups): with F = MSB / MSW on (g − 1, N − g) degrees of
freedom, each end (F' − 1) / (F' + k₀ − 1) at F' = F / F₀.₉₇₅(g − 1, N − g) and F · F₀.₉₇₅(N − g, g − 1). A
percentile bootstrap over groups covered 82-90% where it claimed 95% (8-200 groups); this one holds its level
(tests/test_group_lengths.py measures both).

Lengths pinned by a training framework's per-step figures instead: ``analysis.log_lengths``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import ValidationError

from ...scenarios.files.jsonl import is_text, read_field, token_counts
from ...scenarios.files.limits import MAX_TOKENS
from ...scenarios.files.writing import write_text
from ...scenarios.spec.distributions import LogNormal, Pareto, normal_cdf
from ...scenarios.spec.loading import ScenarioError, describe_validation_error

if TYPE_CHECKING:
    pass

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
    groups: np.ndarray | None = None  # per length, its group (one prompt in one step); None: not grouped


@dataclass(frozen=True)
class GroupCorrelation:
    """``workload.group_correlation`` fitted to grouped lengths, with its 95% interval."""

    value: float
    low: float
    high: float
    groups: int
    mean_size: float

    def line(self) -> str:
        return (
            f"group_correlation: {significant(self.value)}  # 95% {self.low:.2f}-{self.high:.2f}, "
            f"{self.groups:,} groups of {self.mean_size:.3g} samples (their lengths' normal scores)"
        )


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
        fields = ", ".join(f"{name}: {significant(value)}" for name, value in self.parameters.items())
        return f"completion_tokens: {{kind: {self.kind}, {fields}, max_tokens: {self.distribution.cap}}}"


# ── reading ─────────────────────────────────────────────────────────────────────


def read_lengths(path: Path, field: str | None, tokenizer: str | None, count: str) -> Lengths:
    """The lengths in a JSONL log: counts and id lists as they are, text counted by ``tokenizer`` or ``count``."""
    try:
        name, values = read_field(path, field)
        if not is_text(values):
            if tokenizer is not None:
                raise ValueError(f"tokenizer: field {name!r} holds token counts or ids, not text")
            return Lengths(
                path, name, token_counts(values, f"{path.name}:{name}"), "tokens", "token counts as logged", False
            )
        if any(not isinstance(value, str) for value in values):
            raise ValueError(f"field: {name!r} mixes text with other values")
        counted, unit, how = count_text(values, tokenizer, count)
    except ValueError as exc:
        raise ScenarioError(str(exc).removeprefix("path: ")) from None
    if counted.min() < 1:
        empty = int(np.argmin(counted)) + 1
        raise ScenarioError(f"field: record {empty} of {path} is an empty completion ({unit}: 0)")
    return Lengths(path, name, counted, unit, how, True)


def count_text(texts: list[str], tokenizer: str | None, count: str) -> tuple[np.ndarray, str, str]:
    """Lengths of texts: tokens of a local tokenizer, else whitespace-separated words or characters."""
    if tokenizer is not None:
        from ...scenarios.spec.checkpoints import load_hf_tokenizer

        try:
            loaded = load_hf_tokenizer(tokenizer)
        except ValueError as exc:
            raise ValueError(f"tokenizer: {exc}") from None
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
        raise ScenarioError(f"field: every completion has the same length ({int(lengths[0])}); use kind: fixed")
    longest = int(lengths.max())
    cap = longest if cap is None else cap
    if cap < longest:
        raise ScenarioError(
            f"max_tokens: {cap:,} is below the longest length in the log ({longest:,}); give at least that"
        )
    if cap > MAX_TOKENS:
        raise ScenarioError(f"max_tokens: {cap:,} is above the longest length a scenario takes ({MAX_TOKENS:,})")
    try:
        return [fit_lognormal(lengths, cap), fit_pareto(lengths, cap)]
    except ValidationError as exc:  # a fit no scenario could take: say which and why, on one line
        raise ScenarioError(f"max_tokens: no fit at cap {cap:,}: {describe_validation_error(exc)}") from None


#: A group's samples per group at least, and groups at least, for a correlation to be fitted.
MIN_GROUP_SIZE, MIN_GROUPS = 2, 8
MAX_CORRELATION = 0.99  # the scenario takes ρ < 1


def normal_scores(values: np.ndarray) -> np.ndarray:
    """Φ⁻¹ of each value's mid-rank, (rank − ½) / n: ties (the cap) share one score."""
    from statistics import NormalDist

    order = np.sort(values)
    below = np.searchsorted(order, values, side="left")
    through = np.searchsorted(order, values, side="right")
    mid_rank = (below + through) / 2.0  # (rank − ½) averaged over the tied ranks, 0-based
    inverse = NormalDist().inv_cdf
    return np.array([inverse(float(u)) for u in mid_rank / len(values)], dtype=np.float64)


@dataclass(frozen=True)
class OneWayAnova:
    """Mean squares between and within groups, and the effective group size k₀ of unequal groups."""

    between: float
    within: float
    groups: int
    samples: int
    k0: float

    @classmethod
    def of(cls, scores: np.ndarray, index: np.ndarray) -> OneWayAnova:
        sizes = np.bincount(index).astype(np.float64)
        sums = np.bincount(index, scores)
        n, g = float(sizes.sum()), len(sizes)
        between = float((sums**2 / sizes).sum() - sums.sum() ** 2 / n)
        within = float((scores**2).sum() - (sums**2 / sizes).sum())
        k0 = (n - float((sizes**2).sum()) / n) / (g - 1)
        return cls(between / (g - 1), within / (n - g), g, int(n), k0)

    def icc(self, f: float) -> float:
        """ICC(1) at the variance ratio ``f`` (MSB / MSW itself, or an end of its interval)."""
        return min(max((f - 1.0) / (f + self.k0 - 1.0), 0.0), MAX_CORRELATION)


def fit_group_correlation(values: np.ndarray, groups: np.ndarray) -> GroupCorrelation | None:
    """The correlation of a group's lengths (module docstring), or None where fewer than ``MIN_GROUPS`` groups
    hold ``MIN_GROUP_SIZE`` samples or more (the lengths do not tell it)."""
    from .f_distribution import f_quantile

    _, index = np.unique(groups, return_inverse=True)
    keep = np.bincount(index)[index] >= MIN_GROUP_SIZE
    if len(np.unique(index[keep])) < MIN_GROUPS:
        return None
    _, index = np.unique(index[keep], return_inverse=True)
    anova = OneWayAnova.of(normal_scores(values[keep]), index)
    if anova.within <= 0:  # every group's lengths alike within it
        return GroupCorrelation(
            MAX_CORRELATION, MAX_CORRELATION, MAX_CORRELATION, anova.groups, anova.samples / anova.groups
        )
    f = anova.between / anova.within
    df_between, df_within = anova.groups - 1, anova.samples - anova.groups
    low = anova.icc(f / f_quantile(0.975, df_between, df_within))
    high = anova.icc(f * f_quantile(0.975, df_within, df_between))
    return GroupCorrelation(anova.icc(f), low, high, anova.groups, anova.samples / anova.groups)


def drawn_cdf(distribution: LogNormal | Pareto, k: np.ndarray) -> np.ndarray:
    """P(length ≤ k) for integer k as the scenario draws lengths: rounded, at least 1, at most the cap."""
    x = k.astype(np.float64) + 0.5
    if isinstance(distribution, LogNormal):
        z = (np.log(x) - math.log(distribution.median)) / distribution.sigma
        cdf = normal_cdf(z)
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


# ── output ──────────────────────────────────────────────────────────────────────


def write_lengths(lengths: np.ndarray, out: Path) -> Path:
    """One integer per line: what ``kind: empirical`` reads."""
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text(out, "".join(f"{int(value)}\n" for value in lengths))
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


def lengths_report(
    lengths: Lengths, fits: list[Fit], lengths_file: Path, correlation: GroupCorrelation | None = None
) -> dict[str, Any]:
    """What ``asyncrl lengths`` found, as JSON."""
    grouped = (
        {
            "group_correlation": {
                "value": correlation.value,
                "interval_95": [correlation.low, correlation.high],
                "groups": correlation.groups,
                "mean_group_size": correlation.mean_size,
            }
        }
        if correlation is not None
        else {}
    )
    return {
        **grouped,
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


def lengths_lines(
    lengths: Lengths,
    fits: list[Fit],
    lengths_file: Path,
    plot: Path | None,
    correlation: GroupCorrelation | None = None,
) -> str:
    """The terminal's account: what was read and counted, observed against fitted, and a snippet per choice."""
    from ..tables import format_table

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
    if correlation is not None:
        lines += [
            "how alike a group's lengths are (workload.group_correlation; each prompt's samples in one step):",
            f"  {correlation.line()}",
        ]
    elif lengths.groups is not None:
        lines.append(
            f"note: fewer than {MIN_GROUPS} groups of {MIN_GROUP_SIZE} or more samples of one prompt: "
            "workload.group_correlation not fitted"
        )
    if lengths.unit != "tokens":
        lines.append(f"note: these lengths are {lengths.unit}, not model tokens; give --tokenizer PATH to count tokens")
    written = [str(lengths_file), str(lengths_file.with_name("fits.json")), *([str(plot)] if plot else [])]
    lines.append(f"wrote {', '.join(written)}")
    return "\n".join(lines)


def significant(value: float) -> str:
    """Four significant digits: enough for a length distribution, short enough to paste."""
    return f"{float(f'{value:.4g}'):g}"
