#!/usr/bin/env bash
# Runs an MPI program with one rank per emulated host of a wanemu scenario:
#   scripts/wanemu-mpirun.sh SCENARIO.toml PROGRAM [ARGS...]
# mpirun itself runs inside host 0; it starts the other ranks' daemons inside their hosts through
# `wanemu rsh`, so every byte between ranks (MPI's and sparrow's) crosses the emulated links.
# Without root or /dev/net/tun it uses wanemu's loopback proxy instead (rates and delays only).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
wanemu=${WANEMU:-$here/build/bin/wanemu}
# Every SPARROW_* setting of the caller reaches every rank (mpirun forwards only what -x names),
# except the per-host ones wanemu sets inside each emulated host. The list is made by the outer call.
forward=()
for v in ${WANEMU_MPI_FORWARD:-}; do forward+=(-x "$v"); done
if [ "${1:-}" = "--inside" ]; then
  shift
  hosts=${WANEMU_ADDRS}
  # Open MPI waits forever for a daemon that died before it reported (seen here about once in ten
  # launches through the emulator): mpirun starts rank 0 itself once every daemon reported, so if
  # no child of mpirun runs PROGRAM within WANEMU_MPI_LAUNCH_S seconds (default 60), the launch
  # is ended (mpirun, by its PID; the run's teardown ends its daemons) and tried again, up to
  # WANEMU_MPI_LAUNCH_TRIES launches in all (default 3). Nothing of PROGRAM has run then. If every
  # launch failed, status 75 asks the outer call for a fresh emulated network (below).
  prog=$(readlink -f "$(command -v "$1")" 2>/dev/null || echo "$1")
  launch_s=${WANEMU_MPI_LAUNCH_S:-60}
  case $launch_s in '' | *[!0-9]*) echo "wanemu-mpirun: WANEMU_MPI_LAUNCH_S=$launch_s is not a number of seconds" >&2; exit 2 ;; esac
  tries=${WANEMU_MPI_LAUNCH_TRIES:-3}
  case $tries in '' | *[!0-9]* | 0) echo "wanemu-mpirun: WANEMU_MPI_LAUNCH_TRIES=$tries is not a positive number" >&2; exit 2 ;; esac
  for ((try = 1; try <= tries; try++)); do
    mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$WANEMU_NRANKS" --host "$hosts" \
      --mca plm_rsh_agent "${WANEMU_RSH_AGENT:-$wanemu rsh}" --mca plm_rsh_no_tree_spawn 1 \
      --mca btl self,tcp --mca btl_tcp_if_include 10.77.0.0/16 --mca oob_tcp_if_include 10.77.0.0/16 \
      -x WANEMU_SCENARIO -x WANEMU_CONTROL -x WANEMU_BIN "${forward[@]}" "$@" &
    pid=$!
    launched=0
    for ((t = 0; t < launch_s * 10 && !launched; t++)); do
      kill -0 "$pid" 2>/dev/null || break
      for c in $(cat /proc/"$pid"/task/*/children 2>/dev/null); do
        [ "$(readlink -f /proc/"$c"/exe 2>/dev/null)" = "$prog" ] && launched=1
      done
      [ $launched = 1 ] || sleep 0.1  # polling a launch, not a synchronisation
    done
    if [ $launched = 1 ] || ! kill -0 "$pid" 2>/dev/null; then
      rc=0
      wait "$pid" || rc=$?
      exit $rc
    fi
    echo "wanemu-mpirun: mpirun started no rank of $1 within ${launch_s} s (a daemon died before it reported); ending it (try $try of $tries)" >&2
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  exit 75
fi
if [ "${1:-}" = "--inside-proxy" ]; then
  # The unprivileged fallback: every rank on loopback, each one a host through `wanemu enter`.
  shift
  exec mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$WANEMU_NRANKS" \
    --mca btl self,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \
    -x WANEMU_SCENARIO "${forward[@]}" "$wanemu" enter -- "$@"
fi
if [ $# -lt 2 ]; then
  echo "usage: $0 SCENARIO.toml PROGRAM [ARGS...]" >&2
  exit 2
fi
scenario=$1
shift
export WANEMU_MPI_FORWARD="$(compgen -e | grep '^SPARROW_' | grep -vE '^SPARROW_(SOCKET_IFNAME|SOCKET_ADDR|REGION)$' | tr '\n' ' ' || true)"
export WANEMU_SCENARIO=$(cd "$(dirname "$scenario")" && pwd)/$(basename "$scenario")
# Without root or /dev/net/tun (or with WANEMU_PROXY=1): the loopback proxy, which applies the link
# rates and delays to sparrow's TCP connections but not TCP dynamics (MPI's own traffic is direct).
if [ "${WANEMU_PROXY:-0}" = 1 ] || ! "$wanemu" selftest --probe-only >/dev/null 2>&1; then
  exec "$wanemu" run "$scenario" --proxy --launcher -- "$here/scripts/wanemu-mpirun.sh" --inside-proxy "$@"
fi
# Launches that all failed in one emulated network (status 75 from the inside: in one CI run all
# three failed in a row, where a single one fails about once in ten) are tried again in a fresh one,
# up to WANEMU_MPI_NETWORKS networks (default 2); then the run fails with status 1.
networks=${WANEMU_MPI_NETWORKS:-2}
case $networks in '' | *[!0-9]* | 0) echo "wanemu-mpirun: WANEMU_MPI_NETWORKS=$networks is not a positive number" >&2; exit 2 ;; esac
for ((net = 1; ; net++)); do
  rc=0
  "$wanemu" run "$scenario" --launch-in 0 -- "$here/scripts/wanemu-mpirun.sh" --inside "$@" || rc=$?
  { [ "$rc" = 75 ] && [ "$net" -lt "$networks" ]; } || break
  echo "wanemu-mpirun: no launch started a rank in this emulated network; a fresh one (network $((net + 1)) of $networks)" >&2
done
[ "$rc" = 75 ] && rc=1
exit "$rc"
