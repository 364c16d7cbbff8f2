#!/usr/bin/env bash
# The engine's exactness tests (and the learner's log-prob tests) under one transformers version, in a venv of its own.
#   bash scripts/test-transformers.sh VERSION [VENV_DIR] [PYTEST ARGS...]
# The venv (default .venv-transformers-VERSION) is clean: it does not see the system's packages. torch==2.13.0 comes
# from the local wheel folder pip is set up with here (a CPU build), transformers==VERSION and the project's small
# dependencies from the package index. The project itself is put on the path, not installed.
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:?usage: test-transformers.sh VERSION [VENV_DIR] [PYTEST ARGS...]}
venv=${2:-.venv-transformers-$version}
shift $(( $# >= 2 ? 2 : 1 ))
tests=("$@")
[ ${#tests[@]} -gt 0 ] || tests=(tests/test_engine.py tests/test_logprobs.py)
python=${PYTHON:-python3}
if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv"
fi
pip() { "$venv/bin/python" -m pip "$@"; }
if ! "$venv/bin/python" -c "import pytest, simpy, pydantic, transformers, sys; sys.exit(transformers.__version__ != '$version')" 2>/dev/null; then
  pip install --quiet "torch==${TORCH_VERSION:-2.13.0}" "transformers==$version" safetensors \
    "simpy>=4.1" "pydantic>=2.7" "pyyaml>=6" "numpy>=1.26" "pandas>=2.2" "pyarrow>=15" "tqdm>=4.66" \
    "pytest>=8" "hypothesis>=6.100"
fi
"$venv/bin/python" -c "import torch, transformers; print('torch', torch.__version__, '| transformers', transformers.__version__)"
PYTHONPATH=. "$venv/bin/python" -m pytest -p no:cacheprovider "${tests[@]}"
