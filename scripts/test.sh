#!/usr/bin/env bash
# README command two: set up, build, and run every test (unit, integration, C99 header, exported
# symbols, demo and bench smoke tests), then fuzz the checkpoint decoder and the connection handshake
# for a bounded time.
#   SPARROW_FUZZ_SECONDS  fuzzing time (default 60; 0 skips it)
#   SPARROW_SANITIZE      asan (default): also build the suite with ASan+UBSan and run the collective,
#                         transport and codec tests under it (scripts/sanitize.sh); tsan; 0 skips it
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
(cd build && ctest --output-on-failure -j"$(nproc)" --timeout 600)
san=${SPARROW_SANITIZE:-asan}
case "$san" in
  0) ;;
  asan|tsan) bash scripts/sanitize.sh "$san" ;;
  *) echo "test.sh: SPARROW_SANITIZE must be asan, tsan or 0, not '$san'" >&2; exit 2 ;;
esac
fuzz=${SPARROW_FUZZ_SECONDS:-60}
if [ "$fuzz" -gt 0 ]; then
  bash scripts/fuzz.sh "$fuzz"
fi
