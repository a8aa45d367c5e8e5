"""Per-rank, per-pipeline-stage memory, derived from the placement (placement_semantics.md §2).

Every function is numpy-broadcastable over the plan fields (a `Plan` of scalars or a `PlanBatch` of
arrays) and over the stage index `i`, so `estimate` and the vectorized search share them.

  M_stage(i) = params + grads + optimizer + activations + transient + overhead      (§2.1)

- model states: |X| × Π f(mode) with f(R)=1, f(S|SG|SG-hold at rest)=1/n, f(OFF(φ))=1−φ (§2.1–2.3);
  PP × ZeRO-2/3 holds P and G unsharded within the step (K1, T22);
- activations: Korthikanti et al. 2022 per-layer terms, generalized to GQA, SwiGLU, flash vs eager
  attention and dropout on/off, times the schedule's in-flight micro-batches per stage (§2.5, K6);
- transient: FSDP gathered units (prefetch k=2) + the unit's unsharded gradients + the previous
  unit's in-flight reduce-scatter input, reduce buckets, CP K/V gathers, the last stage's
  logits + fp32 cross-entropy buffer, one layer's recompute working set (§2.4);
- overhead: CUDA context + communicator buffers from the hardware profile (§6).
"""

from __future__ import annotations

import numpy as np

from autoplace.cost.precision import param_store_bytes, recipe_of
from autoplace.plan import micro_batches, module_flags, module_on
from autoplace.specs.model import padded_vocab


def _w(x):
    return np.asarray(x, dtype=float)


def memo(ctx, p, name, fn, i=None):
    """fn() once per plan batch, ctx, name and stage index `i`: one evaluation asks for the same
    per-stage counts many times (memory, DP traffic, optimizer, offload). A batch keeps the values
    while it lives (its columns never change); a scalar Plan computes them each time."""
    d = getattr(p, "__dict__", {}).get("_memo")     # the batch's own (a proxy that traces reads has none)
    if d is None:
        return fn()
    if i is None:
        key = (name, id(ctx))
    else:
        ia = np.asarray(i, dtype=float)
        key = (name, id(ctx), ia.shape, ia.tobytes())
    hit = d.get(key)
    if hit is not None and hit[0] is ctx:
        return hit[1]
    v = fn()
    d[key] = (ctx, v)
    return v


# ---- parameter counts per rank --------------------------------------------------------------
def vocab_padded(ctx, p):
    return padded_vocab(ctx.model.vocab, p.tp, ctx.train.vocab_divisible_by)


def layers_on_stage(ctx, p, i):
    """L_i: layers on pipeline stage i (even L/pp unless the plan gives layer_split)."""
    split = getattr(p, "layer_split", ())
    if split:
        return _w(np.asarray(split, dtype=float)[np.asarray(i).astype(int)])
    return _w(ctx.model.layers) / _w(p.pp)


def layer_params_rank(model, tp, moe_layer: bool, ep=1, etp=1):
    """Dense (non-expert) parameters of one layer held by one TP rank: split matrices and column
    biases ÷ t; norms, row-parallel biases and duplicated MLA down-projections replicated (§2.3)."""
    h, q, kv = model.hidden, model.q_width, model.kv_width
    if model.mla:
        lin = model.attn_linears()
        attn_split = sum(k * n for _, k, n, sp in lin if sp in ("col", "row"))
        attn_repl = sum(k * n for _, k, n, sp in lin if sp == "dup") + model.q_lora_rank + model.kv_lora_rank
    else:
        attn_split = h * q + 2 * h * kv + q * h + ((q + 2 * kv) if (model.attn_bias or model.qkv_bias) else 0)
        attn_repl = (h if model.attn_bias else 0)
    attn_repl += model.qk_norm_params()
    if model.attn_sinks:
        attn_split += model.heads
    if moe_layer:
        mlp_split = model.mlp_params(model.shared_expert_ffn_hidden) if model.shared_expert_ffn_hidden else 0
        mlp_repl = (h * model.num_experts + (model.num_experts if model.expert_bias else 0)
                    + (h if model.shared_expert_gate else 0))          # router, gate replicated
    else:
        f = model.ffn_hidden
        if model.gated_mlp:
            mlp_split = 3 * h * f + (2 * f if model.mlp_bias else 0)
        else:
            mlp_split = 2 * h * f + (f if model.mlp_bias else 0)
        mlp_repl = h if model.mlp_bias else 0
    repl = attn_repl + mlp_repl + 2 * model.norm_params()
    return (attn_split + mlp_split) / _w(tp) + repl


def expert_layer_params_rank(model, ep, etp):
    """Routed expert weights of one MoE layer on one rank: (E/e) experts, each ÷ etp."""
    if not model.is_moe:
        return _w(0.0)
    per = model.mlp_params(model.f_expert, bias=model.expert_bias or model.mlp_bias)
    return model.num_experts / _w(ep) * per / _w(etp)


def stage_param_counts(ctx, p, i):
    """(dense, expert) parameter elements held by one rank of pipeline stage i."""
    return memo(ctx, p, "stage_param_counts", lambda: _stage_param_counts(ctx, p, i), i)


def _stage_param_counts(ctx, p, i):
    m = ctx.model
    i = np.asarray(i)
    if m.states_only:
        return _w(m.total_params()) / (_w(p.tp) * _w(p.pp)), _w(0.0)
    Li = layers_on_stage(ctx, p, i)
    frac_moe = m.n_moe_layers / m.layers
    dense_layer = ((1 - frac_moe) * layer_params_rank(m, p.tp, False)
                   + frac_moe * layer_params_rank(m, p.tp, True)) if m.is_moe else layer_params_rank(m, p.tp, False)
    Vp = vocab_padded(ctx, p)
    first = i == 0
    last = i == _w(p.pp) - 1
    emb = Vp * m.hidden / _w(p.tp) + m.position_params()
    out = np.where(m.tied_embeddings & (_w(p.pp) == 1), 0.0, Vp * m.hidden / _w(p.tp))
    dense = Li * dense_layer + np.where(first, emb, 0.0) + np.where(last, out + m.norm_params(), 0.0)
    expert = Li * frac_moe * expert_layer_params_rank(m, p.ep, p.t_exp)
    return dense, expert


def largest_unit_rank(ctx, p):
    """Ψ_u,max per rank: the largest FSDP unit (one layer incl. its experts, or the embedding).
    Experts whose expert-data-parallel group is one rank (ep = dp·cp) are not sharded, gathered or
    reduced (NeMo AutoModel passes them as FSDP `ignored_params`; Megatron's expert DP group is 1):
    they stay out of the unit."""
    m = ctx.model
    if m.states_only:
        return _w(m.largest_unit_params())
    _, ne = shard_groups(ctx, p)
    layer = layer_params_rank(m, p.tp, m.is_moe) + np.where(ne > 1, expert_layer_params_rank(m, p.ep, p.t_exp), 0.0)
    return np.maximum(layer, vocab_padded(ctx, p) * m.hidden / _w(p.tp))


def collective_params_rank(ctx, p, i):
    """Parameter elements of stage i that one rank's DP-family collectives move: the dense ones and
    the experts unless their expert-data-parallel group is a single rank (see largest_unit_rank)."""
    dense, expert = stage_param_counts(ctx, p, i)
    _, ne = shard_groups(ctx, p)
    return dense + np.where(ne > 1, expert, 0.0)


def shard_groups(ctx, p):
    """(N_dense, N_expert): sizes of the ZeRO/FSDP sharding groups (dp_shard [× cp]; expert-DP)."""
    return memo(ctx, p, "shard_groups", lambda: _shard_groups(ctx, p))


def _shard_groups(ctx, p):
    cp_in = _w(p.cp) if _zero_over_cp(p) else 1.0
    n_dense = np.maximum(_w(p.dp) / _w(p.dp_replicate), 1.0) * cp_in
    d_exp = _w(ctx.world) / (_w(p.t_exp) * _w(p.ep) * _w(p.pp))
    n_exp = np.maximum(d_exp / _w(p.dp_replicate), 1.0)
    return n_dense, n_exp


def _zero_over_cp(p):
    z = getattr(p, "zero_over_cp", True)
    return bool(z) if np.ndim(z) == 0 else z


def k1_active(ctx, p):
    """K1: pipeline micro-batching with ZeRO-2/3 → torch pipelining + FSDP2 in-step placement, on a
    runtime whose pipeline defers FSDP2's sync to a stage's last backward (RuntimeSpec
    comm.pp_defer_grad_sync; otherwise every micro-batch reduce-scatters: plain ZeRO-2/3)."""
    on = (_w(p.pp) > 1) & (_w(p.zero) >= 2) & (_w(p.g_mode) >= 1)
    return on if ctx.train.rt.comm.pp_defer_grad_sync else on & False


# ---- model states ---------------------------------------------------------------------------
def model_state_bytes(ctx, p, i):
    """(params, grads, optimizer) bytes on one rank of stage i (§2.1–2.3, K1/T22)."""
    return _state_bytes(ctx, p, i)[:3]


def host_state_bytes(ctx, p, i):
    """Bytes one rank of stage i offloads to host memory (§3.7): the optimizer share `offload_fraction`
    (off ≥ 1), the gradients (off ≥ 2) and the parameters (off ≥ 3), each as the rank's shard — the
    device-side counterpart of `model_state_bytes`, from the same terms."""
    return _state_bytes(ctx, p, i)[3]


HOST_USABLE = 0.85
"""Share of a node's host memory its ranks' offloaded states may take: the rest is the OS, the
data-loader workers and the pinned staging buffers [estimate]."""


def host_limit(hw, world: int | None = None):
    """Host bytes per rank for offloaded states: HOST_USABLE × host memory per node / the ranks on a
    node (min(GPUs per node, world)); 0 when the profile does not state host memory: not checked."""
    ranks = min(int(hw.gpus_per_node), int(world)) if world else int(hw.gpus_per_node)
    return HOST_USABLE * float(getattr(hw, "host_memory_bytes", 0.0)) / max(ranks, 1)


def host_fits(ctx, hw, p):
    """Offloaded states of the first and last stage (the largest, as in the offload traffic) fit
    in `host_limit`; True where nothing is offloaded or the profile states no host memory."""
    off = _w(p.off)
    lim = host_limit(hw, ctx.world)
    if lim <= 0 or (np.ndim(off) == 0 and off == 0):
        return np.ones(np.shape(off), bool) if np.ndim(off) else True
    return (off == 0) | (host_need(ctx, p) <= lim)


def host_need(ctx, p):
    """Host bytes per rank the plan offloads: the larger of the first and last stage's
    `host_state_bytes` (the stages holding the embedding and the output layer)."""
    pp = _w(p.pp)
    return np.maximum(host_state_bytes(ctx, p, 0), host_state_bytes(ctx, p, pp - 1))


def _state_bytes(ctx, p, i):
    """(device params, grads, optimizer, host bytes) on one rank of stage i."""
    t = ctx.train
    _, bG, bM, bO = t.widths
    pm, gm, om, off = _w(p.p_mode), _w(p.g_mode), _w(p.o_mode), _w(p.off)
    bP = np.where(om >= 1, param_store_bytes(t), param_store_bytes(t, sharded_optimizer=False)) \
        if not ctx.model.states_only else t.b_P
    bGr, bGe = t.b_G_reduce, t.b_G_reduce_expert
    dense, expert = stage_param_counts(ctx, p, i)
    nd, ne = shard_groups(ctx, p)
    phi = _w(p.offload_fraction)
    k1 = k1_active(ctx, p)

    def one(psi, n, experts=False):
        fP = np.where(pm == 0, 1.0, 1.0 / n)
        fG = np.where(gm == 0, 1.0, 1.0 / n)
        fO = np.where(om == 0, 1.0, 1.0 / n)
        params = bP * psi * np.where(off >= 3, 0.0, fP)
        grads = bG * psi * np.where(off >= 2, 0.0, fG)
        opt = (bO + bM) * psi * fO * np.where(off >= 1, 1.0 - phi, 1.0)
        host = bP * psi * np.where(off >= 3, fP, 0.0) + bG * psi * np.where(off >= 2, fG, 0.0) \
            + (bO + bM) * psi * fO * np.where(off >= 1, phi, 0.0)
        # DeepSpeed ZeRO-3 reduces 16-bit grads straight into the fp32 partition (b_M): no 16-bit shard
        if t.regime == "deepspeed":
            grads = np.where(pm >= 1, 0.0, grads)
        # K1: P gathered for the whole step (when sharded), G accumulated unsharded at reduce width
        # (FSDP2 upcasts an accumulated unsharded gradient to the reduce dtype); experts whose
        # expert-DP group is one rank are outside FSDP (plain .grad at b_G)
        params = np.where(k1 & (pm > 0), bP * psi, params)
        grads = np.where(k1 & ((_w(n) > 1) | (not experts)), (bGe if experts else bGr) * psi, grads)
        return params, grads, opt, host

    pd, gd, od, hd = one(dense, nd)
    pe, ge, oe, he = one(expert, ne, experts=True)
    return pd + pe, gd + ge, od + oe, hd + he


# ---- activations ----------------------------------------------------------------------------
def attention_kv_width(ctx, p):
    """Elements per token of K (or V) as the attention kernel receives them on one rank: the local
    KV heads × d_head, max(a_kv/t, 1)·d_h, or the local query heads' a/t·d_h where the model code
    expands GQA's K and V first (RuntimeSpec memory.attention_kv_expanded)."""
    m = ctx.model
    kv = np.maximum(m.a_kv / _w(p.tp), 1.0) * m.d_head
    if ctx.train.rt.memory.attention_kv_expanded and not m.mla:
        return np.maximum(m.heads / _w(p.tp) * m.d_head, kv)
    return kv


def cp_kv_bytes(ctx, p):
    """K and V of one layer and micro-batch over the whole sequence, 2·b·s·w·b_A (w =
    `attention_kv_width`): what a CP rank all-gathers (or rotates through) for its attention."""
    return 2.0 * _w(p.mbs) * ctx.train.seq_len * attention_kv_width(ctx, p) * ctx.train.b_A


def activation_bytes_per_layer(ctx, p, mode=None):
    """Bytes one rank saves for backward in one transformer layer for one micro-batch.

    mode: None → the plan's recompute code; 0 none, 1 selective, 2 full (checkpoint only);
    "all" → the (none, selective, full-checkpoint) triple.
    Korthikanti Table 2 terms, generalized (T10 reproduces exactly for a GPT block, eager, dropout):
      replicated under TP without SP (÷t with SP): LN1 in, QKV in, LN2 in, FC1 in (b_A·h each),
        two residual dropout masks (1·h each, if dropout);
      ÷t: Q (q/t) and O (q/t) at b_A, K and V at b_A·kv_loc (kv_loc = max(a_kv/t, 1)·d_h),
        MLP internals: SwiGLU 3·b_A·f/t (gate, up, FC2 input), GeLU 2·b_A·f/t; an eager GLU clamp
        (runtime `glu_clamp_eager`, model `glu_limit`) 2·b_A·f_e more per routed token;
      attention core: eager a·s·(b_A + (1 + b_A)·dropout)/t (softmax, mask, dropout output; 2 + 3·dropout
        at b_A = 2) plus GQA's K, V expanded to the a/t query heads, both dropped by selective
        recompute; flash 4·a/t (fp32 log-sum-exp per head per row).
    """
    m, t = ctx.model, ctx.train
    rc = _w(p.rc) if mode is None or mode == "all" else _w(mode)
    tp, cp = _w(p.tp), _w(p.cp)
    bA = t.b_A
    s_loc = t.seq_len / cp
    sb = s_loc * _w(p.mbs)
    h = m.hidden
    t_sp = np.where(_w(p.sp) > 0, tp, 1.0)
    drop = 1.0 if t.dropout else 0.0
    kv_loc = np.maximum(m.a_kv / tp, 1.0) * m.d_head
    repl = (4 * bA * h + 2 * drop * h) / t_sp
    if t.rt.memory.tp_saves_gathered_input:
        # DTensor TP: the QKV and FC1 inputs are saved as gathered (whole sequence), the norm inputs
        # as the SP shard (RuntimeSpec memory.tp_saves_gathered_input)
        repl = (2 * bA * h + 2 * drop * h) / t_sp + 2 * bA * h
    if m.mla:
        # latents (inputs of the up-projections, whole on every rank) + per-head Q, K (d_qk), V and
        # the attention output (d_v), ÷ t
        qkvo = bA * (m.q_lora_rank + m.kv_lora_rank + m.qk_rope_head_dim) \
            + bA * m.heads / tp * (2 * m.d_qk + 2 * m.d_v)
    else:
        qkvo = (2 * bA * m.q_width / tp) + 2 * bA * kv_loc
    if t.attention == "eager":
        # per token: a·s_full scores — the softmax output at b_A, the dropout mask (1 B) and output;
        # eager kernels (Megatron's core attention, torch's SDPA math path) expand GQA's K and V to
        # the query heads for the two batched matmuls, which save the expanded copies
        core = m.heads * t.seq_len * (bA + drop * (1.0 + bA)) / tp
        if not m.mla:
            core = core + 2 * bA * (m.heads / tp * m.d_head - kv_loc)
    else:
        core = 4.0 * m.heads / tp
    if m.is_moe:
        fe = m.f_expert / _w(p.t_exp)
        k = m.top_k
        # routed experts hold T·top_k·etp/tp rows under SP (cost.compute.expert_token_share), the
        # router's fp32 probabilities the rank's T/tp local tokens
        g = np.where(_w(p.sp) > 0, _w(p.t_exp) / tp, 1.0)
        mlp_moe = g * k * ((3 if m.gated_mlp else 2) * bA * fe + bA * h) + 4.0 * m.num_experts / t_sp
        kern = t.rt.kernels
        if m.glu_limit and m.gated_mlp and kern.glu_clamp_eager:
            # an eager GLU clamp keeps the FC1 output (its backward's input) and saves the clamped
            # copy for the activation as well (cost.compute.moe_eager_bytes; not under TE's op fuser)
            mlp_moe = mlp_moe + np.where(kern.moe_fused_mlp & (_w(p.t_exp) <= 1), 0.0, g * k * 2 * bA * fe)
        mlp_dense = (3 if m.gated_mlp else 2) * bA * m.ffn_hidden / tp
        fm = m.n_moe_layers / m.layers
        mlp = fm * mlp_moe + (1 - fm) * mlp_dense
    else:
        mlp = (3 if m.gated_mlp else 2) * bA * m.ffn_hidden / tp
    # TE keeps the quantized cast of each GEMM input for wgrad instead of its 16-bit copy: the QKV and
    # FC1 inputs (norm outputs), the output-projection input and the FC2 input
    r = recipe_of(t)
    if r is not None and t.rt.precision.fp8_saved_inputs:
        save = (bA - (r.operand_bytes + r.scale_bytes))
        f_in = (m.f_expert / tp * m.top_k * np.where(_w(p.sp) > 0, 1.0, tp / _w(p.t_exp))) if m.is_moe and m.n_moe_layers == m.layers else m.ffn_hidden / tp
        saved = save * (2 * h / t_sp + m.heads * m.d_v / tp + f_in)
    else:
        saved = 0.0
    def f_tok():
        """One f-wide tensor per token on this rank, over the layer mix: the routed experts' rows
        (T·top_k·etp/tp under SP) and the shared expert, or the dense MLP."""
        if m.is_moe:
            return fm * (g * m.top_k * m.f_expert / _w(p.t_exp) + m.shared_expert_ffn_hidden / tp) \
                + (1 - fm) * m.ffn_hidden / tp
        return m.ffn_hidden / tp
    if t.rt.memory.eager_saved and bA == 2:
        # eager model code (RuntimeSpec memory.eager_saved): fp32 copies in each pre-norm (8 B, not
        # b_A), silu's output kept beside its input
        extra = 2 * (8.0 - bA) * h / t_sp + (bA * f_tok() if m.gated_mlp else 0.0)
    else:
        extra = 0.0
    if t.rt.memory.attention_kv_expanded and t.attention != "eager" and not m.mla:
        # K and V expanded to the query heads before a flash/SDPA kernel, which saves the copies
        # (memory.attention_kv_expanded; an eager core counts them in `core`)
        extra = extra + 2 * bA * (attention_kv_width(ctx, p) - kv_loc)
    full = sb * (repl + qkvo + core + mlp - saved + extra)
    selective = sb * (repl + qkvo + mlp - saved) + np.where(t.attention == "eager", 0.0, sb * core)
    named, m_core, m_up = module_flags(p)
    if np.any(named):
        # Megatron-Core --recompute-modules: core_attn drops the eager score tensors (flash keeps
        # only its log-sum-exp either way); mla_up_proj drops the per-head Q, K (d_qk) and V (d_v)
        # the up-projections make — the attention output and the latents stay
        listed = full - np.where(m_core & (t.attention == "eager"), sb * core, 0.0)
        if m.mla:
            listed = listed - np.where(m_up, sb * bA * m.heads / tp * (2 * m.d_qk + m.d_v), 0.0)
        # layernorm: the two pre-norm outputs (the QKV and FC1 inputs, kept as their FP8 casts when TE
        # saves those); moe_act: the expert activation output (the FC2 input); mlp: the dense layers'
        # MLP internals (FC1 output and FC2 input), their input kept (Megatron-Core
        # --recompute-modules: output-discarding recompute of the listed sub-module)
        kept = bA - (save if r is not None and t.rt.precision.fp8_saved_inputs else 0.0)
        listed = listed - np.where(module_on(p, "layernorm"), sb * 2 * h / t_sp * kept, 0.0)
        if m.is_moe:
            listed = listed - np.where(module_on(p, "moe_act"),
                                       sb * fm * g * m.top_k * m.f_expert / _w(p.t_exp) * kept, 0.0)
        dense = (1.0 - fm) if m.is_moe else 1.0
        if dense > 0 and m.ffn_hidden:
            listed = listed - np.where(module_on(p, "mlp"), sb * dense * ((2 if m.gated_mlp else 1) * bA + kept)
                                       * m.ffn_hidden / tp, 0.0)
        selective = np.where(named, listed, selective)
    if t.rt.memory.selective == "op-sac":
        # torchtitan op-level SAC keeps the layer input, every other matmul output (wq, wv, w1, w2 of
        # wq wk wv wo w1 w3 w2) and the SDPA output + log-sum-exp; norms, RoPE, activations, wk, wo
        # and w3 are recomputed (torchtitan/distributed/activation_checkpoint.py _save_list)
        # the layer input and w2's output (h each); a compiled block drops w2's, which no backward
        # op reads (memory.sac_keeps_unread)
        kept_h = 2.0 if t.rt.memory.sac_keeps_unread else 1.0
        selective = sb * (bA * (kept_h * h / t_sp + 2 * m.q_width / tp + kv_loc + f_tok()) + 4.0 * m.heads / tp)
    ckpt = sb * bA * h / t_sp
    if mode == "all":
        return full, selective, ckpt
    return np.where(rc == 0, full, np.where(rc == 1, selective, np.where(rc == 2, ckpt, full)))


def in_flight(ctx, p, i):
    """Chunk-micro-batches in flight on stage i (K6): 1F1B min(p−i, m); GPipe m;
    interleaved min(2(p−i−1) + (v−1)·G + 1, m·v) — m the micro-batches of one pipeline schedule
    (`schedule_micro_batches`: a stack that runs a schedule per local batch drains between them)."""
    pp = _w(p.pp)
    m = schedule_micro_batches(ctx, p)
    i = _w(i)
    v = _w(p.vpp)
    one_f = np.minimum(pp - i, m)
    gpipe = m + 0 * i
    inter = np.minimum(2 * (pp - i - 1) + (v - 1) * _w(p.G) + 1, m * v)
    sched = _w(p.sched)
    return np.where(sched == 1, inter, np.where(sched == 2, gpipe, one_f))


def block_recompute(p, i, Li):
    """(layers fully recomputed on stage i, whether block recompute applies): the plan's per-stage
    counts (CP-SAT) or recompute=block's recompute_layers, capped at the stage's layers."""
    srec = getattr(p, "stage_recompute", ())
    if srec:
        rl = _w(np.asarray(srec, dtype=float)[np.asarray(i).astype(int)])
    else:
        rl = np.where(_w(p.rc) == 3, np.minimum(_w(p.recompute_layers), Li), 0.0)
    return rl, (_w(p.rc) == 3) | (len(srec) > 0)


def stage_activation_bytes(ctx, p, i):
    """A_i: activations held by one rank of stage i at its peak (§2.5)."""
    m, t = ctx.model, ctx.train
    if m.states_only or t.states_only:
        return _w(0.0) * _w(p.tp)
    Li = layers_on_stage(ctx, p, i)
    v_eff = np.where(_w(p.sched) == 1, _w(p.vpp), 1.0)
    n_chunks = in_flight(ctx, p, i)
    full, selective, ckpt = activation_bytes_per_layer(ctx, p, "all")
    rc = _w(p.rc)
    per_layer = np.where(rc == 1, selective, np.where(rc == 2, ckpt, full))    # block (3): full per layer
    rl, block = block_recompute(p, i, Li)
    frac = np.where(Li > 0, rl / np.maximum(Li, 1e-9), 0.0)
    avg = np.where(block, (1 - frac) * per_layer + frac * ckpt, per_layer)
    layers_in_flight = n_chunks * Li / v_eff
    acts = layers_in_flight * avg
    # stage 0: input ids (int64) + embedding dropout mask per in-flight micro-batch, ÷ t (Megatron estimator)
    s_loc = t.seq_len / _w(p.cp)
    emb_term = (8.0 * s_loc * _w(p.mbs) + (s_loc * _w(p.mbs) * m.hidden if t.dropout else 0.0)) / _w(p.tp)
    acts = acts + np.where(_w(i) == 0, (n_chunks / v_eff) * emb_term, 0.0)
    if t.rt.memory.pp_recv_buffers:
        acts = acts + np.where(_w(p.pp) > 1, pp_recv_buffer_bytes(ctx, p, i, n_chunks, v_eff), 0.0)
    if t.rt.memory.pp_keeps_step_outputs:
        # at the last micro-batch's loss the schedule still holds the m − 1 earlier outputs
        last = (_w(i) == _w(p.pp) - 1) & (_w(p.pp) > 1)
        acts = acts + np.where(last, (schedule_micro_batches(ctx, p) - 1.0) * pp_output_bytes(ctx, p), 0.0)
    return acts


def schedule_micro_batches(ctx, p):
    """m_f: micro-batches one pipeline schedule runs, m over the plan's `pp_flushes` schedules."""
    m = micro_batches(p, ctx.train.global_batch)
    return m / np.minimum(_w(getattr(p, "pp_flushes", 1)), np.maximum(m, 1.0))


def pp_boundary_bytes(ctx, p, scatter_gather: bool = False):
    """One micro-batch's activation at a pipeline-stage boundary per rank, X = b·(s/c)·h·b_A ÷ t
    under sequence parallelism (the block's output stays sharded). `scatter_gather`: Megatron also
    splits a replicated boundary tensor over tp for the send and gathers it after (its P2P
    scatter/gather), so X ÷ t whenever tp > 1 — the P2P message (`cost.comm.p2p_message_bytes`);
    a buffer torch pipelining keeps is the tensor as the stage holds it."""
    t = ctx.train
    x = _w(p.mbs) * (t.seq_len / _w(p.cp)) * ctx.model.hidden * t.b_A
    split = (_w(p.sp) > 0) | ((_w(p.tp) > 1) & scatter_gather)
    return x / np.where(split, _w(p.tp), 1.0)


def pp_recv_buffer_bytes(ctx, p, i, n_chunks, v_eff):
    """The receive buffers a rank of stage i keeps (RuntimeSpec memory.pp_recv_buffers): m
    activation buffers per virtual stage but the pipeline's first, m gradient buffers per virtual
    stage but its last, each `pp_boundary_bytes`, less the in-flight chunks' inputs, which are those
    buffers and already count as their first layer's saved input."""
    m = schedule_micro_batches(ctx, p)
    i, pp = _w(i), _w(p.pp)
    fwd = v_eff - np.where(i == 0, 1.0, 0.0)
    bwd = v_eff - np.where(i == pp - 1, 1.0, 0.0)
    held = np.maximum(fwd * m - n_chunks * fwd / v_eff, 0.0) + bwd * m
    return held * pp_boundary_bytes(ctx, p)


def pp_output_bytes(ctx, p):
    """One micro-batch's output of the last pipeline stage, the logits a schedule that keeps its
    outputs holds (RuntimeSpec memory.pp_keeps_step_outputs): b_A·s·b·V_out, V_out = V_pad/t when
    the loss runs vocab-parallel (DTensor loss_parallel leaves the output sharded over tp > 1), the
    whole padded vocabulary otherwise (a Replicate output)."""
    t, mem = ctx.train, ctx.train.rt.memory
    tp = _w(p.tp)
    V = vocab_padded(ctx, p)
    v_out = np.where((tp > 1) & (mem.loss_parallel_bytes_per_logit > 0), V / tp, V)
    return t.b_A * (t.seq_len / _w(p.cp)) * _w(p.mbs) * v_out


# ---- transient buffers ----------------------------------------------------------------------
def logits_bytes(ctx, p):
    """Last stage, one micro-batch: logits + loss buffers, B_logit·s·b·V_pad/t with B_logit from the
    runtime (Megatron's fused vocab-parallel CE: 16-bit logits + fp32 buffer = 6, T17; eager torch
    CE ≈ 12; DTensor's loss_parallel over tp > 1, `loss_parallel_bytes_per_logit`), plus, where the
    stack's TP saves gathered inputs (`tp_saves_gathered_input`), the output layer's all-gathered
    input beyond its SP shard: b_A·s·b·h·(1 − 1/t)."""
    t, mem = ctx.train, ctx.train.rt.memory
    tp = _w(p.tp)
    s_loc = t.seq_len / _w(p.cp)
    per = mem.loss_bytes_per_logit if t.b_A == 2 else t.b_A + 4.0
    if t.b_A == 2 and mem.loss_parallel_bytes_per_logit:
        per = np.where(tp > 1, mem.loss_parallel_bytes_per_logit, per)
    out = per * s_loc * _w(p.mbs) * vocab_padded(ctx, p) / tp
    if mem.tp_saves_gathered_input:
        out = out + np.where((tp > 1) & (_w(p.sp) > 0),
                             t.b_A * s_loc * _w(p.mbs) * ctx.model.hidden * (1.0 - 1.0 / tp), 0.0)
    return out


def transient_bytes(ctx, p, i):
    """Short-lived buffers at the stage's peak (§2.4): the sum of `transient_parts`."""
    st, act = transient_parts(ctx, p, i)
    return st + act


def transient_parts(ctx, p, i):
    """`transient_bytes` as (the parameter/gradient buffers, which follow the sharding mode; the
    logits, recompute working set and CP K/V gathers, which follow the micro-batch and recompute)."""
    m, t = ctx.model, ctx.train
    if m.states_only or t.states_only:
        if t.regime == "deepspeed":
            # DeepSpeed estimators: largest layer gathered with its 16-bit grads, 4·Ψ_max (§2.3, T7)
            return np.where(_w(p.p_mode) >= 1, (t.b_P + t.b_G) * _w(m.largest_unit_params()) / _w(p.tp), 0.0), _w(0.0)
        return _w(0.0) * _w(p.tp), _w(0.0)
    bP, bG = t.b_P, t.b_G
    bGr = t.b_G_reduce
    unit = largest_unit_rank(ctx, p)
    dense, expert = stage_param_counts(ctx, p, i)
    nd, _ = shard_groups(ctx, p)
    pm, gm = _w(p.p_mode), _w(p.g_mode)
    k1 = k1_active(ctx, p)
    # in a unit's backward: its unsharded gradients (b_G) and the previous unit's reduce-scatter
    # input (b_G_reduce), which FSDP2 keeps in flight until this unit's post-backward
    # (reduce_scatter_max_input_buffers = 1)
    grad_bufs = unit * (bG + bGr)
    sg = np.where(~k1 & (pm == 1), t.rt.memory.fsdp_prefetch_units * unit * bP + grad_bufs, 0.0)
    hold = np.where(~k1 & (pm == 2), collective_params_rank(ctx, p, i) * bP + grad_bufs, 0.0)
    rs_bucket = np.where(~k1 & (pm == 0) & (gm == 1), unit * bG, 0.0)
    last = _w(i) == _w(p.pp) - 1
    logits = np.where(last, logits_bytes(ctx, p), 0.0)
    # a CP rank's gathered K/V live inside one layer's attention (forward, and the recompute and
    # backward of a checkpointed layer), never at the loss
    cp_kv = np.where(_w(p.cp) > 1, cp_kv_bytes(ctx, p), 0.0)
    working = np.where((_w(p.rc) >= 2) | (len(getattr(p, "stage_recompute", ())) > 0),
                       activation_bytes_per_layer(ctx, p, 0), 0.0)
    act_t = np.maximum(logits, working + cp_kv)
    if t.rt.memory.pp_keeps_step_outputs:
        # the step's end (pp_keeps_step_outputs): every activation released, the m kept outputs
        # and their concatenation (the step's return value) alive together
        merge = 2.0 * schedule_micro_batches(ctx, p) * pp_output_bytes(ctx, p) - stage_activation_bytes(ctx, p, i)
        act_t = np.where(last & (_w(p.pp) > 1), np.maximum(act_t, merge), act_t)
    return sg + hold + rs_bucket, act_t


# NCCL's per-connection FIFO buffers (NCCL src/include/device.h defaults; NCCL_BUFFSIZE in the NCCL
# environment-variable docs: "default 4194304", 4 MiB), allocated per channel per connected peer,
# outside PyTorch's caching allocator (NCCL cuMem/cudaMalloc), once a communicator first runs:
NCCL_SIMPLE_BYTES = 4 * 2**20
"""NCCL_BUFFSIZE: the Simple protocol's buffer per channel and peer connection."""
NCCL_LL128_BYTES = 120 * 640 * 8 * 8
"""DEFAULT_LL128_BUFFSIZE = LL128_ELEMS_PER_THREAD 120 · LL128_MAX_NTHREADS 640 · NCCL_STEPS 8 · 8 B (4.69 MiB)."""
NCCL_LL_BYTES = 8 * 512 * 8 * 16
"""DEFAULT_LL_BUFFSIZE = LL_LINES_PER_THREAD 8 · LL_MAX_NTHREADS 512 · NCCL_STEPS 8 · 16 B line (0.5 MiB)."""
NCCL_P2P_CHANNELS_PER_PEER = 2
"""NCCL_NCHANNELS_PER_NET_PEER default (send/recv and all-to-all use this many channels per peer)."""


def nccl_buffer_bytes(ctx, hw, p):
    """NCCL FIFO buffers one rank holds (outside the caching allocator), summed over the
    communicators the plan runs collectives or point-to-point on:

        rings (TP, CP, the DP / sharding group, and the expert-DP group of MoE):
            C · (SIMPLE + LL128 + LL)        per communicator of more than one rank
        point-to-point (PP: a send and a receive connection; EP all-to-all: ep − 1 peers):
            peers · P2P_CHANNELS_PER_PEER · (SIMPLE + LL)

    with C = the profile's `nccl_channels` (NCCL's MAXCHANNELS = 32 is the bound; NVSwitch nodes
    run at it). A communicator connects lazily (PyTorch ProcessGroupNCCL creates it at its first
    collective), so unused groups cost nothing."""
    C = float(getattr(hw, "nccl_channels", 32.0))
    ring = C * (NCCL_SIMPLE_BYTES + NCCL_LL128_BYTES + NCCL_LL_BYTES)
    per_peer = NCCL_P2P_CHANNELS_PER_PEER * (NCCL_SIMPLE_BYTES + NCCL_LL_BYTES)
    one = lambda x: np.where(_w(x) > 1, 1.0, 0.0)  # noqa: E731
    _, n_exp = shard_groups(ctx, p)
    moe = bool(getattr(ctx.model, "is_moe", False))
    rings = one(p.tp) + one(p.cp) + one(p.dp) + (one(n_exp) * one(p.ep) if moe else 0.0)
    peers = 2.0 * one(p.pp) + (np.maximum(_w(p.ep) - 1.0, 0.0) if moe else 0.0)
    return rings * ring + peers * per_peer


def overhead_bytes(ctx, hw, p):
    """Device memory outside the caching allocator, what nvidia-smi adds to torch's reserved bytes:
    the CUDA context (profile `cuda_context_gib`), NCCL's FIFO buffers of the plan's communicators
    (`nccl_buffer_bytes`) and the rest of the communicators' device state (profile `comm_buffer_gib`)."""
    if ctx.model.states_only or ctx.train.states_only or hw is None:
        return _w(0.0) * _w(p.tp)
    return _w(hw.fixed_overhead_bytes) + nccl_buffer_bytes(ctx, hw, p) * (0.0 if hw.host_is_device else 1.0)


def overhead_parts(ctx, hw, p) -> dict:
    """{"cuda_context", "nccl_buffers", "comm_other"}: the three terms of `overhead_bytes`."""
    if ctx.model.states_only or ctx.train.states_only or hw is None:
        return {"cuda_context": 0.0, "nccl_buffers": 0.0, "comm_other": 0.0}
    nb = 0.0 if hw.host_is_device else float(np.max(nccl_buffer_bytes(ctx, hw, p)))
    return {"cuda_context": float(hw.cuda_context_bytes), "nccl_buffers": nb, "comm_other": float(hw.comm_buffer_bytes)}


def reserve_fraction(ctx) -> float:
    """Caching-allocator reserve as a share of the allocated peak (the runtime's memory behaviour)."""
    if ctx.model.states_only or ctx.train.states_only:
        return 0.0
    return float(ctx.train.rt.memory.reserve_frac)


def stage_memory(ctx, hw, p, i, parts: bool = True):
    """All memory terms of one rank of stage i; `total` is their sum, the device memory in use
    (parts=False: `total` alone, what the search reads).

    allocated = params + grads + optimizer + activations + transient is what
    torch.cuda.max_memory_allocated reports; the caching allocator holds `reserve` more at the peak
    (reserved = allocated · (1 + f), torch.cuda.max_memory_reserved, f = the runtime's
    `memory.reserve_frac`: segments freed by one layer's gather buffers cannot all be reused by
    differently sized blocks); the CUDA context and NCCL buffers (`overhead`) sit outside the
    allocator.

    The GPU rule, per runtime: f = 0.03 for Megatron-Core (gradient and parameter buffers
    allocated once, contiguously), 0.08 for DeepSpeed ZeRO (per-sub-module fetch and release), 0.10
    for FSDP stacks that allocate and free all-gather / reduce-scatter buffers every layer
    (torchtitan, FSDP1/FSDP2 wrappers); PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True shrinks the
    fragmentation (a smaller f; not yet measured on a GPU in this project). On CPU there is no caching allocator: f = 0 (torch-native), and the
    allocated peak is checked against torch's own tracker (FSDPMemTracker) on FSDP2 runs of the
    plan runner (tests/test_memory_accounting.py: within 3 % on llama-tiny, zero=3 × reshard × no /
    op-SAC / full recompute); benchmarks/device_check.py compares max_memory_allocated and
    max_memory_reserved on CUDA."""
    params, grads, opt = model_state_bytes(ctx, p, i)
    acts = stage_activation_bytes(ctx, p, i)
    trans_st, trans_act = transient_parts(ctx, p, i)
    over = overhead_bytes(ctx, hw, p)
    f = reserve_fraction(ctx)
    # summed per broadcast axis: the sharding-mode terms and the micro-batch/recompute terms apart,
    # so a search block adds its two halves once: total = states·(1 + f) + overhead + acts·(1 + f)
    st = params + grads + opt + trans_st
    act = acts + trans_act
    total = (st * (1.0 + f) + over) + act * (1.0 + f)
    if not parts:
        return {"total": total}
    allocated = st + act
    return {"params": params, "grads": grads, "optimizer": opt, "activations": acts,
            "transient": trans_st + trans_act, "reserve": allocated * f, "overhead": over, "total": total}


def allocated_bytes(sm: dict):
    """torch's max_memory_allocated of a `stage_memory` dict."""
    return sm["total"] - sm["reserve"] - sm["overhead"]


def reserved_bytes(sm: dict):
    """torch's max_memory_reserved of a `stage_memory` dict."""
    return sm["total"] - sm["overhead"]


def memory_limit(hw, headroom: float = 0.0):
    """Usable bytes per device: the capacity (as PyTorch reports it) less the user's headroom."""
    return hw.memory_bytes * (1.0 - headroom)


def peak_memory(ctx, hw, p, parts: bool = True):
    """Max over stages. With even splits the binding stage is 0 (most in flight, embedding) or
    p−1 (logits, output weights); middle stages are dominated by stage 0. Without pipelining both
    are stage 0 (computed once)."""
    m0 = stage_memory(ctx, hw, p, 0, parts)
    if not getattr(p, "layer_split", ()) and np.all(_w(p.pp) == 1):
        return m0["total"], m0, m0
    ml = stage_memory(ctx, hw, p, _w(p.pp) - 1, parts)
    return np.maximum(m0["total"], ml["total"]), m0, ml
