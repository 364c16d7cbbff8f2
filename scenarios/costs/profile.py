"""A measured cost profile: what calibration on the executor writes and the simulator reads.

(A profile file with ``kind: efficiency`` holds the analytic model's efficiency terms instead:
``scenarios.costs.efficiency``. ``load_profile`` reads either.)

    decode_step_s: {1: 0.010, 16: 0.012, 64: 0.018}  # one decode step of one engine at batch b
    decode_context_token_s: 0.0   # optional: extra decode-step time per token of context in the batch
    prefill_token_s: 2.0e-5       # per prompt token, one engine
    prefill_per: group            # optional: group (one prefill per group: a prefix cache) | sample (each sample's)
    join_s: 0.0                   # optional: per prefill besides its tokens (the call, merging into the batch cache)
    retire_s: 0.0                 # optional: per decode step in which rollouts finish (compacting the cache)
    train_token_s: 4.0e-4         # learner time per trained token on ONE training device
    train_token_square_s: 0.0     # optional: per row and squared row length (attention), ONE training device
    train_step_overhead_s: 0.0    # optional: fixed learner time per step (optimizer update, launches)
    train_padding: packed         # optional: packed (cost per real token) | longest (per token once padded)
    train_contention: 0.0         # optional: the learner's step takes (1 + this) as long while an engine computes
    engine_contention: 0.0        # optional: an engine's work takes (1 + this) as long while the learner computes
    time_slicing: 0.0             # optional: with host_cores, an oversubscribed engine runs (1 + this) slower than its share
    wake_s: 0.0                   # optional: an idle engine's delay before it acts on work handed to it (messages)
    train_start_s: 0.0            # optional: delay between a batch being ready (learner free) and its step starting
    weight_sync_s: 0.3            # one synchronization of one engine
    engine_start_s: 1.5           # optional: a failed engine's replacement, from its death to its first weight load

Between the measured batch sizes the decode-step time is interpolated
linearly; beyond the largest (or below the smallest) it stays flat.
``train_token_s`` covers the extra forward passes and divides by the number
of training devices.
"""

from __future__ import annotations

import bisect
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..files.limits import (
    MAX_CONCURRENCY,
    MAX_SCENARIO_FILE_BYTES,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
)
from ..files.textfile import parse_yaml, read_text
from .efficiency import Efficiency


class CostProfile(BaseModel):
    """Seconds per unit of work, measured on one device kind for one model."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    decode_step_s: dict[PositiveInt, PositiveFloat] = Field(description="batch size -> seconds per decode step")
    decode_context_token_s: NonNegativeFloat = Field(
        0.0, description="seconds per token of context read in a decode step"
    )
    prefill_token_s: NonNegativeFloat
    prefill_per: Literal["group", "sample"] = Field(
        "group",
        description="group: a group's prompt is prefilled once (prefix caching); sample: once per sample (the executor)",
    )
    join_s: NonNegativeFloat = Field(0.0, description="seconds per prefill besides its tokens (call, cache merge)")
    retire_s: NonNegativeFloat = Field(
        0.0, description="seconds per decode step in which rollouts finish (the batch cache is compacted)"
    )
    train_token_s: PositiveFloat
    train_token_square_s: NonNegativeFloat = Field(
        0.0, description="learner time per row per squared row length (attention), on ONE training device"
    )
    train_step_overhead_s: NonNegativeFloat = Field(0.0, description="fixed learner time per step (optimizer, launch)")
    train_padding: Literal["packed", "longest"] = Field(
        "packed", description="packed: cost per real token; longest: minibatches padded to their longest row"
    )
    train_contention: NonNegativeFloat = Field(
        0.0,
        description="learner steps take (1 + this) as long while an engine computes on the same host (caches, memory)",
    )
    engine_contention: NonNegativeFloat = Field(
        0.0,
        description="an engine's work (decode steps, prefills, retirements) takes (1 + this) as long while the "
        "learner computes on the same host (caches, memory bandwidth, the learner's threads)",
    )
    time_slicing: NonNegativeFloat = Field(
        0.0,
        description="with hardware.host_cores: while the busy threads outnumber the cores, an engine runs at "
        "cores / threads / (1 + this) of its speed (what the operating system's time slicing costs it beyond its share)",
    )
    wake_s: NonNegativeFloat = Field(
        0.0, description="seconds an idle engine takes to act on work handed to it (the command's delivery, its loop)"
    )
    train_start_s: NonNegativeFloat = Field(
        0.0, description="seconds from a complete batch (learner free) to its step starting (the report, collation)"
    )
    weight_sync_s: NonNegativeFloat
    engine_start_s: NonNegativeFloat | None = Field(
        None,
        description="seconds from an engine's death to its replacement's first weight load (process start, model "
        "load), fitted from an executed run's restarts; unset: the analytic guess (simulator.costs)",
    )

    @field_validator("decode_step_s")
    @classmethod
    def _sorted_non_empty(cls, table: dict[int, float]) -> dict[int, float]:
        if not table:
            raise ValueError("needs at least one batch size")
        if len(table) > MAX_CONCURRENCY:
            raise ValueError(f"{len(table):,} batch sizes, more than {MAX_CONCURRENCY:,}")
        ordered = dict(sorted(table.items()))
        sizes, times = list(ordered), list(ordered.values())
        for i in range(1, len(sizes)):
            if times[i] < times[i - 1]:
                raise ValueError(
                    f"{times[i]:g} s at batch {sizes[i]} is less than {times[i - 1]:g} s at batch {sizes[i - 1]}; "
                    "a decode step cannot get faster as the batch grows (take the running maximum)"
                )
        return ordered

    def decode_step(self, batch: int) -> float:
        """Seconds for one decode step at ``batch`` rollouts, from the table."""
        sizes = list(self.decode_step_s)
        times = list(self.decode_step_s.values())
        if batch <= sizes[0]:
            return times[0]
        if batch >= sizes[-1]:
            return times[-1]
        hi = bisect.bisect_right(sizes, batch)
        b0, b1, t0, t1 = sizes[hi - 1], sizes[hi], times[hi - 1], times[hi]
        return t0 + (t1 - t0) * (batch - b0) / (b1 - b0)


def load_profile(path: Path) -> CostProfile | Efficiency:
    """Read a profile file: measured costs, or (``kind: efficiency``) the analytic model's efficiency terms;
    a ValueError names the file and the bad field."""
    data = parse_yaml(read_text(path, MAX_SCENARIO_FILE_BYTES, "a cost profile"), path)
    kind = Efficiency if isinstance(data, dict) and data.get("kind") == "efficiency" else CostProfile
    try:
        return kind.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "profile"
        raise ValueError(f"{path}: {field}: {first['msg'].removeprefix('Value error, ')}") from None


def running_maximum(table: dict[int, float]) -> dict[int, float]:
    """A measured decode table made non-decreasing in the batch size (timing noise can make it dip)."""
    ordered, top = {}, 0.0
    for batch, seconds in sorted(table.items()):
        top = max(top, seconds)
        ordered[batch] = top
    return ordered


def save_profile(profile: CostProfile, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    from ..files.writing import write_text

    write_text(path, yaml.safe_dump(profile.model_dump(exclude_none=True), sort_keys=False))
