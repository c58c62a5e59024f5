#!/usr/bin/env bash
# Installs what sparrow needs to build and test on Debian 12 (as root, or with sudo). Safe to re-run:
# only missing packages are installed.
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config git
      libzstd-dev libxxhash-dev libgtest-dev libgmock-dev libbenchmark-dev
      libopenmpi-dev openmpi-bin libucx-dev libhwloc-dev
      libssl-dev clang libclang-rt-14-dev iperf3 iproute2 util-linux procps python3 python3-matplotlib)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#pkgs[@]} packages present"
  exit 0
fi
echo "setup: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done"
