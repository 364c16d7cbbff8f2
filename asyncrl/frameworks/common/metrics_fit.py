"""What a fit of a metrics log found (``MetricsFit``), and how it is shown: the snippet, JSON and the terminal.

    analysis.log_lengths.fit_from_metrics ─► MetricsFit (LogNormal, the cap, Target per figure, Drift)
        ─► snippet / prompt_snippet (the scenario's workload lines), verl_notes (from-verl)
        ─► metrics_fit_report (fits.json), metrics_fit_lines (``asyncrl lengths --from-log``)

Nothing here fits: the numbers come from ``analysis.log_lengths``; this module only keeps and words them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from asyncrl.analysis.fits.lengths import significant
from asyncrl.analysis.tables import format_table
from asyncrl.scenarios.spec.distributions import Fixed, LogNormal

from asyncrl.frameworks.common.metrics_log import MetricsLog

RESPONSE_MEAN, RESPONSE_MAX, CLIP_RATIO = "response_length/mean", "response_length/max", "response_length/clip_ratio"
PROMPT_MEAN, PROMPT_MAX = "prompt_length/mean", "prompt_length/max"


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
    scale_by_step: tuple[tuple[int, float], ...] | None = None  # workload.completion_scale_by_step; None: steady

    def completion_tokens(self) -> dict[str, Any]:
        """The scenario's ``completion_tokens``, rounded as the snippet is."""
        lognormal = self.distribution
        median, sigma = float(significant(lognormal.median)), float(significant(lognormal.sigma))
        return {"kind": "lognormal", "median": median, "sigma": sigma, "max_tokens": lognormal.cap}

    def prompt_tokens(self) -> dict[str, Any] | None:
        return None if self.prompt is None else {"kind": "fixed", "value": self.prompt.value}

    def snippet(self) -> str:
        return "completion_tokens: " + _flow(self.completion_tokens())

    def scale_snippet(self) -> str | None:
        if self.scale_by_step is None:
            return None
        points = ", ".join(f"[{step}, {significant(factor)}]" for step, factor in self.scale_by_step)
        return f"completion_scale_by_step: [{points}]"

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
        if self.scale_by_step is not None:
            notes.append(
                f"workload.completion_scale_by_step: the median of each fifth of {self.source}'s steps, as a factor "
                f"of the whole log's ({self.scale_words()}): the run's wall time follows its lengths"
            )
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
        stands = (
            "workload.completion_scale_by_step follows it"
            if self.scale_by_step is not None
            else "one stationary distribution stands for all of them"
        )
        return (
            f"response_length/mean drifts from {drift.first:,.0f} (its first {steps}) to {drift.last:,.0f} "
            f"(its last {steps}), per step {drift.lowest:,.0f} to {drift.highest:,.0f}: {stands}"
        )

    def scale_words(self) -> str:
        assert self.scale_by_step is not None
        return ", ".join(f"{significant(factor)} at step {step}" for step, factor in self.scale_by_step)


def _flow(mapping: dict[str, Any]) -> str:
    """A mapping as a one-line YAML flow mapping, numbers as the snippets write them."""
    shown = (f"{key}: {significant(value) if isinstance(value, float) else value}" for key, value in mapping.items())
    return "{" + ", ".join(shown) + "}"


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
        "completion_scale_by_step": [list(point) for point in fit.scale_by_step] if fit.scale_by_step else None,
        "scale_snippet": fit.scale_snippet(),
    }


def metrics_fit_lines(fit: MetricsFit, log: MetricsLog, fits_file: Path) -> str:
    """The terminal's account: the steps read, logged against fitted, the drift, and the snippet."""
    first, last = fit.step_range
    rows = [
        [f"{_figure(target, fit)} ({target.logged_as} of {target.key})", *_cells(target), _role(target)]
        for target in fit.targets
    ]
    snippets = [fit.snippet()]
    if fit.prompt is not None:
        longest = f", longest {fit.prompt_max:,.0f}" if fit.prompt_max is not None else ""
        snippets.append(f"{fit.prompt_snippet()}  # the mean {PROMPT_MEAN}{longest}")
    if fit.scale_by_step is not None:
        snippets.append(f"{fit.scale_snippet()}  # each fifth of the steps' median over the whole log's")
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
