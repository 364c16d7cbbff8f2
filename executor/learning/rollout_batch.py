"""Scored rollouts as the learner's padded tensors, and how a step's batch is cut into updates and forwards.

    groups (G scored rollouts each) ──split_groups──► minibatches of whole groups (one optimizer update each)
    a minibatch ──collate──► RolloutBatch [N rows] ──micro_batches──► runs of rows, one forward each

Row layout of one batch (prompt ``p``, completion ``c``, padding ``.``; completion tokens sit at different
columns of the forward input, so the column predicting each completion token is gathered per row)::

    input_ids [N, L]           behaviour_logprobs, mask [N, T]
    p p p c c c .              c c c      1 1 1
    p p c c . . .              c c .      1 1 0
    p p p p c . .              c . .      1 0 0
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch import Tensor

from ...scenarios.rules.workload import minibatch_bounds
from ..generation.engine import Rollout

__all__ = ["ForwardInputs", "Group", "RolloutBatch", "collate", "micro_batches", "split_groups"]

Group = Sequence[tuple[Rollout, float]]  # the G scored rollouts of one prompt


class ForwardInputs(NamedTuple):
    """The forward pass's inputs for some rows, trimmed to their widths."""

    input_ids: Tensor  # [n, l]
    attention_mask: Tensor  # [n, l]
    predicting_columns: Tensor  # [n, t]
    completion_ids: Tensor  # [n, t]


@dataclass(frozen=True, eq=False)
class RolloutBatch:
    """Scored rollouts as padded tensors, rows group-major; N rows, L input columns, T completion tokens."""

    input_ids: Tensor  # [N, L] prompt then completion, right-padded with the pad token
    attention_mask: Tensor  # [N, L] 1 on prompt and completion tokens
    predicting_columns: Tensor  # [N, T] input column whose logits predict each completion token
    completion_ids: Tensor  # [N, T] completion tokens, pad token on padding
    mask: Tensor  # [N, T] 1 on completion tokens
    behaviour_logprobs: Tensor  # [N, T] the actor's log-probs, 0 on padding
    versions: Tensor  # [N, T] weights version of each token, 0 on padding
    rewards: Tensor  # [N]
    group_size: int

    def to(self, device: torch.device) -> RolloutBatch:
        moved = {name: getattr(self, name).to(device) for name in _TENSOR_FIELDS}
        return RolloutBatch(**moved, group_size=self.group_size)

    def forward_inputs(self, rows: slice) -> ForwardInputs:
        """The forward inputs of ``rows``, trimmed to their widths."""
        attention = self.attention_mask[rows]
        width = int(attention.sum(dim=1).max())
        completion = int(self.mask[rows].sum(dim=1).max())
        columns = self.predicting_columns[rows, :completion].clamp(max=width - 1)
        return ForwardInputs(
            input_ids=self.input_ids[rows, :width],
            attention_mask=attention[:, :width],
            predicting_columns=columns,
            completion_ids=self.completion_ids[rows, :completion],
        )


_TENSOR_FIELDS = (
    "input_ids",
    "attention_mask",
    "predicting_columns",
    "completion_ids",
    "mask",
    "behaviour_logprobs",
    "versions",
    "rewards",
)


def collate(groups: Sequence[Group], pad_token_id: int) -> RolloutBatch:
    """Pad the groups' rollouts into tensors, group-major (rows g*G … g*G+G-1 are group g, in the given order)."""
    group_size = _common_group_size(groups)
    scored = [pair for group in groups for pair in group]
    rollouts = [rollout for rollout, _ in scored]
    input_width = max(len(r.prompt) + len(r.tokens) for r in rollouts)
    completion_width = max(len(r.tokens) for r in rollouts)
    inputs = [_padded(r.prompt + r.tokens, input_width, pad_token_id) for r in rollouts]
    mask = [_padded([1] * len(r.tokens), completion_width, 0) for r in rollouts]
    columns = [
        [min(len(r.prompt) - 1 + t, input_width - 1) for t in range(completion_width)] for r in rollouts
    ]  # padding points at a real column; the mask hides it
    return RolloutBatch(
        input_ids=torch.tensor(inputs, dtype=torch.long),
        attention_mask=torch.tensor([_padded([1] * (len(r.prompt) + len(r.tokens)), input_width, 0) for r in rollouts]),
        predicting_columns=torch.tensor(columns, dtype=torch.long),
        completion_ids=torch.tensor([_padded(r.tokens, completion_width, pad_token_id) for r in rollouts]),
        mask=torch.tensor(mask, dtype=torch.float32),
        behaviour_logprobs=torch.tensor([_padded(r.logprobs, completion_width, 0.0) for r in rollouts]),
        versions=torch.tensor([_padded(r.versions, completion_width, 0) for r in rollouts], dtype=torch.long),
        rewards=torch.tensor([reward for _, reward in scored], dtype=torch.float32),
        group_size=group_size,
    )


def _common_group_size(groups: Sequence[Group]) -> int:
    sizes = {len(group) for group in groups}
    if not groups or len(sizes) != 1 or 0 in sizes:
        raise ValueError(f"groups: need at least one group, all of the same non-zero size; got sizes {sorted(sizes)}")
    for group in groups:
        for rollout, _ in group:
            if not rollout.prompt or not rollout.tokens or len(rollout.logprobs) != len(rollout.tokens):
                raise ValueError(f"rollout {rollout.id}: needs a prompt, a completion and one log-prob per token")
    return sizes.pop()


def _padded(values: Sequence[Any], width: int, fill: Any) -> list[Any]:
    return [*values, *[fill] * (width - len(values))]


def micro_batches(batch: RolloutBatch, token_budget: int) -> list[slice]:
    """Consecutive runs of rows whose count times their longest row stays within ``token_budget`` (one row at least)."""
    widths = batch.attention_mask.sum(dim=1).tolist()
    parts: list[slice] = []
    start, longest = 0, 0
    for row, width in enumerate(widths):
        if row > start and (row - start + 1) * max(longest, width) > token_budget:
            parts.append(slice(start, row))
            start, longest = row, 0
        longest = max(longest, width)
    parts.append(slice(start, len(widths)))
    return parts


def split_groups(groups: Sequence[Group], parts: int) -> list[list[Group]]:
    """Consecutive runs of whole groups (``scenarios.rules.workload.minibatch_bounds``, shared with the simulator)."""
    return [list(groups[start:stop]) for start, stop in minibatch_bounds(len(groups), parts)]
