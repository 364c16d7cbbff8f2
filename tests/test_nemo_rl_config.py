"""scenarios.nemo_rl_config: a NeMo-RL config's defaults chain, overrides and interpolations, as NeMo-RL reads them."""

from __future__ import annotations

from pathlib import Path

import pytest
from asyncrl.scenarios.files.errors import ScenarioError

from asyncrl.frameworks.nemo_rl.config import read_nemo_rl_config

# The shape of examples/configs/grpo_math_1B.yaml: packing budgets from the sequence cap, a resolver nested
BASE = """
grpo: {num_prompts_per_step: 32, num_generations_per_prompt: 16}
policy:
  train_micro_batch_size: 4
  logprob_batch_size: ${policy.train_micro_batch_size}
  max_total_sequence_length: 512
  sequence_packing:
    train_mb_tokens: ${mul:${policy.max_total_sequence_length}, ${policy.train_micro_batch_size}}
    logprob_mb_tokens: ${mul:${policy.max_total_sequence_length}, ${policy.logprob_batch_size}}
  generation:
    max_new_tokens: ${policy.max_total_sequence_length}
    vllm_cfg: {gpu_memory_utilization: 0.6, tensor_parallel_size: 1}
logger:
  log_dir: logs/${grpo.num_prompts_per_step}
  home: ${oc.env:HOME}
"""
RECIPE = """
defaults: ../../base.yaml
grpo: {num_prompts_per_step: 64}
policy:
  train_micro_batch_size: 1
  max_total_sequence_length: 4096
  generation: {vllm_cfg: {tensor_parallel_size: 4}}
"""


def write_chain(tmp_path: Path) -> Path:
    (tmp_path / "base.yaml").write_text(BASE)
    recipe = tmp_path / "recipes" / "llm" / "recipe.yaml"
    recipe.parent.mkdir(parents=True)
    recipe.write_text(RECIPE)
    return recipe


def test_the_recipe_wins_over_its_defaults_and_interpolations_see_the_merged_values(tmp_path: Path) -> None:
    config = read_nemo_rl_config(write_chain(tmp_path))
    assert config["grpo"] == {"num_prompts_per_step": 64, "num_generations_per_prompt": 16}
    vllm = config["policy"]["generation"]["vllm_cfg"]
    assert vllm == {"gpu_memory_utilization": 0.6, "tensor_parallel_size": 4}  # merged key by key
    packing = config["policy"]["sequence_packing"]
    assert packing == {"train_mb_tokens": 4096, "logprob_mb_tokens": 4096}  # 4,096 × 1, the recipe's values
    assert config["policy"]["generation"]["max_new_tokens"] == 4096  # an integer, not the text "4096"
    assert config["logger"]["log_dir"] == "logs/64"  # inside a string: substituted as text
    assert config["logger"]["home"] == "${oc.env:HOME}"  # not NeMo-RL's to fill here: left as written


def test_overrides_apply_before_the_interpolations(tmp_path: Path) -> None:
    config = read_nemo_rl_config(
        write_chain(tmp_path), ["policy.max_total_sequence_length=2048", "+cluster.num_nodes=2"]
    )
    assert config["policy"]["sequence_packing"]["train_mb_tokens"] == 2048
    assert config["cluster"] == {"num_nodes": 2}


def test_a_list_of_defaults_merges_in_order(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("x: 1\ny: {p: 1, q: 1}\n")
    (tmp_path / "b.yaml").write_text("y: {q: 2}\n")
    (tmp_path / "c.yaml").write_text("defaults: [a.yaml, b.yaml]\nx: 3\n")
    assert read_nemo_rl_config(tmp_path / "c.yaml") == {"x": 3, "y": {"p": 1, "q": 2}}


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"c.yaml": "defaults: missing.yaml\n"}, "missing.yaml: no such file"),
        ({"c.yaml": "defaults: c.yaml\n"}, "defaults nest more than 16 deep"),
        ({"c.yaml": "- a\n- b\n"}, "a NeMo-RL config is a mapping, not list"),
        ({"c.yaml": "defaults: {a: 1}\n"}, "defaults: expected a file name or a list of them"),
        ({"c.yaml": "a: [1\n"}, r"c.yaml:2:1: not valid YAML"),
    ],
)
def test_a_config_that_cannot_be_read_names_its_file(tmp_path: Path, files: dict[str, str], message: str) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(ScenarioError, match=message):
        read_nemo_rl_config(tmp_path / "c.yaml")
