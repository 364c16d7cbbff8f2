"""``asyncrl lengths`` and ``asyncrl from-verl``: a scenario's inputs from the logs and configs a user has.

    lengths FILE.jsonl | --from-log LOG [--out DIR]   lengths.txt, fits.json, lengths.png in DIR
    from-verl CONFIG.yaml [KEY=VALUE ...] [--out FILE.yaml]   the scenario file of a verl run

``lengths --out`` is a directory (default ``runs/lengths-<file stem>``); ``from-verl --out`` a scenario
file ending in ``.yaml`` or ``.yml`` (default ``<name>.yaml``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from asyncrl.arguments import assignment, positive
from asyncrl.commands.common import output_directory, output_file, plot_path, print_json
from asyncrl.scenarios.loading import ScenarioError

YAML = (".yaml", ".yml")


def add_parsers(commands: argparse._SubParsersAction) -> None:
    _lengths_parser(commands)
    _from_verl_parser(commands)


def _lengths_parser(commands: argparse._SubParsersAction) -> None:
    lengths = commands.add_parser(
        "lengths",
        help="completion lengths from a JSONL log (an empirical length file, fitted tails, a histogram), "
        "or a lognormal fitted to a verl metrics log",
    )
    lengths.add_argument("file", type=Path, nargs="?", metavar="FILE.jsonl", help="one JSON object per completion")
    lengths.add_argument(
        "--from-log",
        type=Path,
        metavar="LOG",
        help="instead of FILE: a verl metrics log (FileLogger JSONL, or a TensorBoard directory or event file); "
        "fits a capped lognormal to its response_length/mean, /max, /clip_ratio",
    )
    lengths.add_argument(
        "--samples-per-step",
        type=positive,
        metavar="N",
        help="with --from-log: responses per step (train_batch_size × rollout.n); needed when none hit the cap",
    )
    lengths.add_argument(
        "--field",
        help="the key holding the completion: text, a token count or token ids (default: the first of "
        "response_length, completion_tokens, num_tokens, response_ids, completion_ids, length, output, response, "
        "completion, text, generated_text)",
    )
    lengths.add_argument(
        "--tokenizer",
        metavar="PATH",
        help="count text in tokens of this local tokenizer (a directory, or a cached name)",
    )
    lengths.add_argument(
        "--count",
        choices=["words", "chars"],
        default="words",
        help="without --tokenizer, count text as whitespace-separated words (default) or characters",
    )
    lengths.add_argument(
        "--max-tokens",
        type=positive,
        help="cap of the fits (default: the longest length seen; with --from-log, the longest logged where some "
        "responses hit the cap)",
    )
    lengths.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="directory for lengths.txt, fits.json, lengths.png (default: runs/lengths-<file stem>)",
    )
    lengths.add_argument("--json", action="store_true", help="print JSON instead of a table")
    lengths.set_defaults(command=run_lengths)


def _from_verl_parser(commands: argparse._SubParsersAction) -> None:
    verl = commands.add_parser("from-verl", help="a scenario from the verl trainer config you launch with")
    verl.add_argument("config", type=Path, metavar="CONFIG.yaml", help="verl's resolved trainer config (Hydra YAML)")
    verl.add_argument(
        "assignments",
        nargs="*",
        type=assignment,
        metavar="KEY=VALUE",
        help="overrides of the verl config, as verl's command line takes them (e.g. trainer.nnodes=2)",
    )
    verl.add_argument(
        "--lengths",
        metavar="FILE|DIST",
        help="completion lengths: a lengths file or JSONL log (see asyncrl lengths), a verl metrics log (a "
        "lognormal fitted to its response_length/*), or a distribution such as '{kind: lognormal, median: 800, "
        "sigma: 1}'; capped at data.max_response_length",
    )
    verl.add_argument("--prompt-lengths", metavar="FILE|DIST", help="prompt lengths (default: every prompt at the cap)")
    verl.add_argument("--device", help="the GPU (verl's config does not say): h100, a100-80g, h200, ...")
    verl.add_argument("--preset", help="model preset, where the model path's name is not one (asyncrl list)")
    verl.add_argument("--name", help="scenario name (default: trainer.experiment_name)")
    verl.add_argument(
        "--out",
        type=Path,
        metavar="FILE.yaml",
        help="scenario file to write, a name ending in .yaml or .yml (default: <name>.yaml)",
    )
    verl.set_defaults(command=run_from_verl)


def run_lengths(args: argparse.Namespace) -> int:
    from asyncrl.analysis.lengths import fit_all, lengths_lines, lengths_report, read_lengths, write_lengths
    from asyncrl.analysis.metrics_log import is_metrics_log

    if (args.file is None) == (args.from_log is None):
        raise ScenarioError("give one of FILE.jsonl (a completions log) or --from-log LOG (a metrics log)")
    if args.out is not None:
        output_directory(args.out)
    if args.from_log is not None:
        return _lengths_from_log(args)
    if args.samples_per_step is not None:
        raise ScenarioError("--samples-per-step: only with --from-log (a completions log has every length)")
    if is_metrics_log(args.file):
        raise ScenarioError(f"FILE.jsonl: {args.file} is a metrics log (a line per step); read it with --from-log")
    lengths = read_lengths(args.file, args.field, args.tokenizer, args.count)
    fits = fit_all(lengths.values, args.max_tokens)
    out = args.out or Path("runs") / f"lengths-{args.file.stem}"
    lengths_file = write_lengths(lengths.values, out / "lengths.txt")
    report = lengths_report(lengths, fits, lengths_file)
    (out / "fits.json").write_text(json.dumps(report, indent=2) + "\n")
    plot = plot_path(None, out / "lengths.png")
    if plot is not None:
        from asyncrl.analysis.length_plots import length_histogram

        length_histogram(lengths, fits, plot)
    if args.json:
        return print_json(report)
    print(lengths_lines(lengths, fits, lengths_file, plot))
    return 0


def _lengths_from_log(args: argparse.Namespace) -> int:
    from asyncrl.analysis.log_lengths import fit_from_metrics, metrics_fit_lines, metrics_fit_report
    from asyncrl.analysis.metrics_log import MetricsLogError, is_metrics_log, read_metrics_log

    if args.field is not None or args.tokenizer is not None:
        raise ScenarioError("--field, --tokenizer: only for a completions log FILE.jsonl, not with --from-log")
    if args.from_log.is_file() and not is_metrics_log(args.from_log):
        raise ScenarioError(
            f"--from-log: {args.from_log} is not a metrics log (a completions log is read as FILE.jsonl)"
        )
    try:
        log = read_metrics_log(args.from_log)
        fit = fit_from_metrics(
            log,
            samples_per_step=args.samples_per_step,
            max_tokens=args.max_tokens,
            cap_flag="--max-tokens",  # also the cap_from the fit reports
            samples_flag="--samples-per-step",
        )
    except MetricsLogError as exc:
        raise ScenarioError(str(exc)) from None
    out = args.out or Path("runs") / f"lengths-{args.from_log.stem}"
    out.mkdir(parents=True, exist_ok=True)
    report = metrics_fit_report(fit, log)
    (out / "fits.json").write_text(json.dumps(report, indent=2) + "\n")
    if args.json:
        return print_json(report)
    print(metrics_fit_lines(fit, log, out / "fits.json"))
    return 0


def run_from_verl(args: argparse.Namespace) -> int:
    from asyncrl.analysis.log_lengths import verl_metrics_fit
    from asyncrl.analysis.metrics_log import MetricsLogError
    from asyncrl.scenarios.loading import validate_scenario
    from asyncrl.scenarios.verl import VerlError, lengths_option, lookup, plan_lines, read_config

    if args.out is not None:
        output_file(args.out, YAML)
    try:
        config = read_config(args.config, args.assignments)
        name = args.name or str(lookup(config, "trainer.experiment_name", "") or args.config.stem)
        out = args.out or Path(f"{name}.yaml")
        fit = verl_metrics_fit(args.lengths, config)  # --lengths names a metrics log: a lognormal fitted to it
        completion = fit.completion_tokens() if fit else lengths_option(args.lengths, "--lengths", out.parent)
        prompt = lengths_option(args.prompt_lengths, "--prompt-lengths", out.parent)
        plan = _plan(args, config, name, completion, prompt or (fit.prompt_tokens() if fit else None))
        plan.notes += fit.verl_notes(prompt_from_log=prompt is None) if fit else []
    except (VerlError, MetricsLogError) as exc:
        raise ScenarioError(str(exc)) from None
    scenario = _settled(plan, validate_scenario(plan.scenario, base_dir=out.parent.resolve()), out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(f"# from {args.config} by asyncrl from-verl\n" + _yaml_dump(plan.scenario))
    print(plan_lines(plan))
    print(
        f"wrote {out} ({scenario.schedule.kind} on {scenario.cluster.total_devices} {scenario.hardware.device_name}); "
        f"next: asyncrl simulate {out}"
    )
    return 0


def _plan(args: argparse.Namespace, config: Any, name: str, completion: Any, prompt: Any) -> Any:
    from asyncrl.scenarios.verl import plan_from_verl

    return plan_from_verl(
        config, name=name, device=args.device, completion_tokens=completion, prompt_tokens=prompt, preset=args.preset
    )


def _settled(plan: Any, scenario: Any, out: Path) -> Any:
    """The scenario, validated again when verl's max_num_seqs had to come down to what the KV cache holds."""
    from asyncrl.scenarios.loading import validate_scenario
    from asyncrl.scenarios.verl import settle_concurrency

    if settle_concurrency(plan, scenario):
        return validate_scenario(plan.scenario, base_dir=out.parent.resolve())
    return scenario


def _yaml_dump(data: dict[str, Any]) -> str:
    import yaml

    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
