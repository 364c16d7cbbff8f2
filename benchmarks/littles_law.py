"""How far "mean staleness ≈ learner steps per second × mean time in the system" is from exact.

    python benchmarks/littles_law.py

For the quickstart scenario (300 steps) as sync and as streaming with several bounds, prints the
mean staleness, the product λ·W (λ = steps per second, W = mean time from a rollout's start to
the start of the step that trains it), and their relative difference, all from one run each.
The exact relation (tests/test_littles_law.py) samples the rollouts in the system at publish
instants; λ·W uses their time average, which differs when admissions follow publishes.
"""

from __future__ import annotations

from asyncrl.analysis.tables import format_table
from asyncrl.scenarios.spec.loading import load_scenario
from asyncrl.simulator.simulation import simulate

VARIANTS = {
    "sync": ["schedule.kind=sync"],
    "streaming η=2": ["schedule.max_staleness=2"],
    "streaming η=3": ["schedule.max_staleness=3"],
    "streaming η=4": ["schedule.max_staleness=4"],
    "streaming η=8": ["schedule.max_staleness=8"],
    "streaming η=8, in-flight updates": ["schedule.max_staleness=8", "schedule.in_flight_updates=true"],
}


def main() -> None:
    rows = []
    for label, overrides in VARIANTS.items():
        result = simulate(load_scenario("quickstart", ["run.steps=300", *overrides]))
        events, summary = result.events, result.summary
        train_start = events[events["kind"] == "train"].set_index("step")["start"]
        trained = events[(events["kind"] == "generate") & (events["step"] >= 0)]
        time_in_system = (train_start.loc[trained["step"]].to_numpy() - trained["start"].to_numpy()).mean()
        product = summary.steps / summary.wall_time_s * time_in_system
        staleness = summary.staleness.mean
        gap = f"{(product - staleness) / staleness:+.0%}" if staleness else "-"
        rows.append([label, staleness, product, gap])
    print(format_table(["quickstart, 300 steps", "mean staleness", "λ·W", "λ·W vs staleness"], rows))


if __name__ == "__main__":
    main()
