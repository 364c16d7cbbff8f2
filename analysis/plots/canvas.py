"""The canvas every figure is drawn on: an Agg canvas (no pyplot, no global backend switch), saved as PNG.

    new_figure(width, height) ─► Figure (constrained layout, DPI) ─► save_png(figure, out) ─► out

matplotlib is imported here and in the modules that draw (``analysis.plots.plots``, ``table_plots``,
``study_plots``, ``length_plots``, ``report``) and nowhere else, so the simulator and the scenarios never pay for it.
"""

from __future__ import annotations

from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ...scenarios.files.writing import written

DPI = 120
WIDTH_IN = 12.0


#: Characters of a title line: a longer one (a scenario's essentials, a run's path) is wrapped, not cut.
TITLE_CHARS = 90


def with_context(title: str, context: str) -> str:
    """The title, and under it what the runs were (the scenario's essentials), when known; long lines wrapped."""
    return wrap(f"{title}\n{context}" if context else title)


def wrap(text: str, width: int = TITLE_CHARS) -> str:
    """Each line of ``text`` wrapped at ``width`` characters (at spaces, or hard where a line has none)."""
    import textwrap

    return "\n".join(
        "\n".join(textwrap.wrap(line, width, break_on_hyphens=False) or [""]) for line in text.splitlines()
    )


def new_figure(width_in: float, height_in: float) -> Figure:
    """An empty figure of that size on an Agg canvas."""
    figure = Figure(figsize=(width_in, height_in), dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def save_png(figure: Figure, out: Path) -> Path:
    """Write ``figure`` to ``out`` as PNG (its folder made); return ``out``."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with written(out) as temporary:
        figure.savefig(temporary, dpi=DPI, format="png", bbox_inches="tight", pad_inches=0.1)  # no text cut off
    return out
