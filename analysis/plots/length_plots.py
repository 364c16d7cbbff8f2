"""The histogram of logged completion lengths with the fitted distributions, on a log length axis.

    lengths, fits ─► length_figure ─► lengths.png

Bins are about equal in log length (their edges are integers); each bar is the
share of completions in its bin per decade of length (the bin's share over its
width in log10), and each fit's line the same for what the scenario would draw
(rounded, capped: ``analysis.fits.lengths.drawn_cdf``), so a cap that gathers mass
shows in both.
matplotlib is imported here, as in ``analysis.plots.plots``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ..fits.lengths import Fit, Lengths, drawn_cdf
from .plots import _figure, _save

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
    drawn = [("observed", observed)]
    for fit in fits:
        colour, style = FIT_STYLES.get(fit.kind, ("C3", ":"))
        shares = drawn_cdf(fit.distribution, last) - drawn_cdf(fit.distribution, first_below)
        ax.stairs(shares / decades, edges, color=colour, ls=style, lw=1.8, label=_label(fit))
        drawn.append((fit.kind, shares))
    ax.set_xscale("log")
    ax.set_xlabel(f"completion length ({lengths.unit}, log scale)")
    ax.set_ylabel("density (share of completions per decade)")
    ax.set_ylim(bottom=0)
    spike = _spike_at_the_cap(ax, drawn, decades, int(last[-1]))
    ax.grid(alpha=0.3)
    ax.legend(frameon=False, fontsize=9)
    title = f"Completion lengths in {lengths.unit}: {lengths.source.name}, field {lengths.field}"
    ax.set_title(title + (f"\n{spike}" if spike else ""), fontsize=11)
    return figure


#: The last bin (the cap's, in a capped log) drawn off the scale when its density passes this many times the rest's.
SPIKE = 2.0


def _spike_at_the_cap(
    ax: Axes, drawn: Sequence[tuple[str, np.ndarray]], decades: np.ndarray, longest: int
) -> str | None:
    """A cap that gathers mass is one narrow bin of huge density: the y-axis is set by the rest of the bins,
    and the last bin's shares, returned as a line for the title, say what is off the scale (a fit's spike at
    the cap set the scale and flattened the data)."""
    if len(decades) < 3:
        return None
    body = max(float(np.max(shares[:-1] / decades[:-1])) for _, shares in drawn)
    spike = max(float(shares[-1] / decades[-1]) for _, shares in drawn)
    if body <= 0 or spike <= SPIKE * body:
        return None
    ax.set_ylim(0, body * 1.25)
    shares = ", ".join(f"{name} {float(values[-1]):.0%}" for name, values in drawn)
    return f"the last bin (up to {longest:,}) runs off the scale; its share: {shares}"


def _integer_edges(low: int, high: int) -> np.ndarray:
    """Bin edges at integers, about equal in log length, each bin holding at least one integer."""
    edges = np.unique(np.rint(np.geomspace(low, high + 1, BINS + 1)).astype(np.int64))
    return edges if len(edges) > 1 else np.array([low, high + 1])


def _label(fit: Fit) -> str:
    parameters = ", ".join(f"{name} {value:.3g}" for name, value in fit.parameters.items())
    return f"{fit.kind} fit: {parameters}, cap {fit.distribution.cap:,} (KS {fit.ks:.3f})"
