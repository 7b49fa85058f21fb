#!/usr/bin/env bash
# The main job on the bundled specs: set up, validate, build every spec into build/, then verify them:
# on a GPU both backends at full size; without one, the Pallas kernels in Mosaic GPU interpret mode.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
S=.venv/bin/schedgen
SPECS=$(ls specs/*.yaml specs/*.toml)
$S validate $SPECS
$S build $SPECS -o build
if .venv/bin/python -c 'from schedgen.runtime.driver import available; import sys; sys.exit(not available()[0])'; then
  $S verify $SPECS
else
  echo "no GPU here: verifying the Pallas kernels in interpret mode at small sizes"
  $S verify --backend pallas --interpret --small $SPECS
fi
