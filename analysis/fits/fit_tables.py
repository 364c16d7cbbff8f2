"""Plain-text tables of a calibration: a measured cost profile, a profile fitted to runs or to a metrics log.

asyncrl calibrate SCENARIO              ─► calibration_lines (measured figures, their noise)
asyncrl calibrate --from-run RUN ...    ─► fit_lines (fitted figures, per phase run against profile)
asyncrl calibrate --from-log LOG, plan  ─► log_fit_lines (per phase, the log's seconds against the model's)
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ..tables import format_table

if TYPE_CHECKING:
    from ...scenarios.costs.profile import CostProfile
    from .fit import FitReport


def calibration_lines(model: str, device: str, repeats: int, profile: CostProfile, noise: Mapping[str, float]) -> str:
    """A measured cost profile as a table, and how noisy the measurements were."""
    rows: list[list[Any]] = [[f"decode step, batch {b}", f"{t * 1e3:.3f} ms"] for b, t in profile.decode_step_s.items()]
    rows += [
        ["decode, per context token", f"{profile.decode_context_token_s * 1e9:.1f} ns"],
        ["prefill, per prompt token", f"{profile.prefill_token_s * 1e6:.2f} us"],
        ["learner, per token (one device)", f"{profile.train_token_s * 1e6:.2f} us"],
        ["learner, per row x length^2", f"{profile.train_token_square_s * 1e9:.3f} ns"],
        ["learner, per step", f"{profile.train_step_overhead_s * 1e3:.2f} ms"],
        ["weight sync", f"{profile.weight_sync_s * 1e3:.3f} ms"],
    ]
    typical = statistics.median(noise.values()) if noise else 0.0
    worst = max(noise.items(), key=lambda item: item[1])
    return (
        f"{model} on {device}, median of {repeats}\n{format_table(['figure', 'measured'], rows)}\n"
        f"noise: spread (max - min) / median over repeats is {typical:.0%} typically, {worst[1]:.0%} at worst ({worst[0]})"
    )


def fit_lines(run: object, profile: CostProfile, report: FitReport) -> str:
    """The profile fitted from a run, and per phase what the run spent against what it charges."""
    table = [
        [phase, f"{measured:.3f}", f"{charged:.3f}", f"{(charged - measured) / measured:+.1%}" if measured else "-"]
        for phase, (measured, charged) in report.phases.items()
    ]
    figures = (
        f"decode step  {profile.decode_step(1) * 1e3:.3f} ms at batch 1, "
        f"{profile.decode_step(max(profile.decode_step_s)) * 1e3:.3f} ms at {max(profile.decode_step_s)}, "
        f"+{profile.decode_context_token_s:.2e} s per context token\n"
        f"prefill      {profile.join_s * 1e3:.3f} ms per request + {profile.prefill_token_s:.2e} s per prompt token\n"
        f"retirement   {profile.retire_s * 1e3:.3f} ms per step where rollouts finish\n"
        f"learner      {profile.train_step_overhead_s * 1e3:.1f} ms per step + {profile.train_token_s:.2e} s per "
        f"{'token' if profile.train_padding == 'packed' else 'token padded to the longest row of its minibatch'}"
        f" (one device), x{1 + profile.train_contention:.2f} while an engine computes\n"
        f"engines      x{1 + profile.engine_contention:.2f} while the learner computes\n"
        f"cores        engines x{1 + profile.time_slicing:.2f} slower than their share while oversubscribed\n"
        f"messages     {profile.wake_s * 1e3:.2f} ms before an idle engine acts, "
        f"{profile.train_start_s * 1e3:.2f} ms before each learner step\n"
        f"weight sync  {profile.weight_sync_s * 1e3:.1f} ms"
    )
    if profile.engine_start_s is not None:
        figures += f"\nrestart      {profile.engine_start_s:.2f} s from an engine's death to its replacement's start"
    header = ["phase", "run s", "profile s", "profile vs run"]
    return f"fitted to {run}\n{figures}\n" + format_table(header, table)


class PhaseRowLike(Protocol):
    """One phase of a fitted log (``asyncrl.calibration.fit_log.PhaseRow``, frozen: read-only here too)."""

    @property
    def phase(self) -> str: ...

    @property
    def logged_s(self) -> float | None: ...

    @property
    def model_s(self) -> float: ...

    @property
    def term(self) -> str: ...


class TermRowLike(Protocol):
    """One fitted term (``asyncrl.calibration.fit_log.TermRow``)."""

    @property
    def term(self) -> str: ...

    @property
    def value(self) -> float: ...

    @property
    def low(self) -> float: ...

    @property
    def high(self) -> float: ...

    @property
    def identified(self) -> bool: ...

    @property
    def source(self) -> str: ...


def log_fit_lines(
    source: str,
    rows: Sequence[PhaseRowLike],
    terms: Sequence[TermRowLike],
    notes: Sequence[str],
) -> str:
    """A profile fitted to framework metrics logs: per run and phase, the log's seconds against the fitted model's;
    per term, its value and 95% interval, and whether the logs identified it (else the catalogue's stands)."""
    table = [
        [
            row.phase,
            "-" if row.logged_s is None else f"{row.logged_s:,.2f}",
            f"{row.model_s:,.2f}",
            f"{(row.model_s - row.logged_s) / row.logged_s:+.1%}" if row.logged_s else "-",
        ]
        for row in rows
        if row.logged_s is not None or row.phase.endswith("step")
    ]
    fitted = [
        [
            term.term,
            term_text(term.term, term.value),
            f"{term_text(term.term, term.low)}-{term_text(term.term, term.high)}",
            term.source if term.identified else "the catalogue's (the logs cannot tell it)",
        ]
        for term in terms
    ]
    lines = [f"fitted to {source} (seconds per step, means over the kept steps)"]
    lines.append(format_table(["phase", "log s", "model s", "model vs log"], table))
    lines.append(format_table(["term", "value", "95% interval", "from"], fitted))
    identified = sum(term.identified for term in terms)
    lines.append(f"{identified} of {len(terms)} terms identified by the logs; the others keep the catalogue's value")
    lines += [f"note: {item}" for item in notes]
    return "\n".join(lines)


def term_text(term: str, value: float) -> str:
    """A term's value in its unit: ``0.52``, ``3.1 ms``, ``3.5 GB/s``."""
    if term.endswith("_bytes_per_s"):
        return f"{value / 1e9:.3g} GB/s"
    if term.endswith("_s"):
        if value >= 1:
            return f"{value:.3g} s"
        return f"{value * 1e3:.3g} ms" if value >= 1e-4 else f"{value * 1e6:.3g} µs"
    return f"{value:.3g}"
