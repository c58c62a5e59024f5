#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Sharded sources: the trainer's model held by 1, 2 or 4 source ranks (FSDP-style row ranges), each
sending its own rows, against one worker holding the whole model (ranks as threads, loopback).

Per configuration and step: the slowest source's call (until its part was handed to the transport:
extraction, encoding and queueing of its rows), the sources' encode seconds (the slowest), the
worker's call, and the wire bytes. Every step changes --density of the elements; the worker is
checked bit for bit against the trainer after every step.
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
    p.add_argument("--intermediate", type=int, default=6144)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--sources", default="1,2,4", help="comma-separated source counts to measure")
    p.add_argument("--steps", type=int, default=3, help="sparse steps after the first (full) one")
    p.add_argument("--density", type=float, default=0.01)
    a = p.parse_args()
    try:
        a.sources = [int(x) for x in a.sources.split(",")]
    except ValueError:
        p.error(f"--sources: comma-separated integers, got {a.sources!r}")
    if any(s <= 0 for s in a.sources) or min(a.hidden, a.intermediate, a.vocab, a.layers, a.steps) <= 0:
        p.error("sizes, --steps and --sources must be positive")
    if not 0 < a.density <= 1:
        p.error("--density must be in (0, 1]")
    return a


def run(a, logical, nsrc):
    g = torch.Generator().manual_seed(1)
    model = {n: torch.randn(s, generator=g).to(torch.bfloat16) for n, s in logical.items()}
    worker = {n: torch.zeros(s, dtype=torch.bfloat16) for n, s in logical.items()}
    n = nsrc + 1
    uid = sparrow.get_unique_id()
    rows = [[None] * n for _ in range(a.steps + 1)]
    barrier = threading.Barrier(n, timeout=600)
    errors = []

    def body(r):
        try:
            comm = sparrow.Communicator(n, uid, r)
            if r < nsrc and nsrc == 1:  # one source: the whole tensors, as a single trainer holds them
                sync = sparrow.WeightSync(comm, model.items(), root=0)
            elif r < nsrc:
                tensors, layout = [], {}
                for name, t in model.items():
                    start, stop = t.shape[0] * r // nsrc, t.shape[0] * (r + 1) // nsrc
                    if start < stop:
                        tensors.append((f"{name}#{r}", t[start:stop]))
                        layout[f"{name}#{r}"] = [sparrow.Piece(name, 0, start, stop)]
                sync = sparrow.WeightSync(comm, tensors, root=0, layout=layout, sources=list(range(nsrc)))
            else:
                sync = sparrow.WeightSync(comm, worker.items(), root=0, sources=list(range(nsrc)))
            for step in range(a.steps + 1):
                if r == 0 and step:
                    for t in model.values():
                        flat = t.view(-1).view(torch.int16)
                        flat[torch.randint(0, flat.numel(), (max(1, int(flat.numel() * a.density)),), generator=g)] += 1
                barrier.wait()
                t0 = time.perf_counter()
                info = sync.step()
                rows[step][r] = (time.perf_counter() - t0, info["encode_s"], info["wire_bytes"])
                barrier.wait()
                if r == nsrc and not all(torch.equal(worker[k].view(torch.int16), model[k].view(torch.int16))
                                         for k in model):
                    raise SystemExit(f"step {step}: the worker is not bit-exact")
                barrier.wait()  # checked before the trainer changes the weights again
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
    logical = layouts.logical_shapes(hidden_size=a.hidden, num_heads=16, num_kv_heads=8,
                                     intermediate_size=a.intermediate, vocab_size=a.vocab, num_layers=a.layers)
    dense = sum(2 * torch.Size(s).numel() for s in logical.values())
    print(f"model: {dense / 1e9:.2f} GB bf16, 1 worker, density {a.density}, {os.cpu_count()} CPUs")
    print(f"{'sources':>7} {'step':>4} {'slowest_source_s':>16} {'source_encode_s':>15} {'worker_s':>8} {'wire_MB':>8}")
    for nsrc in a.sources:
        for step, row in enumerate(run(a, logical, nsrc)):
            src = row[:nsrc]
            wire = sum(x[2] for x in src) / 1e6
            print(f"{nsrc:>7} {step:>4} {max(x[0] for x in src):>16.3f} {max(x[1] for x in src):>15.3f} "
                  f"{row[nsrc][0]:>8.3f} {wire:>8.2f}", flush=True)


if __name__ == "__main__":
    main()
