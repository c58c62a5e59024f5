#!/usr/bin/env bash
# The weight-sync demo: a trainer and 7 rollout workers in 4 emulated regions (wanemu's namespace
# emulator when this machine allows it: root and /dev/net/tun; else its loopback proxy, which models
# link rates and delays but not TCP dynamics; plain loopback as a last resort), and it says which.
#   scripts/weight-sync-demo.sh [sparrow-weight-sync options, e.g. --steps 10]
set -uo pipefail
cd "$(dirname "$0")/.."
bin=build/bin
args=(--model qwen3-0.6b --layers 2 --vocab 1024 --steps 10 "$@")
export SPARROW_TCP_CONGESTION=${SPARROW_TCP_CONGESTION:-bbr}
if "$bin/wanemu" selftest --probe-only >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && [ -c /dev/net/tun ]; then
  echo "== emulated WAN: bench/scenarios/four_regions.toml (us, eu, ap, sa; RTT 20-200 ms; 1 Gbit/s access links)"
  for attempt in 1 2; do
    if timeout --kill-after=30 240 scripts/wanemu-mpirun.sh bench/scenarios/four_regions.toml "$bin/sparrow-weight-sync" "${args[@]}"; then
      exit 0
    fi
    # Known issue: mpirun's start-up across emulated hosts occasionally stalls; a retry usually works.
    echo "== attempt $attempt did not finish within 4 minutes; retrying" >&2
  done
  echo "== the emulated run failed twice; falling back to wanemu's loopback proxy" >&2
else
  echo "== NOTE: no namespace WAN emulation here (needs root and /dev/net/tun): using wanemu's loopback proxy"
fi
# The unprivileged fallback: the scenario's link rates and delays on sparrow's connections, without
# TCP dynamics (the emulator prints this too).
echo "== emulated links (proxy): bench/scenarios/four_regions.toml"
if WANEMU_PROXY=1 timeout --kill-after=30 240 scripts/wanemu-mpirun.sh bench/scenarios/four_regions.toml "$bin/sparrow-weight-sync" "${args[@]}"; then
  exit 0
fi
echo "== the proxy run failed too; running on plain loopback, no link model" >&2
export SPARROW_SOCKET_IFNAME=lo
exec timeout 600 mpirun --allow-run-as-root --oversubscribe -np 8 --mca btl self,tcp --mca btl_tcp_if_include lo \
  --mca oob_tcp_if_include lo -x SPARROW_SOCKET_IFNAME -x SPARROW_TCP_CONGESTION "$bin/sparrow-weight-sync" "${args[@]}"
