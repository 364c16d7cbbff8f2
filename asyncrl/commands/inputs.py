"""``asyncrl lengths``: a scenario's completion lengths from the logs a user has.

    lengths FILE.jsonl | DUMPS/ | --from-log LOG [--out DIR]   lengths.txt, fits.json, lengths.png in DIR

``--out`` is a directory (default ``runs/lengths-<file stem>``). The scenario of a framework's run
(``from-verl``, ``from-openrlhf``) is ``asyncrl.commands.importers``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from asyncrl.scenarios.files.textfile import dumps
from asyncrl.scenarios.files.writing import write_text
from asyncrl.scenarios.record.outputs import check_directory, default_run_dir
from asyncrl.scenarios.spec.loading import ScenarioError

from asyncrl.commands.arguments import positive
from asyncrl.commands.common import DIRECTORY_HELP, force_argument, output_directory, plot_path, print_json


def add_parsers(commands: argparse._SubParsersAction) -> None:
    _lengths_parser(commands)


def _lengths_parser(commands: argparse._SubParsersAction) -> None:
    lengths = commands.add_parser(
        "lengths",
        help="completion lengths from a JSONL log (an empirical length file, fitted tails, a histogram), "
        "or a lognormal fitted to a verl metrics log",
    )
    lengths.add_argument(
        "file",
        type=Path,
        nargs="?",
        metavar="FILE.jsonl",
        help="one JSON object per completion; or a directory of verl's rollout dumps (trainer.rollout_data_dir: a "
        "JSONL file per step, the text in `output`)",
    )
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
        "--scenario",
        metavar="SCENARIO",
        help="count text in tokens of this scenario's tokenizer (its model.path: a local checkpoint or a cached name)",
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
    force_argument(lengths, DIRECTORY_HELP)
    lengths.set_defaults(command=run_lengths)


def run_lengths(args: argparse.Namespace) -> int:
    from asyncrl.analysis.fits.lengths import (
        fit_all,
        fit_group_correlation,
        lengths_lines,
        lengths_report,
        read_lengths,
        write_lengths,
    )

    from asyncrl.frameworks.common.metrics_log import is_metrics_log

    if (args.file is None) == (args.from_log is None):
        raise ScenarioError("give one of FILE.jsonl (a completions log) or --from-log LOG (a metrics log)")
    if args.out is not None:
        check_directory(args.out, "--out", force=args.force)
    if args.from_log is not None:
        return _lengths_from_log(args)
    if args.samples_per_step is not None:
        raise ScenarioError("--samples-per-step: only with --from-log (a completions log has every length)")
    tokenizer = _tokenizer(args)
    if args.file.is_dir():
        lengths = _rollout_dumps(args.file, args.field, tokenizer, args.count)
    elif is_metrics_log(args.file):
        raise ScenarioError(f"FILE.jsonl: {args.file} is a metrics log (a line per step); read it with --from-log")
    else:
        lengths = read_lengths(args.file, args.field, tokenizer, args.count)
    fits = fit_all(lengths.values, args.max_tokens)
    out = output_directory(args.out or default_run_dir(f"lengths-{args.file.stem}"), force=args.force or not args.out)
    lengths_file = write_lengths(lengths.values, out / "lengths.txt")
    groups = lengths.groups
    correlation = fit_group_correlation(lengths.values, groups) if groups is not None else None
    report = lengths_report(lengths, fits, lengths_file, correlation)
    write_text(out / "fits.json", dumps(report, indent=2) + "\n")
    plot = plot_path(None, out / "lengths.png")
    if plot is not None:
        from asyncrl.analysis.plots.length_plots import length_histogram

        length_histogram(lengths, fits, plot)
    if args.json:
        return print_json(report)
    print(lengths_lines(lengths, fits, lengths_file, plot, correlation))
    if args.file.is_dir() and lengths.counted_from_text:
        print(f"note: {RETOKENIZED}")
    return 0


#: What ``lengths DIR`` says of rollout dumps that hold text rather than token ids.
RETOKENIZED = "verl's dumps hold decoded text: counted again, without the end-of-sequence token the decode dropped"


def _rollout_dumps(directory: Path, field: str | None, tokenizer: str | None, count: str) -> Any:
    """The lengths of a framework's rollout dumps (the registered framework that writes them)."""
    from asyncrl.frameworks.registry import with_capability

    framework = with_capability("rollout_dumps")
    if framework is None or framework.rollout_dumps is None:
        raise ScenarioError(f"FILE.jsonl: {directory} is a directory, and no framework's rollout dumps are read")
    return framework.rollout_dumps(directory, field, tokenizer, count)


def _metrics_lengths(log: Any, **options: Any) -> Any:
    """The completion lengths a metrics log pins (the registered framework whose log keys they are)."""
    from asyncrl.frameworks.registry import with_capability

    framework = with_capability("metrics_lengths")
    assert framework is not None and framework.metrics_lengths is not None
    return framework.metrics_lengths(log, **options)


def _tokenizer(args: argparse.Namespace) -> str | None:
    """``--tokenizer``, or the tokenizer of ``--scenario``'s model.path."""
    if args.scenario is None:
        return args.tokenizer
    if args.tokenizer is not None:
        raise ScenarioError("--tokenizer, --scenario: give one (the scenario's tokenizer is its model.path)")
    from asyncrl.scenarios.spec.loading import load_scenario

    path = load_scenario(args.scenario).model.path
    if path is None:
        raise ScenarioError(f"--scenario: {args.scenario} has no model.path, whose tokenizer would count the text")
    return str(path)


def _lengths_from_log(args: argparse.Namespace) -> int:
    from asyncrl.frameworks.common.metrics_fit import metrics_fit_lines, metrics_fit_report
    from asyncrl.frameworks.common.metrics_log import MetricsLogError, is_metrics_log, read_metrics_log

    if args.field is not None or args.tokenizer is not None:
        raise ScenarioError("--field, --tokenizer: only for a completions log FILE.jsonl, not with --from-log")
    if args.scenario is not None:
        raise ScenarioError("--scenario: only for a completions log FILE.jsonl or rollout dumps, not with --from-log")
    if args.from_log.is_file() and not is_metrics_log(args.from_log):
        raise ScenarioError(
            f"--from-log: {args.from_log} is not a metrics log (a completions log is read as FILE.jsonl)"
        )
    try:
        log = read_metrics_log(args.from_log)
        fit = _metrics_lengths(
            log,
            samples_per_step=args.samples_per_step,
            max_tokens=args.max_tokens,
            cap_flag="--max-tokens",  # also the cap_from the fit reports
            samples_flag="--samples-per-step",
        )
    except MetricsLogError as exc:
        raise ScenarioError(str(exc)) from None
    out = output_directory(
        args.out or default_run_dir(f"lengths-{args.from_log.stem}"), force=args.force or not args.out
    )
    report = metrics_fit_report(fit, log)
    write_text(out / "fits.json", dumps(report, indent=2) + "\n")
    if args.json:
        return print_json(report)
    print(metrics_fit_lines(fit, log, out / "fits.json"))
    return 0
