"""OpenRLHF's launch flags (``python3 -m openrlhf.cli.train_ppo_ray …``), read without running anything.

    train_ppo_ray.sh, or the command's words ─► LaunchCommand (asyncrl/frameworks/common/launch_script.py) ─► its words
        ─► parse_flags: {canonical flag name: value}, with the name as written
            --actor_num_gpus_per_node 8                 (0.8 to 0.10.1)
            --actor.num_gpus_per_node 8                 (0.10.2 on: dotted flags, ALIASES maps them)
            --colocate_all_models                       (a switch: True)
            --eps_clip_low_high 0.2 0.28                (several values: a list)
        ─► Flags.into(scenario field, flag): the value, or OpenRLHF's default, recorded as the field's source

Canonical names are those of OpenRLHF 0.9 (``openrlhf/cli/train_ppo_ray.py`` at v0.9.9); DEFAULTS are its
parser's defaults for the flags ``from-openrlhf`` reads, and the 0.8 flags it replaced are read too
(``--prompt_max_len``, ``--generate_max_len``, ``--bf16``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from asyncrl.scenarios.files.textfile import safe_load

from asyncrl.frameworks.common.provenance import ImportPlan, reason_for

#: OpenRLHF 0.10's dotted flags, by the 0.9 name they replaced (``git log -S`` on train_ppo_ray.py, ed62d0e2).
ALIASES = {
    "actor.num_nodes": "actor_num_nodes",
    "actor.num_gpus_per_node": "actor_num_gpus_per_node",
    "ref.num_nodes": "ref_num_nodes",
    "ref.num_gpus_per_node": "ref_num_gpus_per_node",
    "critic.num_nodes": "critic_num_nodes",
    "critic.num_gpus_per_node": "critic_num_gpus_per_node",
    "reward.num_nodes": "reward_num_nodes",
    "reward.num_gpus_per_node": "reward_num_gpus_per_node",
    "train.colocate_actor_ref": "colocate_actor_ref",
    "train.colocate_critic_reward": "colocate_critic_reward",
    "train.colocate_all": "colocate_all_models",
    "vllm.num_engines": "vllm_num_engines",
    "vllm.tensor_parallel_size": "vllm_tensor_parallel_size",
    "vllm.gpu_memory_utilization": "vllm_gpu_memory_utilization",
    "vllm.enable_prefix_caching": "enable_prefix_caching",
    "vllm.enforce_eager": "enforce_eager",
    "vllm.enable_sleep": "vllm_enable_sleep",
    "ds.enable_sleep": "deepspeed_enable_sleep",
    "algo.advantage.is_correction_enable": "enable_vllm_is_correction",
    "algo.advantage.is_correction_threshold": "vllm_is_truncated_threshold",
    "algo.advantage.is_correction_type": "vllm_is_correction_type",
    "train.async_enable": "async_train",
    "train.async_queue_size": "async_queue_size",
    "train.partial_rollout_enable": "partial_rollout",
    "ds.zero_stage": "zero_stage",
    "actor.gradient_checkpointing_enable": "gradient_checkpointing",
    "ds.param_dtype": "param_dtype",
    "ds.adam_offload": "adam_offload",
    "ds.grad_accum_dtype": "grad_accum_dtype",
    "ds.tensor_parallel_size": "ds_tensor_parallel_size",
    "ds.packing_samples": "packing_samples",
    "ds.ring_attn_size": "ring_attn_size",
    "ds.lora.rank": "lora_rank",
    "train.dynamic_batch_enable": "use_dynamic_batch",
    "train.max_tokens_per_gpu": "train_max_tokens_per_gpu",
    "train.num_episodes": "num_episodes",
    "train.max_epochs": "max_epochs",
    "train.micro_batch_size": "micro_train_batch_size",
    "train.batch_size": "train_batch_size",
    "train.agent_func_path": "agent_func_path",
    "rollout.batch_size": "rollout_batch_size",
    "rollout.n_samples_per_prompt": "n_samples_per_prompt",
    "rollout.max_new_tokens": "max_new_tokens",
    "rollout.temperature": "temperature",
    "rollout.top_p": "top_p",
    "data.max_len": "max_len",
    "data.max_samples": "max_samples",
    "actor.eps_clip": "eps_clip",
    "actor.eps_clip_low_high": "eps_clip_low_high",
    "actor.adam.lr": "actor_learning_rate",
    "actor.max_norm": "max_norm",
    "actor.entropy_coef": "entropy_loss_coef",
    "actor.policy_loss_type": "policy_loss_type",
    "actor.model_name_or_path": "pretrain",
    "critic.model_name_or_path": "critic_pretrain",
    "reward.model_name_or_path": "reward_pretrain",
    "reward.remote_url": "remote_rm_url",
    "algo.advantage.estimator": "advantage_estimator",
    "algo.advantage.no_std_norm": "no_advantage_std_norm",
    "algo.advantage.lambd": "lambd",
    "algo.advantage.gamma": "gamma",
    "algo.kl.init_coef": "init_kl_coef",
    "algo.kl.use_loss": "use_kl_loss",
    "algo.dynamic_filtering_enable": "dynamic_filtering",
}
#: OpenRLHF 0.9.9's defaults (its argument parser) for the flags from-openrlhf reads.
DEFAULTS: dict[str, Any] = {
    "actor_num_nodes": 1,
    "actor_num_gpus_per_node": 8,
    "ref_num_nodes": 1,
    "ref_num_gpus_per_node": 8,
    "critic_num_nodes": 1,
    "critic_num_gpus_per_node": 8,
    "reward_num_nodes": 1,
    "reward_num_gpus_per_node": 8,
    "vllm_num_engines": None,
    "vllm_tensor_parallel_size": 1,
    "vllm_gpu_memory_utilization": 0.95,
    "async_queue_size": 1,
    "zero_stage": 2,
    "param_dtype": "bf16",
    "grad_accum_dtype": None,
    "ds_tensor_parallel_size": 1,
    "ring_attn_size": 1,
    "train_max_tokens_per_gpu": 16192,
    "num_episodes": 1,
    "max_epochs": 1,
    "micro_train_batch_size": 4,
    "train_batch_size": 128,
    "rollout_batch_size": 1024,
    "n_samples_per_prompt": 1,
    "max_len": 2048,
    "max_new_tokens": None,
    "max_samples": 100_000_000,
    "eps_clip": 0.2,
    "actor_learning_rate": 1e-6,
    "max_norm": 1.0,
    "temperature": 1.0,
    "advantage_estimator": "gae",
    "lambd": 1.0,
    "gamma": 1.0,
    "init_kl_coef": 0.01,
    "vllm_is_truncated_threshold": [0.5, 5.0],
    "vllm_is_correction_type": "tis",
}

#: Flags that shape a step's cost or the schedule, with no counterpart in a scenario.
NO_COUNTERPART = {
    "enable_prefix_caching": "prefix caching (a group's prompt is prefilled once per sample)",
    "vllm_enable_sleep": "freeing the engines' memory between phases: in the colocated switch (switch_s, fitted "
    "from a log)",
    "deepspeed_enable_sleep": "freeing the learner's memory between phases: in the colocated switch",
    "packing_samples": "packing the learner's rows (the learner counts each row's own tokens, as packing does)",
    "dynamic_filtering": "dynamic sampling: generating more groups until enough have a reward spread",
    "lora_rank": "LoRA",
    "load_in_4bit": "a 4-bit learner",
    "agent_func_path": "a multi-turn agent's environment steps",
    "remote_rm_url": "a remote reward function (its time: the calibrated sample_overhead_s)",
    "vllm_is_correction_type": "icepop and seq-mask-tis corrections (tis: algorithm.correction)",
    "entropy_loss_coef": "entropy bonus",
    "policy_loss_type": "the policy loss variant (GSPO): the step's time is the same",
    "eps_clip_low_high": "an asymmetric clip: asyncrl's clip_eps is symmetric, taken from the low end",
}
NEUTRAL = {"lora_rank": 0, "entropy_loss_coef": 0, "policy_loss_type": "ppo", "vllm_is_correction_type": "tis"}
#: Flags (or prefixes, ending in "." or "_") with no bearing on a plan: checkpoints, logging, data, schedules.
OUTSIDE_THE_STEP = {
    "ckpt.": "checkpoints",
    "ckpt_path": "checkpoints",
    "save_": "checkpoints",
    "max_ckpt_": "checkpoints",
    "load_checkpoint": "checkpoints",
    "disable_ds_ckpt": "checkpoints",
    "use_ds_universal_ckpt": "checkpoints",
    "logger.": "logging",
    "logging_steps": "logging",
    "use_wandb": "logging",
    "wandb_": "logging",
    "use_tensorboard": "logging",
    "eval.": "evaluation",
    "eval_": "evaluation",
    "data.": "the dataset's layout",
    "prompt_data": "the dataset",
    "prompt_split": "the dataset",
    "input_key": "the dataset's layout",
    "label_key": "the dataset's layout",
    "input_template": "the dataset's layout",
    "apply_chat_template": "the dataset's layout",
    "reward_pretrain": "the reward model (its GPUs are listed with reward_num_nodes)",
    "reward.": "the reward model's settings",
    "normalize_reward": "reward normalisation",
    "critic_learning_rate": "the critic's optimizer",
    "critic.": "the critic's settings",
    "lr_warmup_ratio": "the learning-rate schedule",
    "lr_scheduler": "the learning-rate schedule",
    "actor.adam.": "the optimizer's settings",
    "adam_betas": "the optimizer's settings",
    "l2": "weight decay",
    "seed": "the run's seed",
    "train.seed": "the run's seed",
    "micro_rollout_batch_size": "the experience passes' micro-batches",
    "rollout.micro_batch_size": "the experience passes' micro-batches",
    "rollout_max_tokens_per_gpu": "the experience passes' micro-batches",
    "rollout.max_tokens_per_gpu": "the experience passes' micro-batches",
    "vllm_generate_batch_size": "prompts per generation call (the engines batch continuously)",
    "vllm_sync_backend": "how weights travel (the sync is priced from the links)",
    "vllm.sync_": "how weights travel (the sync is priced from the links)",
    "vllm_sync_with_ray": "how weights travel (the sync is priced from the links)",
    "enforce_eager": "CUDA graphs: in the calibrated decode_step_s",
    "attn_implementation": "kernel choices: in the calibrated mfu",
    "ds.attn_implementation": "kernel choices: in the calibrated mfu",
    "use_liger_kernel": "kernel choices: in the calibrated mfu",
    "overlap_comm": "communication overlap: in the calibrated mfu",
    "deepcompile": "compilation: in the calibrated mfu",
    "zpg": "ZeRO++ partitions: in the calibrated mfu",
    "ring_head_stride": "ring attention's schedule",
    "ds.ring_attn_head_stride": "ring attention's schedule",
    "gradient_checkpointing_use_reentrant": "recomputation's implementation",
    "kl_estimator": "the KL estimator (no time of its own)",
    "algo.kl.": "the KL estimator and target",
    "kl_target": "the KL controller",
    "kl_horizon": "the KL controller",
    "algo.dynamic_filtering_range": "dynamic sampling's range (see dynamic_filtering)",
    "dynamic_filtering_reward_range": "dynamic sampling's range (see dynamic_filtering)",
    "vllm_is_truncated_threshold": "read with enable_vllm_is_correction",
    "max_norm": "read for algorithm.grad_clip",
    "local_rank": "DeepSpeed's launcher",
    "perf": "profiling",
    "use_ms": "ModelScope downloads",
    "disable_fast_tokenizer": "the tokenizer",
    "full_determinism": "determinism",
    "enable_ema": "an EMA copy of the weights",
    "ema_beta": "an EMA copy of the weights",
    "value_head_prefix": "the critic's head",
    "value_clip": "the critic's clip",
    "dual_clip": "dual-clip PPO's bound",
    "freezing_actor_steps": "critic warm-up",
    "ref_reward_offload": "the reference model's memory (not in the memory check)",
    "ptx_coef": "a pretraining loss",
    "aux_loss_coef": "MoE balancing loss",
    "overlong_": "reward shaping of long responses (the lengths are given)",
    "stop_properly_penalty_coef": "reward shaping (the lengths are given)",
    "top_p": "sampling (the lengths are given, not sampled)",
    "target_modules": "LoRA",
    "lora_": "LoRA",
    "actor_init_on_gpu": "start-up",
    "reward_clip_range": "reward clipping",
    "train.full_determinism_enable": "determinism",
}


def outside_the_step(name: str) -> str | None:
    """Why ``name`` has no bearing on a plan, or None when it has."""
    return reason_for(name, OUTSIDE_THE_STEP)


def parse_flags(words: list[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """``{canonical name: value}`` and ``{canonical name: the flag as written}`` of ``--flag [value ...]`` words.

    A flag followed by no value is a switch (True); by one, that value (YAML-read: numbers, true/false); by
    several, their list. Words before the first flag are ignored (the caller passes what follows the module).
    """
    import yaml

    flags: dict[str, Any] = {}
    written: dict[str, str] = {}
    name: str | None = None
    for word in words:
        if word.startswith("--") and len(word) > 2:
            flag, equals, value = word[2:].partition("=")
            name = ALIASES.get(flag, flag)
            written[name], flags[name] = flag, True
            if equals:
                flags[name], name = _scalar(yaml, value), None
        elif name is not None:
            value = _scalar(yaml, word)
            previous = flags[name]
            flags[name] = (
                value if previous is True else [*(previous if isinstance(previous, list) else [previous]), value]
            )
    return flags, written


def _scalar(yaml: Any, text: str) -> Any:
    """A value as argparse's type would read it: numbers (``1e-2`` too, which YAML leaves a string), booleans, text."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    try:
        return safe_load(text)
    except yaml.YAMLError:
        return text


@dataclass
class Flags:
    """Reads OpenRLHF flags (or their defaults) and records which scenario field each one fed."""

    flags: dict[str, Any]
    written: dict[str, str]
    plan: ImportPlan
    read: set[str] = field(default_factory=set)

    def given(self, name: str) -> bool:
        return name in self.flags

    def value(self, name: str, default: Any = None) -> Any:
        self.plan.read.add(name)
        return self.flags.get(name, DEFAULTS.get(name, default))

    def switch(self, name: str) -> bool:
        return self.value(name, False) is True

    def label(self, name: str) -> str:
        return f"--{self.written.get(name, name)}"

    def into(self, target: str, name: str, default: Any = None) -> Any:
        """The flag's value (or OpenRLHF's default), recorded as the source of ``target``."""
        value = self.value(name, default)
        self.plan.source(target, self.label(name), value)
        if not self.given(name):
            self.plan.defaulted.add(self.label(name))
        return value

    def integer(self, target: str, name: str, default: int | None = None) -> int:
        from asyncrl.frameworks.common.provenance import SettingsError

        value = self.into(target, name, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SettingsError(f"{self.label(name)}: expected a positive integer, got {value!r}")
        return value
