#!/usr/bin/python3
"""bench/rl_loop_sim.py: the loop's schedule against closed forms (generation-bound, trainer-bound,
sync-bound, the staleness chain), projections with sparrow-sim on four_regions.toml (modes in the
order the network allows, prices from the scenario, a bandwidth sweep), the calibration path on a
run whose answer is known, and its argument checks.
    rl_loop_sim_test.py SOURCE_DIR BIN_DIR"""
import importlib.util
import json
import os
import subprocess
import sys
import tempfile

import checks
from checks import expect

src, bindir = sys.argv[1], sys.argv[2]
tool = os.path.join(src, "bench", "rl_loop_sim.py")
spec = importlib.util.spec_from_file_location("rl_loop_sim", tool)
sim = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sim)
SIM = ["--sim", os.path.join(bindir, "sparrow-sim")]


def run(args, timeout=300):
    return subprocess.run([sys.executable, tool] + SIM + args, capture_output=True, text=True, timeout=timeout)


def near(x, want, rel, what):
    expect(abs(x / want - 1) <= rel, f"{what}: {x:.4g}, expected {want:.4g} (within {rel:.0%})")


# The schedule: 2 workers of 10 tokens per batch, 300 steps (the first steps' transient is small).
def tps(mode, gen, train, sync, push=0.0, tail=0.0):
    return sim.play(300, [gen, gen], 10, train, mode, None if sync is None else [sync, sync], push, [tail, tail],
                    0.0)["tokens_per_s"]


near(tps("ideal", 10, 5, None), 2 * 10 / 10, 0.02, "generation-bound: a batch per 10 s")
near(tps("sparrow", 2, 5, 0.1, push=0.5), 2 * 10 / 5.5, 0.02, "trainer-bound: its step and push, 5.5 s")
near(tps("dense", 2, 1, 20), 2 * 10 / 21, 0.02, "dense, sync-bound: the broadcast and a training step per version")
near(tps("sparrow", 2, 1, 10), 2 * 10 / 6.5, 0.02, "staleness 1: training, sync and a batch per two batches")
expect(tps("sparrow", 2, 1, 1.5, tail=1) > tps("blocking", 2, 1, 1.5, tail=1),
       "staging hides the decoding that a blocking worker does at the boundary")

# Projections on the emulated scenario's network (every host of four_regions.toml: 7 workers).
p = run(["--model", "qwen3-4b", "--steps", "20", "--modes", "sparrow,paper,dense,ideal", "--json"])
expect(p.returncode == 0, f"projection ran: {p.stderr[-2000:]}")
if p.returncode == 0:
    rows = {r["mode"]: r for r in map(json.loads, p.stdout.splitlines())}
    expect(set(rows) == {"sparrow", "paper", "dense", "ideal"}, f"one row per mode: {list(rows)}")
    s, d, i = rows["sparrow"], rows["dense"], rows["ideal"]
    expect(i["tokens_per_s"] >= s["tokens_per_s"] > d["tokens_per_s"], f"ideal >= sparrow > dense: {i}, {s}, {d}")
    expect(d["sync_s"] >= 8.04e9 / 125e6, f"dense: 8 GB through a 1 Gbit/s uplink at least: {d['sync_s']}")
    expect(s["sync_s"] < d["sync_s"] / 10, f"sparrow's sync: {s['sync_s']} s against {d['sync_s']}")
    expect(rows["paper"]["wire_bytes"] > 2 * s["wire_bytes"], "the ablation's wire bytes")
    expect(abs(s["vs_dense"] - s["tokens_per_s"] / d["tokens_per_s"]) < 1e-9 and s["workers"] == 7, f"ratios: {s}")
    # Cost: 8 hosts x 8 GPUs on demand, plus egress to the 3 other regions per version.
    hourly = 8 * 8 * 2.85 + s["wire_bytes"] * 3 / 1e9 / s["period_s"] * 3600 * 0.09
    near(s["usd_per_hour"], hourly, 1e-6, "on-demand GPUs and egress per hour (the scenario's prices)")
    near(s["reserved_tokens_per_usd"], i["tokens_per_s"] * 3600 / (8 * 8 * 6.5), 1e-6, "reserved cluster at ideal speed")

p = run(["--model", "qwen3-4b", "--steps", "10", "--modes", "sparrow,dense", "--one-per-region", "--sweep-mbit",
         "200,2000", "--json"])
expect(p.returncode == 0, f"sweep ran: {p.stderr[-2000:]}")
if p.returncode == 0:
    rows = [json.loads(x) for x in p.stdout.splitlines()]
    by = {(r["mode"], r["mbit"]): r for r in rows}
    expect(len(rows) == 4 and by[("dense", 200)]["workers"] == 3, f"two modes at two rates, 3 workers: {list(by)}")
    expect(by[("dense", 2000)]["tokens_per_s"] > 2 * by[("dense", 200)]["tokens_per_s"], "dense gains from the link")
    expect(by[("dense", 200)]["sync_s"] > 5 * by[("dense", 2000)]["sync_s"], "the sweep sets the links' rate")

# Calibration: a run of 2 workers generating 10 tokens per 1 s batch, 5 steps, free sync: the
# generation-bound schedule gives 20 tokens/s, as "measured".
with tempfile.TemporaryDirectory() as d:
    run_row = {"mode": "ideal", "tokens_per_s": 20.0, "worker_wait_fraction": 0.0, "push_s": 0.0, "train_s": 0.5,
               "wire_MB": 1.0, "params": 1000, "batches": [[{"gen_s": 1.0, "tokens": 10}] * 5] * 2}
    path = os.path.join(d, "run.jsonl")
    with open(path, "w") as f:
        f.write(json.dumps(run_row) + "\n")
    p = run(["--calibrate", path, "--json"])
    expect(p.returncode == 0, f"calibration ran: {p.stderr[-1000:]}")
    if p.returncode == 0:
        row = json.loads(p.stdout.splitlines()[0])
        expect(abs(row["error"]) < 0.01 and row["predicted"] > 0, f"the known answer: {row}")

# Bad arguments: one line, exit status 2.
for bad in (["--model", "nope"], ["--modes", "fast"], ["--sweep-mbit", "x"], ["--steps", "0"], ["--gen-s", "-1"]):
    p = run(bad, timeout=60)
    expect(p.returncode == 2 and "error" in p.stderr, f"{bad}: exit {p.returncode}, {p.stderr[-300:]}")

print(f"rl_loop_sim test: {checks.fails} failed")
