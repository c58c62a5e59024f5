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
echo "== 2. weight sync across regions"
exec bash scripts/weight-sync-demo.sh "$@"
