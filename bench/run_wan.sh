#!/usr/bin/env bash
# Runs the collective benchmarks on an emulated scenario and collects JSON lines:
#   bench/run_wan.sh bench/scenarios/four_regions.toml results.jsonl [SIZE|model]
# sparrow sparse_bcast at ~1% density, the paper-format ablation, sparrow dense, MPI_Bcast dense.
# SIZE: random 1% mutations of a buffer of that size; "model": realistic RL steps of a scaled Qwen3
# (qwen3-0.6b, 2 layers, 1024-row vocabulary: 65 MB of bf16) from the update generator.
set -uo pipefail
cd "$(dirname "$0")/.."
scenario=$1
out=$2
size=${3:-64M}
b=build/bin
export SPARROW_TCP_CONGESTION=${SPARROW_TCP_CONGESTION:-bbr}
run() {
  for attempt in 1 2; do
    if timeout --kill-after=30 600 scripts/wanemu-mpirun.sh "$scenario" "$@" --json >>"$out"; then return 0; fi
  done
  echo "benchmark failed twice: $*" >&2
}
if [ "$size" = model ]; then
  what=(--model qwen3-0.6b --layers 2 --vocab 1024)
else
  what=(-b "$size" -e "$size")
fi
run $b/sparse_bcast_perf "${what[@]}" -n 5 --impl sparrow
run $b/sparse_bcast_perf "${what[@]}" -n 5 --impl paper
run $b/sparse_bcast_perf "${what[@]}" -n 2 --impl dense
run $b/sparse_bcast_perf "${what[@]}" -n 2 --impl mpi
