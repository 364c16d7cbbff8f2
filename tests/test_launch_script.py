"""The launch-script reader expands the shell a recipe script uses, by hand-worked cases, and runs nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from asyncrl.frameworks.common.launch_script import LaunchScriptError, read_launch_script


def command(tmp_path: Path, text: str, prefixes: tuple[str, ...] = ("verl",)):  # type: ignore[no-untyped-def]
    script = tmp_path / "run.sh"
    script.write_text(text)
    return read_launch_script(script, prefixes)


def test_variables_defaults_arithmetic_and_continuations(tmp_path: Path) -> None:
    found = command(
        tmp_path,
        """#!/usr/bin/env bash
set -xeuo pipefail
NNODES=${NNODES:-2}            # a default, the environment unread
export GPUS=8
prompt=$((1024 * 2))
response=$((1024 * 28))
budget=$(((prompt + response) * 2))
half=$(( -7 / 2 )) rest=$(( -7 % 2 ))
name='single $quoted'
path="${HOME}/models/${MODEL:-Qwen2.5-7B}"
if [ "$x" = "y" ]; then
    inside=yes
fi
python3 -m verl.trainer.main_ppo \\
    trainer.nnodes=${NNODES} trainer.n_gpus_per_node=$GPUS \\
    data.max_prompt_length=${prompt} +data.budget=$budget \\
    a.half=$half a.rest=$rest a.name="$name" a.path=$path a.inside=${inside} \\
    trainer.logger=['console','tensorboard'] "$@" 2>&1 | tee log.txt
""",
    )
    assert found.module == "verl.trainer.main_ppo" and found.line == 14
    assert found.arguments == [
        "trainer.nnodes=2",
        "trainer.n_gpus_per_node=8",
        "data.max_prompt_length=2048",
        "+data.budget=61440",
        "a.half=-3",  # the shell's division truncates toward zero
        "a.rest=-1",  # and its remainder takes the dividend's sign
        "a.name=single $quoted",
        "a.path=/models/Qwen2.5-7B",
        "a.inside=yes",  # conditions are not evaluated: the assignment in the if body applies
        "trainer.logger=[console,tensorboard]",
    ]
    assert found.unset == ["HOME", "x"]


def test_arrays_expand_to_their_elements_and_comments_inside_are_dropped(tmp_path: Path) -> None:
    found = command(
        tmp_path,
        """MODEL="Qwen/Qwen3-4B"
ARGS=(
   --pretrain ${MODEL}
   # --reward_pretrain x
   --max_len 74240
)
MORE=(--async_train --zero_stage 3)
ray job submit --address="http://127.0.0.1:8265" -- python3 -m openrlhf.cli.train_ppo_ray ${ARGS[@]} "${MORE[@]}"
""",
        ("openrlhf",),
    )
    assert found.arguments == [
        "--pretrain",
        "Qwen/Qwen3-4B",
        "--max_len",
        "74240",
        "--async_train",
        "--zero_stage",
        "3",
    ]


def test_command_substitution_is_never_run(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    found = command(tmp_path, f'X=$(touch {marker})\nY=`touch {marker}`\npython -m verl.x a.b="$X"\n')
    assert not marker.exists()
    assert found.arguments == [f"a.b=$(touch {marker})"] and len(found.unexpanded) == 2


def test_the_first_launch_of_a_module_asked_for(tmp_path: Path) -> None:
    found = command(
        tmp_path, "python -m other.module x=1\npython3 -m verl.trainer.main_ppo y=2\npython -m verl.z w=3\n"
    )
    assert (found.module, found.arguments) == ("verl.trainer.main_ppo", ["y=2"])
    with pytest.raises(LaunchScriptError, match="no `python -m openrlhf…` command in the script"):
        command(tmp_path, "python -m verl.trainer.main_ppo x=1\n", ("openrlhf",))


def test_variables_that_expand_without_bound_are_refused_at_once(tmp_path: Path) -> None:
    """Each line makes a variable ten times the last: line 13 would be 10^13 characters."""
    lines = ["a0=xxxxxxxxxx"] + [f'a{i}="{f"${{a{i - 1}}}" * 10}"' for i in range(1, 13)]
    text = "\n".join([*lines, "python3 -m verl.trainer.main_ppo actor_rollout_ref.model.path=$a12"]) + "\n"
    with pytest.raises(LaunchScriptError, match=r"run\.sh: line \d+: its variables expand past 8 MiB"):
        command(tmp_path, text)
