"""Experiment tracking for executed runs: each step's metrics row, then the run's summary, to TensorBoard or W&B.

    learner loop ── on_step(step, row) ──► Tracker.log_step   metrics/<figure> at step (the metrics.parquet row)
    execute ends ── summary.json ────────► Tracker.finish     summary/<dotted figure>, and the summary as text

Both backends are optional dependencies (``pip install 'asyncrl[tracking]'``), imported only when asked
for; ``check_tracker`` fails in one line before a run starts when the one asked for is missing.

* ``tensorboard``: event files in ``RUN/tensorboard/`` (``tensorboard --logdir RUN/tensorboard``).
* ``wandb``: a run in ``RUN/wandb/``, offline unless ``WANDB_MODE`` says otherwise, so it needs no
  network or account (``wandb sync RUN/wandb/offline-run-*`` uploads it later).
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from ..scenarios.spec.scenario import Scenario

TRACKERS = ("tensorboard", "wandb")
#: The module each tracker needs, and the package that provides it.
REQUIREMENTS = {"tensorboard": ("tensorboard", "tensorboard"), "wandb": ("wandb", "wandb")}
#: Columns of a metrics row that are not figures of the step.
NOT_FIGURES = ("step",)


class Tracker(Protocol):
    def log_step(self, step: int, row: Mapping[str, Any]) -> None: ...

    def finish(self, summary: Mapping[str, Any]) -> None: ...


def check_tracker(kind: str) -> None:
    """A ValueError naming ``log`` (the argument) when the tracker is unknown or its package is not installed."""
    if kind not in TRACKERS:
        raise ValueError(f"log: {kind!r}; use one of {', '.join(TRACKERS)}")
    module, package = REQUIREMENTS[kind]
    if importlib.util.find_spec(module) is None:
        raise ValueError(f"log: {package} is not installed (pip install {package}, or 'asyncrl[tracking]')")


def open_tracker(kind: str, out: Path, scenario: Scenario) -> Tracker:
    """The tracker asked for, writing under the run directory ``out``."""
    check_tracker(kind)
    if kind == "tensorboard":
        return TensorBoardTracker(out / "tensorboard", scenario)
    return WandbTracker(out, scenario)


def step_figures(row: Mapping[str, Any]) -> dict[str, float]:
    """The finite numbers of a metrics row, by name."""
    return {
        name: float(value)
        for name, value in row.items()
        if name not in NOT_FIGURES and _is_number(value) and math.isfinite(float(value))
    }


def summary_figures(summary: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """The summary's numbers flattened to dotted names (``throughput.samples_per_s``); histograms left out."""
    figures: dict[str, float] = {}
    for name, value in summary.items():
        dotted = f"{prefix}{name}"
        if isinstance(value, Mapping) and name != "histogram":
            figures.update(summary_figures(value, f"{dotted}."))
        elif _is_number(value) and math.isfinite(float(value)):
            figures[dotted] = float(value)
    return figures


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


class TensorBoardTracker:
    """Scalars ``metrics/<figure>`` per step and ``summary/<figure>`` at the last step, the summary as text."""

    def __init__(self, log_dir: Path, scenario: Scenario) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(log_dir))
        self.last_step = 0
        self.writer.add_text("scenario", f"```\n{json.dumps(scenario.model_dump(mode='json'), indent=2)}\n```", 0)

    def log_step(self, step: int, row: Mapping[str, Any]) -> None:
        for name, value in step_figures(row).items():
            self.writer.add_scalar(f"metrics/{name}", value, step)
        self.last_step = step

    def finish(self, summary: Mapping[str, Any]) -> None:
        for name, value in summary_figures(summary).items():
            self.writer.add_scalar(f"summary/{name}", value, self.last_step)
        self.writer.add_text("summary", f"```\n{json.dumps(dict(summary), indent=2)}\n```", self.last_step)
        self.writer.close()


class WandbTracker:
    """A W&B run: the scenario as its config, each step's figures logged, the summary as the run's summary."""

    def __init__(self, out: Path, scenario: Scenario) -> None:
        import wandb

        out.mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", "asyncrl"),
            name=out.name,
            dir=str(out),
            mode=os.environ.get("WANDB_MODE", "offline"),
            config=scenario.model_dump(mode="json"),
        )

    def log_step(self, step: int, row: Mapping[str, Any]) -> None:
        self.run.log({f"metrics/{name}": value for name, value in step_figures(row).items()}, step=step)

    def finish(self, summary: Mapping[str, Any]) -> None:
        import wandb

        self.run.summary.update({f"summary/{name}": value for name, value in summary_figures(summary).items()})
        self.run.finish()
        wandb.teardown()  # the service writes the offline run's records out when it stops
