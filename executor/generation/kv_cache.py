"""The running batch's KV cache: one left-padded buffer per layer that rows join and leave between decode steps.

Every row of the batch is left-padded so that all rows end at the same cache column; each step writes one column::

    cache columns ->       start                                 end  (one column per step)
    row 0  (long prompt)     | k k k k k k k k k k k k k k k k k k |  <- pending token decoded at column `end`
    row 1  (joined later)    | . . . . . . . . . k k k k k k k k k |
    row 2  (joined last)     | . . . . . . . . . . . . . . k k k k |
                            buffer of `capacity` columns, grown by doubling; `.` = padding (masked out)

    merge (joiners' prefill cache, right-aligned) ──► open_column ──decode writes column `end`──► advance
    keep_rows (finished rows leave; columns that are padding in every remaining row are trimmed)

``BatchKVCache`` is a transformers ``Cache`` whose layers (``_SlabLayer``) write in place into these buffers, so
the model's decode forward reads and extends it like any cache. ``executor.generation.engine`` drives it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import Cache
from transformers.cache_utils import DynamicLayer

from .compat import PretrainedConfig

__all__ = ["MIN_HEADROOM", "BatchKVCache", "KVShape"]

MIN_HEADROOM = 64  # free cache columns, at least, after the cache is rebuilt


@dataclass(frozen=True)
class KVShape:
    layers: int
    kv_heads: int
    head_dim: int

    @classmethod
    def of(cls, config: PretrainedConfig) -> KVShape:
        text = config.get_text_config(decoder=True)
        layer_types = set(getattr(text, "layer_types", None) or ["full_attention"])
        if layer_types != {"full_attention"}:  # sliding-window or linear-attention layers need their own cache
            raise NotImplementedError(f"only full-attention layers are supported, not {sorted(layer_types)}")
        heads = text.num_attention_heads
        kv_heads = getattr(text, "num_key_value_heads", None) or heads
        head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
        return cls(text.num_hidden_layers, kv_heads, head_dim)


class _SlabLayer(DynamicLayer):
    """One layer's view of a ``BatchKVCache``: writes new keys/values in place, returns the live columns."""

    def __init__(self, cache: BatchKVCache, layer_idx: int) -> None:
        super().__init__()
        self.is_initialized = True
        self._cache = cache
        self._layer_idx = layer_idx

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: object, **kwargs: object
    ) -> tuple[torch.Tensor, torch.Tensor]:
        self.keys, self.values = self._cache.write(self._layer_idx, key_states, value_states)
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self._cache.length


class BatchKVCache(Cache):
    """Keys, values and padding mask of the running batch, in buffers of ``capacity`` columns.

    Columns ``[start, end)`` are live; every row is left-padded so that its last real token sits at ``end - 1``.
    A decode forward writes column ``end`` of every layer; ``advance`` then moves ``end`` on.
    """

    def __init__(self, shape: KVShape, rows: int, capacity: int, dtype: torch.dtype, device: torch.device) -> None:
        self.keys = [self._zeros(shape, rows, capacity, dtype, device) for _ in range(shape.layers)]
        self.values = [self._zeros(shape, rows, capacity, dtype, device) for _ in range(shape.layers)]
        self.mask = torch.zeros(rows, capacity, dtype=torch.bool, device=device)
        self.start = self.end = capacity
        self.shape = shape
        super().__init__(layers=[_SlabLayer(self, index) for index in range(shape.layers)])

    @staticmethod
    def _zeros(shape: KVShape, rows: int, capacity: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        return torch.zeros(rows, shape.kv_heads, capacity, shape.head_dim, dtype=dtype, device=device)

    @property
    def rows(self) -> int:
        return self.mask.shape[0]

    @property
    def capacity(self) -> int:
        return self.mask.shape[1]

    @property
    def length(self) -> int:
        return self.end - self.start

    def write(self, layer_idx: int, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store one column of new keys/values of a layer at ``end``; the live columns including it."""
        self.keys[layer_idx][:, :, self.end : self.end + 1] = keys
        self.values[layer_idx][:, :, self.end : self.end + 1] = values
        stop = self.end + 1
        return self.keys[layer_idx][:, :, self.start : stop], self.values[layer_idx][:, :, self.start : stop]

    def open_column(self) -> torch.Tensor:
        """Make room for one more column and mark it real for every row; the attention mask including it."""
        if self.end == self.capacity:
            self._rebuild(self.rows, self.length)
        self.mask[:, self.end] = True
        return self.mask[:, self.start : self.end + 1]

    def advance(self) -> None:
        self.end += 1

    def keep_rows(self, rows: torch.Tensor) -> None:
        """Drop every row not in ``rows`` and the leading columns that are padding in all remaining rows."""
        self.keys = [layer.index_select(0, rows) for layer in self.keys]
        self.values = [layer.index_select(0, rows) for layer in self.values]
        self.mask = self.mask.index_select(0, rows)
        live = self.mask[:, self.start : self.end].any(dim=0)
        self.start = self.end if not bool(live.any()) else self.start + int(live.int().argmax())

    def merge(self, joiners: Cache | None, joiner_mask: torch.Tensor) -> None:
        """Append the rows of a left-padded prefill cache (``joiner_mask`` is its [rows, columns] padding mask)."""
        old_rows, joiner_columns = self.rows, joiner_mask.shape[1]
        length = max(self.length, joiner_columns)
        self._rebuild(old_rows + joiner_mask.shape[0], length)
        self.mask[old_rows:, self.end - joiner_columns : self.end] = joiner_mask
        if joiners is None or joiner_columns == 0:
            return
        real = joiner_mask.bool()[:, None, :, None]
        for layer_idx, layer in enumerate(joiners.layers):
            self.keys[layer_idx][old_rows:, :, self.end - joiner_columns : self.end] = layer.keys.where(real, 0)
            self.values[layer_idx][old_rows:, :, self.end - joiner_columns : self.end] = layer.values.where(real, 0)

    def _rebuild(self, rows: int, length: int) -> None:
        """Move the live columns into fresh buffers of ``rows`` rows (the old ones first), right-aligned at ``length``."""
        capacity = length + max(length, MIN_HEADROOM)  # doubling: rebuilds for growth are O(1) per step amortised
        keep = self.length
        device = self.mask.device
        dtype = self.keys[0].dtype
        old_keys, old_values, old_mask = self.keys, self.values, self.mask
        self.keys = [self._zeros(self.shape, rows, capacity, dtype, device) for _ in old_keys]
        self.values = [self._zeros(self.shape, rows, capacity, dtype, device) for _ in old_values]
        self.mask = torch.zeros(rows, capacity, dtype=torch.bool, device=device)
        old_rows, live = len(old_mask), slice(self.start, self.end)
        for new, old in zip(self.keys + self.values, old_keys + old_values, strict=True):
            new[:old_rows, :, length - keep : length] = old[:, :, live]
        self.mask[:old_rows, length - keep : length] = old_mask[:, live]
        self.start, self.end = 0, length
