#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Receivers with an inference engine's layout against receivers holding the trainer's tensors.

One trainer and `--tp` workers (ranks as threads, loopback), a Qwen-like decoder in bf16; every step
changes --density of the trainer's elements. The same run measures the workers holding the whole
logical tensors (layout none) and the workers holding a vLLM-style tensor-parallel layout
(fused qkv / gate_up, row-parallel o / down, padded vocabulary shards). Prints per step the
trainer's and the slowest worker's seconds and the step's wire bytes.
"""
import argparse
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.environ.get("SPARROW_PYTHONPATH", os.path.join(HERE, "..", "build", "python")))
os.environ.setdefault("SPARROW_SOCKET_IFNAME", "lo")

import torch  # noqa: E402

import sparrow  # noqa: E402
from sparrow import layouts  # noqa: E402


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
    a = p.parse_args()
    for k in ("hidden", "heads", "kv_heads", "intermediate", "vocab", "layers", "tp", "steps"):
        if getattr(a, k) <= 0:
            p.error(f"--{k.replace('_', '-')} must be positive")
    if not 0 < a.density <= 1:
        p.error("--density must be in (0, 1]")
    return a


def run(a, cfg, tensored):
    logical = layouts.logical_shapes(**cfg)
    g = torch.Generator().manual_seed(0)
    trainer = {n: torch.randn(s, generator=g).to(torch.bfloat16) for n, s in logical.items()}
    workers = []
    for r in range(a.tp):
        if tensored:
            shapes, layout = layouts.decoder(**cfg, tp_rank=r, tp_size=a.tp)
        else:
            shapes, layout = logical, {}
        workers.append(({n: torch.zeros(s, dtype=torch.bfloat16) for n, s in shapes.items()}, layout))
    uid = sparrow.get_unique_id()
    n = a.tp + 1
    rows = [[None] * n for _ in range(a.steps + 1)]
    barrier = threading.Barrier(n, timeout=600)
    errors = []

    def body(r):
        try:
            comm = sparrow.Communicator(n, uid, r)
            sync = (sparrow.WeightSync(comm, trainer.items(), root=0) if r == 0 else
                    sparrow.WeightSync(comm, workers[r - 1][0].items(), root=0, layout=workers[r - 1][1]))
            for step in range(a.steps + 1):
                if r == 0 and step:
                    for t in trainer.values():
                        flat = t.view(-1).view(torch.int16)
                        k = max(1, int(flat.numel() * a.density))
                        flat[torch.randint(0, flat.numel(), (k,), generator=g)] += 1
                barrier.wait()
                t0 = time.perf_counter()
                info = sync.step()
                rows[step][r] = (time.perf_counter() - t0, info["wire_bytes"])
                barrier.wait()
            sync.close()
            comm.destroy()
        except BaseException as e:  # noqa: BLE001
            errors.append((r, e))
            barrier.abort()

    ts = [threading.Thread(target=body, args=(r,)) for r in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise SystemExit(f"rank {errors[0][0]}: {errors[0][1]}")
    return rows


def main():
    a = parse()
    cfg = dict(hidden_size=a.hidden, num_heads=a.heads, num_kv_heads=a.kv_heads, intermediate_size=a.intermediate,
               vocab_size=a.vocab, num_layers=a.layers)
    dense = sum(2 * x for s in layouts.logical_shapes(**cfg).values() for x in [torch.Size(s).numel()])
    print(f"model: {dense / 1e9:.2f} GB bf16 logical, {a.tp} workers, density {a.density}, "
          f"{os.cpu_count()} CPUs")
    print(f"{'layout':>8} {'step':>4} {'trainer_s':>9} {'worker_s':>9} {'wire_MB':>8}")
    for tensored in (False, True):
        for step, row in enumerate(run(a, cfg, tensored)):
            worst = max(x[0] for x in row[1:])
            print(f"{'tp' + str(a.tp) if tensored else 'none':>8} {step:>4} {row[0][0]:>9.3f} {worst:>9.3f} "
                  f"{row[0][1] / 1e6:>8.2f}", flush=True)


if __name__ == "__main__":
    main()
