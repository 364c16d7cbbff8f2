"""What the framework importers share: the model a run names, and what its settings cannot say.

    the model setting (verl's actor_rollout_ref.model.path, OpenRLHF's --pretrain) ─► model_section:
        --preset, else the checkpoint's config.json on this machine, else the preset its name names
    the settings and the flags ─► missing_inputs: every piece still wanted (preset, device, lengths), at once

Used by ``asyncrl/frameworks/verl/importer.py`` and ``asyncrl/frameworks/openrlhf/importer.py``; each records its sources in an ``ImportPlan``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from asyncrl.scenarios.costs.catalog import MODEL_PRESETS
from asyncrl.scenarios.costs.memory import rollouts_that_fit
from asyncrl.scenarios.files.textfile import safe_load
from asyncrl.scenarios.spec.model_config import config_path

from asyncrl.frameworks.common.provenance import ImportPlan, SettingsError

if TYPE_CHECKING:
    from asyncrl.scenarios.spec.scenario import Scenario

#: Words of a fine-tuned variant's name that leave its architecture as the base model's (Qwen2.5-Math-7B
#: has Qwen2.5-7B's layers, widths and vocabulary).
VARIANT_WORDS = ("-math", "-coder", "-instruct", "-chat", "-base")
LENGTH_FORMS = "a lengths file, a JSONL log, a verl metrics log, or e.g. '{kind: lognormal, median: 800, sigma: 1}'"


def guess_preset(model_path: str) -> str | None:
    """The longest preset name inside the model's name, variant words left out
    (``Qwen/Qwen2.5-7B-Instruct`` and ``Qwen/Qwen2.5-Math-7B`` → ``qwen2.5-7b``)."""
    for part in reversed(Path(model_path.rstrip("/")).parts):  # the Hugging Face cache's models--Org--Name/snapshots/…
        name = part.lower().rpartition("--")[2]
        for word in VARIANT_WORDS:
            name = name.replace(word, "")
        found = [preset for preset in MODEL_PRESETS if preset != "tiny" and preset in name]
        if found:
            return max(found, key=len)
    return None


def model_section(plan: ImportPlan, setting: str, path: str, preset: str | None) -> dict[str, Any]:
    """``--preset`` if given, else the checkpoint's own config.json where it is on this machine (a directory,
    or a hub name in the local cache: ``scenarios.spec.model_config``), else the preset its name names."""
    if preset is not None:
        plan.source("model.preset", "--preset", preset)
        return {"preset": preset}
    if config_path(Path(path)) is not None:
        plan.source("model.path", f"{setting} (its config.json)", path)
        return {"path": path}
    plan.source("model.preset", setting, path)
    return {"preset": guess_preset(path)}


def missing_inputs(
    framework: str, setting: str, path: str, device: Any, completion: Any, preset: str | None, cap: str
) -> list[str]:
    """What the framework's settings cannot give and the flags must (each named: ``preset: ...``), all at once."""
    missing = []
    if preset is None and guess_preset(path) is None and config_path(Path(path)) is None:
        missing.append(
            f"preset: {setting} {path or '(unset)'} is not a model preset, nor a checkpoint with a config.json on "
            "this machine; give the closest preset (asyncrl list shows them)"
        )
    if device is None:
        missing.append(f"device: {framework} does not say which GPU; give one (h100, a100-80g, h200, ...)")
    if completion is None:
        missing.append(f"lengths: {framework} gives only the cap ({cap}); give the completion lengths ({LENGTH_FORMS})")
    return missing


def lengths_option(text: str | None, flag: str, out_dir: Path) -> dict[str, Any] | None:
    """``--lengths``: a lengths file or JSONL log (kind: empirical, its path relative to the scenario), or a
    distribution written as YAML (``{kind: lognormal, median: 800, sigma: 1}``). A verl metrics log never
    gets here: the command fits it first (``asyncrl.frameworks.verl.log_lengths.verl_metrics_fit``)."""
    import os

    import yaml

    if text is None:
        return None
    path = Path(text).expanduser()
    if path.is_file():
        return {"kind": "empirical", "path": os.path.relpath(path.resolve(), out_dir.resolve())}
    try:
        value = safe_load(text)
    except yaml.YAMLError:
        value = None
    if not isinstance(value, dict) or "kind" not in value:
        raise SettingsError(
            f"{flag}: {text!r} is neither a file nor a distribution like '{{kind: lognormal, median: 800, sigma: 1}}'"
        )
    return value


def settle_concurrency(plan: ImportPlan, scenario: Scenario) -> bool:
    """Lower ``schedule.max_concurrency`` to the rollouts whose KV cache fits (vLLM admits no more); True when
    it changed the plan (validate the scenario again)."""
    wanted = plan.scenario["schedule"].get("max_concurrency")
    if wanted is None:
        return False
    model = scenario.model
    fits = rollouts_that_fit(
        model.weight_bytes,
        model.kv_bytes_per_token,
        scenario.hardware.spec.memory_bytes,
        scenario.cluster.devices_per_engine,
        scenario.expected_rollout_tokens,
        scenario.cluster.gpu_memory_utilization,
        limit=wanted,
    )
    if fits >= wanted:
        return False
    group = scenario.workload.samples_per_prompt
    plan.scenario["schedule"]["max_concurrency"] = max(group, fits)
    plan.notes.append(
        f"schedule.max_concurrency = {max(group, fits)}: the framework allows {wanted} rollouts per engine, its KV cache holds "
        f"{fits} of {scenario.expected_rollout_tokens:,.0f} tokens on average"
    )
    return True
