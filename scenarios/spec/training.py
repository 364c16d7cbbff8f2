"""The sections that say how the learner trains and for how long: ``algorithm``, ``learner``, ``run``.

    scenario.yaml ─► Scenario ─┬─ algorithm: AlgorithmSpec  (the loss, its correction, the updates per step)
                               ├─ learner:   LearnerSpec    (how the learner holds the model in memory)
                               └─ run:       RunSpec        (steps, seed, checkpoints, engine failures)

``scenarios.spec.scenario`` assembles the sections; import them from there.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from ..files.limits import NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt, Seed, Steps
from .failures import FailureSpec
from .sections import Section

#: c, the cap on the importance weight of every correction that has one (verl's TIS default).
DEFAULT_TRUNCATION_CAP = 2.0
#: The corrections that weigh by π_old/μ and clip π/π_old: they need the learner's log-probs at the step's start.
PROXIMAL_CORRECTIONS = ("tis", "decoupled")


class AlgorithmSpec(Section):
    """The loss and how much learner work one step does."""

    loss: Literal["grpo", "rloo", "online_dpo", "ppo"] = Field(
        "grpo", description="the policy loss: `grpo`, `rloo`, `online_dpo` or `ppo`"
    )
    updates_per_step: PositiveInt = Field(
        1, description="optimizer updates per batch (minibatches: the compute is unchanged)"
    )
    extra_forward_passes: NonNegativeInt = Field(
        1,
        description="no-grad forward passes per sample besides the training pass (old log-probs, a reference "
        "model, a critic's values)",
    )
    extra_training_passes: NonNegativeInt = Field(
        0,
        description="training passes (forward and backward) per sample besides the policy's one: more PPO "
        "epochs, a critic's update (verl: `ppo_epochs` − 1, plus the critic's `ppo_epochs` with `gae`)",
    )
    learning_rate: PositiveFloat = Field(1e-4, description="executor: the optimizer's learning rate")
    correction: Literal["clip", "tis", "decoupled", "reinforce_is", "none"] = Field(
        "clip",
        description="executor: off-policy correction of `grpo`, `rloo`, `ppo` (`executor/learning/corrections.py` defines "
        "each; c = `truncation_cap`): `clip` PPO clip of π/μ, weight capped at c; `tis` (verl, open-instruct, "
        "OpenRLHF) weight π_old/μ capped at c times a PPO clip of π/π_old, π_old the learner's policy at the "
        "start of the step; `decoupled` (AReaL's name) the same objective; `reinforce_is` weight π/μ capped at c, "
        "no clip (verl's bypass mode with a REINFORCE loss); `none` stale samples taken as on-policy; "
        "`online_dpo` takes none and refuses any but the default",
    )
    clip_eps: PositiveFloat | None = Field(
        0.2,
        description="executor: PPO-style clip of the ratio (π/μ for `clip`, π/π_old for `tis` and `decoupled`); "
        "`null`: no clip",
    )
    truncation_cap: PositiveFloat | None = Field(
        DEFAULT_TRUNCATION_CAP,
        description="executor: cap c on the importance weight (π/μ for `clip` and `reinforce_is`, π_old/μ for "
        "`tis` and `decoupled`), the same default for all; `null`: no cap",
    )
    cap_action: Literal["clamp", "mask"] = Field(
        "clamp",
        description="executor: what a token whose importance weight exceeds `truncation_cap` gets: `clamp` the "
        "weight c (verl's TIS), `mask` no weight, the token drops out of the gradient (AReaL's default)",
    )
    kl_coef: NonNegativeFloat = Field(0.0, description="executor: weight of the KL-to-initial-policy penalty")
    dpo_beta: PositiveFloat = Field(0.1, description="executor: online DPO temperature (β)")
    dpo_reference: Literal["initial", "behaviour"] = Field(
        "initial",
        description="executor, `online_dpo`: anchor of the implicit reward, the `initial` policy (the paper's) "
        "or the `behaviour` policy that sampled the pair",
    )
    temperature: PositiveFloat = Field(1.0, description="executor: sampling temperature of the actors")
    normalise_std: bool = Field(
        True,
        description="executor, `grpo`: divide advantages by the group's reward std; false is Dr. GRPO's "
        "advantage (with `loss_normaliser: constant`, its loss)",
    )
    group_std: Literal["sample", "population"] = Field(
        "sample",
        description="executor, `grpo`: the group's reward std, `sample` (divides by G − 1: DeepSeekMath, TRL, "
        "verl) or `population` (by G)",
    )
    loss_normaliser: Literal["tokens", "constant"] = Field(
        "tokens",
        description="executor, `grpo`, `rloo`, `ppo`: what the summed token terms are divided by, the batch's "
        "completion `tokens` (DAPO's token mean) or a `constant`, samples × `max_tokens` of the completion "
        "lengths (Dr. GRPO; TRL's `dr_grpo`)",
    )
    filter_zero_variance: bool = Field(
        False,
        description="executor, `grpo`, `rloo`: leave groups whose rewards all tie out of the loss and its "
        "normaliser (DAPO's dynamic sampling, without resampling); they still count as consumed",
    )
    grad_clip: PositiveFloat | None = Field(
        1.0,
        description="executor: largest global gradient norm per update (clipped above it); `null`: no clipping",
    )
    gamma: NonNegativeFloat = Field(1.0, le=1.0, description="executor, `ppo`: discount per token")
    gae_lambda: NonNegativeFloat = Field(0.95, le=1.0, description="executor, `ppo`: GAE λ")
    value_coef: NonNegativeFloat = Field(0.5, description="executor, `ppo`: weight of the value loss")
    value_clip_eps: PositiveFloat | None = Field(
        0.2,
        description="executor, `ppo`: clip of the value change from its value at the start of the step; "
        "`null`: unclipped",
    )

    @model_validator(mode="after")
    def _correction_of_a_policy_gradient_loss(self) -> AlgorithmSpec:
        if self.loss == "online_dpo" and self.correction != "clip":
            raise ValueError(
                f"correction: {self.correction!r} would have no effect: online_dpo takes no importance weights "
                "(its loss is off-policy by construction); remove the setting, or use grpo, rloo or ppo"
            )
        return self


class LearnerSpec(Section):
    """How the learner holds the model in memory (``scenarios/costs/memory.py``); verl and OpenRLHF names given."""

    backend: Literal["fsdp", "megatron"] = Field(
        "fsdp",
        description="how the learner runs its passes: `fsdp` gathers each layer's weights for every micro-batch's "
        "forward and backward; `megatron` keeps its share of the weights (tensor and pipeline parallel) and "
        "reduces the gradients once per update (verl: `actor.strategy`)",
    )
    sharding: Literal["fsdp", "zero3", "zero2", "zero1", "ddp"] = Field(
        "fsdp",
        description="what is split over the training devices: `fsdp` and `zero3` weights, gradients and "
        "optimizer; `zero2` gradients and optimizer; `zero1` optimizer; `ddp` nothing "
        "(verl: `actor.strategy: fsdp`; OpenRLHF: `--zero_stage`)",
    )
    param_dtype: Literal["bf16", "fp16", "fp32", "fp8"] | None = Field(
        None,
        description="learner weights and activations, `bf16`, `fp16`, `fp32` or `fp8`; unset: `model.dtype` "
        "(verl: `actor.fsdp_config.mixed_precision.param_dtype`; OpenRLHF: `--param_dtype`, `--bf16`)",
    )
    master_weights: Literal["fp32", "none"] = Field(
        "fp32",
        description="`fp32`: an fp32 copy of the weights for the optimizer (DeepSpeed and FSDP mixed precision "
        "keep one); `none`: the optimizer updates the weights in `param_dtype`",
    )
    grad_dtype: Literal["fp32", "bf16"] = Field(
        "fp32",
        description="gradients, `fp32` or `bf16` (verl: `actor.fsdp_config.mixed_precision.reduce_dtype`; "
        "OpenRLHF: `--grad_accum_dtype`)",
    )
    optimizer: Literal["adam", "sgd"] = Field(
        "adam", description="`adam`: two fp32 moments per weight; `sgd`: none (verl: `actor.optim`)"
    )
    optimizer_offload: bool = Field(
        False,
        description="master copy and optimizer states on CPU through the update (OpenRLHF: `--adam_offload`; "
        "verl's `actor.fsdp_config.optimizer_offload` frees them only between steps, so leave this false to "
        "model verl's peak)",
    )
    param_offload: bool = Field(
        False,
        description="weights on CPU, fetched layer by layer (DeepSpeed: `offload_param`; verl's "
        "`actor.fsdp_config.param_offload` frees them only between steps)",
    )
    activation_checkpointing: bool = Field(
        True,
        description="keep each layer's input, recompute the rest in backward "
        "(verl: `model.enable_gradient_checkpointing`; OpenRLHF: `--gradient_checkpointing`)",
    )
    micro_batch_tokens: PositiveInt = Field(
        16384,
        description="tokens of one micro-batch on one device, at least one whole rollout "
        "(verl: `actor.ppo_max_token_len_per_gpu`; OpenRLHF: `--train_max_tokens_per_gpu`)",
    )
    micro_batch_rows: PositiveInt | None = Field(
        None,
        description="rows of one micro-batch of the training pass on one device, a fixed count instead of packing "
        "rows up to `micro_batch_tokens` (verl: `actor.ppo_micro_batch_size_per_gpu` without dynamic batching); "
        "unset: packed",
    )
    forward_micro_batch_rows: PositiveInt | None = Field(
        None,
        description="rows of one micro-batch of a no-grad pass (old log-probs, reference, values) on one device "
        "(verl: `rollout.log_prob_micro_batch_size_per_gpu` without dynamic batching); unset: packed to "
        "`micro_batch_tokens`",
    )
    remove_padding: bool = Field(
        True,
        description="the learner computes only the rows' real tokens (packed sequences); false: every row at the "
        "prompt cap plus the completion cap, padding included (verl: `model.use_remove_padding`)",
    )
    phase_offload: Literal["none", "params", "optimizer", "both"] = Field(
        "none",
        description="what the learner moves to the host after each of its phases and back before the next (verl: "
        "`fsdp_config.param_offload` the weights, `optimizer_offload` Adam's states): host-link time each step, "
        "not memory at the peak",
    )
    shard_devices: PositiveInt | None = Field(
        None,
        description="devices one FSDP shard group spans, the groups replicas of each other (HSDP); unset: a node "
        "when its devices hold the state, else all (verl: `actor.fsdp_config.fsdp_size`)",
    )
    pipeline_stages: PositiveInt = Field(
        1,
        description="of `model_parallel`, the pipeline stages (Megatron's pipeline parallelism): each stage holds "
        "layers / stages, and a minibatch of m micro-batches takes m + stages − 1 of a stage's slots (1F1B's "
        "bubble; verl: `actor.megatron.pipeline_model_parallel_size`, NeMo-RL: "
        "`policy.megatron_cfg.pipeline_model_parallel_size`)",
    )
    model_parallel: PositiveInt = Field(
        1,
        description="training devices sharing one copy of a sequence (verl: `actor.ulysses_sequence_parallel_size`; "
        "Megatron: TP × PP × CP); the rest are data-parallel ranks, each minibatch waiting for the busiest",
    )
    lora_rank: NonNegativeInt = Field(
        0,
        description="LoRA adapters of this rank on every linear layer of each block, the model's own weights frozen "
        "(the backward computes no gradient of them, Adam keeps only the adapters' states, a colocated engine "
        "receives the adapters alone after its first load and launches vLLM's LoRA kernels as it decodes); 0: the "
        "whole model trained "
        "(verl: `actor_rollout_ref.model.lora_rank`)",
    )


class RunSpec(Section):
    steps: Steps = Field(100, description="learner steps")
    seed: Seed = Field(0, description="seeds the length draws (same seed, same summary, byte for byte)")
    checkpoint_every: PositiveInt | None = Field(
        None, description="executor: learner checkpoint interval, in steps; unset: no checkpoints"
    )
    eval_every: PositiveInt | None = Field(
        None,
        description="executor, task mode: every this many steps (and at steps 0 and the last) the weights of that "
        "step answer `eval_prompts` held-out prompts, greedily and sampled; written to `eval.parquet` after the "
        "run's clock stops; unset: no evaluation",
    )
    eval_prompts: PositiveInt = Field(
        32,
        description="executor: held-out prompts per evaluation, drawn by the task from a stream of their own; "
        "training never draws them",
    )
    failures: FailureSpec | None = Field(
        None,
        description="engines that fail during the run (a what-if for the simulator; the executor kills them "
        "then, and restarts them); unset: none",
    )
