#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) and fuzzes the checkpoint decoder for a bounded
# time, then the connection handshake and sealed-record opening for a third of it.
# Usage: scripts/fuzz.sh [SECONDS]   (default 60)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
  -DCMAKE_CXX_COMPILER=clang++ -DSPARROW_FUZZ=ON >/dev/null
cmake --build build-fuzz -j2 --target checkpoint_fuzz handshake_fuzz
corpus=build-fuzz/corpus
mkdir -p "$corpus"
build-fuzz/bin/checkpoint_fuzz --write-seeds "$corpus"
echo "fuzzing the checkpoint decoder for ${secs}s"
build-fuzz/bin/checkpoint_fuzz -max_total_time="$secs" -max_len=65536 -timeout=10 -print_final_stats=1 "$corpus" 2>&1 | tail -15
hs_corpus=build-fuzz/corpus-handshake
mkdir -p "$hs_corpus"
build-fuzz/bin/handshake_fuzz --write-seeds "$hs_corpus"
echo "fuzzing the handshake and sealed records for $((secs / 3 + 1))s"
build-fuzz/bin/handshake_fuzz -max_total_time=$((secs / 3 + 1)) -max_len=4096 -timeout=10 -print_final_stats=1 "$hs_corpus" 2>&1 | tail -15
