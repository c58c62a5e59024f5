#!/usr/bin/env bash
# scripts/wanemu-mpirun.sh's launch watchdog: an rsh agent that never starts the first remote daemon
# it is asked for (as when a daemon dies before it reports) makes mpirun wait forever; the script
# must end that launch after WANEMU_MPI_LAUNCH_S, say so, and succeed with a later one (three
# tries: a daemon that dies on its own, about one launch in ten here, must not fail the test when
# it hits the one launch after the planted loss). A daemon missing on every try must end the run
# with a failure, not a hang, after the launches of a fresh emulated network failed too. Skipped (77) without the
# namespace emulator. A good launch of the 8 ranks takes ~2-4 s here and took longer than 5 s on a
# CI machine, so the launch that must succeed gets 30 s; where both tries fail whatever the timing
# (no daemon ever starts), 5 s keeps the test short.
#   wanemu_mpirun_launch_test.sh WANEMU SCENARIO SPARSE_BCAST_PERF
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
wanemu=$1 scenario=$2 prog=$3
"$wanemu" selftest --probe-only >/dev/null 2>&1 || { echo "skipped: no namespace emulator"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat >"$dir/agent" <<AGENT
#!/usr/bin/env bash
# fails the first remote daemon it is asked for (every one with FAIL_ALWAYS=1)
if [ "\${FAIL_ALWAYS:-0}" = 1 ] || mkdir "$dir/once" 2>/dev/null; then exit 0; fi
exec "$wanemu" rsh "\$@"
AGENT
chmod +x "$dir/agent"
run() { WANEMU="$wanemu" WANEMU_RSH_AGENT="$dir/agent" WANEMU_MPI_LAUNCH_S=$1 WANEMU_MPI_LAUNCH_TRIES=$2 timeout 200 \
          "$here/scripts/wanemu-mpirun.sh" "$scenario" "$prog" -b 64K -e 64K -n 1 -w 0 2>&1; }
out=$(run 30 3)
rc=$?
echo "$out"
[ $rc = 0 ] || { echo "FAIL: no later launch succeeded (rc $rc)"; exit 1; }
grep -q "started no rank of .* (try 1 of 3)" <<<"$out" || { echo "FAIL: the stuck launch was not reported"; exit 1; }
grep -q "x_bound" <<<"$out" || { echo "FAIL: no result table"; exit 1; }
rmdir "$dir/once"
out=$(FAIL_ALWAYS=1 run 5 2)
rc=$?
echo "$out"
[ $rc = 1 ] || { echo "FAIL: two stuck launches must end with status 1, got $rc"; exit 1; }
grep -q "(try 2 of 2)" <<<"$out" || { echo "FAIL: the second stuck launch was not reported"; exit 1; }
grep -q "a fresh one (network 2 of 2)" <<<"$out" || { echo "FAIL: no fresh network was tried"; exit 1; }
echo "wanemu-mpirun launch test: passed"
