#!/usr/bin/python3
"""bench/plot.py on benchmark rows written here: it writes its four plots and its comparison table
takes each impl's best row per step, with sparrow beside the SparrowRL-format ablation and the
bound.   plot_test.py SOURCE_DIR"""
import json
import os
import subprocess
import sys
import tempfile

import checks
from checks import expect

src = sys.argv[1]


def row(impl, size, model, wire, ms, bound_ms):
    return {"tool": "sparse_bcast_perf", "impl": impl, "ranks": 4, "size": size, "model": model,
            "scenario": "/some/where/four_regions.toml", "density": 0.01, "time_us": ms * 1e3,
            "wire_bytes": wire, "bound_us": bound_ms * 1e3, "time_vs_bound": ms / bound_ms if bound_ms else 0}


rows = [row("sparrow", 2**30, "", 16.2e6, 400.0, 200.0), row("sparrow", 2**30, "", 16.2e6, 300.0, 200.0),
        row("paper", 2**30, "", 40e6, 600.0, 250.0), row("dense", 2**30, "", 0, 9000.0, 0),
        row("sparrow", 65e6, "qwen3-0.6b", 0.42e6, 95.0, 78.0), row("paper", 65e6, "qwen3-0.6b", 1e6, 120.0, 80.0)]
with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "rows.jsonl")
    with open(path, "w") as f:
        f.write("# a comment line\n")
        for r in rows:
            f.write(json.dumps(r) + "\n")
    out = subprocess.run(["/usr/bin/python3", os.path.join(src, "bench/plot.py"), path, "-o", os.path.join(d, "p")],
                         capture_output=True, text=True, timeout=120)
    print(out.stdout, out.stderr)
    expect(out.returncode == 0, "plot.py exit status %d" % out.returncode)
    for png in ("time_vs_density.png", "sparse_vs_dense.png", "time_vs_size.png", "time_vs_step.png"):
        p = os.path.join(d, "p", png)
        expect(os.path.exists(p) and os.path.getsize(p) > 1000, png + " written")
    lines = [l for l in out.stdout.splitlines() if l.startswith("four_regions")]
    expect(len(lines) == 2, "one table line per step")
    big = [l for l in lines if "1024 MiB" in l]
    expect(len(big) == 1 and "300.0" in big[0] and "1.50x" in big[0] and "2.00x" in big[0] and "9000.0" in big[0],
           "1 GiB line: sparrow's best 300 ms, 1.5x its bound, the ablation 2x slower, dense 9 s")
    small = [l for l in lines if "qwen3-0.6b" in l]
    expect(len(small) == 1 and "1.26x" in small[0], "the model's line: ablation/sparrow 1.26x")
    bad = subprocess.run(["/usr/bin/python3", os.path.join(src, "bench/plot.py"), os.path.join(d, "none.jsonl")],
                         capture_output=True, text=True, timeout=60)
    expect(bad.returncode != 0, "a missing input fails")
    # rl_loop_sim rows (a bandwidth sweep): the tokens/s plot and its table, alone in a file.
    loop = os.path.join(d, "loop.jsonl")
    with open(loop, "w") as f:
        for mbit, tps in ((100, {"sparrow": 900, "dense": 60, "paper": 500, "ideal": 1000}),
                          (1000, {"sparrow": 1000, "dense": 400, "paper": 980, "ideal": 1000})):
            for mode, t in tps.items():
                f.write(json.dumps({"tool": "rl_loop_sim", "model": "qwen3-8b", "mode": mode, "mbit": mbit,
                                    "tokens_per_s": t}) + "\n")
    out = subprocess.run(["/usr/bin/python3", os.path.join(src, "bench/plot.py"), loop, "-o", os.path.join(d, "q")],
                         capture_output=True, text=True, timeout=120)
    expect(out.returncode == 0, "plot.py on loop rows: " + out.stderr[-500:])
    p = os.path.join(d, "q", "tokens_vs_bandwidth.png")
    expect(os.path.exists(p) and os.path.getsize(p) > 1000, "tokens_vs_bandwidth.png written")
    table = [l.split() for l in out.stdout.splitlines() if l.strip().startswith("qwen3-8b")]
    expect(table == [["qwen3-8b", "100", "900", "500", "60", "1000"], ["qwen3-8b", "1000", "1000", "980", "400", "1000"]],
           f"one line per rate: sparrow, ablation, dense, ideal: {table}")
print(f"plot test: {checks.fails} failed")
sys.exit(1 if checks.fails else 0)
