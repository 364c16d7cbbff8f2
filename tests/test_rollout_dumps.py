"""verl's rollout dumps (trainer.rollout_data_dir: {step}.jsonl, the decoded response in `output`) read by
`asyncrl lengths DIR` and by `from-verl --lengths DIR`, the text counted with a local tokenizer or the scenario's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from asyncrl.scenarios.spec.loading import load_scenario

from asyncrl.cli import main
from tests.tiny_checkpoint import save_word_tokenizer

WORDS = ("7", "+", "=", "what", "is")
pytestmark = pytest.mark.slow  # the tokenizers import transformers: seconds


def write_dumps(directory: Path, word_counts: dict[int, list[int]]) -> Path:
    """One file per step as verl's _dump_generations writes it: input, output, gts, score, step."""
    directory.mkdir(parents=True)
    for step, counts in word_counts.items():
        records = [
            {"input": "what is 7 + 7", "output": " ".join(WORDS[i % len(WORDS)] for i in range(n)), "gts": "14",
             "score": 1.0, "step": step}
            for n in counts
        ]  # fmt: skip
        (directory / f"{step}.jsonl").write_text("\n".join(json.dumps(record) for record in records) + "\n")
    return directory


def test_lengths_of_a_dump_directory_in_tokens_of_a_local_tokenizer(tmp_path: Path, capsys) -> None:
    dumps = write_dumps(tmp_path / "rollouts", {10: [3, 5], 2: [4], 1: [1, 2, 6]})
    tokenizer = save_word_tokenizer(tmp_path / "tok", WORDS)  # one token per word
    assert main(["lengths", str(dumps), "--tokenizer", str(tokenizer), "--out", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    assert f"{dumps}: 6 completions, field output, counted as tokens of the tokenizer at {tokenizer}; 3 step files, " \
           "steps 1 to 10" in printed  # fmt: skip
    assert "note: verl's dumps hold decoded text" in printed
    # step order (1, 2, 10), each file's responses in order
    assert (tmp_path / "out" / "lengths.txt").read_text().split() == ["1", "2", "6", "4", "3", "5"]


def test_the_scenarios_tokenizer_counts_them(tmp_path: Path, capsys) -> None:
    dumps = write_dumps(tmp_path / "rollouts", {1: [2, 3, 9]})
    checkpoint = save_word_tokenizer(tmp_path / "ckpt", WORDS)
    scenario = tmp_path / "s.yaml"
    base = yaml.safe_load(Path("scenarios/cpu-timing.yaml").read_text())
    scenario.write_text(yaml.safe_dump({**base, "model": {**base["model"], "path": str(checkpoint)}}))
    assert main(["lengths", str(dumps), "--scenario", str(scenario), "--out", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "lengths.txt").read_text().split() == ["2", "3", "9"]
    assert f"counted as tokens of the tokenizer at {checkpoint}" in capsys.readouterr().out
    assert main(["lengths", str(dumps), "--scenario", "cpu-timing"]) == 2  # a preset: no tokenizer to count with
    assert "--scenario: cpu-timing has no model.path" in capsys.readouterr().err


def test_from_verl_counts_dumps_with_the_models_tokenizer(tmp_path: Path, capsys) -> None:
    dumps = write_dumps(tmp_path / "rollouts", {1: [5, 9, 12], 2: [7]})
    model = save_word_tokenizer(tmp_path / "Qwen2.5-7B-Instruct", WORDS)  # a local model directory's tokenizer
    out = tmp_path / "plans" / "gsm8k.yaml"
    config = Path("tests/data/verl_ppo_trainer.yaml")
    args = ["from-verl", str(config), f"actor_rollout_ref.model.path={model}", "--preset", "qwen2.5-7b"]
    assert main([*args, "--device", "h100", "--lengths", str(dumps), "--out", str(out)]) == 0
    completion = load_scenario(out).workload.completion_tokens
    assert completion.observed.tolist() == [5, 9, 12, 7]
    assert (tmp_path / "plans" / "gsm8k-lengths.txt").is_file()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main([*args, "--device", "h100", "--lengths", str(empty), "--out", str(out), "--force"]) == 2
    assert "holds no .jsonl files" in capsys.readouterr().err


def test_from_verl_fits_the_groups_correlation_from_the_dumps(tmp_path: Path, capsys) -> None:
    """48 prompts of 4 responses in two steps: the scenario takes the fitted group_correlation and says whence."""
    from tests.test_group_lengths import write_grouped_dumps

    dumps = write_grouped_dumps(tmp_path / "rollouts", 0.7)
    model = save_word_tokenizer(tmp_path / "Qwen2.5-7B-Instruct", ("w",))
    out = tmp_path / "plans" / "gsm8k.yaml"
    args = ["from-verl", "tests/data/verl_ppo_trainer.yaml", f"actor_rollout_ref.model.path={model}"]
    assert main([*args, "--preset", "qwen2.5-7b", "--device", "h100", "--lengths", str(dumps), "--out", str(out)]) == 0
    correlation = load_scenario(out).workload.group_correlation
    assert 0.55 < correlation < 0.85
    assert "workload.group_correlation" in capsys.readouterr().out
