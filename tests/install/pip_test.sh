#!/usr/bin/env bash
# `pip install .` offline into a fresh virtual environment (Debian's setuptools, pybind11, numpy and
# torch through --system-site-packages; nothing downloaded), then the binding's tests against the
# installed module, outside the source tree.
#   pip_test.sh PYTHON BUILD_DIR
set -euo pipefail
py=$1
build=$(cd "$2" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$py" -m venv --system-site-packages "$tmp/venv"
(cd "$src" && SPARROW_BUILD_DIR="$build" "$tmp/venv/bin/pip" install -q --no-build-isolation --no-index .)
site=$("$tmp/venv/bin/python" -c 'import sparrow, os; print(os.path.dirname(os.path.dirname(sparrow.__file__)))')
case "$site" in "$src"*) echo "FAIL: imported from the source tree ($site)"; exit 1;; esac
cd "$tmp"
SPARROW_PYTHONPATH="$site" "$tmp/venv/bin/python" -m pytest -q -p no:cacheprovider \
  "$src/python/tests/test_binding.py" -k "unique_id or weight_sync or modified_receiver"
echo "pip test: installed module passed"
