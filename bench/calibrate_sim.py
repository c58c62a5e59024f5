#!/usr/bin/env python3
"""Compares sparrow-sim's predictions with measured sparse_bcast steps.

    bench/calibrate_sim.py [--sim build/bin/sparrow-sim] [--json OUT] ROWS.jsonl...

ROWS are sparse_bcast_perf --json lines run under the emulator (bench/run_wan.sh or
bench/calibrate_sim.sh writes them): each carries its scenario, the last step's time, when every rank
returned (finish_s) and every rank's stage times and tree (per_rank). For each row the simulator is
given the same network, tree, wire bytes and framing, and the CPU costs the run measured (the root's
encode time, every receiver's time after its last byte); what it predicts is the network's part:
when each rank's last byte arrives and so when it returns. The table shows the step and the slowest
receiver's return, predicted against measured, the error, and the rates the tree's edges reached
(bytes over first to last byte at each child: where they fall short of the links' shares, TCP
held the step back in a way the model does not capture); the summary the mean and worst absolute
error over the rows (the goal: within 15%).
"""
import argparse
import json
import os
import subprocess
import sys


def load_rows(paths):
    rows = []
    for p in paths:
        with open(p) as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    sys.exit(f"calibrate_sim: {p}:{n}: not JSON ({e})")
                if (row.get("tool") == "sparse_bcast_perf" and row.get("impl") in ("sparrow", "paper")
                        and row.get("per_rank") and row.get("finish_s")):
                    rows.append(row)
    return rows


def sim_args(row, extra):
    """The sparrow-sim arguments that describe the row's last step."""
    ranks = sorted(row["per_rank"], key=lambda r: r["rank"])
    n = row["ranks"]
    if len(ranks) != n:
        raise ValueError(f"{len(ranks)} per-rank entries for {n} ranks")
    parents = ["-1" if r["parent"] is None else str(r["parent"]) for r in ranks]
    root = ranks[row["root"]]
    tails = []
    for r in ranks:
        s = r["seconds"]
        if r["rank"] == row["root"] or s.get("last_byte") is None or s.get("total") is None:
            tails.append(0.0)
        else:
            tails.append(max(0.0, s["total"] - s["last_byte"]))
    wire = root.get("wire_bytes") or row["wire_bytes"]  # the last step's
    return [
        "--scenario", row["scenario"], "--ranks", str(n), "--root", str(row["root"]),
        "--parents", ",".join(parents), "--wire", str(int(wire)),
        "--dense", str(row["size"]), "--encode-s", f"{root['seconds'].get('encode') or 0:.6f}",
        "--tail-s", ",".join(f"{t:.6f}" for t in tails), "--json",
    ] + extra


def predict(sim, row, extra):
    out = subprocess.run([sim] + sim_args(row, extra), capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip())
    return json.loads(out.stdout.splitlines()[-1])


def compare(row, pred):
    finish = row["finish_s"]
    receivers = [r for r in range(row["ranks"]) if r != row["root"]]
    slowest = max(receivers, key=lambda r: finish[r])
    meas_step = row["last_step_us"] / 1e6
    return {
        "scenario": os.path.basename(row["scenario"]), "impl": row["impl"], "ranks": row["ranks"],
        "dense": row["size"], "wire": pred["wire_bytes"],
        "measured_s": meas_step, "predicted_s": pred["step_s"],
        "error": (pred["step_s"] - meas_step) / meas_step,
        "per_rank_error": [(pred["done_s"][r] - finish[r]) / finish[r] for r in receivers if finish[r] > 0],
        "slowest": slowest, "bound_s": pred["bound_s"],
        "edge_mbit": edge_rates(row),
    }


def edge_rates(row):
    """Measured rate of every tree edge (bytes over first to last byte at the child), Mbit/s."""
    rates = []
    for r in row["per_rank"]:
        for p in r["peers"]:
            if r["parent"] is not None and p["rank"] == r["parent"] and p.get("receive_Bps"):
                rates.append(p["receive_Bps"] * 8 / 1e6)
    return rates


def rates(v):
    return f"{min(v):.0f}-{max(v):.0f}" if v else "-"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("rows", nargs="+", help="sparse_bcast_perf --json output files")
    ap.add_argument("--sim", default=os.path.join(os.path.dirname(__file__), "..", "build", "bin", "sparrow-sim"))
    ap.add_argument("--json", help="write the comparison here")
    ap.add_argument("--window", help="sparrow-sim --window: the most a stream keeps in flight (e.g. 256K)")
    ap.add_argument("--cold", action="store_true", help="sparrow-sim --cold: slow start on every step")
    ap.add_argument("--initial-window", help="sparrow-sim --initial-window: slow start from this per stream")
    a = ap.parse_args()
    if not os.access(a.sim, os.X_OK):
        sys.exit(f"calibrate_sim: no simulator at {a.sim} (build first, or --sim PATH)")
    rows = load_rows(a.rows)
    if not rows:
        sys.exit("calibrate_sim: no sparse_bcast_perf rows with per-rank data (run with --json under the emulator)")
    extra = ((["--window", a.window] if a.window else []) + (["--cold"] if a.cold else []) +
             (["--initial-window", a.initial_window] if a.initial_window else []))
    results = []
    print(f"{'scenario':<20} {'impl':<7} {'ranks':>5} {'dense':>7} {'wire MB':>8} {'measured':>10} {'predicted':>10} "
          f"{'error':>7} {'worst rank':>10} {'edges Mbit/s':>14}")
    for row in rows:
        try:
            c = compare(row, predict(a.sim, row, extra))
        except (ValueError, RuntimeError, KeyError) as e:
            sys.exit(f"calibrate_sim: row {row.get('scenario')} {row.get('size')}: {e}")
        results.append(c)
        worst = max(c["per_rank_error"], key=abs) if c["per_rank_error"] else 0
        print(f"{c['scenario']:<20} {c['impl']:<7} {c['ranks']:>5} {c['dense'] / 2**20:>6.0f}M {c['wire'] / 1e6:>8.2f} "
              f"{c['measured_s'] * 1e3:>8.1f}ms {c['predicted_s'] * 1e3:>8.1f}ms {100 * c['error']:>+6.1f}% "
              f"{100 * worst:>+9.1f}% {rates(c['edge_mbit']):>14}")
    errs = [abs(c["error"]) for c in results]
    ranks = [abs(e) for c in results for e in c["per_rank_error"]]
    summary = {"rows": len(results), "mean_abs_error": sum(errs) / len(errs), "max_abs_error": max(errs),
               "within_15pct": sum(e <= 0.15 for e in errs),
               "per_rank_mean_abs_error": sum(ranks) / len(ranks) if ranks else 0}
    print(f"# {summary['rows']} rows: step error mean {100 * summary['mean_abs_error']:.1f}%, worst "
          f"{100 * summary['max_abs_error']:.1f}%, {summary['within_15pct']} within 15%; per-rank mean "
          f"{100 * summary['per_rank_mean_abs_error']:.1f}%")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"summary": summary, "rows": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
