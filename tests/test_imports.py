"""Fast start and the direction of imports, over every module of every package (none listed by hand).

matplotlib is for the plots alone; torch, transformers and ray for the executor alone. analysis reads
records: it imports neither the simulator nor the executor, not even inside a function. No module imports
one that imports it back, directly or around a loop (imports for type checking aside), and between folders
the arrows run one way only, down this picture:

    asyncrl/ (the command line, the API, the workflows, the frameworks' plug-ins)
        │
        ├──► simulator ──┐
        ├──► executor ───┼──► scenarios
        └──► analysis ───┘

The parts import one another relatively (``from ..scenarios.spec.scenario import Scenario``), so the
folders themselves say where an import leads; asyncrl/ names them absolutely (``asyncrl.simulator``).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "transformers", "ray", "matplotlib")
PARTS = ("scenarios", "simulator", "executor", "analysis")
#: Which part may import which (asyncrl/, on top, may import all of them).
ALLOWED = {"scenarios": set(), "simulator": {"scenarios"}, "executor": {"scenarios"}, "analysis": {"scenarios"}}
#: Modules that draw, and so import matplotlib (and nothing heavier).
PLOTTING = {
    "asyncrl.analysis.plots.canvas",
    "asyncrl.analysis.plots.plots",
    "asyncrl.analysis.plots.comparison_plot",
    "asyncrl.analysis.plots.table_plots",
    "asyncrl.analysis.plots.report",
    "asyncrl.analysis.plots.study_plots",
    "asyncrl.analysis.plots.length_plots",
}


def module_name(path: Path) -> str:
    """``simulator/engine.py`` → ``asyncrl.simulator.engine``; ``asyncrl/cli.py`` → ``asyncrl.cli``."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts if parts[0] == "asyncrl" else ["asyncrl", *parts])


def all_modules() -> dict[str, Path]:
    """Every module of asyncrl's folders, by dotted name, with its file (packages by their ``__init__``)."""
    found = {}
    for folder in ("asyncrl", *PARTS):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.name != "__main__.py":
                found[module_name(path)] = path
    return found


MODULES = all_modules()


def folder_of(module: str) -> str:
    """The part a module belongs to: ``scenarios``, ..., or ``asyncrl`` for the top."""
    second = module.split(".")[1] if "." in module else ""
    return second if second in PARTS else "asyncrl"


def imported(modules: str, names: str) -> str:
    """In a fresh interpreter, import ``modules`` (comma-separated); print which of the expression ``names`` got imported."""
    code = f"import sys, {modules}; print(sorted(name for name in sys.modules if {names}))"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def imports_of(path: Path) -> set[str]:
    """The asyncrl modules a file imports when it runs: at module level or in a function, not for type checking.
    Relative imports are resolved against the file's own package."""
    name = module_name(path)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    names: set[str] = set()

    def absolute(node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        base = package[: len(package) - node.level + 1]
        return ".".join([*base, *([node.module] if node.module else [])])

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            return
        if isinstance(node, ast.ImportFrom) and absolute(node).startswith("asyncrl"):
            module = absolute(node)
            submodules = {f"{module}.{alias.name}" for alias in node.names} & MODULES.keys()
            names.update(submodules)  # from a package import its modules: those modules, not the package
            if len(submodules) < len(node.names):
                names.add(module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names if alias.name.startswith("asyncrl"))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    return names


def test_every_module_but_the_executor_and_the_plots_imports_no_heavy_library() -> None:
    light = [name for name in all_modules() if not name.startswith("asyncrl.executor") and name not in PLOTTING]
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


def loop_in(graph: dict[str, set[str]]) -> list[str] | None:
    """A loop of arrows in ``graph`` (node → the nodes it imports), as the nodes around it; None if none."""
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> list[str] | None:
        for sink in sorted(graph.get(node, ())):
            if sink in path:
                return [*path[path.index(sink) :], sink]
            if sink not in done and (found := visit(sink, [*path, sink])):
                return found
        done.add(node)
        return None

    return next((found for node in sorted(graph) if node not in done and (found := visit(node, [node]))), None)


def test_no_two_modules_import_each_other() -> None:
    modules = all_modules()
    loop = loop_in({name: imports_of(path) & modules.keys() - {name} for name, path in modules.items()})
    assert loop is None, "import cycle: " + " → ".join(loop or [])


def test_the_parts_are_installed_under_asyncrl_only() -> None:
    # scenarios/, simulator/, executor/ and analysis/ are asyncrl's subpackages: no top-level
    # module of those names is imported, so a user's own packages of those names are left alone.
    parts = ("scenarios", "simulator", "executor", "analysis")
    assert imported("asyncrl.cli, asyncrl.simulator.simulation", f"name.split('.')[0] in {parts!r}") == "[]"


def test_sizing_imports_no_pandas() -> None:
    # `asyncrl size` imports these before its worker processes start, in one process: pandas would add about a
    # quarter of a second to that serial start, and nothing there reads an event table.
    sizing = "asyncrl.cli, asyncrl.commands.planning, asyncrl.simulator.sweep, asyncrl.analysis.summaries.sizing"
    assert imported(sizing, "name == 'pandas'") == "[]"


def test_imports_between_the_parts_run_one_way() -> None:
    modules = all_modules()
    arrows: set[tuple[str, str]] = set()
    for name, path in modules.items():
        for target in imports_of(path) & modules.keys():
            arrows.add((folder_of(name), folder_of(target)))
    wrong = sorted((a, b) for a, b in arrows if a != b and a != "asyncrl" and b not in ALLOWED[a])
    assert not wrong, f"imports against the parts' direction: {wrong}"
    # The picture is connected: every part reached from the top, every part above scenarios on it.
    assert {("asyncrl", part) for part in PARTS} <= arrows
    assert {(part, "scenarios") for part in PARTS[1:]} <= arrows


def test_the_parts_import_one_another_relatively() -> None:
    """A part's imports of asyncrl.* are relative, so the folders say where each leads (and tools follow)."""
    absolute = []
    for part in PARTS:
        for path in (ROOT / part).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith("asyncrl"):
                    absolute.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not absolute, absolute


def test_no_folder_imports_one_that_imports_it_back() -> None:
    """Between folders (subpackages) too, the arrows form no loop."""
    modules = all_modules()
    folders = {name: name if path.name == "__init__.py" else name.rpartition(".")[0] for name, path in modules.items()}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        for target in imports_of(path) & modules.keys():
            source, sink = folders[name], folders[target]
            if source != sink and not sink.startswith(source + ".") and not source.startswith(sink + "."):
                graph.setdefault(source, set()).add(sink)
    loop = loop_in(graph)
    assert loop is None, "folders in a loop: " + " → ".join(loop or [])


def test_no_folder_holds_more_than_twenty_modules() -> None:
    """A folder that grows past 20 files or 5,000 lines is split into subfolders by concern."""
    for folder in {path.parent for path in all_modules().values()}:
        files = list(folder.glob("*.py"))
        lines = sum(len(path.read_text().splitlines()) for path in files)
        assert len(files) <= 20 and lines <= 5000, f"{folder.relative_to(ROOT)}: {len(files)} files, {lines} lines"


def test_the_loop_check_finds_loops() -> None:
    assert loop_in({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert loop_in({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
