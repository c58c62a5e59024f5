#!/usr/bin/env bash
# SPARROW_DEBUG_SUBSYS: with STEP, every rank logs one INFO line per step (sparrow-hello: 4 ranks as
# threads, 4 steps: 4 root lines, 12 receiver lines); plain INFO logs none; NET alone logs no tree.
#   step_log_test.sh BIN_DIR
set -uo pipefail
bin=$1
export SPARROW_SOCKET_IFNAME=lo SPARROW_PROBE_MS=50 SPARROW_DEBUG=INFO
fail=0
check() {  # name got want
  if [ "$2" != "$3" ]; then echo "FAIL: $1: $2 (want $3)"; fail=$((fail + 1)); else echo "ok: $1: $2"; fi
}
out=$(SPARROW_DEBUG_SUBSYS=STEP "$bin/sparrow-hello" 2>&1)
check "root step lines" "$(grep -c 'sparse_bcast op [0-9]* (root)' <<<"$out")" 4
check "receiver step lines" "$(grep -c 'sparse_bcast op [0-9]* (receiver)' <<<"$out")" 12
check "other INFO lines with STEP only" "$(grep ' INFO ' <<<"$out" | grep -vc 'sparse_bcast op')" 0
out=$("$bin/sparrow-hello" 2>&1)
check "step lines at plain INFO" "$(grep -c 'sparse_bcast op' <<<"$out")" 0
check "INFO lines at plain INFO (some)" "$([ "$(grep -c ' INFO ' <<<"$out")" -gt 0 ] && echo yes)" yes
out=$(SPARROW_DEBUG_SUBSYS=^tree,step "$bin/sparrow-hello" 2>&1)
check "tree lines with ^tree" "$(grep ' INFO ' <<<"$out" | grep -c 'tree.cpp')" 0
echo "step log test: $fail failed"
exit $((fail > 0))
