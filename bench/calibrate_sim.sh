#!/usr/bin/env bash
# Calibrates the schedule simulator against the emulator:
#   bench/calibrate_sim.sh OUTDIR [SIZE ...]
# Runs sparse_bcast (sparrow and the SparrowRL-format ablation, 3 steps each, 1% random changes) for
# every SIZE (default: 64M 256M 1G) on five networks: us_canada.toml, eu_us_1g.toml and
# transpacific_200m.toml (2 ranks each), four_regions.toml with one host per region (4 ranks) and
# four_regions.toml itself (8 ranks); the rows go to
# OUTDIR/rows.jsonl, and bench/calibrate_sim.py compares each with sparrow-sim's prediction
# (OUTDIR/calibration.json, and the table on stdout). Needs root (the emulator's namespaces).
set -uo pipefail
usage() {
  sed -n '2,/^[^#]/p' "$0" | sed '$d; s/^# \{0,1\}//'
}
case "${1:-}" in -h | --help) usage; exit 0 ;; esac
if [ $# -lt 1 ]; then
  echo "calibrate_sim.sh: expected OUTDIR [SIZE ...] (--help)" >&2
  exit 2
fi
out=$1
shift
sizes=("$@")
[ ${#sizes[@]} -eq 0 ] && sizes=(64M 256M 1G)
for s in "${sizes[@]}"; do
  if ! [[ "$s" =~ ^[1-9][0-9]*[KMG]?$ ]]; then
    echo "calibrate_sim.sh: size '$s' is not a size (e.g. 64M, 1G)" >&2
    exit 2
  fi
done
mkdir -p "$out" || exit 2
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."
for t in build/bin/sparse_bcast_perf build/bin/sparrow-sim; do
  [ -x "$t" ] || { echo "calibrate_sim.sh: $t is missing (bash scripts/build.sh)" >&2; exit 2; }
done
# four_regions with one host per region.
sed 's/^count = 2$/count = 1/' bench/scenarios/four_regions.toml >"$out/four_regions_1.toml"
export SPARROW_TCP_CONGESTION=${SPARROW_TCP_CONGESTION:-bbr}
failed=0
for sc in bench/scenarios/us_canada.toml bench/scenarios/eu_us_1g.toml bench/scenarios/transpacific_200m.toml \
    "$out/four_regions_1.toml" bench/scenarios/four_regions.toml; do
  for s in "${sizes[@]}"; do
    for impl in sparrow paper; do
      echo "# $(date +%T) $impl $s on $sc" >&2
      if ! timeout --kill-after=30 900 scripts/wanemu-mpirun.sh "$sc" build/bin/sparse_bcast_perf -b "$s" -e "$s" -n 3 \
          --impl "$impl" --json >>"$out/rows.jsonl"; then
        echo "calibrate_sim.sh: the run failed: $impl $s on $sc" >&2
        failed=1
      fi
    done
  done
done
python3 bench/calibrate_sim.py --json "$out/calibration.json" "$out/rows.jsonl" || failed=1
exit $failed
