"""Compute: FLOPs per layer / per step and their time on one device (numpy-broadcastable).

FLOPs: 2·M·N·K per GEMM (forward); backward = dgrad + wgrad = 2× forward. Attention core QKᵀ and
P·V: 4·s_q·s_kv·q_width per micro-batch forward, halved for causal FlashAttention-style kernels that
skip masked blocks (eager/fused-softmax kernels compute the full square; Korthikanti 2022 counts the
full square too). Recompute: full = one more forward; selective = the attention core forward again.

Time per GEMM is an additive roofline with tile quantization and a launch overhead:
  t = 2·⌈M⌉·⌈N⌉·(K + K₀) / (peak·η_math) + (MK + KN + MN)·b / (B_hbm·η_hbm) + t_kernel
where ⌈x⌉ rounds up to the profile's GEMM tile (and the tiles to whole waves over the SMs; a batched
GEMM fills its waves across the batch) and K₀ (`gemm_k_overhead`) is each output tile's pipeline fill
and epilogue in K-loop elements. The operand and result traffic is not hidden under the math, so a
GEMM's efficiency falls as its arithmetic intensity nears the machine's ridge point (Williams et al.
2009 roofline; the additive form of Calculon and of the "no-overlap" bound); η_math is set so that an
n³ GEMM, n = MAMF_REF_N, runs at the profile's `gemm_efficiency` (the best measured matmul, MAMF).
Small per-rank GEMMs under large TP, small micro-batches or small hidden sizes are slower (Narayanan
et al. 2021 §5), and the attention-core batched GEMMs (intensity ≈ d_head) are near memory-bound. Memory-bound kernels (norms, residual/dropout,
activation functions, softmax, rotary, optimizer, cross-entropy) take bytes/(B_hbm·η_hbm) + t_kernel.
"""

from __future__ import annotations

import numpy as np

from autoplace.cost.memory import _w, vocab_padded


def _ceil_to(x, q):
    return np.ceil(_w(x) / q) * q


MAMF_REF_N = 8192      # the best-matmul reference: an n³ GEMM (the middle of MAMF's 0–16384 sweep)


def gemm_math_efficiency(hw, peak, dtype_bytes):
    """η_math such that the additive roofline gives an n³ GEMM (n = MAMF_REF_N) the profile's
    `gemm_efficiency`: 2n³/(peak·η) = 2n³/(peak·η_math) + 3n²·b/(B_hbm·η_hbm)."""
    n = float(MAMF_REF_N)
    t_ref = 2.0 * n ** 3 / (peak * hw.gemm_efficiency)
    t_mem = 3.0 * n * n * dtype_bytes / (hw.hbm_bw * hw.hbm_efficiency)
    return hw.gemm_efficiency * t_ref / max(t_ref - t_mem, 0.5 * t_ref)


def gemm_efficiency_for(eta_math, peak, hbm_bw, dtype_bytes):
    """The inverse of `gemm_math_efficiency` (calibration): the `gemm_efficiency` a profile must
    state so that its math efficiency is `eta_math`; hbm_bw is the achieved bandwidth B_hbm·η_hbm."""
    n = float(MAMF_REF_N)
    c = 3.0 * n * n * dtype_bytes / hbm_bw * peak / (2.0 * n ** 3)    # t_mem·peak / (2n³)
    return eta_math / (1.0 + eta_math * c)


def gemm_time(hw, M, N, K, dtype_bytes, peak, batch=1.0):
    """Additive-roofline time of one (M×K)·(K×N) GEMM — or of one batched GEMM of `batch` such
    products — on one device, with tile and wave quantization: output tiles = batch·⌈M/q⌉·⌈N/q⌉ run
    in ⌈tiles/SMs⌉ waves, so the last partial wave idles SMs."""
    q = hw.gemm_tile
    tiles = np.ceil(_w(M) / q) * np.ceil(_w(N) / q)
    bytes_ = (_w(M) * K + _w(K) * N + _w(M) * N) * dtype_bytes
    if not (np.isscalar(batch) and batch == 1):
        tiles, bytes_ = tiles * _w(batch), bytes_ * _w(batch)
    waves = np.ceil(tiles / hw.sm_count)
    flops = 2.0 * waves * hw.sm_count * q * q * (_w(K) + hw.gemm_k_overhead)
    return flops / (peak * gemm_math_efficiency(hw, peak, dtype_bytes)) \
        + bytes_ / (hw.hbm_bw * hw.hbm_efficiency) + hw.kernel_overhead_s


def gemm_fwd_bwd(hw, M, N, K, b, peak):
    """(forward, backward) time: backward = dgrad (M×N·N×K) + wgrad (K×M·M×N)."""
    f = gemm_time(hw, M, N, K, b, peak)
    bwd = gemm_time(hw, M, K, N, b, peak) + gemm_time(hw, K, N, M, b, peak)
    return f, bwd


def membound_time(hw, nbytes, kernels):
    return _w(nbytes) / (hw.hbm_bw * hw.hbm_efficiency) + _w(kernels) * hw.kernel_overhead_s


def causal_factor(train):
    """Share of the s² attention square computed: ½ for causal flash kernels, 1 for eager."""
    return 0.5 if train.attention == "flash" else 1.0


def gemm_peak(hw, train):
    return hw.peak(train.precision if train.precision in ("fp8", "fp32", "fp16") else "bf16")


def layer_compute_times(ctx, hw, p):
    """Per transformer layer, per micro-batch, one rank: dict of forward/backward times (s).

    Keys: gemm_f, gemm_b, attn_f, attn_b, elem_f, elem_b (memory-bound), attn_elem_f (the part of the
    elementwise work inside the attention core: eager softmax/dropout — repeated by selective
    recompute), flops_f (hardware FLOPs of one forward).
    """
    m, t = ctx.model, ctx.train
    tp, cp = _w(p.tp), _w(p.cp)
    T = _w(p.mbs) * t.seq_len / cp                         # GEMM rows (tokens) per rank
    bA = t.b_A
    peak = gemm_peak(hw, t)
    peak16 = hw.peak("bf16") if t.precision != "fp32" else hw.peak("fp32")
    kv_loc = np.maximum(m.a_kv / tp, 1.0) * m.d_head
    q_loc = m.q_width / tp
    h = m.hidden
    gb = 1 if t.precision == "fp8" else bA                 # GEMM operand width
    shapes = [(T, q_loc + 2 * kv_loc, h), (T, h, q_loc)]
    fm = m.n_moe_layers / m.layers if m.is_moe else 0.0
    if fm < 1.0:
        f_loc = m.ffn_hidden / tp
        shapes_mlp = [(T, (2 if m.gated_mlp else 1) * f_loc, h), (T, h, f_loc)]
    else:
        shapes_mlp = []
    gf = _w(0.0)
    gbk = _w(0.0)
    flops = _w(0.0)
    # weight-gradient GEMMs of the column-parallel layers (QKV, FC1): Megatron overlaps the TP
    # collective on their input gradient with them (async TP all-reduce / reduce-scatter in backward)
    wgrad_col = gemm_time(hw, shapes[0][2], shapes[0][1], shapes[0][0], gb, peak)
    for (M, N, K) in shapes:
        f, b = gemm_fwd_bwd(hw, M, N, K, gb, peak)
        gf, gbk, flops = gf + f, gbk + b, flops + 2 * M * N * K
    for (M, N, K) in shapes_mlp[:1]:
        wgrad_col = wgrad_col + (1 - fm) * gemm_time(hw, K, N, M, gb, peak)
    for (M, N, K) in shapes_mlp:
        f, b = gemm_fwd_bwd(hw, M, N, K, gb, peak)
        gf, gbk, flops = gf + (1 - fm) * f, gbk + (1 - fm) * b, flops + (1 - fm) * 2 * M * N * K
    if fm > 0:
        fe = m.f_expert / _w(p.t_exp)
        Me = T * m.top_k                                   # tokens routed to this rank's experts (balanced)
        n_local = m.num_experts / _w(p.ep)
        Mper = Me / n_local                                # per expert GEMM rows
        for (N, K) in [((2 if m.gated_mlp else 1) * fe, h), (h, fe)]:
            f, b = gemm_fwd_bwd(hw, Mper, N, K, gb, peak)
            gf, gbk = gf + fm * n_local * f, gbk + fm * n_local * b
            flops = flops + fm * 2 * Me * N * K
        f, b = gemm_fwd_bwd(hw, T, m.num_experts, h, bA, peak16)   # router
        gf, gbk, flops = gf + fm * f, gbk + fm * b, flops + fm * 2 * T * m.num_experts * h
        if m.shared_expert_ffn_hidden:
            fs = m.shared_expert_ffn_hidden / tp
            for (N, K) in [((2 if m.gated_mlp else 1) * fs, h), (h, fs)]:
                f, b = gemm_fwd_bwd(hw, T, N, K, gb, peak)
                gf, gbk, flops = gf + fm * f, gbk + fm * b, flops + fm * 2 * T * N * K
    # attention core: QKᵀ and PV over the full key length s (CP ranks hold s/c queries)
    heads_loc = m.heads / tp
    attn_flops = 4.0 * T * t.seq_len * q_loc * causal_factor(t)
    if t.attention == "flash":
        attn_f = attn_flops / (peak16 * hw.attention_efficiency) + hw.kernel_overhead_s
        attn_b = 2.5 * attn_flops / (peak16 * hw.attention_efficiency) + 2 * hw.kernel_overhead_s
        attn_elem_f = _w(0.0)
        attn_elem_b = _w(0.0)
    else:
        # two batched GEMMs (QKᵀ, P·V) of (s × d_h × s) over mbs·heads; then the s² elementwise kernels
        B = _w(p.mbs) * heads_loc
        Sq = t.seq_len / cp                                       # query rows per sequence
        qk = gemm_time(hw, Sq, t.seq_len, m.d_head, bA, peak16, batch=B)      # one bmm over mbs·heads
        pv = gemm_time(hw, Sq, m.d_head, t.seq_len, bA, peak16, batch=B)
        attn_f = qk + pv
        attn_b = 2.0 * attn_f
        drop = 1.0 if t.dropout else 0.0
        sq = _w(p.mbs) * heads_loc * (t.seq_len / cp) * t.seq_len   # score elements per rank
        attn_elem_f = membound_time(hw, sq * (2 * bA + drop * (2 * bA + 1)), 1 + drop)
        attn_elem_b = membound_time(hw, sq * (3 * bA + drop * (2 * bA + 1)), 1 + drop)
    flops = flops + attn_flops
    # elementwise: norms, residual(+dropout), activation, rotary
    t_sp = np.where(_w(p.sp) > 0, tp, 1.0)
    drop = 1.0 if t.dropout else 0.0
    h_bytes = T * h * (10 * bA + 2 * drop) / t_sp
    f_dense = m.ffn_hidden / tp
    act_bytes = T * (3 if m.gated_mlp else 2) * bA * np.where(fm >= 1.0, 0.0, (1 - fm) * f_dense)
    if fm > 0:
        act_bytes = act_bytes + fm * T * m.top_k * (3 if m.gated_mlp else 2) * bA * m.f_expert / _w(p.t_exp)
        act_bytes = act_bytes + fm * T * m.top_k * h * bA * 4        # permute / unpermute copies
    rope = 2.0 * T * (q_loc + kv_loc) * bA if m.position == "rope" else 0.0
    cast = 3.0 * T * (2 * h + q_loc + f_dense) if t.precision == "fp8" else 0.0   # fp8 input casts
    elem_f = membound_time(hw, h_bytes + act_bytes + rope + cast, 8)
    elem_b = membound_time(hw, 2.0 * (h_bytes + act_bytes + rope) + cast, 10)
    return {"gemm_f": gf, "gemm_b": gbk, "wgrad_col": wgrad_col, "attn_f": attn_f, "attn_b": attn_b, "elem_f": elem_f,
            "elem_b": elem_b, "attn_elem_f": attn_elem_f, "attn_elem_b": attn_elem_b, "flops_f": flops}


def head_compute_times(ctx, hw, p):
    """Embedding (first stage) and logits + cross-entropy (last stage), per micro-batch, one rank."""
    m, t = ctx.model, ctx.train
    tp = _w(p.tp)
    T = _w(p.mbs) * t.seq_len / _w(p.cp)
    Vl = vocab_padded(ctx, p) / tp
    peak = hw.peak("bf16") if t.precision != "fp32" else hw.peak("fp32")
    lf, lb = gemm_fwd_bwd(hw, T, Vl, m.hidden, t.b_A, peak)
    ce_f = membound_time(hw, T * Vl * (t.b_A + 3 * 4.0), 3)
    ce_b = membound_time(hw, T * Vl * (4.0 + t.b_A), 2)
    emb_f = membound_time(hw, T * m.hidden * t.b_A * 2, 1)
    emb_b = membound_time(hw, T * m.hidden * t.b_A * 2 + Vl * m.hidden * t.b_G, 2)
    return {"emb_f": emb_f, "emb_b": emb_b, "logits_f": lf + ce_f, "logits_b": lb + ce_b,
            "logits_flops_f": 2.0 * T * Vl * m.hidden}


def model_flops_per_step(ctx, p=None):
    """Model FLOPs per optimizer step, whole cluster (recompute excluded), Megatron-Core convention:
    6 × (GEMM FLOPs of active weights + logits) per token + attention 12·L·s·q_width per token
    (the full s² square, not halved for causality)."""
    m, t = ctx.model, ctx.train
    tokens = t.tokens_per_step
    if m.states_only:
        return 6.0 * m.total_params() * tokens
    h, q, kv = m.hidden, m.q_width, m.kv_width
    attn_w = h * q + 2 * h * kv + q * h
    fm = m.n_moe_layers / m.layers if m.is_moe else 0.0
    dense_mlp = (3 if m.gated_mlp else 2) * h * m.ffn_hidden
    moe_mlp = m.top_k * (3 if m.gated_mlp else 2) * h * m.f_expert + h * m.num_experts
    if m.shared_expert_ffn_hidden:
        moe_mlp += (3 if m.gated_mlp else 2) * h * m.shared_expert_ffn_hidden
    per_layer = attn_w + (1 - fm) * dense_mlp + fm * moe_mlp
    gemm = m.layers * per_layer + h * m.vocab
    attn = m.layers * 2 * t.seq_len * q     # × 6 → 12·L·s·q per token (QKᵀ + PV, fwd + bwd)
    return tokens * (6.0 * gemm + 6.0 * attn)
