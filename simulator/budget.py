"""The simulator's memory: what a run will hold, checked against what this machine has before it starts.

    Simulation(scenario) ──plan(scenario)──► Budget(rollouts it may start)   or MemoryBudgetError (exit 2)
    Rollouts.start_group ──► more than Budget.rollouts started?              ──► MemoryBudgetError

Memory grows with what the run keeps (``benchmarks/simulator_memory.py``
measures it): settled rollouts are packed as the run goes (``simulator.rollouts``,
15 bytes a rollout) and ``asyncrl simulate`` writes its record in pieces
(``simulator.recording.streamed``), so a run of 9.3 million rollouts peaks at about
440 MB, of which some 150 MB is Python, numpy, pandas and pyarrow; a sweep's run,
summarized from per-rollout arrays (``simulator.summary``), holds about 250
bytes a rollout at its end. Engines cost about 2 KB each, and weight loads (up to
engines × steps) are kept as objects. The estimate charges ``BASE_BYTES`` and
``BYTES_PER_ROW`` per rollout, load and step (two per rollout with in-flight
updates), above every figure measured for those paths, so it errs towards
refusing. A run kept whole in memory (``simulator.simulation.simulate``, the
Python API without a run directory) holds its event table too, about 500 bytes
a row: the estimate does not cover that.

Available memory is the least of ``MemAvailable``, the cgroup's headroom and
the headroom under ``RLIMIT_AS`` and ``RLIMIT_DATA`` (``ulimit -v``/``-d``);
a run may plan on ``USABLE_FRACTION`` of it. Runs whose drops let generation
outrun training start more rollouts than they train: ``Rollouts`` stops them
at the budget instead of letting them grow.
"""

from __future__ import annotations

import math
import os
import resource
from dataclasses import dataclass
from pathlib import Path

from ..scenarios.spec.loading import ScenarioError
from ..scenarios.spec.scenario import Scenario

BYTES_PER_ROW = 250
BYTES_PER_ENGINE = 4_000
BASE_BYTES = 192 << 20
USABLE_FRACTION = 0.8


class MemoryBudgetError(ScenarioError):
    """A run that would not fit in this machine's memory; the message names the field to change."""


@dataclass(frozen=True)
class Budget:
    """How many rollouts a run may start on this machine, and the bytes that figure came from."""

    rollouts: int
    available: int


def plan(scenario: Scenario, available: int | None = None, share: int = 1) -> Budget:
    """The run's budget; MemoryBudgetError, naming the field and the most that fits, if its planned steps do not fit.
    ``share``: runs at once in this memory (a sweep's pool), each planning on its share of it."""
    available = (available_bytes() if available is None else available) // share
    engines, steps = scenario.cluster.engines, scenario.run.steps
    usable = available * USABLE_FRACTION - BASE_BYTES - BYTES_PER_ENGINE * engines
    per_rollout = BYTES_PER_ROW * _rows_per_rollout(scenario)
    per_step = BYTES_PER_ROW * (engines + 1) + per_rollout * scenario.batch_samples
    if usable <= 0:
        raise MemoryBudgetError(
            f"cluster.generation_devices: {engines:,} engines need about {_gb(BYTES_PER_ENGINE * engines + BASE_BYTES)}"
            f" to simulate, more than the {_gb(available * USABLE_FRACTION)} usable here"
        )
    fits = math.floor(usable / per_step)
    if fits < 1:
        raise MemoryBudgetError(
            f"workload.prompts_per_step: one step of {scenario.batch_samples:,} rollouts needs about {_gb(per_step)} "
            f"to simulate, more than the {_gb(usable)} usable here"
        )
    if steps > fits:
        raise MemoryBudgetError(
            f"run.steps: {steps:,} steps of {scenario.batch_samples:,} rollouts need about {_gb(per_step * steps)} to "
            f"simulate, more than the {_gb(usable)} usable here; at most {fits:,} steps fit"
        )
    rollouts = math.floor((usable - BYTES_PER_ROW * (engines + 1) * steps) / per_rollout)
    return Budget(rollouts=rollouts, available=available)


def over_budget(started: int, budget: int) -> MemoryBudgetError:
    """The error for a run that has started more rollouts than its budget (drops let generation outrun training)."""
    return MemoryBudgetError(
        f"run.steps: the run started {started:,} rollouts, more than the {budget:,} this machine's memory holds; "
        "it drops most of what it generates (see schedule.queue_policy and schedule.max_staleness), or run fewer steps"
    )


def _rows_per_rollout(scenario: Scenario) -> int:
    """Event rows one rollout is recorded as: one, or (assumed) two when in-flight updates split it by version."""
    return 2 if scenario.schedule.in_flight_updates else 1


def available_bytes() -> int:
    """Bytes this process may still allocate: the least of free memory, the cgroup's and the rlimits' headroom."""
    candidates = [_meminfo_kb("MemAvailable") * 1024 or _physical_bytes()]
    cgroup = _cgroup_headroom()
    if cgroup is not None:
        candidates.append(cgroup)
    for limit, field in ((resource.RLIMIT_AS, "VmSize"), (resource.RLIMIT_DATA, "VmData")):
        soft = resource.getrlimit(limit)[0]
        if soft != resource.RLIM_INFINITY:
            candidates.append(soft - _status_kb(field) * 1024)
    return max(0, min(candidates))


def _gb(size: float) -> str:
    """A memory size people read: GB from 1 GB up, MB below (never "0.0 GB")."""
    if size >= 2**30:
        return f"{size / 2**30:,.1f} GB"
    return f"{max(size, 0) / 2**20:,.0f} MB"


def _meminfo_kb(field: str) -> int:
    return _field_kb(Path("/proc/meminfo"), field)


def _status_kb(field: str) -> int:
    return _field_kb(Path("/proc/self/status"), field)


def _field_kb(path: Path, field: str) -> int:
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(":")
            if name == field:
                return int(value.split()[0])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _physical_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 1 << 34  # 16 GB when the platform does not say


def _cgroup_headroom() -> int | None:
    """memory.max − memory.current of this process's cgroup (v2), when it has a limit."""
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit == "max":
            return None
        return int(limit) - int(Path("/sys/fs/cgroup/memory.current").read_text().strip())
    except (OSError, ValueError):
        return None
