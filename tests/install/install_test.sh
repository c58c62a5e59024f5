#!/usr/bin/env bash
# Installs the build into a temporary prefix and uses it the three ways a dependent project would:
# find_package(sparrow CONFIG) from a CMake project, pkg-config with a plain cc line, and the installed
# tools (RUNPATHs relative to the prefix, no reference to the build tree).
#   install_test.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null
libdir=$prefix/lib
[ -d "$libdir" ] || libdir=$(dirname "$(find "$prefix" -name 'libsparrow.so.0' -print -quit)")
echo "installed into $prefix"

# 1. CMake package.
cmake -S "$here/consumer" -B "$tmp/cmake-build" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$tmp/cmake-build" >/dev/null
"$tmp/cmake-build/app"
if [ -x "$tmp/cmake-build/app_mpi" ]; then
  mpirun --allow-run-as-root --oversubscribe -x SPARROW_SOCKET_IFNAME=lo -x SPARROW_PROBE_MS=30 \
    --mca btl self,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo -np 2 "$tmp/cmake-build/app_mpi"
fi

# 2. pkg-config, as the README shows it (the rpath, or LD_LIBRARY_PATH, lets the program find libsparrow.so.0).
export PKG_CONFIG_PATH="$libdir/pkgconfig"
[ "$(pkg-config --modversion sparrow)" != "" ]
cc -o "$tmp/app_pc" "$here/consumer/app.c" $(pkg-config --cflags --libs sparrow) -Wl,-rpath,"$libdir" -lpthread
"$tmp/app_pc"

# 3. Installed tools run from the prefix and carry no build-tree path.
for f in "$prefix"/bin/* "$libdir"/libsparrow*.so*; do
  [ -L "$f" ] && continue
  # (Outputs are captured before grep -q: with pipefail, a writer cut off by grep's early exit fails.)
  dyn=$(readelf -d "$f")
  if grep -E 'RUNPATH|RPATH' <<<"$dyn" | grep -F "$build" >/dev/null; then
    echo "FAIL: $f has a RUNPATH into the build tree"; readelf -d "$f" | grep -E 'RUNPATH|RPATH'; exit 1
  fi
done
info=$("$prefix/bin/sparrow-info" -c)
grep -q SPARROW_CHUNK_ELEMS <<<"$info"
bench=$("$prefix/bin/sparrow-codec-bench" --model qwen3-0.6b --layers 1 --vocab 512 --steps 1 --json)
grep -q '"bit_exact": true' <<<"$bench"
[ -f "$prefix/lib/cmake/sparrow/sparrowConfig.cmake" ] || [ -f "$libdir/cmake/sparrow/sparrowConfig.cmake" ]
echo "install test: all passed"
