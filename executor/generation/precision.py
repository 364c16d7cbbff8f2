"""Number formats of a run: engines in the scenario's ``model.dtype``, the learner in fp32 with bf16 compute.

    model.dtype   engines (weights, KV cache)   learner weights, gradients, Adam state   learner compute
    fp32          fp32                          fp32                                     fp32 (TF32 matmuls on CUDA)
    bf16          bf16                          fp32 (master copy)                       bf16 autocast; softmax,
                                                                                         log-probs and losses in fp32

Weights travel in the engines' dtype (``WeightLayout``'s dtype): a bf16 run sends half the bytes of an fp32 one.
``fp16`` and ``fp8`` are figures the simulator prices, not formats the executor runs (fp16 training needs loss
scaling, fp8 kernels torch does not ship); a scenario that asks the executor for them is rejected, naming
``model.dtype``.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

EXECUTOR_DTYPES: dict[str, torch.dtype] = {"fp32": torch.float32, "bf16": torch.bfloat16}


def executor_dtype(name: str) -> torch.dtype:
    """The torch dtype the executor runs ``model.dtype`` in; ValueError naming the field if it cannot."""
    if name not in EXECUTOR_DTYPES:
        raise ValueError(f"model.dtype: the executor runs {' or '.join(EXECUTOR_DTYPES)}, not {name}")
    return EXECUTOR_DTYPES[name]


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.bfloat16`` -> ``bf16``: the scenario's name of a torch dtype."""
    return next(name for name, value in EXECUTOR_DTYPES.items() if value == dtype)


def enable_tf32(device: torch.device | str) -> None:
    """On CUDA, let fp32 matrix products use TF32 tensor cores (what stays fp32 in a run); nothing on CPU."""
    if torch.device(device).type == "cuda":
        torch.set_float32_matmul_precision("high")


def autocast(device: torch.device, dtype: torch.dtype) -> contextlib.AbstractContextManager[Any]:
    """Mixed-precision compute in ``dtype`` on ``device`` (CPU and CUDA); no change for fp32."""
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)
