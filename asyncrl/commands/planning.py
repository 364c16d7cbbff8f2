"""``asyncrl speedup``, ``size``, ``plan`` and ``penalty``: plans simulated side by side, ranked, or fitted
(``sweep``'s grids: ``asyncrl.commands.sweeps``).

    speedup  SCENARIO            the scenario as written against sync on the same devices    ─► table / JSON
    size     SCENARIO --devices  generation:training splits of a budget, ranked               ─► CSV + table
    penalty  CELLS.csv           the staleness penalty fitted to a study's runs               ─► JSON file
    plan     CONFIG [--log LOG]  a verl or OpenRLHF run (or a scenario): its sync and async plans sized
                                 on its devices, and one verdict line                         ─► DIR + table

``size`` writes a CSV: ``--out`` is a file name ending in ``.csv`` (an existing directory, or a
name without ``.csv``, is refused on one line); by default ``runs/<scenario name>[-<hash of the
overrides>]-size.csv``. ``plan --out`` is a directory (default ``runs/<name>-plan``): the
scenario, the fitted profile, the sizing CSV and its plot. The simulating commands take ``--quiet``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from asyncrl.commands.arguments import non_negative, positive
from asyncrl.commands.common import (
    DIRECTORY_HELP,
    REPLACE_HELP,
    chosen_file,
    default_out,
    force_argument,
    load,
    load_fitting,
    output_directory,
    output_file,
    overrides,
    penalty_argument,
    penalty_fit,
    plot_path,
    price_argument,
    print_json,
    progress,
    runtime_argument,
    scenario_arguments,
    summary_or_reason,
)
from asyncrl.frameworks.common.command import assignment

CSV = (".csv",)


def add_parsers(commands: argparse._SubParsersAction) -> None:
    _speedup_parser(commands)
    _size_parser(commands)
    _plan_parser(commands)
    _penalty_parser(commands)


def _speedup_parser(commands: argparse._SubParsersAction) -> None:
    speedup = commands.add_parser("speedup", help="the scenario as written vs sync on the same devices")
    scenario_arguments(speedup)
    price_argument(speedup)
    penalty_argument(
        speedup,
        "also predict each run's wall time to the target reward of this penalty file, and the speedup at equal "
        "quality: a baseline's time to target over the scenario's",
    )
    speedup.set_defaults(command=run_speedup)


def _size_parser(commands: argparse._SubParsersAction) -> None:
    size = commands.add_parser("size", help="rank generation:training splits of a device budget")
    scenario_arguments(size)
    size.add_argument("--devices", type=positive, required=True, help="device budget to split")
    size.add_argument(
        "--kind",
        action="append",
        choices=["sync", "pipelined", "streaming"],
        help="schedule kinds (repeatable; default: the scenario's)",
    )
    size.add_argument(
        "--max-staleness",
        action="append",
        type=non_negative,
        help="staleness bounds (repeatable; default: the scenario's)",
    )
    size.add_argument(
        "--splits", type=positive, default=16, help="most generation device counts tried per engine size (default 16)"
    )
    size.add_argument(
        "--search",
        choices=["splits", "wide"],
        default="splits",
        help="splits (default): simulate up to --splits splits per engine size; wide: screen every split × engine "
        "size × schedule × staleness × micro-batch (half, as written, twice) with a fluid model of the same costs "
        "and simulate only the plans it cannot rule out (docs/planning.md)",
    )
    size.add_argument(
        "--max-simulated",
        type=positive,
        default=300,
        help="with --search wide: most plans simulated (default 300; the output says when it stopped there)",
    )
    size.add_argument("--top", type=positive, default=20, help="rows printed (all go to the CSV; default 20)")
    size.add_argument(
        "--exact",
        action="store_true",
        help="simulate every step of every run (default: end each run once its step time and staleness have "
        "converged, and extrapolate)",
    )
    size.add_argument(
        "--out",
        type=Path,
        metavar="FILE.csv",
        help="CSV of the ranked table, a file name ending in .csv (default: runs/<scenario name>-size.csv, with a "
        "hash of the overrides before -size when there are some)",
    )
    runtime_argument(size)
    price_argument(size)
    force_argument(size, REPLACE_HELP)
    penalty_argument(
        size,
        "rank by predicted wall time to the target reward of this penalty file, soonest first (equal times: "
        "higher samples/s first), instead of by samples/s; the sync baseline stays on top",
    )
    size.set_defaults(command=run_size)


def _plan_parser(commands: argparse._SubParsersAction) -> None:
    from asyncrl.frameworks.common.command import framework_arguments

    plan = commands.add_parser(
        "plan", help="should a verl or OpenRLHF run go async, on which split, how stale: sizing and one verdict"
    )
    plan.add_argument(
        "config",
        metavar="CONFIG",
        help="a verl trainer config (.yaml) or launch script, an OpenRLHF launch script, or an asyncrl scenario",
    )
    plan.add_argument(
        "assignments",
        nargs="*",
        type=assignment,
        metavar="KEY=VALUE",
        help="overrides of CONFIG's settings (verl keys; a scenario's fields)",
    )
    plan.add_argument(
        "--log",
        type=Path,
        metavar="METRICS",
        help="a metrics log of CONFIG's run (verl's file logger or TensorBoard directory): the model's efficiencies "
        "are fitted to it as calibrate --from-log does, and (verl, without --lengths) its response lengths",
    )
    framework_arguments(plan, "the config")
    plan.add_argument("--name", help="scenario name (default: the config's)")
    plan.add_argument(
        "--kind", action="append", choices=["pipelined", "streaming"], help="async kinds sized (default: CONFIG's own)"
    )
    plan.add_argument("--max-staleness", action="append", type=non_negative, help="their bounds (default: CONFIG's)")
    plan.add_argument(
        "--splits", type=positive, default=8, help="most generation device counts tried per engine size (default 8)"
    )
    plan.add_argument("--top", type=positive, default=10, help="rows printed (all go to the CSV; default 10)")
    plan.add_argument(
        "--steps", type=positive, help="learner steps each plan is sized over (default: the run's, at most 100)"
    )
    plan.add_argument("--exact", action="store_true", help="simulate every step of every plan (as size --exact)")
    plan.add_argument("--out", type=Path, metavar="DIR", help="directory for the scenario, profile, CSV and plot")
    force_argument(plan, DIRECTORY_HELP)
    plan.add_argument("--quiet", action="store_true", help="no progress bar")
    plan.add_argument("--json", action="store_true", help="print the verdict and the ranked plans as JSON")
    plan.set_defaults(command=run_plan)


def _penalty_parser(commands: argparse._SubParsersAction) -> None:
    penalty = commands.add_parser(
        "penalty", help="fit the staleness penalty (steps to a target reward vs staleness) to a study's runs"
    )
    penalty.add_argument("cells", type=Path, metavar="CELLS.csv", help="the study table: one row per executor run")
    penalty.add_argument("--out", type=Path, help="penalty file to write (default: penalty.json beside CELLS.csv)")
    penalty.add_argument("--json", action="store_true", help="print the penalty file instead of a table")
    force_argument(penalty, REPLACE_HELP)
    penalty.set_defaults(command=run_penalty)


def run_speedup(args: argparse.Namespace) -> int:
    from asyncrl.analysis.tables import speedup_lines, with_equal_quality
    from asyncrl.simulator.sweep import simulate_speedup

    scenario = load_fitting(args)
    fit, about = penalty_fit(args.penalty, scenario)
    results = with_equal_quality(simulate_speedup(scenario, progress=not args.quiet, penalty=fit))
    found = speedup_uncertainty(results)
    if args.json:
        figures = {variant.label: summary_or_reason(variant, summary) for variant, summary in results}
        return print_json({**figures, "uncertainty": found.to_json()} if found else figures)
    interval = speedup_interval_line(found) if found is not None else None
    print(speedup_lines(scenario, results, args.price_per_device_hour, about, interval))
    return 0


def speedup_uncertainty(results: list[Any]) -> Any:
    """The as-written run's speedup over each baseline that fits, with its interval (None: none fits)."""
    from asyncrl.planning.uncertainty import ratio_uncertainty

    written = results[0].summary
    fitting = [(variant, summary) for variant, summary in results[1:] if summary is not None]
    if written is None or not fitting:
        return None
    ratios = {
        variant.label: written.throughput.samples_per_s / summary.throughput.samples_per_s
        for variant, summary in fitting
    }
    return ratio_uncertainty([results[0].subject.scenario, *(variant.scenario for variant, _ in fitting)], ratios)


def speedup_interval_line(found: Any) -> str:
    """``as written vs sync, same split 2.44x (95%: 2.1-2.8x) ...; moves it most: ...``."""
    parts = [f"{label} {item.value:.2f}x (95%: {item.shown('x', '.2f')})" for label, item in found.intervals.items()]
    first = next(iter(found.intervals))
    return f"as written vs {'; vs '.join(parts)}; {found.sources}; moves it most: {found.most(first)}"


def run_size(args: argparse.Namespace) -> int:
    from asyncrl.analysis.summaries.sizing import sizing_lines, write_sizing_csv
    from asyncrl.simulator.sweep import simulate_sizing

    if args.out is not None:
        output_file(args.out, CSV, force=args.force)
    scenario = load(args)
    fit, about = penalty_fit(args.penalty, scenario)
    kinds = args.kind or [scenario.schedule.kind]
    bounds = args.max_staleness or [scenario.staleness_bound]
    csv_path = chosen_file(args.out, default_out(scenario.name, overrides(args), "-size.csv"), args.force)
    searched = None
    if args.search == "wide":
        searched = _wide_search(args, scenario, kinds, bounds, fit)
        ranked = searched.ranked
    else:
        ranked = simulate_sizing(
            scenario,
            args.devices,
            kinds,
            bounds,
            args.splits,
            progress=not args.quiet,
            exact=args.exact,
            penalty=fit,
            runtime=args.runtime,
        )
    out = write_sizing_csv(csv_path, ranked, args.price_per_device_hour, with_target=fit is not None)
    if args.json:
        return print_json(
            [{"label": variant.label, **summary_or_reason(variant, summary)} for variant, summary in ranked]
        )
    ranking = _ranking(ranked)
    interval = ranking.line() if ranking is not None else None
    print(sizing_lines(scenario, args.devices, ranked, args.top, args.price_per_device_hour, about, interval))
    if searched is not None:
        print(searched.line())
    print(f"wrote {out}")
    return 0


def _wide_search(args: argparse.Namespace, scenario: Any, kinds: list[str], bounds: list[int], fit: Any) -> Any:
    """``--search wide`` (``simulator.wide_search``); it ranks by throughput, so not with --penalty or --exact."""
    from asyncrl.scenarios.spec.loading import ScenarioError
    from asyncrl.simulator.wide_search import wide_search

    if fit is not None or args.exact:
        raise ScenarioError(f"--search wide: ranks by throughput; it takes no {'--penalty' if fit else '--exact'}")
    return wide_search(
        scenario,
        args.devices,
        kinds,
        bounds,
        max_simulated=args.max_simulated,
        progress=not args.quiet,
        runtime=args.runtime,
    )


def _ranking(ranked: list[Any]) -> Any:
    from asyncrl.analysis.summaries.verdict import plan_name

    from asyncrl.planning.uncertainty import ranking_uncertainty

    return ranking_uncertainty(ranked, plan_name)


def run_plan(args: argparse.Namespace) -> int:
    from asyncrl.analysis.summaries.sizing import sizing_lines, write_sizing_csv
    from asyncrl.analysis.summaries.verdict import verdict
    from asyncrl.simulator.sweep import simulate_sizing

    from asyncrl.planning.plan import build_scenario, calibrated, sized_kinds, sizing_steps

    out = output_directory(args.out or default_out(_plan_name(args), [], "-plan"), force=args.force or not args.out)
    planned = build_scenario(args, out)
    scenario, fit = planned.scenario, None
    if args.log is not None:
        with progress(None, "fitting", "look", args.quiet) as bar:
            scenario, fit = calibrated(
                scenario, args.log, out, lambda label: (bar.set_postfix_str(label[-40:]), bar.update())
            )
    scenario, steps_note = sizing_steps(scenario, args.steps)
    devices = scenario.cluster.total_devices
    kinds, bounds = sized_kinds(scenario, args.kind, args.max_staleness)
    ranked = simulate_sizing(scenario, devices, kinds, bounds, args.splits, progress=not args.quiet, exact=args.exact)
    written = planned.write(out)
    csv_path = write_sizing_csv(out / "size.csv", ranked)
    decided = verdict(ranked)
    ranking = _ranking(ranked)
    caveat = ranking.caveat(with_intervals=True) if ranking is not None else ""
    if args.json:
        rows = [{"label": v.label, **summary_or_reason(v, s)} for v, s in ranked]
        found = ranking.found.to_json() if ranking is not None else None
        return print_json(
            {"verdict": decided.line() + caveat, "speedup": decided.speedup, "uncertainty": found, "plans": rows}
        )
    plot = plot_path(None, out / "size.png")
    if plot is not None:
        from asyncrl.analysis.plots.plots import sizing

        sizing(csv_path, plot)
    written += [*([out / "profile.yaml"] if fit else []), csv_path, *([plot] if plot else [])]
    print("\n".join([*planned.notes, *([fit] if fit else [])]) or f"{planned.origin}: an asyncrl scenario")
    if steps_note:
        print(steps_note)
    print(sizing_lines(scenario, devices, ranked, args.top, interval=ranking.line() if ranking else None))
    print(f"wrote {', '.join(str(path) for path in written)}")
    print(decided.line() + caveat)
    return 0


def _plan_name(args: argparse.Namespace) -> str:
    return args.name or Path(args.config).stem


def run_penalty(args: argparse.Namespace) -> int:
    from asyncrl.analysis.fits.penalty import failed_runs, fit_penalty, penalty_lines, read_cells
    from asyncrl.scenarios.staleness.penalty import write_penalty

    out = chosen_file(args.out, args.cells.parent / "penalty.json", args.force)
    cells = read_cells(args.cells)
    penalty = fit_penalty(cells, source=str(args.cells))
    write_penalty(penalty, out)
    if args.json:
        return print_json(penalty.model_dump(mode="json"))
    print(penalty_lines(penalty, failed_runs(cells)))
    print(f"wrote {out} (give it to simulate, speedup or size as --penalty {out})")
    return 0
