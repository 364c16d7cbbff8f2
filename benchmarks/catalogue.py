"""The catalogue's terms fitted to the published synchronous runs: where scenarios/costs/efficiency.py's defaults
stand, and how well one set of terms reproduces every table at once.

    benchmarks/published/*.yaml  the sync run of each case (the async runs are held out: they check the
        │                        terms on another split and schedule, benchmarks/published.py)
        ├─ verl (H20):     its published phases as verl's JSONL (gen, old_log_prob, update_actor, step)
        ├─ NeMo-RL (H100): its step time alone (a log of whole steps)
        └─ asyncrl.calibration.fit_log.fit_runs over all of them at once, the catalogue as the prior
    ─► per term: the catalogue's value, the fitted one and its 95% interval, whether the runs identified it;
       per run: the published step against the catalogue's and the fitted terms' simulated step

AReaL's sync runs are left out: their lengths are solved from their own step time, so they cannot inform
the terms. The defaults in scenarios/costs/efficiency.py are this fit's, rounded, where the runs identified a term;
the others keep their physical sources (run this again after changing the model: the fit should not move).

With ``--framework nemo-rl`` only that framework's fixed costs (``FRAMEWORK_TERMS``) are fitted, to its own
v0.5 H100 table's sync runs, the rest held at the catalogue's: ``scenarios.costs.efficiency.FRAMEWORKS``' values.

    python benchmarks/catalogue.py [--framework nemo-rl] [--steps N]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import published  # noqa: E402
import published_nemo_rl  # noqa: E402
from asyncrl.analysis.tables import format_table  # noqa: E402
from asyncrl.scenarios.costs.efficiency import DEFAULTS  # noqa: E402
from asyncrl.scenarios.spec.scenario import Scenario  # noqa: E402

from asyncrl.calibration.fit_log import fit_runs  # noqa: E402
from asyncrl.calibration.log_work import simulate_steps  # noqa: E402

VERL = ("verl-one-step-off-7b.yaml", "verl-fully-async-7b.yaml", "verl-fully-async-30b-moe.yaml")
NEMO_RL = ("nemo-rl-h100.yaml",)
#: What a framework's own code costs beside the model: the terms ``--framework`` fits.
FRAMEWORK_TERMS = ("reshard_bytes_per_s", "rollout_sample_s", "switch_s", "phase_s", "sample_overhead_s")


def sync_runs(folder: Path, steps: int, framework: str | None) -> list[tuple[str, Scenario, Path, float]]:
    """Each published sync run (of ``framework``, or all): its label, scenario, a log of what was published,
    and its step time."""
    runs = []
    for name in VERL if framework in (None, "verl") else ():
        source = yaml.safe_load((published.CASES / name).read_text())
        for case in source["cases"]:
            spec = published.runs_of(source, case)["sync"]
            label = f"{Path(name).stem}: {case['label']}"
            scenario = published.scenario_of(source, spec, label, steps)
            log = published.write_sync_log(spec["published"], folder / f"{len(runs)}.jsonl")
            runs.append((label, scenario, log, float(spec["published"]["step"])))
    for name in NEMO_RL if framework in (None, "nemo-rl") else ():
        source = yaml.safe_load((published.CASES / name).read_text())
        for case in source["cases"]:
            scenario = published_nemo_rl.scenario_of(source, case, "sync", steps)
            step = float(case["sync"]["published"]["step"])
            log = folder / f"{len(runs)}.jsonl"
            log.write_text("".join(json.dumps({"step": i, "data": {"timing_s/step": step}}) + "\n" for i in range(4)))
            runs.append((f"{Path(name).stem}: {case['label']}", scenario, log, step))
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12, help="learner steps simulated per run (default 12)")
    parser.add_argument("--framework", choices=["verl", "nemo-rl"], help="fit that framework's fixed costs alone")
    parser.add_argument(
        "--model-error", type=float, default=0.1, help="sd of a published figure against the model, relative"
    )
    args = parser.parse_args(argv)
    free = FRAMEWORK_TERMS if args.framework else None
    with tempfile.TemporaryDirectory() as scratch:
        runs = sync_runs(Path(scratch), args.steps, args.framework)
        fit = fit_runs([(scenario, [log]) for _, scenario, log, _ in runs], free=free, model_error=args.model_error)
    terms = [
        [
            row.term,
            f"{getattr(DEFAULTS, row.term):.4g}",
            f"{row.value:.4g}",
            f"{row.low:.3g}-{row.high:.3g}",
            "yes" if row.identified else "no",
        ]
        for row in fit.terms
    ]
    print(format_table(["term", "catalogue", "fitted", "95% interval", "identified"], terms))
    table: list[list[Any]] = []
    for label, scenario, _, step in runs:
        before = simulate_steps(scenario, scenario.efficiency(), args.steps).mean("step")
        after = simulate_steps(scenario, fit.efficiency, args.steps).mean("step")
        table.append(
            [
                label,
                f"{step:,.1f}",
                f"{before:,.1f} ({before / step - 1:+.0%})",
                f"{after:,.1f} ({after / step - 1:+.0%})",
            ]
        )
    print(format_table(["sync run", "published s", "catalogue", "fitted"], table))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
