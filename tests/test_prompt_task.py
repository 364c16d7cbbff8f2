"""Task mode on a real checkpoint: a tiny Llama and its word-level tokenizer built here and saved locally,
prompts from a JSONL file through the tokenizer's chat template, a reward function, hub names from the
local cache only."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from asyncrl.executor.generation.hf_tokenizer import HfTokenizer
from asyncrl.executor.tasks.generated import TaskPrompt
from asyncrl.executor.tasks.prompt_task import load_prompt_task
from asyncrl.scenarios.spec.checkpoints import load_hf_tokenizer
from asyncrl.scenarios.spec.loading import load_scenario

from asyncrl.cli import main
from tests.tiny_checkpoint import save_tiny_checkpoint, save_word_tokenizer

SCENARIO = Path(__file__).parent / "data" / "arithmetic.yaml"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny-ckpt")


def test_prompts_go_through_the_checkpoints_chat_template(checkpoint: Path, tmp_path: Path) -> None:
    tokenizer = HfTokenizer(load_hf_tokenizer(checkpoint))
    ids = tokenizer.prompt_ids("what is 2 + 3")
    assert tokenizer.inner.convert_ids_to_tokens(ids) == ["<bos>", "user:", "what", "is", "2", "+", "3", "assistant:"]
    plain = HfTokenizer(load_hf_tokenizer(save_word_tokenizer(tmp_path / "plain")))  # no chat template
    assert plain.inner.convert_ids_to_tokens(plain.prompt_ids("what is 2 + 3")) == [
        "<bos>",
        "what",
        "is",
        "2",
        "+",
        "3",
    ]
    with pytest.raises(ValueError, match="no chat template"):
        plain.prompt_ids([{"role": "user", "content": "what is 2 + 3"}])


def test_the_reward_function_scores_the_text_up_to_eos(checkpoint: Path) -> None:
    task = load_prompt_task(load_scenario(SCENARIO, [f"model.path={checkpoint}"]))
    assert len(task.records) == 55 and task.max_new_tokens == 4
    prompt = TaskPrompt(
        text="what is 2 + 3", ids=[], target='{"prompt": "what is 2 + 3", "answer": "5"}', max_new_tokens=4
    )
    five, four, eos = task.tokenizer.encode("5")[0], task.tokenizer.encode("4")[0], task.tokenizer.eos_token_id
    assert task.reward(prompt, [five, eos, four]) == 1.0
    assert task.reward(prompt, [four, five]) == 0.0 and task.reward(prompt, [eos]) == 0.0
    drawn = task.prompts(np.random.default_rng([0, 7]), 3)
    assert drawn == task.prompts(np.random.default_rng([0, 7]), 3)  # a group's prompts follow its seed
    assert all(p.ids[0] == task.tokenizer.bos_token_id and p.max_new_tokens == 4 for p in drawn)


@pytest.mark.slow
def test_a_short_run_trains_on_the_reward_functions_scores(checkpoint: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    args = ["execute", str(SCENARIO), f"model.path={checkpoint}", "--steps", "5", "--quiet", "--out", str(out)]
    assert main(args) == 0
    assert "(synthetic" not in capsys.readouterr().out
    rewards = pd.read_parquet(out / "metrics.parquet")["reward_mean"]
    batch = 4 * 8
    # every reward is 0 or 1, so each batch mean is a whole number of 32nds (timing mode's would not be)
    assert len(rewards) == 5 and all(abs(r * batch - round(r * batch)) < 1e-9 for r in rewards)


@pytest.mark.slow
def test_a_hub_name_resolves_from_the_local_cache_only(checkpoint: Path, tmp_path: Path) -> None:
    cache = tmp_path / "hub"
    snapshot = cache / "models--tiny-org--tiny-ckpt" / "snapshots" / "0123abc"
    shutil.copytree(checkpoint, snapshot)
    (cache / "models--tiny-org--tiny-ckpt" / "refs").mkdir()
    (cache / "models--tiny-org--tiny-ckpt" / "refs" / "main").write_text("0123abc")
    env = {**os.environ, "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-m", "asyncrl", "execute", str(SCENARIO), "--steps", "2", "--quiet"]
    cached = subprocess.run(
        [*command, "model.path=tiny-org/tiny-ckpt", "--out", str(tmp_path / "run")],
        capture_output=True,
        text=True,
        env=env,
    )
    assert cached.returncode == 0, cached.stderr
    missing = subprocess.run([*command, "model.path=tiny-org/not-cached"], capture_output=True, text=True, env=env)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert missing.stderr.startswith("asyncrl: error: model.path: tiny-org/not-cached")
    assert "not in the local Hugging Face cache (asyncrl never downloads" in missing.stderr


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["workload.reward=tests.no_such_module:f"], "workload.reward: cannot import 'tests.no_such_module:f'"),
        (["workload.reward=exact_answer"], "workload.reward: 'exact_answer'; write module:function"),
        (["model.path=null"], "workload.prompts: needs model.path"),
        (["workload.task=copy"], "workload.task: give a task, or prompts and reward, not both"),
    ],
)
def test_bad_task_settings_are_one_line_before_any_process(
    overrides, message, checkpoint: Path, tmp_path, capsys
) -> None:
    args = ["execute", str(SCENARIO), f"model.path={checkpoint}", *overrides, "--out", str(tmp_path / "run")]
    assert main(args) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"asyncrl: error: {message}") and error.count("\n") == 1
    assert not (tmp_path / "run").exists()
