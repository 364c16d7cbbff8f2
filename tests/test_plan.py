"""asyncrl plan: a framework's run (or a scenario) sized as asyncrl size sizes it over the run's own devices, the
log's efficiencies fitted first when given, and one verdict line: the best async plan against the best sync one."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import yaml
from asyncrl.analysis.summaries.verdict import verdict
from asyncrl.scenarios.costs.profile import load_profile
from asyncrl.scenarios.record.record import Simulated, validate_summary
from asyncrl.scenarios.spec.loading import load_scenario
from asyncrl.simulator.sweep import Variant

from asyncrl.calibration.simulated_log import write_simulated_log
from asyncrl.cli import main
from tests.run_records import hand_summary
from tests.test_fit_log import TRUE, colocated

RECIPE = Path(__file__).parent / "data" / "verl" / "dapo_7b_math_fsdp2_16_16.sh"
LENGTHS = "{kind: lognormal, median: 2048, sigma: 1}"


def summary(samples_per_s: float, staleness: float, stale_max: int, dropped: int, generated: int):  # type: ignore[no-untyped-def]
    figures = {
        "throughput.samples_per_s": samples_per_s,
        "staleness.mean": staleness,
        "staleness.max": stale_max,
        "samples.dropped": dropped,
        "samples.generated": generated,
    }
    return validate_summary(hand_summary(**figures))


def row(label: str, overrides: list[str], figures):  # type: ignore[no-untyped-def]
    return Simulated(Variant(label, load_scenario("quickstart", ["run.steps=5", *overrides])), figures)


def test_the_verdict_is_the_fastest_async_row_over_the_fastest_sync_row() -> None:
    split = ["cluster.devices_per_engine=4"]
    ranked = [
        row(
            "sync colocated 16 tp8 (baseline)",
            [
                "schedule={kind: sync}",
                "cluster.colocated=true",
                "cluster.generation_devices=16",
                "cluster.training_devices=16",
                "cluster.devices_per_engine=8",
            ],
            summary(8.0, 0, 0, 0, 8000),
        ),
        row("streaming-2 8:8 tp4", split, summary(12.0, 1.5, 2, 500, 10_000)),
        row("streaming-2 8:8 tp1", [], summary(11.0, 1.4, 2, 0, 9000)),
        row("sync 8:8 tp4", ["schedule={kind: sync}", *split], summary(9.0, 0, 0, 0, 9000)),
        row("streaming-2 4:12 tp1", ["cluster.generation_devices=4", "cluster.training_devices=12"], None),  # no fit
    ]
    decided = verdict(ranked)
    assert decided.best_sync is ranked[3] and decided.best_async is ranked[1]  # 9 beats the baseline's 8
    assert decided.speedup == pytest.approx(12 / 9)
    assert decided.line() == (
        "verdict: streaming-2 on 8:8 tp4: 1.33× the best sync plan, mean staleness 1.50 (max 2), 5.0% dropped; "
        "best sync plan: sync on 8:8 tp4 at 9 samples/s; switch"
    )


@pytest.mark.slow
def test_plan_on_the_fully_async_recipe_matches_sizes_best_plans(tmp_path: Path, capsys) -> None:
    out = tmp_path / "plan"
    cheap = ["--splits", "3", "--steps", "30", "--quiet"]
    assert main(["plan", str(RECIPE), "--device", "h100", "--lengths", LENGTHS, *cheap, "--out", str(out)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[-1].startswith("verdict: fully async on ") and "× the best sync plan, mean staleness" in printed[-1]
    assert any(line.startswith("sized over 30 learner steps of the run's 1,600") for line in printed)
    scenario = load_scenario(out / "scenario.yaml")
    assert scenario.schedule.staleness_threshold == 0.1 and scenario.cluster.total_devices == 32
    # asyncrl size, as a user would run it on the scenario plan wrote: the same devices, kinds and bound
    size_csv = tmp_path / "size.csv"
    bound = str(scenario.staleness_bound)
    args = ["size", str(out / "scenario.yaml"), "--devices", "32", "--kind", "sync", "--kind", "streaming"]
    assert (
        main([*args, "--max-staleness", bound, "--splits", "3", "--steps", "30", "--quiet", "--out", str(size_csv)])
        == 0
    )
    capsys.readouterr()
    plans, sized = _rows(out / "size.csv"), _rows(size_csv)
    assert plans == sized
    fits = [line for line in sized if line["fits"] == "True"]
    best_sync = max(
        (line for line in fits if line["schedule"] == "sync"), key=lambda line: float(line["samples_per_s"])
    )
    best_async = max(
        (line for line in fits if line["schedule"] != "sync"), key=lambda line: float(line["samples_per_s"])
    )
    speedup = float(best_async["samples_per_s"]) / float(best_sync["samples_per_s"])
    split = f"{best_async['generation_devices']}:{best_async['training_devices']} tp{best_async['devices_per_engine']}"
    assert printed[-1].startswith(f"verdict: fully async on {split}: {speedup:.2f}× the best sync plan")
    assert (out / "size.png").is_file()


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as handle:
        return list(csv.DictReader(handle))


@pytest.mark.slow
def test_plan_calibrates_on_the_log_and_sizes_a_sync_runs_async_options(tmp_path: Path, capsys) -> None:
    scenario = colocated(8)
    config = tmp_path / "sync.yaml"
    config.write_text(yaml.safe_dump(scenario.model_dump(mode="json")))
    log = write_simulated_log(scenario, TRUE, tmp_path / "log.jsonl")
    out = tmp_path / "plan"
    assert (
        main(["plan", str(config), "--log", str(log), "--splits", "2", "--steps", "12", "--quiet", "--out", str(out)])
        == 0
    )
    printed = capsys.readouterr().out
    fitted = load_profile(out / "profile.yaml")
    assert fitted.mfu == pytest.approx(TRUE.mfu, rel=0.05)  # calibrate --from-log's fit
    assert "log.jsonl: generation" in printed  # the fit's table, as calibrate --from-log prints it
    schedules = {line["schedule"] for line in _rows(out / "size.csv")}
    assert schedules == {"sync", "pipelined", "streaming"}  # a sync run: one step off and streaming-1 sized
    assert printed.splitlines()[-1].startswith("verdict: ") and "interval: " in printed


def test_a_scenario_takes_no_framework_flags(tmp_path: Path, capsys) -> None:
    assert main(["plan", "quickstart", "--lengths", "{kind: fixed, value: 9}", "--out", str(tmp_path / "p")]) == 2
    assert capsys.readouterr().err == ("asyncrl: error: --lengths: quickstart is a scenario; set its fields instead\n")


def test_size_keeps_the_scenarios_own_schedule_at_its_own_bound() -> None:
    from asyncrl.simulator.sweep import sizing_variants

    scenario = load_scenario("moe-streaming")  # streaming, max_staleness 4, in-flight updates
    _, own = sizing_variants(scenario, 32, ["streaming"], [4], splits=2)
    _, other = sizing_variants(scenario, 32, ["streaming"], [2], splits=2)
    assert own and all(v.scenario.schedule.in_flight_updates for v in own)
    assert all(v.label.startswith("streaming-4-inflight ") for v in own)
    assert other and not any(v.scenario.schedule.in_flight_updates for v in other)  # another bound: the defaults
