#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A trainer and a tensor-parallel rollout engine that generates text between weight commits.

Ranks 0..sources-1 are the trainer: a small byte-level Qwen-style decoder (Hugging Face parameter
names, GQA attention with qkv bias, SwiGLU MLP, RMSNorm) trained with AdamW, sharded for the push
and sending its own part from every rank with `sparrow.WeightSync(..., sources=[0, ..])`, no gather:
FSDP-style (--trainer fsdp, the default: each rank a row range of every bf16 tensor, as views) or
tensor-parallel, Megatron-style (--trainer tp: each rank the engine layout of its TP rank of degree
--sources, `sparrow.layouts.decoder(..., source=True)`). For brevity the optimizer step itself is
replicated on the trainer ranks: same seed, same batches. The next tp ranks are ONE inference engine split tensor-parallel the way vLLM holds
it (`sparrow.layouts.decoder`: fused qkv_proj and gate_up_proj, row-parallel o_proj and down_proj,
vocabulary-parallel embedding and lm_head padded to a multiple of 64 rows). Each worker receives
only into its own shard, in place; while a new version is staged in the background the engine keeps
generating with the old one, then commits between two tokens and generates with the new one.
The engine's forward pass runs across the worker processes (torch.distributed, gloo).

    python3 examples/python/tp_rollout.py --tp 2 --steps 3       # spawns 2 trainer ranks + 2 workers
    python3 examples/python/tp_rollout.py --trainer tp           # the trainer ranks as a TP=2 trainer

Each worker checks its shard bit for bit against the projection the trainer computes of its own
weights (sha256 per tensor). Exit status 0 only if every shard was bit-exact at every version.
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
VOCAB = 259  # 256 bytes and 3 special tokens: padded to 320 rows on the engine


def say(line):
    sys.stdout.flush()
    os.write(sys.stdout.fileno(), (line + "\n").encode())


def parse_args(argv=None):
    def positive(s):
        try:
            v = int(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{s!r} is not an int") from None
        if v <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {s}")
        return v

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--tp", type=positive, default=2, help="tensor-parallel worker processes (one engine)")
    p.add_argument("--sources", type=positive, default=2, help="trainer processes, each sending its own part")
    p.add_argument("--trainer", choices=("fsdp", "tp"), default="fsdp",
                   help="how the trainer ranks shard the weights: row ranges, or tensor-parallel (degree --sources)")
    p.add_argument("--steps", type=positive, default=3, help="training steps, one staged weight push each")
    p.add_argument("--layers", type=positive, default=2)
    p.add_argument("--hidden", type=positive, default=128)
    p.add_argument("--heads", type=positive, default=8)
    p.add_argument("--kv-heads", type=positive, default=2)
    p.add_argument("--intermediate", type=positive, default=256)
    p.add_argument("--lr", type=float, default=3e-3, help="AdamW learning rate")
    p.add_argument("--text", default=DEFAULT_TEXT if os.path.exists(DEFAULT_TEXT) else os.path.abspath(__file__))
    p.add_argument("--prompt", default="The ", help="what the engine continues")
    a = p.parse_args(argv)
    if a.heads % a.kv_heads or a.hidden % a.heads:
        p.error("--heads must be a multiple of --kv-heads and divide --hidden")
    def splits(tp):  # a tensor-parallel degree the model can be split into
        return not (a.heads % tp or a.intermediate % tp or (tp > a.kv_heads and tp % a.kv_heads) or
                    (tp <= a.kv_heads and a.kv_heads % tp))
    if not splits(a.tp):
        p.error(f"--tp {a.tp} must divide --heads and --intermediate, and divide or be a multiple of --kv-heads")
    if a.trainer == "tp" and not splits(a.sources):
        p.error(f"--trainer tp --sources {a.sources} must divide --heads and --intermediate, and divide or be a "
                "multiple of --kv-heads")
    if a.sources > a.kv_heads * (a.hidden // a.heads):  # k_proj, the tensor with the fewest rows
        p.error(f"--sources {a.sources}: more trainer ranks than k_proj has rows ({a.kv_heads * (a.hidden // a.heads)})")
    if not os.path.isfile(a.text):
        p.error(f"--text {a.text}: no such file")
    return a


def config(a):
    return dict(hidden_size=a.hidden, num_heads=a.heads, num_kv_heads=a.kv_heads, intermediate_size=a.intermediate,
                vocab_size=VOCAB, num_layers=a.layers, qkv_bias=True)


def rms(torch, x, w):
    return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(x.dtype) * w


def trainer_weights(torch, a):
    """fp32 master weights under Hugging Face names, with their shapes from sparrow.layouts."""
    from sparrow import layouts
    g = torch.Generator().manual_seed(0)
    w = {}
    for n, s in layouts.logical_shapes(**config(a)).items():
        w[n] = torch.ones(s) if n.endswith("norm.weight") else torch.randn(s, generator=g) * 0.05
        w[n].requires_grad_(True)
    return w


def forward(torch, w, tokens, a, tp=1, reduce=None, gather=None, rank=0):
    """The decoder on full weights (tp 1) or on one tensor-parallel shard (tp > 1: partial sums are
    completed by `reduce`, vocabulary shards joined by `gather`)."""
    F = torch.nn.functional
    hd = a.hidden // a.heads
    nh = a.heads // tp
    nkv = max(a.kv_heads // tp, 1)
    emb = w["model.embed_tokens.weight"]
    rows = emb.shape[0]
    local = tokens - rank * rows
    inside = (local >= 0) & (local < rows)
    x = F.embedding(local.clamp(0, rows - 1), emb) * inside.unsqueeze(-1)
    x = reduce(x) if reduce else x
    t = tokens.shape[-1]
    mask = torch.full((t, t), float("-inf")).triu(1)
    for i in range(a.layers):
        p = f"model.layers.{i}."
        h = rms(torch, x, w[p + "input_layernorm.weight"])
        if tp == 1:
            q, k, v = (F.linear(h, w[p + f"self_attn.{n}_proj.weight"], w[p + f"self_attn.{n}_proj.bias"])
                       for n in "qkv")
        else:
            q, k, v = F.linear(h, w[p + "self_attn.qkv_proj.weight"], w[p + "self_attn.qkv_proj.bias"]).split(
                [nh * hd, nkv * hd, nkv * hd], -1)
        q = q.unflatten(-1, (nh, hd)).transpose(0, 1)
        k = k.unflatten(-1, (nkv, hd)).transpose(0, 1).repeat_interleave(nh // nkv, 0)
        v = v.unflatten(-1, (nkv, hd)).transpose(0, 1).repeat_interleave(nh // nkv, 0)
        att = ((q @ k.transpose(-1, -2)).float() / hd ** 0.5 + mask).softmax(-1).to(v.dtype) @ v
        o = F.linear(att.transpose(0, 1).flatten(-2), w[p + "self_attn.o_proj.weight"])
        x = x + (reduce(o) if reduce else o)
        h = rms(torch, x, w[p + "post_attention_layernorm.weight"])
        if tp == 1:
            gate, up = F.linear(h, w[p + "mlp.gate_proj.weight"]), F.linear(h, w[p + "mlp.up_proj.weight"])
        else:
            gate, up = F.linear(h, w[p + "mlp.gate_up_proj.weight"]).chunk(2, -1)
        d = F.linear(F.silu(gate) * up, w[p + "mlp.down_proj.weight"])
        x = x + (reduce(d) if reduce else d)
    logits = F.linear(rms(torch, x, w["model.norm.weight"]), w["lm_head.weight"])
    return (gather(logits) if gather else logits)[..., :VOCAB]


def projection(torch, logical, shapes, layout):
    """What each engine tensor must hold: the pieces of the trainer's bf16 tensors, zeros elsewhere."""
    out = {}
    for name, shape in shapes.items():
        t = torch.zeros(shape, dtype=torch.bfloat16)
        for pc in layout.get(name, []) if name in layout else []:
            t.narrow(pc.dim, pc.offset, pc.stop - pc.start).copy_(logical[pc.logical].narrow(pc.dim, pc.start,
                                                                                              pc.stop - pc.start))
        if name not in layout:
            t.copy_(logical[name])
        out[name] = t
    return out


def sha(torch, tensors):
    return {n: hashlib.sha256(t.contiguous().view(torch.int16).numpy().tobytes()).hexdigest()
            for n, t in tensors.items()}


def source_sync(sparrow, comm, bf16, a, rank):
    """This trainer rank's WeightSync and what refreshes its tensors after a training step: fsdp, its
    rows [lo, hi) of every tensor as views (nothing to refresh); tp, its TP shard (copies)."""
    import torch
    from sparrow import layouts
    if a.sources == 1:
        return sparrow.WeightSync(comm, bf16.items(), root=0), lambda: None
    if a.trainer == "tp":
        shapes, layout = layouts.decoder(**config(a), tp_rank=rank, tp_size=a.sources, source=True)
        shard = {n: torch.zeros(s, dtype=torch.bfloat16) for n, s in shapes.items()}

        def refresh():
            for n, t in projection(torch, bf16, shapes, layout).items():
                shard[n].copy_(t)
        refresh()
        return sparrow.WeightSync(comm, shard.items(), root=0, layout=layout, sources=list(range(a.sources))), refresh
    tensors, layout = [], {}
    for n, t in bf16.items():
        lo, hi = rank * t.shape[0] // a.sources, (rank + 1) * t.shape[0] // a.sources
        tensors.append((f"{n}#{rank}", t[lo:hi]))
        layout[f"{n}#{rank}"] = [sparrow.Piece(n, 0, lo, hi)]
    return sparrow.WeightSync(comm, tensors, root=0, layout=layout, sources=list(range(a.sources))), lambda: None


def run_trainer(torch, dist, sparrow, comm, a, rank):
    from sparrow import layouts
    master = trainer_weights(torch, a)
    bf16 = {n: p.detach().to(torch.bfloat16) for n, p in master.items()}
    opt = torch.optim.AdamW(master.values(), lr=a.lr)
    data = torch.frombuffer(bytearray(open(a.text, "rb").read()), dtype=torch.uint8).long()
    gen = torch.Generator().manual_seed(1)
    sync, refresh = source_sync(sparrow, comm, bf16, a, rank)
    if rank == 0:
        say(f"trainer: {sum(t.numel() for t in bf16.values()) / 1e6:.2f} M parameters on {a.sources} rank(s), "
            f"engine of tp {a.tp}")
    for step in range(a.steps + 1):
        loss = float("nan")
        if step:
            starts = torch.randint(0, len(data) - 65, (8,), generator=gen)
            batch = torch.stack([data[s:s + 65] for s in starts])
            logits = torch.stack([forward(torch, master, b[:-1], a) for b in batch])
            l = torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten())
            opt.zero_grad()
            l.backward()
            opt.step()
            loss = l.item()
            with torch.no_grad():
                for n, p in master.items():
                    bf16[n].copy_(p)
            refresh()  # (a tensor-parallel trainer rank's shard of the new weights)
        t0 = time.perf_counter()
        sync.stage()  # on a trainer rank (a source) this is the push of its rows itself
        info = sync.commit()  # nothing to switch on a source: its stats, with the version
        want = [sha(torch, projection(torch, bf16, *layouts.decoder(**config(a), tp_rank=r, tp_size=a.tp)))
                for r in range(a.tp)] if rank == 0 else None
        dist.broadcast_object_list([want], src=0)
        say(f"trainer rank {rank}: version {info['version']} pushed (loss {loss:.3f}): {info['wire_bytes'] / 1e3:.1f} kB "
            f"on the wire for its {info['dense_bytes'] / 1e3:.1f} kB of weights, {1e3 * (time.perf_counter() - t0):.0f} ms")
    return 0


def run_worker(torch, dist, sparrow, comm, a, rank, group):
    from sparrow import layouts
    r = rank - a.sources
    shapes, layout = layouts.decoder(**config(a), tp_rank=r, tp_size=a.tp)
    engine = {n: torch.zeros(s, dtype=torch.bfloat16) for n, s in shapes.items()}
    sync = sparrow.WeightSync(comm, engine.items(), root=0, layout=layout,
                              sources=list(range(a.sources)) if a.sources > 1 else None)

    def reduce(x):
        dist.all_reduce(x, group=group)
        return x

    def gather(x):
        parts = [torch.empty_like(x) for _ in range(a.tp)]
        dist.all_gather(parts, x.contiguous(), group=group)
        return torch.cat(parts, -1)

    weights = {}  # the engine's weights in fp32 for CPU compute, refreshed at each commit

    def next_token(tokens):
        with torch.no_grad():
            logits = forward(torch, weights, tokens, a, a.tp, reduce, gather, r)
        return int(logits[-1].float().argmax())

    def everyone_ready():
        flag = torch.tensor([1 if sync.ready() else 0])
        dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=group)
        return bool(flag.item())

    ok = True
    prompt = [b for b in a.prompt.encode()]
    for step in range(a.steps + 1):
        weights.update({n: t.float() for n, t in engine.items()})
        sync.stage()
        tokens, during = list(prompt), 0
        while not everyone_ready():  # keep generating with the version held until the new one verified
            tokens.append(next_token(torch.tensor(tokens[-64:])))
            during += 1
        info = sync.commit()
        weights.update({n: t.float() for n, t in engine.items()})
        want = [None]
        dist.broadcast_object_list(want, src=0)
        exact = sha(torch, engine) == want[0][r]
        ok &= exact
        out = list(prompt)
        for _ in range(24):
            out.append(next_token(torch.tensor(out[-64:])))
        text = bytes(min(t, 255) for t in out).decode("latin-1").replace("\n", " ")
        say(f"worker {rank} (tp {r}): version {info['version']} committed after {during} token(s) generated with "
            f"version {info['version'] - 1 if step else 0}; shard bit-exact: {'yes' if exact else 'NO'}; "
            f"generates {text!r}")
    return 0 if ok else 1


def run_rank(a):
    import torch
    import torch.distributed as dist
    import sparrow
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if size != a.tp + a.sources:
        raise SystemExit(f"tp_rollout: the world is {size} ranks, --tp {a.tp} --sources {a.sources} needs "
                         f"{a.tp + a.sources}")
    torch.manual_seed(0)
    dist.init_process_group("gloo", rank=rank, world_size=size)
    group = dist.new_group(list(range(a.sources, size)))
    comm = sparrow.Communicator.from_env()  # shares torch.distributed's store: no second port
    try:
        if rank < a.sources:
            return run_trainer(torch, dist, sparrow, comm, a, rank)
        return run_worker(torch, dist, sparrow, comm, a, rank, group)
    finally:
        comm.destroy()
        dist.destroy_process_group()


def launch(a, argv):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    n = a.tp + a.sources
    env = dict(os.environ, WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    env.setdefault("SPARROW_SOCKET_IFNAME", "lo")
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__)] + argv, env=dict(env, RANK=str(r)))
             for r in range(n)]
    codes = []
    try:
        codes = [p.wait(timeout=600) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    good = codes and all(c == 0 for c in codes)
    say(f"summary: a trainer on {a.sources} rank(s) ({a.trainer}), an engine of tp {a.tp}, {a.steps} staged step(s): "
        + ("every shard bit-exact at every version" if good else f"FAILED (exit codes {codes})"))
    return 0 if good else 1


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    a = parse_args(argv)
    if "RANK" in os.environ:
        return run_rank(a)
    return launch(a, argv)


if __name__ == "__main__":
    sys.exit(main())
