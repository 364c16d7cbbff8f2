"""Token-length distributions: the long tail that makes asynchronous RL worth it.

Every distribution is a tagged union member (``kind``) that draws integer
lengths and is truncated at ``max_tokens`` the way generation is: a completion
that would run longer stops at the cap, so the cap carries the tail's mass.

    fixed      value
    lognormal  median · exp(sigma · Z)
    pareto     scale · (1 + Lomax(alpha))        scale is the smallest length
    empirical  uniform over the lengths in a file (one integer per line, or a JSONL log's field)

A group's samples may share their prompt's difficulty (``sample_groups``, ``workload.group_correlation`` ρ): each
length is the distribution's quantile at a normal score, and a group's scores are correlated (a Gaussian copula):

    z[g, j] = √ρ · d[g] + √(1 − ρ) · e[g, j]      d, e independent standard normals (d: the prompt's difficulty)
    length  = F⁻¹(Φ(z))                           lognormal: median · exp(σ z); pareto: scale · Φ(−z)^(−1/α)

so every length still has the distribution's own law, and for a lognormal ρ is the correlation of log lengths.
"""

from __future__ import annotations

import math
from functools import cached_property
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from ..files.jsonl import read_field, token_counts
from ..files.limits import MAX_LENGTHS_FILE_BYTES, MAX_TOKENS, PositiveFloat, Sigma, Tokens, TokensFloat
from ..files.textfile import read_text


class _Lengths(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """``size`` lengths as int64, each in [1, max_tokens]."""
        raw = self._draw(rng, size)
        return np.clip(np.rint(raw), 1, self.cap).astype(np.int64)

    def sample_groups(
        self,
        rng: np.random.Generator,
        groups: int,
        group_size: int,
        correlation: float,
        scales: np.ndarray | None = None,
    ) -> np.ndarray:
        """``groups`` × ``group_size`` lengths (module docstring), a group's correlated by ``correlation``, each
        group's stretched by its ``scales`` entry before the cap; at correlation 0 and no scales the same draws as
        ``sample`` (independent lengths, the stream unchanged)."""
        if correlation == 0.0:
            raw = self._draw(rng, groups * group_size).reshape(groups, group_size)
        else:
            difficulty = rng.standard_normal((groups, 1))
            sample = rng.standard_normal((groups, group_size))
            raw = self._at_normal_scores(math.sqrt(correlation) * difficulty + math.sqrt(1.0 - correlation) * sample)
        if scales is not None:
            raw = raw * scales[:, None]
        return np.clip(np.rint(raw), 1, self.cap).astype(np.int64)

    def _draw(self, rng: np.random.Generator, size: int) -> np.ndarray:
        raise NotImplementedError

    def _at_normal_scores(self, scores: np.ndarray) -> np.ndarray:
        """The distribution's quantile at Φ(scores): a standard normal score becomes a length of this law."""
        raise NotImplementedError

    @property
    def cap(self) -> int:
        raise NotImplementedError

    @property
    def mean(self) -> float:
        """Expected length after truncation (before rounding to integers)."""
        raise NotImplementedError

    def scaled(self, factor: float) -> _Lengths:
        """The same shape with every length ``factor`` times as long, under the same cap."""
        raise NotImplementedError


class Fixed(_Lengths):
    """Every rollout has the same length."""

    kind: Literal["fixed"]
    value: Tokens
    max_tokens: Tokens | None = Field(None, description="cap; defaults to value")

    def _draw(self, rng: np.random.Generator, size: int) -> np.ndarray:
        return np.full(size, self.value, dtype=np.float64)

    def _at_normal_scores(self, scores: np.ndarray) -> np.ndarray:
        return np.full(scores.shape, self.value, dtype=np.float64)

    @property
    def cap(self) -> int:
        return self.max_tokens if self.max_tokens is not None else self.value

    @property
    def mean(self) -> float:
        return float(min(self.value, self.cap))

    def scaled(self, factor: float) -> Fixed:
        return self.model_copy(update={"value": max(1, round(self.value * factor)), "max_tokens": self.cap})


class LogNormal(_Lengths):
    """median · exp(sigma · Z): the usual shape of reasoning-length tails. A cap below the median is allowed:
    more than half the completions then stop at it, as a reasoning model's do under a short cap."""

    kind: Literal["lognormal"]
    median: TokensFloat
    sigma: Sigma
    max_tokens: Tokens

    def _draw(self, rng: np.random.Generator, size: int) -> np.ndarray:
        return self.median * np.exp(self.sigma * rng.standard_normal(size))

    def _at_normal_scores(self, scores: np.ndarray) -> np.ndarray:
        return self.median * np.exp(self.sigma * scores)

    @property
    def cap(self) -> int:
        return self.max_tokens

    @property
    def mean(self) -> float:
        # E[min(X, m)] for X = exp(mu + sigma Z):
        #   exp(mu + s²/2) Φ((ln m − mu − s²)/s) + m (1 − Φ((ln m − mu)/s))
        mu, s, m = math.log(self.median), self.sigma, self.max_tokens
        below = math.exp(mu + s * s / 2) * _normal_cdf((math.log(m) - mu - s * s) / s)
        return below + m * (1.0 - _normal_cdf((math.log(m) - mu) / s))

    def scaled(self, factor: float) -> LogNormal:
        return self.model_copy(update={"median": self.median * factor})


class Pareto(_Lengths):
    """scale · (1 + Lomax(alpha)): heavier tail than lognormal for small alpha."""

    kind: Literal["pareto"]
    scale: TokensFloat = Field(description="smallest length")
    alpha: PositiveFloat = Field(description="tail index; smaller is heavier")
    max_tokens: Tokens

    @model_validator(mode="after")
    def _cap_above_scale(self) -> Pareto:
        if self.max_tokens < self.scale:
            raise ValueError(f"max_tokens: {self.max_tokens} is below the scale ({self.scale:g})")
        return self

    def _draw(self, rng: np.random.Generator, size: int) -> np.ndarray:
        return self.scale * (1.0 + rng.pareto(self.alpha, size))

    def _at_normal_scores(self, scores: np.ndarray) -> np.ndarray:
        # P(X > x) = (scale / x)^alpha, so the quantile at Φ(z) is scale · (1 − Φ(z))^(−1/alpha) = scale · Φ(−z)^(…)
        with np.errstate(over="ignore", divide="ignore"):
            return self.scale * np.power(np.maximum(normal_cdf(-scores), 1e-300), -1.0 / self.alpha)

    @property
    def cap(self) -> int:
        return self.max_tokens

    @property
    def mean(self) -> float:
        # E[min(X, m)] = x_m + ∫_{x_m}^{m} (x_m/x)^a dx = x_m + x_m ((m/x_m)^(1−a) − 1) / (1 − a),
        # written with m/x_m ≥ 1 so no power overflows, whatever the tail index
        a, xm, m = self.alpha, self.scale, self.max_tokens
        if math.isclose(a, 1.0):
            return xm + xm * math.log(m / xm)
        return xm + xm * ((m / xm) ** (1 - a) - 1) / (1 - a)

    def scaled(self, factor: float) -> Pareto:
        return self.model_copy(update={"scale": min(self.scale * factor, float(self.max_tokens))})


class Empirical(_Lengths):
    """Lengths observed in a real run, drawn uniformly with replacement."""

    kind: Literal["empirical"]
    path: Path = Field(
        description="file with one integer length per line, or a .jsonl log (see field); relative to the scenario file"
    )
    field: str | None = Field(
        None, description="a .jsonl path: the key holding each completion's token count or token ids; default: guessed"
    )
    max_tokens: Tokens | None = Field(None, description="cap; defaults to the longest observed length")
    scale: PositiveFloat = Field(1.0, description="every observed length multiplied by this before the cap")

    @field_validator("path")
    @classmethod
    def _resolved(cls, path: Path, info: ValidationInfo) -> Path:
        base = (info.context or {}).get("base_dir")
        return (Path(base) / path if base and not path.is_absolute() else path).resolve()

    @model_validator(mode="after")
    def _readable(self) -> Empirical:
        if self.field is not None and not _is_jsonl(self.path):
            raise ValueError(f"field: only a .jsonl path has fields ({self.path.name} is one length per line)")
        _ = self.observed
        return self

    @cached_property
    def observed(self) -> np.ndarray:
        if _is_jsonl(self.path):
            field, values = read_field(self.path, self.field)
            return token_counts(values, f"{self.path.name}:{field}")
        return _read_lengths(self.path)

    def _draw(self, rng: np.random.Generator, size: int) -> np.ndarray:
        drawn = rng.choice(self.observed, size=size).astype(np.float64)
        return drawn * self.scale if self.scale != 1.0 else drawn

    @cached_property
    def _ordered(self) -> np.ndarray:
        return np.sort(self.observed).astype(np.float64)

    def _at_normal_scores(self, scores: np.ndarray) -> np.ndarray:
        ordered = self._ordered
        index = np.minimum((normal_cdf(scores) * len(ordered)).astype(np.int64), len(ordered) - 1)
        return ordered[index] * self.scale

    @property
    def cap(self) -> int:
        return self.max_tokens if self.max_tokens is not None else int(self.observed.max())

    @property
    def mean(self) -> float:
        return float(np.minimum(self.observed * self.scale, self.cap).mean())

    def scaled(self, factor: float) -> Empirical:
        return self.model_copy(update={"scale": self.scale * factor, "max_tokens": self.cap})


def _is_jsonl(path: Path) -> bool:
    return path.suffix.lower() in (".jsonl", ".ndjson")


def _read_lengths(path: Path) -> np.ndarray:
    """One integer length per line, each in [1, MAX_TOKENS]; a ValueError names the file and the line."""
    text = read_text(path, MAX_LENGTHS_FILE_BYTES, "a lengths file")
    values = []
    for number, line in enumerate(text.splitlines(), start=1):
        for word in line.split():
            values.append(_length(word, path, number))
    if not values:
        raise ValueError(f"path: {path}: needs at least one length")
    return np.asarray(values, dtype=np.int64)


def _length(word: str, path: Path, line: int) -> int:
    try:
        value = int(word)
    except ValueError:
        raise ValueError(f"path: {path}: line {line}: {word[:40]!r} is not an integer length") from None
    if not 1 <= value <= MAX_TOKENS:
        shown = f"length {value:,}" if len(word) <= 20 else f"a {len(word)}-digit length"
        raise ValueError(f"path: {path}: line {line}: {shown} is outside [1, {MAX_TOKENS:,}] tokens")
    return value


def _normal_cdf(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


_ERFC = np.frompyfunc(math.erfc, 1, 1)


def normal_cdf(scores: np.ndarray) -> np.ndarray:
    """Φ elementwise, from erfc: the lower tail keeps its precision (Φ(−10) = 7.6e-24, where 1 − Φ(10) rounds to 0)."""
    complement = np.asarray(_ERFC(-np.asarray(scores, dtype=np.float64) / math.sqrt(2.0)), dtype=np.float64)
    return 0.5 * complement


LengthDistribution = Annotated[Fixed | LogNormal | Pareto | Empirical, Field(discriminator="kind")]
