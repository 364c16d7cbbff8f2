"""Streaming against sync on the same slots, executed for real: wall-time ratio and distance to the bound.

    python benchmarks/executor_schedules.py [--scenario cpu-timing] [--device cpu] [--steps 20]

Runs the scenario twice with the executor, as written (streaming) and with
``schedule.kind=sync``, on the same engine and learner processes, and prints:

* the wall-time ratio sync / streaming (the speedup, measured in one run);
* how close the streaming run comes to the overlap bound: its wall time against
  max(generation time, training time), where generation time is the engine's
  busy time and training time the learner's, both measured in the sync run
  (where nothing overlaps). 1.00 would be perfect overlap.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from asyncrl.executor.processes.runtime import execute
from asyncrl.scenarios.record.record import DevicePools, summarize
from asyncrl.scenarios.spec.loading import load_scenario


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="cpu-timing")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    written = load_scenario(args.scenario, [f"run.steps={args.steps}"])
    sync = load_scenario(args.scenario, [f"run.steps={args.steps}", "schedule.kind=sync"])
    with tempfile.TemporaryDirectory() as scratch:
        streaming_run = execute(written, Path(scratch) / "written", device=args.device)
        sync_run = execute(sync, Path(scratch) / "sync", device=args.device)
    assert streaming_run.summary is not None and sync_run.summary is not None  # both runs started and ended
    streaming_wall = streaming_run.summary.wall_time_s
    sync_wall = sync_run.summary.wall_time_s
    busy = summarize(
        sync_run.events,
        backend="executor",
        scenario_name=sync.name,
        engines=sync.cluster.engines,
        concurrency=sync.engine_concurrency,
        devices=DevicePools.of(sync.cluster),
    )
    generation_s = busy.utilization.generation * sync_wall
    training_s = busy.utilization.training * sync_wall
    bound = max(generation_s, training_s)
    print(f"{written.name}: {args.steps} steps on {args.device}, {written.cluster.engines} engine(s) + learner")
    print(f"sync wall time / {written.schedule.kind} wall time   {sync_wall / streaming_wall:.2f}x")
    print(f"generation time (sync run, engine busy)      {generation_s / sync_wall:.2f} of the sync wall time")
    print(f"training time (sync run, learner busy)       {training_s / sync_wall:.2f} of the sync wall time")
    print(
        f"{written.schedule.kind} wall time / max(generation, training)   {streaming_wall / bound:.2f}  (1.00 = perfect overlap)"
    )


if __name__ == "__main__":
    main()
