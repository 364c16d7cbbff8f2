"""Where each process of a run goes: the pure placement function, worked by hand (no GPU needed)."""

from __future__ import annotations

import pytest
from asyncrl.executor.processes.placement import Placement, place


def test_cpu_puts_everything_on_the_cpu_over_gloo() -> None:
    assert place("cpu", visible=0, engines=3) == Placement(("cpu", "cpu", "cpu"), "cpu", "gloo")
    assert place("cpu", visible=8, engines=1, runtime="ray") == Placement(("cpu",), "cpu", "gloo")


def test_local_engines_take_the_first_gpus_and_the_learner_the_next() -> None:
    assert place("cuda", visible=8, engines=3) == Placement(("cuda:0", "cuda:1", "cuda:2"), "cuda:3", "nccl")
    assert place("cuda", visible=2, engines=1) == Placement(("cuda:0",), "cuda:1", "nccl")


def test_local_processes_share_gpus_over_gloo_when_there_are_too_few() -> None:
    # NCCL cannot pair two processes on one device: a shared GPU sends weights through host memory.
    assert place("cuda", visible=1, engines=1) == Placement(("cuda:0",), "cuda:0", "gloo")
    assert place("cuda", visible=2, engines=2) == Placement(("cuda:0", "cuda:1"), "cuda:0", "gloo")
    assert place("cuda", visible=2, engines=3) == Placement(("cuda:0", "cuda:1", "cuda:0"), "cuda:0", "gloo")


def test_ray_actors_each_see_their_own_gpu_as_cuda_0() -> None:
    assert place("cuda", visible=4, engines=3, runtime="ray") == Placement(("cuda:0",) * 3, "cuda:0", "nccl")
    assert place("cuda", visible=1, engines=2, runtime="ray").backend == "gloo"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("cuda", 0, 1, "local"), "device: cuda asked for, but torch sees no GPU"),
        (("tpu", 0, 1, "local"), "device: 'tpu'"),
        (("cuda", 1, 1, "slurm"), "runtime: 'slurm'"),
        (("cpu", 0, 0, "local"), "engines: 0"),
    ],
)
def test_what_cannot_be_placed_is_named(args: tuple, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        place(*args)
