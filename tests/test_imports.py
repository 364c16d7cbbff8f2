"""Fast start: the simulator, the run record, the CLI and the non-plotting analysis import no heavy library.

matplotlib is for the plots alone; torch, transformers and ray for the executor alone.
"""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("torch", "transformers", "ray", "matplotlib")


def test_simulator_and_cli_import_no_heavy_library() -> None:
    code = (
        "import sys, asyncrl.cli, asyncrl.simulator.simulation, asyncrl.simulator.sweep, asyncrl.scenarios.loading, "
        "asyncrl.scenarios.record, asyncrl.analysis.compare, asyncrl.analysis.trace; "
        f"print([name for name in {HEAVY!r} if name in sys.modules])"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_analysis_reads_records_and_never_imports_the_simulator() -> None:
    code = (
        "import sys, asyncrl.analysis.compare, asyncrl.analysis.plots, asyncrl.analysis.report, "
        "asyncrl.analysis.sizing, asyncrl.analysis.tables, asyncrl.analysis.trace; "
        "print(sorted(name for name in sys.modules if name.startswith('asyncrl.simulator')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_the_parts_are_installed_under_asyncrl_only() -> None:
    # scenarios/, simulator/, executor/ and analysis/ are asyncrl's subpackages: no top-level
    # module of those names is imported, so a user's own packages of those names are left alone.
    code = (
        "import sys, asyncrl.cli, asyncrl.simulator.simulation; "
        "print(sorted({n.split('.')[0] for n in sys.modules} & {'scenarios', 'simulator', 'executor', 'analysis'}))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
