"""Sweep simulations as Ray tasks (``asyncrl size/sweep --runtime ray``): one task per simulation.

    [scenario] ─► ray.remote(task), one CPU each ─► a running cluster (RAY_ADDRESS) or a local instance
               ─► summaries in input order; each one ticks the progress bar as it ends

The task is the local pool's own call (``simulator.sweep._summary_of`` with its options), so a
summary is the same whichever runtime computed it. Stopped early (an interrupt, an error), the
generator cancels, with force, every task still queued or running, so nothing is left behind on
the cluster. Ray is imported only here, only when asked for: importing the simulator does not.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ..scenarios.record.run_summary import RunSummary
from ..scenarios.spec.scenario import Scenario


def connect() -> None:
    """Join the cluster ``RAY_ADDRESS`` names, or start a local instance (once per process)."""
    import ray

    if not ray.is_initialized():
        ray.init(address=os.environ.get("RAY_ADDRESS"), include_dashboard=False, log_to_driver=False)


def summaries_on_ray(
    task: Callable[[Scenario], RunSummary], scenarios: Sequence[Scenario], tick: Callable[[], Any]
) -> Iterator[RunSummary]:
    """``task(scenario)`` for each scenario as a Ray task of one CPU; yields the summaries in input order and
    calls ``tick`` as each task ends. A task's own error is raised as itself (not Ray's wrapper)."""
    import ray

    connect()
    remote = ray.remote(num_cpus=1)(_call)
    pending = [remote.remote(task, scenario) for scenario in scenarios]
    position = {ref: index for index, ref in enumerate(pending)}
    ended: dict[int, RunSummary] = {}
    try:
        for index in range(len(scenarios)):
            while index not in ended:
                ready, pending = ray.wait(pending, num_returns=1)
                for ref in ready:
                    ended[position[ref]] = _result(ref)
                    tick()
            yield ended.pop(index)
    finally:
        if pending:  # an interrupt or an error: nothing keeps running on the cluster
            _cancel(pending)


def _cancel(refs: list[Any], attempts: int = 30) -> None:
    """Cancel, with force, until every task has ended: a task caught between being scheduled and starting can
    miss one cancel, so ask again for those still pending a second later (a bounded number of times)."""
    import ray

    for _ in range(attempts):
        for ref in refs:
            try:
                ray.cancel(ref, force=True)
            except TypeError:  # "No owner found": the task ended and Ray has let its result go
                continue
        _, refs = ray.wait(refs, num_returns=len(refs), timeout=1.0, fetch_local=False)
        if not refs:
            return


def _call(task: Callable[[Scenario], RunSummary], scenario: Scenario) -> RunSummary:
    return task(scenario)


def _result(ref: Any) -> RunSummary:
    import ray

    try:
        summary: RunSummary = ray.get(ref)
    except ray.exceptions.RayTaskError as exc:
        cause = exc.cause
        if isinstance(cause, Exception):
            raise cause from None  # e.g. a ScenarioError: the one line the user reads
        raise
    return summary
