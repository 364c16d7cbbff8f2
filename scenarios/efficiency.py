"""What the analytic cost model assumes a real system reaches: its efficiency terms.

    catalogue defaults (DEFAULTS, sources below)
        ◄── an efficiency profile (``kind: efficiency``), fitted to a framework's metrics log
            by ``asyncrl calibrate SCENARIO --from-log LOG`` and named by ``hardware.profile``
                ◄── ``hardware.mfu`` / ``hardware.mbu`` set in the scenario itself (a what-if wins)
        ──► Efficiency ──► simulator.costs.AnalyticCosts

The roofline charges datasheet peaks; no engine or trainer reaches them. These
terms say how far below them a system runs, and they are what transfers from one
run to another of the same model and device (another split, GPU count, tensor
parallelism or schedule), which a table of one run's step times does not:

    decode step     decode_step_s + max(FLOPs / (peak · decode_mfu), bytes / (bandwidth · mbu)) + TP all-reduces
    prefill         FLOPs / (peak · mfu)
    learner step    training pass at mfu + no-grad passes (old log-probs, reference, values) at forward_mfu
                    + train_step_s + sample_overhead_s per trained sample (verl's step time minus its timed
                    phases: reward scoring, advantages, moving the batch between workers; per sample, so a
                    learner step of a quarter of the batch pays a quarter of it)
    colocated       switch_s per step (verl's update_weights: waking the engine, resharding weights into it)

Sources of the defaults (dense bf16 peaks, as in ``scenarios.catalog``):

* ``mbu`` 0.5: what whole decode steps of vLLM reach inside RL frameworks, fitted to NeMo-RL's published
  H100 runs (``benchmarks/published/nemo-rl-h100.yaml``, the v0.5 performance table: three on-policy runs,
  whose tail-bound generation sets their step, and two generation-bound MoE runs; the root-mean-square log
  error of the six predicted steps is 0.30 at 0.8, 0.10 at 0.45-0.5, 0.15 at best with a longer fixed step
  instead). A decode GEMV alone reaches 70-85% (Databricks' "LLM Inference Performance Engineering", 2023);
  a step also reads the KV cache through paged attention, samples and returns log-probabilities, which
  a framework asks of every token. verl's published runs, not fitted, move closer too
  (docs/published.md).
* ``decode_mfu`` 0.5: a decode step's matrix products have a few hundred rows (the batch); cuBLAS reaches
  about half of peak at that size, far from the 70-80% of square GEMMs (NVIDIA's matmul performance guide).
* ``decode_step_s`` 3 ms: the fixed part of one decode step in a serving engine (scheduling, sampling over
  the vocabulary, detokenizing, launching the step's CUDA graph). vLLM's V1 re-architecture post (2025)
  measures the CPU overhead it removed at several ms per step; what is left is 1-4 ms.
* ``mfu`` 0.4 and ``forward_mfu`` 0.4: FSDP and Megatron trainers of 7-70B dense models reach 35-50% MFU
  (Megatron-LM's published scaling tables; verl's docs/perf/dpsk.md lists 0.31-0.40 for Qwen3-30B-A3B
  and 0.19 for DeepSeek-V3 671B).
* ``train_step_s``, ``sample_overhead_s``, ``switch_s`` 0: a framework's own costs, unknown without its log.

A profile fitted from a log records, per term, where its value came from (``sources``): the log key that
determined it, or "default" where the log could not tell.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from asyncrl.scenarios.limits import NonNegativeFloat
from pydantic import BaseModel, ConfigDict, Field


class Efficiency(BaseModel):
    """The analytic model's efficiency terms (module docstring); a profile file with ``kind: efficiency``."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    kind: Literal["efficiency"] = "efficiency"
    mbu: float = Field(0.5, gt=0, le=1, description="decode: share of HBM bandwidth reached")
    decode_mfu: float = Field(0.5, gt=0, le=1, description="decode: share of peak FLOP/s in a decode step's GEMMs")
    decode_step_s: NonNegativeFloat = Field(0.003, description="decode: fixed seconds per decode step of an engine")
    mfu: float = Field(0.4, gt=0, le=1, description="learner's training pass and prefill: model-FLOPs utilization")
    forward_mfu: float = Field(
        0.4, gt=0, le=1, description="learner's no-grad passes (old log-probs, reference, values): utilization"
    )
    train_step_s: NonNegativeFloat = Field(0.0, description="fixed seconds per learner step (dispatch, collation)")
    sample_overhead_s: NonNegativeFloat = Field(
        0.0,
        description="seconds per trained sample outside the timed phases (reward scoring, advantages, data movement)",
    )
    switch_s: NonNegativeFloat = Field(
        0.0, description="colocated: seconds per step to switch the devices between learner and engine"
    )
    fitted_to: dict[str, str] = Field(
        default_factory=dict, description="what the profile was fitted to: device, model, log, steps"
    )
    sources: dict[str, str] = Field(
        default_factory=dict, description="per term: the log key that determined it, or 'default'"
    )


DEFAULTS = Efficiency()
#: The terms a profile or a scenario may set (the rest of the model is the file's provenance).
TERMS = ("mbu", "decode_mfu", "decode_step_s", "mfu", "forward_mfu", "train_step_s", "sample_overhead_s", "switch_s")


def resolve(profile: Efficiency | None, explicit: dict[str, float]) -> Efficiency:
    """The defaults, then the profile's terms, then the scenario's own ``hardware.mfu``/``mbu`` where set."""
    base = profile if profile is not None else DEFAULTS
    return base.model_copy(update=explicit) if explicit else base


def save_efficiency(efficiency: Efficiency, path: Path, header: str = "") -> None:
    """Write a profile file; ``header`` becomes comment lines above it."""
    import yaml
    from asyncrl.scenarios.writing import write_text

    path.parent.mkdir(parents=True, exist_ok=True)
    comments = "".join(f"# {line}\n" for line in header.splitlines())
    write_text(path, comments + yaml.safe_dump(efficiency.model_dump(), sort_keys=False, allow_unicode=True))
