"""The predicted-against-measured figure: A's and B's wall time, speedup and mean staleness side by side.

    Comparison (analysis.records.compare) ─► predicted_vs_measured_figure ─► predicted-vs-measured.png

Titled by the two runs' backends: the simulator predicts, the executor measures.
"""

from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure
from matplotlib.patches import Patch

from ..records.compare import Comparison, format_relative, relative_error
from .canvas import new_figure as _figure
from .canvas import save_png as _save
from .canvas import with_context as _with_context


def predicted_vs_measured(comparison: Comparison, out: Path, context: str = "") -> Path:
    """Write ``predicted_vs_measured_figure(comparison, context)`` to ``out`` as PNG."""
    return _save(predicted_vs_measured_figure(comparison, context), out)


#: What a run of each backend is, for titles: the simulator predicts, the executor measures.
BACKEND_SIDES = {"simulator": "predicted", "executor": "measured"}


def comparison_title(comparison: Comparison) -> str:
    """``Predicted (A) vs measured (B)``, from the two runs' backends (two simulations: predicted vs predicted)."""
    return sides_title(comparison.a_run.get("backend", ""), comparison.b_run.get("backend", ""))


def sides_title(a_backend: str, b_backend: str) -> str:
    a, b = (BACKEND_SIDES.get(backend, "run") for backend in (a_backend, b_backend))
    return f"{a.capitalize()} (A) vs {b} (B)"


def _speedup_title(comparison: Comparison) -> str:
    """The speedup panel's title; its own sides when its runs are not the compared runs' kind (the two
    compared runs measured, the speedup's B predicted: it is not "measured vs measured")."""
    speedup = comparison.speedup
    assert speedup is not None
    own = sides_title(speedup.a_backend, speedup.b_backend)
    if not (speedup.a_backend and speedup.b_backend) or own == comparison_title(comparison):
        return "speedup sync/async"
    return f"speedup sync/async: {own.lower()}"


def predicted_vs_measured_figure(comparison: Comparison, context: str = "") -> Figure:
    """Bars of A and B: wall time, speedup (when compared) and mean staleness; titled by the runs' backends."""
    figures = {figure.key: figure for figure in comparison.figures}
    panels: list[tuple[str, str, float, float, float]] = [
        ("wall time", "wall time (s)", figures["wall_time_s"].a, figures["wall_time_s"].b, 0.0),
    ]
    if comparison.speedup is not None:
        speedup = comparison.speedup
        panels.append((_speedup_title(comparison), "speedup (×)", speedup.a, speedup.b, 1.0))
    stale = figures["staleness.mean"]
    panels.append(("mean staleness", "staleness (steps)", stale.a, stale.b, 0.0))
    figure = _figure(3.6 * len(panels) + 1.0, 4.8)
    for ax, (title, unit, a, b, reference) in zip(
        figure.subplots(1, len(panels), squeeze=False)[0], panels, strict=True
    ):
        bars = ax.bar([0, 1], [a, b], color=["C0", "C1"], width=0.6)
        ax.bar_label(bars, [_short(a), _short(b)], padding=2, fontsize=9)
        ax.set_xticks([0, 1], ["A", "B"])
        ax.set_ylabel(unit)
        ax.set_title(f"{title}\nB vs A: {format_relative(relative_error(a, b))}", fontsize=10)
        ax.set_ylim(0, max(a, b, reference, 1e-9) * 1.18)
        if reference:
            ax.axhline(reference, color="#777777", lw=0.8, ls=":")
        ax.grid(axis="y", alpha=0.3)
    handles = [
        Patch(color="C0", label=f"A: {comparison.a_label} ({comparison.a_run.get('backend', '?')})"),
        Patch(color="C1", label=f"B: {comparison.b_label} ({comparison.b_run.get('backend', '?')})"),
    ]
    figure.legend(handles=handles, loc="outside lower center", ncols=2, frameon=False, fontsize=9)
    figure.suptitle(_with_context(comparison_title(comparison), context), fontsize=13)
    return figure


def _short(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
