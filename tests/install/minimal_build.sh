#!/usr/bin/env bash
# The core library without its optional dependencies: configure with UCX, MPI and OpenSSL off, build
# libsparrow only, check it links none of them, then build examples/hello.c against it as a user would
# (cc ... -lsparrow -Wl,-rpath) and run it: four ranks over TCP, authenticated with the built-in HMAC.
#   minimal_build.sh SOURCE_DIR WORK_DIR
set -euo pipefail
src=$1
work=$2
rm -rf "$work"
mkdir -p "$work"
cmake -S "$src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSPARROW_WITH_UCX=OFF -DSPARROW_WITH_MPI=OFF \
  -DSPARROW_WITH_OPENSSL=OFF -DSPARROW_BUILD_TESTS=OFF -DSPARROW_BUILD_BENCH=OFF -DSPARROW_BUILD_PYTHON=OFF \
  > "$work/configure.log"
grep -A12 "configuration (" "$work/configure.log"
cmake --build "$work/build" -j"$(nproc)" --target sparrow > "$work/build.log"
lib=$work/build/lib/libsparrow.so.0
needed=$(readelf -d "$lib" | grep NEEDED || true)
echo "$needed"
fail=0
for dep in libucp libucs libcrypto libmpi; do
  if grep -q "$dep" <<<"$needed"; then
    echo "FAIL: libsparrow needs $dep in a build without it"
    fail=1
  fi
done
cc -std=c11 -O1 "$src/examples/hello.c" -I"$src/include" -L"$work/build/lib" -lsparrow -lpthread \
  -Wl,-rpath,"$work/build/lib" -o "$work/hello"
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
