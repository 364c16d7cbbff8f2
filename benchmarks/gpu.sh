#!/usr/bin/env bash
# The executor's two performance figures on CUDA, from one script: continuous batching against
# generate(), and streaming against sync on the same GPU slots. Under 8 minutes on one GPU;
# without a CUDA device it says so and exits 0.
#   bash benchmarks/gpu.sh
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-.venv/bin/python}
[ -x "$python" ] || python=python3
if ! "$python" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "gpu.sh: no CUDA device; skipped"
  exit 0
fi
"$python" -c "import torch; print('device:', torch.cuda.get_device_name(0), '| torch', torch.__version__)"
echo "== continuous batching vs generate(), tiny model =="
timeout 180 "$python" benchmarks/engine_throughput.py --device cuda --skip-generate-batch
echo "== cpu-timing scenario on CUDA: streaming vs sync =="
timeout 240 "$python" benchmarks/executor_schedules.py --scenario cpu-timing --device cuda --steps 20
