#!/usr/bin/python3
"""bench/rl_loop_bench.py: a tiny loop as processes on loopback (the ideal mode) and, where the
emulator's namespaces are available, sparrow and dense broadcast on the emulated four regions:
every batch's tokens counted, every batch attributed to one version within the staleness bound,
the trainer's versions pushed; its helpers and its argument checks.
    rl_loop_test.py SOURCE_DIR BIN_DIR"""
import importlib.util
import json
import os
import subprocess
import sys
import tempfile

import checks
from checks import expect

src, bindir = sys.argv[1], sys.argv[2]
tool = os.path.join(src, "bench", "rl_loop_bench.py")
sys.path.insert(0, os.path.join(src, "bench"))
spec = importlib.util.spec_from_file_location("rl_loop_bench", tool)
rl = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rl)

TINY = ["--steps", "3", "--hidden", "64", "--heads", "4", "--intermediate", "128", "--layers", "1", "--batch", "2",
        "--tokens", "4", "--train-batch", "1", "--train-len", "8", "--json"]


def run(args, timeout=300):
    return subprocess.run([sys.executable, tool] + args, capture_output=True, text=True, timeout=timeout)


def check_loop(mode, res, workers):
    expect(res["mode"] == mode and res["workers"] == workers, f"{mode}: {workers} workers: {res['mode']}, {res['workers']}")
    expect(res["tokens"] == workers * 3 * 2 * 4, f"{mode}: tokens counted: {res['tokens']}")
    expect(res["tokens_per_s"] > 0 and 0 <= res["worker_wait_fraction"] <= 1, f"{mode}: rates: {res}")
    for vs in res["versions"]:
        expect(len(vs) == 3, f"{mode}: a version per batch: {vs}")
        expect(all(v >= max(1, b - 1) for b, v in enumerate(vs, 1)), f"{mode}: within the staleness bound: {vs}")
        expect(vs == sorted(vs) and vs[-1] <= 4, f"{mode}: versions only grow, up to the last pushed: {vs}")
    expect(len(res["trainer_steps"]) == 4 and res["wire_MB"] > 0, f"{mode}: 3 trained versions after the first")


# The ideal mode: processes on loopback.
p = run(["--modes", "ideal", "--workers", "2"] + TINY)
expect(p.returncode == 0, f"ideal run: {p.stderr[-2000:]}")
if p.returncode == 0:
    check_loop("ideal", json.loads(p.stdout.strip().splitlines()[-1]), 2)

# On the emulated network, where this machine allows the emulator's namespaces.
wanemu = os.path.join(bindir, "wanemu")
if subprocess.run([wanemu, "selftest", "--probe-only"], capture_output=True).returncode == 0:
    p = run(["--modes", "sparrow,dense", "--wanemu", wanemu] + TINY, timeout=600)
    expect(p.returncode == 0, f"emulated runs: {p.stderr[-3000:]}")
    if p.returncode == 0:
        rows = [json.loads(x) for x in p.stdout.strip().splitlines() if x.startswith("{")]
        expect([r["mode"] for r in rows] == ["sparrow", "dense"], f"both modes: {rows}")
        for r in rows:
            check_loop(r["mode"], r, 3)
        if len(rows) == 2:
            expect(rows[1]["wire_MB"] > 2 * rows[0]["wire_MB"], f"dense sends the whole model: {rows[1]['wire_MB']} MB "
                                                               f"against {rows[0]['wire_MB']}")
else:
    print("emulated runs skipped: the emulator cannot make namespaces here")

# Helpers.
with tempfile.TemporaryDirectory() as d:
    n = rl.one_per_region(os.path.join(src, "bench", "scenarios", "four_regions.toml"), os.path.join(d, "s.toml"))
    text = open(os.path.join(d, "s.toml")).read()
    expect(n == 4 and "count" not in text, f"four_regions, one host per region: {n}")
ranks = [{"role": "trainer", "params": 10, "steps": [{"wait_s": 0, "train_s": 0, "push_s": 1, "wire_bytes": 5},
                                                      {"wait_s": 1, "train_s": 2, "push_s": 3, "wire_bytes": 7e6}]},
         {"role": "worker", "batches": [{"version": 1, "wait_s": 1, "gen_s": 2, "tokens": 10, "start": 11, "end": 13},
                                        {"version": 2, "wait_s": 1, "gen_s": 2, "tokens": 10, "start": 14, "end": 20}]}]
s = rl.summary("sparrow", ranks)
expect(s["seconds"] == 10 and s["tokens_per_s"] == 2 and abs(s["worker_wait_fraction"] - 0.2) < 1e-12,
       f"summary: window from the first wait to the last batch's end: {s}")
expect(s["wire_MB"] == 7 and s["push_s"] == 3 and s["versions"] == [[1, 2]], f"summary: the trained steps only: {s}")

# Bad arguments: one line, exit status 2.
for bad in (["--modes", "nope"], ["--workers", "2"], ["--steps", "0"], ["--heads", "3"], ["--lr", "2"],
            ["--scenario", "/no/such.toml"]):
    p = run(bad, timeout=60)
    expect(p.returncode == 2 and "error" in p.stderr, f"{bad}: exit {p.returncode}, {p.stderr[-300:]}")

print(f"rl_loop test: {checks.fails} failed")
