"""``asyncrl from-verl``: the scenario of a verl trainer config or launch script, with the flags for the rest.

from-verl CONFIG.yaml|SCRIPT.sh [KEY=VALUE ...] --device D --lengths L|LOG|DUMPS ─► Imported
    --lengths LOG    a lognormal fitted to the metrics log's response_length/* (its prompt_length/mean too)
    --lengths DUMPS  verl's rollout dumps, counted with the model's tokenizer, as an empirical lengths file
a console log that printed its config ─► the same, for calibrate --from-log (scenario_from_log)
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from asyncrl.scenarios.files.errors import ScenarioError

from asyncrl.frameworks.common.command import (
    Imported,
    config_arguments,
    default_file,
    device_option,
    lengths_assumed,
    run_name,
    settled,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    config_arguments(
        parser,
        "CONFIG",
        "verl's resolved trainer config (Hydra YAML, .yaml), or a recipe's launch script (its `python -m verl…` "
        "or `python3 -m recipe…` key=value lines are read, the shell variables expanded; it is never run)",
        "overrides of the verl config, as verl's command line takes them (e.g. trainer.nnodes=2)",
    )
    parser.add_argument("--name", help="scenario name (default: trainer.experiment_name)")


def verl_scenario(args: argparse.Namespace, write_relative_to: Path | None) -> tuple[Imported, Path]:
    """The scenario a verl config or launch script describes, with the flags (``from-verl``, ``plan``); without
    ``--device``, on the GPU a metrics log given as ``--lengths`` names (``on_the_logs_gpu``)."""
    from asyncrl.frameworks.common.metrics_log import is_metrics_log

    if args.device is None and args.lengths is not None and is_metrics_log(Path(args.lengths)):
        return on_the_logs_gpu(args, write_relative_to)
    return _verl_scenario(args, write_relative_to)


def on_the_logs_gpu(args: argparse.Namespace, write_relative_to: Path | None) -> tuple[Imported, Path]:
    """The scenario on the GPU whose peak the ``--lengths`` log's ``perf/mfu/actor`` divides by (``log_device``);
    of several with that peak the one with the most memory (an A100 80 GB over 40 GB; an A800 wants its name)."""
    from asyncrl.frameworks.common.metrics_log import read_metrics_log
    from asyncrl.frameworks.verl.log_device import logged_peak, roomiest

    flag = getattr(args, "device_flag", "--device")
    guess = argparse.Namespace(**{**vars(args), "device": "h100", "device_from": "(a guess, for the work alone)"})
    provisional, _ = _verl_scenario(guess, write_relative_to)
    peak = logged_peak(read_metrics_log(Path(args.lengths)), provisional.scenario)
    if peak is None or not peak.devices:
        why = f"its perf/mfu/actor divides by {peak.text()}" if peak else "it logs no perf/mfu/actor to tell it"
        raise ScenarioError(f"{flag}: give the GPU {args.lengths}'s run used (a catalogue name: asyncrl list); {why}")
    device = roomiest(peak.devices)
    named = argparse.Namespace(**{**vars(args), "device": device, "device_from": f"{args.lengths}'s perf/mfu/actor"})
    imported, out = _verl_scenario(named, write_relative_to)
    imported.plan.notes.append(f"hardware.device = {device}: verl's perf/mfu/actor divides by {peak.text()}")
    return imported, out


def _verl_scenario(args: argparse.Namespace, write_relative_to: Path | None) -> tuple[Imported, Path]:
    from asyncrl.frameworks.common.metrics_log import MetricsLogError
    from asyncrl.frameworks.verl.importer import VerlError, lengths_option, lookup, plan_from_verl, read_verl
    from asyncrl.frameworks.verl.log_lengths import verl_metrics_fit

    try:
        verl = read_verl(args.config, list(getattr(args, "assignments", [])))
        config = verl.config
        name = getattr(args, "name", None) or run_name(lookup(config, "trainer.experiment_name"), args.config)
        out = write_relative_to or default_file(name)
        fit = verl_metrics_fit(args.lengths, config)  # --lengths names a metrics log: a lognormal fitted to it
        dumps = rollout_dump_lengths(args.lengths, lookup(config, "actor_rollout_ref.model.path"), out)
        from_dumps = dumps[0] if dumps else None
        completion = (
            fit.completion_tokens() if fit else from_dumps or lengths_option(args.lengths, "--lengths", out.parent)
        )
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
            device_from=getattr(args, "device_from", "--device"),
        )
        plan.notes[:0] = verl.notes
        plan.notes += fit.verl_notes(prompt_from_log=prompt is None) if fit else []
        if fit is not None and fit.scale_by_step is not None:
            plan.scenario["workload"]["completion_scale_by_step"] = [list(point) for point in fit.scale_by_step]
            plan.source("workload.completion_scale_by_step", from_log, fit.scale_snippet())
        if dumps is not None and fit is None:
            group_correlation_from_dumps(plan, Path(args.lengths), dumps[1])
    except (VerlError, MetricsLogError) as exc:
        raise ScenarioError(str(exc)) from None
    if not fit and not dumps:
        lengths_assumed(plan)
    scenario = settled(plan, out)
    if fit is not None and getattr(args, "device_from", "--device") == "--device":  # a device the user named
        from asyncrl.frameworks.common.metrics_log import read_metrics_log
        from asyncrl.frameworks.verl.log_device import device_notes

        plan.notes += device_notes(read_metrics_log(Path(args.lengths)), scenario, disagreeing_only=True)
    return Imported(scenario, plan, verl.origin), out


def rollout_dump_lengths(text: str | None, model_path: Any, out: Path) -> tuple[dict[str, Any], Any] | None:
    """``--lengths DIR`` of verl's rollout dumps: their responses counted in tokens of the model's own tokenizer,
    written beside the scenario as an empirical lengths file, and how alike a group's are
    (``analysis.fits.lengths.GroupCorrelation``, None where the dumps do not tell it); None when ``text`` is not a
    directory."""
    import os

    from asyncrl.analysis.fits.lengths import fit_group_correlation, write_lengths

    from asyncrl.frameworks.verl.rollout_dumps import read_rollout_dumps

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
    correlation = fit_group_correlation(lengths.values, lengths.groups) if lengths.groups is not None else None
    return {"kind": "empirical", "path": os.path.relpath(written.resolve(), out.parent.resolve())}, correlation


def group_correlation_from_dumps(plan: Any, directory: Path, fitted: Any) -> None:
    """``workload.group_correlation`` from the dumps' groups (one prompt in one step), where they told it."""
    if fitted is None:
        plan.notes.append(
            f"--lengths: {directory}'s dumps hold too few groups of one prompt to fit how alike a "
            "group's lengths are; workload.group_correlation stays 0 (independent)"
        )
        return
    plan.scenario["workload"]["group_correlation"] = round(fitted.value, 4)
    how = f"--lengths ({directory}: {fitted.groups:,} groups, 95% {fitted.low:.2f}-{fitted.high:.2f})"
    plan.source("workload.group_correlation", how, round(fitted.value, 4))


def prints_config(log: Path) -> bool:
    """Whether a console log holds the config verl printed at its start."""
    from asyncrl.frameworks.verl.printed import has_printed_config

    return log.is_file() and has_printed_config(log)


def scenario_from_log(log: Path, device: Any, preset: str | None) -> Imported:
    """The run of a console log that printed its verl config, its lengths fitted to the same log; ``device``
    None: the GPU its ``perf/mfu/actor`` names (``on_the_logs_gpu``)."""
    own = argparse.Namespace(config=log, lengths=str(log), prompt_lengths=None, device=device, preset=preset)
    return verl_scenario(argparse.Namespace(**vars(own), device_flag="--hardware"), Path(f"{log.stem}.yaml"))[0]


def rollout_dumps(directory: Path, field: str | None, tokenizer: str | None, count: str) -> Any:
    """The completion lengths of verl's rollout dumps (``trainer.rollout_data_dir``): ``asyncrl lengths DIR``."""
    from asyncrl.frameworks.verl.rollout_dumps import read_rollout_dumps

    return read_rollout_dumps(directory, field, tokenizer, count)


def metrics_lengths(log: Any, **options: Any) -> Any:
    """A capped lognormal pinned by a metrics log's ``response_length/*``: ``asyncrl lengths --from-log LOG``."""
    from asyncrl.frameworks.verl.log_lengths import fit_from_metrics

    return fit_from_metrics(log, **options)
