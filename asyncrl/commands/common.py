"""What the commands share: scenario arguments, output paths and their rules, progress bars, JSON output.

Outputs have one meaning per kind, whatever the command:

    run directory   simulate, execute              --out DIR; default runs/<name>[-<overrides>]
    directory       lengths, report, plan          --out DIR: an existing file is refused, and so is a
                                                   directory holding files without asyncrl's mark (--force)
                    study, validate, demo          --out DIR (an existing file is refused)
    file            size, sweep (.csv),            --out FILE with that suffix: an existing directory,
                    compare (.json),               or a name without the suffix, is refused on one line
                    from-verl (.yaml)              that suggests the name with it; an existing file too,
                                                   unless --force (``chosen_file``: asyncrl's own names
                                                   under runs/ are replaced)

Every file is written whole and renamed into place (``scenarios.record.outputs.written``); docs/errors.md has the rule.

A default output name carries the scenario's overrides (``--set``, bare ``KEY=VALUE``, ``--seed``,
``--steps``) as a short stable hash: ``runs/quickstart-8b`` as written, ``runs/quickstart-8b-1a2b3c4d``
with overrides, so a variant never replaces the record of the scenario as written (or of another variant).
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from asyncrl.scenarios.costs.memory import check_memory, memory_problem
from asyncrl.scenarios.files.textfile import dumps
from asyncrl.scenarios.record import outputs
from asyncrl.scenarios.record.outputs import OutputError, check_output_file, default_run_dir, own_default
from asyncrl.scenarios.spec.loading import ScenarioError, load_scenario

from asyncrl.commands.arguments import fraction, non_negative, positive
from asyncrl.frameworks.common.command import assignment

if TYPE_CHECKING:
    from asyncrl.scenarios.record.record import RunSummary
    from asyncrl.scenarios.spec.scenario import Scenario
    from asyncrl.scenarios.staleness.penalty import PenaltyFit
    from tqdm import tqdm

EXIT_BAD_INPUT = 2
EXIT_FAILED = 1
OVERRIDES_HASH_LENGTH = 8  # hex digits of the overrides' hash in a default output name
NO_MATPLOTLIB = "matplotlib is not installed (pip install 'asyncrl[analysis]')"


# ── arguments ───────────────────────────────────────────────────────────────────


def scenario_arguments(parser: argparse.ArgumentParser) -> None:
    """SCENARIO, its overrides (bare or ``--set``), ``--seed``, ``--steps``, ``--json`` and ``--quiet``."""
    parser.add_argument("scenario", help="scenario file, or the name of a shipped scenario (e.g. quickstart)")
    parser.add_argument(
        "assignments",
        nargs="*",
        type=assignment,
        metavar="KEY=VALUE",
        help="override a field, e.g. schedule.max_staleness=2 (the same as --set; applied after --set)",
    )
    overrides_argument(parser, "override a field, e.g. schedule.max_staleness=2")
    parser.add_argument("--seed", type=non_negative, help="shortcut for --set run.seed=N")
    parser.add_argument("--steps", type=positive, help="shortcut for --set run.steps=N")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    quiet_argument(parser)


def overrides_argument(parser: argparse.ArgumentParser, help: str | None) -> None:
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help=help)


def quiet_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def force_argument(
    parser: argparse.ArgumentParser, help: str = "write into --out even if it holds files that are not a run record"
) -> None:
    parser.add_argument("--force", action="store_true", help=help)


REPLACE_HELP = "replace --out if it exists (asyncrl never replaces a file it was not asked to)"
DIRECTORY_HELP = "write into --out even if it holds files asyncrl did not write"


def speedup_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--speedup",
        type=Path,
        nargs=4,
        metavar=("SYNC_A", "ASYNC_A", "SYNC_B", "ASYNC_B"),
        help="also compare B's speedup wall(SYNC_B)/wall(ASYNC_B) with A's wall(SYNC_A)/wall(ASYNC_A), "
        "A's being the reference",
    )


def penalty_argument(parser: argparse.ArgumentParser, help: str) -> None:
    parser.add_argument("--penalty", type=Path, metavar="FILE", help=f"{help} (asyncrl penalty writes it)")


def price_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--price-per-device-hour",
        type=fraction,
        metavar="USD",
        help="also show the cost of 1,000 trained samples at this price of one device for one hour",
    )


# ── the scenario ────────────────────────────────────────────────────────────────


def overrides(args: argparse.Namespace) -> list[str]:
    """``--set`` overrides, bare ``KEY=VALUE`` ones, then ``--seed`` and ``--steps`` as the overrides they stand for."""
    given = [*args.overrides, *args.assignments]
    if getattr(args, "seed", None) is not None:
        given.append(f"run.seed={args.seed}")
    if getattr(args, "steps", None) is not None:
        given.append(f"run.steps={args.steps}")
    return given


def load(args: argparse.Namespace) -> Scenario:
    return load_scenario(args.scenario, overrides(args))


def load_fitting(args: argparse.Namespace) -> Scenario:
    """The scenario, refused (ScenarioError) when its pools do not fit in device memory."""
    scenario = load(args)
    check_memory(scenario)
    return scenario


# ── outputs ─────────────────────────────────────────────────────────────────────


def overrides_tag(given: Sequence[str]) -> str:
    """``-<hash>`` of the overrides, in the order given (the same overrides, the same tag); none without any."""
    if not given:
        return ""
    digest = hashlib.sha256("\n".join(given).encode()).hexdigest()
    return f"-{digest[:OVERRIDES_HASH_LENGTH]}"


def default_out(name: str, given: Sequence[str], suffix: str = "") -> Path:
    """``runs/<name><suffix>`` as written, ``runs/<name>-<hash of the overrides><suffix>`` with overrides."""
    return default_run_dir(name, overrides_tag(given) + suffix)


def output_file(path: Path, suffixes: tuple[str, ...], option: str = "--out", *, force: bool = False) -> Path:
    """``path`` checked as a file to write: an existing directory, or a name without one of ``suffixes``, is
    an OutputError naming ``option`` (which suggests the name with the suffix); else ``check_output_file``
    (an existing file only with ``force``)."""
    try:
        path.is_dir()
    except OSError as exc:  # a name too long
        raise OutputError(f"{option}: cannot write {path}: {exc.strerror or exc}") from None
    if path.is_dir():
        raise OutputError(f"{option}: {path} is a directory; give a file name, e.g. {path / ('out' + suffixes[0])}")
    if not path.name.lower().endswith(suffixes):
        raise OutputError(f"{option}: {path} does not end in {' or '.join(suffixes)}; give e.g. {path}{suffixes[0]}")
    return check_output_file(path, option, replace=force)


def chosen_file(given: Path | None, default: Path, force: bool, option: str = "--out") -> Path:
    """The file to write: ``given`` (an existing one replaced only with ``force``), else ``default``, which is
    replaced where it is one of asyncrl's own names (``own_default``: under runs/, or a run record's file)."""
    if given is not None:
        return check_output_file(given, option, replace=force)
    return check_output_file(default, option, replace=force or own_default(default))


def runs_directory(path: Path, option: str = "--out") -> Path:
    """``path`` as a directory of run directories (demo, validate; each run directory checked on its own):
    an existing file is an OutputError naming ``option``."""
    if path.exists() and not path.is_dir():
        raise OutputError(f"{option}: {path} is a file; give a directory")
    return path


def output_directory(path: Path, option: str = "--out", *, force: bool = False) -> Path:
    """``path`` as a directory of a command's files (``scenarios.record.outputs.output_directory``): a file there, or
    a directory holding files asyncrl did not write (without ``force``), is an OutputError naming ``option``."""
    return outputs.output_directory(path, option, force=force)


def plot_path(asked: Path | None, default: Path, option: str = "--plot") -> Path | None:
    """Where a plot goes: none without matplotlib, unless asked for (then a one-line error naming ``option``)."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is not None:
        return asked or default
    if asked is not None:
        raise ScenarioError(f"{option}: {NO_MATPLOTLIB}")
    print(f"no plot: {NO_MATPLOTLIB}", file=sys.stderr)
    return None


# ── printing ────────────────────────────────────────────────────────────────────


def print_json(data: Any) -> int:
    """``data`` as JSON on stdout; an infinite or NaN figure (a target never reached) is ``null``."""
    print(dumps(data, indent=2))
    return 0


def progress(total: int | None, desc: str, unit: str, quiet: bool, leave: bool = True) -> tqdm:
    """A progress bar on stderr; none when ``quiet`` or when stderr is not a terminal."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, disable=quiet or None, leave=leave)


def summary_or_reason(variant: Any, summary: RunSummary | None) -> dict[str, Any]:
    """A row for --json: its summary, or why it was not simulated (it does not fit in memory)."""
    return summary.to_json() if summary is not None else {"fits": False, "reason": memory_problem(variant.scenario)}


def penalty_fit(path: Path | None, scenario: Scenario) -> tuple[PenaltyFit | None, str | None]:
    """``--penalty``'s fit for the scenario's loss and correction, and what a time to target is a time to
    (None, None without the flag); a ScenarioError naming the flag when the file is missing or malformed,
    or has no such fit."""
    if path is None:
        return None, None
    from asyncrl.analysis.tables import about_target
    from asyncrl.scenarios.staleness.penalty import PenaltyError, read_penalty

    try:
        penalty = read_penalty(path)
        fit = penalty.fit_for(scenario.algorithm.loss, scenario.algorithm.correction)
    except PenaltyError as exc:
        raise ScenarioError(f"--penalty: {exc}") from None
    return fit, about_target(penalty, fit, path)


def runtime_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--runtime",
        default="local",
        choices=["local", "ray"],
        help="simulations in a local process pool, or one Ray task each (on the cluster RAY_ADDRESS names, or a "
        "local Ray instance); the same results either way",
    )
