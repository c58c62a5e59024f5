#!/usr/bin/env bash
# Configures (once) and builds sparrow into build/ (Release). Extra arguments go to cmake --build.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${SPARROW_BUILD_JOBS:-$(nproc)}
if [ ! -f build/build.ninja ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build build -j"$jobs" "$@"
