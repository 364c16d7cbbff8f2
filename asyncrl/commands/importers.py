"""``asyncrl from-verl``, ``from-openrlhf``, ``from-nemo-rl``: the scenario of a run a framework user launches.

    from-verl CONFIG.yaml|SCRIPT.sh [KEY=VALUE ...] --device D --lengths L [--out FILE.yaml]
    from-openrlhf SCRIPT.sh | -- --flag value ...   --device D --lengths L [--out FILE.yaml]
    from-nemo-rl CONFIG.yaml [KEY=VALUE ...]        --device D --lengths L --prompt-lengths P [--out FILE.yaml]
        ─► the provenance table (scenario key <- setting = value), and the scenario file, each of its
           fields' lines ending in where it came from

``--out`` is a scenario file ending in ``.yaml`` or ``.yml`` (default ``<name>.yaml``). ``asyncrl plan``
builds its scenario the same way (``scenario_from_framework``), without writing it unless asked.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from asyncrl.arguments import assignment
from asyncrl.commands.common import REPLACE_HELP, force_argument, output_file
from asyncrl.scenarios.loading import ScenarioError
from asyncrl.scenarios.outputs import check_output_file, safe_file_name
from asyncrl.scenarios.textfile import safe_load
from asyncrl.scenarios.writing import write_text

YAML = (".yaml", ".yml")


def add_parsers(commands: argparse._SubParsersAction) -> None:
    verl = commands.add_parser("from-verl", help="a scenario from the verl trainer config or launch script you use")
    config_arguments(
        verl,
        "CONFIG",
        "verl's resolved trainer config (Hydra YAML, .yaml), or a recipe's launch script (its `python -m verl…` "
        "or `python3 -m recipe…` key=value lines are read, the shell variables expanded; it is never run)",
        "overrides of the verl config, as verl's command line takes them (e.g. trainer.nnodes=2)",
    )
    framework_arguments(verl, "verl's config")
    verl.add_argument("--name", help="scenario name (default: trainer.experiment_name)")
    verl.set_defaults(command=run_from_verl)
    openrlhf = commands.add_parser(
        "from-openrlhf", help="a scenario from the OpenRLHF launch script or command you use (train_ppo_ray's flags)"
    )
    openrlhf.add_argument(
        "source",
        nargs="+",
        metavar="SCRIPT | -- COMMAND",
        help="a launch script (its `python3 -m openrlhf.cli.train_ppo_ray …` line is read, the shell variables and "
        "arrays expanded; it is never run), or after `--` the command itself (or just its flags)",
    )
    framework_arguments(openrlhf, "OpenRLHF's flags")
    openrlhf.add_argument("--name", help="scenario name (default: the script's name, else openrlhf)")
    openrlhf.set_defaults(command=run_from_openrlhf)
    nemo = commands.add_parser("from-nemo-rl", help="a scenario from the NeMo-RL GRPO config (recipe) you run")
    config_arguments(
        nemo,
        "CONFIG.yaml",
        "a NeMo-RL config or recipe: its defaults chain is merged and its ${...} filled as NeMo-RL does",
        "overrides, as NeMo-RL's command line takes them (e.g. cluster.num_nodes=4)",
    )
    framework_arguments(nemo, "NeMo-RL's config")
    nemo.add_argument("--name", help="scenario name (default: logger.wandb.name, else the file's name)")
    nemo.set_defaults(command=run_from_nemo_rl)


def config_arguments(parser: argparse.ArgumentParser, metavar: str, config_help: str, overrides_help: str) -> None:
    """A framework's config file and its KEY=VALUE overrides, as its own command line takes them."""
    parser.add_argument("config", type=Path, metavar=metavar, help=config_help)
    parser.add_argument("assignments", nargs="*", type=assignment, metavar="KEY=VALUE", help=overrides_help)


def framework_arguments(parser: argparse.ArgumentParser, config: str, out: bool = True) -> None:
    """What a framework's settings do not say, asked for with flags (``from-verl``, ``from-openrlhf``, ``plan``)."""
    parser.add_argument(
        "--lengths",
        metavar="FILE|DIST",
        help="completion lengths: a lengths file or JSONL log (see asyncrl lengths), a verl metrics log (a "
        "lognormal fitted to its response_length/*), or a distribution such as '{kind: lognormal, median: 800, "
        "sigma: 1}'; capped at the config's response cap",
    )
    parser.add_argument(
        "--prompt-lengths", metavar="FILE|DIST", help="prompt lengths (default: every prompt at the cap)"
    )
    parser.add_argument(
        "--device",
        help=f"the GPU ({config} does not say): a catalogue name (h100, a100-80g, h200, gb200, ...; asyncrl list), "
        "or its datasheet figures, e.g. '{name: my-gpu, peak_tflops: 989, hbm_gb: 80, hbm_gbps: 3350, nvlink_gbps: 450}'",
    )
    parser.add_argument("--preset", help="model preset, where the model path is neither a preset's name nor local")
    if out:
        parser.add_argument(
            "--out",
            type=Path,
            metavar="FILE.yaml",
            help="scenario file to write, a name ending in .yaml or .yml (default: <name>.yaml, the name made safe "
            "as a file name in this directory)",
        )
        force_argument(parser, REPLACE_HELP)


@dataclass
class Imported:
    """A scenario imported from a framework's settings: the validated scenario, its plan, and the file header."""

    scenario: Any  # Scenario
    plan: Any  # ImportPlan
    origin: str


def run_from_verl(args: argparse.Namespace) -> int:
    return _imported(args, verl_scenario, "asyncrl from-verl")


def run_from_openrlhf(args: argparse.Namespace) -> int:
    return _imported(args, openrlhf_scenario, "asyncrl from-openrlhf")


def run_from_nemo_rl(args: argparse.Namespace) -> int:
    return _imported(args, nemo_rl_scenario, "asyncrl from-nemo-rl")


def _imported(args: argparse.Namespace, build: Any, command: str) -> int:
    """Build the scenario (``build(args, write_relative_to)``), print where each field came from, write it."""
    if args.out is not None:
        output_file(args.out, YAML, force=args.force)
    imported, out = build(args, write_relative_to=args.out)
    if args.out is None:  # a name from the config: made safe (default_file), and a file there kept unless --force
        check_output_file(out, "--out", replace=args.force)
    _write(imported, out, command)
    return 0


def default_file(name: str) -> Path:
    """``<name>.yaml`` in the working directory, the name made one safe component (``../victim/user``, an
    absolute path: ``victim-user.yaml``), so a config's experiment name never chooses where asyncrl writes."""
    return Path(safe_file_name(name) + ".yaml")


def verl_scenario(args: argparse.Namespace, write_relative_to: Path | None) -> tuple[Imported, Path]:
    """The scenario a verl config or launch script describes, with the flags (``from-verl``, ``plan``)."""
    from asyncrl.analysis.log_lengths import verl_metrics_fit
    from asyncrl.analysis.metrics_log import MetricsLogError
    from asyncrl.scenarios.verl import VerlError, lengths_option, lookup, plan_from_verl, read_verl

    try:
        verl = read_verl(args.config, list(getattr(args, "assignments", [])))
        config = verl.config
        name = getattr(args, "name", None) or _name(lookup(config, "trainer.experiment_name"), args.config)
        out = write_relative_to or default_file(name)
        fit = verl_metrics_fit(args.lengths, config)  # --lengths names a metrics log: a lognormal fitted to it
        dumps = rollout_dump_lengths(args.lengths, lookup(config, "actor_rollout_ref.model.path"), out)
        completion = fit.completion_tokens() if fit else dumps or lengths_option(args.lengths, "--lengths", out.parent)
        prompt = lengths_option(args.prompt_lengths, "--prompt-lengths", out.parent)
        from_log = f"--lengths (a lognormal fitted to {args.lengths}'s response_length/*)"
        prompt_from = "--prompt-lengths" if prompt is not None else f"--lengths ({args.lengths}'s prompt_length/mean)"
        plan = plan_from_verl(
            config,
            name=name,
            device=device_option(args.device),
            completion_tokens=completion,
            prompt_tokens=prompt or (fit.prompt_tokens() if fit else None),
            preset=args.preset,
            given=verl.given,
            lengths_from=(from_log, prompt_from) if fit else ("--lengths", "--prompt-lengths"),
        )
        plan.notes[:0] = verl.notes
        plan.notes += fit.verl_notes(prompt_from_log=prompt is None) if fit else []
    except (VerlError, MetricsLogError) as exc:
        raise ScenarioError(str(exc)) from None
    if not fit and not dumps:
        _lengths_assumed(plan)
    return Imported(_settled(plan, out), plan, verl.origin), out


def rollout_dump_lengths(text: str | None, model_path: Any, out: Path) -> dict[str, Any] | None:
    """``--lengths DIR`` of verl's rollout dumps: their responses counted in tokens of the model's own tokenizer,
    written beside the scenario as an empirical lengths file; None when ``text`` is not a directory."""
    import os

    from asyncrl.analysis.lengths import write_lengths
    from asyncrl.analysis.rollout_dumps import read_rollout_dumps

    directory = Path(text).expanduser() if text else None
    if directory is None or not directory.is_dir():
        return None
    try:
        lengths = read_rollout_dumps(directory, None, str(model_path), "words")
    except ScenarioError as exc:
        raise ScenarioError(
            f"--lengths: {directory} holds text, counted with the model's tokenizer ({exc}); or count it with "
            f"`asyncrl lengths {directory} --tokenizer PATH` and give its lengths.txt"
        ) from None
    written = write_lengths(lengths.values, out.with_name(f"{out.stem}-lengths.txt"))
    return {"kind": "empirical", "path": os.path.relpath(written.resolve(), out.parent.resolve())}


def _name(experiment: Any, config: Path) -> str:
    """trainer.experiment_name, unless unset or made by a command the script was not run for: the file's name."""
    text = str(experiment or "")
    return text if text and "$(" not in text and "`" not in text else config.stem


def openrlhf_scenario(args: argparse.Namespace, write_relative_to: Path | None) -> tuple[Imported, Path]:
    """The scenario of an OpenRLHF launch script, or of its command's words (``from-openrlhf``)."""
    from asyncrl.scenarios.openrlhf import plan_from_openrlhf
    from asyncrl.scenarios.openrlhf_flags import Flags, parse_flags
    from asyncrl.scenarios.provenance import ImportPlan
    from asyncrl.scenarios.verl import VerlError

    words, origin, notes, stem = _openrlhf_words(args.source)
    name = args.name or stem
    out = write_relative_to or default_file(name)
    flags, written = parse_flags(words)
    plan = ImportPlan(scenario={}, framework="OpenRLHF", notes=notes)
    try:
        plan_from_openrlhf(
            Flags(flags, written, plan),
            name=name,
            **_framework_options(args, out),
        )
    except VerlError as exc:
        raise ScenarioError(str(exc)) from None
    _lengths_assumed(plan)
    return Imported(_settled(plan, out), plan, origin), out


def _framework_options(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """What ``framework_arguments`` asked for, as an importer's keywords (lengths files relative to ``out``)."""
    from asyncrl.scenarios.verl import lengths_option

    return {
        "device": device_option(args.device),
        "completion_tokens": lengths_option(args.lengths, "--lengths", out.parent),
        "prompt_tokens": lengths_option(args.prompt_lengths, "--prompt-lengths", out.parent),
        "preset": args.preset,
    }


def nemo_rl_scenario(args: argparse.Namespace, write_relative_to: Path | None) -> tuple[Imported, Path]:
    """The scenario of a NeMo-RL GRPO config or recipe (``from-nemo-rl``)."""
    from asyncrl.scenarios.nemo_rl import plan_from_nemo_rl
    from asyncrl.scenarios.nemo_rl_config import read_nemo_rl_config
    from asyncrl.scenarios.verl import VerlError

    config = read_nemo_rl_config(args.config, [str(item) for item in args.assignments])
    wandb = (config.get("logger") or {}).get("wandb") or {}
    name = args.name or _name(wandb.get("name") if isinstance(wandb, dict) else None, args.config)
    out = write_relative_to or default_file(name)
    try:
        plan = plan_from_nemo_rl(
            config,
            name=name,
            **_framework_options(args, out),
        )
    except VerlError as exc:
        raise ScenarioError(str(exc)) from None
    _lengths_assumed(plan)
    return Imported(_settled(plan, out), plan, str(args.config)), out


def _openrlhf_words(source: list[str]) -> tuple[list[str], str, list[str], str]:
    """(the flags' words, where they were read, what the script's expansion could not know, a name)."""
    from asyncrl.scenarios.launch_script import LaunchScriptError, read_launch_script

    if len(source) == 1 and not source[0].startswith("-"):
        path = Path(source[0])
        if not path.is_file():
            raise ScenarioError(f"SCRIPT: {path}: no such file (or give the command after --)")
        try:
            command = read_launch_script(path, ("openrlhf",))
        except LaunchScriptError as exc:
            raise ScenarioError(str(exc)) from None
        notes = [f"{path}: {', '.join(command.unset)} unset in the script (the environment is not read)"] * bool(
            command.unset
        )
        return command.arguments, f"{path}:{command.line} ({command.module})", notes, path.stem
    start = next(
        (i + 2 for i, word in enumerate(source[:-1]) if word == "-m" and source[i + 1].startswith("openrlhf")), 0
    )
    return source[start:], "the command line", [], "openrlhf"


def device_option(text: str | None) -> str | dict[str, Any] | None:
    """``--device``: a catalogue name, or a mapping of datasheet figures written as YAML (``{peak_tflops: …}``)."""
    import yaml

    if text is None or not text.lstrip().startswith("{"):
        return text
    try:
        value = safe_load(text)
    except yaml.YAMLError:
        value = None
    if not isinstance(value, dict):
        raise ScenarioError(f"--device: {text!r} is neither a device name nor a mapping of its datasheet figures")
    return value


#: The 95% range of the completion lengths' scale where ``--lengths`` is a distribution someone wrote down
#: rather than one measured (a lengths file, rollout dumps) or fitted to a log: half to twice it. verl's fully
#: async case goes from async 1.9x faster to slower than sync between medians of 600 and 1,500 tokens.
ASSUMED_LENGTH_RANGE = (0.5, 2.0)


def _lengths_assumed(plan: Any) -> None:
    """``workload.length_range`` for lengths given as a distribution: the answers' intervals carry it."""
    completion = plan.scenario.get("workload", {}).get("completion_tokens")
    if not isinstance(completion, dict) or completion.get("kind") == "empirical":
        return
    plan.scenario["workload"]["length_range"] = list(ASSUMED_LENGTH_RANGE)
    plan.source("workload.length_range", "--lengths", "a distribution, not measured: half to twice it (95%)")


def _settled(plan: Any, out: Path) -> Any:
    """The scenario, validated again when the engines' concurrency had to come down to what the KV cache holds."""
    from asyncrl.scenarios.loading import validate_scenario
    from asyncrl.scenarios.verl import settle_concurrency

    scenario = validate_scenario(plan.scenario, base_dir=out.parent.resolve())
    if settle_concurrency(plan, scenario):
        return validate_scenario(plan.scenario, base_dir=out.parent.resolve())
    return scenario


def _write(imported: Imported, out: Path, command: str) -> None:
    """The provenance table, then the scenario file with each field's source as a comment."""
    from asyncrl.scenarios.provenance import commented_yaml, plan_lines

    scenario = imported.scenario
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text(out, commented_yaml(imported.plan, f"from {imported.origin} by {command}"))
    setting = {"verl": "verl key", "NeMo-RL": "NeMo-RL key"}.get(imported.plan.framework, "flag")
    print(plan_lines(imported.plan, setting))
    print(
        f"wrote {out} ({scenario.schedule.kind} on {scenario.cluster.total_devices} {scenario.hardware.device_name}); "
        f"next: asyncrl simulate {out}, or asyncrl plan {out}"
    )
