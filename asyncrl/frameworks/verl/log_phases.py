"""A verl run's metrics log as the phases of its steps: what the calibration fits the cost model to.

    MetricsLog (one row per logged step)
        ─► drop the first step (weights loading, engines warming up), and from each step the time of
           validation and checkpoints (timing_s/testing, save_checkpoint: not part of a training step)
        ─► per kept step, in seconds:
               generation  timing_s/gen (+ timing_s/update_weights where verl times the weights apart):
                           everything between two learner phases of a sync run; where verl times its
                           parts, the engines' generation (generate_sequences) and the weights' update
                           (reshard) apart from the rest of it (waking and sleeping, collating)
               no-grad     timing_s/old_log_prob + ref + values
               training    timing_s/update_actor + update_critic
               the rest    timing_s/step minus all of the above (reward, advantages, untimed)
           and its tokens: perf/total_num_tokens, else (prompt_length/mean + response_length/mean) × samples
        ─► LoggedSteps

verl before 2025 (``timing/<phase>`` keys, ``MetricsLog.legacy_timing``) computed the old log-probs inside
``gen`` and logged no ``step``: such a log's generation holds one no-grad pass, and it has no "rest". verl's
fully async trainer logs one line per ``trigger_parameter_sync_step`` local updates, its timings summed over
them: ``updates_per_logged_step`` divides them back to one learner step. Every value read must be a finite,
non-negative number, and each phase positive somewhere; anything else is a one-line error naming the key and
the step (exit status 2 at the command).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from asyncrl.frameworks.common.metrics_log import MetricsLog, MetricsLogError, require

if TYPE_CHECKING:
    import pandas as pd

GEN, STEP, UPDATE = "timing_s/gen", "timing_s/step", "timing_s/update_actor"
SWITCH = "timing_s/update_weights"
GENERATE, RESHARD = "timing_s/generate_sequences", "timing_s/reshard"  # parts of gen, where verl times them
FORWARD_KEYS = ("timing_s/old_log_prob", "timing_s/ref", "timing_s/values")
UPDATE_KEYS = (UPDATE, "timing_s/update_critic")
NOT_TRAINING = ("timing_s/testing", "timing_s/save_checkpoint")  # in timing_s/step, not part of training
TOKENS = "perf/total_num_tokens"
RESPONSE, PROMPT = "response_length/mean", "prompt_length/mean"
REQUIRED = (GEN, UPDATE)  # or a step's time alone (a published table): the whole step is then one phase
#: The first logged step is dropped when at least this many remain (it loads weights and warms engines up).
KEEP_AT_LEAST = 2


@dataclass(frozen=True)
class LoggedSteps:
    """The kept steps of one log, each phase's seconds per step (None: the log does not time it)."""

    source: Path
    steps: np.ndarray
    gen: np.ndarray | None  # None: the log times whole steps only
    generate: np.ndarray | None  # of gen: the engines generating
    reshard: np.ndarray | None  # of gen (with update_weights): the weights reaching the engines
    forward: np.ndarray | None
    update: np.ndarray | None
    rest: np.ndarray | None
    step: np.ndarray | None
    tokens: np.ndarray | None
    response: np.ndarray | None  # response_length/mean per step
    legacy: bool
    notes: list[str] = field(default_factory=list)

    def mean(self, phase: str) -> float | None:
        values = getattr(self, phase)
        return None if values is None else float(np.mean(values))

    def window(self, keep: np.ndarray) -> LoggedSteps:
        """The steps ``keep`` (a boolean mask) selects."""

        def cut(values: np.ndarray | None) -> np.ndarray | None:
            return None if values is None else values[keep]

        return replace(
            self,
            steps=self.steps[keep],
            gen=cut(self.gen),
            generate=cut(self.generate),
            reshard=cut(self.reshard),
            forward=cut(self.forward),
            update=cut(self.update),
            rest=cut(self.rest),
            step=cut(self.step),
            tokens=cut(self.tokens),
            response=cut(self.response),
        )


def logged_steps(log: MetricsLog, samples: int, updates_per_logged_step: int = 1) -> LoggedSteps:
    """The phases of ``log``'s steps (module docstring); ``samples``: the run's samples per learner step."""
    rows = log.rows
    if STEP in log.keys and not (GEN in log.keys or UPDATE in log.keys):
        return _whole_steps(log, rows[rows[STEP].notna()], updates_per_logged_step)
    require(log, REQUIRED)
    rows = rows[rows[GEN].notna() & rows[UPDATE].notna()]
    notes = []
    if len(rows) >= KEEP_AT_LEAST + 1:
        notes.append(f"{log.source}: its first step ({int(rows.index[0])}) left out: it loads weights and warms up")
        rows = rows.iloc[1:]
    _check_values(log, rows)
    per = float(updates_per_logged_step)
    if per != 1:
        notes.append(f"{log.source}: each logged step sums {updates_per_logged_step} learner updates; divided")

    def total(keys: Sequence[str]) -> np.ndarray | None:
        present = [key for key in keys if key in rows and rows[key].notna().any()]
        return rows[present].fillna(0.0).sum(axis=1).to_numpy(dtype=float) / per if present else None

    gen_only, switch = total((GEN,)), total((SWITCH,))
    assert gen_only is not None  # required
    gen = gen_only + (switch if switch is not None else 0.0)
    generate, reshard = total((GENERATE,)), total((RESHARD,))
    if reshard is not None and switch is not None:
        reshard = reshard + switch
    elif reshard is None:
        reshard = switch
    if generate is not None and reshard is None:  # the rest of gen cannot be told from the weights' update
        generate = None
    forward, update = total(FORWARD_KEYS), total(UPDATE_KEYS)
    assert update is not None  # required
    step, rest = None, None
    if STEP in rows and rows[STEP].notna().all():
        outside = total(NOT_TRAINING)
        step = rows[STEP].to_numpy(dtype=float) / per - (outside if outside is not None else 0.0)
        rest = np.maximum(0.0, step - gen - update - (forward if forward is not None else 0.0))
    elif not log.legacy_timing:
        notes.append(f"{log.source}: no {STEP} in every step: the rest of a step (reward, advantages) not fitted")
    _check_phases(log, {"generation": gen, "training": update, **({"no-grad": forward} if forward is not None else {})})
    tokens = step_tokens(rows, samples)
    return LoggedSteps(
        source=log.source,
        steps=rows.index.to_numpy(),
        gen=gen,
        generate=generate,
        reshard=reshard,
        forward=forward,
        update=update,
        rest=rest,
        step=step,
        tokens=tokens / per if tokens is not None else None,
        response=rows[RESPONSE].to_numpy(dtype=float) if RESPONSE in rows and rows[RESPONSE].notna().all() else None,
        legacy=log.legacy_timing,
        notes=notes,
    )


def _whole_steps(log: MetricsLog, rows: pd.DataFrame, per: int) -> LoggedSteps:
    """A log that times whole steps only (a published table's step time): one phase, the step."""
    _check_values(log, rows)
    step = rows[STEP].to_numpy(dtype=float) / per
    _check_phases(log, {"step": step})
    note = f"{log.source}: only whole steps timed: the terms fitted to their sum"
    return LoggedSteps(
        log.source, rows.index.to_numpy(), None, None, None, None, None, None, step, None, None, False, [note]
    )


def step_tokens(rows: pd.DataFrame, samples: int) -> np.ndarray | None:
    """Prompt + response tokens per step: perf/total_num_tokens, else the logged means times the samples."""
    if TOKENS in rows and rows[TOKENS].notna().all():
        return rows[TOKENS].to_numpy(dtype=float)
    if RESPONSE in rows and PROMPT in rows and rows[RESPONSE].notna().all() and rows[PROMPT].notna().all():
        return (rows[RESPONSE] + rows[PROMPT]).to_numpy(dtype=float) * samples
    return None


def _check_values(log: MetricsLog, rows: pd.DataFrame) -> None:
    """Every timing and token count a finite, non-negative number; tokens positive."""
    keys = [key for key in rows.columns if str(key).startswith("timing_s/") or key in (TOKENS, RESPONSE, PROMPT)]
    for key in keys:
        values = rows[key].to_numpy(dtype=float)
        bad = ~np.isfinite(values) & ~np.isnan(values) | (values < 0)
        if key in (TOKENS, RESPONSE, PROMPT):
            bad |= values == 0
        if bad.any():
            step = int(rows.index[int(np.argmax(bad))])
            what = "a positive number" if key in (TOKENS, RESPONSE, PROMPT) else "a finite number of seconds, >= 0"
            raise MetricsLogError(f"{log.source}: step {step}: {key} is {float(values[bad][0])}, not {what}")


def _check_phases(log: MetricsLog, phases: dict[str, np.ndarray]) -> None:
    for name, values in phases.items():
        if not np.any(values > 0):
            raise MetricsLogError(f"{log.source}: the {name} phase takes 0 s in every kept step: nothing to fit to")
