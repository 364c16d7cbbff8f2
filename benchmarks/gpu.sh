#!/usr/bin/env bash
# The executor on one GPU, offline, in under 9 minutes: calibrate a random-initialised Qwen2.5-1.5B (gpu-small) on
# CUDA, execute gpu-small as sync and as written, compare with the simulator's prediction from the profile, and
# derive decode tokens/s against the HBM roofline, learner MFU, weight-sync GB/s and the learner's peak memory.
#
#   bash benchmarks/gpu.sh [--out DIR] [--wheels DIR]...
#
# For an image with Python, torch and transformers but not simpy and pydantic, and no network: those come from
# local wheel folders (--wheels, repeatable; or ASYNCRL_WHEELS=DIR:DIR; default ../shared/wheels-gpu and .whl/),
# installed with pip --no-index into ASYNCRL_GPU_SITE (default ${TMPDIR:-/tmp}/asyncrl-gpu-site). torch is never
# installed. The project runs from this checkout, through a folder of links laid out as the installed package
# (asyncrl/ with the four parts inside it, as pyproject.toml maps them) on PYTHONPATH. Logs, the profile, runs, figures and the report go
# to --out (default runs/gpu): gpu.log is the whole session, <step>.log each step's output.
#
# ASYNCRL_GPU_DEVICE=cpu ASYNCRL_GPU_SCENARIO=cpu-timing runs the same steps on CPU, to check the script itself.
#
# Exit status: 0 when every step passed, or when torch sees no CUDA device (said, after the project imported
# cleanly); 1 when the project cannot be imported (the error is printed) or a step failed or ran out of time.
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
out=runs/gpu
wheels=()
while [ $# -gt 0 ]; do
  case $1 in
    --out) out=$2; shift 2 ;;
    --wheels) wheels+=("$2"); shift 2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "gpu.sh: unknown argument $1 (use --out DIR, --wheels DIR)" >&2; exit 2 ;;
  esac
done
if [ -n "${ASYNCRL_WHEELS:-}" ]; then IFS=: read -ra listed <<< "$ASYNCRL_WHEELS"; wheels+=("${listed[@]}"); fi
[ ${#wheels[@]} -gt 0 ] || wheels=(../shared/wheels-gpu .whl)
python=${PYTHON:-python3}
device=${ASYNCRL_GPU_DEVICE:-cuda}
scenario=${ASYNCRL_GPU_SCENARIO:-gpu-small}
site=${ASYNCRL_GPU_SITE:-${TMPDIR:-/tmp}/asyncrl-gpu-site}
mkdir -p "$out" && out=$(cd "$out" && pwd)
exec > >(tee -a "$out/gpu.log") 2>&1
deadline=$((SECONDS + 525))  # the whole script, every step included
failed=0

# step NAME SECONDS COMMAND...: run under timeout (cut to what is left of the budget), output to NAME.log too.
step() {
  local name=$1 limit=$2 left rc
  shift 2
  left=$((deadline - SECONDS))
  [ "$limit" -le "$left" ] || limit=$left
  if [ "$limit" -le 0 ]; then
    echo "== $name: skipped, the time budget is spent"; failed=1; return 124
  fi
  echo "== $name (at most ${limit} s) =="
  timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "$out/$name.log"
  rc=${PIPESTATUS[0]}
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then echo "== $name: ran out of time (${limit} s)"; fi
  [ "$rc" -eq 0 ] || failed=1
  return "$rc"
}

# Install what the image lacks, from wheels only.
missing=$("$python" -c "import importlib.util as u; print(' '.join(n for n in ('simpy', 'pydantic') if u.find_spec(n) is None))" 2>&1) || {
  echo "gpu.sh: $python does not run: $missing"; exit 1; }
if [ -n "$missing" ]; then
  links=()
  for dir in "${wheels[@]}"; do [ -d "$dir" ] && links+=(--find-links "$dir"); done
  if [ ${#links[@]} -eq 0 ]; then
    echo "gpu.sh: $missing not installed and no wheel folder found (looked in: ${wheels[*]}); pass --wheels DIR"; exit 1
  fi
  step install 60 "$python" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-index "${links[@]}" \
    --target "$site" --upgrade $missing || { echo "gpu.sh: could not install $missing from ${links[*]}"; exit 1; }
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
# The checkout as the installed package, without installing it (the image may lack setuptools): links.
tree="$site-tree"
bash "$repo/scripts/link-tree.sh" "$tree"
export PYTHONPATH="$tree${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONSAFEPATH=1  # python -c and -m would put this folder first, and its asyncrl/ holds no parts

# Can the project be imported? A failure here is not "no GPU": print it and stop.
step import 60 "$python" -c "
import sys, torch, transformers, asyncrl.executor
import asyncrl.executor.processes.runtime, asyncrl.executor.calibrate, asyncrl.simulator.simulation, asyncrl.analysis.plots.report
print('python', sys.version.split()[0], '| torch', torch.__version__, '| transformers', transformers.__version__)
print('asyncrl from', asyncrl.executor.__file__)
" || { echo "gpu.sh: cannot import the project (error above); this is not a GPU problem"; exit 1; }

[ "$device" = cpu ] || step cuda 30 "$python" -c "
import sys, torch
if not torch.cuda.is_available():
    sys.exit(3)
for i in range(torch.cuda.device_count()):
    p = torch.cuda.get_device_properties(i)
    print(f'cuda:{i} {p.name}, {p.total_memory / 2**30:.0f} GiB, CUDA {torch.version.cuda}')
"
case $? in
  0) ;;
  3) echo "gpu.sh: no CUDA device; skipped (the project imported cleanly)"; exit 0 ;;
  *) echo "gpu.sh: torch could not query CUDA (error above)"; exit 1 ;;
esac
command -v nvidia-smi > /dev/null && nvidia-smi > "$out/nvidia-smi.log" 2>&1

asyncrl=("$python" -m asyncrl)
if step calibrate 150 "${asyncrl[@]}" calibrate "$scenario" --bench --device "$device" --repeats 3 --batch-sizes 1,8,32,64 \
    --out "$out/profile.yaml" --quiet; then
  step speedup 270 "${asyncrl[@]}" demo --device "$device" --scenario "$scenario" --profile "$out/profile.yaml" \
    --steps 4 --out "$out/speedup"
  step figures 30 "$python" benchmarks/gpu_figures.py --scenario "$scenario" --profile "$out/profile.yaml" \
    --runs "$out/speedup/$scenario" --out "$out/figures.json"
fi
echo "gpu.sh: $([ $failed -eq 0 ] && echo 'every step passed' || echo 'a step failed (see above)') in ${SECONDS} s; logs and figures in $out"
exit $failed
