#!/usr/bin/python3
"""Turns sparse_bcast_perf / broadcast_perf JSON lines into plots (matplotlib, Debian's python3-matplotlib).

    bench/plot.py results.jsonl [more.jsonl ...] -o plots/   (Debian's /usr/bin/python3)

Writes: time_vs_density.png (sync time against density, per impl), sparse_vs_dense.png (time per impl
and scenario), time_vs_size.png (time against buffer size, per impl).
"""
import argparse
import collections
import json
import os
import sys


def load(paths):
    rows = []
    for p in paths:
        with open(p) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    rows.append(json.loads(line))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="+")
    ap.add_argument("-o", "--out", default="plots")
    a = ap.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("matplotlib is missing: apt-get install python3-matplotlib")
    rows = load(a.inputs)
    if not rows:
        sys.exit("no JSON rows in the inputs")
    os.makedirs(a.out, exist_ok=True)

    by = collections.defaultdict(list)
    for r in rows:
        by[(r["impl"], os.path.basename(r.get("scenario", "")) or "loopback")].append(r)

    fig, ax = plt.subplots()
    for (impl, scen), rs in sorted(by.items()):
        rs = sorted(rs, key=lambda r: r["density"])
        if len({r["density"] for r in rs}) > 1:
            ax.plot([100 * r["density"] for r in rs], [r["time_us"] / 1e3 for r in rs], "o-", label=f"{impl} ({scen})")
    ax.set_xlabel("density (% of elements changed)")
    ax.set_ylabel("sync time (ms)")
    ax.set_yscale("log")
    ax.legend(fontsize=7)
    fig.savefig(os.path.join(a.out, "time_vs_density.png"), dpi=120)

    fig, ax = plt.subplots()
    labels = [f"{impl}\n{scen}" for (impl, scen) in sorted(by)]
    ax.bar(range(len(labels)), [min(r["time_us"] for r in by[k]) / 1e3 for k in sorted(by)])
    ax.set_xticks(range(len(labels)), labels, fontsize=6, rotation=45, ha="right")
    ax.set_ylabel("sync time (ms)")
    ax.set_yscale("log")
    fig.tight_layout()
    fig.savefig(os.path.join(a.out, "sparse_vs_dense.png"), dpi=120)

    fig, ax = plt.subplots()
    for (impl, scen), rs in sorted(by.items()):
        rs = sorted(rs, key=lambda r: r["size"])
        if len({r["size"] for r in rs}) > 1:
            ax.plot([r["size"] for r in rs], [r["time_us"] / 1e3 for r in rs], "o-", label=f"{impl} ({scen})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("buffer bytes")
    ax.set_ylabel("sync time (ms)")
    ax.legend(fontsize=7)
    fig.savefig(os.path.join(a.out, "time_vs_size.png"), dpi=120)
    print(f"wrote 3 plots to {a.out}/ from {len(rows)} rows")


if __name__ == "__main__":
    main()
