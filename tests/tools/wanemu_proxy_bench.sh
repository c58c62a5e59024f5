#!/usr/bin/env bash
# sparse_bcast_perf through wanemu's loopback-proxy fallback: it must say it is the fallback, finish,
# report the lower-bound column, and exit 0 (the benchmark exits non-zero on a wrong bit).
#   wanemu_proxy_bench.sh WANEMU SCENARIO SPARSE_BCAST_PERF
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
out=$(WANEMU_PROXY=1 WANEMU="$1" "$here/scripts/wanemu-mpirun.sh" "$2" "$3" -b 4M -e 4M -n 2 -w 1 2>&1)
rc=$?
echo "$out"
grep -q "UNPRIVILEGED FALLBACK" <<<"$out" || { echo "not run through the proxy"; exit 1; }
grep -q "x_bound" <<<"$out" || { echo "no result table"; exit 1; }
exit $rc
