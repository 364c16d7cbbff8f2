"""How often a speedup's 95% interval over a few paired seeds holds the true speedup, by simulation.

    python benchmarks/interval_coverage.py [--trials 2000]

Each trial draws n seeds; seed i's sync wall time to target is exp(u_i + e_i) and the schedule's is
exp(u_i − log R + f_i), with u_i ~ N(0, 0.3²) shared by the pair (the seed's luck: its prompts, its
initial draws) and e_i, f_i ~ N(0, 0.2²) each its own. The true speedup is R = 1.5 (both the ratio of the
means and the geometric mean of the ratios, the variances being equal). Per n the share of trials whose
interval holds R, for the paired t-interval on log ratios the study prints
(``analysis.summaries.intervals.paired_log_ratio_ci``) and the percentile bootstrap over pairs it printed
before (``paired_ratio_bootstrap``, 2,000 resamples a trial). The counts are binomial: at 2,000 trials a
share of 95% has a standard error of 0.5 points.
"""

from __future__ import annotations

import argparse
import math

import numpy as np
from asyncrl.analysis.summaries.intervals import paired_log_ratio_ci, paired_ratio_bootstrap
from asyncrl.analysis.tables import format_table

TRUE_SPEEDUP = 1.5
SEED_SD, OWN_SD = 0.3, 0.2


def coverage(pairs: int, trials: int, seed: int = 0) -> tuple[float, float]:
    """The t-interval's and the bootstrap's shares of ``trials`` that hold the true speedup, at ``pairs`` seeds."""
    rng = np.random.default_rng([seed, pairs])
    held_t = held_bootstrap = 0
    for trial in range(trials):
        luck = rng.normal(0, SEED_SD, pairs)
        sync = np.exp(luck + rng.normal(0, OWN_SD, pairs))
        schedule = np.exp(luck - math.log(TRUE_SPEEDUP) + rng.normal(0, OWN_SD, pairs))
        _, low, high, _ = paired_log_ratio_ci(sync, schedule, min_pairs=2)
        held_t += low <= TRUE_SPEEDUP <= high
        _, low, high, _ = paired_ratio_bootstrap(sync, schedule, draws=2000, seed=trial)
        held_bootstrap += low <= TRUE_SPEEDUP <= high
    return held_t / trials, held_bootstrap / trials


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=2000)
    args = parser.parse_args()
    rows = []
    for pairs in (3, 4, 5, 8):
        t_share, bootstrap_share = coverage(pairs, args.trials)
        rows.append([pairs, f"{t_share:.1%}", f"{bootstrap_share:.1%}"])
    print(f"coverage of a nominal 95% interval for a speedup of {TRUE_SPEEDUP}x, {args.trials} trials per row")
    print(format_table(["paired seeds", "t on log ratios", "percentile bootstrap"], rows))


if __name__ == "__main__":
    main()
