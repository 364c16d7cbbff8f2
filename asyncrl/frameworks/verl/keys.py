"""What ``from-verl`` does with each verl setting it does not map: no counterpart, or no bearing on a step.

    a verl key ─► mapped (asyncrl/frameworks/verl/importer.py, verl_learner.py: the plan names it as a field's source)
               ─► NO_COUNTERPART: shapes a step's cost or the schedule, and a scenario cannot say it
                  (printed when set to something other than NEUTRAL)
               ─► OUTSIDE_THE_STEP: logging, checkpoints, validation, data paths, the optimizer's
                  schedule, kernel choices: nothing a plan's seconds depend on (or only through the
                  calibrated efficiencies); never printed

``tests/test_verl_recipes.py`` reads verl's recipe launch scripts and checks that each of their keys is
mapped or listed here; docs/verl.md's table of unmapped settings is ``unmapped_table()``
(``python -m asyncrl.frameworks.verl.keys``), checked there too.
"""

from __future__ import annotations

from asyncrl.frameworks.common.provenance import reason_for

_BETWEEN_PHASES = (
    "verl moves the gradients to the CPU only between phases, never through the update: not in the memory "
    "check (whose peak is the update's); their time is in learner.phase_offload's"
)
#: verl settings that shape cost or behaviour but have no counterpart in a scenario (docs/verl.md lists them
#: once, from here: tests/test_verl_recipes.py checks the page against this table).
NO_COUNTERPART = {
    "actor_rollout_ref.actor.megatron.grad_offload": _BETWEEN_PHASES,
    "actor_rollout_ref.ref.fsdp_config.param_offload": "the reference model's memory (not in the memory check)",
    "actor_rollout_ref.model.enable_activation_offload": "activations moved to the CPU in the update",
    "actor_rollout_ref.actor.loss_agg_mode": "loss aggregation (the executor averages per token)",
    "actor_rollout_ref.actor.clip_ratio_high": "an asymmetric clip (DAPO's clip-higher): asyncrl's clip_eps is "
    "symmetric, taken from clip_ratio_low; the step's time is the same",
    "actor_rollout_ref.actor.policy_loss.loss_mode": "the policy loss variant (GSPO, ...): the step's time is the same",
    "actor_rollout_ref.actor.entropy_coeff": "entropy bonus",
    "actor_rollout_ref.rollout.name": "the inference engine (vLLM, SGLang): its speed is the calibrated decode terms",
    "actor_rollout_ref.rollout.max_num_batched_tokens": "prefill chunking",
    "actor_rollout_ref.rollout.enable_chunked_prefill": "prefill chunking",
    "actor_rollout_ref.rollout.top_p": "sampling (the lengths are given, not sampled)",
    "actor_rollout_ref.rollout.top_k": "sampling (the lengths are given, not sampled)",
    "algorithm.filter_groups.enable": "DAPO's dynamic sampling: generating more groups until enough have a reward "
    "spread (a step generates more than it trains)",
    "reward_model.enable": "a reward model's forward pass",
    "reward_model.overlong_buffer.enable": "reward shaping of long responses (the lengths are given)",
    "reward_model.reward_kwargs.overlong_buffer_cfg.enable": "reward shaping of long responses (the lengths are given)",
    "trainer.total_epochs": "epochs over a dataset whose size the config does not give",
    "data.train_files": "the dataset",
}
#: Values of those settings that change nothing (off, none, one-way parallelism): not worth listing.
NEUTRAL = {
    "actor_rollout_ref.actor.entropy_coeff": 0,
    "actor_rollout_ref.actor.policy_loss.loss_mode": "vanilla",
    "actor_rollout_ref.rollout.top_p": 1,
    "actor_rollout_ref.rollout.top_k": -1,
}


#: Settings (a key, or a section ending in ".") that change nothing a plan predicts, or change it only through
#: the efficiencies a log calibrates (kernels, CUDA graphs): why each is left out.
OUTSIDE_THE_STEP = {
    "trainer.": "logging, checkpoints, validation and resumption",
    "data.val_files": "validation",
    "data.prompt_key": "the dataset's layout",
    "data.truncation": "the dataset's layout",
    "data.return_raw_chat": "the dataset's layout",
    "data.gen_batch_size": "prompts per generation call (the fully async rollouter's 1; with DAPO's filter_groups, "
    "see algorithm.filter_groups.enable)",
    "rollout.test_freq": "validation",
    "rollout.total_epochs": "epochs over a dataset whose size the config does not give",
    "actor_rollout_ref.rollout.val_kwargs.": "validation",
    "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu": "the no-grad passes' token budget (the "
    "learner's micro_batch_tokens applies to them)",
    "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz": "dynamic batching of the no-grad passes (packed to the "
    "learner's micro_batch_tokens)",
    "actor_rollout_ref.rollout.mode": "the rollout server's API (the engine's speed is the calibrated decode terms)",
    "actor_rollout_ref.rollout.calculate_log_probs": "returning the engine's log-probs (no time of its own)",
    "actor_rollout_ref.ref.": "the reference model's sharding and micro-batches (its pass is one of "
    "algorithm.extra_forward_passes, on the learner's devices)",
    "actor_rollout_ref.actor.optim.": "the learning-rate schedule and weight decay",
    "actor_rollout_ref.actor.clip_ratio_c": "dual-clip PPO's bound (the step's time is the same)",
    "actor_rollout_ref.actor.checkpoint.": "checkpoints",
    "actor_rollout_ref.actor.megatron.use_mbridge": "checkpoint conversion",
    "actor_rollout_ref.actor.megatron.use_dist_checkpointing": "checkpoints",
    "actor_rollout_ref.actor.megatron.override_transformer_config.": "kernel fusions and MoE dispatch: in the "
    "calibrated mfu",
    "actor_rollout_ref.actor.megatron.virtual_pipeline_model_parallel_size": "the pipeline's interleaving (its "
    "bubble is in the calibrated mfu)",
    "actor_rollout_ref.actor.megatron.expert_model_parallel_size": "experts split over ranks (a token's FLOPs are "
    "the active weights' either way; the all-to-all is in the calibrated mfu)",
    "actor_rollout_ref.actor.megatron.expert_tensor_parallel_size": "experts split over ranks (as "
    "expert_model_parallel_size)",
    "actor_rollout_ref.model.override_config.": "the model's config overrides (its context length)",
    "actor_rollout_ref.model.use_fused_kernels": "kernel choices: in the calibrated mfu",
    "algorithm.kl_ctrl.": "the KL penalty in the reward (no time of its own)",
    "algorithm.use_kl_in_reward": "the KL penalty in the reward (its reference pass is counted in "
    "algorithm.extra_forward_passes)",
    "algorithm.filter_groups.metric": "what DAPO's dynamic sampling filters on (see filter_groups.enable)",
    "algorithm.filter_groups.max_num_gen_batches": "DAPO's dynamic sampling (see filter_groups.enable)",
    "reward_model.reward_manager": "the reward function (its time is the calibrated sample_overhead_s)",
    "reward_model.reward_kwargs.": "the reward function's settings",
    "reward_model.overlong_buffer.": "reward shaping of long responses (the lengths are given)",
    "critic.strategy": "the critic's FSDP flavour (as actor_rollout_ref.actor.strategy)",
}


def outside_the_step(name: str) -> str | None:
    """Why ``name`` has no bearing on a plan, or None when it has."""
    return reason_for(name, OUTSIDE_THE_STEP)


def unmapped_table() -> str:
    """docs/verl.md's table of the verl settings ``from-verl`` does not map, and why (from the two tables)."""
    rows = [f"| `{key}` | {why} |" for key, why in NO_COUNTERPART.items()]
    rows += [
        f"| `{key}{'*' if key.endswith(('.', '_')) else ''}` | {why} (no bearing on a plan) |"
        for key, why in OUTSIDE_THE_STEP.items()
    ]
    return "\n".join(["| verl setting | why it is not mapped |", "|---|---|", *rows])


if __name__ == "__main__":
    print(unmapped_table())
