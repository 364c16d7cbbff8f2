"""Generation engines: continuous batching of rollouts over one batched KV cache.

A ``GenerationEngine`` takes requests (``add``), and each ``step`` admits waiting requests into the running batch and
decodes one token for every sequence in it; finished rollouts leave the batch at once, so a short rollout never waits
for a long one and its place goes to the next waiting request. ``ContinuousBatchingEngine`` implements it for a
transformers causal LM; a vLLM engine can implement the same protocol later.

Every row of the batch is left-padded so that all rows end at the same cache column, one ``BatchKVCache``
(``executor.generation.kv_cache``, where its layout is drawn) for the whole batch; each step writes one column::

    step():  waiting ──prefill prompt[:-1]──> joiners' cache ──right-align merge──> batch cache
             batch  ──decode pending tokens (one column)──> sample ──> finished rows removed, empty columns trimmed

A sequence's last prompt token (and later its last sampled token) is "pending": it is fed in the next decode step,
so each step gives each in-flight sequence exactly one new token. Every token records the log-probability it had
under the sampling distribution (softmax of logits / temperature) and the weights ``version`` in use when it was
sampled: after ``load_weights`` between steps, unfinished rollouts continue with the new weights and their later
tokens carry the new version (in-flight weight updates; cached keys/values of earlier tokens are kept, or with
``recompute_kv`` prefilled again under the new weights at the next step, counted in its ``prefill_tokens``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import torch
from transformers import Cache, PreTrainedModel

from .compat import cache_keyword, output_cache
from .kv_cache import BatchKVCache, KVShape

FINISH_EOS = "eos"
FINISH_LENGTH = "length"


@dataclass
class Request:
    """One rollout to generate."""

    id: int
    prompt: list[int]  # token ids
    max_new_tokens: int
    forced_length: int | None = None  # timing mode: generate exactly this many tokens, ignoring EOS


@dataclass
class Rollout:
    """A finished rollout: completion tokens with the behaviour policy's log-probs and weight versions."""

    id: int
    prompt: list[int]
    tokens: list[int]  # completion token ids
    logprobs: list[float]  # log-prob of each token under the sampling distribution (after temperature)
    versions: list[int]  # weights version that produced each token
    finish_reason: str  # FINISH_EOS | FINISH_LENGTH


@runtime_checkable
class GenerationEngine(Protocol):
    """What the executor needs from an actor's generation engine."""

    def load_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> None: ...

    def add(self, request: Request) -> None: ...

    def step(self) -> list[Rollout]:
        """Admit waiting requests, decode one token for each sequence in flight, return the finished rollouts."""
        ...

    @property
    def in_flight(self) -> int:
        """Sequences in the running batch."""
        ...

    @property
    def waiting(self) -> int:
        """Requests added but not admitted yet."""
        ...


def generate_all(engine: GenerationEngine, requests: Iterable[Request]) -> list[Rollout]:
    """Add every request, step until all have finished, and return the rollouts in order of completion."""
    for request in requests:
        engine.add(request)
    rollouts: list[Rollout] = []
    while engine.in_flight or engine.waiting:
        rollouts.extend(engine.step())
    return rollouts


@dataclass(frozen=True)
class StepStats:
    """What one ``step`` did: the work a cost model charges for, recorded in a run (``engine_steps``)."""

    batch: int  # rows decoded
    context: int  # cache columns read by the decode, over all rows (left padding included)
    joins: int  # requests admitted (prefilled and merged into the batch cache) before decoding
    prefill_tokens: int  # prompt tokens prefilled for them, and with recompute_kv the running rows' tokens again
    retired: int  # rows that finished and left the batch (the cache is compacted)


@dataclass
class _Sequence:
    """A rollout in progress (one row of the batch)."""

    request: Request
    token_limit: int  # completion length at which it stops regardless of EOS
    stops_at_eos: bool
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)

    def to_rollout(self, finish_reason: str) -> Rollout:
        request = self.request
        return Rollout(request.id, request.prompt, self.tokens, self.logprobs, self.versions, finish_reason)


class ContinuousBatchingEngine:
    """Continuous batching for a transformers causal LM with a KV cache kept across steps."""

    def __init__(
        self,
        model: PreTrainedModel,
        *,
        max_batch: int,
        eos_token_id: int | None,
        pad_token_id: int,
        temperature: float = 1.0,
        greedy: bool = False,
        seed: int = 0,
        device: str | torch.device = "cpu",
        recompute_kv: bool = False,
    ) -> None:
        """``recompute_kv``: after ``load_weights``, recompute the unfinished rollouts' cached keys and values with
        the new weights (``schedule.kv_on_update: recompute``) instead of keeping them."""
        if max_batch < 1 or temperature <= 0:
            raise ValueError("max_batch must be >= 1 and temperature > 0")
        self.device = torch.device(device)
        self.model = model.to(self.device).eval()
        self.max_batch = max_batch
        self.eos_token_id = eos_token_id
        self.pad_token_id = pad_token_id
        self.temperature = temperature
        self.greedy = greedy
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        self.version = 0
        self._kv_shape = KVShape.of(model.config)
        self._cache_keyword = cache_keyword(model)  # past_key_values or cache, as this transformers names it
        self._dtype = next(model.parameters()).dtype
        self._waiting: deque[Request] = deque()
        self._running: list[_Sequence] = []
        self._cache = self._empty_cache()
        self._pending = torch.zeros(0, dtype=torch.long, device=self.device)  # next input token of each row
        self._positions = torch.zeros(0, dtype=torch.long, device=self.device)  # its position in its sequence
        self.last_step = StepStats(0, 0, 0, 0, 0)
        self.recompute_kv = recompute_kv
        self._stale_cache = False  # new weights loaded and the batch cache still holds the old ones' keys/values

    @property
    def in_flight(self) -> int:
        return len(self._running)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def load_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> None:
        """Copy new weights into the model; tokens sampled from now on carry ``version``."""
        with torch.no_grad():
            self.model.load_state_dict(state_dict, strict=True)
        self.version = version
        self._stale_cache = self.recompute_kv and bool(self._running)  # recomputed by the next step

    def add(self, request: Request) -> None:
        if not request.prompt or request.max_new_tokens < 1:
            raise ValueError(f"request {request.id}: needs a non-empty prompt and max_new_tokens >= 1")
        forced = request.forced_length
        if forced is not None and not 1 <= forced <= request.max_new_tokens:
            raise ValueError(f"request {request.id}: forced_length must lie in [1, max_new_tokens]")
        self._waiting.append(request)

    def step(self) -> list[Rollout]:
        with torch.inference_mode():
            recomputed = self._recompute_cache() if self._stale_cache else 0
            joins, prefill_tokens = self._admit()
            prefill_tokens += recomputed
            if not self._running:
                self.last_step = StepStats(0, 0, joins, prefill_tokens, 0)
                return []
            batch = len(self._running)
            context = batch * (self._cache.length + 1)  # the decode writes one column, then attends to all
            tokens, logprobs = self._decode()
            finished = self._record(tokens.tolist(), logprobs.tolist())
            self.last_step = StepStats(batch, context, joins, prefill_tokens, len(finished))
            return finished

    def _recompute_cache(self) -> int:
        """Rebuild the batch cache under the weights now loaded: a prefill of every running row's tokens but its
        pending one (its prompt and the tokens sampled so far), as a fresh admission would; tokens prefilled."""
        prefixes = [(sequence.request.prompt + sequence.tokens)[:-1] for sequence in self._running]
        prefill_cache, prefill_mask = self._prefill(prefixes)
        self._cache = self._empty_cache()
        self._cache.merge(prefill_cache, prefill_mask)
        self._stale_cache = False
        return sum(len(prefix) for prefix in prefixes)

    def _empty_cache(self) -> BatchKVCache:
        return BatchKVCache(self._kv_shape, rows=0, capacity=0, dtype=self._dtype, device=self.device)

    def _admit(self) -> tuple[int, int]:
        """Prefill waiting requests into free rows; how many joined and their prompt tokens."""
        free = self.max_batch - len(self._running)
        joiners = [self._waiting.popleft() for _ in range(min(free, len(self._waiting)))]
        if not joiners:
            return 0, 0
        prefixes = [request.prompt[:-1] for request in joiners]
        prefill_cache, prefill_mask = self._prefill(prefixes)
        self._cache.merge(prefill_cache, prefill_mask)
        last_tokens = [request.prompt[-1] for request in joiners]
        self._pending = torch.cat([self._pending, self._tensor(last_tokens)])
        self._positions = torch.cat([self._positions, self._tensor([len(prefix) for prefix in prefixes])])
        self._running.extend(self._new_sequence(request) for request in joiners)
        return len(joiners), sum(len(request.prompt) for request in joiners)

    def _new_sequence(self, request: Request) -> _Sequence:
        if request.forced_length is not None:
            return _Sequence(request, token_limit=request.forced_length, stops_at_eos=False)
        return _Sequence(request, token_limit=request.max_new_tokens, stops_at_eos=self.eos_token_id is not None)

    def _prefill(self, prefixes: list[list[int]]) -> tuple[Cache | None, torch.Tensor]:
        """Run the prompts but their last token, left-padded; their cache and padding mask."""
        width = max(len(prefix) for prefix in prefixes)
        mask = self._tensor([[0] * (width - len(prefix)) + [1] * len(prefix) for prefix in prefixes])
        if width == 0:
            return None, mask
        ids = self._tensor([[self.pad_token_id] * (width - len(prefix)) + prefix for prefix in prefixes])
        positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
        output = self.model(
            input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1
        )
        return output_cache(output, self._cache_keyword), mask

    def _decode(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Feed every row's pending token; the sampled next tokens and their log-probs."""
        padding_mask = self._cache.open_column()
        output = self.model(
            input_ids=self._pending[:, None],
            attention_mask=self._decode_mask(padding_mask),
            position_ids=self._positions[:, None],
            use_cache=True,
            **{self._cache_keyword: self._cache},
            logits_to_keep=1,
        )
        self._cache.advance()
        tokens, logprobs = self._sample(output.logits[:, -1, :])
        self._pending = tokens
        self._positions = self._positions + 1
        return tokens, logprobs

    def _decode_mask(self, padding_mask: torch.Tensor) -> torch.Tensor:
        """With SDPA, the [rows, 1, 1, columns] view of the padding mask is the decode mask: none to build per step."""
        if self.model.config._attn_implementation == "sdpa":
            return padding_mask[:, None, None, :]
        return padding_mask

    def _sample(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        log_probs = torch.log_softmax(logits.float() / self.temperature, dim=-1)
        tokens = log_probs.argmax(dim=-1) if self.greedy else self._inverse_cdf_sample(log_probs)
        return tokens, log_probs.gather(1, tokens[:, None]).squeeze(1)

    def _inverse_cdf_sample(self, log_probs: torch.Tensor) -> torch.Tensor:
        """One token per row drawn from ``exp(log_probs)``: ~10x faster than torch.multinomial on CPU."""
        cumulative = log_probs.exp().cumsum(dim=-1)
        uniform = torch.rand(len(log_probs), 1, generator=self.generator, device=self.device) * cumulative[:, -1:]
        tokens = torch.searchsorted(cumulative, uniform, right=True).squeeze(1)
        return tokens.clamp_(max=log_probs.shape[-1] - 1)

    def _record(self, tokens: list[int], logprobs: list[float]) -> list[Rollout]:
        """Append each row's new token; remove the rows that finished and return their rollouts."""
        finished: list[Rollout] = []
        keep: list[int] = []
        for row, (sequence, token, logprob) in enumerate(zip(self._running, tokens, logprobs, strict=True)):
            sequence.tokens.append(token)
            sequence.logprobs.append(logprob)
            sequence.versions.append(self.version)
            if sequence.stops_at_eos and token == self.eos_token_id:
                finished.append(sequence.to_rollout(FINISH_EOS))
            elif len(sequence.tokens) == sequence.token_limit:
                finished.append(sequence.to_rollout(FINISH_LENGTH))
            else:
                keep.append(row)
        if finished:
            self._keep_rows(keep)
        return finished

    def _keep_rows(self, rows: list[int]) -> None:
        self._running = [self._running[row] for row in rows]
        index = self._tensor(rows)
        self._cache.keep_rows(index)
        self._pending = self._pending.index_select(0, index)
        self._positions = self._positions.index_select(0, index)
        if not rows:
            self._cache = self._empty_cache()

    def _tensor(self, values: list[int] | list[list[int]]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.long, device=self.device)
