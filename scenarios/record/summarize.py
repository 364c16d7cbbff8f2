"""The figures of a run, from its event table or from a simulator's tallies, as one ``RunSummary``.

    events.parquet ──summarize──► Tally (sums) ──summary_of──► RunSummary ◄──summary_of── Tally ◄── simulator
                         └──────────── breakdown, device-hours ────┘           (simulator/summary.py, sweeps)

Event kinds, by role:

    generation  generate    one rollout (prefill included) under one policy version;
                            with in-flight updates, one row per version it saw
                unfinished  a rollout still running when the run ended, cut there
                prefill     an engine prefilling a group's prompt (``tokens`` = prompt);
                            inside the group's generate spans; simulator only
                sync        an engine loading new weights (``version`` = loaded)
                switch      a colocated engine handing its devices back to generation
                            (the learner state leaving); simulator only
                drop        a finished rollout discarded (too stale, or pushed out of a full queue); zero length
                lost        a rollout lost with the engine that held it (generated
                            again later under the same group and sample)
                restart     an engine down: from its death to its replacement's start
    training    restart     the learner down (--auto-resume): from its death to the
                            resumed run's start
                train       one learner step (``tokens`` = prompt + completion)
                switch      colocated devices bringing the learner state back; simulator only

``step`` on a generate row is the learner step that trained the rollout, −1 if none did. ``version`` on a generate
row is the policy version that produced its tokens; on a train row the version being trained (= step). ``comm_s`` is
the part of a span spent communicating where compute could not hide it: on a rollout row its share of its engine's
tensor-parallel all-reduces (each decode step's split evenly among the rollouts in the batch), on a train row the
learner's exposed data-parallel communication; 0 elsewhere, and 0 wherever the executor cannot tell it apart.
Because the summary is computed from the events alone, the simulator and the executor are summarized by the same
code; a sweep, which never builds the table, hands ``summary_of`` the same sums.

``breakdown`` in the summary splits every device-second of the run (wall time × devices) by what it went to, per
role; colocated devices count once, under the phase they were in, and their idle time is generation's (training has
none: every device trains together).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..spec.scenario import ClusterSpec
from .busy import busy_seconds
from .run_summary import (
    Breakdown,
    DeviceCounts,
    DeviceHours,
    GenerationTime,
    Idle,
    Restarts,
    RunSummary,
    SampleCounts,
    Staleness,
    StepTime,
    Throughput,
    TrainingTime,
    Utilization,
)

if TYPE_CHECKING:
    import pandas as pd

EVENT_COLUMNS: dict[str, str] = {
    "worker": "string",
    "role": "string",
    "kind": "string",
    "start": "float64",
    "end": "float64",
    "step": "int64",
    "version": "int64",
    "group": "int64",
    "sample": "int64",
    "tokens": "int64",
    "comm_s": "float64",
}
BUSY_KINDS = {
    "generation": ("generate", "unfinished", "lost", "prefill", "sync", "switch"),
    "training": ("train", "switch"),
}
ROLLOUT_KINDS = ("generate", "unfinished", "lost")  # spans that held an engine's slot
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


def event_row(
    worker: int | str,
    kind: str,
    start: float,
    end: float,
    step: int = -1,
    version: int = -1,
    group: int = -1,
    sample: int = -1,
    tokens: int = 0,
) -> dict[str, Any]:
    """One row of the event table (EVENT_COLUMNS), as a dict; ``worker`` an engine's index or a name. The
    learner's steps, restarts and switches are training's; everything else is generation's."""
    learner = worker == "learner" and kind in ("restart", "switch")
    return {
        "worker": f"engine-{worker}" if isinstance(worker, int) else worker,
        "role": "training" if kind == "train" or learner else "generation",
        "kind": kind,
        "start": start,
        "end": end,
        "step": step,
        "version": version,
        "group": group,
        "sample": sample,
        "tokens": tokens,
        "comm_s": 0.0,
    }


def empty_events() -> pd.DataFrame:
    """An event table with no rows and the columns and dtypes of EVENT_COLUMNS."""
    import pandas as pd

    return pd.DataFrame({name: pd.Series(dtype=dtype) for name, dtype in EVENT_COLUMNS.items()})


@dataclass
class Tally:
    """Figures of the learner steps ``[first, last)`` of a run, as sums that add up over stretches of it."""

    steps: int
    wall_s: float  # from the end of step first − 1 (0 for the first step) to the end of step last − 1
    step_times: np.ndarray  # (s)
    trained: float  # rollouts trained by these steps
    tokens: float  # their completion tokens
    staleness: dict[int, float] = field(default_factory=dict)  # trained rollouts by staleness
    token_staleness: float = 0.0  # staleness of every trained token, summed (token-steps)
    generation_busy_s: float = 0.0  # added over engines
    training_busy_s: float = 0.0
    rollout_s: float = 0.0  # rollout-seconds (generate and unfinished spans)
    sync_s: float = 0.0  # weight-load seconds, added over engines
    dropped: float = 0.0  # rollouts dropped


@dataclass(frozen=True)
class Labels:
    """What names a run in its summary besides its figures: which backend, which scenario, on how many engines."""

    backend: str
    scenario: str
    engines: int
    concurrency: int  # rollouts an engine runs at once


def summary_of(figures: Tally, labels: Labels, *, queued: int, in_flight: int, **fields: Any) -> RunSummary:
    """The RunSummary of a whole run's ``figures``; ``fields`` are the optional ones (breakdown, extrapolation).

    Counts that an extrapolated run holds as fractions are rounded here, the histogram's included.
    """
    wall, engines = figures.wall_s, labels.engines
    histogram = {key: round(count) for key, count in sorted(figures.staleness.items()) if round(count) > 0}
    trained, dropped = round(figures.trained), round(figures.dropped)
    return RunSummary(
        backend=labels.backend,
        scenario=labels.scenario,
        steps=figures.steps,
        wall_time_s=wall,
        step_time_s=StepTime(mean=_ratio(wall, figures.steps), **_percentiles(figures.step_times)),
        throughput=Throughput(samples_per_s=_ratio(figures.trained, wall), tokens_per_s=_ratio(figures.tokens, wall)),
        staleness=Staleness(
            mean=_ratio(sum(key * count for key, count in figures.staleness.items()), figures.trained),
            **histogram_percentiles(histogram),
            max=max(histogram, default=0),
            token_mean=_ratio(figures.token_staleness, figures.tokens),
            histogram={str(key): count for key, count in histogram.items()},
        ),
        utilization=Utilization(
            generation=_ratio(figures.generation_busy_s, engines * wall),
            training=_ratio(figures.training_busy_s, wall),
            generation_slots=_ratio(figures.rollout_s, engines * labels.concurrency * wall),
        ),
        idle=Idle(
            generation=1.0 - _ratio(figures.generation_busy_s, engines * wall),
            training=1.0 - _ratio(figures.training_busy_s, wall),
        ),
        weight_sync_s=_ratio(figures.sync_s, engines),
        samples=SampleCounts(
            generated=trained + queued + in_flight + dropped,
            trained=trained,
            queued=queued,
            in_flight=in_flight,
            dropped=dropped,
        ),
        **fields,
    )


def summarize(
    events: pd.DataFrame,
    *,
    backend: str,
    scenario_name: str,
    engines: int,
    concurrency: int,
    devices: DevicePools | None = None,
) -> RunSummary:
    """Every summary figure, from the event table of one run; the device-time breakdown and device-hours
    need ``devices`` (without them they are left out)."""
    labels = Labels(backend, scenario_name, engines, concurrency)
    train = events.loc[events["kind"] == "train", ["step", "end"]].sort_values("step")
    wall = float(train["end"].max()) if len(train) else 0.0
    events = events.assign(start=events["start"].clip(upper=wall), end=events["end"].clip(upper=wall))
    if "comm_s" not in events:  # a record from before the column existed
        events = events.assign(comm_s=0.0)
    figures = _tally(events, train, wall)
    fields: dict[str, Any] = {}
    if devices is not None:
        fields["breakdown"] = _breakdown(events, devices, wall, figures.generation_busy_s)
        fields["device_hours"] = device_hours(devices.total * wall, steps=figures.steps, trained=figures.trained)
    restarts = restarts_of(events)
    if restarts is not None:
        fields["restarts"] = restarts
    kinds = events["kind"]
    finished = len(events.loc[kinds == "generate", ["group", "sample"]].drop_duplicates())
    in_flight = len(events.loc[kinds == "unfinished", ["group", "sample"]].drop_duplicates())
    queued = finished - round(figures.trained) - round(figures.dropped)
    return summary_of(figures, labels, queued=queued, in_flight=in_flight, **fields)


def _tally(events: pd.DataFrame, train: pd.DataFrame, wall: float) -> Tally:
    """The sums of a whole run, from events already cut at ``wall``."""
    per_sample = trained_samples(events)
    syncs = events.loc[events["kind"] == "sync", ["start", "end"]]
    return Tally(
        steps=len(train),
        wall_s=wall,
        step_times=np.diff(np.concatenate([[0.0], train["end"].to_numpy()])),
        trained=float(len(per_sample)),
        tokens=float(per_sample["tokens"].sum()),
        staleness={int(k): float(v) for k, v in per_sample["staleness"].value_counts().sort_index().items()},
        token_staleness=float((per_sample["token_staleness"] * per_sample["tokens"]).sum()),
        generation_busy_s=role_busy_seconds(events, "generation"),
        training_busy_s=role_busy_seconds(events, "training"),
        rollout_s=_span_seconds(events, ROLLOUT_KINDS),
        sync_s=float((syncs["end"] - syncs["start"]).sum()),
        dropped=float((events["kind"] == "drop").sum()),
    )


def restarts_of(events: pd.DataFrame) -> Restarts | None:
    """Restarts and the rollouts lost with them, from ``restart`` and ``lost`` rows; None if nothing restarted."""
    restarts = events[events["kind"] == "restart"]
    if restarts.empty:
        return None
    learner = restarts["worker"] == "learner"
    return Restarts(
        engines=int((~learner).sum()),
        learner=int(learner.sum()),
        regenerated_samples=int((events["kind"] == "lost").sum()),
        down_s=float((restarts["end"] - restarts["start"]).sum()),
    )


def _breakdown(events: pd.DataFrame, devices: DevicePools, wall: float, generation_busy: float) -> Breakdown:
    """Device-seconds per role and category, from events already cut at ``wall`` (see the module docstring);
    ``generation_busy`` is the engines' busy seconds, added over engines."""
    return breakdown_of(seconds_by_kind(events), devices, wall, generation_busy)


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


def add_totals(into: KindTotals, more: KindTotals) -> None:
    for key, (seconds, comm) in more.items():
        had = into.get(key, (0.0, 0.0))
        into[key] = (had[0] + seconds, had[1] + comm)


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
    return DeviceHours(total=total, per_step=_ratio(total, steps), per_1k_samples=_ratio(1000.0 * total, trained))


def trained_samples(events: pd.DataFrame) -> pd.DataFrame:
    """One row per trained rollout: staleness (oldest version) and token-mean staleness."""
    import pandas as pd

    rows = events.loc[
        (events["kind"] == "generate") & (events["step"] >= 0), ["group", "sample", "version", "tokens", "step"]
    ]
    if rows.empty:
        return pd.DataFrame({"tokens": [], "staleness": [], "token_staleness": []})
    if _one_piece_each(rows["group"].to_numpy(), rows["sample"].to_numpy()):
        # No rollout was cut by a weight load: each row is a sample, its oldest and token-mean version its own.
        staleness = rows["step"].to_numpy() - rows["version"].to_numpy()
        return pd.DataFrame(
            {
                "tokens": rows["tokens"].to_numpy(),
                "staleness": staleness,
                "token_staleness": staleness.astype(np.float64),
            }
        )
    weighted = rows.assign(weight=rows["version"] * rows["tokens"])
    by_sample = weighted.groupby(["group", "sample"], sort=False)
    tokens = by_sample["tokens"].sum()
    oldest = by_sample["version"].min()
    step = by_sample["step"].first()
    mean_version = (by_sample["weight"].sum() / tokens.where(tokens > 0)).fillna(oldest)
    return pd.DataFrame(
        {"tokens": tokens, "staleness": (step - oldest).astype(np.int64), "token_staleness": step - mean_version}
    )


def _one_piece_each(groups: np.ndarray, samples: np.ndarray) -> bool:
    """Each (group, sample) appears once, in increasing order (the simulator's table, with no in-flight update
    cutting a rollout): then the rows are already the samples, in the order a group-by would give them."""
    if len(groups) < 2:
        return True
    key = groups.astype(np.int64) * (int(samples.max()) + 1) + samples
    return bool((key[1:] > key[:-1]).all())


def role_busy_seconds(events: pd.DataFrame, role: str) -> float:
    """Seconds each worker of ``role`` had any span open, added over workers in the order they first appear."""
    import pandas as pd

    spans = events.loc[(events["role"] == role) & events["kind"].isin(BUSY_KINDS[role]), ["worker", "start", "end"]]
    workers, _ = pd.factorize(spans["worker"])  # numbered by first appearance
    return busy_seconds(workers, spans["start"].to_numpy(dtype=np.float64), spans["end"].to_numpy(dtype=np.float64))


def _span_seconds(events: pd.DataFrame, kinds: tuple[str, ...]) -> float:
    spans = events.loc[events["kind"].isin(kinds), ["start", "end"]]
    return float((spans["end"] - spans["start"]).sum())


def histogram_percentiles(histogram: dict[int, int]) -> dict[str, float]:
    """``_percentiles`` of the values a histogram counts (``{value: count}``, values ascending), without
    writing each value out (a run trains millions of rollouts), to the bit: np.percentile's linear rule,
    its arithmetic step by step (virtual rank n·q + (1 − q) − 1, then a + (b − a)·γ, from b where γ ≥ ½)."""
    values, counts = np.asarray(list(histogram), dtype=np.float64), np.asarray(list(histogram.values()))
    total = int(counts.sum())
    if total == 0:
        return {"p50": 0.0, "p95": 0.0}
    last_rank = np.cumsum(counts) - 1  # the rank of each value's last copy
    figures = {}
    for name, q in (("p50", 50), ("p95", 95)):
        quantile = q / 100
        virtual = total * quantile + (1 + quantile * (1 - 1 - 1)) - 1
        below = float(np.floor(virtual))
        gamma = virtual - below
        low = values[np.searchsorted(last_rank, min(max(below, 0), total - 1))]
        high = values[np.searchsorted(last_rank, min(max(below + 1, 0), total - 1))]
        step = high - low
        figures[name] = float(high - step * (1 - gamma) if gamma >= 0.5 else low + step * gamma)
    return figures


def _percentiles(values: np.ndarray) -> dict[str, float]:
    if len(values) == 0:
        return {"p50": 0.0, "p95": 0.0}
    return {"p50": float(np.percentile(values, 50)), "p95": float(np.percentile(values, 95))}


def _ratio(numerator: float, denominator: float) -> float:
    return float(numerator / denominator) if denominator > 0 else 0.0
