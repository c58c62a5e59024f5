# SPDX-License-Identifier: Apache-2.0
"""Layouts of inference engines, as pieces of the trainer's (Hugging Face) tensors.

    shapes, layout = sparrow.layouts.decoder(hidden_size=..., num_heads=..., num_kv_heads=...,
                                              intermediate_size=..., vocab_size=..., num_layers=...,
                                              tp_rank=r, tp_size=tp)
    # shapes: {engine tensor name: shape}; layout: {engine tensor name: [sparrow.Piece, ...]}
    sync = sparrow.WeightSync(comm, engine.named_parameters(), root=0, layout=layout)

`decoder` describes a Llama/Qwen-style decoder as vLLM holds it on one tensor-parallel rank:
  - `self_attn.qkv_proj.weight` (and `.bias` with qkv_bias): this rank's q heads, then its k and v
    heads, fused along dim 0; with more ranks than kv heads each rank holds one kv head, replicated
    across tp_size / num_kv_heads ranks;
  - `self_attn.o_proj.weight`: row-parallel, this rank's slice of the input dimension (dim 1);
  - `mlp.gate_up_proj.weight`: this rank's rows of gate, then of up (column-parallel, fused);
  - `mlp.down_proj.weight`: row-parallel (dim 1);
  - `embed_tokens.weight` and `lm_head.weight`: vocabulary-parallel, the vocabulary padded to a
    multiple of `pad_vocab_to` (64, vLLM's default) and split in equal row blocks; padding rows are
    covered by no piece and never written;
  - the norms: whole on every rank (they need no layout entry: same name, same shape).
The trainer's names are Hugging Face's (`model.layers.{i}.self_attn.q_proj.weight`, ...).

`decoder(..., source=True)` is the same rank of a tensor-parallel trainer (Megatron-style) as one of
several sources (`WeightSync(..., sources=[...])`): the sources must hold every element once, so what
several ranks hold (the norms; kv heads replicated when tp_size exceeds num_kv_heads) is sent by the
lowest of them only. Its layout leaves those pieces out (their rows stay in the tensor, unsent) and
its shapes leave out the tensors left with nothing to send (the norms on every rank but 0).

    shapes, layout = sparrow.layouts.decoder(**cfg, tp_rank=r, tp_size=tp, source=True)
    sync = sparrow.WeightSync(comm, [(n, my_shard[n]) for n in shapes], root=0, layout=layout,
                              sources=list(range(tp)))
"""

from __future__ import annotations

from typing import Dict, List, Tuple

from . import InvalidArgument, Piece

Shapes = Dict[str, Tuple[int, ...]]
Layout = Dict[str, List[Piece]]


def _positive(**kw: int) -> None:
    for k, v in kw.items():
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise InvalidArgument(f"layouts.decoder: {k} must be a positive int, got {v!r}", 4)


def _split(what: str, n: int, tp: int) -> int:
    if n % tp:
        raise InvalidArgument(f"layouts.decoder: {what} ({n}) is not divisible by tp_size ({tp})", 4)
    return n // tp


def _kv_heads(num_kv_heads: int, tp_rank: int, tp_size: int) -> Tuple[int, int]:
    """(first kv head, how many) this rank holds: a share when there are enough heads, else one
    head replicated across tp_size / num_kv_heads ranks."""
    if tp_size <= num_kv_heads:
        n = _split("num_kv_heads", num_kv_heads, tp_size)
        return tp_rank * n, n
    if tp_size % num_kv_heads:
        raise InvalidArgument(f"layouts.decoder: tp_size ({tp_size}) is neither a divisor nor a multiple of "
                              f"num_kv_heads ({num_kv_heads})", 4)
    return tp_rank // (tp_size // num_kv_heads), 1


def logical_shapes(hidden_size: int, num_heads: int, num_kv_heads: int, intermediate_size: int, vocab_size: int,
                   num_layers: int, head_dim: int = 0, qkv_bias: bool = False, prefix: str = "model.") -> Shapes:
    """The trainer's tensors (Hugging Face names) and their shapes."""
    _positive(hidden_size=hidden_size, num_heads=num_heads, num_kv_heads=num_kv_heads,
              intermediate_size=intermediate_size, vocab_size=vocab_size, num_layers=num_layers)
    hd = head_dim or hidden_size // num_heads
    h, q, kv, i = hidden_size, num_heads * hd, num_kv_heads * hd, intermediate_size
    out: Shapes = {f"{prefix}embed_tokens.weight": (vocab_size, h)}
    for n in range(num_layers):
        p = f"{prefix}layers.{n}."
        out[p + "self_attn.q_proj.weight"] = (q, h)
        out[p + "self_attn.k_proj.weight"] = (kv, h)
        out[p + "self_attn.v_proj.weight"] = (kv, h)
        if qkv_bias:
            out[p + "self_attn.q_proj.bias"] = (q,)
            out[p + "self_attn.k_proj.bias"] = (kv,)
            out[p + "self_attn.v_proj.bias"] = (kv,)
        out[p + "self_attn.o_proj.weight"] = (h, q)
        out[p + "mlp.gate_proj.weight"] = (i, h)
        out[p + "mlp.up_proj.weight"] = (i, h)
        out[p + "mlp.down_proj.weight"] = (h, i)
        out[p + "input_layernorm.weight"] = (h,)
        out[p + "post_attention_layernorm.weight"] = (h,)
    out[f"{prefix}norm.weight"] = (h,)
    out["lm_head.weight"] = (vocab_size, h)
    return out


def _vocab_piece(logical: str, vocab_size: int, rows: int, tp_rank: int) -> List[Piece]:
    start = tp_rank * rows
    stop = min(start + rows, vocab_size)
    return [Piece(logical, 0, start, stop, 0)] if start < stop else []


def _qkv(p: str, suffix: str, q_rows: int, kv_first: int, kv_rows: int, tp_rank: int) -> List[Piece]:
    a = p + "self_attn."
    return [Piece(a + "q_proj." + suffix, 0, tp_rank * q_rows, (tp_rank + 1) * q_rows, 0),
            Piece(a + "k_proj." + suffix, 0, kv_first, kv_first + kv_rows, q_rows),
            Piece(a + "v_proj." + suffix, 0, kv_first, kv_first + kv_rows, q_rows + kv_rows)]


def decoder(hidden_size: int, num_heads: int, num_kv_heads: int, intermediate_size: int, vocab_size: int,
            num_layers: int, tp_rank: int = 0, tp_size: int = 1, head_dim: int = 0, qkv_bias: bool = False,
            pad_vocab_to: int = 64, prefix: str = "model.", source: bool = False) -> Tuple[Shapes, Layout]:
    """One tensor-parallel rank's engine tensors: ({name: shape}, {name: [Piece, ...]}). Tensors with
    no layout entry (the norms) are whole logical tensors of the same name. `source=True`: the
    rank as a source of a tensor-parallel trainer (what lower ranks also hold left out; module doc)."""
    if source:
        return _as_source(dict(hidden_size=hidden_size, num_heads=num_heads, num_kv_heads=num_kv_heads,
                               intermediate_size=intermediate_size, vocab_size=vocab_size, num_layers=num_layers,
                               tp_size=tp_size, head_dim=head_dim, qkv_bias=qkv_bias, pad_vocab_to=pad_vocab_to,
                               prefix=prefix), tp_rank)
    _positive(tp_size=tp_size, pad_vocab_to=pad_vocab_to, num_heads=num_heads, num_kv_heads=num_kv_heads)
    if not isinstance(tp_rank, int) or not 0 <= tp_rank < tp_size:
        raise InvalidArgument(f"layouts.decoder: tp_rank must be in [0, {tp_size}), got {tp_rank!r}", 4)
    if num_heads % num_kv_heads:
        raise InvalidArgument(f"layouts.decoder: num_heads ({num_heads}) is not a multiple of num_kv_heads "
                              f"({num_kv_heads})", 4)
    logical = logical_shapes(hidden_size, num_heads, num_kv_heads, intermediate_size, vocab_size, num_layers,
                             head_dim, qkv_bias, prefix)
    hd = head_dim or hidden_size // num_heads
    h = hidden_size
    q_rows = _split("num_heads", num_heads, tp_size) * hd
    kv_head, kv_n = _kv_heads(num_kv_heads, tp_rank, tp_size)
    kv_first, kv_rows = kv_head * hd, kv_n * hd
    i_rows = _split("intermediate_size", intermediate_size, tp_size)
    padded = -(-vocab_size // pad_vocab_to) * pad_vocab_to
    v_rows = _split("the padded vocabulary", padded, tp_size)
    shapes: Shapes = {}
    layout: Layout = {}

    def put(name: str, shape: Tuple[int, ...], pieces: List[Piece]) -> None:
        shapes[name] = shape
        layout[name] = pieces

    put(f"{prefix}embed_tokens.weight", (v_rows, h), _vocab_piece(f"{prefix}embed_tokens.weight", vocab_size, v_rows,
                                                                   tp_rank))
    for n in range(num_layers):
        p = f"{prefix}layers.{n}."
        put(p + "self_attn.qkv_proj.weight", (q_rows + 2 * kv_rows, h),
            _qkv(p, "weight", q_rows, kv_first, kv_rows, tp_rank))
        if qkv_bias:
            put(p + "self_attn.qkv_proj.bias", (q_rows + 2 * kv_rows,),
                _qkv(p, "bias", q_rows, kv_first, kv_rows, tp_rank))
        put(p + "self_attn.o_proj.weight", (h, q_rows),
            [Piece(p + "self_attn.o_proj.weight", 1, tp_rank * q_rows, (tp_rank + 1) * q_rows, 0)])
        put(p + "mlp.gate_up_proj.weight", (2 * i_rows, h),
            [Piece(p + "mlp.gate_proj.weight", 0, tp_rank * i_rows, (tp_rank + 1) * i_rows, 0),
             Piece(p + "mlp.up_proj.weight", 0, tp_rank * i_rows, (tp_rank + 1) * i_rows, i_rows)])
        put(p + "mlp.down_proj.weight", (h, i_rows),
            [Piece(p + "mlp.down_proj.weight", 1, tp_rank * i_rows, (tp_rank + 1) * i_rows, 0)])
        for norm in ("input_layernorm.weight", "post_attention_layernorm.weight"):
            shapes[p + norm] = logical[p + norm]
    shapes[f"{prefix}norm.weight"] = logical[f"{prefix}norm.weight"]
    put("lm_head.weight", (v_rows, h), _vocab_piece("lm_head.weight", vocab_size, v_rows, tp_rank))
    return shapes, layout


def _as_source(cfg: dict, tp_rank: int) -> Tuple[Shapes, Layout]:
    """decoder(**cfg, tp_rank=tp_rank) without what a lower rank holds too."""
    shapes, layout = decoder(**cfg, tp_rank=tp_rank)
    claimed = set()
    for lower in range(tp_rank):
        for pieces in decoder(**cfg, tp_rank=lower)[1].values():
            claimed.update((p.logical, p.dim, p.start, p.stop) for p in pieces)
    layout = {n: [p for p in pieces if (p.logical, p.dim, p.start, p.stop) not in claimed]
              for n, pieces in layout.items()}
    keep = {n: s for n, s in shapes.items() if layout.get(n) or (n not in layout and tp_rank == 0)}
    return keep, {n: p for n, p in layout.items() if n in keep}
