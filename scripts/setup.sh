#!/usr/bin/env bash
# Installs what sparrow needs to build and test on Debian 12 (as root, or with sudo). Safe to re-run:
# only missing packages are installed.
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config git
      libzstd-dev libxxhash-dev libgtest-dev libgmock-dev libbenchmark-dev
      libopenmpi-dev openmpi-bin libucx-dev libhwloc-dev
      libssl-dev clang libclang-rt-14-dev iperf3 iproute2 util-linux procps python3 python3-matplotlib
      python3-dev pybind11-dev python3-pybind11 python3-numpy python3-pytest python3-torch
      python3-setuptools python3-wheel python3-venv python3-pip nlohmann-json3-dev)
missing=()
for p in "${pkgs[@]}"; do
  st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [ "$st" = "install ok installed" ] || missing+=("$p")
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
