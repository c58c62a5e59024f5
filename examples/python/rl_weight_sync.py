#!/usr/bin/env python3
"""RL-style weight sync with sparrow and a real PyTorch training loop.

A trainer process holds a byte-level transformer (torch.nn, a few million parameters) with fp32
master weights, takes real AdamW steps (lr 1e-6 by default) on next-byte prediction over a text file,
casts the weights to bf16 and pushes them with `sparrow.WeightSync.step()`; worker processes receive
them in place into their own bf16 copy of the model, check bit-exactness against a digest the trainer
broadcasts, and run a forward pass with the new weights. The trainer prints, per step, the density of
changed bf16 elements, dense vs wire bytes and the sync time.

    python3 examples/python/rl_weight_sync.py --workers 3 --steps 5      # spawns 1 trainer + 3 workers
    mpirun -np 4 -x MASTER_PORT=29533 python3 examples/python/rl_weight_sync.py --steps 5
    torchrun --nproc-per-node 4 examples/python/rl_weight_sync.py        # RANK/WORLD_SIZE/MASTER_*

Rank 0 is the trainer. Exit status 0 only if every worker was bit-exact on every step.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
_build = os.path.join(HERE, "..", "..", "build", "python")
if os.path.isdir(_build) and "SPARROW_NO_BUILD_TREE" not in os.environ:
    sys.path.insert(0, os.path.abspath(_build))

DEFAULT_TEXT = "/usr/share/common-licenses/GPL-3"


def say(line):
    """One line to stdout in a single write: the ranks share the terminal (or pipe), and print()'s
    separate writes of text and newline let their lines run into each other."""
    sys.stdout.flush()
    os.write(sys.stdout.fileno(), (line + "\n").encode())


def positive(kind):
    def parse(s):
        try:
            v = kind(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{s!r} is not a {kind.__name__}") from None
        if v <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {s}")
        return v
    return parse


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--workers", type=positive(int), default=3, help="rollout worker processes to spawn "
                   "(ignored under mpirun/torchrun, where the world size decides)")
    p.add_argument("--steps", type=positive(int), default=5, help="training steps, one weight push each")
    p.add_argument("--layers", type=positive(int), default=4, help="transformer layers")
    p.add_argument("--d-model", type=positive(int), default=256, help="model width (a multiple of --heads)")
    p.add_argument("--heads", type=positive(int), default=4, help="attention heads")
    p.add_argument("--seq", type=positive(int), default=64, help="tokens (bytes) per training sequence")
    p.add_argument("--batch", type=positive(int), default=16, help="sequences per training step")
    p.add_argument("--lr", type=positive(float), default=1e-6, help="AdamW learning rate")
    p.add_argument("--text", default=DEFAULT_TEXT if os.path.exists(DEFAULT_TEXT) else os.path.abspath(__file__),
                   help="training text (any file; read as bytes)")
    p.add_argument("--seed", type=int, default=0, help="random seed (model init and batches)")
    a = p.parse_args(argv)
    if a.d_model % a.heads:
        p.error(f"--d-model {a.d_model} is not a multiple of --heads {a.heads}")
    if not os.path.isfile(a.text):
        p.error(f"--text {a.text}: no such file")
    return a


def build_model(torch, a):
    nn = torch.nn

    class ByteLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(256, a.d_model)
            self.pos = nn.Parameter(torch.randn(a.seq, a.d_model) * 0.02)
            layer = nn.TransformerEncoderLayer(a.d_model, a.heads, 4 * a.d_model, dropout=0.0, batch_first=True)
            self.body = nn.TransformerEncoder(layer, a.layers)
            self.head = nn.Linear(a.d_model, 256)
            self.register_buffer("mask", torch.triu(torch.full((a.seq, a.seq), float("-inf")), 1), persistent=False)

        def forward(self, x):
            h = self.embed(x) + self.pos[: x.shape[1]]
            h = self.body(h, mask=self.mask[: x.shape[1], : x.shape[1]].to(h.dtype))
            return self.head(h)

    torch.manual_seed(a.seed)
    return ByteLM()


def batch(torch, data, a, gen):
    starts = torch.randint(0, len(data) - a.seq - 1, (a.batch,), generator=gen)
    x = torch.stack([data[s: s + a.seq] for s in starts]).long()
    y = torch.stack([data[s + 1: s + a.seq + 1] for s in starts]).long()
    return x, y


def digests(torch, tensors):
    """One 16-byte blake2b digest per tensor of its bf16 bits, computed without sparrow."""
    out = bytearray()
    for t in tensors:
        out += hashlib.blake2b(t.view(torch.int16).numpy().tobytes(), digest_size=16).digest()
    return torch.frombuffer(out, dtype=torch.uint8).clone()


def run_rank(a):
    import torch
    import sparrow

    torch.set_num_threads(1)
    comm = sparrow.Communicator.from_env()
    rank, size = comm.rank, comm.size
    data = torch.frombuffer(bytearray(open(a.text, "rb").read()), dtype=torch.uint8)
    if len(data) < a.seq + 2:
        raise SystemExit(f"--text {a.text} is too short for --seq {a.seq}")
    model = build_model(torch, a)  # every rank builds the same architecture (and the same init)
    served = model.to(torch.bfloat16)  # what rollouts run: bf16 weights (trainer: its bf16 copy)
    if rank == 0:
        master = build_model(torch, a)  # fp32 master weights, trained
        opt = torch.optim.AdamW(master.parameters(), lr=a.lr)
    sync = sparrow.WeightSync(comm, served.named_parameters(), root=0)
    nparams = sum(p.numel() for p in served.parameters())
    gen = torch.Generator().manual_seed(a.seed + 1)
    val = batch(torch, data, a, torch.Generator().manual_seed(12345))
    ok = True
    if rank == 0:
        say(f"trainer: {nparams / 1e6:.2f} M parameters in {len(sync.tensors)} tensors, {size - 1} worker(s), "
             f"AdamW lr {a.lr:g}, text {a.text} ({len(data)} bytes)")
        say(f"{'step':>4} {'loss':>8} {'density':>9} {'changed':>9} {'dense_MB':>9} {'wire_MB':>9} "
             f"{'ratio':>7} {'sync_ms':>8}")
    for step in range(a.steps + 1):  # step 0 pushes the initial weights (a full version)
        loss = float("nan")
        if rank == 0:
            if step:
                x, y = batch(torch, data, a, gen)
                out = master(x)
                l = torch.nn.functional.cross_entropy(out.reshape(-1, 256), y.reshape(-1))
                opt.zero_grad()
                l.backward()
                opt.step()
                loss = l.item()
            with torch.no_grad():
                for p, m in zip(served.parameters(), master.parameters()):
                    p.copy_(m)  # fp32 -> bf16, round to nearest even
        t0 = time.perf_counter()
        st = sync.step()
        dt = time.perf_counter() - t0
        # Bit-exactness, checked independently of sparrow's own digests.
        ref = digests(torch, sync.tensors) if rank == 0 else torch.zeros(16 * len(sync.tensors), dtype=torch.uint8)
        comm.broadcast(ref, root=0)
        if rank == 0:
            say(f"{step:4d} {loss:8.4f} {100 * st['density']:8.3f}% {st['changed']:9d} {st['dense_bytes'] / 1e6:9.2f} "
                 f"{st['wire_bytes'] / 1e6:9.3f} {st['dense_bytes'] / max(1, st['wire_bytes']):6.1f}x "
                 f"{1e3 * dt:8.1f}" + ("   (full version)" if st["full"] else ""))
        else:
            exact = torch.equal(digests(torch, sync.tensors), ref)
            ok &= exact
            with torch.no_grad():
                vl = torch.nn.functional.cross_entropy(served(val[0]).float().reshape(-1, 256), val[1].reshape(-1))
            say(f"worker {rank}: step {step} bit-exact: {'yes' if exact else 'NO'}, verify+apply "
                 f"{1e3 * st['apply_s']:.1f} ms (call {1e3 * dt:.0f} ms, including the wait for the trainer's step), "
                 f"val loss with the new weights {vl.item():.4f}")
    comm.destroy()
    return 0 if ok else 1


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(a, argv):
    """Spawns the trainer and the workers as processes of this script and waits for them."""
    n = a.workers + 1
    env = dict(os.environ, WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    env.setdefault("SPARROW_SOCKET_IFNAME", "lo")
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__)] + argv, env=dict(env, RANK=str(r)))
             for r in range(n)]
    codes = []
    try:
        codes = [p.wait() for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    good = all(c == 0 for c in codes)
    say(f"summary: {n - 1} worker(s), {a.steps} step(s): "
         + ("every worker bit-exact on every step" if good else f"FAILED (exit codes {codes})"))
    return 0 if good else 1


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    a = parse_args(argv)
    if any(k in os.environ for k in ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK")):
        return run_rank(a)
    return launch(a, argv)


if __name__ == "__main__":
    sys.exit(main())
