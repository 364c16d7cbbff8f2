"""The learner's checkpoint directory: weights, optimizer state, step and RNG states, read back so a resumed
learner continues exactly (a run commits it whole, with its weight versions: ``checkpoint.save``).

    learner/
        policy.safetensors      the policy's weights
        value_head.safetensors  PPO only
        optimizer.pt            Adam's state
        learner_state.pt        step, and the torch, numpy and Python (and CUDA) RNG states

The reference policy is not saved: a resumed learner is built from the same scenario (same initial weights).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from safetensors.torch import load_model as load_safetensors_model
from safetensors.torch import save_model as save_safetensors_model
from torch import nn

__all__ = ["OPTIMIZER_FILE", "POLICY_FILE", "STATE_FILE", "VALUE_HEAD_FILE", "load_learner", "save_learner"]

POLICY_FILE = "policy.safetensors"
VALUE_HEAD_FILE = "value_head.safetensors"
OPTIMIZER_FILE = "optimizer.pt"
STATE_FILE = "learner_state.pt"


def save_learner(
    directory: Path, model: nn.Module, value_head: nn.Module | None, optimizer: torch.optim.Optimizer, step: int
) -> Path:
    """Write weights, optimizer state, ``step`` and the RNG states into ``directory`` (made if missing). A run's
    checkpoint writes them into a staging directory and commits it whole (``checkpoint.save``)."""
    directory.mkdir(parents=True, exist_ok=True)
    save_safetensors_model(model, str(directory / POLICY_FILE))
    if value_head is not None:
        save_safetensors_model(value_head, str(directory / VALUE_HEAD_FILE))
    torch.save(optimizer.state_dict(), directory / OPTIMIZER_FILE)
    torch.save({"step": step, "rng": _rng_states()}, directory / STATE_FILE)
    return directory


def load_learner(
    directory: Path,
    model: nn.Module,
    value_head: nn.Module | None,
    optimizer: torch.optim.Optimizer,
    device: torch.device,
) -> int:
    """Restore what ``save_learner`` wrote into the given modules and optimizer, and the RNG states; the step."""
    load_safetensors_model(model, str(directory / POLICY_FILE), device=str(device))
    if value_head is not None:
        load_safetensors_model(value_head, str(directory / VALUE_HEAD_FILE), device=str(device))
    optimizer.load_state_dict(torch.load(directory / OPTIMIZER_FILE, map_location=device, weights_only=True))
    state = torch.load(directory / STATE_FILE, weights_only=True)
    _set_rng_states(state["rng"])
    return int(state["step"])


def _rng_states() -> dict[str, Any]:
    """The global RNG states, as tensors and plain Python values (loadable with ``weights_only``)."""
    # the legacy global generator's state is always the tuple form (the stubs also allow a dict)
    kind, key, position, has_gauss, cached_gaussian = cast(
        tuple[str, np.ndarray, int, int, float], np.random.get_state()
    )
    states: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": (kind, key.tolist(), position, has_gauss, cached_gaussian),
        "python": random.getstate(),
    }
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def _set_rng_states(states: dict[str, Any]) -> None:
    torch.set_rng_state(states["torch"])
    kind, key, position, has_gauss, cached_gaussian = states["numpy"]
    np.random.set_state((kind, np.asarray(key, dtype=np.uint32), position, has_gauss, cached_gaussian))
    random.setstate(states["python"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
