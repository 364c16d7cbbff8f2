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

from .breakdown import DevicePools, KindTotals, breakdown_of, device_hours, ratio, seconds_by_kind
from .busy import busy_seconds
from .run_summary import (
    Idle,
    Restarts,
    RunSummary,
    SampleCounts,
    Staleness,
    StepTime,
    Throughput,
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
        step_time_s=StepTime(mean=ratio(wall, figures.steps), **_percentiles(figures.step_times)),
        throughput=Throughput(samples_per_s=ratio(figures.trained, wall), tokens_per_s=ratio(figures.tokens, wall)),
        staleness=Staleness(
            mean=ratio(sum(key * count for key, count in figures.staleness.items()), figures.trained),
            **histogram_percentiles(histogram),
            max=max(histogram, default=0),
            token_mean=ratio(figures.token_staleness, figures.tokens),
            histogram={str(key): count for key, count in histogram.items()},
        ),
        utilization=Utilization(
            generation=ratio(figures.generation_busy_s, engines * wall),
            training=ratio(figures.training_busy_s, wall),
            generation_slots=ratio(figures.rollout_s, engines * labels.concurrency * wall),
        ),
        idle=Idle(
            generation=1.0 - ratio(figures.generation_busy_s, engines * wall),
            training=1.0 - ratio(figures.training_busy_s, wall),
        ),
        weight_sync_s=ratio(figures.sync_s, engines),
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
    sums = Sums()
    sums.add(events)
    busy = (role_busy_seconds(events, "generation"), role_busy_seconds(events, "training"))
    return sums.summary(labels, train, busy, wall, devices, restarts_of(events))


@dataclass
class Sums:
    """What the summary adds over the rows, for the rows seen so far."""

    trained: int = 0
    tokens: int = 0
    staleness: dict[int, float] = field(default_factory=dict)
    token_staleness: float = 0.0
    rollout_s: float = 0.0
    dropped: int = 0
    finished: int = 0  # rollouts with a generate row
    in_flight: int = 0  # with an unfinished row
    by_kind: KindTotals = field(default_factory=dict)

    def add(self, rows: pd.DataFrame) -> None:
        """Rows of the event table, cut at the run's end; all the rows of a rollout in one call."""
        per_sample = trained_samples(rows)
        self.trained += len(per_sample)
        self.tokens += int(per_sample["tokens"].sum())
        for key, count in per_sample["staleness"].value_counts().items():
            self.staleness[int(key)] = self.staleness.get(int(key), 0.0) + float(count)
        self.token_staleness += float((per_sample["token_staleness"] * per_sample["tokens"]).sum())
        kinds = rows["kind"]
        spans = rows.loc[kinds.isin(ROLLOUT_KINDS)]
        self.rollout_s += float((spans["end"] - spans["start"]).sum())
        self.dropped += int((kinds == "drop").sum())
        self.finished += len(rows.loc[kinds == "generate", ["group", "sample"]].drop_duplicates())
        self.in_flight += len(rows.loc[kinds == "unfinished", ["group", "sample"]].drop_duplicates())
        for key, (seconds, comm) in seconds_by_kind(rows).items():
            had = self.by_kind.get(key, (0.0, 0.0))
            self.by_kind[key] = (had[0] + seconds, had[1] + comm)

    def summary(
        self,
        labels: Labels,
        train: pd.DataFrame,
        busy: tuple[float, float],
        wall: float,
        devices: DevicePools | None,
        restarts: Restarts | None,
    ) -> RunSummary:
        """The summary of a run whose rows have all been added: ``train`` its steps' rows (step, end) in step
        order, ``busy`` the generation and training busy seconds; the breakdown and device-hours need ``devices``."""
        figures = Tally(
            steps=len(train),
            wall_s=wall,
            step_times=np.diff(np.concatenate([[0.0], train["end"].to_numpy()])),
            trained=float(self.trained),
            tokens=float(self.tokens),
            staleness=dict(sorted(self.staleness.items())),
            token_staleness=self.token_staleness,
            generation_busy_s=busy[0],
            training_busy_s=busy[1],
            rollout_s=self.rollout_s,
            sync_s=self.by_kind.get(("generation", "sync"), (0.0, 0.0))[0],
            dropped=float(self.dropped),
        )
        fields: dict[str, Any] = {}
        if devices is not None:
            fields["breakdown"] = breakdown_of(self.by_kind, devices, wall, busy[0])
            fields["device_hours"] = device_hours(devices.total * wall, steps=figures.steps, trained=figures.trained)
        if restarts is not None:
            fields["restarts"] = restarts
        queued = self.finished - self.trained - self.dropped
        return summary_of(figures, labels, queued=queued, in_flight=self.in_flight, **fields)


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
