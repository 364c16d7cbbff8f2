"""``benchmarks/published.py``'s table: each run's step and each speedup, the catalogue's and the calibrated
prediction with its error and 95% interval, whether the interval holds the published figure, and a count of
the intervals that do."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from asyncrl.analysis.tables import format_table

if TYPE_CHECKING:
    from published import Prediction, Range


def _shown(
    value: float | None, published: float, found: Range | None, unit: str = "", form: str = ",.1f", bounds: str = ",.0f"
) -> list[str]:
    """A prediction, its error and its 95% interval, and whether the interval holds the published figure."""
    if value is None:
        return ["-", "-"]
    shown = f"{value:{form}}{unit} ({(value - published) / published:+.0%})"
    if found is None:
        return [shown, "-"]
    holds = "holds" if found[0] <= published <= found[1] else "misses"
    return [shown, f"{found[0]:{bounds}}-{found[1]:{bounds}}{unit} {holds}"]


def table(predictions: list[Prediction], effects: Sequence[list[str]] = ()) -> str:
    """Each run's step (a sweep's points by their value), then the speedups, then each sweep's effect."""
    rows = []
    for item in predictions:
        rows.append(
            [
                item.case,
                item.run,
                f"{item.published_s:,.1f}",
                *_shown(item.catalogue_s, item.published_s, item.catalogue_range),
                *_shown(item.calibrated_s, item.published_s, item.calibrated_range),
            ]
        )
    for case in dict.fromkeys(item.case for item in predictions):
        runs = {item.run: item for item in predictions if item.case == case}
        if "sync" not in runs or "async" not in runs:
            continue  # a sweep's points: their effect row follows
        sync, other = runs["sync"], runs["async"]
        published = sync.published_s / other.published_s
        calibrated = (
            None if sync.calibrated_s is None or other.calibrated_s is None else sync.calibrated_s / other.calibrated_s
        )
        rows.append(
            [
                case,
                "speedup",
                f"{published:.2f}x",
                *_shown(
                    sync.catalogue_s / other.catalogue_s, published, other.speedup_catalogue_range, "x", ".2f", ".2f"
                ),
                *_shown(calibrated, published, other.speedup_calibrated_range, "x", ".2f", ".2f"),
            ]
        )
    rows += [
        [case, f"fall {values}", published, catalogue, "", calibrated, ""]
        for case, values, published, catalogue, calibrated in effects
    ]
    header = ["case", "run", "published s/step", "catalogue (error)", "95% interval", "calibrated on sync (error)"]
    return format_table([*header, "95% interval"], rows)


def holding(predictions: Sequence[Prediction]) -> str:
    """How many of the printed intervals hold the published figure, per column: steps, then speedups."""
    sync_of = {item.case: item for item in predictions if item.run == "sync"}
    counts = []
    for column in ("catalogue", "calibrated"):
        steps = [(item.published_s, getattr(item, f"{column}_range")) for item in predictions]
        speedups = [
            (sync_of[item.case].published_s / item.published_s, getattr(item, f"speedup_{column}_range"))
            for item in predictions
            if item.run == "async" and item.case in sync_of
        ]
        held = [
            f"{sum(low <= value <= high for value, (low, high) in shown)} of {len(shown)} {what}"
            for what, pairs in (("steps", steps), ("speedups", speedups))
            for shown in [[(value, found) for value, found in pairs if found is not None]]
        ]
        counts.append(f"{column}: {' and '.join(held)}")
    return "intervals holding the published figure: " + "; ".join(counts)
