#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Receivers with an inference engine's layout against receivers holding the trainer's tensors.

One trainer and `--tp` workers (ranks as threads, loopback), a Qwen-like decoder in bf16; every step
changes --density of the trainer's elements. The same run measures the workers holding the whole
logical tensors (layout none) and the workers holding a vLLM-style tensor-parallel layout
(fused qkv / gate_up, row-parallel o / down, padded vocabulary shards). Prints per step the
trainer's and the slowest worker's seconds, the step's wire bytes (what the trainer sent) and what the
busiest worker received (a tensor-parallel shard receives only the rows its pieces hold).

With --scenario SCEN.toml (root: the emulator's namespaces) the trainer and the workers are
processes on an emulated WAN instead: the scenario's first host is the trainer, the next --tp hosts
the workers (build/bin/wanemu runs this script once per host; the communicator comes from
sparrow.Communicator.from_env). Between steps every rank meets in a one-element broadcast from the
trainer, and each times its step from there.
"""
import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.environ.get("SPARROW_PYTHONPATH", os.path.join(HERE, "..", "build", "python")))
os.environ.setdefault("SPARROW_SOCKET_IFNAME", "lo")

import torch  # noqa: E402

import sparrow  # noqa: E402
from sparrow import layouts  # noqa: E402

sys.path.insert(0, HERE)
from model_bench_common import emulated_rank, mutate, run_emulated, run_threads, write_rows  # noqa: E402


def parse():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--intermediate", type=int, default=6144)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--tp", type=int, default=2, help="workers (one tensor-parallel group)")
    p.add_argument("--steps", type=int, default=3, help="sparse steps after the first (full) one")
    p.add_argument("--density", type=float, default=0.01)
    p.add_argument("--scenario", help="run the ranks as processes on this emulated network (wanemu)")
    p.add_argument("--wanemu", default=os.path.join(HERE, "..", "build", "bin", "wanemu"))
    p.add_argument("--as-host", choices=("none", "tp"), help=argparse.SUPPRESS)  # one emulated rank
    p.add_argument("--out-dir", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.scenario and not os.path.isfile(a.scenario):
        p.error(f"--scenario {a.scenario}: no such file")
    for k in ("hidden", "heads", "kv_heads", "intermediate", "vocab", "layers", "tp", "steps"):
        if getattr(a, k) <= 0:
            p.error(f"--{k.replace('_', '-')} must be positive")
    if not 0 < a.density <= 1:
        p.error("--density must be in (0, 1]")
    return a


def model(a, cfg, tensored, r):
    """Rank r's tensors (the trainer's for r == 0) and layout, the same on every run."""
    logical = layouts.logical_shapes(**cfg)
    if r == 0:
        g = torch.Generator().manual_seed(0)
        return {n: torch.randn(s, generator=g).to(torch.bfloat16) for n, s in logical.items()}, {}
    shapes, layout = layouts.decoder(**cfg, tp_rank=r - 1, tp_size=a.tp) if tensored else (logical, {})
    return {n: torch.zeros(s, dtype=torch.bfloat16) for n, s in shapes.items()}, layout


def run(a, cfg, tensored):
    trainer, _ = model(a, cfg, tensored, 0)
    workers = [model(a, cfg, tensored, r) for r in range(1, a.tp + 1)]
    g = torch.Generator().manual_seed(1)
    uid = sparrow.get_unique_id()
    n = a.tp + 1
    rows = [[None] * n for _ in range(a.steps + 1)]

    def body(r, barrier):
        comm = sparrow.Communicator(n, uid, r)
        sync = (sparrow.WeightSync(comm, trainer.items(), root=0) if r == 0 else
                sparrow.WeightSync(comm, workers[r - 1][0].items(), root=0, layout=workers[r - 1][1]))
        for step in range(a.steps + 1):
            if r == 0 and step:
                mutate(trainer, a.density, g)
            barrier.wait()
            t0 = time.perf_counter()
            info = sync.step()
            rows[step][r] = (time.perf_counter() - t0, info["wire_bytes"])
            barrier.wait()
        sync.close()
        comm.destroy()

    run_threads(n, body)
    return rows


def emulated_host(a, cfg):
    """One rank of an emulated run: its steps' seconds and wire bytes, to OUT_DIR/rank.json."""
    r = emulated_rank(a.tp + 1)
    tensors, layout = model(a, cfg, a.as_host == "tp", r)
    comm = sparrow.Communicator.from_env()
    sync = sparrow.WeightSync(comm, tensors.items(), root=0, layout=layout or None)
    g = torch.Generator().manual_seed(1)
    token = torch.zeros(1, dtype=torch.int32)
    rows = []
    for step in range(a.steps + 1):
        if r == 0 and step:
            mutate(tensors, a.density, g)
        comm.broadcast(token, root=0)
        t0 = time.perf_counter()
        info = sync.step()
        rows.append((time.perf_counter() - t0, info["wire_bytes"]))
    sync.close()
    comm.destroy()
    write_rows(a.out_dir, r, rows)


def run_emulated_layout(a, tensored):
    """Every rank's rows of one emulated run, as run() returns them."""
    args = ["--as-host", "tp" if tensored else "none"]
    for k in ("hidden", "heads", "kv_heads", "intermediate", "vocab", "layers", "tp", "steps", "density"):
        args += [f"--{k.replace('_', '-')}", str(getattr(a, k))]
    ranks = run_emulated(a.wanemu, a.scenario, __file__, args, a.tp + 1)
    return [[ranks[r][step] for r in range(a.tp + 1)] for step in range(a.steps + 1)]


def main():
    a = parse()
    cfg = dict(hidden_size=a.hidden, num_heads=a.heads, num_kv_heads=a.kv_heads, intermediate_size=a.intermediate,
               vocab_size=a.vocab, num_layers=a.layers)
    if a.as_host:
        return emulated_host(a, cfg)
    dense = sum(2 * x for s in layouts.logical_shapes(**cfg).values() for x in [torch.Size(s).numel()])
    print(f"model: {dense / 1e9:.2f} GB bf16 logical, {a.tp} workers, density {a.density}, "
          f"{os.cpu_count()} CPUs" + (f", emulated network {a.scenario}" if a.scenario else ", threads on loopback"))
    print(f"{'layout':>8} {'step':>4} {'trainer_s':>9} {'worker_s':>9} {'wire_MB':>8} {'worker_rx_MB':>12}")
    for tensored in (False, True):
        for step, row in enumerate(run_emulated_layout(a, tensored) if a.scenario else run(a, cfg, tensored)):
            worst = max(x[0] for x in row[1:])
            print(f"{'tp' + str(a.tp) if tensored else 'none':>8} {step:>4} {row[0][0]:>9.3f} {worst:>9.3f} "
                  f"{row[0][1] / 1e6:>8.2f} {max(x[1] for x in row[1:]) / 1e6:>12.2f}", flush=True)


if __name__ == "__main__":
    main()
