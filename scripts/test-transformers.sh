#!/usr/bin/env bash
# The engine's exactness tests (and the learner's log-prob tests) under one transformers version, in a venv of its own.
#   bash scripts/test-transformers.sh VERSION [VENV_DIR] [PYTEST ARGS...]
# Its own venv (default .venv-transformers-VERSION) is an overlay of the project's .venv (scripts/overlay-venv.sh):
# it sees .venv's torch, pandas, pytest and the rest, and holds only transformers==VERSION and the libraries that
# version pins (tokenizers, huggingface_hub), so a run installs a few MB instead of a second torch. Given VENV_DIR
# (the GPU-image mimic's), that venv is used as it is, with what the tests need added. The project is put on the
# path as a folder of links laid out as the installed package (scripts/link-tree.sh), not installed.
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:?usage: test-transformers.sh VERSION [VENV_DIR] [PYTEST ARGS...]}
venv=${2:-.venv-transformers-$version}
[ $# -ge 2 ] || bash scripts/overlay-venv.sh "$venv" transformers tokenizers huggingface_hub
shift $(( $# >= 2 ? 2 : 1 ))
tests=("$@")
[ ${#tests[@]} -gt 0 ] || tests=(tests/test_engine.py tests/test_logprobs.py)
"$venv/bin/python" -m pip install --quiet "transformers==$version" safetensors "simpy>=4.1" "pydantic>=2.7" \
  "pyyaml>=6" "numpy>=1.26" "pandas>=2.2" "pyarrow>=15" "tqdm>=4.66" "pytest>=8" "hypothesis>=6.100"
"$venv/bin/python" -c "import torch, transformers; print('torch', torch.__version__, '| transformers', transformers.__version__)"
tree="$(cd "$venv" && pwd)/asyncrl-tree"
bash scripts/link-tree.sh "$tree"
"$venv/bin/python" -m pytest -p no:cacheprovider --import-mode=append -o "pythonpath=$tree ." "${tests[@]}"
