#!/usr/bin/python3
"""Turns sparse_bcast_perf / broadcast_perf and rl_loop_sim JSON lines into plots (matplotlib, Debian's
python3-matplotlib).

    bench/plot.py results.jsonl [more.jsonl ...] -o plots/   (Debian's /usr/bin/python3)

Writes: time_vs_density.png (sync time against density, per impl), sparse_vs_dense.png (time per impl
and scenario), time_vs_size.png (time against buffer size, per impl), time_vs_step.png (time per step
against the step's dense size, sparrow vs the SparrowRL-format ablation vs each one's lower bound:
where latency stops dominating), and prints the same comparison as a table. From
`bench/rl_loop_sim.py --sweep-mbit ... --json` rows: tokens_vs_bandwidth.png (rollout tokens/s
against the access links' rate, per model: sparrow, dense broadcast and the ablation, the ideal as a
dashed line).
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


def step_label(r):
    return f"{r['model']} ({r['size'] / 1e9:.2f} GB)" if r.get("model") else f"{r['size'] / 2**20:.0f} MiB"


def comparison(rows):
    """Per scenario, rank count and step: each impl's time, wire bytes and lower bound (the best of
    its rows: the benchmarks report a mean per row)."""
    table = collections.defaultdict(dict)
    for r in rows:
        if r.get("tool") != "sparse_bcast_perf":
            continue
        key = (os.path.basename(r.get("scenario", "")) or "loopback", r["ranks"], r["size"], step_label(r))
        best = table[key].get(r["impl"])
        if best is None or r["time_us"] < best["time_us"]:
            table[key][r["impl"]] = r
    return table


def fmt_ms(r):
    return f"{r['time_us'] / 1e3:9.1f}" if r else f"{'-':>9}"


def print_table(table):
    print("scenario          ranks  step                      sparrow_MB  sparrow_ms  x_bound   paper_MB   paper_ms  x_bound"
          "  paper/sparrow   dense_ms     mpi_ms")
    for key in sorted(table):
        scen, ranks, _, label = key
        t = table[key]
        s, p = t.get("sparrow"), t.get("paper")
        def xb(r):
            return f"{r['time_vs_bound']:7.2f}x" if r and r.get("bound_us") else f"{'-':>8}"
        def mb(r):
            return f"{r['wire_bytes'] / 1e6:10.2f}" if r else f"{'-':>10}"
        speed = f"{p['time_us'] / s['time_us']:13.2f}x" if s and p else f"{'-':>14}"
        print(f"{scen[:17]:17} {ranks:5}  {label[:24]:24} {mb(s)} {fmt_ms(s):>11} {xb(s)} {mb(p)} {fmt_ms(p):>10} {xb(p)}"
              f" {speed} {fmt_ms(t.get('dense')):>10} {fmt_ms(t.get('mpi')):>10}")


def plot_time_vs_step(plt, table, path):
    fig, ax = plt.subplots()
    series = collections.defaultdict(list)
    for (scen, ranks, size, _), t in table.items():
        for impl in ("sparrow", "paper"):
            r = t.get(impl)
            if r and r.get("wire_bytes"):
                series[(scen, ranks, impl)].append((size / 1e9, r["time_us"] / 1e3, r.get("bound_us", 0) / 1e3))
    for (scen, ranks, impl), pts in sorted(series.items()):
        pts.sort()
        line, = ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=f"{impl} ({scen}, {ranks} ranks)")
        bound = [p for p in pts if p[2] > 0]
        if bound:
            ax.plot([p[0] for p in bound], [p[2] for p in bound], ":", color=line.get_color(),
                    label=f"lower bound of {impl} ({scen})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("step: dense bytes of the buffers (GB)")
    ax.set_ylabel("time per step (ms)")
    ax.legend(fontsize=6)
    fig.savefig(path, dpi=120)
    return len(series)


def plot_loop(plt, rows, path):
    """Rollout tokens/s against link bandwidth, per model and mode (rl_loop_sim rows with mbit)."""
    fig, ax = plt.subplots()
    series = collections.defaultdict(list)
    for r in rows:
        if r.get("mbit"):
            series[(r["model"], r["mode"])].append((r["mbit"], r["tokens_per_s"]))
    for (model, mode), pts in sorted(series.items()):
        if mode == "blocking":
            continue
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "--" if mode == "ideal" else "o-", label=f"{model}: {mode}")
    ax.set_xscale("log")
    ax.set_xlabel("access link rate (Mbit/s)")
    ax.set_ylabel("rollout tokens per second")
    ax.legend(fontsize=6)
    fig.savefig(path, dpi=120)
    print(f"{'model':>10} {'mbit':>7} " + " ".join(f"{m:>9}" for m in ("sparrow", "paper", "dense", "ideal")))
    for model in sorted({m for m, _ in series}):
        rates = sorted({x for (mo, _), pts in series.items() if mo == model for x, _ in pts})
        for mbit in rates:
            by = {mode: dict(pts).get(mbit) for (mo, mode), pts in series.items() if mo == model}
            print(f"{model:>10} {mbit:>7g} " + " ".join(f"{by[m]:>9.0f}" if by.get(m) else f"{'-':>9}"
                                                      for m in ("sparrow", "paper", "dense", "ideal")))
    return len(series)


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
    loop = [r for r in rows if r.get("tool") == "rl_loop_sim" and not r.get("calibration")]
    rows = [r for r in rows if "impl" in r]
    if loop:
        if not plot_loop(plt, loop, os.path.join(a.out, "tokens_vs_bandwidth.png")):
            sys.exit("rl_loop_sim rows without a link rate: run it with --sweep-mbit")
        print(f"wrote tokens_vs_bandwidth.png to {a.out}/ from {len(loop)} rows")
    if not rows:
        return

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

    table = comparison(rows)
    plot_time_vs_step(plt, table, os.path.join(a.out, "time_vs_step.png"))
    print_table(table)
    print(f"wrote 4 plots to {a.out}/ from {len(rows)} rows")


if __name__ == "__main__":
    main()
