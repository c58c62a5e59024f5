#!/usr/bin/env bash
# README command one: set up, build, and run the demos: the codec on one machine, then the
# weight-sync demo (a trainer and 7 rollout workers in 4 emulated regions).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh --target sparrow-codec-demo sparrow-weight-sync wanemu
echo "== 1. the sparse delta checkpoint codec (one process)"
build/bin/sparrow-codec-demo --layers 1 --vocab 4096 --steps 3
echo
targets=$(cmake --build build --target help)  # captured: grep -q's early exit would fail the pipe
if grep -q '_sparrow' <<<"$targets"; then
  bash scripts/build.sh --target _sparrow
  echo "== 2. PyTorch: a trainer taking real AdamW steps and 3 rollout workers, through the Python module"
  py=$(cat build/python/PYTHON 2>/dev/null || true)  # the interpreter the module was built for
  SPARROW_SOCKET_IFNAME=lo PYTHONPATH=build/python "${py:-python3}" examples/python/rl_weight_sync.py --workers 3 --steps 4
else
  echo "== 2. (skipped: the Python module was not built; scripts/setup.sh installs pybind11 and PyTorch)"
fi
echo
echo "== 3. weight sync across regions"
exec bash scripts/weight-sync-demo.sh "$@"
