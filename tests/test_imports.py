"""Fast start: the simulator, the run record, the CLI and the non-plotting analysis import no heavy library.

matplotlib is for the plots alone; torch, transformers and ray for the executor alone.
"""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("torch", "transformers", "ray", "matplotlib")


def imported(modules: str, names: str) -> str:
    """In a fresh interpreter, import ``modules``; print which of the expression ``names`` got imported."""
    code = f"import sys, {modules}; print(sorted(name for name in sys.modules if {names}))"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def test_simulator_and_cli_import_no_heavy_library() -> None:
    modules = (
        "asyncrl.cli, asyncrl.simulator.simulation, asyncrl.simulator.sweep, asyncrl.scenarios.loading, "
        "asyncrl.scenarios.record, asyncrl.analysis.compare, asyncrl.analysis.sweep_table, asyncrl.analysis.trace, "
        "asyncrl.analysis.phases, asyncrl.analysis.validation, asyncrl.draws, asyncrl.validate, "
        "asyncrl.scenarios.penalty, asyncrl.simulator.target, asyncrl.analysis.penalty, "
        "asyncrl.analysis.study, asyncrl.grid, asyncrl.study"
    )
    assert imported(modules, f"name in {HEAVY!r}") == "[]"


def test_analysis_reads_records_and_never_imports_the_simulator() -> None:
    modules = (
        "asyncrl.analysis.compare, asyncrl.analysis.plots, asyncrl.analysis.report, asyncrl.analysis.sizing, "
        "asyncrl.analysis.sweep_table, asyncrl.analysis.tables, asyncrl.analysis.trace, asyncrl.analysis.phases, "
        "asyncrl.analysis.validation, asyncrl.analysis.penalty, asyncrl.analysis.study, "
        "asyncrl.analysis.study_plots"
    )
    assert imported(modules, "name.startswith('asyncrl.simulator')") == "[]"


def test_the_parts_are_installed_under_asyncrl_only() -> None:
    # scenarios/, simulator/, executor/ and analysis/ are asyncrl's subpackages: no top-level
    # module of those names is imported, so a user's own packages of those names are left alone.
    parts = ("scenarios", "simulator", "executor", "analysis")
    assert imported("asyncrl.cli, asyncrl.simulator.simulation", f"name.split('.')[0] in {parts!r}") == "[]"
