#!/usr/bin/env bash
# The GPU entry (benchmarks/gpu.sh) on this CPU machine, in an environment like the GPU image: a clean venv with
# torch and transformers 5.17 and the image's other packages, but no simpy or pydantic, which gpu.sh must install
# from wheel folders with no index. Then the engine's exactness tests under that transformers, in the same venv.
#   bash scripts/gpu-mimic.sh [VENV_DIR]
# The GPU image runs Python 3.12 and the shared wheel folder holds a cp312 pydantic_core; on another Python a
# matching pydantic_core wheel is downloaded from the package index into a temporary folder first (the only
# network use here; gpu.sh itself installs with --no-index).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! ls ../shared/wheels-gpu/pydantic-*.whl >/dev/null 2>&1; then
  echo "gpu-mimic: no wheel folder at ../shared/wheels-gpu (the GPU image's simpy and pydantic wheels); skipped"
  exit 0
fi
transformers_version=5.17.0
venv=${1:-.venv-gpu-mimic}
python=${PYTHON:-python3}
# The image's packages are .venv's (torch, numpy, pandas, pyarrow, pyyaml, matplotlib, tqdm), seen through an
# overlay without simpy and pydantic (scripts/overlay-venv.sh), with the image's transformers installed over them.
pydantic_family=(simpy pydantic pydantic_core annotated_types typing_inspection)
bash scripts/overlay-venv.sh "$venv" transformers tokenizers huggingface_hub "${pydantic_family[@]}"
pip() { "$venv/bin/python" -m pip "$@"; }
pip install --quiet "transformers==$transformers_version" safetensors numpy pandas pyarrow pyyaml matplotlib tqdm
# typer (transformers' CLI) pulls pydantic in; the image has none, and an earlier test run leaves simpy: out again
pip uninstall --quiet --yes simpy pydantic pydantic_core 2>/dev/null || true
"$venv/bin/python" -c "import importlib.util as u, sys; sys.exit(any(u.find_spec(m) for m in ('simpy', 'pydantic')))" || {
  echo "gpu-mimic: the venv sees simpy or pydantic before gpu.sh installs them"; exit 1; }
wheels=(--wheels ../shared/wheels-gpu)
tag=$("$venv/bin/python" -c "import sys; print(f'cp{sys.version_info[0]}{sys.version_info[1]}')")
if [ "$tag" != cp312 ]; then
  extra=$(mktemp -d)
  core=$("$venv/bin/python" - ../shared/wheels-gpu/pydantic-*.whl <<'PY'
import re, sys, zipfile
wheel = zipfile.ZipFile(sys.argv[1])
metadata = next(name for name in wheel.namelist() if name.endswith(".dist-info/METADATA"))
print(re.search(r"^Requires-Dist: pydantic-core==([\w.]+)", wheel.read(metadata).decode(), re.M).group(1))
PY
)
  pip download --quiet --no-deps --only-binary=:all: -d "$extra" "pydantic_core==$core"
  wheels+=(--wheels "$extra")
fi
out=$(mktemp -d)
set +e
PYTHON="$venv/bin/python" ASYNCRL_GPU_SITE="$out/site" bash benchmarks/gpu.sh --out "$out/gpu" "${wheels[@]}"
rc=$?
set -e
grep -q "no CUDA device; skipped (the project imported cleanly)" "$out/gpu/gpu.log" || {
  echo "gpu-mimic: gpu.sh did not reach its honest end on a machine without a GPU (exit $rc)"; exit 1; }
[ "$rc" -eq 0 ] || { echo "gpu-mimic: gpu.sh exited $rc"; exit 1; }
echo "gpu-mimic: gpu.sh installed from wheels, imported the project, found no CUDA device and exited 0"
bash scripts/test-transformers.sh "$transformers_version" "$venv"
