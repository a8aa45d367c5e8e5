"""Step time: compute + exposed communication + pipeline schedule + optimizer (numpy-broadcastable).

Per micro-batch and stage i: t_f,i and t_b,i from autoplace.cost.compute plus the exposed TP/CP/EP
collectives of its layers (autoplace.cost.network). Pipeline (Narayanan et al. 2021 Eq. 1 generalized
to unequal stages): with v chunks per device and t_i = t_f,i + t_b,i,

  T_pipe = (m·v − 1) · max_i t_i / v + Σ_i t_i / v

which is (m + p − 1)·t for equal stages, bubble (p − 1)/(v·m + p − 1) of the total (§3.4, T12).
DP reductions overlap the backward they follow, layer by layer (`hidden_tail`: exposed =
max(c − window·(1 − 1/L), c/L)); FSDP all-gathers are prefetched under compute (backward gathers
only with `bwd_prefetch`; with `fetch_sync` one sub-module ahead and the reduce-scatters exposed,
`fetch_sync_exposed`); ZeRO-2/3 traffic repeats per micro-batch unless K1 applies. Then optimizer (memory-bound Adam, or CPU Adam under offload),
host-link offload traffic and a fixed per-step overhead.

`evaluate` returns every term; the breakdown terms sum to `step_s`.
"""

from __future__ import annotations

import numpy as np

from autoplace.cost import comm as C
from autoplace.cost import compute as K
from autoplace.cost import host as HO
from autoplace.cost import memory as Mm
from autoplace.cost import network as N
from autoplace.cost.memory import _w
from autoplace.cost.precision import param_gather_bytes
from autoplace.plan import micro_batches, module_flags, module_on

DP_BUCKET_BYTES = 64 * 2**20   # gradient bucket when the runtime states none (torch DDP 25 MiB)
BREAKDOWN = ("compute", "recompute", "tp_comm", "dp_comm_exposed", "pp_bubble", "pp_comm", "cp_comm",
             "ep_comm", "host", "optimizer", "offload", "overhead")
def optimizer_bytes_per_param(t) -> float:
    """HBM bytes one optimizer step moves per local parameter (mixed-precision Adam, fused):
    moments + master read and written (2·b_O); gradient read for the norm, read by the step and
    zeroed (3·b_G); an fp32 main-grad copy unscaled, checked, read and zeroed (4·b_M); the master →
    compute-copy cast (4 + b_P)."""
    return 2.0 * t.b_O + 3.0 * t.b_G + 4.0 * t.b_M + t.b_P + 4.0


def _per_layer_comm(ctx, hw, p):
    """Exposed TP/CP/EP time per layer per micro-batch: (tp_f, tp_b, tp_rc, cp_f, cp_b, ep_f, ep_b)."""
    m, t = ctx.model, ctx.train
    st = N.axis_strides(p)
    tp = _w(p.tp)
    T = _w(p.mbs) * t.seq_len / _w(p.cp)
    unit = N.gather_time(hw, T * m.hidden * t.b_A, tp, st["tp"])     # one AG of bsh (AR = 2 units)
    rs_unit = N.gather_time(hw, T * m.hidden * t.b_A, tp, st["tp"], op="rs") / np.where(unit > 0, unit, 1.0)
    sp = _w(p.sp) > 0
    # without SP 2 AR (4 units) each way; SP forward 2 AG + 2 RS, backward 2 RS + 2 AG + 2 re-AG
    f_units = np.where(sp, 2.0 + 2.0 * rs_unit, 4.0)
    b_units = np.where(sp, 4.0 + 2.0 * rs_unit, 4.0)
    rc_units = f_units
    gqa = np.where(m.a_kv < tp, N.gather_time(hw, T * (m.heads + 2 * m.a_kv) * m.d_head * t.b_A, tp, st["tp"]), 0.0)
    tp_f = np.where(tp > 1, f_units * unit + gqa, 0.0)
    tp_b = np.where(tp > 1, b_units * unit + gqa, 0.0)
    tp_rc = np.where(tp > 1, rc_units * unit + gqa, 0.0)
    # backward units that overlap the column-parallel weight-gradient GEMMs: without SP the two
    # input-gradient all-reduces (4 units); with SP the two reduce-scatters and two re-all-gathers
    tp_b_ovl = np.where(tp > 1, np.where(sp, 2.0 + 2.0 * rs_unit, 4.0) * unit, 0.0)
    # CP: ring K/V exchange overlapped with the attention core
    cp_one = N.gather_time(hw, Mm.cp_kv_bytes(ctx, p), p.cp, st["cp"])
    # EP: dispatch + combine all-to-all, forward and backward
    if m.is_moe:
        t_sp = np.where(sp, tp, 1.0)
        S_ep = _w(p.mbs) * t.seq_len / (_w(p.cp) * t_sp) * m.top_k * m.hidden * t.b_A
        cm = t.rt.comm
        a2a = N.alltoall_time(hw, S_ep, p.ep, st["ep"], m.top_k if cm.a2a_node_dedup else 0.0,
                              cm.a2a_efficiency, cm.expert_span, m.num_experts) * (m.n_moe_layers / m.layers)
    else:
        a2a = _w(0.0)
    return tp_f, tp_b, tp_rc, cp_one, 2.0 * cp_one, 2.0 * a2a, 2.0 * a2a, tp_b_ovl


def stage_times(ctx, hw, p):
    """Per-micro-batch times for the first, a middle and the last stage (dicts of arrays)."""
    m = ctx.model
    hw = N.hardware_view(ctx, hw)
    lt = K.layer_compute_times(ctx, hw, p)
    ht = K.head_compute_times(ctx, hw, p)
    h_f, h_b, h_sync, h_ser = HO.layer_host_times(ctx, hw, lt)
    tp_f, tp_b, tp_rc, cp_f1, cp_b1, ep_f, ep_b, tp_b_ovl = _per_layer_comm(ctx, hw, p)
    overlap_tp = (_w(p.tp_overlap) > 0) & (_w(p.sp) > 0)
    h = ctx.train.rt.comm.tp_overlap_share          # RuntimeSpec comm.tp_overlap_share

    def hidden(c, gemm):      # the overlapped share h hides under the GEMMs but one of 8 chunks
        return (1.0 - h) * c + h * (np.maximum(c - gemm, 0.0) + c / 8.0)
    tp_f_exp = np.where(overlap_tp, hidden(tp_f, lt["gemm_f"]), tp_f)
    # backward: async input-gradient collectives hide behind the column-parallel wgrad GEMMs
    tp_b_async = np.where(_w(p.tp_async) > 0, (tp_b - tp_b_ovl) + np.maximum(tp_b_ovl - lt["wgrad_col"], 0.0), tp_b)
    tp_b_exp = np.where(overlap_tp, hidden(tp_b, lt["gemm_b"]), tp_b_async)
    tp_rc_exp = np.where(overlap_tp, hidden(tp_rc, lt["gemm_f"]), tp_rc)
    cp_f = np.maximum(cp_f1 - lt["attn_f"], 0.0) + np.where(_w(p.cp) > 1, hw.intra_latency, 0.0)
    cp_b = np.maximum(cp_b1 - lt["attn_b"], 0.0) + np.where(_w(p.cp) > 1, hw.intra_latency, 0.0)
    comp_f = lt["gemm_f"] + lt["attn_f"] + lt["elem_f"] + lt["attn_elem_f"]
    comp_b = lt["gemm_b"] + lt["attn_b"] + lt["elem_b"] + lt["attn_elem_b"]
    # EP all-to-all overlapped with another micro-batch's layer (Megatron EP A2A overlap: a forward
    # and a backward chunk interleaved): hidden up to that layer's compute, which runs on the SMs the
    # dispatch kernels leave free meanwhile
    ovl_ep = _w(getattr(p, "ep_overlap", False)) > 0
    sm_share = ctx.train.rt.comm.ep_comm_sms / max(hw.sm_count, 1)
    ep_tot_f, ep_tot_b = ep_f, ep_b
    ep_ovl_f = sm_share * ep_tot_f + np.maximum(ep_tot_f - comp_b, 0.0)
    ep_ovl_b = sm_share * ep_tot_b + np.maximum(ep_tot_b - comp_f, 0.0)
    # recompute per layer: full → forward again (with its TP collectives); selective → attention core
    rc = _w(p.rc)
    rc_full = comp_f
    if ctx.train.rt.memory.selective == "op-sac":
        # op-level SAC (torchtitan): every elementwise op and every second matmul re-run in backward
        rc_sel = lt["elem_f"] + lt["mm_rc"]
    else:
        rc_sel = lt["attn_f"] + lt["attn_elem_f"]            # Megatron selective: the attention core
        named, core, up = module_flags(p)                   # --recompute-modules: the listed modules' forwards
        listed = np.where(core, rc_sel, 0.0) + np.where(up, lt["up_f"], 0.0) \
            + np.where(module_on(p, "layernorm"), lt["ln_f"], 0.0) \
            + np.where(module_on(p, "moe_act"), lt["moe_act_f"], 0.0) + np.where(module_on(p, "mlp"), lt["mlp_f"], 0.0)
        rc_sel = np.where(named, listed, rc_sel)
    # TP: embedding (AR fwd | RS fwd + AG bwd) and output layer (AR bwd | AG fwd + RS bwd + re-AG)
    st = N.axis_strides(p)
    T = _w(p.mbs) * ctx.train.seq_len / _w(p.cp)
    unit = N.gather_time(hw, T * m.hidden * ctx.train.b_A, p.tp, st["tp"])
    sp = _w(p.sp) > 0
    ce = 3.0 * N.allreduce_time(hw, T * 4.0, p.tp, st["tp"])
    split = tuple(getattr(p, "layer_split", ()) or ())
    srec = tuple(getattr(p, "stage_recompute", ()) or ())
    mb = np.maximum(micro_batches(p, ctx.train.global_batch), 1.0)

    def one(first, last, idx):
        Li = Mm.layers_on_stage(ctx, p, 0) if not split else _w(float(split[min(idx, len(split) - 1)]))
        # chunks with no partner in the combined 1F1B schedule keep their all-to-all exposed
        u = ep_unpaired_share(p, ctx.train.global_batch, np.where(last, _w(p.pp) - 1, idx))
        ep_f = np.where(ovl_ep, (1.0 - u) * ep_ovl_f + u * ep_tot_f, ep_tot_f)
        ep_b = np.where(ovl_ep, (1.0 - u) * ep_ovl_b + u * ep_tot_b, ep_tot_b)
        if srec:
            rl = _w(srec[min(idx, len(srec) - 1)])
        else:
            rl = np.where(rc == 3, np.minimum(_w(p.recompute_layers), Li), 0.0)
        block = (rc == 3) | (len(srec) > 0)
        n_rc_full = np.where(block, rl, np.where(rc == 2, Li, 0.0))
        n_rc_sel = np.where(rc == 1, Li, 0.0)
        # summing the micro-batches' gradients (Kernels.grad_accum), spread over the micro-batches
        acc = K.membound_time(hw, grad_accum_bytes(ctx, p, np.where(last, _w(p.pp) - 1, idx)), 0) / mb
        # host time the GPU waits for (cost.host): per layer, against the layer's device time
        x_f, x_b = HO.exposed(comp_f + tp_f_exp + cp_f + ep_f, comp_b + tp_b_exp + cp_b + ep_b, h_f, h_b, h_sync, h_ser)
        f = Li * (comp_f + tp_f_exp + cp_f + ep_f + x_f)
        b = Li * (comp_b + tp_b_exp + cp_b + ep_b + x_b) + acc
        # a fully recomputed layer re-runs its forward, dispatcher sync and serialised segment included
        r = n_rc_full * (rc_full + tp_rc_exp + cp_f + ep_f + x_f) + n_rc_sel * rc_sel
        comp = Li * (comp_f + comp_b) + acc
        tpc = Li * (tp_f_exp + tp_b_exp) + n_rc_full * tp_rc_exp
        cpc = Li * (cp_f + cp_b) + n_rc_full * cp_f
        epc = Li * (ep_f + ep_b) + n_rc_full * ep_f
        rcc = n_rc_full * rc_full + n_rc_sel * rc_sel
        # before overlap: the TP and CP collectives as issued (reported as overlapped = total − exposed)
        tpt = Li * (tp_f + tp_b) + n_rc_full * tp_rc
        cpt = (Li + n_rc_full) * cp_f1 + Li * cp_b1 + (Li * 2 + n_rc_full) * np.where(_w(p.cp) > 1, hw.intra_latency, 0.0)
        if first:
            f = f + ht["emb_f"] + np.where(_w(p.tp) > 1, 2.0 * unit, 0.0)
            b = b + ht["emb_b"]
            comp = comp + ht["emb_f"] + ht["emb_b"]
            tpc = tpc + np.where(_w(p.tp) > 1, 2.0 * unit, 0.0)
            tpt = tpt + np.where(_w(p.tp) > 1, 2.0 * unit, 0.0)
        is_last = (_w(p.pp) == 1) if first else last
        head_f = ht["logits_f"] + np.where(_w(p.tp) > 1, np.where(sp, 1.0, 0.0) * unit + ce / 2, 0.0)
        head_b = ht["logits_b"] + np.where(_w(p.tp) > 1, 2.0 * unit + ce / 2, 0.0)
        f = f + np.where(is_last, head_f, 0.0)
        b = b + np.where(is_last, head_b, 0.0)
        comp = comp + np.where(is_last, ht["logits_f"] + ht["logits_b"], 0.0)
        tpc = tpc + np.where(is_last, head_f + head_b - ht["logits_f"] - ht["logits_b"], 0.0)
        tpt = tpt + np.where(is_last, head_f + head_b - ht["logits_f"] - ht["logits_b"], 0.0)
        return {"f": f, "b": b + r, "compute": comp, "recompute": rcc, "tp": tpc, "cp": cpc, "ep": epc,
                "host": Li * (x_f + x_b) + n_rc_full * x_f,
                "tp_total": tpt, "cp_total": cpt}

    out = {"first": one(True, False, 0), "last": one(False, True, -1 if not split else len(split) - 1)}
    pp_s = int(np.max(_w(p.pp)))
    if (split or srec) and np.ndim(p.pp) == 0 and pp_s > 3:
        # explicit per-stage layers / recompute: time every interior stage; "middle" is the slowest,
        # with "fb_sum" the total of all interior stages (the pipeline needs max and Σ over stages)
        mids = [one(False, False, i) for i in range(1, pp_s - 1)]
        tot = [float(np.asarray(d["f"] + d["b"])) for d in mids]
        out["middle"] = dict(mids[int(np.argmax(tot))], fb_sum=_w(sum(tot)))
    elif not split and np.all(_w(p.pp) == 1):
        out["middle"] = out["first"]        # no middle stage: pipeline_time and the breakdown never read it
    else:
        out["middle"] = one(False, False, 1)
    return out, lt, ht


def grad_accum_bytes(ctx, p, i):
    """HBM bytes one step spends on stage i summing its micro-batches' gradients before they are
    reduced (`Kernels.grad_accum`), where the accumulated gradient is unsharded: replicated
    gradients (DDP / ZeRO-1 with no_sync) or pipelined FSDP (K1). Per parameter, with b_G the width of
    a fresh gradient and m micro-batches per step in f pipeline schedules:

      fused    0 (the wgrad GEMM writes into the buffer)
      hook     m · (2·b_r + b_G)                     main_grad (reduce width b_r) += grad, every micro-batch
      autograd (m − f) · (2·b_a + b_G) + f · c       the first micro-batch of each schedule keeps its .grad
               (c = b_G + b_a when FSDP2 upcasts it to b_a = b_r, else 0; no upcast when a schedule has a
               single micro-batch, whose backward is also its last); experts outside FSDP (their
               expert-DP group is one rank) accumulate at b_G
    """
    t = ctx.train
    mode = t.rt.kernels.grad_accum
    if mode == "fused":
        return _w(0.0) * _w(p.pp)
    dense, expert = Mm.stage_param_counts(ctx, p, i)
    mb = np.maximum(micro_batches(p, t.global_batch), 1.0)
    k1 = Mm.k1_active(ctx, p)
    unsharded = (_w(p.g_mode) == 0) | k1
    bG, br, be = t.b_G, t.b_G_reduce, t.b_G_reduce_expert
    if mode == "hook":
        return np.where(unsharded, mb * (dense + expert) * (2.0 * br + bG), 0.0)
    fl = np.where(k1, np.minimum(_w(getattr(p, "pp_flushes", 1)), mb), 1.0)
    _, ne = Mm.shard_groups(ctx, p)

    def group(psi, upcast):
        ba = np.where(upcast, br, bG)
        first = np.where(upcast & (br != bG) & (mb > fl), bG + ba, 0.0)
        return psi * ((mb - fl) * (2.0 * ba + bG) + fl * first)
    # experts under their own FSDP policy without a reduce dtype keep b_G (no upcast)
    return np.where(unsharded, group(dense, k1) + group(expert, k1 & (_w(ne) > 1) & (be != bG)), 0.0)


def ep_unpaired_share(p, global_batch, rank):
    """Share of a stage's micro-batch chunks whose EP all-to-all has no partner to hide under.

    Megatron-Core's EP A2A overlap (`overlap_moe_expert_parallel_comm`) runs a forward chunk of one
    micro-batch together with a backward chunk of another (combined 1F1B), so the warm-up forwards
    and the cool-down backwards run alone: without pipelining the first forward and the last
    backward of m (pipeline_parallel/combined_1f1b.py, `combined_1f1b_schedule_for_no_pipelining`);
    with the interleaved schedule, on pipeline rank r, w = 2(p − r − 1) + (v − 1)·G + 1 of the m·v
    chunks each way (schedules.py `get_pp_rank_microbatches`: one extra warm-up forward under the
    overlap). Returns w / (m·v), at most 1."""
    m = np.maximum(micro_batches(p, global_batch), 1.0)
    pp = _w(p.pp)
    v = np.where(_w(p.sched) == 1, _w(p.vpp), 1.0)
    G = np.where(_w(p.vpp_group) > 0, _w(p.vpp_group), pp)
    warm = np.where(pp > 1, 2.0 * (pp - _w(rank) - 1.0) + (v - 1.0) * G + 1.0, 1.0)
    return np.minimum(warm / (m * v), 1.0)


def hidden_tail(c, window, L, sm_share=0.0):
    """Exposed part of communication c issued layer by layer under a compute window of L layers.

    The first layer's share cannot start before that layer's compute is done and the last share has
    nothing left to hide under, so with c ≤ window the exposed time is one layer's share c/L; with
    c > window the link is busy from window/L on and c − window·(1 − 1/L) is exposed. No window
    (no overlap) exposes all of c. While the hidden part c·(1 − 1/L) runs, the collective holds a
    share s of the SMs (`dp_sm_share`) and the compute under it runs on the rest: a compute-bound
    window is longer by s·c·(1 − 1/L); a link-bound one (c − window·(1 − 1/L) larger) has that slack."""
    L = np.maximum(_w(L), 1.0)
    keep = 1.0 - 1.0 / L
    on = _w(window) > 0
    ex = c - window * keep
    floor = c / L + _w(sm_share) * (c * keep)
    if isinstance(ex, np.ndarray) and ex.shape == np.broadcast_shapes(ex.shape, np.shape(floor)):
        np.maximum(ex, floor, out=ex)
    else:
        ex = np.maximum(ex, floor)
    if np.all(on) and np.ndim(ex) >= np.ndim(c) and np.shape(ex) == np.broadcast_shapes(np.shape(ex), np.shape(c)):
        return ex                               # every plan overlaps: the select is the identity
    return np.where(on, ex, c)


def module_units(m):
    """Parameter shares of a layer's weight-bearing sub-modules in execution order: QKV, attention
    output, FC1 (gate + up when gated), FC2. DeepSpeed ZeRO-3 gathers each of them separately."""
    h = m.hidden
    f = m.ffn_hidden if m.ffn_hidden else m.f_expert * max(m.num_experts, 1)
    u = np.array([h * (m.q_width + 2 * m.kv_width), m.q_width * h, (2 if m.gated_mlp else 1) * f * h, f * h],
                 dtype=float)
    return tuple(u / u.sum())


def fetch_sync_exposed(F, B, A, u, full, overlap=1.0):
    """Exposed all-gather time per layer when every fetch synchronizes the device (`fetch_sync`).

    Each sub-module's gather runs only under the sub-module before it (prefetch one ahead, then a
    device-wide synchronize at the next fetch), so with per-layer forward F, backward B (recompute
    included), gather A and sub-module shares u₀..u₃ the forward exposes Σᵢ max(0, A·uᵢ₊₁ − F·uᵢ).
    Under full recompute the backward re-runs the forward (the same pairs, except that the last
    recomputed module has no gather behind it) and its own modules need no gather until the first
    backward module, which hides the next layer's first gather; without recompute each backward
    module hides the gather of the module before it. `full` is the recomputed share of layers.
    Returns (forward, backward) exposed seconds per layer. DeepSpeed issue #1069; the fetch was reworked in PR #1453."""
    u0, u1, u2, u3 = u
    r = lambda x: np.maximum(x, 0.0)  # noqa: E731
    F, A = _w(F) * overlap, _w(A)
    Bw = r(_w(B) - _w(full) * _w(F)) * overlap
    rc_pairs = r(A * u1 - F * u0) + r(A * u2 - F * u1) + r(A * u3 - F * u2)
    fwd = rc_pairs + r(A * u0 - F * u3)
    b_full = rc_pairs + r(A * u0 - Bw * u0)
    b_none = r(A * u2 - Bw * u3) + r(A * u1 - Bw * u2) + r(A * u0 - Bw * u1) + r(A * u3 - Bw * u0)
    return fwd, _w(full) * b_full + (1.0 - _w(full)) * b_none


def _dp_exposed(ctx, hw, p, t_f, t_b, i, want_total: bool = True):
    """Exposed DP-family communication time per step for stage i (and the total, for reporting;
    None without `want_total`)."""
    t = ctx.train
    st = N.axis_strides(p)
    bG = t.b_G
    bP = t.b_P if ctx.model.states_only else param_gather_bytes(t)      # parameter all-gather width
    bGr = t.b_G_reduce
    bGe = t.b_G_reduce_expert                            # the experts' reduce width (their own FSDP policy)
    psi = Mm.collective_params_rank(ctx, p, i)
    dense, expert = Mm.stage_param_counts(ctx, p, i)
    nd, ne = Mm.shard_groups(ctx, p)
    psi_e = np.where(ne > 1, expert, 0.0)                # experts reduce/gather over their own group
    r = _w(p.dp_replicate)
    sms = dp_sm_share(ctx, hw)                           # SMs the hidden collectives hold
    m = micro_batches(p, t.global_batch)
    pm, gm, om = _w(p.p_mode), _w(p.g_mode), _w(p.o_mode)
    k1 = Mm.k1_active(ctx, p)
    grp = _w(p.dp) * _w(p.cp)
    s_shard = st["cp"]                                   # dp×cp group: stride = tp degree (cp inner to dp)
    s_rep = st["dp_replicate"]
    # expert-data-parallel group (Megatron `expert_data_parallel_group`, torchtitan `efsdp`): the ranks
    # left after (e)tp × ep, so its stride is the ep axis's stride × ep — across nodes once ep fills one
    s_edp = st["ep"] * _w(p.ep)
    Lc = np.maximum(Mm.layers_on_stage(ctx, p, i), 1.0) + 1.0          # FSDP units: layers + embedding/head
    d = t.rt.defaults                                                   # DDP / ZeRO-1/2 gradient buckets
    if d.dp_bucket_elements > 0:
        buckets = np.maximum(psi / (d.dp_bucket_elements + d.dp_bucket_elements_per_rank * grp), 1.0)
    else:
        buckets = np.maximum(psi * bG / DP_BUCKET_BYTES, 1.0)
    ncoll = np.where(pm >= 1, Lc, buckets)
    bucket_mb = _w(getattr(p, "dp_bucket_mb", 0.0))
    ncoll = np.where(bucket_mb > 0, np.maximum(psi * bP / (np.maximum(bucket_mb, 1e-9) * 1e6), 1.0), ncoll)
    buckets = np.where(bucket_mb > 0, np.maximum(psi * bG / (np.maximum(bucket_mb, 1e-9) * 1e6), 1.0), buckets)
    # each collective splits by parameter group: the dense share over the dp(×cp) shard group, the
    # experts over the expert-DP group; the collective count (latency) splits in proportion
    share_e = np.where(psi > 0, psi_e / np.maximum(psi, 1e-30), 0.0)
    psi_d = psi - psi_e
    nc_d, nc_e = np.maximum(ncoll * (1.0 - share_e), 1.0), np.maximum(ncoll * share_e, 1.0)
    nb_d, nb_e = np.maximum(buckets * (1.0 - share_e), 1.0), np.maximum(buckets * share_e, 1.0)

    has_e = bool(np.any(psi_e > 0))                     # no expert group (dense model): its terms are 0

    def _expert(fn):
        return np.where(psi_e > 0, fn(), 0.0) if has_e else 0.0

    def _gather(width, op="ag", width_e=None):
        w_e = width if width_e is None else width_e
        return N.gather_time(hw, psi_d * width, nd, s_shard, nc_d, op=op) + \
            _expert(lambda: N.gather_time(hw, psi_e * w_e, ne, s_edp, nc_e, op=op))

    ddp = N.allreduce_time(hw, psi_d * bG, grp, s_shard, nb_d) + \
        _expert(lambda: N.allreduce_time(hw, psi_e * bG, ne, s_edp, nb_e))
    rsG = _gather(np.where(gm >= 1, bGr, bG), op="rs", width_e=np.where(gm >= 1, bGe, bG))
    rsGr = _gather(bGr, op="rs", width_e=bGe)
    agP = _gather(bP)
    inter = N.allreduce_time(hw, psi_d * np.where(gm >= 1, bGr, bG) / nd, r, s_rep, nc_d) + \
        _expert(lambda: N.allreduce_time(hw, psi_e * np.where(gm >= 1, bGe, bG) / ne, r, s_rep, nc_e))
    ov = _w(p.dp_overlap) > 0
    win_b = np.where(ov, t_b * hw.comm_overlap, 0.0)
    win_f = np.where(ov, t_f * hw.comm_overlap, 0.0)
    # sharded-gradient reductions issued after a pipeline stage's last backward (torch pipelining's
    # REDUCE_GRAD, RuntimeSpec comm.pp_reduce_exposed) have no backward left to hide under
    win_rs = np.where(k1 & bool(t.rt.comm.pp_reduce_exposed), 0.0, win_b)
    Li = np.maximum(Mm.layers_on_stage(ctx, p, i), 1.0)
    # without K1 under PP each virtual stage is its own FSDP root: its forward's first gather has no
    # prefetch ahead of it and its backward ends at the root's post-backward callback, which orders
    # the compute stream past that stage's reduce-scatters (RuntimeSpec comm.pp_defer_grad_sync) —
    # the exposed tail is one layer of each of the v chunks, i.e. a window of Li/v layers
    v_ch = np.where((_w(p.pp) > 1) & (_w(p.sched) == 1), np.maximum(_w(p.vpp), 1.0), 1.0)
    Lt = np.where((_w(p.pp) > 1) & ~k1, np.maximum(Li / v_ch, 1.0), Li)
    # A CPU "device" computes on the thread that issues the collectives: a gather issued at a
    # module's pre-forward/pre-backward hook cannot run ahead of it (GPU prefetch comes from the host
    # running ahead of the device stream); reductions are async and can still overlap
    sync_dev = bool(getattr(hw, "host_is_device", False))
    win_f_ag = 0.0 * win_f if sync_dev else win_f
    rs_in = rsG + inter
    # ZeRO-3: without backward prefetch a layer's AG is issued at its pre-backward hook on the stream
    # that still carries the previous layer's RS, and its backward waits for both: backward
    # collectives do not overlap (torch PR #70235: FSDP1 backward_prefetch=None, `NO_PREFETCH`)
    pf_b = _w(getattr(p, "bwd_prefetch", True)) > 0
    # fetch_sync (DeepSpeed ZeRO-3 as released in 2021): four gathers and reduce-scatters per layer, gathers
    # one sub-module ahead (`fetch_sync_exposed`), every reduce-scatter exposed
    fsync = _w(getattr(p, "fetch_sync", False)) > 0
    any_fsync = bool(np.any(fsync))
    if any_fsync:
        agS = N.gather_time(hw, psi * bP, nd, s_shard, 4.0 * Lc)
        rsS = N.gather_time(hw, psi * np.where(gm >= 1, bGr, bG), nd, s_shard, 4.0 * Lc, op="rs")
        rc = _w(p.rc)
        full = np.where(rc == 2, 1.0, np.where(rc == 3, np.minimum(_w(p.recompute_layers), Li) / Li, 0.0))
        co = np.where(ov, 0.0 if sync_dev else hw.comm_overlap, 0.0)
        u = module_units(ctx.model)
    fl = np.where(_w(p.pp) > 1, np.minimum(_w(getattr(p, "pp_flushes", 1)), np.maximum(m, 1.0)), 1.0)
    n_ag = np.where(pm == 1, m + fl, fl)
    copies = bool(t.rt.comm.fsdp_copies)
    if copies:
        # FSDP2 copy-out of each gather and copy-in of each reduction (RuntimeSpec comm.fsdp_copies),
        # HBM passes over the whole unit, on the compute stream; ZeRO-1/2 reduce flat buckets
        c_ag = K.membound_time(hw, psi * bP * 2.0, ncoll)
        c_rs = K.membound_time(hw, psi * bG + psi_d * np.where(gm >= 1, bGr, bG)
                               + psi_e * np.where(gm >= 1, bGe, bG), ncoll)

    # exposed time per sharding mode; each is evaluated only on the plans in that mode (`_by_code`),
    # `s` restricting an input to them
    def ex0(s):      # DDP / ZeRO-1 data: one reduction during the last backward
        return hidden_tail(s(ddp), s(win_b), s(Li), sms)

    def ex1(s):      # ZeRO-1: RS (+ HSDP AR) under the last backward, AG(P) under the next forward
        return hidden_tail(s(rs_in), s(win_b), s(Li), sms) + hidden_tail(s(agP), s(win_f_ag), s(Li), sms)

    def ex2(s):      # ZeRO-2: RS (+ HSDP AR) every micro-batch backward
        return s(m) * hidden_tail(s(rs_in), s(win_rs), s(Lt), sms) + hidden_tail(s(agP), s(win_f_ag), s(Lt), sms)

    def ex3(s):      # ZeRO-3: AG prefetched under forward, AG + RS under backward, every micro-batch
        a, ri, w_b, w_rs, L, pf = s(agP), s(rs_in), s(win_b), s(win_rs), s(Li), s(pf_b)
        T = s(Lt)
        if sync_dev:
            bwd3 = np.where(pf, a + hidden_tail(ri, w_rs, T, sms), a + s(rsG) + s(inter))
        else:
            bwd3 = np.where(pf, np.where(w_rs < w_b, hidden_tail(a, w_b, T, sms) + s(rsG) + s(inter),
                                         hidden_tail(a + s(rsG) + s(inter), w_b, T, sms)), a + s(rsG) + s(inter))
        out = s(m) * (hidden_tail(a, s(win_f_ag), T, sms) + bwd3)
        if any_fsync and np.any(s(fsync)):
            Al = s(agS) / s(Lc)
            fe, be = fetch_sync_exposed(s(t_f) / L, s(t_b) / L, Al, u, s(full), s(co))
            exS = s(m) * (L * (fe + be) + 2.0 * Al * u[0] + s(rsS) + s(inter))   # + each pass's first gather
            out = np.where(s(fsync), exS, out)
        if copies:
            out = out + s(m) * (2.0 * s(c_ag) + s(c_rs))
        return out

    def exh(s):      # ZeRO-3 without resharding after forward: P held from forward to backward
        out = s(m) * (hidden_tail(s(agP), s(win_f_ag), s(Lt), sms) + hidden_tail(s(rs_in), s(win_rs), s(Lt), sms))
        return out + s(m) * (s(c_ag) + s(c_rs)) if copies else out

    def exk(s):      # K1: gathers once (m + 1 times with resharding), one RS(G) at reduce width after the
        L, a, na = s(Li), s(agP), s(n_ag)         # last backward, once per pipeline schedule (plan.pp_flushes)
        ag = na * a if sync_dev else na * a * (1.0 / L + sms * (1.0 - 1.0 / L))
        out = s(fl) * hidden_tail(s(rsGr) + s(inter), s(win_rs), L, sms) \
            + np.where(s(pm) >= 1, ag, s(fl) * hidden_tail(a, s(win_f_ag), L, sms))
        return out + na * s(c_ag) + s(fl) * s(c_rs) if copies else out

    code = np.where(om == 0, 0, np.where(gm == 0, 1, np.where(k1, 5, np.where(pm == 0, 2, np.where(pm == 1, 3, 4)))))
    exposed = _by_code(code, (ex0, ex1, ex2, ex3, exh, exk))
    single = (grp <= 1)
    if np.any(single):
        exposed = np.where(single, 0.0, exposed)
    if not want_total:
        return exposed, None
    tot0 = ddp
    tot1 = rsG + inter + agP
    tot2 = m * (rsG + inter) + agP
    tot3 = m * (2 * agP + rsG + inter)
    if any_fsync:
        tot3 = np.where(fsync, m * (2 * agS + rsS + inter), tot3)
    toth = m * (agP + rsG + inter)
    totk = fl * (rsGr + inter) + n_ag * agP
    total = np.where(om == 0, tot0, np.where(gm == 0, tot1, np.where(k1, totk,
                     np.where(pm == 0, tot2, np.where(pm == 1, tot3, toth)))))
    return exposed, np.where(single, 0.0, total)


def _by_code(code, branches):
    """branches[code](s) per plan, each branch evaluated only on the plans with its code.

    `s(x)` restricts an input to those plans: along the last axis (a block's state axis, or a flat
    batch's only axis), the positions where the code occurs. Elementwise the same arithmetic as
    evaluating every branch everywhere and selecting with np.where, so the values are identical."""
    code = np.asarray(code)
    ks = np.unique(code)
    whole = lambda x: x  # noqa: E731
    if ks.size == 1:
        return branches[int(ks[0])](whole)
    if code.ndim == 0 or code.shape[-1] == 1:
        out = None
        for k in ks:
            v = branches[int(k)](whole)
            out = v if out is None else np.where(code == k, v, out)
        return out
    n = code.shape[-1]
    other = tuple(range(code.ndim - 1))
    parts = []
    for k in ks.tolist():
        hit = code == k
        idx = np.flatnonzero(hit.any(axis=other) if other else hit)
        ix = slice(int(idx[0]), int(idx[-1]) + 1) if idx[-1] - idx[0] + 1 == idx.size else idx

        def s(x, ix=ix):
            x = np.asarray(x)
            return x if x.ndim == 0 or x.shape[-1] == 1 else x[..., ix]
        parts.append((k, ix, branches[k](s)))
    shape = np.broadcast_shapes(code.shape[:-1] + (1,), *(np.shape(v)[:-1] + (1,) for _, _, v in parts))[:-1] + (n,)
    out = np.empty(shape)
    for k, ix, v in parts:
        ck = code[..., ix] == k
        if ck.all():
            out[..., ix] = v
        else:
            out[..., ix] = np.where(ck, v, out[..., ix])
    return out


def dp_sm_share(ctx, hw) -> float:
    """Share of the SMs an overlapped DP-family collective takes from the compute under it:
    comm.dp_comm_sms / SM count (none on a CPU device, whose collectives run on host threads)."""
    if getattr(hw, "host_is_device", False):
        return 0.0
    return min(ctx.train.rt.comm.dp_comm_sms / max(hw.sm_count, 1), 1.0)


def _optimizer_time(ctx, hw, p, i):
    t = ctx.train
    dense, expert = Mm.stage_param_counts(ctx, p, i)
    nd, ne = Mm.shard_groups(ctx, p)
    om = _w(p.o_mode)
    local = np.where(om == 0, dense + expert, dense / nd + expert / ne)
    per_param = optimizer_bytes_per_param(t)
    phi = np.where(_w(p.off) >= 1, _w(p.offload_fraction), 0.0)
    gpu = K.membound_time(hw, local * (1 - phi) * per_param, 4)
    cpu = local * phi / hw.cpu_adam_params_per_s
    return np.maximum(gpu, cpu) + np.where(phi > 0, 0.0, 0.0)


def optimizer_time(ctx, hw, p):
    """The optimizer step of the slower of the first and last stage (`_optimizer_time`)."""
    pp = _w(p.pp)
    return np.maximum(_optimizer_time(ctx, hw, p, 0), _optimizer_time(ctx, hw, p, pp - 1))


def offload_time(ctx, hw, p):
    """Host-link offload traffic of the slower of the first and last stage."""
    pp = _w(p.pp)
    return np.maximum(C.offload_bytes_stage(ctx, p, 0), C.offload_bytes_stage(ctx, p, pp - 1)) / hw.host_bw


def step_host_time(rt, hw) -> float:
    """The runtime's fixed host work per optimizer step (`RuntimeSpec.host`), s:
    (step_ops·fwd_op_us + step_syncs·sync_us)·1e-6 + step_ms·1e-3, × the host CPU class
    (`hw.host_op_factor`). Counted once per step: it follows the step's last synchronisation, so
    nothing on the GPU hides it."""
    H = rt.host
    us = H.step_ops * H.fwd_op_us + H.step_syncs * H.sync_us
    return (us * 1e-6 + H.step_ms * 1e-3) * float(getattr(hw, "host_op_factor", 1.0))


def overhead_time(ctx, hw, p):
    """Fixed per-step cost: the profile's step overhead (what a calibration adds for a machine)
    plus the runtime's per-iteration host work (`step_host_time`)."""
    return _w(hw.step_overhead_s + step_host_time(ctx.train.rt, hw)) + 0 * _w(p.pp)


def pipeline_time(ctx, hw, p, sts):
    """The pipeline schedule of `evaluate` from `stage_times`' per-micro-batch stage times `sts`
    (hw: `network.hardware_view`): T_pipe = (m·v − f)·max_i t_i / v + f·Σ_i t_i / v (f schedules,
    plan.pp_flushes) and the PP p2p time on the critical path, with the intermediate terms.
    The search's lower bound (autoplace.search.bounds) calls it too."""
    t = ctx.train
    pp = _w(p.pp)
    mb = micro_batches(p, t.global_batch)
    v = np.where(_w(p.sched) == 1, _w(p.vpp), 1.0)
    fs, ms, ls = sts["first"], sts["middle"], sts["last"]
    # p = 1: "first" already carries the logits; middle/last are absent
    t_first = fs["f"] + fs["b"]
    t_mid = ms["f"] + ms["b"]
    t_last = ls["f"] + ls["b"]
    one = pp == 1
    t_max = np.where(one, t_first, np.maximum(np.maximum(t_first, t_last), np.where(pp > 2, t_mid, 0.0)))
    t_mids = ms["fb_sum"] if "fb_sum" in ms else np.maximum(pp - 2, 0.0) * t_mid
    t_sum = np.where(one, t_first, t_first + t_last + t_mids)
    # PP p2p: per micro-batch, each chunk boundary crossing costs one message each way on the critical path
    st = N.axis_strides(p)
    X = C.p2p_message_bytes(ctx, p)
    p2p = N.p2p_time(hw, X, st["pp"])
    pp_comm = np.where(one, 0.0, 2.0 * mb * v * p2p)
    # f schedules of m/f micro-batches each (plan.pp_flushes): f·[(m/f·v − 1)·t_max + t_sum]/v
    fl = np.minimum(_w(getattr(p, "pp_flushes", 1)), np.maximum(mb, 1.0))
    T_pipe = (mb * v - fl) * t_max / v + fl * t_sum / v
    return {"pp": pp, "mb": mb, "v": v, "one": one, "t_first": t_first, "t_mid": t_mid, "t_last": t_last,
            "t_max": t_max, "pp_comm": pp_comm, "T_pipe": T_pipe}


SEARCH_KEYS = ("step_s", "fits", "peak_bytes", "limit_bytes")


def evaluate(ctx, hw, p, headroom: float = 0.0, report: bool = True):
    """Every cost term of a plan (or a batch of plans): time breakdown, memory peak, throughput.

    report=False (the search): the step time, its breakdown terms and the memory verdict only
    (`SEARCH_KEYS` and the breakdown), the same numbers; the report-only ratios and totals (MFU,
    tokens/s, overlapped communication, …) are left out."""
    m, t = ctx.model, ctx.train
    hw = N.hardware_view(ctx, hw)
    sts, lt, ht = stage_times(ctx, hw, p)
    fs, ms, ls = sts["first"], sts["middle"], sts["last"]
    pl = pipeline_time(ctx, hw, p, sts)
    pp, mb, one = pl["pp"], pl["mb"], pl["one"]
    t_first, t_mid, t_last, t_max = pl["t_first"], pl["t_mid"], pl["t_last"], pl["t_max"]
    pp_comm, T_pipe = pl["pp_comm"], pl["T_pipe"]
    # binding stage for the breakdown: the slowest
    slow_first = (t_first >= t_last) | one
    mid_last = t_last >= t_mid
    keys = fs if report else ("compute", "recompute", "tp", "cp", "ep", "host")
    bind = {k: np.where(slow_first, fs[k], np.where(mid_last, ls[k], ms[k])) for k in keys if k in fs}
    compute = mb * bind["compute"]
    recompute = mb * bind["recompute"]
    tp_comm = mb * bind["tp"]
    cp_comm = mb * bind["cp"]
    ep_comm = mb * bind["ep"]
    host = mb * bind.get("host", 0.0)          # stage dicts without a host term (spec vectors) add none
    pp_bubble = np.maximum(T_pipe - mb * t_max, 0.0)
    stage_sum = compute + recompute + tp_comm + cp_comm + ep_comm + host
    # the slowest stage's own work may be less than m·t_max when another stage binds: move the gap to bubble
    pp_bubble = pp_bubble + np.maximum(mb * t_max - stage_sum, 0.0)
    # DP: binding stage (first stage holds the embedding; use the larger of first/last)
    ex0, tot0 = _dp_exposed(ctx, hw, p, fs["f"], fs["b"], 0, want_total=report)
    exl, totl = _dp_exposed(ctx, hw, p, ls["f"], ls["b"], pp - 1, want_total=report)
    dp_exposed = np.maximum(ex0, exl)
    optimizer = optimizer_time(ctx, hw, p)
    offload = offload_time(ctx, hw, p)
    overhead = overhead_time(ctx, hw, p)
    # summed in broadcast order: the per-stage terms (no sharding-mode axis), the state terms (no
    # micro-batch / recompute axes), then the one term that spans the whole block
    step = (compute + recompute + tp_comm + cp_comm + ep_comm + host + pp_bubble + pp_comm) \
        + (optimizer + offload + overhead) + dp_exposed
    peak_mem, m0, ml = Mm.peak_memory(ctx, hw, p, parts=report)
    limit = Mm.memory_limit(hw, headroom)
    out = {
        "step_s": step, "compute": compute, "recompute": recompute, "tp_comm": tp_comm,
        "dp_comm_exposed": dp_exposed, "pp_bubble": pp_bubble, "pp_comm": pp_comm, "cp_comm": cp_comm,
        "ep_comm": ep_comm, "host": host, "optimizer": optimizer, "offload": offload, "overhead": overhead,
        "peak_bytes": peak_mem, "fits": (peak_mem <= limit) & Mm.host_fits(ctx, hw, p),
        "pipeline_s": T_pipe,            # the schedule alone: (m·v − 1)·max t_i / v + Σ t_i / v
    }
    if not report:
        out["limit_bytes"] = _w(limit)
        return out
    dp_total = np.maximum(tot0, totl)
    W = ctx.world
    mflops = K.model_flops_per_step(ctx)
    peak = K.gemm_peak(hw, t)
    attn_share = _attn_flop_share(ctx)
    hflops = mflops * (1.0 + np.where(_w(p.rc) == 2, 1.0 / 3.0,
                                      np.where(_w(p.rc) == 1, _selective_rc_share(ctx, p, attn_share),
                                               np.where(_w(p.rc) == 3, _w(p.recompute_layers) * pp / max(m.layers, 1) / 3.0, 0.0))))
    out.update({
        "dp_comm_total": dp_total, "dp_comm_overlapped": np.maximum(dp_total - dp_exposed, 0.0),
        "tp_comm_overlapped": np.maximum(mb * bind["tp_total"] - tp_comm, 0.0),
        "cp_comm_overlapped": np.maximum(mb * bind["cp_total"] - cp_comm, 0.0),
        "tokens_per_s_per_gpu": t.tokens_per_step / step / W,
        "tflops_per_gpu": mflops / step / W / 1e12,
        "mfu": mflops / step / W / peak, "hfu": hflops / step / W / peak,
        "model_flops": mflops + 0 * step, "bubble_fraction": pp_bubble / step,
        "limit_bytes": limit + 0 * peak_mem,
        "micro_batches": mb + 0 * step,
    })
    return out


def _selective_rc_share(ctx, p, attn_share):
    """Recomputed forward FLOPs of selective recompute as a share of model FLOPs: the attention core
    (attn_share / 3: its forward), or the listed --recompute-modules (mla_up_proj: the q/kv
    up-projection GEMMs, 2·(r_q·H·d_qk + r_kv·H·(d_nope + d_v)) per token and layer; mlp: the dense
    layers' MLP GEMMs, 2·(g + 1)·h·f per token and dense layer, g = 2 gated)."""
    named, core, up = module_flags(p)
    m, t = ctx.model, ctx.train
    up_share = mlp_share = 0.0
    if np.any(up) and m.mla and not m.states_only:
        w = sum(k * o for nm, k, o, _ in m.attn_linears() if nm in ("q_up", "kv_up"))
        up_share = t.tokens_per_step * m.layers * 2.0 * w / K.model_flops_per_step(ctx)
    dense_layers = m.layers - (m.n_moe_layers if m.is_moe else 0)
    if np.any(module_on(p, "mlp")) and dense_layers and not m.states_only:
        mlp_share = t.tokens_per_step * dense_layers * 2.0 * ((2 if m.gated_mlp else 1) + 1) * m.hidden * m.ffn_hidden \
            / K.model_flops_per_step(ctx)
    return np.where(named, np.where(core, attn_share / 3.0, 0.0) + np.where(up, up_share, 0.0)
                    + np.where(module_on(p, "mlp"), mlp_share, 0.0), attn_share / 3.0)


def _attn_flop_share(ctx):
    """Share of model FLOPs in the attention core (selective recompute repeats its forward)."""
    m, t = ctx.model, ctx.train
    if m.states_only:
        return 0.0
    full = K.model_flops_per_step(ctx)
    attn = t.tokens_per_step * 12.0 * m.layers * t.seq_len * m.q_width
    return attn / full
