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

Flash attention runs at the profile's fitted rate for its kernel family at d = 128, scaled by the head
dims (`head_dim_factor`: per score 4·d̄ matmul FLOPs plus one SFU exponential, FlashAttention-3 §3.1)
and charged for whole key tiles on sliding-window layers (`keys_per_query(..., tile)`).
"""

from __future__ import annotations

import numpy as np

from autoplace.cost.memory import _w, vocab_padded
from autoplace.cost.network import eager_kernel_overhead
from autoplace.cost.precision import GemmFormat, matmul_dtype


def _ceil_to(x, q):
    return np.ceil(_w(x) / q) * q


MAMF_REF_N = 8192      # the best-matmul reference: an n³ GEMM (the middle of MAMF's 0–16384 sweep)
# FP8 fused attention against its (2×) peak: the forward runs ~1.6× BF16 (FlashAttention-3 FP8 ≈ 1.2
# PFLOP/s vs BF16 ≈ 740 on H100, Shah et al. 2024 Fig. 7/9); the backward (2.5× the forward's work)
# gains ~1.2× → 3.5 / (1/1.6 + 2.5/1.2) ≈ 1.3× overall = 0.65 of the BF16 kernel's share of 2× peak
FP8_ATTENTION_EFFICIENCY = 0.65


def gemm_math_efficiency(hw, peak, dtype_bytes, efficiency=None):
    """η_math such that the additive roofline gives an n³ GEMM (n = MAMF_REF_N) the profile's
    `gemm_efficiency` (or `efficiency`, the MAMF fraction of another dtype):
    2n³/(peak·η) = 2n³/(peak·η_math) + 3n²·b/(B_hbm·η_hbm)."""
    eff = hw.gemm_efficiency if efficiency is None else efficiency
    n = float(MAMF_REF_N)
    t_ref = 2.0 * n ** 3 / (peak * eff)
    t_mem = 3.0 * n * n * dtype_bytes / (hw.hbm_bw * hw.hbm_efficiency)
    return eff * t_ref / max(t_ref - t_mem, 0.5 * t_ref)


def gemm_efficiency_for(eta_math, peak, hbm_bw, dtype_bytes):
    """The inverse of `gemm_math_efficiency` (calibration): the `gemm_efficiency` a profile must
    state so that its math efficiency is `eta_math`; hbm_bw is the achieved bandwidth B_hbm·η_hbm."""
    n = float(MAMF_REF_N)
    c = 3.0 * n * n * dtype_bytes / hbm_bw * peak / (2.0 * n ** 3)    # t_mem·peak / (2n³)
    return eta_math / (1.0 + eta_math * c)


def gemm_time(hw, M, N, K, dtype_bytes, peak, batch=1.0, efficiency=None):
    """Additive-roofline time of one (M×K)·(K×N) GEMM — or of one batched GEMM of `batch` such
    products — on one device, with tile and wave quantization: output tiles = batch·⌈M/q⌉·⌈N/q⌉ run
    in ⌈tiles/SMs⌉ waves, so the last partial wave idles SMs. `efficiency`: the MAMF fraction of the
    dtype the GEMM runs in (default the profile's BF16 `gemm_efficiency`)."""
    q = hw.gemm_tile
    tiles = np.ceil(_w(M) / q) * np.ceil(_w(N) / q)
    # FP8/FP4 GEMMs read 1-byte (or ½-byte) operands but write a 16-bit result
    bytes_ = (_w(M) * K + _w(K) * N) * dtype_bytes + _w(M) * N * max(dtype_bytes, 2)
    if not (np.isscalar(batch) and batch == 1):
        tiles, bytes_ = tiles * _w(batch), bytes_ * _w(batch)
    waves = np.ceil(tiles / hw.sm_count)
    # K₀ is a per-tile time (pipeline fill, epilogue) stated in BF16 K-elements: a format with a
    # higher peak runs more K-elements in that time
    k0 = hw.gemm_k_overhead * (peak / hw.peak_flops["bf16"] if "bf16" in hw.peak_flops else 1.0)
    if dtype_bytes == 1 and hw.gemm_k_overhead_fp8:
        k0 = hw.gemm_k_overhead_fp8
    flops = 2.0 * waves * hw.sm_count * q * q * (_w(K) + k0)
    return flops / (peak * gemm_math_efficiency(hw, peak, dtype_bytes, efficiency)) \
        + bytes_ / (hw.hbm_bw * hw.hbm_efficiency) + hw.kernel_overhead_s


def gemm_fwd_bwd(hw, M, N, K, b, peak, batch=1.0, efficiency=None):
    """(forward, backward) time: backward = dgrad (M×N·N×K) + wgrad (K×M·M×N)."""
    f = gemm_time(hw, M, N, K, b, peak, batch, efficiency)
    bwd = gemm_time(hw, M, K, N, b, peak, batch, efficiency) + gemm_time(hw, K, N, M, b, peak, batch, efficiency)
    return f, bwd


def membound_time(hw, nbytes, kernels):
    return _w(nbytes) / (hw.hbm_bw * hw.hbm_efficiency) + _w(kernels) * hw.kernel_overhead_s


def expert_token_share(p):
    """Routed-expert tokens one rank processes per token of its micro-batch (T = mbs·s/cp).

    Under sequence parallelism the MoE layer's input is the rank's T/tp sequence shard: Megatron-Core
    routes and dispatches only those (`MoELayer` requires SP with TP; the all-to-all dispatcher sends
    the local T/tp·top_k tokens over EP, `cost.comm.ep_bytes_per_layer`), and the expert-TP group
    all-gathers them after the all-to-all (× etp; `MoEAlltoAllTokenDispatcher`, tp_size > 1), so each
    expert GEMM runs on T·top_k·etp/tp rows. Without SP every TP rank holds all T tokens: 1."""
    return np.where(_w(p.sp) > 0, _w(p.t_exp) / _w(p.tp), 1.0)


def causal_factor(train):
    """Share of the s² attention square computed: ½ for causal flash kernels, 1 for eager."""
    return 0.5 if train.attention == "flash" else 1.0


ATTENTION_TILE = 128
"""Key-block edge of flash-class attention kernels (FlashAttention-2/3, cuDNN fused attention)."""
ATTENTION_ROW_TILES = 4.7
"""Fixed work per query block of a flash kernel (Q load, softmax finalisation, O/LSE store, the
backward's dQ pass) in key-block equivalents: FlexAttention fwd+bwd on an H200, d = 64, s = 4096,
B = 4, 64 heads, causal 7.24 ms and 128-token window 2.28 ms (`benchmarks/gpu_kernels.py`,
benchmarks/results/h200_kernels.json): (16.5 + c) : (2 + c) = 7.24 : 2.28 → c = 4.7."""
ATTENTION_RATE_SEQ = 5120
"""Sequence length (per kernel call: seq_len / cp) at which the profiles' [attention] rates hold.
A causal flash kernel spends, per query block, the s/(2B) + ½ key blocks it visits plus the fixed
ATTENTION_ROW_TILES, so its rate at s is the profile rate × e(s)/e(ATTENTION_RATE_SEQ)
(`attention_seq_efficiency`). Fitted once, jointly on modern_runs.json, the Megatron-Bridge archive
and public_runs.json, with the runs outside the project's sets held out: the mean of their three
mean errors at 4096 / 5120 / 6144 / 8192 was 6.37 / 6.30 / 6.31 / 6.49 % when fitted, and after the
later GB200 and async-TP refits 6.10 / 5.96 / 5.95 / 6.11 %. Since llm-foundry's Triton kernel reads
its own length (ATTENTION_RATE_SEQ_KERNEL), no public run depends on it and the criterion reads
5.91 / 5.98 / 6.07 / 6.29 % (4096 and 5120 within 0.1 point; the held-out runs 6.00 / 5.90 %):
not refitted (`python benchmarks/attention_rate_seq.py` prints the table) [calibrated]."""
ATTENTION_RATE_SEQ_KERNEL = {"triton": 16384}
"""Kernel families whose profile rate holds at another sequence length than ATTENTION_RATE_SEQ:
MosaicML's Triton flash kernel (llm-foundry `attn_impl: triton`, the benchmark default of
scripts/train/benchmarking/submit_benchmarks.py 2023–24) runs at the FlashAttention-2-class rate
of the profiles, which was fitted on the llm-foundry A100 rows of 16k–65k tokens (a100-80gb.toml
`attention_efficiency`; FA2's own stand-alone figures, Dao 2023 Fig. 4, are at 16k too): its rate
holds at 16384 [sourced: the fit's sequence lengths]."""
ATTENTION_IN_TRAINING = 0.54
"""Share of an attention kernel's stand-alone rate it keeps inside a training step: the profiles'
[attention] rates carry it (the A100 llm-foundry fit: FA2 0.30 of peak in training against 0.56
stand-alone, Dao 2023)."""


def keys_per_query(model, train, tile: float = 0.0) -> float:
    """Average keys one query attends to, over layers: causal flash s/2; a sliding window w
    attends min(i+1, w) keys at position i, w − w²/(2s) on average; eager kernels compute the
    full square (s) on global layers.

    With `tile` (the kernel's key block B), the keys whose *time* a flash kernel spends on a
    windowed layer, relative to the causal layer its rate was fitted on: per query block a window
    visits ⌈w/B⌉ + 1 key blocks against the causal s/(2B) + ½, each plus the fixed per-block work
    c = ATTENTION_ROW_TILES, so it costs (⌈w/B⌉ + 1 + c)/(s/(2B) + ½ + c) of the causal time."""
    s = float(train.seq_len)
    full = s * causal_factor(train)
    w = float(model.sliding_window)
    if not w:
        return full
    win = w - w * w / (2.0 * s) if w < s else full
    if tile and w < s and train.attention == "flash":
        c = ATTENTION_ROW_TILES
        win = full * min((np.ceil(w / tile) + 1.0 + c) / (s / (2.0 * tile) + 0.5 + c), 1.0)
    share = model.windowed_share
    return share * win + (1.0 - share) * full


def attention_seq_efficiency(s):
    """Share of a causal flash kernel's time spent on key blocks at s query/key positions per call:
    e(s) = (s/2B) / (s/2B + ½ + c), B = ATTENTION_TILE, c = ATTENTION_ROW_TILES (each query block
    visits s/2B + ½ key blocks on average and does c blocks' worth of fixed work). Long sequences
    amortise the fixed work: e(4096) = 0.755, e(32768) = 0.961 (the benchmark figures of
    FlashAttention-2, Dao 2023 §4.1, rise with sequence length in the same way)."""
    kb = _w(s) / (2.0 * ATTENTION_TILE)
    return kb / (kb + 0.5 + ATTENTION_ROW_TILES)


def head_dim_factor(hw, model, rate128):
    """Flash-attention rate at the model's head dims ÷ `rate128`, the rate fitted at d = 128.

    A score costs 4·d̄ matmul FLOPs (QKᵀ and P·V, d̄ = (d_qk + d_v)/2) plus one exponential on the
    special-function units (FlashAttention-3 §3.1: exp, not matmul, bounds small heads):
    t(d̄) = 4·d̄/R_mm + 1/S. The fitted rate fixes R_mm (4·128/rate128 = 4·128/R_mm + 1/S), so
    rate(d̄) = 4·d̄/t(d̄) needs no other parameter; S = `hw.sfu_exp_per_s` (0: no dependence).
    The split is the kernel's own, so `rate128` is first taken back to its stand-alone rate
    (÷ ATTENTION_IN_TRAINING). Measured on an H200 (benchmarks/results/h200_kernels.json), d = 64
    against 128: cuDNN 0.79 (this formula 0.80), FA2 0.90 (0.86)."""
    S = hw.sfu_exp_per_s
    if not S:
        return 1.0
    rate128 = rate128 / ATTENTION_IN_TRAINING
    t_mm128 = np.maximum(512.0 / rate128 - 1.0 / S, 0.5 * 512.0 / rate128)   # matmul share of t(128)
    d = (model.d_qk + model.d_v) / 2.0
    return (512.0 / rate128) / (t_mm128 * d / 128.0 + 1.0 / S) * d / 128.0


def gemm_peak(hw, train):
    """The peak the job's transformer GEMMs run at (MFU's denominator)."""
    return GemmFormat(train, hw).peak if train.precision in ("fp8", "fp4") else hw.peak(matmul_dtype(train, hw))


def attention_linears_rank(model, tp):
    """(N, K) of each attention GEMM on one TP rank, and whether it is column-parallel (its wgrad
    overlaps the input-gradient collective): standard attention keeps whole KV heads when
    a_kv < t (replicated); MLA down-projections are duplicated on every rank."""
    tp = _w(tp)
    out = []
    for name, k, n, split in model.attn_linears():
        if name == "qkv":
            kv_loc = np.maximum(model.a_kv / tp, 1.0) * model.d_head
            out.append((model.q_width / tp + 2 * kv_loc, _w(k), True))
        elif split == "col":
            out.append((n / tp, _w(k), True))
        elif split == "row":
            out.append((_w(n), k / tp, False))
        else:
            out.append((_w(n), _w(k), False))
    return out


def layer_compute_times(ctx, hw, p):
    """Per transformer layer, per micro-batch, one rank: dict of forward/backward times (s).

    Keys: gemm_f, gemm_b, attn_f, attn_b, elem_f, elem_b (memory-bound), attn_elem_f (the part of the
    elementwise work inside the attention core: eager softmax/dropout — repeated by selective
    recompute), flops_f (hardware FLOPs of one forward), wgrad_col (column-parallel weight-gradient
    GEMMs, under which async TP hides its backward collectives), mm_rc (the matmuls op-level SAC
    recomputes: every second one), up_f (MLA's q/kv up-projection GEMMs, forward: what Megatron's
    mla_up_proj recompute re-runs; its RoPE pass is left in elem_f), ln_f / moe_act_f / mlp_f (the
    forwards of the layernorm, moe_act and mlp recompute modules: the two pre-norms, the expert
    activation, the dense layers' MLP), quant_f/quant_b (FP8/FP4 quantization work, inside elem_*).

    The runtime (`train.rt.kernels`) sets the memory-bound passes (fused vs eager norms, RoPE,
    activation, loss), the attention kernel (its efficiency on this GPU: `hw.attention_eff`) and
    whether experts run as one grouped GEMM; the recipe sets the GEMM dtype and quantization work.
    """
    m, t = ctx.model, ctx.train
    kern = t.rt.kernels
    tp, cp = _w(p.tp), _w(p.cp)
    T = _w(p.mbs) * t.seq_len / cp                         # GEMM rows (tokens) per rank
    bA = t.b_A
    fmt = GemmFormat(t, hw)
    peak16 = hw.peak("bf16") if t.precision != "fp32" else hw.peak(matmul_dtype(t, hw))   # fp32: TF32 where it runs
    gb = fmt.bytes
    share16 = fmt.bf16_share

    def gemm(M, N, K, batch=1.0):
        f, b = gemm_fwd_bwd(hw, M, N, K, gb, fmt.peak, batch, fmt.eff)
        if share16:
            f16, b16 = gemm_fwd_bwd(hw, M, N, K, bA, peak16, batch)
            f, b = (1 - share16) * f + share16 * f16, (1 - share16) * b + share16 * b16
        return f, b

    def wgrad(M, N, K, batch=1.0):
        return gemm_time(hw, K, N, M, gb, fmt.peak, batch, fmt.eff)

    h = m.hidden
    fm = m.n_moe_layers / m.layers if m.is_moe else 0.0
    t_sp = np.where(_w(p.sp) > 0, tp, 1.0)
    g_exp = expert_token_share(p)                          # routed-expert rows per token (T/tp·etp under SP)
    gf = gbk = flops = wgrad_col = _w(0.0)
    mm_f = []                                              # forward time of each matmul, execution order
    q_in = q_out = _w(0.0)                                 # elements quantized per token: GEMM inputs (fwd), output grads (bwd)
    sac_rc = _w(0.0)                                        # forward matmul time op-level SAC recomputes
    kv_share = (2 * m.kv_width / (m.q_width + 2 * m.kv_width)) / 2 if not m.mla else 0.0   # wk of wq,wk,wv
    up_f = _w(0.0)                                         # MLA q/kv up-projections, forward (mla_up_proj recompute)
    names = [nm for nm, *_ in m.attn_linears()]
    n_gemm = float(len(names))                              # GEMM launches per forward (host ops)
    n_exp_ops = _w(0.0)                                     # … of them the routed experts' (outside per-layer graphs)
    gexp_f = _w(0.0)                                        # the routed experts' forward GEMM time
    for nm, (N, K, col) in zip(names, attention_linears_rank(m, tp)):
        f, b = gemm(T, N, K)
        gf, gbk, flops = gf + f, gbk + b, flops + 2 * T * N * K
        mm_f.append(f)
        if nm in ("q_up", "kv_up"):
            up_f = up_f + f
        # torchtitan's order wq, wk, wv, wo, w1, w3, w2 saves the 1st, 3rd, … mm outputs: wk, wo, w3 rerun
        sac_rc = sac_rc + f * (kv_share if col and len(mm_f) == 1 else (1.0 if not col else 0.0))
        if col:
            wgrad_col = wgrad_col + wgrad(T, N, K)
        q_in, q_out = q_in + K, q_out + N
    gmul = 2 if m.gated_mlp else 1
    mlp_gf = _w(0.0)                                        # dense-layer MLP GEMMs, forward (mlp recompute)
    if fm < 1.0:
        f_loc = m.ffn_hidden / tp
        for (N, K, col) in ((gmul * f_loc, h, True), (h, f_loc, False)):
            f, b = gemm(T, N, K)
            gf, gbk, flops = gf + (1 - fm) * f, gbk + (1 - fm) * b, flops + (1 - fm) * 2 * T * N * K
            mlp_gf = mlp_gf + (1 - fm) * f
            n_gemm = n_gemm + (1 - fm)
            mm_f.append((1 - fm) * f)
            sac_rc = sac_rc + (1 - fm) * f * ((0.5 if m.gated_mlp else 0.0) if col else (0.0 if m.gated_mlp else 1.0))
            if col:
                wgrad_col = wgrad_col + (1 - fm) * wgrad(T, N, K)
            q_in, q_out = q_in + (1 - fm) * K, q_out + (1 - fm) * N
    if fm > 0:
        fe = m.f_expert / _w(p.t_exp)
        Me = T * g_exp * m.top_k                           # tokens routed to this rank's experts (balanced)
        n_local = m.num_experts / _w(p.ep)
        Mper = Me / n_local                                # per expert GEMM rows
        dglu_slow = (kern.moe_fused_mlp and m.expert_bias and kern.moe_dglu_dbias_factor != 1.0
                     and fmt.recipe is not None and fmt.recipe.min_arch == "blackwell"
                     and getattr(hw, "arch", "") == "blackwell")
        for (N, K, col) in ((gmul * fe, h, True), (h, fe, False)):
            if kern.moe_grouped_gemm:
                f, b = gemm(Mper, N, K, batch=n_local)     # one grouped GEMM over the local experts
            else:
                f, b = gemm(Mper, N, K)
                f, b = n_local * f, n_local * b
            if not col and dglu_slow:
                # FC2's dgrad runs fused with dGLU + dbias (Kernels.moe_dglu_dbias_factor): the
                # dgrad (the forward's shape) takes factor × its GEMM time
                b = b + np.where(_w(p.t_exp) <= 1, kern.moe_dglu_dbias_factor - 1.0, 0.0) * f
            gf, gbk = gf + fm * f, gbk + fm * b
            gexp_f = gexp_f + fm * f
            n_exp_ops = n_exp_ops + fm * (1.0 if kern.moe_grouped_gemm else n_local)
            flops = flops + fm * 2 * Me * N * K
            mm_f.append(fm * f)
            sac_rc = sac_rc + fm * f * ((0.5 if m.gated_mlp else 0.0) if col else (0.0 if m.gated_mlp else 1.0))
            q_in, q_out = q_in + fm * g_exp * m.top_k * K, q_out + fm * g_exp * m.top_k * N
        f, b = gemm_fwd_bwd(hw, T / t_sp, m.num_experts, h, bA, peak16)   # router (BF16/FP32), local tokens
        gf, gbk, flops = gf + fm * f, gbk + fm * b, flops + fm * 2 * T / t_sp * m.num_experts * h
        n_gemm = n_gemm + fm * (1.0 + (2.0 if m.shared_expert_ffn_hidden else 0.0))
        if m.shared_expert_ffn_hidden:
            fs = m.shared_expert_ffn_hidden / tp
            for (N, K) in ((gmul * fs, h), (h, fs)):
                f, b = gemm(T, N, K)
                gf, gbk, flops = gf + fm * f, gbk + fm * b, flops + fm * 2 * T * N * K
                mm_f.append(fm * f)
                q_in, q_out = q_in + fm * K, q_out + fm * N
    mm_rc = sac_rc
    # attention core: Q·Kᵀ (d_qk) and P·V (d_v) over the keys each query attends to
    heads_loc = m.heads / tp
    kpq = keys_per_query(m, t)
    attn_flops = 2.0 * T * kpq * heads_loc * (m.d_qk + m.d_v)
    if t.attention == "flash":
        eff = hw.attention_eff(kern.attention_sinks if (m.attn_sinks and kern.attention_sinks) else kern.attention)
        rate = peak16 * eff
        if kern.fp8_attention and t.precision in ("fp8", "fp4") and "fp8" in hw.peak_flops:
            # FP8 fused attention (cuDNN): the FP8 peak at FP8_ATTENTION_EFFICIENCY of the BF16 kernel's share
            rate = hw.peak("fp8") * eff * FP8_ATTENTION_EFFICIENCY
        rate = rate * head_dim_factor(hw, m, rate)
        # the fixed per-query-block work amortised over the keys of one call (ring CP: s/cp per call)
        ref = ATTENTION_RATE_SEQ_KERNEL.get(kern.attention, ATTENTION_RATE_SEQ) if not (m.attn_sinks and kern.attention_sinks) \
            else ATTENTION_RATE_SEQ
        rate = rate * attention_seq_efficiency(t.seq_len / cp) / attention_seq_efficiency(ref)
        work = 2.0 * T * keys_per_query(m, t, ATTENTION_TILE) * heads_loc * (m.d_qk + m.d_v)
        attn_f = work / rate + hw.kernel_overhead_s
        attn_b = 2.5 * work / rate + 2 * hw.kernel_overhead_s
        attn_elem_f = _w(0.0)
        attn_elem_b = _w(0.0)
    else:
        # two batched GEMMs (QKᵀ, P·V) of (s × d × s) over mbs·heads; then the s² elementwise kernels
        B = _w(p.mbs) * heads_loc
        Sq = t.seq_len / cp                                       # query rows per sequence
        qk = gemm_time(hw, Sq, t.seq_len, m.d_qk, bA, peak16, batch=B)      # one bmm over mbs·heads
        pv = gemm_time(hw, Sq, m.d_v, t.seq_len, bA, peak16, batch=B)
        attn_f = qk + pv
        attn_b = 2.0 * attn_f
        drop = 1.0 if t.dropout else 0.0
        sq = _w(p.mbs) * heads_loc * (t.seq_len / cp) * t.seq_len   # score elements per rank
        attn_elem_f = membound_time(hw, sq * (2 * bA + drop * (2 * bA + 1)), 1 + drop)
        attn_elem_b = membound_time(hw, sq * (3 * bA + drop * (2 * bA + 1)), 1 + drop)
    flops = flops + attn_flops
    # elementwise: norms, residual(+dropout), activation, rotary — passes from the runtime's kernels
    drop = 1.0 if t.dropout else 0.0
    norm_passes = kern.rmsnorm_passes if m.norm == "rmsnorm" else 2.0
    h_bytes = T * h * ((2 * norm_passes + 2 * kern.residual_passes) * bA + 2 * drop) / t_sp
    act = (3 if m.gated_mlp else 2) + kern.act_extra_passes * (1 if m.gated_mlp else 0)
    f_dense = m.ffn_hidden / tp
    act_bytes = T * act * bA * np.where(fm >= 1.0, 0.0, (1 - fm) * f_dense)
    eager_f = eager_b = _w(0.0)                           # eager expert bias / GLU clamp bytes
    eager_kf = eager_kb = _w(0.0)                         # … and their kernel launches
    if fm > 0:
        act_bytes = act_bytes + fm * T * g_exp * m.top_k * act * bA * m.f_expert / _w(p.t_exp)
        act_bytes = act_bytes + fm * T * g_exp * m.top_k * h * bA * (kern.moe_permute_passes + kern.moe_token_passes)
        if m.shared_expert_ffn_hidden:
            act_bytes = act_bytes + fm * T * act * bA * m.shared_expert_ffn_hidden / tp
        bf, bb, kf, kb = moe_eager_bytes(m, kern, bA, m.num_experts / _w(p.ep), _w(p.t_exp))
        eager_f, eager_b = fm * T * g_exp * bf, fm * T * g_exp * bb
        eager_kf, eager_kb = fm * kf, fm * kb
        if kern.moe_grouped_gemm and kern.moe_grouped_gemm_per_expert:
            # one launch per local expert for each expert GEMM (2 forward, 4 backward) beyond the
            # one the batched GEMM time already holds; none under TE's op fuser
            extra = expert_launches(m, kern, p) - 1.0
            eager_kf, eager_kb = eager_kf + fm * 2.0 * extra, eager_kb + fm * 4.0 * extra
    rot = (m.heads * m.qk_rope_head_dim + m.qk_rope_head_dim) / tp if m.mla else \
        (m.q_width / tp + np.maximum(m.a_kv / tp, 1.0) * m.d_head)
    unfused_rope = m.position == "rope" and m.rope_mscale != 1.0 and kern.rope_unfused_passes > 0
    rope_p = kern.rope_unfused_passes if unfused_rope else kern.rope_passes
    rope = rope_p * T * rot * bA if m.position == "rope" else 0.0
    qb = fmt.quant_bytes(bA) * (1 - share16)
    quant_f, quant_b = T * q_in * qb, T * q_out * qb
    # quantization launches: per quantized GEMM input (forward) and output gradient (backward), the
    # recipe's kernels each (Recipe.quant_kernels); the routed experts quantize per local expert
    # where the grouped GEMM loops over them (TE GroupedLinear split_quantize)
    qk = (fmt.recipe.quant_kernels * (1 - share16)) if fmt.recipe else 0.0
    n_mod = float(len(names)) + (1 - fm) * 2.0 + fm * (2.0 if m.shared_expert_ffn_hidden else 0.0)
    n_q_exp = _w(0.0)
    if fm > 0:
        n_q_exp = fm * 2.0 * expert_launches(m, kern, p)
    quant_k = qk * (n_mod + n_q_exp)
    quant_k_exp = qk * n_q_exp
    n_k = kern.membound_kernels                            # memory-bound launches (GEMMs count their own)
    spc = _w(0.0)
    if kern.sp_collective_copies:
        # DTensor SP: the four sequence-dim collectives of a layer each copy the whole micro-batch's
        # activation (chunk + cat around the dim-0 collective), forward and backward alike
        copies = (tp > 1) & (_w(p.sp) > 0) & (_w(p.mbs) > 1)
        spc = np.where(copies, 8.0 * T * h * bA, 0.0)
        n_k = n_k + np.where(copies, 4.0, 0.0)
    if unfused_rope:
        n_k = n_k + 10                                     # eager RoPE on Q and K: 5 kernels each
    mla_ef, mla_eb, mla_kf, mla_kb = mla_assembly_elements(m, kern, tp)
    mla_f, mla_b = T * mla_ef * bA, T * mla_eb * bA
    elem_f = membound_time(hw, h_bytes + act_bytes + rope + spc + quant_f + eager_f + mla_f,
                           n_k + eager_kf + mla_kf + quant_k)
    elem_b = membound_time(hw, 2.0 * (h_bytes + act_bytes + rope) + spc + quant_b + eager_b + mla_b,
                           n_k + 2 + eager_kb + mla_kb + quant_k)
    if kern.cuda_graphs and not kern.cuda_graph_experts:
        # per-layer graphs leave a dropless MoE's routed experts eager: their launches keep the full
        # per-kernel overhead (runtimes.spec.Kernels.cuda_graph_experts)
        extra = eager_kernel_overhead(hw, kern) - hw.kernel_overhead_s
        elem_f, elem_b = elem_f + eager_kf * extra, elem_b + eager_kb * extra
    # kernels issued per layer (host ops): GEMMs, the attention kernel(s), memory-bound passes, the
    # experts' eager work; the routed experts' share stays eager under per-layer CUDA graphs
    attn_k = 1.0 if t.attention == "flash" else 4.0
    kern_f = n_gemm + n_exp_ops + attn_k + n_k + eager_kf + mla_kf + quant_k
    kern_b = 2.0 * (n_gemm + n_exp_ops) + 2.0 * attn_k + n_k + 2 + eager_kb + mla_kb + quant_k
    # forwards Megatron-Core's --recompute-modules re-run: the two pre-norms (layernorm), the expert
    # activation (moe_act), the dense layers' MLP GEMMs and activation (mlp)
    ln_f = membound_time(hw, T * h * 2 * norm_passes * bA / t_sp, 2)
    moe_act_f = membound_time(hw, fm * T * g_exp * m.top_k * act * bA * m.f_expert / _w(p.t_exp), 1) if fm > 0 else _w(0.0)
    mlp_f = mlp_gf + (membound_time(hw, (1 - fm) * T * act * bA * m.ffn_hidden / tp, 1) if fm < 1.0 else 0.0)
    return {"gemm_f": gf, "gemm_b": gbk, "wgrad_col": wgrad_col, "attn_f": attn_f, "attn_b": attn_b, "elem_f": elem_f,
            "elem_b": elem_b, "attn_elem_f": attn_elem_f, "attn_elem_b": attn_elem_b, "flops_f": flops,
            "mm_rc": mm_rc, "up_f": up_f, "ln_f": ln_f, "moe_act_f": moe_act_f, "mlp_f": mlp_f,
            "quant": membound_time(hw, quant_f + quant_b, 0),
            "kern_f": kern_f, "kern_b": kern_b, "gemm_ops": n_gemm + n_exp_ops, "kern_exp_f": n_exp_ops + eager_kf + quant_k_exp, "kern_exp_b": 2.0 * n_exp_ops + eager_kb + quant_k_exp,
            "n_local": (m.num_experts / _w(p.ep)) if fm > 0 else _w(0.0), "gemm_exp_f": gexp_f,
            "attn_k": _w(attn_k), "elem_k_f": n_k + mla_kf + quant_k - quant_k_exp}


def expert_launches(m, kern, p):
    """Launches per expert GEMM module (and per quantized expert input) on one rank: one for a
    grouped GEMM kernel or TE's fused MLP op (without expert TP), one per local expert where the
    grouped GEMM loops over them (TE GroupedLinear: `moe_grouped_gemm_per_expert`) or the experts
    run as a loop of GEMMs."""
    n_local = m.num_experts / _w(p.ep)
    if kern.moe_grouped_gemm and not kern.moe_grouped_gemm_per_expert:
        return _w(1.0) + 0.0 * n_local
    if kern.moe_grouped_gemm:
        return np.where(kern.moe_fused_mlp & (_w(p.t_exp) <= 1), 1.0, n_local)
    return _w(n_local)


def mla_assembly_elements(m, kern, tp=1.0):
    """Per token, one rank: elements an MLA layer's Q/K/V assembly moves (reads + writes) in the
    forward and the backward, and its kernel launches each way (`Kernels.mla_qkv`); h = heads / tp,
    d_n, d_r, d_v the no-RoPE, RoPE and value head widths, d_qk = d_n + d_r. The q RoPE itself is the
    `rope_passes` term.

      fused (Megatron-Core fused_apply_mla_rope_for_kv): forward reads kv (h·(d_n + d_v)) and writes
            K, V (h·(d_qk + d_v)); backward the mirror — 1 kernel each way
      eager (cat / expand / contiguous): forward q cat 2·h·d_qk, k cat h·d_n + h·d_qk, v copy 2·h·d_v;
            backward q-split cat 2·h·d_qk, k_pe expand-sum h·d_r, kv-split cat 2·h·(d_n + d_v) —
            3 kernels each way
    Non-MLA models: zeros."""
    if not m.mla:
        return 0.0, 0.0, 0.0, 0.0
    h = m.heads / _w(tp)
    dn, dr, dv = m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim
    dqk = dn + dr
    if kern.mla_qkv == "eager":
        f = 2.0 * h * dqk + h * (dn + dqk) + 2.0 * h * dv
        b = 2.0 * h * dqk + h * dr + 2.0 * h * (dn + dv)
        return f, b, 3.0, 3.0
    f = h * (dn + dv) + h * (dqk + dv)
    return f, f, 1.0, 1.0


def moe_eager_bytes(m, kern, bA, n_local, etp=1.0):
    """HBM bytes per token of one MoE layer's eager expert-bias and GLU-clamp work (forward,
    backward) and their kernel launches (forward, backward), on one rank.

    Expert FC2 bias, `kern.moe_bias_eager` (Megatron-Core `TEGroupedMLP._apply_bias`: per local
    expert t + b·p, then cat and a cast back), per routed token × hidden element, p the routing
    probabilities' bytes (fp32 under the flex dispatchers, else b_A): forward b·p (p), the add
    (b_A + 2p), cat (2p), cast (p + b_A when p ≠ b_A); backward the cast back and the 16-bit grad
    of t (2·(p + b_A) when p ≠ b_A) and the b and p gradients, g·p then a sum and g·b then a sum
    (3p each). Kernels 2 per expert + 2 forward, 4 per expert + 2 backward.
    GLU clamp, `kern.glu_clamp_eager` with `m.glu_limit`, per routed token × FC1 output element
    (2·f_e): two clamps and a cat forward (4·b_A), clamp backward (read grad and input, write:
    3·b_A) and the chunk's cat backward (2·b_A); 3 kernels each way. Neither under the TE op fuser
    (`kern.moe_fused_mlp`) with expert TP 1."""
    bf = bb = kf = kb = _w(0.0)
    if not m.is_moe:
        return bf, bb, kf, kb
    k = m.top_k
    # TE's op fuser takes over the expert MLP only with expert TP 1 (Megatron-Core falls back otherwise)
    fused = kern.moe_fused_mlp & (_w(etp) <= 1)
    if m.expert_bias and kern.moe_bias_eager:
        pb = 4.0 if kern.fused_dispatch else bA
        cast = (pb + bA) if pb != bA else 0.0
        on = np.where(fused, 0.0, 1.0)
        bf = bf + on * k * m.hidden * (5.0 * pb + bA + cast)
        bb = bb + on * k * m.hidden * (6.0 * pb + 2.0 * cast)
        kf, kb = kf + on * (2.0 * n_local + 2.0), kb + on * (4.0 * n_local + 2.0)
    if m.glu_limit and m.gated_mlp and kern.glu_clamp_eager:
        on = np.where(fused, 0.0, 1.0)
        e2 = k * 2.0 * m.f_expert / _w(etp)                # FC1 output elements per token
        bf, bb = bf + on * e2 * 4.0 * bA, bb + on * e2 * 5.0 * bA
        kf, kb = kf + on * 3.0, kb + on * 3.0
    return bf, bb, kf, kb


def head_compute_times(ctx, hw, p):
    """Embedding (first stage) and logits + cross-entropy (last stage), per micro-batch, one rank."""
    m, t = ctx.model, ctx.train
    tp = _w(p.tp)
    T = _w(p.mbs) * t.seq_len / _w(p.cp)
    Vl = vocab_padded(ctx, p) / tp
    peak = hw.peak("bf16") if t.precision != "fp32" else hw.peak(matmul_dtype(t, hw))
    lf, lb = gemm_fwd_bwd(hw, T, Vl, m.hidden, t.b_A, peak)
    lp = t.rt.kernels.loss_passes                    # fp32 passes per logit (fused vocab-parallel CE: 3)
    ce_f = membound_time(hw, T * Vl * (t.b_A + lp * 4.0), 3)
    ce_b = membound_time(hw, T * Vl * (4.0 + t.b_A) * lp / 3.0, 2)
    emb_f = membound_time(hw, T * m.hidden * t.b_A * 2, 1)
    emb_b = membound_time(hw, T * m.hidden * t.b_A * 2 + Vl * m.hidden * t.b_G, 2)
    return {"emb_f": emb_f, "emb_b": emb_b, "logits_f": lf + ce_f, "logits_b": lb + ce_b,
            "logits_flops_f": 2.0 * T * Vl * m.hidden}


def model_flops_per_step(ctx, p=None, *, causal: bool = False, router: bool = True):
    """Model FLOPs per optimizer step, whole cluster (recompute excluded), Megatron-Core convention:
    6 × (GEMM FLOPs of active weights + logits) per token + attention 6·L·2·k̄·H·(d_qk + d_v) per
    token, k̄ = the keys a query attends to counted as the full square s on global layers (Megatron
    does not halve for causality) and the window w on sliding-window layers; MLA uses its own
    head widths; MTP modules add their layer, projection and a second logits GEMM.

    `causal=True, router=False` is Megatron-Bridge's count (`training/utils/flop_utils.py`
    transformer_flops, the 26.x containers): the causal average s/2 on global layers and
    w − w(w − 1)/(2s) on windowed ones, no router GEMM."""
    m, t = ctx.model, ctx.train
    tokens = t.tokens_per_step
    if m.states_only:
        return 6.0 * m.total_params() * tokens
    h = m.hidden
    attn_w = sum(k * n for _, k, n, _ in m.attn_linears())
    fm = m.n_moe_layers / m.layers if m.is_moe else 0.0
    dense_mlp = (3 if m.gated_mlp else 2) * h * m.ffn_hidden
    moe_mlp = m.top_k * (3 if m.gated_mlp else 2) * h * m.f_expert + (h * m.num_experts if router else 0)
    if m.shared_expert_ffn_hidden:
        moe_mlp += (3 if m.gated_mlp else 2) * h * m.shared_expert_ffn_hidden
    per_layer = attn_w + (1 - fm) * dense_mlp + fm * moe_mlp
    s = float(t.seq_len)
    w = float(m.sliding_window)
    k_full = s / 2.0 if causal else s
    k_win = (w - w * (w - 1.0) / (2.0 * s) if causal else w) if w < s else k_full
    k_bar = (m.windowed_share * k_win + (1 - m.windowed_share) * k_full) if w else k_full
    attn = m.layers * k_bar * m.heads * (m.d_qk + m.d_v)   # × 6 → fwd + bwd of QKᵀ and PV per token
    gemm = m.layers * per_layer + h * m.vocab
    if m.mtp_layers:
        mtp_layer = attn_w + (moe_mlp if m.is_moe else dense_mlp)
        gemm += m.mtp_layers * (mtp_layer + 2 * h * h + h * m.vocab)
        attn += m.mtp_layers * k_full * m.heads * (m.d_qk + m.d_v)
    return tokens * (6.0 * gemm + 6.0 * attn)
