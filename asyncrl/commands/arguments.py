"""Command-line plumbing the commands share: one-line errors, typed flag values, bare overrides, examples.

    argv ─► Parser.parse_known_args ─► namespace + leftovers ─► split_assignments
                  │                                               │ dotted.key=value → overrides
                  │ a bad flag value, an unknown command           │ anything else → one-line error
                  ▼                                               ▼
            "asyncrl: error: --steps: expected a positive integer, got 'abc'"   (exit 2)

Overrides come verl/AReaL style, bare beside the scenario (``asyncrl simulate quickstart
schedule.max_staleness=2``), or as ``--set KEY=VALUE``; both apply in the order given, ``--set`` first.

Errors the layers below raise about one of a command's arguments name the argument (``devices: ...``,
``calibration_steps: ...``); ``as_flag`` writes the flag the user typed instead (``--devices: ...``,
``--calibration-steps: ...``), so only the command line speaks of flags.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterable, Sequence
from typing import NoReturn

from asyncrl.scenarios.spec.loading import did_you_mean

from asyncrl.frameworks.common.command import ASSIGNMENT

EXIT_BAD_INPUT = 2
_INVALID_CHOICE = re.compile(r"^argument ([^:]+): invalid choice: '(.*)' \(choose from (.*)\)$", re.DOTALL)
_ARGUMENT = re.compile(r"^argument ([^:]+): ")
#: An error about an argument, named as the code names it: ``name: ...``, or ``name VALUE: ...``
#: (``overrides .x=1: ...``, ``vary KEY=1,2: ...``).
_NAMED = re.compile(r"^([a-z][a-z0-9_]*)(?=: | )")

#: A worked example per command, shown at the end of its ``--help``.
EXAMPLES: dict[str, str] = {
    "simulate": (
        "asyncrl simulate quickstart schedule.max_staleness=4 --steps 50\n"
        "    predict the quickstart scenario with a looser staleness bound, for 50 learner steps;\n"
        "    writes runs/quickstart-8b-90ee35d1/ (the overrides' hash: runs/quickstart-8b/ is the scenario as written)"
    ),
    "execute": (
        "asyncrl execute cpu-timing --steps 20\n"
        "    run the shipped CPU scenario for real (tiny model, two cores) and write runs/cpu-timing-3f055f92-executed/"
    ),
    "calibrate": (
        "asyncrl calibrate cpu-timing --out profiles/cpu-timing.yaml\n"
        "    execute short runs of cpu-timing here, fit a profile to them; use the file as hardware.profile"
    ),
    "demo": "asyncrl demo --scenario cpu-timing --steps 20\n    the main job, shrunk to one scenario and 20 steps",
    "speedup": (
        "asyncrl speedup quickstart --price-per-device-hour 2\n"
        "    the scenario as written against sync on the same split and sync colocated, with the cost per 1k samples"
    ),
    "size": (
        "asyncrl size quickstart --devices 16 --kind streaming --max-staleness 1 --max-staleness 2\n"
        "    every generation:training split of 16 devices, best first; writes runs/quickstart-8b-size.csv"
    ),
    "penalty": (
        "asyncrl penalty runs/study/cells.csv --out runs/study/penalty.json\n"
        "    fit steps to the target reward against staleness per loss and correction; then e.g.\n"
        "    asyncrl speedup quickstart --penalty runs/study/penalty.json"
    ),
    "sweep": (
        "asyncrl sweep quickstart --steps 30 --vary workload.completion_tokens.sigma=0.5,1,1.5\n"
        "    simulate three tails; writes runs/quickstart-8b-d930440f-sweep.csv and .png (--out FILE.csv to choose)"
    ),
    "schema": "asyncrl schema > scenario.schema.json\n    for editors that validate YAML against a JSON Schema",
    "validate": (
        "asyncrl validate --count 12 --seed 0\n"
        "    calibrate, predict and execute 12 random small CPU scenarios; errors in runs/validate/"
    ),
    "study": (
        "asyncrl study cpu-study --schedules sync,streaming-4 --losses grpo,online_dpo --seeds 0,1 --steps 150\n"
        "    execute 8 cells (2 schedules x 2 losses x 2 seeds) one after another; steps and wall time to a reward\n"
        "    of 0.5 per cell, means over seeds and the speedup over sync in runs/cpu-study-1a2f69fa-study/"
    ),
    "compare": (
        "asyncrl compare runs/demo/cpu-timing/measured-streaming runs/demo/cpu-timing/predicted-streaming "
        "--tolerance 0.1\n"
        "    the prediction's figures relative to the measured run (A, the reference); exit 1 if one is off by\n"
        "    more than 10%; --out FILE.json also writes the comparison"
    ),
    "report": ("asyncrl report runs/quickstart-8b --out runs/report\n    figures, Perfetto traces and index.html"),
    "trace": "asyncrl trace runs/quickstart-8b\n    writes runs/quickstart-8b/trace.json.gz; open it at ui.perfetto.dev",
    "list": "asyncrl list\n    model presets, devices and shipped scenarios with their figures",
    "lengths": (
        "asyncrl lengths completions.jsonl --field response --out runs/lengths\n"
        "    lengths of the logged completions: an empirical length file, lognormal and Pareto fits with their\n"
        "    scenario snippets, and a histogram with the fits"
    ),
    "from-verl": (
        "asyncrl from-verl ppo_trainer.yaml trainer.nnodes=2 --device h100 --lengths lengths.txt --out my-run.yaml\n"
        "    a scenario from the resolved verl config you launch with (or a recipe's launch script, read, never\n"
        "    run); then: asyncrl simulate my-run.yaml"
    ),
    "from-openrlhf": (
        "asyncrl from-openrlhf train_ppo_ray.sh --device h100 --lengths '{kind: lognormal, median: 800, sigma: 1}'\n"
        "    a scenario from OpenRLHF's launch script (or: ... -- python3 -m openrlhf.cli.train_ppo_ray --flags)"
    ),
    "from-nemo-rl": (
        "asyncrl from-nemo-rl grpo-qwen3-32b-4n8g.yaml cluster.num_nodes=8 --device h100 --lengths lengths.txt\n"
        "    a scenario from a NeMo-RL recipe, its defaults chain merged as NeMo-RL merges it (prompts are\n"
        "    data-driven there: add --prompt-lengths '{kind: fixed, value: 128}' for their lengths)"
    ),
    "plan": (
        "asyncrl plan run_fully_async.sh --device h100 --lengths '{kind: lognormal, median: 2048, sigma: 1}'\n"
        "    the run's sync and async plans sized on its devices (asyncrl size's), and one verdict line;\n"
        "    --log METRICS fits the model's efficiencies to the run's metrics log first"
    ),
}


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line, ``asyncrl: error: FLAG: what is wrong``, exit 2."""

    def error(self, message: str) -> NoReturn:
        error(readable(message), EXIT_BAD_INPUT)  # control characters from the input escaped
        sys.exit(EXIT_BAD_INPUT)


def readable(message: str) -> str:
    """argparse's message with the flag first and a did-you-mean for a mistyped choice."""
    message = " ".join(message.split())
    choice = _INVALID_CHOICE.match(message)
    if choice:
        name, value, options = choice.groups()
        names = re.findall(r"'([^']*)'", options)
        return f"{_flag(name)}: invalid choice '{value}'{did_you_mean(value, names)} (choose from {', '.join(names)})"
    return _ARGUMENT.sub(lambda match: f"{_flag(match.group(1))}: ", message)


def _flag(name: str) -> str:
    """``--out/-o`` → ``--out``; a positional's metavar as is."""
    return name.split("/")[0]


def error(message: str, status: int) -> int:
    """Print ``asyncrl: error: MESSAGE`` (on one line) to stderr; return ``status``."""
    print(f"asyncrl: error: {printable(message)}", file=sys.stderr)
    return status


def printable(message: str) -> str:
    """The message on one line: line breaks and other control characters (from the input itself) escaped."""
    return "".join(char if char.isprintable() else ascii(char)[1:-1] for char in message)


def one_line(exc: BaseException) -> str:
    """What went wrong, on one line: the OS's reason and the file, or the exception's first line."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.filename}: {exc.strerror}" if exc.filename else exc.strerror
    if isinstance(exc, MemoryError):
        return "out of memory"
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def as_flag(message: str, parser: argparse.ArgumentParser | None, args: argparse.Namespace | None = None) -> str:
    """``name: ...`` about one of ``parser``'s optional arguments (its dest, e.g. ``calibration_steps``) as
    ``--calibration-steps: ...``, and ``name VALUE: ...`` as ``--flag VALUE: ...`` (``overrides .x=1: ...``
    as ``--set .x=1: ...``) where VALUE is one token or one of the values in ``args``; any other message
    (a scenario field, a file, prose that starts with an argument's name) as it is."""
    named = _NAMED.match(message)
    if parser is None or named is None or not _names_an_argument(message, named.group(1), args):
        return message
    for action in parser._actions:
        if action.dest == named.group(1) and action.option_strings:
            return action.option_strings[0] + message[named.end() :]
    return message


def _names_an_argument(message: str, name: str, args: argparse.Namespace | None) -> bool:
    """``name: ...``, ``name TOKEN: ...``, or ``name VALUE: ...`` with VALUE one the user gave."""
    rest = message[len(name) :]
    if rest.startswith(": ") or re.match(r" \S+: ", rest):
        return True
    given = vars(args).values() if args is not None else ()
    values = [str(item) for value in given for item in (value if isinstance(value, list) else [value])]
    return any(rest.startswith(f" {value}: ") for value in values)


def split_assignments(extras: Sequence[str], option_strings: Iterable[str]) -> tuple[list[str], str | None]:
    """Leftover arguments as bare ``dotted.key=value`` overrides, or the one-line error they deserve."""
    assignments: list[str] = []
    for extra in extras:
        if ASSIGNMENT.match(extra):
            assignments.append(extra)
            continue
        if extra.startswith("-"):
            return [], f"{extra.split('=')[0]}: unknown flag{did_you_mean(extra.split('=')[0], option_strings)}"
        return [], f"unexpected argument {extra!r} (overrides are dotted.key=value)"
    return assignments, None


def add_examples(commands: argparse._SubParsersAction) -> None:
    """Put each command's worked example at the end of its ``--help``."""
    for name, parser in commands.choices.items():
        if name in EXAMPLES:
            parser.epilog = "example:\n  " + EXAMPLES[name].replace("\n", "\n  ")
            parser.formatter_class = argparse.RawDescriptionHelpFormatter
        parser.set_defaults(subparser=parser)


def positive(text: str) -> int:
    """A flag's value that must be a positive integer."""
    value = _integer(text, "a positive integer")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def non_negative(text: str) -> int:
    """A flag's value that must be zero or a positive integer."""
    value = _integer(text, "an integer ≥ 0")
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer ≥ 0, got {text!r}")
    return value


def fraction(text: str) -> float:
    """A flag's value that must be a finite number ≥ 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a finite number ≥ 0, got {text!r}")
    return value


def window(text: str) -> tuple[float, float | None]:
    """``START:END`` in seconds; ``:END`` starts at 0, ``START:`` runs to the end."""
    start_text, sep, end_text = text.partition(":")
    try:
        start = float(start_text) if start_text.strip() else 0.0
        end = float(end_text) if end_text.strip() else None
    except ValueError:
        start, end = -1.0, None
    if not sep or not 0 <= start < float("inf") or (end is not None and not start < end < float("inf")):
        raise argparse.ArgumentTypeError(f"expected START:END in seconds with 0 ≤ START < END, got {text!r}")
    return start, end


def _integer(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
