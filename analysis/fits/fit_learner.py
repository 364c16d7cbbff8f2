"""The learner's part of a fitted profile: its train spans, their line, and how much an engine slowed them.

    events.parquet ──► train_spans: per learner step its seconds, real and padded tokens, and the share of it
    (+ engine steps)                an engine computed during (contended)
                   ──► without_stragglers ──► fit_learner: seconds = overhead + per token · tokens
                                                 (on the spans no engine overlapped, where at least three)
                                          ──► fit_contention: the slowdown κ that charges the overlapped
                                                 spans what they took, in total (total_preserving_excess)

``analysis.fits.fit.profile_from_runs`` calls these beside its engine fit, which charges its own contention
with ``total_preserving_excess`` too.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd

from ...scenarios.rules.cores import busy_seconds
from ...scenarios.rules.workload import TrainTokens
from ...scenarios.spec.loading import ScenarioError

ALONE = 0.05  # a span with the other side computing for less than this share of it ran alone
MIN_SPREAD = 0.1  # the learner's token counts must vary by this much (std / mean) to fix an intercept
STRAGGLER_MADS = 6  # a train span this many scaled MADs slower per token than the median is a straggler


def least_squares(columns: list[np.ndarray], target: np.ndarray) -> np.ndarray:
    """The coefficients of ``columns`` that best fit ``target`` (least squares)."""
    matrix = np.column_stack(columns)
    solution, *_ = np.linalg.lstsq(matrix, target, rcond=None)
    return solution


def train_spans(events: pd.DataFrame, minibatches: int, steps: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per learner step: its seconds, the tokens it trained, real (``packed``) and padded (``longest``), and
    the share of it during which an engine computed (``contended``, 0-1; 0 without ``steps``).

    The learner pads each minibatch to its longest row (``executor.learning.learner``): ``minibatches`` runs of
    whole groups in the order they finished (the queue's), each row prompt + completion. The record
    keeps completion tokens per rollout and the step's total; each row is given the step's mean prompt
    (exact for fixed prompts). A step without rollout rows (none recorded) counts its real tokens.
    """
    train = events[events["kind"] == "train"]
    rollouts = events[events["kind"] == "generate"]
    by_step = {step: rows for step, rows in rollouts.groupby("step")}
    padded = []
    for step, total in zip(train["step"], train["tokens"], strict=True):
        rows = by_step.get(step)
        if rows is None or rows.empty:
            padded.append(int(total))
            continue
        prompt = round((total - rows["tokens"].sum()) / len(rows))
        order = rows.groupby("group")["end"].max().sort_values().index
        groups = [[prompt + int(n) for n in rows.loc[rows["group"] == group, "tokens"]] for group in order]
        padded.append(TrainTokens.of(groups, minibatches).padded)
    bounds = train[["start", "end"]].to_numpy(float)
    seconds = bounds[:, 1] - bounds[:, 0]
    contended = np.zeros(len(train))
    if steps is not None and len(train):
        engines = [rows[["start", "end"]].to_numpy(float) for _, rows in steps.groupby("worker")]
        contended = busy_seconds(bounds, engines) / np.maximum(seconds, 1e-12)
    return pd.DataFrame(
        {
            "seconds": seconds,
            "packed": train["tokens"].to_numpy(float),
            "longest": np.asarray(padded, float),
            "contended": contended,
        }
    )


def without_stragglers(spans: pd.DataFrame) -> pd.DataFrame:
    """The train spans less stragglers: seconds per padded token above the median by more than
    ``STRAGGLER_MADS`` scaled median absolute deviations (a 6x step, one in a few hundred, would move an
    8-step calibration's mean by 60%; a 30-step run seldom meets one). Overlapped spans, slower by the
    contention, stay: it is a tenth or so, far inside the cut."""
    rate = spans["seconds"] / spans["longest"].clip(lower=1)
    median = rate.median()
    spread = 1.4826 * (rate - median).abs().median()
    keep = rate <= median + STRAGGLER_MADS * max(spread, 0.01 * median)
    return spans[keep].reset_index(drop=True) if keep.sum() >= 3 else spans


def fit_learner(spans: pd.DataFrame, pooled: bool = False) -> tuple[float, float, Literal["packed", "longest"]]:
    """(overhead s, s per token, padding) of the learner's train spans.

    Tokens are counted padded (``longest``): the executor's learner pads each minibatch to its longest
    row (``executor.learning.learner.collate``) and computes on every position. Real tokens (``packed``) are
    used only where no rollout rows were recorded (then the two columns are equal). The line is
    fitted to the spans no engine overlapped (a sync run's) where there are at least three, so that
    ``fit_contention`` explains the rest, else (or ``pooled``) to all; where the token counts barely vary (a long
    tail's batches often all reach the cap) an intercept is not determined, and the line goes through 0.
    """
    if spans.empty:
        raise ScenarioError("from_run: the run trained no step")
    padding: Literal["packed", "longest"] = "longest" if (spans["longest"] != spans["packed"]).any() else "packed"
    alone = spans[spans["contended"] < ALONE]
    fitted = alone if len(alone) >= 3 and not pooled else spans
    seconds, tokens = fitted["seconds"].to_numpy(), fitted[padding].to_numpy()
    if len(fitted) >= 3 and tokens.std() > MIN_SPREAD * tokens.mean():
        overhead, per_token = least_squares([np.ones(len(fitted)), tokens], seconds)
        if overhead >= 0 and per_token > 0:
            return float(overhead), float(per_token), padding
    return 0.0, float(seconds.sum() / tokens.sum()), padding


def fit_contention(
    spans: pd.DataFrame, overhead: float, per_token: float, padding: Literal["packed", "longest"]
) -> float:
    """κ ≥ 0 in seconds = (overhead + per token · tokens) · (1 + κ · contended), given the line fitted to the
    spans no engine overlapped (0 without both kinds): the κ for which the spans an engine overlapped
    are charged, in total, the seconds they took (``total_preserving_excess``).

    A run's wall time is the sum of its learner steps, so the total is what must hold. Least squares on
    each span's relative excess (the earlier fit) weighs a short span's ratio as much as a long one's and
    left cpu-timing's streaming calibration run's learner 17% short of its own measurement."""
    alone = spans["contended"] < ALONE
    if alone.sum() < 3 or alone.all():
        return 0.0
    shared = spans[~alone]
    line = overhead + per_token * shared[padding].to_numpy()
    return total_preserving_excess(shared["seconds"].to_numpy(), line, shared["contended"].to_numpy())


def total_preserving_excess(seconds: np.ndarray, charged: np.ndarray, share: np.ndarray) -> float:
    """κ ≥ 0 with Σ charged · (1 + κ · share) = Σ seconds: the slowdown, while contended, that charges spans
    (``charged``: what each costs alone; ``share``: 0-1, the part of it contended) the seconds they took
    in total (0 where they took no longer than charged, or none was contended)."""
    weight = float((charged * share).sum())
    if weight <= 0:
        return 0.0
    return max(0.0, float((seconds.sum() - charged.sum()) / weight))
