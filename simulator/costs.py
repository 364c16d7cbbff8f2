"""How long each piece of work takes: analytic (roofline) or measured (profile).

    decode step (one engine, b rollouts, C context tokens in the batch)
        analytic: max(FLOPs / peak, bytes read / (bandwidth · mbu))
                  FLOPs = 2 · active · b + 4 · layers · heads · head_dim · C
                  bytes = min(params, active · b) · dtype + C · kv_bytes_per_token
        measured: table(b) + decode_context_token_s · C
    prefill (one engine, one group of G samples with n prompt tokens)
        analytic: 2 · active · n / (peak · mfu)  (one prefill per group: the samples share the prefix)
        measured: k · (join_s + n · prefill_token_s), k = 1 or G (``prefill_per``: group | sample)
    retirement (one engine, a decode step in which rollouts finish)
        analytic: 0                                     measured: retire_s
    learner step (n tokens, prompt + completion)
        analytic: (6 + 2 · extra_forward_passes) · active · n / (training devices · peak · mfu)
        measured: (n · train_token_s + Σ L² · train_token_square_s) / training devices
                  + train_step_overhead_s, with n the real tokens and L each row's length, or
                  with ``train_padding: longest`` both counted once every minibatch is padded
                  to its longest row (what a learner without packing computes)
    weight sync (one engine)
        analytic: weights / devices_per_engine / interconnect + sync_latency_s
        measured: weight_sync_s

An engine spans ``devices_per_engine`` devices: their peak and bandwidth add.
For mixture-of-experts models a small batch reads only the experts it uses,
hence ``min(params, active · b)`` weight bytes per decode step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from asyncrl.scenarios.profile import CostProfile
from asyncrl.scenarios.scenario import Scenario
from asyncrl.scenarios.workload import TrainTokens


@dataclass(frozen=True)
class DecodeTable:
    """decode_step(b, C) = max(first[b] + first_per_context · C, second[b] + second_per_context · C).

    Two affine terms in the context, one table per batch size: what the engine's
    inner loop evaluates once per batch change.
    """

    first: list[float]
    first_per_context: float
    second: list[float]
    second_per_context: float

    def __call__(self, batch: int, context_tokens: float) -> float:
        return max(
            self.first[batch] + self.first_per_context * context_tokens,
            self.second[batch] + self.second_per_context * context_tokens,
        )


class CostModel(Protocol):
    def decode_step(self, batch: int, context_tokens: float) -> float: ...
    def decode_step_table(self, max_batch: int) -> DecodeTable: ...
    def prefill(self, prompt_tokens: int, samples: int) -> float: ...
    def retire(self) -> float: ...
    def train_step(self, tokens: TrainTokens) -> float: ...
    def weight_sync(self) -> float: ...


class AnalyticCosts:
    """Roofline costs from datasheet figures (see module docstring)."""

    def __init__(self, scenario: Scenario) -> None:
        model, device = scenario.model, scenario.hardware.spec
        tp = scenario.cluster.devices_per_engine
        self._engine_flops = device.peak_flops * tp
        self._engine_bytes_per_s = device.memory_bytes_per_s * tp * scenario.hardware.mbu
        self._mfu = scenario.hardware.mfu
        self._params, self._active, self._dtype = model.params, model.active_params, model.dtype_bytes
        self._attention_flops_per_context = 4 * model.layers * model.heads * model.head_dim
        self._kv_bytes_per_token = model.kv_bytes_per_token
        self._train_flops_per_token = (6 + 2 * scenario.algorithm.extra_forward_passes) * model.active_params
        self._train_flops = scenario.training_devices * device.peak_flops * scenario.hardware.mfu
        shard = model.weight_bytes / tp
        self._sync_s = shard / device.interconnect_bytes_per_s + scenario.hardware.sync_latency_s
        self._tables: dict[int, DecodeTable] = {}

    def decode_step(self, batch: int, context_tokens: float) -> float:
        flops = 2.0 * self._active * batch + self._attention_flops_per_context * context_tokens
        weights = min(self._params, self._active * batch) * self._dtype
        read = weights + self._kv_bytes_per_token * context_tokens
        return max(flops / self._engine_flops, read / self._engine_bytes_per_s)

    def decode_step_table(self, max_batch: int) -> DecodeTable:
        """The same roofline, with the batch-dependent terms precomputed for speed (one table, shared by engines)."""
        if max_batch in self._tables:
            return self._tables[max_batch]
        compute = [2.0 * self._active * b / self._engine_flops for b in range(max_batch + 1)]
        memory = [
            min(self._params, self._active * b) * self._dtype / self._engine_bytes_per_s for b in range(max_batch + 1)
        ]
        table = DecodeTable(
            compute,
            self._attention_flops_per_context / self._engine_flops,
            memory,
            self._kv_bytes_per_token / self._engine_bytes_per_s,
        )
        self._tables[max_batch] = table
        return table

    def prefill(self, prompt_tokens: int, samples: int) -> float:
        return 2.0 * self._active * prompt_tokens / (self._engine_flops * self._mfu)

    def retire(self) -> float:
        return 0.0

    def train_step(self, tokens: TrainTokens) -> float:
        return self._train_flops_per_token * tokens.actual / self._train_flops

    def weight_sync(self) -> float:
        return self._sync_s


class MeasuredCosts:
    """Costs read from a calibrated profile (``hardware.profile``)."""

    def __init__(self, scenario: Scenario, profile: CostProfile) -> None:
        self._profile = profile
        self._per_context = profile.decode_context_token_s
        self._training_devices = scenario.training_devices
        self._tables: dict[int, DecodeTable] = {}

    def decode_step(self, batch: int, context_tokens: float) -> float:
        return self._profile.decode_step(batch) + self._per_context * context_tokens

    def decode_step_table(self, max_batch: int) -> DecodeTable:
        if max_batch not in self._tables:
            measured = [self._profile.decode_step(b) for b in range(max_batch + 1)]
            self._tables[max_batch] = DecodeTable(measured, self._per_context, [0.0] * (max_batch + 1), 0.0)
        return self._tables[max_batch]

    def prefill(self, prompt_tokens: int, samples: int) -> float:
        profile = self._profile
        prefills = samples if profile.prefill_per == "sample" else 1
        return prefills * (profile.join_s + prompt_tokens * profile.prefill_token_s)

    def retire(self) -> float:
        return self._profile.retire_s

    def train_step(self, tokens: TrainTokens) -> float:
        profile = self._profile
        padded = profile.train_padding == "longest"
        linear = (tokens.padded if padded else tokens.actual) * profile.train_token_s
        square = (tokens.padded_square if padded else tokens.actual_square) * profile.train_token_square_s
        return (linear + square) / self._training_devices + profile.train_step_overhead_s

    def weight_sync(self) -> float:
        return self._profile.weight_sync_s


def cost_model(scenario: Scenario) -> CostModel:
    """The measured profile when the scenario names one, else the roofline."""
    profile = scenario.hardware.cost_profile()
    return MeasuredCosts(scenario, profile) if profile is not None else AnalyticCosts(scenario)
