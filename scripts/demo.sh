#!/usr/bin/env bash
# README command one: set up, build, and run the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh --target sparrow-codec-demo
exec build/bin/sparrow-codec-demo "$@"
