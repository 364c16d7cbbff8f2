"""Processor sharing of a CPU host's cores (``hardware.host_cores``), worked by hand.

The rule (scenarios/rules/cores.py): while the busy processes want more threads than
the host has cores, each runs at cores / threads-wanted of its full speed.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import simpy
from asyncrl.analysis.fits.fit import at_full_speed
from asyncrl.scenarios.rules.cores import CoreShare, core_share, full_speed_seconds
from asyncrl.scenarios.spec.loading import ScenarioError
from asyncrl.simulator.host import Computation, Host

from tests.conftest import profile, run, small_scenario


def test_rate_is_one_until_the_threads_outnumber_the_cores() -> None:
    share = CoreShare(cores=2, engine_threads=1, learner_threads=1)
    assert [share.rate(demand) for demand in (0, 1, 2, 3, 4)] == [1.0, 1.0, 1.0, pytest.approx(2 / 3), 0.5]


def test_an_engine_loses_the_slicing_beyond_its_share_and_only_while_oversubscribed() -> None:
    share = CoreShare(cores=2, engine_threads=1, learner_threads=1, slicing=0.5)
    assert [share.engine_rate(demand) for demand in (1, 2, 3, 4)] == [1.0, 1.0, pytest.approx(4 / 9), 1 / 3]
    assert share.rate(3) == pytest.approx(2 / 3)  # the learner keeps its share


def test_core_share_reads_threads_from_the_cluster() -> None:
    scenario = small_scenario(hardware={"device": "cpu", "host_cores": 2})
    assert core_share(scenario) == CoreShare(cores=2, engine_threads=1, learner_threads=2)
    assert core_share(small_scenario()) is None


def test_host_cores_is_refused_on_a_gpu() -> None:
    with pytest.raises(ScenarioError, match="host_cores"):
        small_scenario(hardware={"device": "h100", "host_cores": 2})


def test_full_speed_seconds_integrates_the_rate_over_each_span() -> None:
    # One core, A busy over [0, 2], B over [1, 3]: demand 1, 2, 1, so rate 1, 0.5, 1.
    share = CoreShare(cores=1, engine_threads=1, learner_threads=1)
    busy = [(np.array([[0.0, 2.0]]), 1), (np.array([[1.0, 3.0]]), 1)]
    spans = np.array([[0.0, 2.0], [1.0, 3.0], [-1.0, 4.0], [1.5, 1.75]])
    # [0, 2]: 1 + 0.5; [1, 3]: 0.5 + 1; [-1, 4]: 1 + 1 + 0.5 + 1 + 1; [1.5, 1.75]: 0.25 · 0.5.
    assert full_speed_seconds(spans, busy, share) == pytest.approx([1.5, 1.5, 4.5, 0.125])


def test_fit_counts_the_work_each_step_did_not_its_wall_time() -> None:
    # Two cores; engine-0 (two steps) and engine-1 (one step) decode while the learner trains: 3 threads, rate 2/3.
    steps = pd.DataFrame(
        {
            "worker": ["engine-0", "engine-0", "engine-1"],
            "start": [0.0, 0.3, 0.0],
            "end": [0.3, 0.6, 0.6],
        }
    )
    events = pd.DataFrame({"kind": ["train", "sync"], "start": [0.0, 0.6], "end": [0.6, 0.7]})
    steps, events = at_full_speed(steps, events, CoreShare(cores=2, engine_threads=1, learner_threads=1))
    assert (steps["end"] - steps["start"]).tolist() == pytest.approx([0.2, 0.2, 0.4])
    assert (events["end"] - events["start"]).tolist() == pytest.approx([0.4, 0.1])  # a sync is not rescaled


def test_two_computations_share_one_core() -> None:
    # A: 1 s of work from t = 0; B: 1 s from t = 0.5. A alone to 0.5 (half done), then both at half speed:
    # A's other half takes 1 s (ends 1.5), when B has done 0.5; B alone does the rest by 2.0.
    env = simpy.Environment()
    host = Host(CoreShare(cores=1, engine_threads=1, learner_threads=1))
    ends = {}

    def work(name: str, delay: float) -> simpy.events.ProcessGenerator:
        yield env.timeout(delay)
        yield from Computation(env, host, threads=1).run(1.0)
        ends[name] = env.now

    env.process(work("A", 0.0))
    env.process(work("B", 0.5))
    env.run()
    assert ends == {"A": pytest.approx(1.5), "B": pytest.approx(2.0)}


def _train_spans(result) -> list[float]:
    train = result.events[result.events["kind"] == "train"].sort_values("step")
    return [time for span in train[["start", "end"]].to_numpy() for time in span]


def test_pipelined_engine_and_learner_slow_each_other_on_two_cores() -> None:
    """One engine (1 thread) and the learner (2 threads) on 2 cores: 3 threads, each at 2/3 while both compute.

    Alone, a batch takes 1.02 s to generate and 0.22 s to train (tests/test_simulator_exact.py).
    Batch 0 generates alone: 0–1.02. Then training batch 0 and generating batch 1 share the cores: the
    learner's 0.22 s of work takes 0.33 s (1.02–1.35), in which the engine does 0.22 s of its 1.02 s;
    it does the other 0.80 s alone, by 2.15. Batch 2 likewise from 2.15: training 2.15–2.48, generation
    ends at 3.28; batch 2 trains alone, 3.28–3.50. Without sharing: 3 × 1.02 + 0.22 = 3.28.
    """
    schedule = {"kind": "pipelined", "off_policy_steps": 1, "max_concurrency": 4}
    costs = profile(train_token_s=0.001, weight_sync_s=0.0)
    shared = run(small_scenario(schedule=schedule, hardware={"device": "cpu", "host_cores": 2}), costs)
    assert _train_spans(shared) == pytest.approx([1.02, 1.35, 2.15, 2.48, 3.28, 3.50], abs=1e-9)
    assert shared.summary.wall_time_s == pytest.approx(3.50, abs=1e-9)
    alone = run(small_scenario(schedule=schedule), costs)
    assert alone.summary.wall_time_s == pytest.approx(3.28, abs=1e-9)


def test_an_oversubscribed_engine_runs_slower_than_its_share_by_the_profiles_slicing() -> None:
    """As above (a batch: 1.02 s to generate, 0.22 s to train), with time_slicing 0.5: while all three threads
    compute, the learner runs at 2/3 and the engine at 2/3 / 1.5 = 4/9. Training batch 0 takes 0.33 s
    (1.02–1.35), in which the engine does 0.33 · 4/9 = 0.1467 s of batch 1; the other 0.8733 s alone, by
    2.2233. Batch 2 likewise: training 2.2233–2.5533, generation ends 3.4267; batch 2 trains alone to 3.6467."""
    schedule = {"kind": "pipelined", "off_policy_steps": 1, "max_concurrency": 4}
    costs = profile(train_token_s=0.001, weight_sync_s=0.0, time_slicing=0.5)
    shared = run(small_scenario(schedule=schedule, hardware={"device": "cpu", "host_cores": 2}), costs)
    alone = 1.02 - 0.33 * 4 / 9  # batch 1's generation left once training batch 0 ends
    generated_1 = 1.35 + alone  # batch 1 generated: it trains, and batch 2 generates, from here
    expected = [
        1.02,
        1.35,
        generated_1,
        generated_1 + 0.33,
        generated_1 + 0.33 + alone,
        generated_1 + 0.33 + alone + 0.22,
    ]
    assert expected == pytest.approx([1.02, 1.35, 2.2233, 2.5533, 3.4267, 3.6467], abs=1e-4)
    assert _train_spans(shared) == pytest.approx(expected, abs=1e-9)


def test_the_fit_measures_the_slicing_from_oversubscribed_steps_against_the_alone_line() -> None:
    """One core, one engine and the learner (one thread each); a decode step's work is 1 ms + 0.1 ms · batch.
    Thirty steps run alone, then the learner computes over [1, 2]: share 1/2, slicing 0.25, so an engine
    runs at 0.4 and a step of work w takes w / 0.4. The first overlapped step starts 0.5 ms before the
    learner: 0.5 ms alone, the rest at 0.4."""
    from asyncrl.analysis.fits.fit import fit_time_slicing

    rows, clock = [], 0.0
    for index in range(30):
        work = 1e-3 + 1e-4 * (1 + index % 4)
        rows.append({"worker": "engine-0", "start": clock, "end": clock + work, "batch": 1 + index % 4})
        clock += work
    clock = 1.0 - 0.5e-3
    for index in range(30):
        work = 1e-3 + 1e-4 * (1 + index % 4)
        seconds = 0.5e-3 + (work - 0.5e-3) / 0.4 if index == 0 else work / 0.4
        rows.append({"worker": "engine-0", "start": clock, "end": clock + seconds, "batch": 1 + index % 4})
        clock += seconds
    steps = pd.DataFrame(rows).assign(context=0, joins=0, retired=0, prefill_tokens=0)
    events = pd.DataFrame({"kind": ["train"], "start": [1.0], "end": [clock + 1.0]})
    share = CoreShare(cores=1, engine_threads=1, learner_threads=1)
    assert fit_time_slicing([(steps, events)], share) == pytest.approx(0.25)
    alone = steps[steps["start"] < 0.5]
    assert fit_time_slicing([(alone, events)], share) == 0.0  # never oversubscribed: nothing to tell


@pytest.mark.parametrize(
    ("schedule", "cores"),
    [
        ({"kind": "sync", "max_concurrency": 4}, 2),  # engine and learner (2 threads) never compute at once
        ({"kind": "pipelined", "off_policy_steps": 1, "max_concurrency": 4}, 3),  # enough cores for both
        ({"kind": "streaming", "max_staleness": 2, "max_concurrency": 4}, 3),
    ],
)
def test_sharing_changes_nothing_where_the_cores_suffice(schedule: dict, cores: int) -> None:
    costs = profile(train_token_s=0.001)
    workload = {"completion_tokens": {"kind": "pareto", "scale": 10, "alpha": 1.2, "max_tokens": 300}}
    alone = run(small_scenario(schedule=schedule, workload=workload, run={"steps": 6, "seed": 3}), costs)
    shared = run(
        small_scenario(
            schedule=schedule,
            workload=workload,
            run={"steps": 6, "seed": 3},
            hardware={"device": "cpu", "host_cores": cores},
        ),
        costs,
    )
    pd.testing.assert_frame_equal(alone.events, shared.events)


def test_the_learner_slows_by_the_profiles_contention_while_the_engine_computes() -> None:
    """Pipelined as above, no core sharing, train_contention 0.5: a learner step that overlaps generation
    takes 1.5 × 0.22 = 0.33 s (1.02–1.35, 2.04–2.37); the last one, alone, 0.22 s (3.06–3.28).
    The engine is not slowed: batches end at 1.02, 2.04, 3.06."""
    schedule = {"kind": "pipelined", "off_policy_steps": 1, "max_concurrency": 4}
    result = run(
        small_scenario(schedule=schedule), profile(train_token_s=0.001, weight_sync_s=0.0, train_contention=0.5)
    )
    assert _train_spans(result) == pytest.approx([1.02, 1.35, 2.04, 2.37, 3.06, 3.28], abs=1e-9)


def test_the_fit_separates_contention_from_the_learners_own_cost() -> None:
    # Train spans of 0.01 s + 1e-4 s per token; every other one half overlapped by an engine step and
    # slowed by κ = 0.3 over that half: × (1 + 0.3 · 0.5).
    from asyncrl.analysis.fits.fit_learner import fit_contention, fit_learner, train_spans

    rows, steps, clock = [], [], 0.0
    for step in range(8):
        tokens = 500 + 100 * step
        seconds = (0.01 + 1e-4 * tokens) * (1 + 0.3 * 0.5 * (step % 2))
        rows.append({"kind": "train", "start": clock, "end": clock + seconds, "step": step, "tokens": tokens})
        if step % 2:
            steps.append({"worker": "engine-0", "start": clock, "end": clock + seconds / 2})
        clock += 1.0
    spans = train_spans(pd.DataFrame(rows), 1, pd.DataFrame(steps))
    assert spans["contended"].tolist() == pytest.approx([0, 0.5] * 4)
    overhead, per_token, padding = fit_learner(spans)
    assert (overhead, per_token, padding) == (pytest.approx(0.01), pytest.approx(1e-4), "packed")
    assert fit_contention(spans, overhead, per_token, padding) == pytest.approx(0.3)


def test_a_rate_change_on_a_finish_leaves_no_negative_wait() -> None:
    # A drawn validate scenario (two engines, fixed lengths, drain refresh) whose engines were replanned at
    # the instant of a finish: rounding put that finish 2e-16 s in the past, and SimPy refused the wait.
    scenario = small_scenario(
        hardware={"device": "cpu", "host_cores": 2},
        cluster={"generation_devices": 2, "training_devices": 1},
        workload={
            "prompts_per_step": 6,
            "samples_per_prompt": 7,
            "prompt_tokens": {"kind": "fixed", "value": 20},
            "completion_tokens": {"kind": "fixed", "value": 59},
        },
        schedule={"kind": "streaming", "max_staleness": 1, "refresh": "drain", "max_concurrency": 7},
        algorithm={"loss": "ppo"},
        run={"steps": 30, "seed": 894715},
    )
    costs = profile(
        decode_step_s={1: 0.00013935762306867825, 7: 0.0008709851441792385},
        prefill_token_s=1.6932145140581004e-05,
        prefill_per="sample",
        join_s=8.466072570290499e-07,
        retire_s=0.00015678276175353436,
        train_token_s=4.5425741297746325e-05,
        train_contention=0.0912560762527668,
        weight_sync_s=0.002118532474224384,
    )
    result = run(scenario, costs)
    assert result.summary.steps == 30


def test_orchestration_delays_wake_an_idle_engine_and_start_each_learner_step_late() -> None:
    """Sync, as in tests/test_simulator_exact.py (generation 1.02 s, training 0.44 s, sync 0.5 s), with
    wake_s 0.01 and train_start_s 0.02: the idle engine acts on each dispatch 0.01 s late (before its load),
    and each step starts 0.02 s after its batch is complete: train spans 1.05-1.49, 3.04-3.48, 5.03-5.47."""
    result = run(small_scenario(), profile(train_token_s=0.002, wake_s=0.01, train_start_s=0.02))
    assert _train_spans(result) == pytest.approx([1.05, 1.49, 3.04, 3.48, 5.03, 5.47], abs=1e-9)
    syncs = result.events[result.events["kind"] == "sync"].sort_values("start")
    assert syncs["start"].tolist() == pytest.approx([1.50, 3.49], abs=1e-9)  # publish + wake


def test_the_fit_measures_the_orchestration_delays() -> None:
    # One engine: step 0 retires everything at 1.0; the learner publishes at 1.5 (train 1.2-1.5, batch ready
    # at 1.0, so it started 0.2 s late); the engine loads 1.6-1.8 and resumes at 2.0: 0.5 s after the
    # publish, less the 0.2 s load, is a 0.3 s wake.
    from asyncrl.analysis.fits.fit_timing import train_start_delays, wake_delays

    steps = pd.DataFrame(
        {
            "worker": ["engine-0", "engine-0"],
            "start": [0.5, 2.0],
            "end": [1.0, 2.5],
            "batch": [2, 2],
            "retired": [2, 2],
        }
    )
    events = pd.DataFrame(
        {
            "worker": ["engine-0", "engine-0", "learner", "engine-0"],
            "kind": ["generate", "generate", "train", "sync"],
            "start": [0.0, 0.0, 1.2, 1.6],
            "end": [0.9, 1.0, 1.5, 1.8],
            "step": [0, 0, 0, -1],
        }
    )
    assert wake_delays(steps, events).tolist() == pytest.approx([0.3])
    assert train_start_delays(events).tolist() == pytest.approx([0.2])


def test_an_engine_slows_by_the_profiles_engine_contention_while_the_learner_computes() -> None:
    # No core sharing, engine_contention 1.0: the engine's 1 s of work from t = 0; the learner's 0.5 s from
    # t = 0.25. The engine does 0.25 alone, then half speed while the learner computes (0.25-0.75, the learner
    # unslowed: train_contention 0): 0.25 more; the last 0.5 alone, ending at 1.25.
    env = simpy.Environment()
    host = Host(None, learner_contention=0.0, engine_contention=1.0)
    ends = {}

    class EngineWork(Computation):
        is_engine = True

    def work(name: str, worker: Computation, delay: float, seconds: float) -> simpy.events.ProcessGenerator:
        yield env.timeout(delay)
        yield from worker.run(seconds)
        ends[name] = env.now

    env.process(work("engine", EngineWork(env, host, threads=1), 0.0, 1.0))
    env.process(work("learner", Computation(env, host, threads=1), 0.25, 0.5))
    env.run()
    assert ends == {"engine": pytest.approx(1.25), "learner": pytest.approx(0.75)}
