#!/usr/bin/env bash
# A venv that sees the packages of the project's .venv except the ones named, so that a check needing other
# versions of a few packages (or their absence) installs those alone instead of torch, pandas and the rest again.
#   bash scripts/overlay-venv.sh VENV_DIR NAME [NAME...]
# NAME is a distribution's import name (transformers, tokenizers, huggingface_hub, simpy, pydantic, ...): its package
# folder and its .dist-info are left out. The venv's own site-packages come first on sys.path, then a folder of links
# to .venv's remaining entries (through a .pth file), so pip sees those as installed and installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:?usage: overlay-venv.sh VENV_DIR NAME [NAME...]}
shift
python=${PYTHON:-python3}
[ -x .venv/bin/python ] || { echo "overlay-venv: no .venv here (run scripts/setup.sh first)"; exit 1; }
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
site() { "$1" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])"; }
links="$(cd "$venv" && pwd)/base-site"
rm -rf "$links"
mkdir -p "$links"
# .venv's own site-packages, then the system's when .venv sees them (setup.sh makes it so: torch may live there)
bases=$(.venv/bin/python -c "import site; print('\n'.join(site.getsitepackages()))")
for entry in $(for base in $bases; do [ -d "$base" ] && ls -d "$base"/*; done); do
  name=$(basename "$entry")
  stem=$(echo "${name%%-[0-9]*}" | tr 'A-Z-' 'a-z_')  # pydantic_core-2.41.dist-info -> pydantic_core
  stem=${stem%.py}
  case "$name" in *.pth | __pycache__ | __editable__*) continue ;; esac
  skip=false
  for excluded in "$@"; do [ "$stem" = "$excluded" ] && skip=true; done
  $skip || [ -e "$links/$name" ] || ln -s "$entry" "$links/$name"
done
echo "$links" > "$(site "$venv/bin/python")/asyncrl-base-site.pth"
