"""What the framework importers share: the model a run names, and what its settings cannot say.

    the model setting (verl's actor_rollout_ref.model.path, OpenRLHF's --pretrain) ─► model_section:
        --preset, else the checkpoint's config.json on this machine, else the preset its name names
    the settings and the flags ─► missing_inputs: every piece still wanted (preset, device, lengths), at once

Used by ``scenarios/verl.py`` and ``scenarios/openrlhf.py``; each records its sources in an ``ImportPlan``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from asyncrl.scenarios.catalog import MODEL_PRESETS
from asyncrl.scenarios.model_config import config_path
from asyncrl.scenarios.provenance import ImportPlan

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
    or a hub name in the local cache: ``scenarios.model_config``), else the preset its name names."""
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
