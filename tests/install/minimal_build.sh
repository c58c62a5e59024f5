#!/usr/bin/env bash
# The core library without its optional dependencies, built as a subproject (add_subdirectory) of
# tests/install/subproject: configure with UCX, MPI, OpenSSL and hwloc off (and tests, benchmarks, Python and
# CUDA off by default there), build libsparrow and a program linked to sparrow::sparrow, check the
# library links none of them, then build examples/hello.c against it as a user would
# (cc ... -lsparrow -Wl,-rpath) and run both: four ranks over TCP, authenticated with the built-in HMAC.
#   minimal_build.sh SOURCE_DIR WORK_DIR
set -euo pipefail
src=$1
work=$2
rm -rf "$work"
mkdir -p "$work"
cmake -S "$src/tests/install/subproject" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DSPARROW_SOURCE_DIR="$src" -DSPARROW_WITH_UCX=OFF -DSPARROW_WITH_MPI=OFF -DSPARROW_WITH_OPENSSL=OFF -DSPARROW_WITH_HWLOC=OFF \
  > "$work/configure.log"
grep -A12 "configuration (" "$work/configure.log"
cmake --build "$work/build" -j"$(nproc)" --target hello > "$work/build.log"
lib=$work/build/sparrow/lib/libsparrow.so.0
needed=$(readelf -d "$lib" | grep NEEDED || true)
echo "$needed"
fail=0
for dep in libucp libucs libcrypto libmpi libhwloc; do
  if grep -q "$dep" <<<"$needed"; then
    echo "FAIL: libsparrow needs $dep in a build without it"
    fail=1
  fi
done
if ! "$work/build/hello" > "$work/sub.log" 2>&1 || ! grep -q "all steps delivered" "$work/sub.log"; then
  cat "$work/sub.log"
  echo "FAIL: hello linked to sparrow::sparrow from add_subdirectory"
  fail=1
fi
cc -std=c11 -O1 "$src/examples/hello.c" -I"$src/include" -L"$work/build/sparrow/lib" -lsparrow -lpthread \
  -Wl,-rpath,"$work/build/sparrow/lib" -o "$work/hello"
if ! "$work/hello" > "$work/hello.log" 2>&1 || ! grep -q "all steps delivered" "$work/hello.log"; then
  cat "$work/hello.log"
  echo "FAIL: hello against the minimal library"
  fail=1
fi
tail -2 "$work/hello.log"
if SPARROW_TRANSPORT=ucx "$work/hello" > "$work/ucx.log" 2>&1; then
  echo "FAIL: SPARROW_TRANSPORT=ucx ran in a build without UCX"
  fail=1
elif ! grep -q "no UCX" "$work/ucx.log"; then
  cat "$work/ucx.log"
  echo "FAIL: asking for UCX in a build without it does not say so"
  fail=1
fi
[ "$fail" = 0 ] && echo "minimal build: all passed"
exit "$fail"
