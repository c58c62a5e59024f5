#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Fails when a library file includes from a layer above its own (docs/architecture.md, Layers).

    check-layering.py [ROOT]      # ROOT: the source tree (default: this script's parent's parent)

Each folder of the library is a layer; a file may include its own layer, the layers below it and the
standard library. `sparrow/` (the public header) is open to the layers that implement it.
Prints every violation as FILE:LINE: LAYER includes ABOVE, then "N violation(s) in M files".
"""
import os
import re
import sys

# Lowest first. A layer may include itself and everything before it in this list.
ORDER = ["core", "format", "kernels", "transport", "bootstrap", "topology", "comm", "collectives", "model", "api"]
# The public header, for the layers that define its functions.
PUBLIC = {"api", "bootstrap"}
# Folders of src/ that are not library layers, with what they may use (none today).
EXTRA = {}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/')


def layer_of(rel):
    parts = rel.split(os.sep)
    if parts[0] == "src" and len(parts) > 2:
        return parts[1]
    return None


def allowed(layer):
    if layer in EXTRA:
        ok = set(EXTRA[layer])
    else:
        ok = set(ORDER[: ORDER.index(layer) + 1])
    if layer in PUBLIC:
        ok.add("sparrow")
    return ok


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    bad, files = [], set()
    for top in ("src",):
        for d, _, names in os.walk(os.path.join(root, top)):
            for n in sorted(names):
                if not n.endswith((".h", ".cpp", ".cu", ".cuh")):
                    continue
                path = os.path.join(d, n)
                rel = os.path.relpath(path, root)
                layer = layer_of(rel)
                if layer is None:
                    continue
                if layer not in ORDER and layer not in EXTRA:
                    bad.append(f"{rel}: folder '{layer}' is not a known layer (add it to scripts/check-layering.py)")
                    files.add(rel)
                    continue
                ok = allowed(layer)
                with open(path, errors="replace") as f:
                    for i, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if m and m.group(1) not in ok:
                            bad.append(f"{rel}:{i}: {layer} includes {m.group(1)}/ (a layer above it)")
                            files.add(rel)
    for b in bad:
        print(b)
    print(f"check-layering: {len(bad)} violation(s) in {len(files)} files")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
