"""LoRA (``learner.lora_rank``) against values worked by hand: what its frozen weights and adapters change.

The run is tests/test_cost_terms.py's: Qwen2.5-0.5B on one H100, colocated sync, 256 samples of 300 tokens.
Qwen2.5-0.5B: 24 layers, hidden 896, 14 query heads and 2 key-value heads of 64, a gated MLP of 4,864, so
rank-32 adapters on its seven linear layers hold 32 · 24 · (2 · (896 + 896) + 2 · (896 + 128) + 3 · (896 +
4,864)) = 32 · 24 · 22,912 = 17,596,416 weights.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from asyncrl.scenarios.costs.memory import adapter_params, learner_memory
from asyncrl.simulator.costs import AnalyticCosts
from asyncrl.simulator.learner_costs import AnalyticLearner, learner_layout
from asyncrl.simulator.lora import LAYER_KERNELS, LORA_LAYER_KERNELS
from asyncrl.simulator.topology import Placement

from tests.test_cost_terms import PARAMS, TOKENS, WEIGHTS, small

ADAPTERS = 32 * 24 * 22_912


def _work(**learner: object):  # type: ignore[no-untyped-def]
    scenario = small(learner=learner)
    layout = learner_layout(scenario, Placement.of(scenario.cluster))
    return AnalyticLearner(scenario, scenario.efficiency(), layout).work(TOKENS)


def test_rank_32_adapters_of_a_small_qwen() -> None:
    # the MLP's width is estimated from the block's weights (4,865.1 for 4,864): within 0.02%
    assert adapter_params(small().model, 32) == pytest.approx(ADAPTERS, rel=2e-4)
    assert adapter_params(small().model, 0) == 0


def test_the_frozen_weights_get_no_gradient() -> None:
    # With recompute, a training pass is 4 forwards' products (forward, recompute, the backward's two); with
    # LoRA the weight gradient is not computed: 3 of the weights' and 4 of the adapters'. No attention here
    # (TOKENS counts no squared lengths), so the mfu work is in that ratio: (3 · 494M + 4 · 17.6M) / (4 · 494M).
    full, lora = _work(), _work(lora_rank=32)
    adapters = adapter_params(small().model, 32)
    ratio = (3 * PARAMS + 4 * adapters) / (4 * PARAMS)
    assert lora.update.terms["mfu"] == pytest.approx(full.update.terms["mfu"] * ratio)
    assert lora.forward.terms["forward_mfu"] == pytest.approx(full.forward.terms["forward_mfu"])


def test_lora_launches_the_adapters_kernels() -> None:
    # A training pass with recompute launches 2 · 34 + 70 = 138 kernels a layer, with LoRA 2 · 62 + 98 = 222;
    # the one no-grad pass here (the old log-probs) runs the adapters too: 62 / 34.
    full, lora = _work(), _work(lora_rank=32)
    assert LAYER_KERNELS == (34, 70) and LORA_LAYER_KERNELS == (62, 98)
    assert lora.update.terms["learner_layer_s"] == pytest.approx(full.update.terms["learner_layer_s"] * 222 / 138)
    assert lora.forward.terms["learner_layer_s"] == pytest.approx(full.forward.terms["learner_layer_s"] * 62 / 34)


def test_adam_updates_the_adapters_alone() -> None:
    # Adam streams 28 bytes per weight it updates at 80% of 3.35 TB/s: 494M weights without LoRA, 17.6M with.
    full, lora = _work(), _work(lora_rank=32)
    adapters = adapter_params(small().model, 32)
    adam = 28 / (3350e9 * 0.8)
    assert full.update.fixed_s - lora.update.fixed_s == pytest.approx((PARAMS - adapters) * adam)


def test_a_colocated_engine_receives_the_adapters_alone() -> None:
    # The engine keeps the model it loaded; each sync loads the adapters, 17.6M weights in bf16 at 3.5 GB/s,
    # plus the sync's fixed 0.05 s, where the whole model (0.988 GB) took 0.2823 s.
    adapters = adapter_params(small().model, 32)
    assert AnalyticCosts(small(learner={"lora_rank": 32})).weight_sync(0) == pytest.approx(2 * adapters / 3.5e9 + 0.05)
    assert AnalyticCosts(small()).weight_sync(0) == pytest.approx(WEIGHTS / 3.5e9 + 0.05)


def test_the_memory_check_counts_the_adapters_states() -> None:
    # fp32 gradients (4 bytes) and the fp32 master copy and Adam's two moments (12 bytes) of the adapters alone
    full, lora = learner_memory(small()), learner_memory(small(learner={"lora_rank": 32}))
    adapters = int(adapter_params(small().model, 32))
    assert lora.parts["gradients"] == pytest.approx(adapters * 4) and full.parts["gradients"] == PARAMS * 4
    assert lora.parts["optimizer"] == pytest.approx(adapters * 12)
    assert lora.parts["weights"] == full.parts["weights"]


def test_the_kernel_counts_are_the_ones_the_script_counts() -> None:
    """``LAYER_KERNELS`` and ``LORA_LAYER_KERNELS`` are what benchmarks/lora_launches.py counts here."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "lora_launches.py"
    spec = importlib.util.spec_from_file_location("lora_launches", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.layer_kernels(False) == LAYER_KERNELS
    assert module.layer_kernels(True) == LORA_LAYER_KERNELS


def test_from_verl_plans_verls_lora_rank() -> None:
    from asyncrl.frameworks.verl.importer import plan_from_verl, read_config

    base = Path(__file__).resolve().parent / "data" / "verl_ppo_trainer.yaml"
    lengths = {"completion_tokens": {"kind": "fixed", "value": 200}}
    overrides = ["actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct", "actor_rollout_ref.model.lora_rank=32"]
    plan = plan_from_verl(read_config(base, overrides), name="lora", device="h100", **lengths)
    assert plan.scenario["learner"]["lora_rank"] == 32
    subset = plan_from_verl(
        read_config(base, [*overrides, "actor_rollout_ref.model.target_modules=[q_proj,v_proj]"]),
        name="lora",
        device="h100",
        **lengths,
    )
    assert any("adapters planned on every linear layer" in note for note in subset.notes)
    off = plan_from_verl(read_config(base, overrides[:1]), name="full", device="h100", **lengths)
    assert "lora_rank" not in off.scenario["learner"]


def test_an_engine_with_adapters_launches_vllms_lora_kernels() -> None:
    # vLLM's decode layer launches 10 kernels, its LoRA layers 12 more (3 for each of qkv, o, gate_up, down):
    # at batch 1, eager (launch-bound), 24 layers × 0.75 ms × 22 / 10 = 39.6 ms of launches against 18 ms; with
    # CUDA graphs (device-bound), the kernels' gaps, 24 × 0.015 ms × 22 / 10 against 24 × 0.015 ms.
    for eager, launch in ((True, 7.5e-4), (False, 1.5e-5)):
        full = AnalyticCosts(small(cluster={"enforce_eager": eager}))
        lora = AnalyticCosts(small(cluster={"enforce_eager": eager}, learner={"lora_rank": 32}))
        assert lora.decode_step(1, 0) - full.decode_step(1, 0) == pytest.approx(24 * launch * 12 / 10)
