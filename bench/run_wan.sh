#!/usr/bin/env bash
# Runs the collective benchmarks on an emulated scenario and collects JSON lines:
#   bench/run_wan.sh SCENARIO OUT.jsonl [STEP ...]
# For each STEP: sparrow sparse_bcast at ~1% density, the SparrowRL-format ablation (--impl paper),
# sparrow dense and MPI_Bcast dense, all in the same run. A STEP is
#   SIZE       a buffer of that many bytes (suffix K M G) with 1% random changes per step, e.g. 1G
#   model      realistic RL steps of a scaled Qwen3 (qwen3-0.6b, 2 layers, 1024-row vocabulary:
#              65 MB of bf16, the demo's model: latency-bound)
#   realistic  realistic RL steps of qwen3-8b with 2 layers and an 18,992-row vocabulary (1.08 GB of
#              bf16, ~7 MB on the wire): bandwidth and CPU matter
# Default: model 1G realistic. Then: bench/plot.py OUT.jsonl -o plots/ (time per step against the
# wire bytes, sparrow vs the ablation vs the lower bound, and a table of the same).
# Each rank holds its buffer and the codec's copies of it: mind the memory with the 1G and
# realistic steps on scenarios with many hosts.
set -uo pipefail
usage() {
  sed -n '2,/^[^#]/p' "$0" | sed '$d; s/^# \{0,1\}//'
}
case "${1:-}" in -h | --help) usage; exit 0 ;; esac
if [ $# -lt 2 ]; then
  echo "run_wan.sh: expected SCENARIO OUT.jsonl [STEP ...] (--help)" >&2
  exit 2
fi
scenario=$1
out=$2
shift 2
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(model 1G realistic)
if [ ! -f "$scenario" ]; then
  echo "run_wan.sh: scenario '$scenario' is not a file" >&2
  exit 2
fi
for s in "${steps[@]}"; do
  case "$s" in
    model | realistic) ;;
    *) if ! [[ "$s" =~ ^[1-9][0-9]*[KMG]?$ ]]; then
         echo "run_wan.sh: step '$s' is not a size (e.g. 64M, 1G), 'model' or 'realistic'" >&2
         exit 2
       fi ;;
  esac
done
cd "$(dirname "$0")/.."
b=build/bin
export SPARROW_TCP_CONGESTION=${SPARROW_TCP_CONGESTION:-bbr}
failed=0
run() {
  for attempt in 1 2; do
    if timeout --kill-after=30 900 scripts/wanemu-mpirun.sh "$scenario" "$@" --json >>"$out"; then return 0; fi
  done
  echo "benchmark failed twice: $*" >&2
  failed=1
}
for s in "${steps[@]}"; do
  case "$s" in
    model) what=(--model qwen3-0.6b --layers 2 --vocab 1024) ;;
    realistic) what=(--model qwen3-8b --layers 2 --vocab 18992) ;;
    *) what=(-b "$s" -e "$s") ;;
  esac
  echo "# $(date +%T) step '$s' on $scenario" >&2
  run $b/sparse_bcast_perf "${what[@]}" -n 5 --impl sparrow
  run $b/sparse_bcast_perf "${what[@]}" -n 5 --impl paper
  run $b/sparse_bcast_perf "${what[@]}" -n 2 --impl dense
  run $b/sparse_bcast_perf "${what[@]}" -n 2 --impl mpi
done
exit $failed
