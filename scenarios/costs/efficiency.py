"""What the analytic cost model assumes a real system reaches: its terms, their defaults and their sources.

    catalogue defaults (DEFAULTS, sources below)
        ◄── an efficiency profile (``kind: efficiency``), fitted to a framework's metrics logs
            by ``asyncrl calibrate SCENARIO --from-log LOG`` and named by ``hardware.profile``
                ◄── ``hardware.mfu`` / ``hardware.mbu`` set in the scenario itself (a what-if wins)
        ──► Efficiency ──► simulator.costs.AnalyticCosts

The roofline charges datasheet peaks; no engine or trainer reaches them, and every piece of work
pays fixed costs that do not shrink with it. Each term is physical (a share of a peak, seconds per
launch, per step, per sequence, per phase) so that what a log of one run fixes also holds for another
run of the same machine: another model size, split, GPU count, tensor parallelism or schedule.

    decode step     max(device, layers · decode_layer_s (enforce_eager: the host's launches))
                    + decode_step_s + decode_seq_s · running sequences, the device's time being
                    max(FLOPs / (peak · decode_mfu), bytes / (bandwidth · mbu)) + layers · graph_layer_s
                    + TP all-reduces (``simulator.costs``)
    prefill         FLOPs / (peak · mfu)
    learner pass    per micro-batch: FLOPs / (peak · mfu or forward_mfu) + weight and logit reads
                    + k · layers · learner_layer_s (k = 1 forward, 3 training, 4 with recompute)
                    or, where longer, FSDP's collectives of the micro-batch at link_efficiency of the link
                    + phase_s per phase (one dispatch of the batch to the workers and back)
                    + offloads between phases over the host link at host_efficiency
    the rest        sample_overhead_s per trained sample (reward scoring, advantages) + train_step_s
    colocated       to generation: the engine's weights back from the host (free_cache_engine), the learner's
                    weights resharded into it at reshard_bytes_per_s, switch_s;
                    to training: the engine's weights to the host, rollout_sample_s per sample (the trainer
                    collating the batch: padding, masks, moving it to the driver)

Sources of the defaults (dense bf16 peaks, as in ``scenarios.costs.catalog``; docs/calibration.md has them too):

* ``mbu`` 0.5, ``decode_mfu`` 0.5, ``decode_step_s`` 1.5 ms, ``decode_seq_s`` 10 µs: vLLM inside RL frameworks
  on H100 and H20, where the published sync runs' fit (``python benchmarks/catalogue.py``) puts the engine's
  fixed step at 1.1 ms (95%: 0.30-3.8 ms) and cannot separate ``mbu`` from ``decode_mfu``; a
  decode GEMV alone reaches 70-85% of the bandwidth (Databricks, "LLM Inference Performance Engineering", 2023);
  a step also reads the KV cache, samples and returns log-probabilities. The scheduler's and sampler's work
  per running sequence is what ``decode_seq_s`` counts.
* ``decode_layer_s`` 0.75 ms: the host time of one layer's kernels in an eager vLLM step, which sets the step
  wherever the device has less to do (a small model; the few sequences left at the end of a batch). vLLM's eager
  Qwen2.5-7B (28 layers: Qwen2.5-Omni's thinker) decodes one sequence in 22-23 ms a token on an A800 where its
  CUDA graph takes 13 ms (vllm-project/vllm-omni issue 7960): (22.5 - 1.5 ms of ``decode_step_s``) / 28 layers.
  Public verl logs of eager runs, each fitted alone, give 0.3-1.7 ms (docs/calibration.md); NeMo-RL's 10-15%
  from CUDA graphs for Llama-8B at RL batch sizes (NVIDIA-NeMo/RL pull 116) is what launches hidden behind a
  busy device leave. Plain PyTorch launches fewer kernels: Llama-3.1-8B's eager step on an H100 takes 8.4 ms
  against 5.1 ms as a graph (cloudai.pt, "CUDA Graphs + torch.compile"), 0.26 ms a layer.
  ``graph_layer_s`` 0.015 ms: what a replayed graph still spends per layer (its kernels' gaps, eager's too).
* ``mfu`` 0.5, ``forward_mfu`` 0.5: the matrix products of FSDP and Megatron trainers of 7-70B dense models at
  micro-batches of thousands of tokens (Megatron-LM's scaling tables reach 0.4-0.55; verl's docs/perf/dpsk.md
  lists 0.31-0.40 for Qwen3-30B-A3B); the published sync runs' fit gives 0.65 (0.56-0.76) and 0.46
  (0.40-0.54). A small model's passes are launch-bound instead: ``learner_layer_s`` 0.3 ms per layer and
  forward pass of a micro-batch (eager PyTorch under FSDP: some 15-20 kernels and FSDP's hooks per layer).
* ``link_efficiency`` 0.7: NCCL's all-gathers and reduce-scatters reach 70-80% of NVLink's bandwidth at the sizes
  of a layer's weights (nccl-tests' bus bandwidth); a node whose GPUs talk over PCIe reaches a tenth of it.
* ``host_efficiency`` 0.5: pageable copies between device and host reach about half of PCIe's bandwidth.
* The framework's own costs (``phase_s``, ``sample_overhead_s``, ``rollout_sample_s``, ``switch_s``,
  ``reshard_bytes_per_s``): none in the catalogue, each framework's in ``FRAMEWORKS`` below. verl's come from the
  public log ``diqiuzhuanzhuan/verldata run_logs/qwen2-7b_math.log`` (Qwen2-7B, TP 2, 8 A100s): its
  ``timing_s/reshard``, 4.39 s for 15.2 GB (the full state dict gathered, each tensor loaded into the engine);
  its generation phase beyond generating and resharding, 8-11 s for 5,120 samples (0.9-1.6 ms a sample, part
  of it the engine's wake and sleep the model charges itself); its reward, advantage and untimed seconds,
  about 2 s for 5,120 samples. ``train_step_s`` 0: a fixed cost per step beside ``phase_s`` (not fitted).

A profile fitted from logs records, per term, where its value came from (``sources``), its 95% interval
(``intervals``) and the covariance of the fitted terms (``covariance``, of the logs of the fit's coefficients:
the inverse of a share or a rate, seconds as they are), which ``simulate``, ``speedup``, ``size`` and ``plan``
carry into the intervals of their answers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ..files.limits import NonNegativeFloat


class Efficiency(BaseModel):
    """The analytic model's terms (module docstring); a profile file with ``kind: efficiency``."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    kind: Literal["efficiency"] = "efficiency"
    mbu: float = Field(0.5, gt=0, le=1, description="decode: share of HBM bandwidth reached")
    decode_mfu: float = Field(0.5, gt=0, le=1, description="decode: share of peak FLOP/s in a decode step's GEMMs")
    decode_step_s: NonNegativeFloat = Field(0.0015, description="decode: fixed seconds per decode step of an engine")
    decode_seq_s: NonNegativeFloat = Field(
        1e-5, description="decode: seconds per running sequence per decode step (scheduling, sampling)"
    )
    decode_layer_s: NonNegativeFloat = Field(
        7.5e-4, description="decode with enforce_eager: the host's launches of one layer's kernels per step, seconds"
    )
    graph_layer_s: NonNegativeFloat = Field(
        1.5e-5, description="decode with CUDA graphs: what a replayed graph spends per layer per step, seconds"
    )
    mfu: float = Field(0.5, gt=0, le=1, description="learner's training pass and prefill: model-FLOPs utilization")
    forward_mfu: float = Field(
        0.5, gt=0, le=1, description="learner's no-grad passes (old log-probs, reference, values): utilization"
    )
    learner_layer_s: NonNegativeFloat = Field(
        3e-4, description="learner: seconds per layer per forward pass of a micro-batch (kernel launches, hooks)"
    )
    link_efficiency: float = Field(
        0.7, gt=0, le=1, description="learner: share of the device links FSDP's collectives reach"
    )
    phase_s: NonNegativeFloat = Field(0.0, description="learner: fixed seconds per phase (dispatch and collection)")
    host_efficiency: float = Field(
        0.5, gt=0, le=1, description="share of the host link that offloads between phases reach"
    )
    train_step_s: NonNegativeFloat = Field(0.0, description="fixed seconds per learner step (dispatch, collation)")
    sample_overhead_s: NonNegativeFloat = Field(
        0.0,
        description="seconds per trained sample outside the timed phases (reward scoring, advantages, data movement)",
    )
    reshard_bytes_per_s: float = Field(
        5e10, gt=0, description="colocated: bytes per second at which the learner's weights reach the engine"
    )
    rollout_sample_s: NonNegativeFloat = Field(
        0.0, description="colocated: seconds per generated sample to collate a finished batch for the trainer"
    )
    switch_s: NonNegativeFloat = Field(
        0.0, description="colocated: fixed seconds per step to switch the devices between learner and engine"
    )
    fitted_to: dict[str, str] = Field(
        default_factory=dict, description="what the profile was fitted to: device, model, logs, steps"
    )
    sources: dict[str, str] = Field(
        default_factory=dict, description="per term: the log keys that determined it, or 'default'"
    )
    intervals: dict[str, tuple[float, float]] = Field(
        default_factory=dict, description="per fitted term: its 95% interval"
    )
    covariance: dict[str, dict[str, float]] = Field(
        default_factory=dict,
        description="covariance of the logs of the fitted terms' coefficients (COEFFICIENT_FORMS), for the "
        "answers' intervals",
    )
    model_error: float = Field(
        0.0, ge=0, description="relative error of the model beyond its terms' (the fit's residual scale), 1 sd"
    )


DEFAULTS = Efficiency()
#: The terms a profile or a scenario may set (the rest of the model is the file's provenance).
TERMS = (
    "mbu",
    "decode_mfu",
    "decode_step_s",
    "decode_seq_s",
    "decode_layer_s",
    "graph_layer_s",
    "mfu",
    "forward_mfu",
    "learner_layer_s",
    "link_efficiency",
    "phase_s",
    "host_efficiency",
    "train_step_s",
    "sample_overhead_s",
    "reshard_bytes_per_s",
    "rollout_sample_s",
    "switch_s",
)
#: The model's own error on a phase's mean, one sd, relative (what transfer between runs shows it to be:
#: benchmarks/transfer.py); the profile records it, and the answers' intervals carry it.
MODEL_ERROR = 0.10
#: Each term's uncertainty: how many e-folds (one sd) its catalogue value may be off. Shares of a peak are
#: known within tens of percent (a link's within a factor of two: GPUs joined by PCIe reach a tenth of
#: NVLink's); launch, per-sequence and fixed costs within a factor of a few. It is the fit's prior
#: (asyncrl.calibration.fit_log) and the catalogue's uncertainty in an answer (asyncrl.planning.uncertainty). train_step_s has none:
#: it is not fitted (phase_s is the same fixed cost, per phase).
PRIOR_LOG_SD: dict[str, float] = {
    "mbu": 0.3,
    "decode_mfu": 0.3,
    "decode_step_s": 1.0,
    "decode_seq_s": 1.2,
    "decode_layer_s": 1.0,
    "graph_layer_s": 1.2,
    "mfu": 0.3,
    "forward_mfu": 0.3,
    "learner_layer_s": 1.5,
    "link_efficiency": 0.7,
    "phase_s": 1.5,
    "host_efficiency": 0.4,
    "sample_overhead_s": 1.2,
    "reshard_bytes_per_s": 1.0,
    "rollout_sample_s": 1.2,
    "switch_s": 1.5,
}
#: How each term enters the model linearly: ``inverse`` (a share or a rate: time is proportional to 1 / it) or
#: ``value`` (seconds: time is proportional to it). The fit works in these coefficients.
#: Shares of a peak (at most 1) are inverse, and so is the one rate, ``reshard_bytes_per_s``.
SHARES = ("mbu", "decode_mfu", "mfu", "forward_mfu", "link_efficiency", "host_efficiency")
COEFFICIENT_FORMS: dict[str, Literal["inverse", "value"]] = {
    term: "inverse" if term in (*SHARES, "reshard_bytes_per_s") else "value" for term in TERMS
}


def coefficient_floor(term: str) -> float:
    """The least coefficient a term can have: 1 for a share (its coefficient is 1 / share), else 0."""
    return 1.0 if term in SHARES else 0.0


def coefficient(efficiency: Efficiency, term: str) -> float:
    """The term as the model multiplies it: 1 / a share or rate, seconds as they are."""
    value = float(getattr(efficiency, term))
    return 1.0 / value if COEFFICIENT_FORMS[term] == "inverse" else value


def from_coefficient(term: str, value: float) -> float:
    """The term whose coefficient is ``value`` (``coefficient``'s inverse)."""
    return 1.0 / value if COEFFICIENT_FORMS[term] == "inverse" else value


#: What a framework's own code costs beside the model: dispatching each phase, collating the batch, the rest of a
#: step, waking the engine, loading the learner's weights into it. The catalogue's (``generic``) has none of
#: them, and reloads weights at 50 GB/s (a copy between devices): the model alone. An imported scenario names
#: its framework (``Scenario.framework``), whose costs stand in:
#:
#: * verl: ``reshard_bytes_per_s`` 3.5 GB/s and ``rollout_sample_s`` 0.5 ms from the public log above (its
#:   ``timing_s/reshard``, and its generation phase beyond its generation and resharding); ``sample_overhead_s``
#:   0.3 ms, the same log's reward, advantage and untimed seconds; ``phase_s`` 0.3 s, one worker-group call
#:   (Ray's dispatch of the batch and collection of its outputs); ``switch_s`` 0.2 s, the engine's wake-up
#:   (its KV cache allocated again, its CUDA graphs restored).
#: * NeMo-RL refits colocated vLLM from CUDA IPC handles and collates in its own loop: its five terms fitted to
#:   its published v0.5 H100 table's sync runs (``python benchmarks/catalogue.py --framework nemo-rl``), checked on
#:   its v0.6 and GB200 tables and its off-policy runs, which that fit does not see.
#: * OpenRLHF and AReaL: no measurement of their own yet; verl's stand in (both dispatch over Ray to vLLM).
VERL_COSTS: dict[str, float] = {
    "reshard_bytes_per_s": 3.5e9,
    "rollout_sample_s": 5e-4,
    "sample_overhead_s": 3e-4,
    "phase_s": 0.3,
    "switch_s": 0.2,
}
FRAMEWORKS: dict[str, dict[str, float]] = {
    "generic": {},
    "verl": VERL_COSTS,
    "nemo-rl": {
        "reshard_bytes_per_s": 3.7e10,
        "rollout_sample_s": 3e-4,
        "switch_s": 0.13,
        "phase_s": 0.25,
        "sample_overhead_s": 1.6e-4,
    },
    "openrlhf": VERL_COSTS,
    "areal": VERL_COSTS,
}


def resolve(profile: Efficiency | None, explicit: dict[str, float], framework: str = "generic") -> Efficiency:
    """The catalogue with ``framework``'s fixed costs (or a profile: it was fitted to the framework's own runs),
    then the scenario's own ``hardware.mfu``/``mbu`` where set."""
    base = profile if profile is not None else DEFAULTS.model_copy(update=FRAMEWORKS[framework])
    return base.model_copy(update=explicit) if explicit else base


def save_efficiency(efficiency: Efficiency, path: Path, header: str = "") -> None:
    """Write a profile file; ``header`` becomes comment lines above it."""
    import yaml

    from ..files.writing import write_text

    path.parent.mkdir(parents=True, exist_ok=True)
    comments = "".join(f"# {line}\n" for line in header.splitlines())
    data = efficiency.model_dump()
    data["intervals"] = {term: [float(low), float(high)] for term, (low, high) in efficiency.intervals.items()}
    write_text(path, comments + yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
