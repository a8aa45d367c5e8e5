"""Per-step communication volume per mesh axis, per rank (placement_semantics.md §3).

Bytes *sent* per device, bandwidth-optimal algorithms (nccl-tests bus-bandwidth factors, §3.1):
AR(S,n) = 2(n−1)/n·S, RS = AG = A2A = (n−1)/n·S, P2P = S. Numpy-broadcastable over plan fields and
the stage index. The step-time model (autoplace.cost.step) turns the same per-collective pieces into
time; `collectives()` lists them so volume and time come from one place.
"""

from __future__ import annotations

import numpy as np

from autoplace.cost.memory import (
    _w,
    block_recompute,
    cp_kv_bytes,
    k1_active,
    layers_on_stage,
    pp_boundary_bytes,
    shard_groups,
    stage_param_counts,
    vocab_padded,
)
from autoplace.cost.precision import param_gather_bytes
from autoplace.plan import micro_batches


def ar(S, n):
    n = _w(n)
    return 2.0 * (n - 1.0) / n * S


def rs(S, n):
    n = _w(n)
    return (n - 1.0) / n * S


ag = rs
a2a = rs


# ---- data-parallel family (§3.2) ------------------------------------------------------------
def dp_volumes(ctx, p, i):
    """(intra, inter) bytes per rank per step for the DP family on stage i.

    intra = over the shard group N (= dp_shard [× cp]); inter = over dp_replicate r (HSDP), or the
    whole dp×cp group for DDP. m_ga = micro-batches per step. K1 (pp > 1, ZeRO-2/3) reduces once per
    step: one RS(G) at reduce width + one AG(P) (m + 1 AG(P) when resharding after forward).
    """
    t = ctx.train
    bG = t.b_G
    bP = t.b_P if ctx.model.states_only else param_gather_bytes(t)      # parameter all-gather width
    bGr, bGe = t.b_G_reduce, t.b_G_reduce_expert
    dense, expert = stage_param_counts(ctx, p, i)
    nd, ne = shard_groups(ctx, p)
    r = _w(p.dp_replicate)
    m = micro_batches(p, t.global_batch)
    pm, gm, om = _w(p.p_mode), _w(p.g_mode), _w(p.o_mode)
    k1 = k1_active(ctx, p)
    z3_regather = np.where(pm == 1, m + 1.0, 1.0)     # K1: gathers per step under PP

    def one(psi, n, full_group, bGr=bGr):
        # DDP: all-reduce over the whole data group (replicate × shard × cp)
        ddp = ar(psi * bG, full_group)
        z1 = rs(psi * bG, n) + ag(psi * bP, n)
        z2 = rs(psi * bGr, n) * m + ag(psi * bP, n)
        z3 = m * (2.0 * ag(psi * bP, n) + rs(psi * bGr, n))
        hold = m * (ag(psi * bP, n) + rs(psi * bGr, n))
        k1v = rs(psi * bGr, n) + z3_regather * np.where(pm > 0, ag(psi * bP, n), 0.0) \
            + np.where(pm == 0, ag(psi * bP, n), 0.0)
        intra = np.where(om == 0, 0.0,
                         np.where(gm == 0, z1,
                                  np.where(k1, k1v, np.where(pm == 0, z2, np.where(pm == 1, z3, hold)))))
        # inter: HSDP all-reduce of the 1/n shard over r (per micro-batch when G is reduced per micro-step)
        reduces = np.where((gm >= 1) & ~k1, m, 1.0)
        inter = np.where(om == 0, ddp, reduces * ar(psi * np.where(gm >= 1, bGr, bG) / n, r))
        return intra, inter

    cp_in = np.where(_w(getattr(p, "zero_over_cp", True)) > 0, 1.0, _w(p.cp))
    full_dense = _w(p.dp) * _w(p.cp)
    i_d, e_d = one(dense, nd, full_dense)
    d_exp = _w(ctx.world) / (_w(p.t_exp) * _w(p.ep) * _w(p.pp))
    i_e, e_e = one(expert, ne, d_exp, bGe)
    intra = i_d + i_e
    inter = e_d + e_e
    # cp outside the ZeRO group: an extra all-reduce over cp (rare; Megatron folds cp into the group)
    extra_cp = np.where((cp_in > 1) & (om > 0), ar(dense * bG, cp_in), 0.0)
    return intra, inter + extra_cp


# ---- tensor parallel (§3.3) -----------------------------------------------------------------
def tp_units_per_layer(p, rc=None):
    """Count of (t−1)/t·bsh·b_A units per layer per micro-batch: AR = 2 units, AG = RS = 1.

    TP: 4 AR = 8; + full recompute: 6 AR = 12. SP (Megatron implementation): 2 AG + 2 RS forward,
    2 RS + 2 AG backward + 2 re-AG for weight grads = 10; + full recompute repeats 4 → 14.
    """
    rc = _w(p.rc) if rc is None else _w(rc)
    full = rc == 2
    sp = _w(p.sp) > 0
    return np.where(sp, np.where(full, 14.0, 10.0), np.where(full, 12.0, 8.0))


def tp_bytes_per_layer(ctx, p, rc=None):
    """Bytes per rank per layer per micro-batch on the TP axis (T13, T21)."""
    m, t = ctx.model, ctx.train
    tp = _w(p.tp)
    s_loc = t.seq_len / _w(p.cp)
    bsh = _w(p.mbs) * s_loc * m.hidden * t.b_A
    base = tp_units_per_layer(p, rc) * (tp - 1.0) / tp * bsh
    # GQA with a_kv < t: fused QKV output all-gathered (fwd) and reduce-scattered (bwd) (§3.3, T21)
    rcv = _w(p.rc) if rc is None else _w(rc)
    qkv = 2.0 * (tp - 1.0) / tp * _w(p.mbs) * s_loc * (m.heads + 2 * m.a_kv) * m.d_head * t.b_A
    gqa = np.where(m.a_kv < tp, qkv * np.where(rcv == 2, 1.5, 1.0), 0.0)
    return base + gqa


def tp_bytes_stage(ctx, p, i):
    """TP bytes per rank per step on stage i: layers × micro-batches, plus embedding / output layer /
    vocab-parallel cross-entropy on the first and last stage, plus the SP norm-gradient all-reduce."""
    m, t = ctx.model, ctx.train
    if m.states_only or t.states_only:
        return _w(0.0) * _w(p.tp)
    tp = _w(p.tp)
    mb = micro_batches(p, t.global_batch)
    Li = layers_on_stage(ctx, p, i)
    rl, block = block_recompute(p, i, Li)
    per_layer = np.where(block, (Li - rl) * tp_bytes_per_layer(ctx, p, 0) + rl * tp_bytes_per_layer(ctx, p, 2),
                         Li * tp_bytes_per_layer(ctx, p))
    s_loc = t.seq_len / _w(p.cp)
    unit = (tp - 1.0) / tp * _w(p.mbs) * s_loc * m.hidden * t.b_A
    sp = _w(p.sp) > 0
    emb = np.where(_w(i) == 0, 2.0 * unit, 0.0)                    # AR fwd | RS fwd + AG bwd
    out = np.where(_w(i) == _w(p.pp) - 1, np.where(sp, 3.0, 2.0) * unit, 0.0)
    ce = np.where(_w(i) == _w(p.pp) - 1, ar(3.0 * _w(p.mbs) * s_loc * 4.0, tp), 0.0)
    norms = (2 * Li + np.where(_w(i) == _w(p.pp) - 1, 1, 0)) * m.norm_params()
    sp_norm = np.where(sp, ar(norms * t.b_G, tp), 0.0)
    return np.where(tp > 1, mb * (per_layer + emb + out + ce) + sp_norm, 0.0)


# ---- pipeline (§3.4) ------------------------------------------------------------------------
def p2p_message_bytes(ctx, p):
    """X_p2p = b·(s/c)·h·b_A, ÷t with SP or scatter/gather (Megatron sizes P2P as s/c, then ÷t):
    the boundary activation of `cost.memory.pp_boundary_bytes`, split over tp for the send."""
    return pp_boundary_bytes(ctx, p, scatter_gather=True)


def pp_sends(p, i):
    """Messages stage i sends per micro-batch: (2v − [i=0] − [i=p−1]) for v chunks (§3.4)."""
    v = np.where(_w(p.sched) == 1, _w(p.vpp), 1.0)
    i = _w(i)
    return 2.0 * v - (i == 0) - (i == _w(p.pp) - 1)


def pp_bytes_stage(ctx, p, i):
    m, t = ctx.model, ctx.train
    if m.states_only or t.states_only:
        return _w(0.0) * _w(p.tp)
    mb = micro_batches(p, t.global_batch)
    sends = mb * pp_sends(p, i) * p2p_message_bytes(ctx, p)
    # tied embeddings: all-reduce of the two copies over the embedding group (first & last stage)
    tied = m.tied_embeddings
    emb = vocab_padded(ctx, p) * m.hidden / _w(p.tp) * t.b_G
    tied_ar = np.where(tied & ((_w(i) == 0) | (_w(i) == _w(p.pp) - 1)), ar(emb, 2), 0.0)
    return np.where(_w(p.pp) > 1, sends + tied_ar, 0.0)


# ---- context and expert parallel (§3.5, §3.6) -----------------------------------------------
def cp_bytes_per_layer(ctx, p):
    c = _w(p.cp)
    S = cp_kv_bytes(ctx, p)
    n_coll = np.where(_w(p.rc) == 2, 4.0, 3.0)        # fwd AG, bwd AG + RS; recompute repeats the AG
    return n_coll * (c - 1.0) / c * S


def cp_bytes_stage(ctx, p, i):
    if ctx.model.states_only or ctx.train.states_only:
        return _w(0.0) * _w(p.tp)
    mb = micro_batches(p, ctx.train.global_batch)
    return np.where(_w(p.cp) > 1, mb * layers_on_stage(ctx, p, i) * cp_bytes_per_layer(ctx, p), 0.0)


def ep_bytes_per_layer(ctx, p):
    m, t = ctx.model, ctx.train
    e = _w(p.ep)
    t_sp = np.where(_w(p.sp) > 0, _w(p.tp), 1.0)
    tokens = _w(p.mbs) * t.seq_len / (_w(p.cp) * t_sp)
    n = np.where(_w(p.rc) == 2, 6.0, 4.0)
    return n * (e - 1.0) / e * tokens * m.top_k * m.hidden * t.b_A


def ep_bytes_stage(ctx, p, i):
    m = ctx.model
    if m.states_only or ctx.train.states_only or not m.is_moe:
        return _w(0.0) * _w(p.tp)
    mb = micro_batches(p, ctx.train.global_batch)
    moe_layers = layers_on_stage(ctx, p, i) * m.n_moe_layers / m.layers
    return np.where(_w(p.ep) > 1, mb * moe_layers * ep_bytes_per_layer(ctx, p), 0.0)


# ---- offload (§3.7) -------------------------------------------------------------------------
def offload_bytes_stage(ctx, p, i):
    """Host-link bytes per rank per step (DeepSpeed as implemented, §3.7)."""
    t = ctx.train
    dense, expert = stage_param_counts(ctx, p, i)
    nd, _ = shard_groups(ctx, p)
    psi = (dense + expert) / nd
    m = micro_batches(p, t.global_batch)
    off = _w(p.off)
    phi = _w(p.offload_fraction)
    base = 4.0 * psi + t.b_P * psi                            # fp32 grads D2H + 16-bit params H2D
    staging = np.where(m > 1, np.where(_w(p.g_mode) >= 1, (2 * m - 1) * t.b_G * psi, 2 * t.b_G * psi), 0.0)
    opt = np.where(off >= 1, phi * (base + staging), 0.0)
    params = np.where(off >= 3, 2.0 * m * t.b_P * psi + m * t.b_G * psi, 0.0)
    return opt + params


def comm_bytes_per_step(ctx, p, i=0):
    """{dp, dp_inter, tp, pp, cp, ep, offload}: bytes per rank per step on stage i."""
    intra, inter = dp_volumes(ctx, p, i)
    return {"dp": intra + inter, "dp_intra": intra, "dp_inter": inter,
            "tp": tp_bytes_stage(ctx, p, i), "pp": pp_bytes_stage(ctx, p, i),
            "cp": cp_bytes_stage(ctx, p, i), "ep": ep_bytes_stage(ctx, p, i),
            "offload": offload_bytes_stage(ctx, p, i)}
