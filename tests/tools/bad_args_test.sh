#!/usr/bin/env bash
# Every tool with a table of bad arguments: each must exit 2 (usage) with a one-line error naming the
# flag, never run with a replaced value, abort or hang.   bad_args_test.sh BUILD_BIN_DIR
set -uo pipefail
bin=$1
pass=0
fail=0
export SPARROW_SOCKET_IFNAME=lo SPARROW_PROBE_MS=0
expect() {  # expect STATUS EXPECTED_SUBSTRING TOOL ARGS...: that status, the substring, at most 3 lines
  local status=$1 want=$2
  shift 2
  local out rc
  out=$(timeout 60 "$@" 2>&1 </dev/null)
  rc=$?
  if [ $rc -eq "$status" ] && grep -qF -- "$want" <<<"$out" && [ "$(wc -l <<<"$out")" -le 3 ] &&
     ! grep -q "terminate called" <<<"$out"; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL (rc $rc, expected $status): $* -> $out"
  fi
}
check() { expect 2 "$@"; }  # check EXPECTED_SUBSTRING TOOL ARGS...: a usage error
check "--bytes '-5'" "$bin/sparrow-transfer-bench" --bytes -5
check "--bytes '12Q'" "$bin/sparrow-transfer-bench" --bytes 12Q
check "--streams '0'" "$bin/sparrow-transfer-bench" --streams 0
check "--transport 'foo'" "$bin/sparrow-transfer-bench" --transport foo
check "--reps 'x'" "$bin/sparrow-transfer-bench" --reps x
check "unknown option" "$bin/sparrow-transfer-bench" --bogus
check "--probe '-3'" "$bin/sparrow-info" --probe -3
check "--tree '-2'" "$bin/sparrow-info" --tree -2
check "--tree '100000'" "$bin/sparrow-info" --tree 100000
check "--regions 'us,eu'" "$bin/sparrow-info" --tree 4 --regions us,eu
check "--gbps 'x'" "$bin/sparrow-info" --tree 2 --gbps x,1
check "--root '5'" "$bin/sparrow-info" --tree 4 --root 5
check "unknown option" "$bin/sparrow-info" --frob
check "--layers '0'" "$bin/sparrow-codec-bench" --layers 0
check "--steps '-1'" "$bin/sparrow-codec-bench" --steps -1
check "--lr 'abc'" "$bin/sparrow-codec-bench" --lr abc
check "--chunk-elems '10'" "$bin/sparrow-codec-bench" --chunk-elems 10
check "unknown option" "$bin/sparrow-codec-bench" --nope
check "--layers '-3'" "$bin/sparrow-codec-demo" --layers -3
check "--runs '0'" "$bin/sparrow-fault-bench" --runs 0
check "--ranks '2'" "$bin/sparrow-fault-bench" --ranks 2
check "--regions '9'" "$bin/sparrow-fault-bench" --regions 9
check "--lease-ms '5'" "$bin/sparrow-fault-bench" --lease-ms 5
check "--algo 'ring'" "$bin/sparrow-fault-bench" --algo ring
check "--elems '1Q'" "$bin/sparrow-fault-bench" --elems 1Q
check "unknown option" "$bin/sparrow-fault-bench" --what
check "--steps '0'" "$bin/sparrow-codec-demo" --steps 0
check "--layers '-3'" "$bin/sparrow-weight-sync" --layers -3
check "--steps '-1'" "$bin/sparrow-weight-sync" --steps -1
check "-b '-5'" "$bin/sparse_bcast_perf" -b -5
check "-e '1048576'" "$bin/sparse_bcast_perf" -b 8M -e 1M
check "--scenario '/nonexistent.toml'" "$bin/sparse_bcast_perf" --scenario /nonexistent.toml
check "-D/--density '2'" "$bin/sparse_bcast_perf" -D 2
check "--impl 'nccl'" "$bin/sparse_bcast_perf" --impl nccl
check "-d 'bf8'" "$bin/broadcast_perf" -d bf8
check "unknown option" "$bin/broadcast_perf" --what
check "--elastic 'mpi'" "$bin/broadcast_perf" --elastic --impl mpi
check "takes no arguments" "$bin/sparrow-hello" --bogus
check "--fault 'meteor'" "$bin/failover_perf" --fault meteor
check "unknown kind 'explode'" "$bin/wanemu" fault explode eu
check "stall needs --for" "$bin/wanemu" fault stall eu
check "--for needs seconds" "$bin/wanemu" fault stop eu --for -1
check "no WANEMU_CONTROL" env -u WANEMU_CONTROL "$bin/wanemu" fault kill eu
[ -x "$bin/sparrow-ckpt" ] && check "--threads '0'" "$bin/sparrow-ckpt" inspect x --threads 0
src=$(cd "$(dirname "$0")/../.." && pwd)
check "step '12Q' is not a size" bash "$src/bench/run_wan.sh" "$src/bench/scenarios/four_regions.toml" /dev/null 12Q
check "step '-1G' is not a size" bash "$src/bench/run_wan.sh" "$src/bench/scenarios/four_regions.toml" /dev/null -1G
check "scenario 'no.toml' is not a file" bash "$src/bench/run_wan.sh" no.toml /dev/null
check "expected SCENARIO OUT.jsonl" bash "$src/bench/run_wan.sh"
sc4="$src/bench/scenarios/four_regions.toml"
check "--wire '0'" "$bin/sparrow-sim" --scenario "$sc4" --wire 0
check "--wire" "$bin/sparrow-sim" --scenario "$sc4"
check "--scenario" "$bin/sparrow-sim" --wire 16M
check "--streams '0'" "$bin/sparrow-sim" --scenario "$sc4" --wire 16M --streams 0
check "--algo 'ring'" "$bin/sparrow-sim" --scenario "$sc4" --wire 16M --algo ring
check "--ranks '9'" "$bin/sparrow-sim" --scenario "$sc4" --wire 16M --ranks 9
check "--root '8'" "$bin/sparrow-sim" --scenario "$sc4" --wire 16M --root 8
check "--parents" "$bin/sparrow-sim" --scenario "$sc4" --wire 16M --parents -1,0
check "a cycle" "$bin/sparrow-sim" --scenario "$sc4" --wire 16M --ranks 3 --parents -1,2,1
check "--tail-s" "$bin/sparrow-sim" --scenario "$sc4" --wire 16M --tail-s 1,2
check "--encode-s '-1'" "$bin/sparrow-sim" --scenario "$sc4" --wire 16M --encode-s -1
check "--cc 'vegas'" "$bin/sparrow-sim" --scenario "$sc4" --wire 16M --cc vegas
check "size 'x' is not a size" bash "$src/bench/calibrate_sim.sh" /tmp x
check "expected OUTDIR" bash "$src/bench/calibrate_sim.sh"
check "cannot open scenario 'nope.toml'" "$bin/sparrow-sim" --scenario nope.toml --wire 16M
# Running out of memory: one line naming the tool and exit status 1, never an abort with a backtrace.
under_ulimit=(bash -c 'ulimit -v 3000000; exec "$@"' under_ulimit)
expect 1 "out of memory" "${under_ulimit[@]}" "$bin/sparrow-codec-bench" --layers 1000
[ -x "$bin/sparse_bcast_perf" ] && expect 1 "out of memory" "${under_ulimit[@]}" "$bin/sparse_bcast_perf" -b 64G -e 64G -n 1
# No GPU: sparrow-gpu-bench measured nothing, so it fails.
[ -x "$bin/sparrow-gpu-bench" ] && [ ! -e /dev/nvidiactl ] && expect 1 "no GPU on this host" "$bin/sparrow-gpu-bench"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
