"""A Llama-style decoder in plain torch, built from an autoplace `ModelSpec`.

The module tree (and so every parameter FQN) is fixed, so a pipeline stage, a TP shard or an FSDP unit
of it can be compared parameter-by-parameter with a single-process copy:

    tok_embeddings            nn.Embedding(V, h)
    pos_embeddings            nn.Embedding(max_seq_len, h)           (position="learned" only)
    layers.{i}                Block
        attention_norm        RMSNorm / LayerNorm (h)
        attention.wq|wk|wv|wo nn.Linear                              (GQA: wk, wv have a_kv·d_head rows)
        ffn_norm              RMSNorm / LayerNorm (h)
        feed_forward.w1|w3|w2 nn.Linear (SwiGLU gate | up | down); GeLU MLP: w1, w2 only
    norm                      final norm
    output                    nn.Linear(h, V)                        (absent when tied: uses the embedding)

The saved-for-backward set is chosen to equal the per-layer activation formula of
`autoplace.cost.memory.activation_bytes_per_layer` (Korthikanti et al. 2022, generalised):

* RMSNorm is an autograd.Function that saves only its input x (and the per-token fp32 rstd, 4 B/token,
  which the formula does not count);
* RoPE is an autograd.Function that saves nothing (the backward is the inverse rotation);
* SwiGLU is an autograd.Function that saves only gate and up (silu is recomputed in backward), so the
  MLP saves gate, up and the down-projection input: 3·f per token;
* attention is `F.scaled_dot_product_attention(is_causal=True, enable_gqa=...)`: on CPU the flash
  kernel saves q, k, v, the output and the fp32 log-sum-exp (4 B per head per token); K and V are
  not expanded to the query heads.

Sequence parallelism (Megatron-style, `sp_group` set by the parallelizer): the inputs of the QKV and
first MLP projection are all-gathered inside `_SPGatherLinear`, which saves only the local sequence
shard and re-gathers it in backward for the weight gradients (2 AG + 2 RS forward, 2 RS + 4 AG
backward per layer, the "10 units" of autoplace.cost.comm.tp_units_per_layer). The alternative
(torchtitan-style PrepareModuleInput redistribution, which saves the gathered tensor) is
`sp_impl="dtensor"`.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn as nn
import torch.nn.functional as F

from autoplace.profile import measure
from autoplace.profile.swiglu import swiglu as _swiglu_op


# ---- autograd functions with a controlled saved set --------------------------------------------
class _RMSNormFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps):
        rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, rstd, weight)
        return x * rstd * weight

    @staticmethod
    def backward(ctx, go):
        x, rstd, weight = ctx.saved_tensors
        xhat = x * rstd
        gw = None
        if ctx.needs_input_grad[1]:
            gw = (go * xhat).sum(dim=tuple(range(go.dim() - 1)))
        gxhat = go * weight
        gx = rstd * (gxhat - xhat * (gxhat * xhat).mean(-1, keepdim=True))
        return gx, gw, None


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return _RMSNormFn.apply(x, self.weight, self.eps)


swiglu = _swiglu_op    # (autoplace.profile.swiglu: shared with the MoE experts)


class _RoPEFn(torch.autograd.Function):
    """Rotary embedding on x [b, s, heads, d] with cos/sin [s, d/2]; saves no tensor."""

    @staticmethod
    def forward(ctx, x, cos, sin):
        ctx.cos, ctx.sin = cos, sin      # constants (buffers), not saved-for-backward activations
        return _rotate(x, cos, sin)

    @staticmethod
    def backward(ctx, go):
        return _rotate(go, ctx.cos, -ctx.sin), None, None


def _rotate(x, cos, sin):
    d2 = x.shape[-1] // 2
    x1, x2 = x[..., :d2], x[..., d2:]
    c = cos[None, :, None, :]
    s = sin[None, :, None, :]
    return torch.cat((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1)


def rope_tables(seq_len: int, d_head: int, base: float = 10000.0, offset: int = 0):
    inv = 1.0 / (base ** (torch.arange(0, d_head, 2, dtype=torch.float64) / d_head))
    pos = torch.arange(offset, offset + seq_len, dtype=torch.float64)
    ang = torch.outer(pos, inv)
    return torch.cos(ang).float(), torch.sin(ang).float()


class _NoteSaved(torch.autograd.Function):
    """Identity that saves its input for backward: makes a tensor that something else keeps alive
    for backward (checkpoint inputs) visible to saved-tensor hooks, without any extra memory."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.view_as(x)

    @staticmethod
    def backward(ctx, go):
        return go


def note_saved(x):
    if torch.is_grad_enabled() and isinstance(x, torch.Tensor) and x.requires_grad:
        return _NoteSaved.apply(x)
    return x


# ---- Megatron-style sequence-parallel column linear -------------------------------------------
class _SPGatherLinear(torch.autograd.Function):
    """y_i = AG_seq(x) @ W_iᵀ for several column-parallel weights; saves the local shard of x only.

    Forward: one all-gather of x over the sequence dim (dim 1). Backward: one all-gather of x again
    (for the weight gradients) and one reduce-scatter of the input gradient — Megatron's
    `LinearWithGradAccumulationAndAsyncCommunication` with sequence_parallel=True.
    """

    @staticmethod
    def forward(ctx, x, group, *weights):
        ctx.group = group
        ctx.n_w = len(weights)
        ctx.save_for_backward(x, *weights)
        xf = _all_gather_seq(x, group)
        return tuple(F.linear(xf, w) for w in weights)

    @staticmethod
    def backward(ctx, *gos):
        x, *weights = ctx.saved_tensors
        xf = _all_gather_seq(x, ctx.group)
        gxf = None
        gws = []
        for go, w in zip(gos, weights):
            g = go @ w
            gxf = g if gxf is None else gxf + g
            gws.append(go.reshape(-1, go.shape[-1]).t() @ xf.reshape(-1, xf.shape[-1]))
        gx = _reduce_scatter_seq(gxf, ctx.group)
        return (gx, None, *gws)


def _all_gather_seq(x, group):
    import torch.distributed as dist
    n = dist.get_world_size(group)
    xt = x.transpose(0, 1).contiguous()                     # [s/t, b, h] → gather on dim 0
    out = torch.empty((xt.shape[0] * n,) + tuple(xt.shape[1:]), dtype=x.dtype, device=x.device)
    dist.all_gather_into_tensor(out, xt, group=group)
    return out.transpose(0, 1)


def _reduce_scatter_seq(x, group):
    import torch.distributed as dist
    n = dist.get_world_size(group)
    xt = x.transpose(0, 1).contiguous()
    out = torch.empty((xt.shape[0] // n,) + tuple(xt.shape[1:]), dtype=x.dtype, device=x.device)
    dist.reduce_scatter_tensor(out, xt, group=group)
    return out.transpose(0, 1).contiguous()


def _local(w):
    """A DTensor parameter's local shard (differentiable), or the tensor itself."""
    return w.to_local() if hasattr(w, "to_local") else w


# ---- modules ------------------------------------------------------------------------------------
def _norm(spec, dim):
    if spec.norm == "layernorm":
        return nn.LayerNorm(dim, eps=1e-5)
    return RMSNorm(dim)


class Attention(nn.Module):
    def __init__(self, spec):
        super().__init__()
        h, d = spec.hidden, spec.d_head
        self.d_head = d
        self.wq = nn.Linear(h, spec.heads * d, bias=spec.attn_bias)
        self.wk = nn.Linear(h, spec.a_kv * d, bias=spec.attn_bias)
        self.wv = nn.Linear(h, spec.a_kv * d, bias=spec.attn_bias)
        self.wo = nn.Linear(spec.heads * d, h, bias=spec.attn_bias)
        self.rope = spec.position == "rope"
        self.sp_group = None           # set by the parallelizer for Megatron-style SP
        self.recompute_core = False    # selective recompute: checkpoint the attention core

    def _qkv(self, x):
        if self.sp_group is not None:
            return _SPGatherLinear.apply(x, self.sp_group, _local(self.wq.weight),
                                         _local(self.wk.weight), _local(self.wv.weight))
        return self.wq(x), self.wk(x), self.wv(x)

    def forward(self, x, cos, sin):
        q, k, v = self._qkv(x)
        b, s = q.shape[0], q.shape[1]
        d = self.d_head
        q = q.view(b, s, -1, d)
        k = k.view(b, s, -1, d)
        v = v.view(b, s, -1, d)
        if self.rope:
            q = _RoPEFn.apply(q, cos, sin)
            k = _RoPEFn.apply(k, cos, sin)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if self.recompute_core and torch.is_grad_enabled():
            q, k, v = note_saved(q), note_saved(k), note_saved(v)
            o = _checkpoint(_core_attention, q, k, v)
        else:
            o = _core_attention(q, k, v)
        o = o.transpose(1, 2).reshape(b, s, -1)
        return self.wo(o)


def _checkpoint(fn, *args, context_fn=None):
    """Non-reentrant activation checkpoint that recomputes the whole region in backward.

    torch's default early stop ends the recomputation once the last saved tensor is rebuilt (it
    skips the region's final ops, e.g. the TP all-reduce after the MLP's down projection); the cost
    model (and Megatron's full recompute) repeats the whole forward, so early stop is disabled.
    context_fn: torch's selective-checkpoint contexts (`op_sac_context`), None for full recompute.
    """
    from torch.utils.checkpoint import checkpoint, set_checkpoint_early_stop
    kw = {"context_fn": context_fn} if context_fn is not None else {}
    with set_checkpoint_early_stop(False):
        return checkpoint(fn, *args, use_reentrant=False, **kw)


# ---- op-level selective activation checkpointing (torchtitan's "op" SAC) -----------------------
def _sac_save_ops():
    """Ops whose outputs op-level SAC keeps: matmuls (every second one, see `op_sac_context`), the
    SDPA kernels of every backend — on CPU `_scaled_dot_product_flash_attention_for_cpu`, which
    torchtitan's list lacks because it targets CUDA — the functional reduce-scatter (SP) and max
    (float8 amax). The list of torchtitan/models/llama3/infra/parallelize.py, plus the CPU kernel."""
    aten = torch.ops.aten
    names = [(aten, "mm"), (aten, "_scaled_dot_product_flash_attention"),
             (aten, "_scaled_dot_product_efficient_attention"),
             (aten, "_scaled_dot_product_cudnn_attention"),
             (aten, "_scaled_dot_product_attention_math"),
             (aten, "_scaled_dot_product_fused_attention_overrideable"),
             (aten, "_scaled_dot_product_flash_attention_for_cpu"),
             (torch.ops._c10d_functional, "reduce_scatter_tensor"), (aten, "max")]
    out = set()
    for ns, name in names:
        packet = getattr(ns, name, None)
        if packet is not None and hasattr(packet, "default"):
            out.add(packet.default)
    return frozenset(out)


def op_sac_context():
    """A fresh pair of selective-checkpoint contexts for one checkpointed layer (torch calls this
    `context_fn` once per region, so the matmul count restarts at every layer).

    The policy is torchtitan's op-level SAC (torchtitan/distributed/activation_checkpoint.py,
    `_apply_op_sac`): keep the outputs of the ops in `_sac_save_ops()`, except that matmuls
    alternate — the 1st, 3rd, 5th, … `aten.mm` of the layer's forward are kept and the 2nd, 4th, …
    recomputed; every other op (norms, RoPE, SiLU, products, residual adds) is recomputed. The
    decoder's matmul order is wq, wk, wv, wo, w1, w3, w2 (separate projections, the same order as
    torchtitan's Llama), so the kept ones are wq, wv, w1 and w2 and the recomputed ones wk, wo, w3.
    Forward and recomputation count separately (older torch also asks the policy while
    recomputing). Kept outputs are reported to the active saved-tensor counter
    (`measure.note_cached`): SAC holds them in its own cache, out of reach of saved-tensor hooks.
    """
    from collections import defaultdict

    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts
    save = _sac_save_ops()
    mm = torch.ops.aten.mm.default
    count = defaultdict(int)

    def policy(ctx, func, *args, **kwargs):
        phase = "recompute" if ctx.is_recompute else "forward"
        if func == mm:
            count[phase] += 1
        keep = func in save and not (func == mm and count[phase] % 2 == 0)
        if keep and not ctx.is_recompute:
            measure.note_cached(getattr(ctx, "op_output", None))
        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


def _core_attention(q, k, v):
    gqa = q.shape[1] != k.shape[1]
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)


class FeedForward(nn.Module):
    def __init__(self, spec, ffn_hidden: int | None = None):
        super().__init__()
        h, f = spec.hidden, ffn_hidden or spec.ffn_hidden
        self.gated = spec.gated_mlp
        self.w1 = nn.Linear(h, f, bias=spec.mlp_bias)
        if self.gated:
            self.w3 = nn.Linear(h, f, bias=spec.mlp_bias)
        self.w2 = nn.Linear(f, h, bias=spec.mlp_bias)
        self.sp_group = None

    def forward(self, x):
        if self.sp_group is not None:
            ws = [_local(self.w1.weight)] + ([_local(self.w3.weight)] if self.gated else [])
            outs = _SPGatherLinear.apply(x, self.sp_group, *ws)
        else:
            outs = (self.w1(x), self.w3(x)) if self.gated else (self.w1(x),)
        if self.gated:
            z = swiglu(outs[0], outs[1])
        else:
            z = F.gelu(outs[0])
        return self.w2(z)


class Block(nn.Module):
    def __init__(self, spec, moe: bool = False):
        super().__init__()
        self.attention_norm = _norm(spec, spec.hidden)
        self.attention = Attention(spec)
        self.ffn_norm = _norm(spec, spec.hidden)
        if moe:
            from autoplace.profile.moe import MoE
            self.feed_forward = MoE(spec, lambda: FeedForward(spec, spec.f_expert))
        else:
            self.feed_forward = FeedForward(spec)

    def forward(self, x, cos, sin):
        h = x + self.attention(self.attention_norm(x), cos, sin)
        return h + self.feed_forward(self.ffn_norm(h))


class Decoder(nn.Module):
    """The whole model, or one pipeline chunk of it (`layer_ids`, `first`, `last`)."""

    def __init__(self, spec, seq_len: int, layer_ids=None, first: bool = True, last: bool = True,
                 untie_output: bool = False):
        super().__init__()
        self.spec = spec
        self.seq_len = seq_len
        layer_ids = list(range(spec.layers)) if layer_ids is None else list(layer_ids)
        self.first, self.last = first, last
        self.tok_embeddings = nn.Embedding(spec.vocab, spec.hidden) if first else None
        self.pos_embeddings = (nn.Embedding(spec.max_seq_len, spec.hidden)
                               if first and spec.position == "learned" else None)
        from autoplace.profile.moe import is_moe_layer
        self.layers = nn.ModuleDict({str(i): Block(spec, is_moe_layer(spec, i)) for i in layer_ids})
        self.norm = _norm(spec, spec.hidden) if last else None
        # tied: the output reuses the embedding when both live here; on a separate last stage it is
        # an untied copy whose gradient the runner all-reduces with the first stage's (tied reduce)
        need_out = last and (not spec.tied_embeddings or not first or untie_output)
        self.output = nn.Linear(spec.hidden, spec.vocab, bias=False) if need_out else None
        self.checkpoint_layers: set = set()  # layer ids under (full or op-SAC) activation checkpointing
        self.checkpoint_context = None       # None: full recompute; op_sac_context: op-level SAC
        self.output_sp = None                # (tp group, tp mesh): Megatron-SP output projection
        cos, sin = rope_tables(seq_len, spec.d_head)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    def rope_for(self, s):
        return self.rope_cos[:s], self.rope_sin[:s]

    def forward(self, x):
        if self.tok_embeddings is not None:
            ids = x
            x = self.tok_embeddings(ids)
            if self.pos_embeddings is not None:
                pos = torch.arange(ids.shape[1], device=ids.device)
                x = x + self.pos_embeddings(pos)[None]
        s_full = self.seq_len
        cos, sin = self.rope_for(s_full)
        for lid, layer in self.layers.items():
            if int(lid) in self.checkpoint_layers and torch.is_grad_enabled():
                x = note_saved(x)
                x = _checkpoint(layer, x, cos, sin, context_fn=self.checkpoint_context)
            else:
                x = layer(x, cos, sin)
        if self.last:
            with measure.region("head"):
                return self._head(x)
        return x

    def _head(self, x):
        x = self.norm(x)
        if self.output_sp is not None:
            from torch.distributed.tensor import DTensor, Shard
            group, mesh = self.output_sp
            (y,) = _SPGatherLinear.apply(x, group, _local(self.output.weight))
            return DTensor.from_local(y, mesh, [Shard(y.dim() - 1)], run_check=False)
        if self.output is not None:
            return self.output(x)
        return F.linear(x, self.tok_embeddings.weight)


def init_weights(model: nn.Module, seed: int, std: float = 0.02) -> None:
    """Deterministic init by FQN, so every stage/shard of the model starts from the same values as a
    single-process copy: each parameter draws from its own generator seeded by (seed, FQN)."""
    import zlib
    with torch.no_grad():
        for name, p in model.named_parameters():
            key = _tied_key(model, name)
            g = torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(key.encode()))
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            elif name.endswith(".bias"):
                p.zero_()
            else:
                p.copy_(torch.randn(p.shape, generator=g) * std)


def _tied_key(model, name):
    spec = getattr(model, "spec", None)
    if spec is not None and spec.tied_embeddings and name == "output.weight":
        return "tok_embeddings.weight"     # the untied copy on the last stage starts equal
    return name


def cross_entropy(logits, labels):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


def make_batch(spec, seq_len: int, batch: int, seed: int, step: int):
    """Token ids [batch, seq_len] and next-token labels for one optimizer step (deterministic)."""
    g = torch.Generator().manual_seed(seed * 7919 + step)
    toks = torch.randint(0, spec.vocab, (batch, seq_len + 1), generator=g)
    return toks[:, :-1].contiguous(), toks[:, 1:].contiguous()


def count_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def reference_run(spec, seq_len: int, global_batch: int, steps: int, seed: int, lr: float,
                  adam_eps: float = 1e-8, moe_capacity_factor: float = 0.0,
                  capacity_block: int | None = None, precision: str = "fp32"):
    """Single-process training of the full model on the full global batch: losses and parameters.
    MoE in capacity mode (cf > 0): the capacity applies per `capacity_block` tokens (a rank's
    micro-batch, mbs·seq_len), as it does in the distributed run. precision "bf16": the forward under
    bf16 autocast, as the runner's (`Built._precision_ctx`)."""
    model = Decoder(spec, seq_len)
    init_weights(model, seed)
    from autoplace.profile.moe import MoE
    for mod in model.modules():
        if isinstance(mod, MoE):
            mod.capacity_factor, mod.capacity_block = moe_capacity_factor, capacity_block
    opt = torch.optim.Adam(model.parameters(), lr=lr, eps=adam_eps, foreach=False)
    losses = []
    for step in range(steps):
        ids, labels = make_batch(spec, seq_len, global_batch, seed, step)
        with (torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16"
              else contextlib.nullcontext()):
            loss = cross_entropy(model(ids), labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))
    params = {n: p.detach().clone() for n, p in model.named_parameters()}
    return losses, params


__all__ = ["Decoder", "RMSNorm", "init_weights", "make_batch", "cross_entropy", "reference_run",
           "count_params", "swiglu", "note_saved", "rope_tables", "op_sac_context"]
