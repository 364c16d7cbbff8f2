"""Fast start: the simulator, the run record, the CLI and the non-plotting analysis import no heavy library.

matplotlib is for the plots alone; torch, transformers and ray for the executor alone.
"""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("torch", "transformers", "ray", "matplotlib")


def test_simulator_and_cli_import_no_heavy_library() -> None:
    code = (
        "import sys, asyncrl.cli, simulator.simulation, simulator.sweep, scenarios.loading, scenarios.record, "
        "analysis.compare, analysis.trace; "
        f"print([name for name in {HEAVY!r} if name in sys.modules])"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_analysis_reads_records_and_never_imports_the_simulator() -> None:
    code = (
        "import sys, analysis.compare, analysis.plots, analysis.report, analysis.sizing, analysis.tables, "
        "analysis.trace; print(sorted(name for name in sys.modules if name.split('.')[0] == 'simulator'))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
