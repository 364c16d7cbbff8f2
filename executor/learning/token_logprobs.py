"""Tempered log-probs of completion tokens under a model, without ever forming the [N, L, vocab] logits.

    RolloutBatch rows ──forward_inputs──► decoder (model.base_model) ──hidden [n, L, H]──► at_columns ──► [n, t, H]
        ──token_logprobs: output head, ``chunk`` positions at a time──► log softmax(logits / temperature) [n, t]

Only the hidden states at the columns that predict completion tokens are kept, and the output head runs on
``chunk`` of them at a time; with a graph each chunk's logits are recomputed in the backward pass instead of kept.
A model whose logits are more than its output head applied to the last hidden state (soft-capping, scaling) gets
its log-probs from its full logits instead (``head_is_linear``). Log-probs are those of the tempered distribution,
softmax(logits / temperature), which is what the actors sample from and record, so ρ = 1 for a fresh rollout.

``stack_rows`` and ``grad_rows`` put per-micro-batch results back into the whole minibatch's rows and take
each micro-batch's slice of a gradient (the learner's micro-batching, ``executor.learning.learner``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

import torch
from torch import Tensor, nn
from torch.nn import functional as F
from torch.utils.checkpoint import checkpoint

from ..generation.precision import autocast
from .rollout_batch import RolloutBatch

if TYPE_CHECKING:
    from transformers import PreTrainedModel

__all__ = [
    "TokenLogprobs",
    "at_columns",
    "grad_rows",
    "head_is_linear",
    "policy_logprobs",
    "stack_rows",
    "token_logprobs",
]

# Output-head transformations besides the linear layer; a model with any of them gets its log-probs from full logits.
_LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "logits_scaling", "output_multiplier_scale")


class TokenLogprobs(NamedTuple):
    """What one forward gives at the completion tokens of some rows."""

    hidden: Tensor | None  # [n, t, H] last hidden states, when asked for
    logprobs: Tensor  # [n, t] tempered log-probs


def policy_logprobs(
    model: PreTrainedModel,  # a Hugging Face causal LM: base_model, get_output_embeddings
    batch: RolloutBatch,
    rows: slice,
    *,
    temperature: float,
    chunk: int,
    compute_dtype: torch.dtype,
    need_hidden: bool = False,
) -> TokenLogprobs:
    """Tempered log-probs [n, t] at the completion tokens of ``rows`` (t: their longest completion), and the last
    hidden states there when ``need_hidden``; the [n, L, vocab] logits are never formed."""
    inputs = batch.forward_inputs(rows)
    device = inputs.input_ids.device
    positions = torch.arange(inputs.input_ids.shape[1], device=device).expand_as(inputs.input_ids)
    arguments = {"input_ids": inputs.input_ids, "attention_mask": inputs.attention_mask, "position_ids": positions}
    columns, targets = inputs.predicting_columns, inputs.completion_ids
    with autocast(device, compute_dtype):
        if not head_is_linear(model):
            output = model(**arguments, use_cache=False, output_hidden_states=need_hidden)
            hidden = at_columns(output.hidden_states[-1], columns) if need_hidden else None
            logprobs = token_logprobs(at_columns(output.logits, columns), nn.Identity(), targets, temperature, chunk)
            return TokenLogprobs(hidden, logprobs)
        states = at_columns(model.base_model(**arguments, use_cache=False).last_hidden_state, columns)
        logprobs = token_logprobs(states, model.get_output_embeddings(), targets, temperature, chunk)
        return TokenLogprobs(states if need_hidden else None, logprobs)


def token_logprobs(hidden: Tensor, head: nn.Module, targets: Tensor, temperature: float, chunk: int) -> Tensor:
    """log softmax(head(hidden) / temperature) at ``targets``: [N, T, H] hidden states -> [N, T] log-probs.

    ``chunk`` positions at a time, in at least float32: only one [chunk, vocab] logits tensor exists at once, and
    with a graph each chunk's logits are recomputed in the backward pass instead of kept.
    """
    flat_hidden, flat_targets = hidden.reshape(-1, hidden.shape[-1]), targets.reshape(-1)
    pieces = []
    for start in range(0, len(flat_targets), chunk):
        args = (flat_hidden[start : start + chunk], flat_targets[start : start + chunk], head, temperature)
        if torch.is_grad_enabled() and hidden.requires_grad:
            pieces.append(checkpoint(_chunk_logprobs, *args, use_reentrant=False))
        else:
            pieces.append(_chunk_logprobs(*args))
    return torch.cat(pieces).view(targets.shape) if pieces else hidden.new_zeros(targets.shape, dtype=torch.float32)


def _chunk_logprobs(hidden: Tensor, targets: Tensor, head: nn.Module, temperature: float) -> Tensor:
    logits = head(hidden)
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32)) / temperature
    return logits.gather(-1, targets[:, None]).squeeze(-1) - torch.logsumexp(logits, dim=-1)


def head_is_linear(model: PreTrainedModel) -> bool:
    """True when the logits are the output head applied to the decoder's last hidden state, and nothing more."""
    config = getattr(model, "config", None)
    if config is None or model.get_output_embeddings() is None or model.base_model is model:
        return False
    return all(getattr(config, name, None) in (None, 1.0) for name in _LOGIT_TRANSFORMS)


def stack_rows(parts: Sequence[Tensor], columns: int) -> Tensor:
    """Per-micro-batch [n, t, ...] tensors as one [N, columns, ...], each right-padded with zeros to ``columns``."""
    return torch.cat([F.pad(part, (0, 0) * (part.dim() - 2) + (0, columns - part.shape[1])) for part in parts])


def grad_rows(full: Tensor, rows: slice, part: Tensor) -> Tensor:
    """The slice of ``full.grad`` that belongs to the micro-batch output ``part``."""
    assert full.grad is not None
    return full.grad[rows, : part.shape[1]].to(part.dtype)


def at_columns(per_column: Tensor, columns: Tensor) -> Tensor:
    """[N, L, D] → [N, T, D]: row i's vectors at ``columns[i]``."""
    return per_column.gather(1, columns[..., None].expand(-1, -1, per_column.shape[-1]))
