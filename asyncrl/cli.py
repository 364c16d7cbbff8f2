"""The ``asyncrl`` command: it parses the arguments and dispatches to a command; the commands live in
``asyncrl.commands`` (one module per family), and do their work through the layers below.

    asyncrl simulate SCENARIO [--out DIR] [--set key=value ...]   predict one schedule
    asyncrl execute  SCENARIO [--device cuda] [--resume RUN]       run it for real
    asyncrl calibrate SCENARIO --out PROFILE                       fit a profile to short runs (--bench: benchmarks)
    asyncrl demo     [--scenario NAME] [--out DIR]                  calibrate, predict, execute, compare on CPU
    asyncrl validate [--count N] [--seed S] [--steps K]            prediction errors on random CPU scenarios
    asyncrl study    SCENARIO [--schedules ...] [--losses ...]      time to a reward, executed over a grid of cells
    asyncrl speedup  SCENARIO                                      as written vs sync baselines
    asyncrl size     SCENARIO --devices N [--out FILE.csv]          rank generation:training splits
    asyncrl plan     CONFIG [--log METRICS] --device D              a verl/OpenRLHF run: sized, one verdict
    asyncrl penalty  CELLS.csv [--out FILE]                        fit the staleness penalty to a study's runs
    asyncrl sweep    SCENARIO --vary KEY=V1,V2 [--out FILE.csv]     what-if grid over any keys: CSV and plot
    asyncrl compare  A B [--tolerance X] [--out FILE.json]         B's figures relative to A's, time by phase
    asyncrl report   RUN [RUN ...] --out DIR                       figures, traces and index.html
    asyncrl trace    RUN [--out FILE]                              Chrome/Perfetto trace of one run
    asyncrl lengths  FILE.jsonl [--field F] [--tokenizer PATH]      lengths from logs: empirical file, fits, plot
    asyncrl lengths  --from-log LOG [--max-tokens N]               a lognormal fitted to a verl metrics log
    asyncrl from-verl CONFIG.yaml|SCRIPT.sh [KEY=VALUE ...]         a scenario from a verl config or launch script
    asyncrl from-openrlhf SCRIPT.sh | -- COMMAND                    a scenario from OpenRLHF's launch flags
    asyncrl from-nemo-rl CONFIG.yaml [KEY=VALUE ...]                a scenario from a NeMo-RL GRPO recipe
    asyncrl schema                                                 JSON Schema of the scenario file
    asyncrl list                                                   presets, devices, shipped scenarios

What ``--out`` means for each, and the default output names: ``asyncrl.commands.common``.

Scenario commands take overrides bare (``schedule.max_staleness=2``) or as ``--set``. Bad input prints
one line per wrong field (``asyncrl.commands.arguments`` words flag errors, and writes an error about one of a
command's arguments with the flag's name) and exits with status 2; a run that fails prints one line and
exits with status 1 (ASYNCRL_TRACEBACK=1 shows the traceback). Ctrl-C ends a command with status 130 and
SIGTERM with 143, each with one line: a run records itself as interrupted, pool workers are stopped.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence

from asyncrl.scenarios.spec.loading import ScenarioError

from asyncrl import __version__
from asyncrl.commands import FAMILIES
from asyncrl.commands.arguments import EXIT_BAD_INPUT, Parser, add_examples, as_flag, error, one_line, split_assignments

EXIT_FAILED = 1
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 128 + signal.SIGTERM


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the command is, so that it ends as Ctrl-C ends it: a run records itself as
    interrupted, a run directory it wrote nothing into is removed, process pools stop their workers."""


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    with _terminate_as_interrupt():
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    try:
        return args.command(args)
    except Terminated:
        print("asyncrl: terminated (SIGTERM); a run directory being written keeps a partial record", file=sys.stderr)
        return EXIT_TERMINATED
    except ScenarioError as exc:
        for line in str(exc).splitlines():  # a scenario reports every field that is wrong, one line each
            error(as_flag(line, args.subparser, args), EXIT_BAD_INPUT)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("asyncrl: interrupted (a run directory being written keeps a partial record)", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # output piped into head & co.
        return 0
    except Exception as exc:  # a run that failed: one line, never a traceback (unless asked for)
        if os.environ.get("ASYNCRL_TRACEBACK"):
            raise
        return error(as_flag(one_line(exc), args.subparser, args), EXIT_FAILED)


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """While a command runs in the main thread, SIGTERM raises Terminated; the previous handler after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(signum: int, frame: object) -> None:
        raise Terminated

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """The arguments; leftover ``dotted.key=value`` ones (after a flag) join the bare overrides."""
    parser = _parser()
    if not (sys.argv[1:] if argv is None else argv):  # bare `asyncrl`: what it can do, not a usage error
        parser.print_help()
        parser.exit(0)
    args, extras = parser.parse_known_args(argv)
    if extras:
        assignments, problem = split_assignments(extras, args.subparser._option_string_actions)
        if problem is None and "assignments" not in args:
            problem = f"unexpected argument {extras[0]!r} ({args.subparser.prog} reads no scenario)"
        if problem is not None:
            parser.error(problem)
        args.assignments = [*args.assignments, *assignments]
    return args


def _parser() -> argparse.ArgumentParser:
    """The parser of every command: each family of ``asyncrl.commands`` adds its own."""
    parser = Parser(prog="asyncrl", description="Plan, run and check asynchronous RL schedules.")
    parser.add_argument("--version", action="version", version=f"asyncrl {__version__}")
    commands = parser.add_subparsers(required=True, metavar="COMMAND")
    for family in FAMILIES:
        family.add_parsers(commands)
    add_examples(commands)
    return parser


if __name__ == "__main__":
    sys.exit(main())
