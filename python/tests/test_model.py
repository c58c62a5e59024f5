# SPDX-License-Identifier: Apache-2.0
"""WeightSync with names and layouts: a Qwen-like trainer (AdamW, fp32 master, bf16 pushed) and
rollout workers holding vLLM-style fused, tensor-parallel layouts (TP 1, 2 and 4, GQA replication,
vocabulary padding), ranks as threads over real sockets."""
import textwrap
import threading
import time

import pytest

from conftest import PKG, rank_envs, run_ranks, run_ranks_as_scripts

import sparrow
from sparrow import layouts

torch = pytest.importorskip("torch")

CFG = dict(hidden_size=64, num_heads=8, num_kv_heads=2, intermediate_size=96, vocab_size=100, num_layers=2,
           qkv_bias=True)
SENTINEL = -12345  # int16 bits of never-written padding


class Decoder(torch.nn.Module):
    """A Qwen-style decoder with Hugging Face parameter names (GQA attention with qkv bias, SwiGLU
    MLP, RMSNorm), small enough to train in a test."""

    def __init__(self, hidden_size, num_heads, num_kv_heads, intermediate_size, vocab_size, num_layers, qkv_bias):
        super().__init__()
        self.cfg = (hidden_size, num_heads, num_kv_heads)
        hd = hidden_size // num_heads
        lin = torch.nn.Linear
        self.model = torch.nn.Module()
        self.model.embed_tokens = torch.nn.Embedding(vocab_size, hidden_size)
        self.model.layers = torch.nn.ModuleList()
        for _ in range(num_layers):
            layer = torch.nn.Module()
            layer.self_attn = torch.nn.Module()
            layer.self_attn.q_proj = lin(hidden_size, num_heads * hd, bias=qkv_bias)
            layer.self_attn.k_proj = lin(hidden_size, num_kv_heads * hd, bias=qkv_bias)
            layer.self_attn.v_proj = lin(hidden_size, num_kv_heads * hd, bias=qkv_bias)
            layer.self_attn.o_proj = lin(num_heads * hd, hidden_size, bias=False)
            layer.mlp = torch.nn.Module()
            layer.mlp.gate_proj = lin(hidden_size, intermediate_size, bias=False)
            layer.mlp.up_proj = lin(hidden_size, intermediate_size, bias=False)
            layer.mlp.down_proj = lin(intermediate_size, hidden_size, bias=False)
            layer.input_layernorm = torch.nn.Parameter(torch.ones(hidden_size))
            layer.post_attention_layernorm = torch.nn.Parameter(torch.ones(hidden_size))
            self.model.layers.append(layer)
        self.model.norm = torch.nn.Parameter(torch.ones(hidden_size))
        self.lm_head = lin(hidden_size, vocab_size, bias=False)

    def named_tensors(self):
        """Hugging Face names: RMSNorm weights are `...layernorm.weight` / `model.norm.weight`."""
        out = []
        for n, p in self.named_parameters():
            if n.endswith("layernorm") or n == "model.norm":
                n += ".weight"
            out.append((n, p))
        return out

    @staticmethod
    def rms(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w

    def forward(self, tokens):
        h_size, nh, nkv = self.cfg
        hd = h_size // nh
        x = self.model.embed_tokens(tokens)
        b, t, _ = x.shape
        mask = torch.full((t, t), float("-inf")).triu(1)
        for layer in self.model.layers:
            a = self.rms(x, layer.input_layernorm)
            q = layer.self_attn.q_proj(a).view(b, t, nh, hd).transpose(1, 2)
            k = layer.self_attn.k_proj(a).view(b, t, nkv, hd).transpose(1, 2).repeat_interleave(nh // nkv, 1)
            v = layer.self_attn.v_proj(a).view(b, t, nkv, hd).transpose(1, 2).repeat_interleave(nh // nkv, 1)
            att = (q @ k.transpose(-1, -2) / hd ** 0.5 + mask).softmax(-1) @ v
            x = x + layer.self_attn.o_proj(att.transpose(1, 2).reshape(b, t, nh * hd))
            m = self.rms(x, layer.post_attention_layernorm)
            x = x + layer.mlp.down_proj(torch.nn.functional.silu(layer.mlp.gate_proj(m)) * layer.mlp.up_proj(m))
        return self.lm_head(self.rms(x, self.model.norm))


class Trainer:
    """fp32 master weights trained with AdamW; what it pushes is their bf16 copy."""

    def __init__(self, seed=0):
        torch.manual_seed(seed)
        self.net = Decoder(**CFG)
        self.opt = torch.optim.AdamW(self.net.parameters(), lr=1e-3)
        self.bf16 = [(n, p.detach().to(torch.bfloat16)) for n, p in self.net.named_tensors()]

    def train_step(self):
        tokens = torch.randint(0, CFG["vocab_size"], (4, 12))
        loss = torch.nn.functional.cross_entropy(self.net(tokens[:, :-1]).flatten(0, 1), tokens[:, 1:].flatten())
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        with torch.no_grad():
            for (_, dst), (_, p) in zip(self.bf16, self.net.named_tensors()):
                dst.copy_(p)

    def tensor(self, name):
        return dict(self.bf16)[name]


def engine_tensors(tp_rank, tp_size):
    shapes, layout = layouts.decoder(**CFG, tp_rank=tp_rank, tp_size=tp_size)
    tensors = {n: torch.full(s, SENTINEL, dtype=torch.int16).view(torch.bfloat16) for n, s in shapes.items()}
    return tensors, layout


def reference(trainer, name, tp_rank, tp_size):
    """What engine tensor `name` must hold: the projection written out by hand, with torch slicing
    (padding rows as the sentinel)."""
    hd = CFG["hidden_size"] // CFG["num_heads"]
    q_rows = CFG["num_heads"] // tp_size * hd
    kv = CFG["num_kv_heads"]
    kv_first = (tp_rank * kv // tp_size if tp_size <= kv else tp_rank // (tp_size // kv)) * hd
    kv_rows = max(kv // tp_size, 1) * hd
    i_rows = CFG["intermediate_size"] // tp_size
    t = trainer.tensor
    rows = lambda x, a, n: x[a:a + n]  # noqa: E731
    if ".qkv_proj." in name:
        suffix = name.split(".")[-1]
        base = name.replace("qkv_proj." + suffix, "")
        return torch.cat([rows(t(base + "q_proj." + suffix), tp_rank * q_rows, q_rows),
                          rows(t(base + "k_proj." + suffix), kv_first, kv_rows),
                          rows(t(base + "v_proj." + suffix), kv_first, kv_rows)])
    if name.endswith("o_proj.weight"):
        return t(name)[:, tp_rank * q_rows:(tp_rank + 1) * q_rows]
    if name.endswith("gate_up_proj.weight"):
        base = name.replace("gate_up_proj.weight", "")
        return torch.cat([rows(t(base + "gate_proj.weight"), tp_rank * i_rows, i_rows),
                          rows(t(base + "up_proj.weight"), tp_rank * i_rows, i_rows)])
    if name.endswith("down_proj.weight"):
        return t(name)[:, tp_rank * i_rows:(tp_rank + 1) * i_rows]
    if name.endswith("embed_tokens.weight") or name == "lm_head.weight":
        padded = -(-CFG["vocab_size"] // 64) * 64
        n = padded // tp_size
        out = torch.full((n, CFG["hidden_size"]), SENTINEL, dtype=torch.int16).view(torch.bfloat16)
        part = t(name)[tp_rank * n:(tp_rank + 1) * n]
        out[:part.shape[0]] = part
        return out
    return t(name)


def same_bits(a, b):
    return a.shape == b.shape and torch.equal(a.contiguous().view(torch.int16), b.contiguous().view(torch.int16))


# Ranks: 0 trainer; 1 TP=1 (its tensors listed in reverse order); 2-3 TP=2; 4-7 TP=4.
PLACES = {1: (0, 1), 2: (0, 2), 3: (1, 2), 4: (0, 4), 5: (1, 4), 6: (2, 4), 7: (3, 4)}


def test_layouts_cover_the_logical_model():
    """Across the ranks of one TP degree, the pieces cover every logical element (GQA kv heads as
    often as they are replicated), and every piece fits its local tensor."""
    logical = layouts.logical_shapes(**CFG)
    for tp in (1, 2, 4):
        covered = {n: 0 for n in logical}
        for r in range(tp):
            shapes, layout = layouts.decoder(**CFG, tp_rank=r, tp_size=tp)
            for name, shape in shapes.items():
                for p in layout.get(name, []):
                    assert p.offset + p.stop - p.start <= shape[p.dim], (name, p)
                    n = 1
                    for d, s in enumerate(logical[p.logical]):
                        n *= (p.stop - p.start) if d == p.dim else s
                    covered[p.logical] += n
                if name not in layout:
                    assert logical[name] == shape
                    covered[name] += 1
        for n, s in logical.items():
            numel = 1
            for d in s:
                numel *= d
            if n.endswith(("layernorm.weight", "norm.weight")):
                assert covered[n] == tp, n
            elif ".k_proj." in n or ".v_proj." in n:
                assert covered[n] == numel * max(1, tp // CFG["num_kv_heads"]), (n, tp)
            else:
                assert covered[n] == numel, (n, tp)
    with pytest.raises(sparrow.InvalidArgument, match="not divisible"):
        layouts.decoder(**dict(CFG, intermediate_size=97), tp_rank=0, tp_size=2)
    with pytest.raises(sparrow.InvalidArgument, match="tp_rank"):
        layouts.decoder(**CFG, tp_rank=2, tp_size=2)


def held_rows(layout, tensors, name):
    """The row ranges (dim 0) of logical tensor `name` a worker with `layout` holds, merged."""
    rows = dict(layouts.logical_shapes(**CFG))[name][0]
    spans = sorted((p.start, p.stop) if p.dim == 0 else (0, rows)
                   for local in tensors for p in layout.get(local, []) if p.logical == name)
    if name in tensors and name not in layout:
        spans = [(0, rows)]
    merged = []
    for a, b in spans:
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


def test_trained_model_reaches_tp_1_2_4_workers_bit_exact_with_one_version():
    trainer = Trainer()
    engines = {r: engine_tensors(*PLACES[r]) for r in PLACES}
    versions = []
    received = {}

    def body(c, r):
        if r == 0:
            sync = sparrow.WeightSync(c, trainer.bf16, root=0)
        else:
            tensors, layout = engines[r]
            items = list(tensors.items())
            if r == 1:
                items.reverse()  # order-free: matched by name
            sync = sparrow.WeightSync(c, items, root=0, layout=layout)
        for step in range(3):
            barrier.wait()
            if r == 0 and step:
                trainer.train_step()
            barrier.wait()
            info = sync.step()
            assert info["version"] == sync.version == step + 1
            barrier.wait()
            if r == 1:
                check_all(step)
        received[r] = info["dense_bytes"]
        if r == 0:
            digests = {(n, None): sync.digest(n) for n, _ in trainer.bf16}
            for n, t in trainer.bf16:  # every row range any worker holds
                for w in engines:
                    for span in held_rows(engines[w][1], engines[w][0], n):
                        digests[(n, span)] = sync.digest(n, rows=span)
        else:
            digests = {(n, span): sync.digest(n, rows=span)
                       for n, _ in trainer.bf16 for span in held_rows(engines[r][1], engines[r][0], n)}
            if PLACES[r][1] > 1:  # a shard holds some rows of the column-parallel tensors only
                with pytest.raises(sparrow.InvalidUsage, match="does not hold rows"):
                    sync.digest("lm_head.weight")
        sync.close()
        return digests

    def check_all(step):
        for r, (tensors, _) in engines.items():
            for name, t in tensors.items():
                assert same_bits(t, reference(trainer, name, *PLACES[r])), f"step {step}: {name} on rank {r}"
        versions.append(step + 1)

    barrier = threading.Barrier(8, timeout=60)
    digests = run_ranks(8, body)
    assert versions == [1, 2, 3]
    for r in range(1, 8):
        for key, d in digests[r].items():
            assert d == digests[0][key], f"rank {r}'s {key} differs from the trainer's"
    # Each worker received only the rows its pieces hold: a TP=4 shard a fraction of the model.
    assert received[1] == received[0]
    assert received[2] < 0.7 * received[1] and received[4] < 0.5 * received[1], received
    tp2 = [s for n, _ in trainer.bf16 for s in held_rows(engines[2][1], engines[2][0], n)]
    assert len(tp2) > len(trainer.bf16) / 2  # (the check above compares real row ranges)


@pytest.mark.parametrize("case", ["unknown name", "transposed", "wrong dtype", "range past the end"])
def test_a_worker_that_does_not_fit_fails_every_rank_naming_the_tensor(case):
    trainer = Trainer(1)
    tensors, layout = engine_tensors(0, 2)
    name = "model.layers.1.self_attn.o_proj.weight"
    if case == "unknown name":
        name = "model.norm.wieght"
        tensors[name] = tensors.pop("model.norm.weight")
    elif case == "transposed":
        name = "model.norm.weight"
        tensors[name] = torch.zeros(1, CFG["hidden_size"], dtype=torch.bfloat16)
    elif case == "wrong dtype":
        name = "model.layers.0.input_layernorm.weight"
        tensors[name] = torch.zeros(CFG["hidden_size"], dtype=torch.float16)
    else:
        layout["lm_head.weight"] = [sparrow.Piece("lm_head.weight", 0, 40, 104)]  # fits locally, not the vocabulary
        name = "lm_head.weight"

    def body(c, r):
        if r == 0:
            sync = sparrow.WeightSync(c, trainer.bf16, root=0)
        else:
            sync = sparrow.WeightSync(c, list(tensors.items()) if r == 1 else list(engine_tensors(1, 2)[0].items()),
                                      root=0, layout=layout if r == 1 else engine_tensors(1, 2)[1])
        t0 = time.monotonic()
        with pytest.raises(sparrow.InvalidUsage) as e:
            sync.step()
        assert time.monotonic() - t0 < 10
        return str(e.value)

    for r, msg in enumerate(run_ranks(3, body)):
        assert name in msg, f"rank {r}: {msg}"
    for t in tensors.values():
        assert bool((t.view(torch.int16) == SENTINEL).all()) or not bool(t.any()), "nothing written"


def test_a_worker_that_wrote_into_its_fused_tensor_is_refused_then_repaired_and_staging_works():
    trainer = Trainer(2)
    tensors, layout = engine_tensors(1, 2)
    qkv = tensors["model.layers.0.self_attn.qkv_proj.weight"]
    results = {}

    def body(c, r):
        sync = (sparrow.WeightSync(c, trainer.bf16, root=0) if r == 0
                else sparrow.WeightSync(c, list(tensors.items()), root=0, layout=layout))
        sync.step()
        barrier.wait()
        if r == 0:
            trainer.train_step()
        else:
            qkv.view(torch.int16)[3, 5] += 1  # the engine wrote into its weights
            results["before"] = {n: t.clone() for n, t in tensors.items()}
        barrier.wait()
        if r == 1:
            with pytest.raises(sparrow.VersionMismatch):
                sync.step()
            results["after"] = {n: t.clone() for n, t in tensors.items()}
            results["refused_version"] = sync.version
        else:
            sync.step()
        barrier.wait()
        if r == 0:
            trainer.train_step()
        barrier.wait()
        sync.stage()  # the repair arrives staged: the worker keeps reading the old tensors
        if r == 1:
            while not sync.ready():
                time.sleep(0.001)
            results["staged"] = all(same_bits(t, results["after"][n]) for n, t in tensors.items())
        sync.commit()
        return sync.version

    barrier = threading.Barrier(2, timeout=60)
    versions = run_ranks(2, body)
    assert all(same_bits(results["after"][n], results["before"][n]) for n in tensors), "nothing written when refused"
    assert results["refused_version"] == 1
    assert results["staged"], "a staged step wrote before its commit"
    assert versions == [3, 3]
    for name, t in tensors.items():
        assert same_bits(t, reference(trainer, name, 1, 2)), f"{name} not repaired"


def test_layout_and_sources_arguments_are_checked():
    def body(c, r):
        t = torch.zeros(4, dtype=torch.bfloat16)
        with pytest.raises(sparrow.InvalidArgument, match="not among the tensors"):
            sparrow.WeightSync(c, [("a", t)], layout={"b": [sparrow.Piece("a", 0, 0, 4)]})
        with pytest.raises(sparrow.InvalidArgument, match="must be one of them"):
            sparrow.WeightSync(c, [("a", t)], sources=[1], root=0)
        with pytest.raises(sparrow.InvalidArgument, match="one piece along another dim that fills it"):
            sparrow.WeightSync(c, [("a", t.view(2, 2))], sources=[0, 1], layout={"a": [sparrow.Piece("x", 1, 0, 1)]})
        with pytest.raises(sparrow.InvalidArgument, match="stop"):
            sparrow.Piece("a", 0, 4, 4)
        with pytest.raises(sparrow.InvalidArgument, match="overlap"):
            sparrow.WeightSync(c, [("a", t)], root=1 - r,
                               layout={"a": [sparrow.Piece("x", 0, 0, 3), sparrow.Piece("y", 0, 0, 2, offset=2)]})
        return True

    assert run_ranks(2, body) == [True, True]


def fsdp_shard(trainer, part, parts):
    """Source `part` of `parts`: dim-0 row ranges of the trainer's bf16 tensors, as views (FSDP-style)."""
    tensors, layout = [], {}
    for name, t in trainer.bf16:
        rows = t.shape[0]
        start, stop = rows * part // parts, rows * (part + 1) // parts
        if start == stop:
            continue
        local = f"{name}#shard{part}"
        tensors.append((local, t[start:stop]))
        layout[local] = [sparrow.Piece(name, 0, start, stop)]
    return tensors, layout


def test_two_fsdp_sources_feed_tp_workers_bit_exact():
    trainer = Trainer(4)
    engines = {2: engine_tensors(0, 2), 3: engine_tensors(1, 2)}
    barrier = threading.Barrier(4, timeout=60)

    def body(c, r):
        if r < 2:
            tensors, layout = fsdp_shard(trainer, r, 2)
        else:
            tensors, layout = list(engines[r][0].items()), engines[r][1]
        sync = sparrow.WeightSync(c, tensors, root=0, layout=layout, sources=[0, 1])
        versions = []
        for step in range(3):
            barrier.wait()
            if r == 0 and step:
                trainer.train_step()  # the sources' views see the new weights
            barrier.wait()
            versions.append(sync.step()["version"])
            barrier.wait()
            if r >= 2:
                for name, t in engines[r][0].items():
                    assert same_bits(t, reference(trainer, name, r - 2, 2)), f"step {step}: {name} on rank {r}"
        # A staged step: the sources push their rows, the engine keeps the old version until its commit.
        barrier.wait()
        if r == 0:
            trainer.train_step()
        barrier.wait()
        old = {n: t.clone() for n, t in engines[r][0].items()} if r >= 2 else {}
        sync.stage()
        if r >= 2:
            deadline = time.monotonic() + 60
            while not sync.ready():
                assert time.monotonic() < deadline, "never ready"
                time.sleep(0.001)
            for name, t in engines[r][0].items():
                assert same_bits(t, old[name]), f"{name} on rank {r} written before the commit"
        versions.append(sync.commit()["version"])
        if r >= 2:
            for name, t in engines[r][0].items():
                assert same_bits(t, reference(trainer, name, r - 2, 2)), f"staged step: {name} on rank {r}"
        return versions

    assert run_ranks(4, body) == [[1, 2, 3, 4]] * 4


def megatron_shard(trainer, tp_rank, tp_size):
    """A Megatron-style tensor-parallel trainer rank as a source (layouts.decoder(source=True): the
    engine layout of that rank, what lower ranks also hold left out) holding the trainer's weights."""
    shapes, layout = layouts.decoder(**CFG, tp_rank=tp_rank, tp_size=tp_size, source=True)
    return {n: reference(trainer, n, tp_rank, tp_size).clone(memory_format=torch.contiguous_format) for n in shapes}, layout


def test_a_source_layout_leaves_out_what_a_lower_rank_holds():
    held = {}
    for r in range(4):  # TP=4 with 2 kv heads: ranks 0-1 hold kv head 0, ranks 2-3 kv head 1
        shapes, layout = layouts.decoder(**CFG, tp_rank=r, tp_size=4, source=True)
        assert ("model.norm.weight" in shapes) == (r == 0)
        for n, pieces in layout.items():
            assert n in shapes and pieces, n
            for p in pieces:
                key = (p.logical, p.dim, p.start, p.stop)
                assert key not in held, f"{key} on ranks {held.get(key)} and {r}"
                held[key] = r
    qkv = layouts.decoder(**CFG, tp_rank=1, tp_size=4, source=True)[1]["model.layers.0.self_attn.qkv_proj.weight"]
    assert [p.logical.split(".")[-2] for p in qkv] == ["q_proj"], "rank 1's kv head is rank 0's"


@pytest.mark.parametrize("tp", [2, 4])
def test_a_tensor_parallel_trainer_as_sources_feeds_every_layout_bit_exact(tp):
    """Ranks 0..tp-1: a TP=tp trainer (at 4, with kv heads replicated on pairs of ranks); then a
    whole-tensor worker, rank 1 of a TP=4 engine and a TP=1 engine."""
    trainer = Trainer(6)
    whole_rank, tp4_rank, tp1_rank = tp, tp + 1, tp + 2
    workers = {tp4_rank: engine_tensors(1, 4), tp1_rank: engine_tensors(0, 1)}
    whole = [(n, torch.zeros_like(t)) for n, t in reversed(trainer.bf16)]
    barrier = threading.Barrier(tp + 3, timeout=60)
    sources = list(range(tp))

    def body(c, r):
        if r < tp:
            tensors, layout = megatron_shard(trainer, r, tp)
        elif r == whole_rank:
            tensors, layout = dict(whole), None
        else:
            tensors, layout = workers[r]
        sync = sparrow.WeightSync(c, list(tensors.items()), root=0, layout=layout, sources=sources)
        versions = []
        for step in range(3):
            barrier.wait()
            if r == 0 and step:
                trainer.train_step()
            barrier.wait()
            if r < tp:  # the trainer ranks' own shards of the new weights, in place
                for n, t in megatron_shard(trainer, r, tp)[0].items():
                    tensors[n].copy_(t)
            barrier.wait()
            versions.append(sync.step()["version"])
            barrier.wait()
            if r == whole_rank:
                for n, t in tensors.items():
                    assert same_bits(t, trainer.tensor(n)), f"step {step}: {n} on the whole worker"
            if r > whole_rank:
                tp_rank, tp_size = (1, 4) if r == tp4_rank else (0, 1)
                for n, t in tensors.items():
                    assert same_bits(t, reference(trainer, n, tp_rank, tp_size)), f"step {step}: {n} on rank {r}"
            o = "model.layers.1.self_attn.o_proj.weight"
            if r in (whole_rank, tp1_rank):
                digests[r].append(sync.digest(o))
            if r in (0, tp4_rank):
                with pytest.raises(sparrow.InvalidUsage, match="every column"):
                    sync.digest(o)  # it holds some of o's columns
        return versions

    digests = {whole_rank: [], tp1_rank: []}
    assert run_ranks(tp + 3, body) == [[1, 2, 3]] * (tp + 3)
    assert digests[whole_rank] == digests[tp1_rank], "the whole worker and the TP=1 engine hold the same o"
    assert len(set(digests[whole_rank])) == 3, "o changed every step"


# The ranks of a process test's script: rank 0 the trainer (`logical`, whole), ranks 1-2 a TP=2
# engine (`cfg`'s decoder layout), rank 3 a worker holding whole tensors; `sync` their WeightSync.
ENGINE_RANKS = """
    if rank == 0:
        tensors, layout = list(logical.items()), None
    elif rank in (1, 2):
        shapes, layout = layouts.decoder(**cfg, tp_rank=rank - 1, tp_size=2)
        tensors = [(n, torch.zeros(s, dtype=torch.bfloat16)) for n, s in shapes.items()]
    else:
        tensors, layout = [(n, torch.zeros_like(t)) for n, t in logical.items()], None
    sync = sparrow.WeightSync(comm, tensors, root=0, layout=layout)
"""

# A rollout worker killed in the middle of a step, on an elastic communicator, as processes: rank 3
# (whole tensors) stages the first version (a full snapshot of ~100 MB) and kills itself once part of
# it arrived; the trainer's step drops it when its lease runs out and succeeds, the TP=2 engine
# (ranks 1-2) gets that version and the next ones bit-exact, and every survivor agrees on the
# version and the members.
KILLED_MID_STEP = """
    import os, signal, sys, time, torch, sparrow
    from sparrow import layouts
    cfg = dict(hidden_size=512, num_heads=8, num_kv_heads=2, intermediate_size=2048, vocab_size=8192,
               num_layers=4, qkv_bias=True)
    rank = int(os.environ["RANK"])
    comm = sparrow.Communicator.from_env(timeout=60, elastic=True, lease_ms=1500)
    g = torch.Generator().manual_seed(7)
    logical = {n: (torch.randn(s, generator=g) * 0.02).to(torch.bfloat16)
               for n, s in layouts.logical_shapes(**cfg).items()}
    def mutate(step):
        for i, t in enumerate(logical.values()):
            t.view(torch.int16).view(-1)[(step + i) % 97::97] += 1
""" + ENGINE_RANKS + """
    for step in range(1, 4):
        if step > 1:
            mutate(step)  # the trainer's new version; the workers' copy is their reference
        sync.stage()
        if rank == 3:
            while not comm.stats()["stage_bytes_received"]:
                pass
            print("rank 3 dies with", comm.stats()["stage_bytes_received"], "bytes received, ready:", sync.ready(),
                  flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        while not sync.ready():
            time.sleep(0.001)
        info = sync.commit()
        exact = True
        for name, t in tensors if rank in (1, 2) else []:
            for pc in layout.get(name, []):
                want = logical[pc.logical].narrow(pc.dim, pc.start, pc.stop - pc.start)
                got = t.narrow(pc.dim, pc.offset, pc.stop - pc.start)
                exact &= torch.equal(got.view(torch.int16), want.view(torch.int16))
        print(f"rank {rank} step {step} version {info['version']} exact {exact} members {comm.members()}",
              flush=True)
    comm.destroy()
"""


def test_a_worker_killed_mid_step_on_an_elastic_communicator_leaves_the_engine_bit_exact():
    outs = run_ranks_as_scripts(KILLED_MID_STEP, rank_envs(4), timeout=240)
    assert "ready: False" in outs[3], outs[3]  # it died mid-step: the version had not all arrived
    for r in (1, 2):
        assert f"rank {r} step 1 version 1 exact True members [0, 1, 2" in outs[r], outs[r]  # (3 maybe not yet dropped)
        for step in (2, 3):
            assert f"rank {r} step {step} version {step} exact True members [0, 1, 2]" in outs[r], outs[r]
    assert "rank 0 step 3 version 3" in outs[0] and "members [0, 1, 2]" in outs[0], outs[0]


# A source that dies during a step, as processes on a fixed communicator: source 0 has sent its rows
# of version 2 when source 1 is killed instead of sending its own. The workers' step fails (the dead
# rank named) and their tensors still hold version 1, bit for bit: never a mix of versions.
SOURCE_KILLED = """
    import os, signal, sys, torch, sparrow
    from sparrow import layouts
    cfg = dict(hidden_size=128, num_heads=8, num_kv_heads=2, intermediate_size=256, vocab_size=512,
               num_layers=2, qkv_bias=True)
    rank = int(os.environ["RANK"])
    comm = sparrow.Communicator.from_env(timeout=60)
    g = torch.Generator().manual_seed(9)
    logical = {n: (torch.randn(s, generator=g) * 0.02).to(torch.bfloat16)
               for n, s in layouts.logical_shapes(**cfg).items()}
    if rank < 2:
        tensors, layout = [], {}
        for n, t in logical.items():
            lo, hi = rank * t.shape[0] // 2, (rank + 1) * t.shape[0] // 2
            tensors.append((f"{n}#{rank}", t[lo:hi]))
            layout[f"{n}#{rank}"] = [sparrow.Piece(n, 0, lo, hi)]
    elif rank == 2:
        shapes, layout = layouts.decoder(**cfg, tp_rank=0, tp_size=2)
        tensors = [(n, torch.zeros(s, dtype=torch.bfloat16)) for n, s in shapes.items()]
    else:
        tensors, layout = [(n, torch.zeros_like(t)) for n, t in logical.items()], None
    sync = sparrow.WeightSync(comm, tensors, root=0, layout=layout, sources=[0, 1])
    sync.step()
    held = [t.clone() for _, t in tensors]
    for i, t in enumerate(logical.values()):
        t.view(torch.int16).view(-1)[i % 31::31] += 1  # version 2 (every rank's copy: the sources' rows)
    if rank == 1:
        print("rank 1 dies instead of sending its rows", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        sync.step()
        print(f"rank {rank} step 2 ok", flush=True)
    except sparrow.Error as e:
        same = all(torch.equal(t.view(torch.int16), h.view(torch.int16)) for (_, t), h in zip(tensors, held))
        print(f"rank {rank} step 2 raised {type(e).__name__}: {e}; tensors hold version 1: {same}", flush=True)
"""


def test_a_source_killed_during_a_step_leaves_the_workers_on_the_old_version():
    outs = run_ranks_as_scripts(SOURCE_KILLED, rank_envs(4, SPARROW_TIMEOUT_S="30"), timeout=180)
    assert "rank 1 dies" in outs[1], outs[1]
    for r in (2, 3):
        assert f"rank {r} step 2 raised" in outs[r] and "tensors hold version 1: True" in outs[r], outs[r]
        assert "rank 1" in outs[r].split("raised", 1)[1], outs[r]  # the dead source is named


# A rollout worker that crashes and is restarted, as processes: rank 3 (whole tensors) takes the first
# step, starts its replacement (JOINER=1: sparrow.Communicator.join into slot 3) and kills itself.
# The trainer's steps drop it when its lease runs out; the replacement is admitted at the start of a
# later step, creates its WeightSync as the first one did, and receives that step's whole version and
# the next two, bit-exact, with the version every rank holds; the TP=2 engine (ranks 1-2) is
# bit-exact throughout. Every process keeps the trainer's logical weights for reference (version v
# is the seeded start with mutate(2), ..., mutate(v) applied).
REJOIN = """
    import os, signal, subprocess, sys, torch, sparrow
    from sparrow import layouts
    cfg = dict(hidden_size=256, num_heads=8, num_kv_heads=2, intermediate_size=1024, vocab_size=4096,
               num_layers=2, qkv_bias=True)
    rank, uid, joiner = int(os.environ["RANK"]), bytes.fromhex(os.environ["UID"]), os.environ.get("JOINER") == "1"
    g = torch.Generator().manual_seed(5)
    logical = {n: (torch.randn(s, generator=g) * 0.02).to(torch.bfloat16)
               for n, s in layouts.logical_shapes(**cfg).items()}
    def mutate(v):
        for i, t in enumerate(logical.values()):
            t.view(torch.int16).view(-1)[(v + i) % 83::83] += 1
    def exact(tensors, layout):
        for n, t in tensors:
            for pc in layout.get(n, []) if layout else []:
                k = pc.stop - pc.start
                if not torch.equal(t.narrow(pc.dim, pc.offset, k).view(torch.int16),
                                   logical[pc.logical].narrow(pc.dim, pc.start, k).view(torch.int16)):
                    return False
            if not (layout and n in layout) and not torch.equal(t.view(torch.int16), logical[n].view(torch.int16)):
                return False
        return True
    if joiner:
        os.write(int(os.environ["READY_FD"]), b"1")  # (torch imported: the old process may die now)
        comm = sparrow.Communicator.join(uid, rank=3, lease_ms=1500)
    else:
        comm = sparrow.Communicator(4, uid, rank, elastic=True, lease_ms=1500)
""" + ENGINE_RANKS + """
    if joiner:
        versions, ok = [], True
        for k in range(3):
            if k:
                mutate(versions[-1] + 1)
            sync.step()
            versions.append(sync.version)
            if k == 0:
                for v in range(2, versions[0] + 1):
                    mutate(v)
            ok = ok and exact(tensors, layout)
        print(f"joiner versions {versions} exact {ok} members {comm.members()}", flush=True)
        sys.exit(0)
    sync.step()
    if rank == 3:
        ready, w = os.pipe()
        subprocess.Popen([sys.executable, "-c", os.environ["SCRIPT"]], pass_fds=(w,),
                         env=dict(os.environ, JOINER="1", READY_FD=str(w)))
        os.read(ready, 1)
        print("rank 3 dies after version 1", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    ok, admitted = exact(tensors, layout), None
    while sync.version < 400:  # (the replacement joins within a lease or two: a few dozen steps here)
        mutate(sync.version + 1)
        sync.step()
        ok = ok and exact(tensors, layout)
        if admitted is None and 3 in comm.members():
            admitted = sync.version
        if admitted is not None and sync.version == admitted + 2:
            break
    print(f"rank {rank} admitted at {admitted} last {sync.version} exact {ok}", flush=True)
"""


def test_a_restarted_worker_rejoins_the_model_and_gets_every_version_bit_exact():
    uid = sparrow.get_unique_id()
    script = f"import sys; sys.path.insert(0, {PKG!r})\n" + textwrap.dedent(REJOIN)
    envs = rank_envs(4, UID=uid.hex(), SCRIPT=script, SPARROW_TIMEOUT_S="30")
    outs = run_ranks_as_scripts(REJOIN, envs, timeout=180)
    assert "rank 3 dies" in outs[3], outs[3]
    line = outs[0].split("rank 0 admitted at ")[1].split()
    admitted, last = int(line[0]), int(line[2])
    for r in (0, 1, 2):
        assert f"rank {r} admitted at {admitted} last {last} exact True" in outs[r], outs[r]
    assert f"joiner versions [{admitted}, {admitted + 1}, {last}] exact True members [0, 1, 2, 3]" in outs[3], outs[3]


# Two sources (FSDP halves) on an elastic communicator, as processes. VICTIM=worker: rank 4 (whole
# tensors) stages the first version and is killed once part of it arrived; both sources drop it, the
# TP=2 engine (ranks 2-3) gets every version bit-exact, and every survivor counts it out.
# VICTIM=source: source 1 is killed instead of sending version 2; the workers' step fails naming it
# and their tensors hold version 1 bit for bit, as does the whole worker's.
ELASTIC_SOURCES = """
    import os, signal, sys, time, torch, sparrow
    from sparrow import layouts
    cfg = dict(hidden_size=256, num_heads=8, num_kv_heads=2, intermediate_size=1024, vocab_size=4096,
               num_layers=2, qkv_bias=True)
    rank, victim = int(os.environ["RANK"]), os.environ["VICTIM"]
    comm = sparrow.Communicator.from_env(timeout=60, elastic=True, lease_ms=1500)
    g = torch.Generator().manual_seed(11)
    logical = {n: (torch.randn(s, generator=g) * 0.02).to(torch.bfloat16)
               for n, s in layouts.logical_shapes(**cfg).items()}
    def mutate(step):
        for i, t in enumerate(logical.values()):
            t.view(torch.int16).view(-1)[(step + i) % 89::89] += 1
    if rank < 2:
        tensors, layout = [], {}
        for n, t in logical.items():
            lo, hi = rank * t.shape[0] // 2, (rank + 1) * t.shape[0] // 2
            tensors.append((f"{n}#{rank}", t[lo:hi]))  # views: the sources' rows follow `logical`
            layout[f"{n}#{rank}"] = [sparrow.Piece(n, 0, lo, hi)]
    elif rank in (2, 3):
        shapes, layout = layouts.decoder(**cfg, tp_rank=rank - 2, tp_size=2)
        tensors = [(n, torch.zeros(s, dtype=torch.bfloat16)) for n, s in shapes.items()]
    else:
        tensors, layout = [(n, torch.zeros_like(t)) for n, t in logical.items()], None
    sync = sparrow.WeightSync(comm, tensors, root=0, layout=layout, sources=[0, 1])
    def exact(ref):
        ok = True
        for name, t in tensors if rank >= 2 else []:
            for pc in (layout or {}).get(name, [sparrow.Piece(name, 0, 0, t.shape[0])]):
                want = ref[pc.logical].narrow(pc.dim, pc.start, pc.stop - pc.start)
                ok &= torch.equal(t.narrow(pc.dim, pc.offset, pc.stop - pc.start).view(torch.int16),
                                  want.view(torch.int16))
        return ok
    for step in range(1, 4):
        last = {n: t.clone() for n, t in logical.items()}
        if step > 1:
            mutate(step)  # the trainer's new version (every rank's copy: the reference)
        if victim == "source" and rank == 1 and step == 2:
            print("rank 1 dies instead of sending its rows", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        if victim == "worker" and rank == 4:
            sync.stage()
            while not comm.stats()["stage_bytes_received"]:
                pass
            print("rank 4 dies, ready:", sync.ready(), flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            info = sync.step()
            print(f"rank {rank} step {step} version {info['version']} exact {exact(logical)} "
                  f"members {comm.members()}", flush=True)
        except sparrow.Error as e:
            print(f"rank {rank} step {step} raised {type(e).__name__}: {e}; holds the last version: {exact(last)}",
                  flush=True)
            break
    comm.destroy()
"""


@pytest.mark.parametrize("victim", ["worker", "source"])
def test_two_sources_on_an_elastic_communicator_lose_a_worker_or_a_source_without_a_mix(victim):
    outs = run_ranks_as_scripts(ELASTIC_SOURCES, rank_envs(5, VICTIM=victim, SPARROW_TIMEOUT_S="30"), timeout=240)
    if victim == "worker":
        assert "rank 4 dies, ready: False" in outs[4], outs[4]
        for r in (0, 1, 2, 3):
            for step in (2, 3):
                assert f"rank {r} step {step} version {step} exact True members [0, 1, 2, 3]" in outs[r], outs[r]
        for r in (2, 3):
            assert f"rank {r} step 1 version 1 exact True" in outs[r], outs[r]
    else:
        assert "rank 1 dies" in outs[1], outs[1]
        for r in (2, 3, 4):
            assert f"rank {r} step 1 version 1 exact True" in outs[r], outs[r]
            assert f"rank {r} step 2 raised" in outs[r] and "holds the last version: True" in outs[r], outs[r]
            assert "rank 1" in outs[r].split("raised", 1)[1], outs[r]  # the dead source is named
        assert "rank 0 step 2 raised" in outs[0] and "rank 1" in outs[0].split("raised", 1)[1], outs[0]
