"""A profile fitted from a recorded run recovers the costs the run was made with."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from asyncrl.analysis.fits.fit import ENGINE_STEPS_FILE, profile_from_runs
from asyncrl.scenarios.record.record import EVENT_COLUMNS, write_run

from asyncrl.cli import main
from tests.conftest import small_scenario

# The costs the synthetic run is made of (seconds).
DECODE_BASE, DECODE_PER_ROW, PER_CONTEXT = 0.002, 0.0001, 1e-6
JOIN, PER_PROMPT_TOKEN, RETIRE = 0.003, 2e-5, 0.0007
TRAIN_OVERHEAD, TRAIN_PER_TOKEN, SYNC = 0.05, 1e-4, 0.08


def synthetic_run(path: Path, seed: int = 0) -> Path:
    """An executor-like run record whose step and span times follow the costs above exactly."""
    rng = np.random.default_rng(seed)
    rows, clock = [], 0.0
    for _ in range(400):
        batch = int(rng.integers(1, 17))
        context = batch * int(rng.integers(20, 200))
        joins = int(rng.integers(1, 5)) if rng.random() < 0.2 else 0
        prefill = joins * int(rng.integers(8, 64))
        retired = int(rng.integers(1, 3)) if rng.random() < 0.2 and not joins else 0
        seconds = DECODE_BASE + DECODE_PER_ROW * batch + PER_CONTEXT * context
        seconds += JOIN * joins + PER_PROMPT_TOKEN * prefill + (RETIRE if retired else 0.0)
        rows.append(("engine-0", clock, clock + seconds, batch, context, joins, prefill, retired))
        clock += seconds
    events = []
    for step in range(12):
        tokens = int(rng.integers(500, 3000))
        seconds = TRAIN_OVERHEAD + TRAIN_PER_TOKEN * tokens
        events.append(("learner", "training", "train", step, step + seconds, step, step, -1, -1, tokens, 0.0))
        events.append(("engine-0", "generation", "sync", step, step + SYNC, -1, step + 1, -1, -1, 0, 0.0))
    return _write_record(path, rows, events)


def _write_record(path: Path, steps: list[tuple], events: list[tuple]) -> Path:
    """An executor-like run directory: engine steps and events as given, cpu-timing's scenario."""
    path.mkdir(parents=True)
    columns = ["worker", "start", "end", "batch", "context", "joins", "prefill_tokens", "retired"]
    pd.DataFrame(steps, columns=columns).to_parquet(path / ENGINE_STEPS_FILE)
    table = pd.DataFrame(events, columns=list(EVENT_COLUMNS)).astype(EVENT_COLUMNS)
    write_run(path, scenario_yaml=(Path("scenarios") / "cpu-timing.yaml").read_text(), events=table, summary=None)
    (path / "summary.json").write_text("{}\n")  # the fit reads the events and engine steps alone
    return path


def test_the_fit_recovers_every_cost_it_models(tmp_path: Path) -> None:
    profile, report = profile_from_runs([synthetic_run(tmp_path / "run")], small_scenario())  # 2 training devices
    assert profile.decode_step(1) == pytest.approx(DECODE_BASE + DECODE_PER_ROW, rel=1e-6)
    assert profile.decode_step(16) == pytest.approx(DECODE_BASE + 16 * DECODE_PER_ROW, rel=1e-6)
    assert profile.decode_context_token_s == pytest.approx(PER_CONTEXT, rel=1e-6)
    assert profile.join_s == pytest.approx(JOIN, rel=1e-6)
    assert profile.prefill_token_s == pytest.approx(PER_PROMPT_TOKEN, rel=1e-6)
    assert profile.retire_s == pytest.approx(RETIRE, rel=1e-6)
    assert profile.prefill_per == "sample"
    # The learner's per-token cost is stated for ONE device: 2 devices took 1e-4 s per token together.
    assert profile.train_token_s == pytest.approx(2 * TRAIN_PER_TOKEN, rel=1e-6)
    assert profile.train_step_overhead_s == pytest.approx(TRAIN_OVERHEAD, rel=1e-6)
    assert profile.weight_sync_s == pytest.approx(SYNC, rel=1e-6)
    for measured, charged in report.phases.values():
        assert charged == pytest.approx(measured, rel=1e-6)


def padded_learner_run(path: Path, seed: int = 0) -> Path:
    """A run whose learner steps cost 0.01 s + 1e-4 s per token once each of 2 minibatches is padded to
    its longest row: groups of 2 rows, 10 prompt tokens, completions of 5-200 tokens."""
    rng = np.random.default_rng(seed)
    events, clock = [], 0.0
    for step in range(10):
        groups = [[int(n) for n in rng.integers(5, 200, size=2)] for _ in range(4)]
        for group, lengths in enumerate(groups):  # groups finish in this order
            for sample, n in enumerate(lengths):
                end = clock + 0.1 * (group + 1)
                events.append(("engine-0", "generation", "generate", clock, end, step, 0, group, sample, n, 0.0))
        clock += 0.5
        rows = [[10 + n for n in lengths] for lengths in groups]
        real = sum(map(sum, rows))
        # each minibatch: 2 groups of 2 rows, every row padded to the longest
        padded = sum(2 * len(part) * max(max(r) for r in part) for part in (rows[:2], rows[2:]))
        events.append(("learner", "training", "train", clock, clock + 0.01 + 1e-4 * padded, step, 0, -1, -1, real, 0.0))
        clock += 1.0
    steps = [("engine-0", 0.001 * i, 0.001 * (i + 1), 4, 100 + i, 0, 0, 0) for i in range(30)]
    return _write_record(path, steps, events)


def test_the_fit_finds_a_learner_that_pads_each_minibatch_to_its_longest_row(tmp_path: Path) -> None:
    scenario = small_scenario(
        cluster={"generation_devices": 1, "training_devices": 1}, algorithm={"loss": "grpo", "updates_per_step": 2}
    )
    profile, report = profile_from_runs([padded_learner_run(tmp_path / "run")], scenario)
    assert profile.train_padding == "longest"
    assert profile.train_token_s == pytest.approx(1e-4, rel=1e-6)
    assert profile.train_step_overhead_s == pytest.approx(0.01, abs=1e-9)
    measured, charged = report.phases["learner"]
    assert charged == pytest.approx(measured, rel=1e-6)


def test_calibrate_from_run_writes_the_profile_and_rejects_a_directory_without_steps(tmp_path: Path, capsys) -> None:
    run = synthetic_run(tmp_path / "run")
    out = tmp_path / "profile.yaml"
    assert main(["calibrate", "--from-run", str(run), "--out", str(out)]) == 0
    assert "engine steps" in capsys.readouterr().out and out.is_file()
    (run / ENGINE_STEPS_FILE).unlink()
    assert main(["calibrate", "--from-run", str(run), "--out", str(out)]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_one_straggling_learner_step_does_not_move_the_fit() -> None:
    # Eight steps of 1e-4 s per token, one of them 6x as long (an operating-system hiccup): the line keeps 1e-4.
    from asyncrl.analysis.fits.fit_learner import fit_learner, without_stragglers

    tokens = np.array([1000.0, 1200, 900, 1100, 1000, 1300, 950, 1050])
    seconds = 1e-4 * tokens
    seconds[2] *= 6
    spans = pd.DataFrame({"seconds": seconds, "packed": tokens, "longest": tokens, "contended": 0.0})
    steady = without_stragglers(spans)
    assert len(steady) == 7
    overhead, per_token, _ = fit_learner(steady)
    assert (overhead, per_token) == (pytest.approx(0.0, abs=1e-9), pytest.approx(1e-4))
    # Contended spans 20% slower are no stragglers.
    spans.loc[[1, 3, 5], "seconds"] *= 1.2
    assert len(without_stragglers(spans)) == 7


# The actor's work between two engine steps (its reports, its loop), in seconds: after every step, and more
# after a step in which rows finished (it reports them).
LOOP, REPORT = 5e-5, 6e-4


def run_with_work_between_steps(path: Path, seed: int = 0) -> Path:
    """synthetic_run's costs, each step followed by LOOP (+ REPORT where rows finished) before the next starts;
    rows always stay in flight, so every gap is the engine's."""
    rng = np.random.default_rng(seed)
    rows, clock = [], 0.0
    for _ in range(400):
        batch = int(rng.integers(3, 17))
        context = batch * int(rng.integers(20, 200))
        joins = int(rng.integers(1, 5)) if rng.random() < 0.2 else 0
        prefill = joins * int(rng.integers(8, 64))
        retired = int(rng.integers(1, 3)) if rng.random() < 0.2 and not joins else 0
        seconds = DECODE_BASE + DECODE_PER_ROW * batch + PER_CONTEXT * context
        seconds += JOIN * joins + PER_PROMPT_TOKEN * prefill + (RETIRE if retired else 0.0)
        rows.append(("engine-0", clock, clock + seconds, batch, context, joins, prefill, retired))
        clock += seconds + LOOP + (REPORT if retired else 0.0)
    events = []
    for step in range(12):
        tokens = int(rng.integers(500, 3000))
        seconds = TRAIN_OVERHEAD + TRAIN_PER_TOKEN * tokens
        events.append(("learner", "training", "train", step, step + seconds, step, step, -1, -1, tokens, 0.0))
    return _write_record(path, rows, events)


def test_the_fit_charges_the_actors_work_between_steps_to_the_step_before_it(tmp_path: Path) -> None:
    # The run's last step has no next step to end at, so it alone lacks its LOOP: the figures hold to 1e-3
    # (LOOP is 2% of the decode step at batch 1, REPORT most of retire_s).
    profile, report = profile_from_runs([run_with_work_between_steps(tmp_path / "run")], small_scenario())
    assert profile.decode_step(1) == pytest.approx(DECODE_BASE + LOOP + DECODE_PER_ROW, rel=1e-3)
    assert profile.decode_step(16) == pytest.approx(DECODE_BASE + LOOP + 16 * DECODE_PER_ROW, rel=1e-3)
    assert profile.decode_context_token_s == pytest.approx(PER_CONTEXT, rel=1e-3)
    assert profile.join_s == pytest.approx(JOIN, rel=1e-3)
    assert profile.prefill_token_s == pytest.approx(PER_PROMPT_TOKEN, rel=1e-3)
    assert profile.retire_s == pytest.approx(RETIRE + REPORT, rel=1e-3)
    measured, charged = report.phases["engine steps"]
    assert charged == pytest.approx(measured, rel=1e-3)


def test_an_engine_cycle_ends_at_its_next_step_unless_the_engine_emptied_or_loaded_weights() -> None:
    from asyncrl.analysis.fits.fit_timing import engine_cycles

    columns = ["worker", "start", "end", "batch", "context", "joins", "prefill_tokens", "retired"]
    steps = pd.DataFrame(
        [
            ("engine-0", 0.5, 0.51, 2, 20, 0, 0, 0),  # a weight load starts at 0.511: the cycle ends there
            ("engine-0", 0.0, 0.01, 2, 20, 0, 0, 0),  # rows in flight: up to the next step, 0.0101
            ("engine-1", 0.005, 0.015, 1, 10, 0, 0, 0),  # engine-1's next step starts at 0.02
            ("engine-0", 0.0101, 0.02, 2, 20, 0, 0, 1),  # one of two finished: up to 0.0206
            ("engine-0", 0.0206, 0.03, 1, 10, 0, 0, 1),  # the last row finished: idle after it, the end stays
            ("engine-1", 0.02, 0.03, 1, 10, 0, 0, 0),  # its engine's last step: the end stays
            ("engine-0", 0.601, 0.61, 2, 20, 0, 0, 0),  # the last step: the end stays
        ],
        columns=columns,
    )
    events = pd.DataFrame(
        [("engine-0", "generation", "sync", 0.511, 0.6, -1, 1, -1, -1, 0, 0.0)], columns=list(EVENT_COLUMNS)
    ).astype(EVENT_COLUMNS)
    cycles = engine_cycles(steps, events)
    assert cycles["end"].tolist() == pytest.approx([0.511, 0.0101, 0.02, 0.0206, 0.03, 0.03, 0.61], abs=1e-12)
    assert cycles.drop(columns="end").equals(steps.drop(columns="end"))


def test_the_learners_contention_charges_the_overlapped_spans_the_seconds_they_took_in_total() -> None:
    # Four spans alone on the line 0.01 s + 1e-4 s per token; two an engine overlapped throughout (share 1):
    # a short one of 500 tokens (line 0.06 s) that took 0.12 s, twice its line, and a long one of 2900
    # tokens (line 0.30 s) that took 0.33 s, 1.1 times. Together they took 0.45 s for 0.36 s of line, so
    # κ = 0.09 / 0.36 = 0.25 charges them 0.45 s. Least squares on each span's excess (the earlier fit)
    # gave (1 + 0.1) / 2 = 0.55 and charged 0.36 · 1.55 = 0.558 s, 24% more than they took.
    from asyncrl.analysis.fits.fit_learner import fit_contention, fit_learner, train_spans

    rows, steps = [], []
    alone = [(500, 0.06, False), (1200, 0.13, False), (2000, 0.21, False), (2900, 0.30, False)]
    for step, (tokens, seconds, overlapped) in enumerate([*alone, (500, 0.12, True), (2900, 0.33, True)]):
        rows.append({"kind": "train", "start": float(step), "end": step + seconds, "step": step, "tokens": tokens})
        if overlapped:
            steps.append({"worker": "engine-0", "start": float(step), "end": step + seconds})
    spans = train_spans(pd.DataFrame(rows), 1, pd.DataFrame(steps))
    overhead, per_token, padding = fit_learner(spans)
    assert (overhead, per_token) == (pytest.approx(0.01), pytest.approx(1e-4))
    kappa = fit_contention(spans, overhead, per_token, padding)
    assert kappa == pytest.approx(0.25)
    charged = (overhead + per_token * spans["packed"]) * (1 + kappa * spans["contended"])
    assert charged.sum() == pytest.approx(spans["seconds"].sum())


def test_the_engines_contention_charges_the_steps_the_learner_overlapped_the_seconds_they_took() -> None:
    # Engine steps on the costs above; in each of 12 learner steps, 30 steps alone, then a train span during
    # which 20 steps run (1 + 0.8) times slower, the span ending with the last of them (each overlapped
    # throughout). The costs come from the steps apart and engine_contention is 0.8: every step's seconds
    # are charged. One line through all of them (the earlier fit) put the slowdown into the decode line.
    rng = np.random.default_rng(1)
    rows, events, clock = [], [], 0.0

    def engine_step(slower: float) -> None:
        nonlocal clock
        batch, joins = int(rng.integers(1, 17)), int(rng.integers(1, 5)) if rng.random() < 0.2 else 0
        context, prefill = batch * int(rng.integers(20, 200)), joins * int(rng.integers(8, 64))
        retired = int(rng.integers(1, 3)) if rng.random() < 0.2 and not joins else 0
        seconds = DECODE_BASE + DECODE_PER_ROW * batch + PER_CONTEXT * context
        seconds += JOIN * joins + PER_PROMPT_TOKEN * prefill + (RETIRE if retired else 0.0)
        rows.append(("engine-0", clock, clock + seconds * slower, batch, context, joins, prefill, retired))
        clock += seconds * slower

    for step in range(12):
        for _ in range(30):
            engine_step(1.0)
        start = clock
        for _ in range(20):
            engine_step(1.8)
        events.append(("learner", "training", "train", start, clock, step, step, -1, -1, 1000 + 50 * step, 0.0))
    from asyncrl.analysis.fits.fit import ALONE, engine_charges, fit_engine, training_share

    steps = pd.DataFrame(
        rows, columns=["worker", "start", "end", "batch", "context", "joins", "prefill_tokens", "retired"]
    )
    table = pd.DataFrame(events, columns=list(EVENT_COLUMNS)).astype(EVENT_COLUMNS)
    steps = steps.assign(trained=training_share(steps, table), seconds=steps["end"] - steps["start"])
    assert sorted(set(steps["trained"].round(12))) == [0.0, 1.0]
    costs, slower = fit_engine(steps)
    (a, b, c), join_s, prefill_token_s, retire_s = costs
    assert (a, b, c) == (pytest.approx(DECODE_BASE), pytest.approx(DECODE_PER_ROW), pytest.approx(PER_CONTEXT))
    assert (join_s, prefill_token_s, retire_s) == (
        pytest.approx(JOIN),
        pytest.approx(PER_PROMPT_TOKEN),
        pytest.approx(RETIRE),
    )
    assert slower == pytest.approx(0.8)
    charged = engine_charges(steps, *costs) * (1 + slower * steps["trained"].to_numpy())
    assert charged.sum() == pytest.approx(steps["seconds"].sum())
    assert (steps["trained"] >= ALONE).sum() == 240


def test_overlapped_spans_that_ran_faster_than_the_line_get_one_line_through_every_span() -> None:
    # The spans alone as above (0.01 s + 1e-4 s per token); two overlapped ones of 500 and 2900 tokens that
    # took 0.05 s and 0.28 s, less than their line (a machine that sped up between runs). κ would be
    # negative: it is 0, and the line goes through all six spans (least squares with an intercept), which
    # charges them, in total, the 1.03 s they took.
    from asyncrl.analysis.fits.fit_learner import fit_contention, fit_learner, train_spans

    rows, steps = [], []
    alone = [(500, 0.06, False), (1200, 0.13, False), (2000, 0.21, False), (2900, 0.30, False)]
    for step, (tokens, seconds, overlapped) in enumerate([*alone, (500, 0.05, True), (2900, 0.28, True)]):
        rows.append({"kind": "train", "start": float(step), "end": step + seconds, "step": step, "tokens": tokens})
        if overlapped:
            steps.append({"worker": "engine-0", "start": float(step), "end": step + seconds})
    spans = train_spans(pd.DataFrame(rows), 1, pd.DataFrame(steps))
    assert fit_contention(spans, *fit_learner(spans)) == 0.0
    overhead, per_token, _ = fit_learner(spans, pooled=True)
    assert (overhead + per_token * spans["packed"]).sum() == pytest.approx(1.03)
