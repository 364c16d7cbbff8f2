"""How far apart calibrations of one scenario fall: each figure's spread, and the wall time each predicts.

    python benchmarks/calibration_spread.py [--scenario cpu-timing] [--count 5] [--repeats 5] [--by runs]

Runs ``--count`` calibrations of the scenario one after the other, then prints per figure the smallest, median
and largest value and max/min, and the same for the scenario's wall time as written and as sync, simulated under
each profile. ``--by bench`` (the default): micro-benchmark calibrations (``executor.calibrate.calibrate``, the
median of ``--repeats`` interleaved measurements each); ``--by runs``: what ``asyncrl calibrate SCENARIO`` does,
short executed runs fitted (``asyncrl.calibration.runs.calibrate_by_running``, into a temporary folder). A
max/min well above 1 on the predicted wall time says the machine is too noisy for calibration to pin a
prediction down.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from asyncrl.analysis.tables import format_table
from asyncrl.executor.calibrate import calibrate
from asyncrl.scenarios.costs.profile import CostProfile
from asyncrl.scenarios.spec.loading import load_scenario
from asyncrl.scenarios.spec.scenario import Scenario
from asyncrl.simulator.costs import MeasuredCosts
from asyncrl.simulator.simulation import simulate
from tqdm import tqdm

from asyncrl.calibration.runs import calibrate_by_running

BATCH_SIZES = [1, 2, 4, 8, 16, 32]


def figures(profile: CostProfile, written: Scenario, sync: Scenario) -> dict[str, float]:
    """The profile's figures and the wall times it predicts, by name."""
    values = {f"decode step, batch {b} (s)": t for b, t in profile.decode_step_s.items()}
    values |= {
        "decode, per context token (s)": profile.decode_context_token_s,
        "prefill, per prompt token (s)": profile.prefill_token_s,
        "learner, per token (s)": profile.train_token_s,
        "learner, per row x length^2 (s)": profile.train_token_square_s,
        "learner, per step (s)": profile.train_step_overhead_s,
        "weight sync (s)": profile.weight_sync_s,
    }
    for label, scenario in (
        (f"predicted wall time, {written.schedule.kind} (s)", written),
        ("predicted wall time, sync (s)", sync),
    ):
        values[label] = simulate(scenario, costs=MeasuredCosts(scenario, profile)).summary.wall_time_s
    return values


def spread_rows(runs: list[dict[str, float]]) -> list[list[str]]:
    rows = []
    for name in runs[0]:
        values = [run[name] for run in runs]
        low, high = min(values), max(values)
        ratio = f"{high / low:.2f}" if low > 0 else "-"
        rows.append([name, f"{low:.3g}", f"{statistics.median(values):.3g}", f"{high:.3g}", ratio])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="cpu-timing")
    parser.add_argument("--count", type=int, default=5, help="calibrations (default 5)")
    parser.add_argument("--repeats", type=int, default=5, help="measurements per figure in each (default 5)")
    parser.add_argument("--by", choices=["bench", "runs"], default="bench", help="micro-benchmarks or short runs")
    args = parser.parse_args()
    written = load_scenario(args.scenario)
    sync = load_scenario(args.scenario, ["schedule.kind=sync"])
    sizes = [b for b in BATCH_SIZES if b <= written.engine_concurrency] or [1]
    runs = []
    with tempfile.TemporaryDirectory() as work:
        for number in tqdm(range(args.count), desc="calibrating", unit="calibration"):
            if args.by == "runs":
                folder = Path(work) / str(number)
                profile = calibrate_by_running(written, folder / "profile.yaml", folder / "runs").profile
            else:
                profile = calibrate(written, sizes, repeats=args.repeats).profile
            runs.append(figures(profile, written, sync))
    how = "short runs each" if args.by == "runs" else f"median of {args.repeats} interleaved repeats each"
    print(f"{written.name}: {args.count} calibrations, {how}")
    print(format_table(["figure", "min", "median", "max", "max/min"], spread_rows(runs)))


if __name__ == "__main__":
    main()
