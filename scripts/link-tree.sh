#!/usr/bin/env bash
# The checkout laid out as the installed package, in links: DIR/asyncrl/ holds asyncrl/'s modules and the four
# parts (scenarios, simulator, executor, analysis), as pyproject.toml maps them. With DIR on PYTHONPATH an
# interpreter that has not installed asyncrl (the GPU image, a venv of other versions) imports this checkout.
#   bash scripts/link-tree.sh DIR
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
tree=${1:?usage: link-tree.sh DIR}
rm -rf "$tree" && mkdir -p "$tree/asyncrl"
for entry in "$repo"/asyncrl/*; do ln -s "$entry" "$tree/asyncrl/"; done
for part in scenarios simulator executor analysis; do ln -s "$repo/$part" "$tree/asyncrl/$part"; done
