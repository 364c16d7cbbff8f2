"""Where a run's device-seconds went: per role and category, from the seconds of each kind of event row.

    rows ──seconds_by_kind──► {(role, kind): (seconds, comm_s)} ──breakdown_of(devices, wall, busy)──► Breakdown

(See ``scenarios.record.summarize``'s docstring for what each category holds.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..spec.scenario import ClusterSpec
from .run_summary import Breakdown, DeviceCounts, DeviceHours, GenerationTime, TrainingTime

if TYPE_CHECKING:
    import pandas as pd

SECONDS_PER_HOUR = 3600.0


@dataclass(frozen=True)
class DevicePools:
    """How many devices each role holds; colocated pools are the same devices."""

    generation: int
    devices_per_engine: int
    training: int
    colocated: bool

    @classmethod
    def of(cls, cluster: ClusterSpec) -> DevicePools:
        return cls(cluster.generation_devices, cluster.devices_per_engine, cluster.training_devices, cluster.colocated)

    @property
    def total(self) -> int:
        return self.generation if self.colocated else self.generation + self.training


KindTotals = dict[tuple[str, str], tuple[float, float]]  # (role, kind) → (span seconds, comm_s), added over rows


def seconds_by_kind(events: pd.DataFrame) -> KindTotals:
    """The seconds and ``comm_s`` of the rows of each (role, kind)."""
    import pandas as pd

    totals = pd.DataFrame(
        {
            "role": events["role"],
            "kind": events["kind"],
            "seconds": events["end"] - events["start"],
            "comm_s": events["comm_s"].fillna(0.0),
        }
    )
    by_kind = totals.groupby(["role", "kind"], observed=True)[["seconds", "comm_s"]].sum()
    return {key: (float(row["seconds"]), float(row["comm_s"])) for key, row in by_kind.iterrows()}


def breakdown_of(by_kind: KindTotals, devices: DevicePools, wall: float, generation_busy: float) -> Breakdown:
    """The breakdown from each (role, kind)'s seconds (``seconds_by_kind``) and the engines' busy seconds."""
    tp, trainers = devices.devices_per_engine, devices.training

    def total(role: str, kind: str, column: str = "seconds") -> float:
        return by_kind.get((role, kind), (0.0, 0.0))[0 if column == "seconds" else 1]

    tensor_parallel = total("generation", "generate", "comm_s") + total("generation", "unfinished", "comm_s")
    pauses = total("generation", "prefill") + total("generation", "sync") + total("generation", "switch")
    communication = total("training", "train", "comm_s")
    generation = GenerationTime(
        decode=max(0.0, generation_busy - pauses - tensor_parallel) * tp,
        prefill=total("generation", "prefill") * tp,
        weight_sync=total("generation", "sync") * tp,
        phase_switch=total("generation", "switch") * tp,
        tensor_parallel=tensor_parallel * tp,
        idle=0.0,
    )
    training = TrainingTime(
        compute=(total("training", "train") - communication) * trainers,
        communication=communication * trainers,
        phase_switch=total("training", "switch") * trainers,
        idle=0.0,
    )
    return _with_idle(generation, training, devices, wall)


def _with_idle(generation: GenerationTime, training: TrainingTime, devices: DevicePools, wall: float) -> Breakdown:
    """Idle device-seconds: what each pool's categories leave of its devices × wall (colocated: of one pool)."""
    generation_busy = sum(generation.model_dump().values())
    training_busy = sum(training.model_dump().values())
    if devices.colocated:
        generation_idle = devices.total * wall - generation_busy - training_busy
        training_idle = 0.0
    else:
        generation_idle = devices.generation * wall - generation_busy
        training_idle = devices.training * wall - training_busy
    counts = DeviceCounts(generation=devices.generation, training=devices.training, total=devices.total)
    return Breakdown(
        devices=counts,
        generation=generation.model_copy(update={"idle": max(0.0, generation_idle)}),
        training=training.model_copy(update={"idle": max(0.0, training_idle)}),
    )


def device_hours(device_seconds: float, *, steps: int, trained: float) -> DeviceHours:
    total = device_seconds / SECONDS_PER_HOUR
    return DeviceHours(total=total, per_step=ratio(total, steps), per_1k_samples=ratio(1000.0 * total, trained))


def ratio(numerator: float, denominator: float) -> float:
    """numerator / denominator, 0 where the denominator is not positive."""
    return float(numerator / denominator) if denominator > 0 else 0.0
