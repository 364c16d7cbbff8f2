"""Compile the simulator's hot modules (``asyncrl.compiled.HOT_MODULES``) with mypyc.

    python scripts/compile.py        # .compiled/<fingerprint>/ (about a minute on two cores)

The sources compile as they are (mypyc reads their type hints); the build goes to a folder named by their
fingerprint, which ``asyncrl.compiled`` puts on the packages' paths only while the sources are unchanged.
Without a C compiler or Python's headers the build fails and asyncrl runs as pure Python: same answers,
slower. Older builds are removed once a new one is complete.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from asyncrl.compiled import BUILDS, CHECKOUT, GROUP, HOT_MODULES, fingerprint


def main() -> int:
    target = BUILDS / fingerprint()
    if (target / "complete").is_file():
        print(f"compiled simulator up to date ({target.relative_to(CHECKOUT)})")
        return 0
    start = time.perf_counter()
    try:
        _build(target)
    except (Exception, SystemExit) as error:  # setuptools exits on a compiler error
        shutil.rmtree(target, ignore_errors=True)
        print(f"compiled simulator not built ({error}): asyncrl runs as pure Python", file=sys.stderr)
        return 0  # a slower simulator, not a broken install
    (target / "complete").write_text(target.name + "\n")
    for old in BUILDS.iterdir():
        if old != target:
            shutil.rmtree(old, ignore_errors=True)
    print(f"compiled simulator built in {time.perf_counter() - start:.0f} s ({target.relative_to(CHECKOUT)})")
    return 0


def _build(target: Path) -> None:
    from mypyc.build import mypycify
    from setuptools import setup

    # mypy resolves asyncrl.simulator.* through .mypy/asyncrl (pyproject.toml's [tool.mypy]), so the
    # modules keep their installed names.
    os.chdir(CHECKOUT)
    paths = [f".mypy/asyncrl/{module}.py" for module in HOT_MODULES]
    with tempfile.TemporaryDirectory() as temp:
        extensions = mypycify(paths, separate=[(paths, GROUP)], target_dir=f"{temp}/c")
        setup(
            name="asyncrl-compiled",
            ext_modules=extensions,
            script_args=["--quiet", "build_ext", "--build-lib", str(target), "--build-temp", f"{temp}/o"],
        )


if __name__ == "__main__":
    sys.exit(main())
