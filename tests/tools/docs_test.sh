#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The README is a front page, not a diary: no dated measurements (those live in docs/benchmarks.md
# with their command, machine and date), and every repository path it names exists.
#   docs_test.sh SOURCE_DIR
set -uo pipefail
src=$1
fail=0
if grep -nE '20[0-9]{2}-[01][0-9]-[0-3][0-9]' "$src/README.md"; then
  echo "FAIL: README.md carries dated figures; they belong in docs/benchmarks.md"
  fail=1
fi
for p in $(grep -oE '(docs|examples|scripts|bench|tools)/[A-Za-z0-9_./-]+\.(md|py|sh|c|toml)' "$src/README.md" | sort -u); do
  [ -e "$src/$p" ] || { echo "FAIL: README.md names $p, which does not exist"; fail=1; }
done
grep -q '^| what | figure | command | machine, date |' "$src/docs/benchmarks.md" ||
  { echo "FAIL: docs/benchmarks.md has no headline table with command, machine and date"; fail=1; }
[ -f "$src/LICENSE" ] && grep -q "Apache License" "$src/LICENSE" || { echo "FAIL: no Apache LICENSE"; fail=1; }
[ "$fail" = 0 ] && echo "docs check: 1 passed, 0 failed"
exit "$fail"
