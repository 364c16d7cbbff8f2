"""The compiled hot loop (``scenarios/compiled.py``, built by ``setup.py``) gives the pure Python's records to the byte.

Each case is simulated in this process (compiled, when a build of the current sources exists) and in a
child process with ``ASYNCRL_PURE_PYTHON=1``; every file each writes must be identical. The cases reach
the features the hot modules branch on: streaming and pipelined schedules, in-flight updates with the
KV recomputed, shared CPU cores, hundreds of engines loading together, engine failures, and a sizing
sweep whose runs end early.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from asyncrl.scenarios import compiled
from asyncrl.scenarios.record.outputs import LOCK_FILE

from asyncrl.cli import main

CASES: dict[str, list[str]] = {
    "streaming": ["simulate", "quickstart", "--steps", "8"],
    "pipelined": ["simulate", "quickstart", "--steps", "8", "schedule.kind=pipelined", "schedule.off_policy_steps=2"],
    "recompute": [
        "simulate",
        "quickstart",
        "--steps",
        "8",
        "schedule.in_flight_updates=true",
        "schedule.kv_on_update=recompute",
    ],
    "cores": ["simulate", "cpu-light", "--steps", "4"],
    "dormant": ["simulate", "large-streaming", "--steps", "3"],
    "failures": ["simulate", "quickstart", "--steps", "8", "run.failures.every_s=200", "run.failures.restart_s=60"],
    "sizing": ["size", "quickstart", "--devices", "16", "--splits", "2", "--kind", "streaming"],
}

PURE = """
from asyncrl.scenarios import compiled
from asyncrl.cli import main
assert not compiled.active()
for argv in {argvs!r}:
    assert main(argv) == 0, argv
"""


def _argv(case: str, folder: Path) -> list[str]:
    out = folder / (f"{case}.csv" if CASES[case][0] == "size" else case)
    return [*CASES[case], "--out", str(out), "--quiet"]


def _files(folder: Path) -> dict[str, bytes]:
    """Every file written under ``folder`` by name, but the output lock (it holds the writer's process id)."""
    return {
        str(path.relative_to(folder)): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.name != LOCK_FILE
    }


@pytest.mark.slow
def test_compiled_and_pure_python_write_the_same_records(tmp_path: Path) -> None:
    if not compiled.active():
        pytest.skip("no compiled build of the current sources (bash scripts/setup.sh builds it)")
    native, pure = tmp_path / "native", tmp_path / "pure"
    for case in CASES:
        assert main(_argv(case, native)) == 0, case
    argvs = [_argv(case, pure) for case in CASES]
    env = {**os.environ, "ASYNCRL_PURE_PYTHON": "1"}
    subprocess.run([sys.executable, "-c", PURE.format(argvs=argvs)], check=True, env=env, cwd=Path.cwd())
    written, expected = _files(native), _files(pure)
    assert sorted(written) == sorted(expected)
    for name, content in expected.items():
        assert written[name] == content, name


def test_ci_runs_the_compiled_simulator() -> None:
    """CI builds it (``scripts/setup.sh``): the suite there must run the compiled modules, not fall back."""
    if not os.environ.get("ASYNCRL_EXPECT_COMPILED"):
        pytest.skip("ASYNCRL_EXPECT_COMPILED not set (CI sets it)")
    import asyncrl.simulator.engine as engine

    assert compiled.active() and not engine.__file__.endswith(".py"), engine.__file__


def test_without_mypy_the_hot_modules_import_as_python() -> None:
    """The GPU image has no mypy: ``mypyc_attr`` is a stand-in there and the classes work as written."""
    code = (
        "import sys; sys.modules['mypy_extensions'] = None\n"  # (an import of it now fails)
        "from asyncrl.scenarios import compiled; assert not compiled.active()\n"
        "from asyncrl.scenarios.rules.state import ScheduleState\n"
        "from asyncrl.scenarios.spec.loading import load_scenario\n"
        "class Traced(ScheduleState): pass\n"
        "print(Traced(load_scenario('quickstart'), 8).dispatch()[0])\n"
    )
    env = {**os.environ, "ASYNCRL_PURE_PYTHON": "1"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.startswith("Start(engine=0"), done.stdout


def test_a_build_of_older_sources_is_removed_before_it_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An edited hot module makes the build stale: settle() removes it (so the sources run) and says so."""
    package, asyncrl_dir = tmp_path, tmp_path / "asyncrl"
    for module in compiled.HOT_MODULES:
        (package / f"{module}.py").parent.mkdir(parents=True, exist_ok=True)
        (package / f"{module}.py").write_text("x = 1\n")
    asyncrl_dir.mkdir(exist_ok=True)
    suffix = compiled.importlib.machinery.EXTENSION_SUFFIXES[0]
    built = [package / f"{module}{suffix}" for module in compiled.HOT_MODULES] + [asyncrl_dir / f"hot__mypyc{suffix}"]
    for path in built:
        path.write_bytes(b"")
    build_file = tmp_path / "compiled-build.txt"
    monkeypatch.setattr(compiled, "PACKAGE", package)
    monkeypatch.setattr(compiled, "BUILD_FILE", build_file)
    monkeypatch.delenv("ASYNCRL_PURE_PYTHON", raising=False)
    build_file.write_text(compiled.fingerprint() + "\n")
    compiled.settle(asyncrl_dir)  # current: kept
    assert all(path.exists() for path in built) and build_file.exists()
    (package / f"{compiled.HOT_MODULES[0]}.py").write_text("x = 2\n")  # an edit
    compiled.settle(asyncrl_dir)
    assert not any(path.exists() for path in built) and not build_file.exists()
    assert "built from older sources and is removed" in capsys.readouterr().err
