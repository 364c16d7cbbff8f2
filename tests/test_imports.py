"""Fast start and the direction of imports, over every module of every package (none listed by hand).

matplotlib is for the plots alone; torch, transformers and ray for the executor alone. analysis reads
records: it imports neither the simulator nor the executor, not even inside a function. And no module
imports one that imports it back, directly or around a loop (imports for type checking aside).

    scenarios ◄── simulator          scenarios ◄── analysis
        ▲                                ▲
        └──────── executor               └──── asyncrl (the workflows, the CLI)
"""

from __future__ import annotations

import ast
import pkgutil
import subprocess
import sys
from pathlib import Path

import asyncrl

HEAVY = ("torch", "transformers", "ray", "matplotlib")
PACKAGES = (
    "asyncrl",
    "asyncrl.commands",
    "asyncrl.scenarios",
    "asyncrl.simulator",
    "asyncrl.executor",
    "asyncrl.analysis",
)
#: Modules that draw, and so import matplotlib (and nothing heavier).
PLOTTING = {
    "asyncrl.analysis.canvas",
    "asyncrl.analysis.plots",
    "asyncrl.analysis.comparison_plot",
    "asyncrl.analysis.table_plots",
    "asyncrl.analysis.report",
    "asyncrl.analysis.study_plots",
    "asyncrl.analysis.length_plots",
}


def package_dir(package: str) -> Path:
    module = sys.modules.get(package) or __import__(package, fromlist=["_"])
    return Path(module.__file__).parent  # its sources (a compiled build's folder may come first on __path__)


def all_modules() -> dict[str, Path]:
    """Every module of asyncrl's packages, by dotted name, with its file."""
    assert asyncrl  # the packages resolve through asyncrl/__init__.py in a checkout
    found = {}
    for package in PACKAGES:
        folder = package_dir(package)
        for info in pkgutil.iter_modules([str(folder)]):
            if not info.ispkg and info.name != "__main__":
                found[f"{package}.{info.name}"] = folder / f"{info.name}.py"
    return found


def imported(modules: str, names: str) -> str:
    """In a fresh interpreter, import ``modules`` (comma-separated); print which of the expression ``names`` got imported."""
    code = f"import sys, {modules}; print(sorted(name for name in sys.modules if {names}))"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def imports_of(path: Path) -> set[str]:
    """The asyncrl modules a file imports when it runs: at module level or in a function, not for type checking."""
    names: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            return
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("asyncrl"):
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names if alias.name.startswith("asyncrl"))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    return names


def test_every_module_but_the_executor_and_the_plots_imports_no_heavy_library() -> None:
    light = [name for name in all_modules() if not name.startswith("asyncrl.executor.") and name not in PLOTTING]
    assert len(light) > 50, light  # the walk found the packages
    assert imported(", ".join(light), f"name in {HEAVY!r}") == "[]"


def test_the_plots_import_matplotlib_but_not_torch_ray_or_transformers() -> None:
    assert imported(", ".join(sorted(PLOTTING)), "name in ('torch', 'transformers', 'ray')") == "[]"


def test_analysis_never_imports_the_simulator_or_the_executor() -> None:
    analysis = {name: path for name, path in all_modules().items() if name.startswith("asyncrl.analysis.")}
    assert len(analysis) > 15
    for name, path in analysis.items():
        reached = {m for m in imports_of(path) if m.startswith(("asyncrl.simulator", "asyncrl.executor"))}
        assert not reached, f"{name} imports {sorted(reached)}"
    assert imported(", ".join(sorted(analysis)), "name.startswith(('asyncrl.simulator', 'asyncrl.executor'))") == "[]"


def test_no_two_modules_import_each_other() -> None:
    modules = all_modules()
    graph = {name: imports_of(path) & modules.keys() - {name} for name, path in modules.items()}
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        for imported_name in sorted(graph[name]):
            assert imported_name not in path, "import cycle: " + " → ".join(
                [*path[path.index(imported_name) :], imported_name]
            )
            if imported_name not in done:
                visit(imported_name, [*path, imported_name])
        done.add(name)

    for name in sorted(graph):
        if name not in done:
            visit(name, [name])


def test_the_parts_are_installed_under_asyncrl_only() -> None:
    # scenarios/, simulator/, executor/ and analysis/ are asyncrl's subpackages: no top-level
    # module of those names is imported, so a user's own packages of those names are left alone.
    parts = ("scenarios", "simulator", "executor", "analysis")
    assert imported("asyncrl.cli, asyncrl.simulator.simulation", f"name.split('.')[0] in {parts!r}") == "[]"


def test_sizing_imports_no_pandas() -> None:
    # `asyncrl size` imports these before its worker processes start, in one process: pandas would add about a
    # quarter of a second to that serial start, and nothing there reads an event table.
    sizing = "asyncrl.cli, asyncrl.commands.planning, asyncrl.simulator.sweep, asyncrl.analysis.sizing"
    assert imported(sizing, "name == 'pandas'") == "[]"
