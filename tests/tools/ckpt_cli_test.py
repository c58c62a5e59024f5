#!/usr/bin/env python3
"""sparrow-ckpt end to end, against safetensors files written here by an independent writer (plain
Python: json + struct), so a reader/writer bug in the tool cannot hide behind itself.

    ckpt_cli_test.py path/to/sparrow-ckpt
"""
import json
import os
import random
import struct
import subprocess
import sys
import tempfile

TOOL = sys.argv[1]
FAILS = []
PASSES = 0


def check(cond, what):
    global PASSES
    if cond:
        PASSES += 1
    else:
        FAILS.append(what)
        print("FAIL:", what, flush=True)


def write_safetensors(path, tensors, meta=None):
    """tensors: list of (name, dtype, shape, bytes)."""
    header, off, blobs = {}, 0, []
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(data)]}
        off += len(data)
        blobs.append(data)
    if meta:
        header["__metadata__"] = meta
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def mutate(data, elem, frac, rng):
    b = bytearray(data)
    n = len(b) // elem
    for i in rng.sample(range(n), max(1, int(n * frac))):
        b[i * elem] ^= 1 + rng.randrange(255)
    return bytes(b)


def run(*args):
    p = subprocess.run([TOOL, *args], capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def main():
    rng = random.Random(7)
    d = tempfile.mkdtemp()
    P = lambda n: os.path.join(d, n)  # noqa: E731
    base = [("model.embed.weight", "BF16", [512, 64], rng.randbytes(512 * 64 * 2)),
            ("model.layers.0.mlp.up.weight", "BF16", [64, 1000], rng.randbytes(64 * 1000 * 2)),
            ("model.norm.weight", "F32", [64], rng.randbytes(64 * 4)),
            ("counts", "I64", [3, 3], rng.randbytes(9 * 8)),
            ("mask", "BOOL", [17], bytes(rng.randrange(2) for _ in range(17))),
            ("empty", "F16", [0], b"")]
    versions = [base]
    for _ in range(3):  # three steps of ~1% changes (i64/bool/f32 tensors change too)
        prev = versions[-1]
        versions.append([(n, t, s, mutate(b, {"BF16": 2, "F16": 2, "F32": 4, "I64": 8, "BOOL": 1}[t], 0.01, rng) if b
                          else b) for n, t, s, b in prev])
    for i, v in enumerate(versions):
        write_safetensors(P(f"v{i}.safetensors"), v, {"run": "test"})

    # diff each consecutive pair, chain them from v0
    for i in range(3):
        rc, out, err = run("diff", P(f"v{i}.safetensors"), P(f"v{i + 1}.safetensors"), "-o", P(f"s{i}.spd"),
                           "--base-version", str(100 + i))
        check(rc == 0, f"diff v{i} v{i + 1}: {err}")
        check("changed" in err and "wrote" in err, f"diff prints progress: {err}")
    rc, out, err = run("apply", P("v0.safetensors"), P("s0.spd"), P("s1.spd"), P("s2.spd"), "-o", P("out.safetensors"))
    check(rc == 0, f"apply chain: {err}")
    check(open(P("out.safetensors"), "rb").read() == open(P("v3.safetensors"), "rb").read(),
          "apply of the chain is byte-identical to v3 (header and data)")

    # inspect
    rc, out, err = run("inspect", P("s1.spd"), "--json")
    check(rc == 0, f"inspect: {err}")
    j = json.loads(out) if rc == 0 else {}
    check(j.get("base_version") == 101 and j.get("new_version") == 102 and not j.get("full"), f"versions: {j}")
    check(len(j.get("tensors", [])) == 6 and j["tensors"][0]["name"] == "model.embed.weight", "tensor table")
    check(0.005 < j.get("density", 0) < 0.02 and j.get("ratio", 0) > 5, f"density/ratio: {j.get('density')} {j.get('ratio')}")
    check(j.get("metadata", {}).get("safetensors", {}).get("counts", {}).get("dtype") == "I64", "metadata")
    rc, out, err = run("inspect", P("s1.spd"))
    check(rc == 0 and "version 101 -> 102" in out and "model.norm.weight" in out, f"inspect text: {out}")

    # verify
    rc, out, err = run("verify", P("s0.spd"))
    check(rc == 0 and "valid" in out, f"verify: {out} {err}")
    rc, out, err = run("verify", P("s0.spd"), "--base", P("v0.safetensors"))
    check(rc == 0 and "applies to" in out, f"verify --base: {out} {err}")
    rc, out, err = run("verify", P("s1.spd"), "--base", P("v0.safetensors"))
    check(rc == 1 and "not the version this step was made from" in err, f"verify against the wrong base: {err}")
    check("valid" not in out, f"verify against the wrong base says valid on stdout: {out}")

    # corrupt and truncated step files, output never half-written
    good = open(P("s1.spd"), "rb").read()
    for name, bad in [("flip", good[:200] + bytes([good[200] ^ 0x40]) + good[201:]), ("trunc", good[:-7]),
                      ("magic", b"XXXX" + good[4:]), ("empty", b"")]:
        with open(P(f"bad_{name}.spd"), "wb") as f:
            f.write(bad)
        rc, out, err = run("verify", P(f"bad_{name}.spd"))
        check(rc == 1 and err.strip(), f"verify {name}: rc {rc} {err}")
        rc, out, err = run("apply", P("v1.safetensors"), P(f"bad_{name}.spd"), "-o", P(f"never_{name}.safetensors"))
        check(rc == 1 and not os.path.exists(P(f"never_{name}.safetensors")), f"apply {name}: rc {rc}, no output")
    check(not [f for f in os.listdir(d) if ".tmp." in f], "no temporary files left behind")
    # a chain out of order, and a step on the wrong base
    rc, out, err = run("apply", P("v0.safetensors"), P("s1.spd"), "-o", P("x.safetensors"))
    check(rc == 1 and "version" in err, f"wrong base: {err}")
    rc, out, err = run("apply", P("v0.safetensors"), P("s0.spd"), P("s2.spd"), "-o", P("x.safetensors"))
    check(rc == 1 and "version" in err, f"gap in the chain: {err}")

    # mismatched layouts, broken safetensors
    other = [(n + "x" if i == 2 else n, t, s, b) for i, (n, t, s, b) in enumerate(base)]
    write_safetensors(P("other.safetensors"), other)
    rc, out, err = run("diff", P("v0.safetensors"), P("other.safetensors"), "-o", P("x.spd"))
    check(rc == 1 and "differs" in err, f"layout mismatch: {err}")
    with open(P("broken.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", 10**6) + b"{}")
    rc, out, err = run("diff", P("broken.safetensors"), P("v0.safetensors"), "-o", P("x.spd"))
    check(rc == 1 and "not a safetensors file" in err, f"broken file: {err}")
    rc, out, err = run("diff", P("v0.safetensors"), P("v1.safetensors"), "-o", "/nonexistent/dir/x.spd")
    check(rc == 1 and "/nonexistent/dir" in err and "compared" not in err, f"unwritable output checked first: {err}")
    rc, out, err = run("diff", P("nonexistent.safetensors"), P("v0.safetensors"), "-o", P("x.spd"))
    check(rc == 1 and "nonexistent" in err, f"missing file: {err}")

    # raw arrays
    raw0 = rng.randbytes(40000 * 2)
    raw1 = mutate(raw0, 2, 0.02, rng)
    open(P("r0.bin"), "wb").write(raw0)
    open(P("r1.bin"), "wb").write(raw1)
    rc, out, err = run("diff", P("r0.bin"), P("r1.bin"), "-o", P("r.spd"), "--raw", "bfloat16", "--codec", "paper")
    check(rc == 0, f"raw diff: {err}")
    rc, out, err = run("apply", P("r0.bin"), P("r.spd"), "-o", P("r1.out"), "--raw", "bfloat16")
    check(rc == 0 and open(P("r1.out"), "rb").read() == raw1, f"raw apply: {err}")

    # usage errors: exit 2 with a one-line reason
    for args, msg in [(["frobnicate"], "unknown command"), (["diff", P("r0.bin")], "wrong number"),
                      (["diff", P("r0.bin"), P("r1.bin")], "-o OUTPUT"), (["inspect", "x", "--threads", "0"], "--threads"),
                      (["diff", "a", "b", "-o", "c", "--chunk-elems", "5"], "--chunk-elems"),
                      (["diff", "a", "b", "-o", "c", "--base-version", "-1"], "--base-version"),
                      (["diff", "a", "b", "-o", "c", "--codec", "zip"], "--codec"),
                      (["diff", "a", "b", "-o", "c", "--raw", "float8"], "--raw"), (["inspect", "x", "--bogus"], "unknown option")]:
        rc, out, err = run(*args)
        check(rc == 2 and msg in err, f"usage {args}: rc {rc} {err}")
    rc, out, err = run("--help")
    check(rc == 0 and "sparrow-ckpt diff" in out, "--help")

    print(f"{PASSES} passed, {len(FAILS)} failed")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
