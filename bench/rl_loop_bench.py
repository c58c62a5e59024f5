#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The RL loop end to end: rollout tokens per second while the weights travel.

A trainer (rank 0) takes real AdamW steps on a small byte-level decoder (torch.nn, Llama-style) and
pushes every new version; rollout workers (one per region) generate tokens with the version they
hold, batch after batch, with a KV cache. The loop keeps SparrowRL's bounded staleness of one step:
the trainer's step s waits for every worker's batch s, generated with version s-1 or newer; a
worker's batch b needs version b-1 or newer (the first two batches: version 1, the initial weights).
So a version has a whole batch of generation to arrive in before a worker must wait for it.

Modes (each its own run; same seeds, same work):
  sparrow   sparse steps, staged: a worker receives the next version in the background while it
            generates and commits at a batch boundary (generation resumes on the new version)
  blocking  sparse steps without staging: a worker stops generating to receive the version it needs
  dense     the whole model broadcast every version (sparrow's dense broadcast), blocking
  paper     the SparrowRL-format ablation (leb128 index, raw values, two-level tree, 4 streams), staged
  ideal     sparrow staged on plain loopback: no network delay

Every batch is attributed to exactly one version (the version held from its first token to its last,
checked). Reported per mode: rollout tokens/s, worker time waiting for weights, trainer time waiting
for rollouts, the trainer's push time and wire bytes per version; per batch with --json.

    sudo python3 bench/rl_loop_bench.py                     # every mode, four_regions, one host per region
    python3 bench/rl_loop_bench.py --modes ideal --workers 3
"""
import argparse
import datetime
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.environ.get("SPARROW_PYTHONPATH", os.path.join(HERE, "..", "build", "python")))
sys.path.insert(0, HERE)

import torch  # noqa: E402

import sparrow  # noqa: E402
import argtypes  # noqa: E402
from model_bench_common import ABLATION, run_emulated, scenario_with_first  # noqa: E402

MODES = ("sparrow", "blocking", "dense", "paper", "ideal")
VOCAB = 259
STORE_PORT = 29541  # on the trainer's emulated host (its own namespace)
TEXT = "/usr/share/common-licenses/GPL-3"


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    positive = argtypes.positive(int)

    p.add_argument("--modes", default=",".join(MODES), help="comma-separated, of: " + ", ".join(MODES))
    p.add_argument("--scenario", default=os.path.join(HERE, "scenarios", "four_regions.toml"),
                   help="emulated network; every host of it is taken once (one rank per region), the first the trainer's")
    p.add_argument("--workers", type=positive, help="ideal mode alone: rollout workers (default: the scenario's)")
    p.add_argument("--steps", type=positive, default=6, help="trainer steps (versions after the first)")
    p.add_argument("--batch", type=positive, default=4, help="sequences per rollout batch")
    p.add_argument("--tokens", type=positive, default=16, help="tokens generated per sequence and batch")
    p.add_argument("--prompt", type=positive, default=16, help="prompt tokens per sequence")
    p.add_argument("--train-batch", type=positive, default=1, help="sequences per training step")
    p.add_argument("--train-len", type=positive, default=16, help="tokens per training sequence")
    p.add_argument("--hidden", type=positive, default=512)
    p.add_argument("--heads", type=positive, default=8)
    p.add_argument("--intermediate", type=positive, default=1536)
    p.add_argument("--layers", type=positive, default=4)
    p.add_argument("--lr", type=float, default=1e-5, help="AdamW learning rate")
    p.add_argument("--json", action="store_true", help="one JSON object per mode, with every batch")
    p.add_argument("--wanemu", default=os.path.join(HERE, "..", "build", "bin", "wanemu"))
    p.add_argument("--as-host", choices=MODES, help=argparse.SUPPRESS)  # one rank of a run
    p.add_argument("--out-dir", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    a.modes = a.modes.split(",")
    bad = [m for m in a.modes if m not in MODES]
    if bad:
        p.error(f"--modes: unknown {', '.join(bad)} (of {', '.join(MODES)})")
    if a.hidden % a.heads:
        p.error("--heads must divide --hidden")
    if not 0 < a.lr < 1:
        p.error("--lr must be in (0, 1)")
    if not os.path.isfile(a.scenario):
        p.error(f"--scenario {a.scenario}: no such file")
    if a.workers and a.modes != ["ideal"]:
        p.error("--workers is for --modes ideal alone (the scenario sets the emulated runs' workers)")
    return a


# ---- the model -------------------------------------------------------------------------------------

class Decoder(torch.nn.Module):
    """A Llama-style decoder over bytes: RMSNorm, multi-head attention, SwiGLU; a KV cache for
    generation. Parameter names as Hugging Face's."""

    def __init__(self, a):
        super().__init__()
        self.a = a
        lin = lambda i, o: torch.nn.Linear(i, o, bias=False)  # noqa: E731
        self.model = torch.nn.Module()
        self.model.embed_tokens = torch.nn.Embedding(VOCAB, a.hidden)
        self.model.layers = torch.nn.ModuleList()
        for _ in range(a.layers):
            layer = torch.nn.Module()
            layer.self_attn = torch.nn.Module()
            for n in "qkvo":
                setattr(layer.self_attn, f"{n}_proj", lin(a.hidden, a.hidden))
            layer.mlp = torch.nn.Module()
            layer.mlp.gate_proj, layer.mlp.up_proj = lin(a.hidden, a.intermediate), lin(a.hidden, a.intermediate)
            layer.mlp.down_proj = lin(a.intermediate, a.hidden)
            layer.input_layernorm = torch.nn.Parameter(torch.ones(a.hidden))
            layer.post_attention_layernorm = torch.nn.Parameter(torch.ones(a.hidden))
            self.model.layers.append(layer)
        self.model.norm = torch.nn.Parameter(torch.ones(a.hidden))
        self.lm_head = lin(a.hidden, VOCAB)

    @staticmethod
    def rms(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w

    def forward(self, tokens, cache=None):
        """Logits for `tokens` [B, T]; with `cache` (a list, one (k, v) per layer, grown in place) the
        tokens continue the cached ones."""
        F = torch.nn.functional
        nh, hd = self.a.heads, self.a.hidden // self.a.heads
        x = self.model.embed_tokens(tokens)
        b, t = tokens.shape
        past = cache[0][0].shape[2] if cache and cache[0] is not None else 0
        mask = torch.full((t, past + t), float("-inf")).triu(past + 1)
        for i, layer in enumerate(self.model.layers):
            h = self.rms(x, layer.input_layernorm)
            q, k, v = (getattr(layer.self_attn, f"{n}_proj")(h).view(b, t, nh, hd).transpose(1, 2) for n in "qkv")
            if cache is not None:
                if cache[i] is not None:
                    k, v = torch.cat([cache[i][0], k], 2), torch.cat([cache[i][1], v], 2)
                cache[i] = (k, v)
            att = ((q @ k.transpose(-1, -2)) / hd ** 0.5 + mask).softmax(-1) @ v
            x = x + layer.self_attn.o_proj(att.transpose(1, 2).reshape(b, t, -1))
            h = self.rms(x, layer.post_attention_layernorm)
            x = x + layer.mlp.down_proj(F.silu(layer.mlp.gate_proj(h)) * layer.mlp.up_proj(h))
        return self.lm_head(self.rms(x, self.model.norm))


def text_data():
    path = TEXT if os.path.exists(TEXT) else os.path.abspath(__file__)
    return torch.frombuffer(bytearray(open(path, "rb").read()), dtype=torch.uint8).long()


def generate(model, data, a, g):
    """One rollout batch: a.batch prompts from the text, a.tokens sampled tokens each."""
    starts = torch.randint(0, len(data) - a.prompt, (a.batch,), generator=g)
    seq = torch.stack([data[s:s + a.prompt] for s in starts])
    cache = [None] * a.layers
    with torch.no_grad():
        logits = model(seq, cache)[:, -1]
        for _ in range(a.tokens):
            nxt = torch.multinomial(logits.softmax(-1), 1, generator=g)
            logits = model(nxt, cache)[:, -1]
    return a.batch * a.tokens


def train_step(model, opt, data, a, g):
    starts = torch.randint(0, len(data) - a.train_len - 1, (a.train_batch,), generator=g)
    batch = torch.stack([data[s:s + a.train_len + 1] for s in starts])
    loss = torch.nn.functional.cross_entropy(model(batch[:, :-1]).flatten(0, 1), batch[:, 1:].flatten())
    opt.zero_grad()
    loss.backward()
    opt.step()
    return float(loss)


# ---- the weights' path -----------------------------------------------------------------------------

class Weights:
    """How a mode moves the bf16 weights: push (trainer), and on a worker start (the next version
    staged in the background), ready, take (the next version, waiting for it), held."""

    def __init__(self, mode, comm, model, rank):
        self.mode, self.comm, self.rank = mode, comm, rank
        self.names = [n for n, _ in model.named_parameters()]
        shapes = [p.shape for _, p in model.named_parameters()]
        total = sum(s.numel() for s in shapes)
        self.flat = torch.zeros(total, dtype=torch.bfloat16)
        self.views, at = {}, 0
        for n, s in zip(self.names, shapes):
            self.views[n] = self.flat[at:at + s.numel()].view(s)
            at += s.numel()
        self.sync = None if mode == "dense" else sparrow.WeightSync(comm, list(self.views.items()), root=0)
        self.held, self.pending = 0, False
        self.wire = []

    def push(self, model):
        with torch.no_grad():
            for n, p in model.named_parameters():
                self.views[n].copy_(p)
        if self.mode == "dense":
            self.comm.broadcast(self.flat, root=0)
            self.wire.append(self.flat.numel() * 2)
        else:
            self.sync.stage()  # the root's push
            self.wire.append(self.sync.commit()["wire_bytes"])
        self.held += 1

    def start(self):
        """A worker: the next version starts arriving in the background (staged modes)."""
        if self.mode in ("sparrow", "paper", "ideal") and not self.pending:
            self.sync.stage()
            self.pending = True

    def ready(self):
        return self.pending and self.sync.ready()

    def take(self):
        """The next version into the worker's tensors (waiting for it)."""
        if self.mode == "dense":
            self.comm.broadcast(self.flat, root=0)
        elif self.pending:
            self.sync.commit()
            self.pending = False
        else:
            self.sync.step()
        self.held += 1

    def load(self, model):
        with torch.no_grad():
            for n, p in model.named_parameters():
                p.copy_(self.views[n])


# ---- one rank ---------------------------------------------------------------------------------------

def open_rank(a, mode):
    """(rank, size, store, comm) of this process: wanemu's environment, or the ideal run's."""
    if "WANEMU_RANK" in os.environ:
        r, n = int(os.environ["WANEMU_RANK"]), int(os.environ["WANEMU_NRANKS"])
        master, port = os.environ["WANEMU_ADDRS"].split(",")[0], STORE_PORT
    else:
        r, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        master, port = "127.0.0.1", int(os.environ["MASTER_PORT"])
    os.environ.update(RANK=str(r), WORLD_SIZE=str(n))
    store = torch.distributed.TCPStore(master, port, n, r == 0, timeout=datetime.timedelta(seconds=600))
    return r, n, store, sparrow.Communicator.from_env(store=store)


def run_trainer(a, mode, store, comm, n):
    torch.manual_seed(0)
    model = Decoder(a)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr)
    data, g = text_data(), torch.Generator().manual_seed(1)
    w = Weights(mode, comm, model, 0)
    t = time.time()
    w.push(model)  # version 1: the initial weights
    steps = [{"step": 0, "wait_s": 0.0, "train_s": 0.0, "push_s": time.time() - t, "wire_bytes": w.wire[-1]}]
    for s in range(1, a.steps + 1):
        t0 = time.time()
        for r in range(1, n):  # every worker's batch s, generated with version s-1 or newer
            v = int(store.get(f"rl/{r}/{s}"))
            if v < max(1, s - 1):
                raise SystemExit(f"worker {r}'s batch {s} was generated with version {v}, staler than allowed")
        t1 = time.time()
        loss = train_step(model, opt, data, a, g)
        t2 = time.time()
        w.push(model)
        steps.append({"step": s, "wait_s": t1 - t0, "train_s": t2 - t1, "push_s": time.time() - t2, "loss": loss,
                      "wire_bytes": w.wire[-1], "start": t0, "end": time.time()})
    return {"role": "trainer", "params": sum(p.numel() for p in model.parameters()), "steps": steps}


def reporter(store, r):
    """Sends the batches' versions to the trainer from a thread of their own (a store round trip
    can take a WAN round trip: generation does not wait for it)."""
    q = queue.Queue()

    def loop():
        while True:
            item = q.get()
            if item is None:
                return
            store.set(f"rl/{r}/{item[0]}", str(item[1]))

    th = threading.Thread(target=loop, daemon=True)
    th.start()
    return q, th


def run_worker(a, mode, store, comm, r):
    torch.manual_seed(0)
    model = Decoder(a)  # compute copy (fp32) of the weights the worker holds
    data, g = text_data(), torch.Generator().manual_seed(100 + r)
    w = Weights(mode, comm, model, r)
    w.take()  # version 1
    w.load(model)
    last = a.steps + 1  # versions the trainer pushes
    q, th = reporter(store, r)
    batches, loaded = [], 1
    for b in range(1, a.steps + 1):
        need = max(1, b - 1)
        t0 = time.time()
        while True:  # at the batch boundary: the version needed (waiting), or a newer one already here
            if w.held < last:
                w.start()  # keeps the next version arriving in the background (staged modes)
            if w.held < need or w.ready():
                w.take()
                continue
            break
        if w.held != loaded:
            w.load(model)
            loaded = w.held
        t1 = time.time()
        tokens = generate(model, data, a, g)
        if w.held != loaded:
            raise SystemExit("a version changed in the middle of a batch")
        t2 = time.time()
        batches.append({"batch": b, "version": loaded, "wait_s": t1 - t0, "gen_s": t2 - t1, "tokens": tokens,
                        "start": t1, "end": t2})
        q.put((b, loaded))
    while w.held < last:  # the versions the trainer pushed after the last batch
        w.start()
        w.take()
    q.put(None)
    th.join()
    return {"role": "worker", "rank": r, "batches": batches}


def host(a):
    mode = a.as_host
    if mode == "paper":
        os.environ.update(ABLATION)
    torch.set_num_threads(1)
    r, n, store, comm = open_rank(a, mode)
    try:
        out = run_trainer(a, mode, store, comm, n) if r == 0 else run_worker(a, mode, store, comm, r)
    finally:
        comm.destroy()
    with open(os.path.join(a.out_dir, f"{r}.json"), "w") as f:
        json.dump(out, f)


# ---- the runs ----------------------------------------------------------------------------------------

def host_args(a, mode):
    args = ["--as-host", mode]
    for k in ("steps", "batch", "tokens", "prompt", "train_batch", "train_len", "hidden", "heads", "intermediate",
              "layers", "lr"):
        args += [f"--{k.replace('_', '-')}", str(getattr(a, k))]
    return args


def one_per_region(base, path):
    """The scenario with every host taken once; the number of hosts."""
    return scenario_with_first(base, 1, path)


def run_ideal(a, n):
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, WORLD_SIZE=str(n), MASTER_PORT=str(port), SPARROW_SOCKET_IFNAME="lo")
        env.pop("WANEMU_RANK", None)
        cmd = [sys.executable, os.path.abspath(__file__)] + host_args(a, "ideal") + ["--out-dir", d]
        procs = [subprocess.Popen(cmd, env=dict(env, RANK=str(r))) for r in range(n)]
        try:
            codes = [p.wait(timeout=3600) for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        if any(codes):
            raise SystemExit(f"the ideal run failed (exit codes {codes})")
        return [json.load(open(os.path.join(d, f"{r}.json"))) for r in range(n)]


def summary(mode, ranks):
    trainer, workers = ranks[0], ranks[1:]
    t0 = min(w["batches"][0]["start"] - w["batches"][0]["wait_s"] for w in workers)
    t1 = max(w["batches"][-1]["end"] for w in workers)
    tokens = sum(b["tokens"] for w in workers for b in w["batches"])
    waits = [sum(b["wait_s"] for b in w["batches"]) for w in workers]
    steps = trainer["steps"][1:]
    return {
        "mode": mode, "workers": len(workers), "params": trainer["params"], "seconds": t1 - t0,
        "tokens": tokens, "tokens_per_s": tokens / (t1 - t0),
        "worker_wait_fraction": max(waits) / (t1 - t0),
        "trainer_wait_s": sum(s["wait_s"] for s in steps), "train_s": sum(s["train_s"] for s in steps) / len(steps),
        "push_s": sum(s["push_s"] for s in steps) / len(steps),
        "wire_MB": sum(s["wire_bytes"] for s in steps) / len(steps) / 1e6,
        "versions": [[b["version"] for b in w["batches"]] for w in workers],
        "batches": [w["batches"] for w in workers], "trainer_steps": trainer["steps"],
    }


def main(argv=None):
    a = parse(argv)
    if a.as_host:
        return host(a)
    results = []
    with tempfile.TemporaryDirectory() as d:
        scen = os.path.join(d, "scenario.toml")
        n = one_per_region(a.scenario, scen)
        for mode in a.modes:
            if mode == "ideal":
                ranks = run_ideal(a, (a.workers or n - 1) + 1)
            else:
                ranks = run_emulated(a.wanemu, scen, __file__, host_args(a, mode), n)
            s = summary(mode, ranks)
            results.append(s)
            if a.json:
                print(json.dumps(s), flush=True)
    if a.json:
        return 0
    print(f"model: {results[0]['params'] / 1e6:.1f} M parameters ({results[0]['params'] * 2 / 1e6:.1f} MB bf16), "
          f"{a.steps} trainer steps, {results[0]['workers']} workers x {a.batch} x {a.tokens} tokens per batch; "
          f"scenario {a.scenario} (one host per region), {os.cpu_count()} CPUs")
    print(f"{'mode':>9} {'tokens/s':>9} {'seconds':>8} {'worker_wait':>11} {'trainer_wait_s':>14} {'train_s':>8} "
          f"{'push_s':>7} {'wire_MB':>8}  versions per batch (worker 1)")
    for s in results:
        print(f"{s['mode']:>9} {s['tokens_per_s']:>9.1f} {s['seconds']:>8.2f} {s['worker_wait_fraction']:>10.1%} "
              f"{s['trainer_wait_s']:>14.2f} {s['train_s']:>8.2f} {s['push_s']:>7.3f} {s['wire_MB']:>8.2f}  "
              f"{s['versions'][0]}")
    by = {s["mode"]: s["tokens_per_s"] for s in results}
    if "sparrow" in by and "dense" in by:
        print(f"sparrow / dense: {by['sparrow'] / by['dense']:.2f}x tokens/s")
    if "sparrow" in by and "ideal" in by:
        print(f"sparrow / ideal: {by['sparrow'] / by['ideal']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
