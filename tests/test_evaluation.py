"""Evaluation on held-out prompts (executor/learning/evaluation.py): never trained on, answered outside the run's clock."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from asyncrl.executor.learning.evaluation import EVAL_COLUMNS, held_out_prompts
from asyncrl.executor.processes.runtime import execute
from asyncrl.executor.tasks.generated import load_task
from asyncrl.executor.tasks.work import WorkSource
from asyncrl.scenarios.files.errors import ScenarioError
from asyncrl.scenarios.record.record import RunRecord
from asyncrl.scenarios.spec.loading import load_scenario

SMALL = ["run.steps=4", "workload.prompts_per_step=2", "run.eval_every=2", "run.eval_prompts=8"]


def test_held_out_prompts_are_distinct_and_reproducible() -> None:
    task = load_task("sort")
    first, again = held_out_prompts(task, seed=0, count=20), held_out_prompts(task, seed=0, count=20)
    assert [p.text for p in first] == [p.text for p in again]
    assert len({p.text for p in first}) == 20
    assert [p.text for p in held_out_prompts(task, seed=1, count=20)] != [p.text for p in first]


def test_training_never_draws_a_held_out_prompt() -> None:
    # max on 4 digits has 10,000 prompts: 2,000 training groups draw 1 − (1 − 1e-4)^2000 ≈ 18% of the held-out 100
    # by chance.
    scenario = load_scenario("cpu-study", ["workload.task=max", "run.eval_every=10", "run.eval_prompts=100"])
    task = load_task("max")
    held_out = frozenset(p.text for p in held_out_prompts(task, 0, 100))
    open_source = WorkSource(scenario, task, model_vocab=32)
    guarded = WorkSource(scenario, task, model_vocab=32, held_out=held_out)
    drawn_open, drawn_guarded = set(), set()
    for group in range(2000):
        open_source.requests(group)
        guarded.requests(group)
        drawn_open.add(open_source._prompts[group].text)
        drawn_guarded.add(guarded._prompts[group].text)
    assert len(drawn_open & held_out) > 5  # without the guard some would be trained on
    assert not drawn_guarded & held_out


def test_a_task_too_small_to_hold_the_prompts_out_is_a_one_line_error() -> None:
    task = load_task("median")  # 3 digits: 1,000 distinct prompts
    with pytest.raises(ValueError, match=r"^run\.eval_prompts: task 'median' gave \d+ distinct prompts"):
        held_out_prompts(task, seed=0, count=1001)


def test_timing_mode_refuses_evaluation(tmp_path: Path) -> None:
    scenario = load_scenario("cpu-timing", ["run.eval_every=2"])
    with pytest.raises(ScenarioError, match=r"^run\.eval_every: evaluation needs a task"):
        execute(scenario, tmp_path / "run")
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").iterdir())


@pytest.mark.slow
def test_a_run_writes_eval_parquet_outside_its_clock(tmp_path: Path) -> None:
    # 4 steps, eval every 2: the weights after 0, 2 and 4 steps, each greedy and sampled, 8 prompts.
    scenario = load_scenario("cpu-study", [*SMALL, "schedule.kind=sync"])
    result = execute(scenario, tmp_path / "run")
    evaluation = pd.read_parquet(tmp_path / "run" / "eval.parquet")
    assert list(evaluation.columns) == list(EVAL_COLUMNS)
    assert evaluation[["step", "mode"]].values.tolist() == [
        [step, mode] for step in (0, 2, 4) for mode in ("greedy", "sampled")
    ]
    assert (evaluation["prompts"] == 8).all() and evaluation["reward_mean"].between(0, 1).all()
    assert (evaluation["seconds"] > 0).all()
    # The answers come after the clock stopped: the wall time ends with the last step, not after the evaluation.
    metrics = result.metrics
    assert result.summary.wall_time_s == pytest.approx(metrics["end"].max())
    assert "eval_snapshot_s" in metrics and (metrics["eval_snapshot_s"] >= 0).all()
    assert np.array_equal(RunRecord.read(tmp_path / "run").evaluation["step"], evaluation["step"])


def test_the_terminal_shows_the_first_and_last_evaluation() -> None:
    from asyncrl.analysis.tables import evaluation_line

    rows = [
        (0, "greedy", 0.1, 0.05), (0, "sampled", 0.02, 0.05), (40, "greedy", 0.29, 0.05), (40, "sampled", 0.16, 0.05)
    ]  # fmt: skip
    frame = pd.DataFrame(rows, columns=["step", "mode", "reward_mean", "seconds"]).assign(prompts=32.0)
    assert evaluation_line(frame) == (
        "evaluation   greedy 0.100 -> 0.290, sampled 0.020 -> 0.160 (steps 0 -> 40, 32 held-out prompts, "
        "0.2 s after the run's clock)"
    )


def test_the_expected_mode_is_the_answer_tokens_probability_at_the_temperature() -> None:
    # A model whose last logits are 2 for the answer token and 0 for the other 15: at temperature 2 the answer's
    # probability is e^1 / (e^1 + 15) = 0.153403; on a task without one answer token there is no expected mode.
    import torch
    from asyncrl.executor.learning.evaluation import expected_reward
    from asyncrl.executor.tasks.generated import median_task, sort_task

    task = median_task()
    prompts = task.prompts(np.random.default_rng(0), 4)

    class Logits:
        def __call__(self, ids: torch.Tensor) -> object:
            logits = torch.zeros(1, ids.shape[1], 16)
            logits[0, -1, task.tokenizer.encode(self.prompt.target)[0]] = 2.0
            return type("Output", (), {"logits": logits})()

    model = Logits()
    figures = []
    for prompt in prompts:
        model.prompt = prompt
        figures.append(expected_reward(model, task, [prompt], temperature=2.0, device="cpu"))
    assert all(f is not None and f["reward_mean"] == pytest.approx(math.e / (math.e + 15)) for f in figures)
    assert (
        expected_reward(
            model, sort_task(), sort_task().prompts(np.random.default_rng(0), 2), temperature=1.0, device="cpu"
        )
        is None
    )
