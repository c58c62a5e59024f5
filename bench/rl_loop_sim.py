#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The RL loop simulated: rollout tokens per second and per dollar at model sizes the emulator
cannot hold, from the schedule simulator's sync times.

The loop is the one bench/rl_loop_bench.py runs, with SparrowRL's bounded staleness of one step: a
trainer's step s waits for every worker's batch s; a worker's batch b needs version b-1 or newer
(the first two batches: version 1). Per version, `sparrow-sim` gives every worker's sync time on the
scenario (the trainer on its first host, a worker on every other host) for the mode's wire bytes,
with the trainer's encoding and the workers' decoding at the given rates. The loop then plays out
event by event, step after step:

  sparrow   staged: the next version arrives while a batch is generated; committed at a boundary
  blocking  sparrow without staging: a worker decodes the version it needs at the boundary
  dense     a dense broadcast of the whole model, blocking; the trainer's call returns once every
            worker took it (as sparrowBroadcast does)
  paper     the SparrowRL-format ablation (its wire bytes, its two-level tree, 4 streams), staged
  ideal     no sync cost at all (a single-datacenter cluster whose RDMA broadcast is free)

Tokens per dollar: the scenario's [prices] (USD per GPU-hour of its hosts, of a reserved
single-datacenter RDMA cluster, per GB leaving a region, GPUs per host), else the defaults below.
The reserved cluster is priced at the ideal run's throughput with the same GPUs.

    bench/rl_loop_sim.py --model qwen3-8b                      # four_regions.toml, every mode
    bench/rl_loop_sim.py --model qwen3-14b --sweep-mbit 100,1000,10000 --json > loop.jsonl
    bench/rl_loop_sim.py --calibrate rl_loop.jsonl             # against bench/rl_loop_bench.py --json
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import argtypes  # noqa: E402

MODES = ("sparrow", "blocking", "dense", "paper", "ideal")
# Parameters (the Qwen3 model cards: 4.0B, 8.2B, 14.8B).
MODELS = {"qwen3-4b": 4.02e9, "qwen3-8b": 8.19e9, "qwen3-14b": 14.77e9}
# Wire bytes per dense byte at the realistic step (docs/benchmarks.md, "Line rate at realistic
# steps": qwen3-8b shapes, 1.08 GB bf16, 0.96% of the elements changed: sparrow 7.0 MB, the
# SparrowRL-format ablation 17.2 MB).
WIRE_RATIO = {"sparrow": 7.0 / 1083, "blocking": 7.0 / 1083, "paper": 17.2 / 1083, "dense": 1.0}
# Prices (USD): tier-2 cloud on-demand H100, $2.49-2.85 per GPU-hour, Q1 2026; a hyperscaler's
# 1-year reserved 8xH100 instance at about $52 per hour ($6.50 per GPU-hour), Q1 2026; internet
# egress $0.09 per GB (the first 10 TB a month, 2026). Sources in docs/benchmarks.md.
PRICES = {"gpu_hour_on_demand": 2.85, "gpu_hour_reserved": 6.50, "egress_per_gb": 0.09, "gpus_per_host": 8}


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    positive = argtypes.positive

    p.add_argument("--scenario", default=os.path.join(HERE, "scenarios", "four_regions.toml"))
    p.add_argument("--one-per-region", action="store_true", help="every [[host]] taken once (as rl_loop_bench.py)")
    p.add_argument("--model", default="qwen3-8b", help=f"{', '.join(MODELS)}, or a parameter count")
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--steps", type=positive(int), default=50, help="trainer steps (versions) played out")
    p.add_argument("--gen-s", type=positive(float), default=60.0, help="a worker's generation time per batch")
    p.add_argument("--tokens", type=positive(float), default=256 * 1024,
                   help="rollout tokens per batch per worker host")
    p.add_argument("--train-s", type=positive(float), default=30.0, help="the trainer's time per step")
    p.add_argument("--encode-mbps", type=positive(float), default=422.0,
                   help="the trainer's encoder, MB of wire per second (an H200 host, docs/benchmarks.md)")
    p.add_argument("--tail-mbps", type=positive(float), default=324.0,
                   help="a worker's verification, decoding and writes, MB of wire per second (the same host)")
    p.add_argument("--warm", action="store_true",
                   help="TCP windows stay open between versions (net.ipv4.tcp_slow_start_after_idle=0); by "
                        "default every version starts cold: versions are seconds apart, longer than the RTO, "
                        "and Linux's default restarts slow start after such an idle period")
    p.add_argument("--commit-s", type=float, default=0.0, help="a staged worker's commit at the boundary")
    p.add_argument("--sweep-mbit", help="comma-separated access-link rates (Mbit/s) replacing the scenario's")
    p.add_argument("--calibrate", metavar="RUN.jsonl",
                   help="predict the runs of bench/rl_loop_bench.py --json from their own inputs and compare")
    p.add_argument("--sim", default=os.path.join(HERE, "..", "build", "bin", "sparrow-sim"))
    p.add_argument("--json", action="store_true", help="one JSON object per mode and rate")
    a = p.parse_args(argv)
    a.modes = a.modes.split(",")
    if any(m not in MODES for m in a.modes):
        p.error(f"--modes: some of {', '.join(MODES)}, got {','.join(a.modes)!r}")
    if a.model in MODELS:
        a.params = MODELS[a.model]
    else:
        try:
            a.params = float(a.model)
        except ValueError:
            p.error(f"--model: {', '.join(MODELS)} or a parameter count, got {a.model!r}")
    if a.sweep_mbit:
        try:
            a.sweep_mbit = [float(x) for x in a.sweep_mbit.split(",")]
        except ValueError:
            p.error(f"--sweep-mbit: comma-separated numbers, got {a.sweep_mbit!r}")
    if not os.path.exists(a.sim):
        p.error(f"{a.sim}: no sparrow-sim (build first: bash scripts/build.sh)")
    return a


# ---- the network: sparrow-sim ------------------------------------------------------------------------

def rewrite(base, path, one_per_region=False, mbit=None):
    """The scenario written to `path`, with one host per [[host]] and/or every access link at `mbit`."""
    text = open(base).read()
    if one_per_region:
        text = re.sub(r"(?m)^count\s*=.*\n", "", text)
    if mbit is not None:
        text = re.sub(r"(?m)^(up_mbit|down_mbit)\s*=.*$", lambda m: f"{m.group(1)} = {mbit:g}", text)
    with open(path, "w") as f:
        f.write(text)
    return path


def sync_times(a, scenario, mode, wire, dense, encode_s=None, tail_s=None):
    """Every worker's sync time for one version (seconds from the push, per rank 1..n-1)."""
    if mode == "ideal":
        return None
    args = [a.sim, "--scenario", scenario, "--wire", str(int(wire)), "--dense", str(int(dense)), "--json"]
    args += ["--algo", "two_level", "--streams", "4"] if mode == "paper" else ["--algo", "auto"]
    if not a.warm:
        args.append("--cold")
    if mode != "dense":
        args += ["--encode-s", f"{encode_s if encode_s is not None else wire / 1e6 / a.encode_mbps:.6f}"]
        args += ["--tail-s", f"{tail_s if tail_s is not None else wire / 1e6 / a.tail_mbps:.6f}"]
    out = subprocess.run(args, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"sparrow-sim failed: {out.stderr.strip()}")
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    return rows[-1]["done_s"][1:]


# ---- the loop ----------------------------------------------------------------------------------------

def play(steps, gen_s, tokens, train_s, mode, sync, push_s, tail_s, commit_s):
    """The loop event by event. gen_s: per worker; sync: per worker, seconds from a push until the
    version is there (None: free); push_s: the trainer's sparse call; tail_s: per worker, the part
    of sync a blocking worker spends in its own call. Returns tokens/s and the waits."""
    n = len(gen_s)
    sync = sync or [0.0] * n
    end = [0.0] * n           # each worker's last batch end
    wait = [0.0] * n
    push_at = {1: 0.0}        # version -> when its push started (version 1: there from the start)
    arrive = [{1: 0.0} for _ in range(n)]  # per worker: version -> when it can be used
    trainer_end, trainer_wait = 0.0, 0.0
    for b in range(1, steps + 1):
        need = max(1, b - 1)
        for w in range(n):
            start = max(end[w], arrive[w][need]) + (commit_s if mode in ("sparrow", "paper") and b > 2 else 0.0)
            wait[w] += start - end[w]
            end[w] = start + gen_s[w]
        # the version the next batch needs (pushed after trainer step b-1): a blocking worker takes it now
        v = b
        if v > 1:
            for w in range(n):
                there = push_at[v] + sync[w]
                arrive[w][v] = there if mode in ("sparrow", "paper", "ideal") else \
                    max(end[w], there - tail_s[w]) + tail_s[w]
        # trainer step b: every worker's batch b, and its push of version b done
        pushed = 0.0 if v == 1 else push_at[v] + (max(arrive[w][v] for w in range(n)) - push_at[v]
                                                  if mode == "dense" else push_s)
        start = max(pushed, max(end))
        trainer_wait += max(0.0, max(end) - pushed)
        trainer_end = start + train_s
        push_at[b + 1] = trainer_end
        for w in range(n):
            arrive[w].setdefault(b + 1, float("inf"))
    total = max(end)
    return {"tokens_per_s": n * steps * tokens / total, "seconds": total,
            "worker_wait_fraction": max(wait) / total, "trainer_wait_s": trainer_wait}


def cost(prices, mode, row, wire, regions, hosts, ideal_tps):
    """Per hour on the scenario's on-demand hosts (GPUs and egress), and tokens per USD against a
    reserved single-datacenter cluster of as many GPUs at the ideal throughput."""
    gpus = hosts * prices["gpus_per_host"]
    egress_gb_per_s = 0.0 if mode == "ideal" else wire * (regions - 1) / 1e9 / row["period_s"]
    per_hour = gpus * prices["gpu_hour_on_demand"] + egress_gb_per_s * 3600 * prices["egress_per_gb"]
    out = {"usd_per_hour": per_hour, "tokens_per_usd": row["tokens_per_s"] * 3600 / per_hour}
    reserved = gpus * prices["gpu_hour_reserved"]
    out["reserved_tokens_per_usd"] = ideal_tps * 3600 / reserved  # the ideal throughput, reserved GPUs
    out["vs_reserved"] = out["tokens_per_usd"] / out["reserved_tokens_per_usd"]
    return out


def scenario_facts(path):
    """(hosts, regions, prices) of a scenario (tomllib: Python 3.11)."""
    import tomllib
    with open(path, "rb") as f:
        s = tomllib.load(f)
    hosts = sum(int(h.get("count", 1)) for h in s.get("host", []))
    regions = len({h.get("region", "default") for h in s.get("host", [])})
    prices = dict(PRICES, **s.get("prices", {}))
    return hosts, regions, prices, "prices" in s


def project(a, scenario, mbit=None):
    hosts, regions, prices, _ = scenario_facts(scenario)
    dense = a.params * 2
    rows = []
    for mode in a.modes:
        wire = dense * WIRE_RATIO.get(mode, 0.0)
        sync = sync_times(a, scenario, mode, wire, dense)
        n = hosts - 1
        tail = [0.0 if mode in ("dense", "ideal") else wire / 1e6 / a.tail_mbps] * n
        push = 0.0 if mode in ("dense", "ideal") else wire / 1e6 / a.encode_mbps
        r = play(a.steps, [a.gen_s] * n, a.tokens, a.train_s, mode, sync, push, tail, a.commit_s)
        r.update(mode=mode, wire_bytes=wire, dense_bytes=dense, sync_s=max(sync) if sync else 0.0,
                 period_s=r["seconds"] / a.steps)
        rows.append(r)
    ideal = next((r["tokens_per_s"] for r in rows if r["mode"] == "ideal"), None)
    for r in rows:
        r.update(tool="rl_loop_sim", scenario=os.path.basename(a.scenario), model=a.model, mbit=mbit,
                 workers=hosts - 1, gen_s=a.gen_s, train_s=a.train_s, tokens=a.tokens, steps=a.steps)
        if ideal:
            r["vs_ideal"] = r["tokens_per_s"] / ideal
            r.update(cost(prices, r["mode"], r, r["wire_bytes"], regions, hosts, ideal))
    dense_tps = next((r["tokens_per_s"] for r in rows if r["mode"] == "dense"), None)
    for r in rows:
        if dense_tps:
            r["vs_dense"] = r["tokens_per_s"] / dense_tps
    return rows


def print_rows(rows):
    print(f"{'mode':>9} {'link':>6} {'sync_s':>8} {'tokens/s':>10} {'vs_dense':>8} {'vs_ideal':>8} {'wait':>6} "
          f"{'tok/USD':>9} {'vs_reserved':>11}")
    for r in rows:
        f = lambda k, fmt: format(r[k], fmt) if r.get(k) is not None else "-"  # noqa: E731
        print(f"{r['mode']:>9} {f('mbit', '.0f'):>6} {r['sync_s']:>8.2f} {r['tokens_per_s']:>10.0f} "
              f"{f('vs_dense', '.2f'):>8} {f('vs_ideal', '.3f'):>8} {r['worker_wait_fraction']:>6.1%} "
              f"{f('tokens_per_usd', '.0f'):>9} {f('vs_reserved', '.2f'):>11}")


# ---- calibration against the emulated runs -----------------------------------------------------------

def calibrate(a):
    """Each run of rl_loop_bench.py --json predicted from its own measured inputs (generation and
    training times, the trainer's push call, wire bytes) and the simulator's sync times."""
    runs = [json.loads(line) for line in open(a.calibrate) if line.startswith("{")]
    if not runs:
        raise SystemExit(f"{a.calibrate}: no JSON rows (bench/rl_loop_bench.py --json writes them)")
    out = []
    with tempfile.TemporaryDirectory() as d:
        scen = rewrite(a.scenario, os.path.join(d, "s.toml"), one_per_region=True)
        for run in runs:
            mode = run["mode"]
            gen = [sum(b["gen_s"] for b in w) / len(w) for w in run["batches"]]
            tokens = sum(b["tokens"] for w in run["batches"] for b in w) / sum(len(w) for w in run["batches"])
            steps = len(run["batches"][0])
            wire = run["wire_MB"] * 1e6
            dense = run["params"] * 2
            sync = None if mode == "ideal" else sync_times(a, scen, "dense" if mode == "dense" else mode, wire, dense,
                                                          encode_s=run["push_s"], tail_s=wire / 1e6 / a.tail_mbps)
            tail = [0.0 if mode == "dense" else wire / 1e6 / a.tail_mbps] * len(gen)
            push = run["push_s"] if mode != "dense" else 0.0
            p = play(steps, gen, tokens, run["train_s"], mode, sync, push, tail, a.commit_s)
            err = p["tokens_per_s"] / run["tokens_per_s"] - 1
            out.append({"tool": "rl_loop_sim", "calibration": True, "mode": mode, "measured": run["tokens_per_s"],
                        "predicted": p["tokens_per_s"], "error": err,
                        "measured_wait": run["worker_wait_fraction"], "predicted_wait": p["worker_wait_fraction"]})
    if a.json:
        for r in out:
            print(json.dumps(r))
    else:
        print(f"{'mode':>9} {'measured':>9} {'predicted':>9} {'error':>7} {'wait (measured, predicted)':>27}")
        for r in out:
            print(f"{r['mode']:>9} {r['measured']:>9.1f} {r['predicted']:>9.1f} {r['error']:>+7.1%} "
                  f"{r['measured_wait']:>13.1%} {r['predicted_wait']:>12.1%}")
        print(f"mean |error| {sum(abs(r['error']) for r in out) / len(out):.1%}, "
              f"{sum(abs(r['error']) <= 0.15 for r in out)} of {len(out)} within 15%")
    return out


def main(argv=None):
    a = parse(argv)
    if a.calibrate:
        calibrate(a)
        return 0
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for mbit in a.sweep_mbit or [None]:
            scen = a.scenario
            if mbit is not None or a.one_per_region:
                scen = rewrite(a.scenario, os.path.join(d, "s.toml"), a.one_per_region, mbit)
            rows += project(a, scen, mbit)
    if a.json:
        for r in rows:
            print(json.dumps(r))
        return 0
    hosts, regions, prices, given = scenario_facts(a.scenario)
    print(f"model {a.model}: {a.params * 2 / 1e9:.1f} GB bf16; {os.path.basename(a.scenario)}: a trainer and "
          f"{hosts - 1} worker hosts in {regions} regions; {a.steps} steps of {a.gen_s:g} s generation "
          f"({a.tokens:g} tokens per worker) and {a.train_s:g} s training; prices "
          f"{'from the scenario' if given else 'defaults'}: {prices}")
    print_rows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
