"""The histogram of logged completion lengths with the fitted distributions, on a log length axis.

    lengths, fits ─► length_figure ─► lengths.png

Bins are about equal in log length (their edges are integers); each bar is the
share of completions in its bin per decade of length (the bin's share over its
width in log10), and each fit's line the same for what the scenario would draw
(rounded, capped: ``analysis.lengths.drawn_cdf``), so a cap that gathers mass
shows in both.
matplotlib is imported here, as in ``analysis.plots``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from asyncrl.analysis.lengths import Fit, Lengths, drawn_cdf
from asyncrl.analysis.plots import _figure, _save
from matplotlib.figure import Figure

BINS = 40
FIT_STYLES = {"lognormal": ("C1", "-"), "pareto": ("C2", "--")}


def length_histogram(lengths: Lengths, fits: Sequence[Fit], out: Path) -> Path:
    """Write ``length_figure(...)`` to ``out`` as PNG."""
    return _save(length_figure(lengths, fits), out)


def length_figure(lengths: Lengths, fits: Sequence[Fit]) -> Figure:
    """Share of completions per log-length bin, observed (bars) and as each fit draws them (lines)."""
    values = np.sort(lengths.values)
    edges = _integer_edges(int(values[0]), int(values[-1]))
    last = edges[1:] - 1  # the longest integer length in each bin
    first_below = edges[:-1] - 1
    observed = (np.searchsorted(values, last, side="right") - np.searchsorted(values, first_below, side="right")) / len(
        values
    )
    decades = np.log10(edges[1:] / edges[:-1])  # bins are about equal in log length, not exactly (integers)
    figure = _figure(8.0, 4.4)
    ax = figure.subplots()
    label = f"observed ({len(values):,} completions)"
    ax.stairs(observed / decades, edges, fill=True, color="C0", alpha=0.45, label=label)
    for fit in fits:
        colour, style = FIT_STYLES.get(fit.kind, ("C3", ":"))
        shares = drawn_cdf(fit.distribution, last) - drawn_cdf(fit.distribution, first_below)
        ax.stairs(shares / decades, edges, color=colour, ls=style, lw=1.8, label=_label(fit))
    ax.set_xscale("log")
    ax.set_xlabel(f"completion length ({lengths.unit}, log scale)")
    ax.set_ylabel("density (share of completions per decade)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(frameon=False, fontsize=9)
    ax.set_title(f"Completion lengths in {lengths.unit}: {lengths.source.name}, field {lengths.field}", fontsize=11)
    return figure


def _integer_edges(low: int, high: int) -> np.ndarray:
    """Bin edges at integers, about equal in log length, each bin holding at least one integer."""
    edges = np.unique(np.rint(np.geomspace(low, high + 1, BINS + 1)).astype(np.int64))
    return edges if len(edges) > 1 else np.array([low, high + 1])


def _label(fit: Fit) -> str:
    parameters = ", ".join(f"{name} {value:.3g}" for name, value in fit.parameters.items())
    return f"{fit.kind} fit: {parameters}, cap {fit.distribution.cap:,} (KS {fit.ks:.3f})"
