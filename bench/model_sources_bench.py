#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Sharded sources: the trainer's model held by 1, 2 or 4 source ranks, each sending its own part,
against one worker holding the whole model (ranks as threads, loopback). --trainer fsdp: each source
holds a row range (dim 0) of every tensor, as views; --trainer tp: each holds a Megatron-style
tensor-parallel shard of degree N (the engine layout of its TP rank: fused column-parallel qkv and
gate_up, row-parallel o and down as columns of every row, vocabulary rows), norms on source 0 only.

Per configuration and step: the slowest source's call (until its part was handed to the transport:
extraction, encoding and queueing of its rows), the sources' encode seconds (the slowest), the
slowest worker's call, the wire bytes the sources sent, and what one worker holding the whole model
and (emulated runs) a tensor-parallel worker received (rx_whole_MB, rx_tp_MB: a TP shard receives only
the rows its pieces hold). Every step changes --density of the elements; every
worker is checked bit for bit against the trainer after every step. --codec paper,auto measures the
SparrowRL-format ablation (its leb128 index and raw values, its static two-level tree, 4 streams)
beside sparrow in the same run.

With --scenario BASE.toml (root: the emulator's namespaces; e.g. bench/scenarios/four_regions.toml)
the ranks are processes on an emulated network instead: BASE's first host (region) holds the N
sources, every other host one worker, and of those workers the second and third (if any) hold a
vLLM-style tensor-parallel layout (TP=2: fused qkv / gate_up, row-parallel o / down, padded
vocabulary shards) instead of whole tensors. Between steps every rank meets in a one-element
broadcast from rank 0, and each times its step from there.
"""
import argparse
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.environ.get("SPARROW_PYTHONPATH", os.path.join(HERE, "..", "build", "python")))
os.environ.setdefault("SPARROW_SOCKET_IFNAME", "lo")

import torch  # noqa: E402

import sparrow  # noqa: E402
from sparrow import layouts  # noqa: E402

sys.path.insert(0, HERE)
from model_bench_common import (ABLATION, emulated_rank, mutate, run_emulated, run_threads,  # noqa: E402
                                scenario_with_first, write_rows)

def parse():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--intermediate", type=int, default=6144)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--sources", default="1,2,4", help="comma-separated source counts to measure")
    p.add_argument("--codec", default="auto", help="comma-separated: auto (sparrow), paper (the ablation)")
    p.add_argument("--steps", type=int, default=3, help="sparse steps after the first (full) one")
    p.add_argument("--density", type=float, default=0.01)
    p.add_argument("--trainer", default="fsdp", choices=("fsdp", "tp"),
                   help="how the sources shard the model: row ranges (fsdp) or tensor-parallel shards (tp)")
    p.add_argument("--elastic-lease-ms", type=int, default=0,
                   help="run on an elastic communicator with this lease (0: a fixed one)")
    p.add_argument("--scenario", help="run the ranks as processes on an emulated network built from this one")
    p.add_argument("--wanemu", default=os.path.join(HERE, "..", "build", "bin", "wanemu"))
    p.add_argument("--as-host", type=int, help=argparse.SUPPRESS)  # one emulated rank: the source count
    p.add_argument("--out-dir", help=argparse.SUPPRESS)
    a = p.parse_args()
    try:
        a.sources = [int(x) for x in a.sources.split(",")]
    except ValueError:
        p.error(f"--sources: comma-separated integers, got {a.sources!r}")
    a.codec = a.codec.split(",")
    if any(c not in ("auto", "paper") for c in a.codec):
        p.error(f"--codec: auto and/or paper, got {','.join(a.codec)!r}")
    if any(s <= 0 for s in a.sources) or min(a.hidden, a.intermediate, a.vocab, a.layers, a.steps) <= 0:
        p.error("sizes, --steps and --sources must be positive")
    if not 0 < a.density <= 1:
        p.error("--density must be in (0, 1]")
    if a.elastic_lease_ms and not 100 <= a.elastic_lease_ms <= 86400000:
        p.error("--elastic-lease-ms: 0 (a fixed communicator) or 100..86400000")
    if a.scenario and not os.path.isfile(a.scenario):
        p.error(f"--scenario {a.scenario}: no such file")
    return a


def elastic(a):
    """The Communicator's elastic arguments (none for a fixed one)."""
    return dict(elastic=True, lease_ms=a.elastic_lease_ms) if a.elastic_lease_ms else {}


def config(a):
    return dict(hidden_size=a.hidden, num_heads=16, num_kv_heads=8, intermediate_size=a.intermediate,
                vocab_size=a.vocab, num_layers=a.layers)


def trainer_model(a):
    g = torch.Generator().manual_seed(1)
    return {n: torch.randn(s, generator=g).to(torch.bfloat16) for n, s in layouts.logical_shapes(**config(a)).items()}


def tp_shard(a, model, r, nsrc):
    """Source r of a TP=nsrc trainer: its tensors (copies) and their layout; norms on source 0."""
    shapes, layout = layouts.decoder(**config(a), tp_rank=r, tp_size=nsrc, source=True)
    tensors = {n: torch.zeros(s, dtype=torch.bfloat16) for n, s in shapes.items()}
    refill(tensors, layout, model)
    return tensors, layout


def refill(tensors, layout, model):
    """A TP source's tensors take the model's current weights (outside the timed step)."""
    for name, t in tensors.items():
        if name not in layout:
            t.copy_(model[name])
        for pc in layout.get(name, []):
            n = pc.stop - pc.start
            t.narrow(pc.dim, pc.offset, n).copy_(model[pc.logical].narrow(pc.dim, pc.start, n))


def source_sync(a, comm, model, r, nsrc):
    """Source r of nsrc: its rows [start, stop) of every tensor, as views (fsdp), or its TP shard
    (tp: returns the sync and a function that refills the shard from the model)."""
    if nsrc == 1:  # one source: the whole tensors, as a single trainer holds them
        return sparrow.WeightSync(comm, model.items(), root=0), lambda: None
    if a.trainer == "tp":
        tensors, layout = tp_shard(a, model, r, nsrc)
        sync = sparrow.WeightSync(comm, tensors.items(), root=0, layout=layout, sources=list(range(nsrc)))
        return sync, lambda: refill(tensors, layout, model)
    tensors, layout = [], {}
    for name, t in model.items():
        start, stop = t.shape[0] * r // nsrc, t.shape[0] * (r + 1) // nsrc
        if start < stop:
            tensors.append((f"{name}#{r}", t[start:stop]))
            layout[f"{name}#{r}"] = [sparrow.Piece(name, 0, start, stop)]
    return sparrow.WeightSync(comm, tensors, root=0, layout=layout, sources=list(range(nsrc))), lambda: None


def worker_tensors(a, tp_rank):
    """A worker's tensors and layout: whole logical tensors (tp_rank None) or a TP=2 shard."""
    if tp_rank is None:
        shapes, layout = layouts.logical_shapes(**config(a)), {}
    else:
        shapes, layout = layouts.decoder(**config(a), tp_rank=tp_rank, tp_size=2)
    return {n: torch.zeros(s, dtype=torch.bfloat16) for n, s in shapes.items()}, layout


def exact(worker, layout, model):
    """The worker's tensors hold the model (whole), or their pieces of it, bit for bit."""
    for name, t in worker.items():
        if name not in layout:
            if not torch.equal(t.view(torch.int16), model[name].view(torch.int16)):
                return False
            continue
        for pc in layout[name]:
            want = model[pc.logical].narrow(pc.dim, pc.start, pc.stop - pc.start)
            if not torch.equal(t.narrow(pc.dim, pc.offset, pc.stop - pc.start).view(torch.int16), want.view(torch.int16)):
                return False
    return True


def run(a, nsrc):
    model = trainer_model(a)
    worker, _ = worker_tensors(a, None)
    g = torch.Generator().manual_seed(2)
    n = nsrc + 1
    uid = sparrow.get_unique_id()
    rows = [[None] * n for _ in range(a.steps + 1)]

    def body(r, barrier):
        comm = sparrow.Communicator(n, uid, r, **elastic(a))
        sync, refresh = source_sync(a, comm, model, r, nsrc) if r < nsrc else \
            (sparrow.WeightSync(comm, worker.items(), root=0, sources=list(range(nsrc))), None)
        for step in range(a.steps + 1):
            if r == 0 and step:
                mutate(model, a.density, g)
            barrier.wait()
            if r < nsrc and step:
                refresh()
            barrier.wait()
            t0 = time.perf_counter()
            info = sync.step()
            rows[step][r] = (time.perf_counter() - t0, info["encode_s"], info["wire_bytes"], True)
            barrier.wait()
            if r == nsrc:
                rows[step][r] = rows[step][r][:3] + (exact(worker, {}, model),)
            barrier.wait()  # checked before the trainer changes the weights again
        sync.close()
        comm.destroy()

    run_threads(n, body)
    return rows


def emulated_host(a):
    """One rank of an emulated run (a.as_host sources): its rows to OUT_DIR/rank.json."""
    nsrc = a.as_host
    nhosts = int(os.environ["WANEMU_NRANKS"])
    r = emulated_rank(nhosts)
    model = trainer_model(a)  # every rank makes it: the workers' reference
    worker = layout = None
    if r >= nsrc:
        worker, layout = worker_tensors(a, {nsrc + 1: 0, nsrc + 2: 1}.get(r))
    comm = sparrow.Communicator.from_env(**elastic(a))
    sync, refresh = source_sync(a, comm, model, r, nsrc) if r < nsrc else \
        (sparrow.WeightSync(comm, worker.items(), root=0, layout=layout or None, sources=list(range(nsrc))), None)
    g = torch.Generator().manual_seed(2)
    token = torch.zeros(1, dtype=torch.int32)
    rows = []
    for step in range(a.steps + 1):
        if step:
            mutate(model, a.density, g)  # the same change on every rank: the sources' and the reference
            if r < nsrc:
                refresh()
        comm.broadcast(token, root=0)
        t0 = time.perf_counter()
        info = sync.step()
        took = time.perf_counter() - t0
        rows.append((took, info["encode_s"], info["wire_bytes"], r < nsrc or exact(worker, layout, model)))
    sync.close()
    comm.destroy()
    write_rows(a.out_dir, r, rows)


def run_scenario(a, nsrc):
    with tempfile.TemporaryDirectory() as d:
        scen = os.path.join(d, "scenario.toml")
        n = scenario_with_first(a.scenario, nsrc, scen)
        args = ["--as-host", str(nsrc), "--sources", str(nsrc)]
        for k in ("hidden", "intermediate", "vocab", "layers", "steps", "density", "elastic_lease_ms", "trainer"):
            args += [f"--{k.replace('_', '-')}", str(getattr(a, k))]
        ranks = run_emulated(a.wanemu, scen, __file__, args, n)
    return [[ranks[r][step] for r in range(n)] for step in range(a.steps + 1)]


def main():
    a = parse()
    if a.as_host is not None:
        return emulated_host(a)
    dense = sum(2 * torch.Size(s).numel() for s in layouts.logical_shapes(**config(a)).values())
    where = f"emulated network from {a.scenario} (sources in its first region; TP=2 workers on the 2nd and 3rd " \
            "worker hosts)" if a.scenario else "threads on loopback, 1 worker"
    where += f", elastic (lease {a.elastic_lease_ms} ms)" if a.elastic_lease_ms else ", fixed communicator"
    where += ", sources: tensor-parallel shards" if a.trainer == "tp" else ", sources: row ranges"
    print(f"model: {dense / 1e9:.2f} GB bf16, density {a.density}, {os.cpu_count()} CPUs, {where}")
    print(f"{'codec':>5} {'sources':>7} {'step':>4} {'slowest_source_s':>16} {'source_encode_s':>15} "
          f"{'worker_s':>8} {'wire_MB':>8} {'rx_whole_MB':>11} {'rx_tp_MB':>8} {'exact':>5}")
    saved = {k: os.environ.get(k) for k in ABLATION}
    for codec in a.codec:
        for k, v in ABLATION.items():  # the ablation's settings, or the caller's own
            if codec == "paper":
                os.environ[k] = v
            elif saved[k] is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = saved[k]
        for nsrc in a.sources:
            for step, row in enumerate(run_scenario(a, nsrc) if a.scenario else run(a, nsrc)):
                src, wk = row[:nsrc], row[nsrc:]
                wire = sum(x[2] for x in src) / 1e6
                ok = all(x[3] for x in wk)
                tp = f"{max(x[2] for x in wk[1:3]) / 1e6:>8.2f}" if len(wk) > 1 else f"{'-':>8}"
                print(f"{codec:>5} {nsrc:>7} {step:>4} {max(x[0] for x in src):>16.3f} {max(x[1] for x in src):>15.3f} "
                      f"{max(x[0] for x in wk):>8.3f} {wire:>8.2f} {wk[0][2] / 1e6:>11.2f} {tp} {'yes' if ok else 'NO':>5}",
                      flush=True)
                if not ok:
                    raise SystemExit(f"{codec}, {nsrc} source(s), step {step}: a worker is not bit-exact")


if __name__ == "__main__":
    main()
