#!/usr/bin/env bash
# Runs the collective benchmarks on an emulated scenario and collects JSON lines:
#   bench/run_wan.sh bench/scenarios/four_regions.toml results.jsonl [SIZE]
# sparrow sparse_bcast at ~1% density, the paper-format ablation, sparrow dense, MPI_Bcast dense.
set -uo pipefail
cd "$(dirname "$0")/.."
scenario=$1
out=$2
size=${3:-64M}
b=build/bin
export SPARROW_TCP_CONGESTION=${SPARROW_TCP_CONGESTION:-cubic}
run() {
  for attempt in 1 2; do
    if timeout 600 scripts/wanemu-mpirun.sh "$scenario" "$@" --json >>"$out"; then return 0; fi
    pkill -9 orted 2>/dev/null
  done
  echo "benchmark failed twice: $*" >&2
}
run $b/sparse_bcast_perf -b "$size" -e "$size" -n 5 --impl sparrow
run $b/sparse_bcast_perf -b "$size" -e "$size" -n 5 --impl paper
run $b/sparse_bcast_perf -b "$size" -e "$size" -n 2 --impl dense
run $b/sparse_bcast_perf -b "$size" -e "$size" -n 2 --impl mpi
