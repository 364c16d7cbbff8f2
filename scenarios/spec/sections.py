"""The sections that say what runs where: ``model``, ``hardware``, ``cluster``, ``workload``.

    scenario.yaml ─► Scenario ─┬─ model:    ModelSpec     (a preset or its architecture figures)
                               ├─ hardware: HardwareSpec  (the device, its efficiency, a measured profile)
                               ├─ cluster:  ClusterSpec   (generation and training devices, engines)
                               └─ workload: WorkloadSpec  (a step's groups, the prompt and completion lengths)

``Section`` is every section's base: unknown keys are refused (a typo fails at load time with the
field's path), values are frozen, and no infinity or NaN gets in. ``scenarios.spec.scenario`` assembles
the sections; import them from there.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationInfo, field_validator, model_validator

from ..costs.catalog import DEVICES, DTYPE_BYTES, MODEL_PRESETS, DeviceSpec
from ..costs.efficiency import Efficiency
from ..costs.efficiency import resolve as resolve_efficiency
from ..costs.profile import CostProfile, load_profile
from ..files.limits import Devices, Fraction, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt
from .device_sheet import DeviceSheet, device_tag
from .distributions import Fixed, LengthDistribution
from .model_config import config_path, figures_from_config, read_config

if TYPE_CHECKING:  # a Literal built from the catalogs at run time is no type to mypy: any name, for it
    DeviceName = str
    PresetName = str
else:
    DeviceName = Literal[tuple(DEVICES)]
    PresetName = Literal[tuple(MODEL_PRESETS)]

#: ``hardware.device``: a catalogue name, or a device given by its datasheet figures (``scenarios/spec/device_sheet.py``).
Device = Annotated[
    Annotated[DeviceName, Tag("catalogue")] | Annotated[DeviceSheet, Tag("datasheet")], Discriminator(device_tag)
]


class Section(BaseModel):
    """A scenario section: unknown keys refused, frozen, finite."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


#: The architecture figures a preset or a checkpoint's config.json fills in when the scenario leaves them out.
_FIGURES = ("params", "active_params", "layers", "hidden", "heads", "kv_heads", "head_dim", "vocab")


class ModelSpec(Section):
    """The policy: a catalog preset, or its architecture figures given directly."""

    preset: PresetName | None = Field(
        None,
        description="catalog entry (`scenarios/costs/catalog.py`; `tiny`, 385K parameters, is for CPU tests); "
        "architecture figures given as well override the preset's",
    )
    params: PositiveInt | None = Field(
        None,
        description="all weights; unset: the preset's, else counted from `model.path`'s config.json (or give the "
        "architecture figures for any other model)",
    )
    active_params: PositiveInt | None = Field(
        None,
        description="weights one token passes through (they differ from `params` for mixture-of-experts); "
        "unset: the preset's, else `params`",
    )
    layers: PositiveInt | None = Field(None, description="transformer layers; unset: the preset's")
    hidden: PositiveInt | None = Field(None, description="hidden size; unset: the preset's")
    heads: PositiveInt | None = Field(
        None, description="attention heads; unset: the preset's, else `hidden` / `head_dim`"
    )
    kv_heads: PositiveInt | None = Field(
        None, description="key and value heads (fewer than `heads` with grouped-query attention); unset: the preset's"
    )
    head_dim: PositiveInt | None = Field(None, description="size of one attention head; unset: the preset's")
    vocab: PositiveInt | None = Field(
        None,
        description="vocabulary size: the learner's logits in the memory check; unset: the preset's, else the "
        "logits are not counted",
    )
    dtype: Literal["bf16", "fp16", "fp32", "fp8"] = Field(
        "bf16",
        description="`bf16`, `fp16`, `fp32` or `fp8`: bytes per weight and per KV value; the executor runs "
        "`bf16` and `fp32`",
    )
    path: Path | None = Field(
        None,
        description="executor: a checkpoint directory (safetensors; relative to the scenario file where it exists "
        "there), or a hub name already in the local Hugging Face cache (never downloaded), whose config.json gives "
        "the architecture figures without a preset (`scenarios/spec/model_config.py`); unset: built from `preset`",
    )
    trust_remote_code: bool = Field(False, description="executor: allow code shipped with a local checkpoint")

    @field_validator("path")
    @classmethod
    def _path_beside_the_scenario(cls, path: Path | None, info: ValidationInfo) -> Path | None:
        base = (info.context or {}).get("base_dir")
        if path is None or path.is_absolute() or not base or not (Path(base) / path).exists():
            return path  # absolute, relative to the working directory, or a hub name
        return (Path(base) / path).resolve()

    @model_validator(mode="after")
    def _fill_from_preset(self) -> ModelSpec:
        """Figures not given come from the preset, else from ``model.path``'s config.json (``model_config``)."""
        known = self._checkpoint_figures() if self.preset is None else asdict(MODEL_PRESETS[self.preset])
        for name in _FIGURES:
            if getattr(self, name) is None and known.get(name) is not None:
                object.__setattr__(self, name, known[name])
        missing = [
            name for name in ("params", "layers", "hidden", "kv_heads", "head_dim") if getattr(self, name) is None
        ]
        if missing:
            raise ValueError(f"give a preset, a model.path with a config.json, or {', '.join(missing)}")
        if self.active_params is None:
            object.__setattr__(self, "active_params", self.params)
        if self.heads is None:
            assert self.hidden is not None and self.head_dim is not None  # not missing
            object.__setattr__(self, "heads", max(1, self.hidden // self.head_dim))
        assert self.active_params is not None and self.params is not None  # not missing, or filled just above
        if self.active_params > self.params:
            raise ValueError(f"active_params: {self.active_params} exceeds params ({self.params})")
        return self

    def _checkpoint_figures(self) -> dict[str, int]:
        """The architecture figures of ``model.path``'s config.json, if it has one (a local directory, or a hub
        name already in the cache); none else."""
        if self.path is None or all(getattr(self, name) is not None for name in _FIGURES):
            return {}
        found = config_path(self.path)
        return figures_from_config(read_config(found), str(found)) if found is not None else {}

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def weight_bytes(self) -> float:
        assert self.params is not None  # filled at validation (_fill_from_preset), as are layers, heads, ...
        return float(self.params * self.dtype_bytes)

    @property
    def kv_bytes_per_token(self) -> float:
        """Key and value vectors of one token across all layers."""
        assert self.layers is not None and self.kv_heads is not None and self.head_dim is not None
        return float(2 * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes)

    @property
    def label(self) -> str:
        assert self.params is not None
        return self.preset or f"{self.params / 1e9:.2g}B"


class HardwareSpec(Section):
    """The device kind, its efficiency, and optionally measured costs."""

    device: Device = Field(
        description="catalog entry: datasheet peak, memory, bandwidth, NVLink, network and host links in "
        "`scenarios/costs/catalog.py`, each with its source; or a device of one's own as a mapping of its datasheet "
        "figures (`peak_tflops`, `hbm_gb`, `hbm_gbps`, ...: the `hardware.device.*` rows)"
    )
    mfu: Fraction | None = Field(
        None,
        description="model-FLOPs utilization of the learner's passes and prefill; unset: the profile's, else the "
        "catalogue's 0.4 (`scenarios/costs/efficiency.py`)",
    )
    mbu: Fraction | None = Field(
        None,
        description="memory-bandwidth utilization of decoding; unset: the profile's, else the catalogue's 0.5 "
        "(1.0 gives the bare datasheet roofline)",
    )
    sync_latency_s: NonNegativeFloat = Field(
        0.05, description="fixed cost of one weight sync besides the transfer, in seconds"
    )
    profile: Path | None = Field(
        None,
        description="a measured cost profile, which replaces the analytic costs, or an efficiency profile "
        "(`kind: efficiency`, from `calibrate --from-log`), which sets the analytic model's efficiencies "
        "(docs/calibration.md); relative to the scenario file (given with `--set`: to the working directory)",
    )
    host_cores: PositiveInt | None = Field(
        None,
        description="`cpu` only: cores the run's processes share; while busy engines and the learner want more "
        "threads than that, each runs at cores / threads wanted of its speed (`scenarios/rules/cores.py`); unset: "
        "every device is its own",
    )

    @model_validator(mode="after")
    def _host_cores_on_cpu(self) -> HardwareSpec:
        if self.host_cores is not None and self.device != "cpu":
            raise ValueError(
                f"host_cores: {self.host_cores} applies to the cpu device, whose devices are cores; "
                f"device is {self.device} (remove host_cores)"
            )
        return self

    @field_validator("profile")
    @classmethod
    def _profile_loads(cls, path: Path | None, info: ValidationInfo) -> Path | None:
        if path is None:
            return None
        base = (info.context or {}).get("base_dir")
        resolved = (Path(base) / path if base and not path.is_absolute() else path).resolve()
        load_profile(resolved)
        return resolved

    @property
    def spec(self) -> DeviceSpec:
        return self.device.spec() if isinstance(self.device, DeviceSheet) else DEVICES[self.device]

    @property
    def device_name(self) -> str:
        """The catalogue name, or the datasheet mapping's ``name``: what tables print."""
        return self.device.name if isinstance(self.device, DeviceSheet) else self.device

    def cost_profile(self) -> CostProfile | None:
        """The measured profile ``profile`` names, if it is one (else the analytic model's, with efficiencies)."""
        profile = load_profile(self.profile) if self.profile is not None else None
        return profile if isinstance(profile, CostProfile) else None

    def efficiency(self, framework: str = "generic") -> Efficiency:
        """The analytic model's terms: the catalogue's with ``framework``'s fixed costs, else a ``kind: efficiency``
        profile, then explicit mfu/mbu (``Scenario.efficiency`` passes the scenario's framework)."""
        profile = load_profile(self.profile) if self.profile is not None else None
        explicit = {"mbu": self.mbu} if self.mbu is not None else {}
        if self.mfu is not None:  # the learner's utilization: its no-grad passes as well
            explicit |= {"mfu": self.mfu, "forward_mfu": self.mfu}
        return resolve_efficiency(profile if isinstance(profile, Efficiency) else None, explicit, framework)


class ClusterSpec(Section):
    """How many devices generate, how many train, and how engines span them."""

    generation_devices: Devices = Field(description="the generation pool: devices the engines run on")
    training_devices: Devices = Field(description="the training pool: devices the learner runs on")
    devices_per_engine: Devices = Field(
        1, description="tensor-parallel size of one generation engine; must divide `generation_devices`"
    )
    colocated: bool = Field(
        False,
        description="the same devices alternate between generating and training (sync only; the two counts "
        "must be equal)",
    )
    devices_per_node: PositiveInt = Field(
        8,
        description="devices sharing a node (NVLink); engines, then the learner, fill nodes in order; must be a "
        "multiple of `devices_per_engine`; unset: the device's node (8; 72 for `gb200`, an NVL72 rack)",
    )
    enforce_eager: bool = Field(
        False,
        description="the engines run each decode step op by op instead of replaying CUDA graphs: the host launches "
        "every kernel, so a step takes at least its layers' launches (`decode_layer_s` each), however little the "
        "device does; vLLM's `enforce_eager`; verl: `actor_rollout_ref.rollout.enforce_eager`, true by default "
        "before August 2025",
    )
    free_cache_engine: bool = Field(
        True,
        description="colocated: the engine gives its memory back between generation phases (vLLM's sleep mode: "
        "its weights to the host, its KV cache dropped) and takes it again before the next one (verl: "
        "`actor_rollout_ref.rollout.free_cache_engine`)",
    )
    gpu_memory_utilization: Fraction = Field(
        0.9,
        description="share of each generation device's memory an engine fills with its weights and KV cache, "
        "which bounds the rollouts it runs at once (vLLM's `gpu_memory_utilization`; verl: "
        "`actor_rollout_ref.rollout.gpu_memory_utilization`, NeMo-RL: `policy.generation.vllm_cfg.gpu_memory_utilization`)",
    )

    @model_validator(mode="after")
    def _consistent(self) -> ClusterSpec:
        if self.generation_devices % self.devices_per_engine:
            raise ValueError(
                f"devices_per_engine: {self.devices_per_engine} does not divide generation_devices ({self.generation_devices})"
            )
        if self.devices_per_node % self.devices_per_engine:
            raise ValueError(
                f"devices_per_engine: {self.devices_per_engine} does not divide devices_per_node "
                f"({self.devices_per_node}); an engine's devices share one node"
            )
        if self.colocated and self.training_devices != self.generation_devices:
            raise ValueError(
                f"training_devices: {self.training_devices} differs from generation_devices ({self.generation_devices}); "
                "colocated devices both train and generate"
            )
        return self

    @property
    def engines(self) -> int:
        return self.generation_devices // self.devices_per_engine

    @property
    def total_devices(self) -> int:
        return self.generation_devices if self.colocated else self.generation_devices + self.training_devices


MAX_LENGTH_FACTOR = 1000.0  # completion_scale_by_step's largest factor


class WorkloadSpec(Section):
    """What one learner step consumes, and how long prompts and completions are."""

    prompts_per_step: PositiveInt = Field(description="groups per learner step (B)")
    samples_per_prompt: PositiveInt = Field(description="group size (G): samples of one prompt")
    prompt_tokens: LengthDistribution = Field(
        default_factory=lambda: Fixed(kind="fixed", value=256),
        description="prompt lengths in tokens: a length distribution",
    )
    completion_tokens: LengthDistribution = Field(description="completion lengths in tokens: a length distribution")
    completion_scale_by_step: tuple[tuple[NonNegativeInt, PositiveFloat], ...] | None = Field(
        None,
        description="completions that grow (or shrink) over the run: `[[step, factor], ...]`, steps increasing; "
        "the groups drawn for learner step k have every length `factor(k)` times `completion_tokens`' (before the "
        "cap), geometric between the points, held before the first and after the last (e.g. `[[0, 1], [300, 2.5]]`); "
        "`from-verl --lengths LOG` fits it where the log's responses drift. Unset: the same lengths at every step",
    )
    group_correlation: float = Field(
        0.0,
        ge=0.0,
        lt=1.0,
        allow_inf_nan=False,
        description="how alike a group's completion lengths are (a hard prompt is long for every sample): the "
        "correlation of their normal scores, for a lognormal of their log lengths; each length keeps "
        "`completion_tokens`' law. 0: independent. `asyncrl lengths DIR` fits it from rollout dumps grouped by prompt",
    )
    length_range: tuple[PositiveFloat, PositiveFloat] | None = Field(
        None,
        description="the completion lengths are an assumption: a 95% range of their scale, `[low, high]` times "
        "`completion_tokens` (e.g. `[0.5, 2]`); the runs take the lengths as given, the answers' intervals carry "
        "the range; unset: the lengths are known (fitted to a log or to rollout dumps)",
    )
    task: str | None = Field(
        None,
        description="executor: a shipped task name or `module:function`; unset: timing mode (lengths drawn, "
        "enforced), unless `prompts` is given",
    )
    prompts: Path | None = Field(
        None,
        description="executor: task mode on a prompts file (JSONL, one `{prompt, ...}` per line; relative to the "
        "scenario file), tokenized by `model.path`'s own tokenizer; with `reward`",
    )
    reward: str | None = Field(
        None,
        description="executor: the reward function of task mode on `prompts`, `module:function` scoring a "
        "completion: `f(completion_text, record) -> float`",
    )

    @field_validator("prompts")
    @classmethod
    def _prompts_beside_the_scenario(cls, path: Path | None, info: ValidationInfo) -> Path | None:
        if path is None:
            return None
        base = (info.context or {}).get("base_dir")
        resolved = (Path(base) / path if base and not path.is_absolute() else path).resolve()
        if not resolved.is_file():
            raise ValueError(f"file not found: {resolved}")
        return resolved

    @field_validator("completion_scale_by_step")
    @classmethod
    def _steps_increase(cls, points: tuple[tuple[int, float], ...] | None) -> tuple[tuple[int, float], ...] | None:
        if points is not None:
            if not points:
                raise ValueError("give at least one [step, factor] point, or leave it unset")
            steps = [step for step, _ in points]
            if any(later <= earlier for earlier, later in itertools.pairwise(steps)):
                raise ValueError(f"steps {steps}: each point's step must be above the one before")
            if any(factor > MAX_LENGTH_FACTOR for _, factor in points):
                raise ValueError(f"a factor above {MAX_LENGTH_FACTOR:g}: no run's lengths move that far")
        return points

    @field_validator("length_range")
    @classmethod
    def _ordered(cls, span: tuple[float, float] | None) -> tuple[float, float] | None:
        if span is not None and not span[0] <= span[1]:
            raise ValueError(f"[{span[0]:g}, {span[1]:g}]: the low end is above the high end")
        return span

    @model_validator(mode="after")
    def _one_task_source(self) -> WorkloadSpec:
        if (self.prompts is None) != (self.reward is None):
            raise ValueError("reward: a prompts file and a reward function go together; give both or neither")
        if self.prompts is not None and self.task is not None:
            raise ValueError("task: give a task, or prompts and reward, not both")
        return self

    @property
    def samples_per_step(self) -> int:
        return self.prompts_per_step * self.samples_per_prompt

    @property
    def task_mode(self) -> bool:
        """A real reward (a task, or prompts and reward) rather than timing mode."""
        return self.task is not None or self.prompts is not None
