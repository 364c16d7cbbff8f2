#!/usr/bin/env bash
# Set up asyncrl in ./.venv: the package, its executor, analysis and Ray extras, and the test tools.
#
# torch: a venv that can see the system's packages keeps any torch already installed
# (a CUDA build on a GPU machine, say). Where there is none, torch==2.13.0 is installed
# explicitly: on the machines this project runs on that is a CPU build from local disk,
# whereas a bare "torch" requirement could pull a several-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv --system-site-packages .venv
fi
pip() { .venv/bin/python -m pip "$@"; }
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  pip install --quiet torch==2.13.0
fi
# The dependencies and the test tools (mypy among them); then asyncrl again, built in this environment so that
# setup.py compiles the simulator's hot loop with its mypyc (scenarios/compiled.py; about a minute): the same
# answers, sizing about 1.4 times as fast. Without a C compiler asyncrl runs as Python; the last line says which.
ASYNCRL_PURE_PYTHON=1 pip install --quiet -e ".[executor,analysis,ray,dev]"
pip install --quiet --no-deps --no-build-isolation -e .
echo "asyncrl is set up in .venv ($(.venv/bin/python -c 'import torch; print("torch", torch.__version__)'); compiled simulator: $(.venv/bin/python -c 'from asyncrl.scenarios import compiled; print("yes" if compiled.active() else "no")'))"
