"""Each step-time term in isolation, against numbers worked out by hand.

A synthetic profile with round numbers (no latencies unless a test sets them) keeps the arithmetic
checkable: 8 GPUs per node, 100 GB/s inside a node, 10 GB/s per GPU NIC, 100 TFLOP/s, 1 TB/s HBM.
The pipeline bubble (p−1)/(v·m+p−1) is T12 in tests/test_spec_vectors.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from autoplace.cost import compute as K
from autoplace.cost import memory as Mm
from autoplace.cost import network as N
from autoplace.cost import step as S
from autoplace.placement.rules import Ctx
from autoplace.plan import Plan
from autoplace.specs.hardware import load_hardware
from autoplace.specs.presets import get_preset
from autoplace.specs.training import TrainingSpec

GB = 1e9


@pytest.fixture
def hw():
    return load_hardware().with_(
        name="round", gpus_per_node=8, scaleup_domain=8, intra_bw=100 * GB, inter_bw=10 * GB,
        intra_latency=0.0, inter_latency=0.0, peak_flops={"bf16": 100e12, "fp16": 100e12, "fp8": 200e12,
                                                           "fp32": 50e12},
        hbm_bw=1000 * GB, hbm_efficiency=1.0, gemm_efficiency=1.0, kernel_overhead_s=0.0, gemm_tile=128,
        gemm_k_overhead=0.0, comm_overlap=1.0, rs_cost_factor=1.0,
        sm_count=128, gather_rails=1.0, host_bw=50 * GB, cpu_adam_params_per_s=1e9)


# ---- collectives ------------------------------------------------------------------------------
def test_allreduce_inside_one_node_is_ring_over_nvlink(hw):
    # 8 ranks in one node: 2·(8−1)/8 · 1 GB / 100 GB/s = 17.5 ms
    assert N.allreduce_time(hw, 1 * GB, 8, 1) == pytest.approx(0.0175, rel=1e-12)


def test_two_node_allreduce_is_limited_by_the_nic(hw):
    # 2 ranks on 2 nodes (stride 8): no NVLink hop; 2·(2−1)/2 · 1 GB / 10 GB/s = 100 ms
    assert N.allreduce_time(hw, 1 * GB, 2, 8) == pytest.approx(0.100, rel=1e-12)
    # 16 ranks on 2 nodes, hierarchical: intra RS+AG 2·7/8·S/100 GB/s + inter AR of S/8 over the NIC
    t = N.allreduce_time(hw, 1 * GB, 16, 1)
    assert t == pytest.approx(0.0175 + 2 * 0.5 * (1 * GB / 8) / (10 * GB), rel=1e-12)   # 30 ms
    # the NIC term dominates: 10× less bandwidth costs the cross-node part 10×
    slow = N.allreduce_time(hw.with_(inter_bw=1 * GB), 1 * GB, 16, 1)
    assert slow - 0.0175 == pytest.approx(10 * (t - 0.0175), rel=1e-12)


def test_allreduce_latency_terms(hw):
    h = hw.with_(intra_latency=10e-6, inter_latency=20e-6)
    # 8 in a node: ring 2·(k−1) = 14 steps of 10 µs; 32 over 4 nodes adds a tree of 2⌈log₂4⌉ = 4 steps of 20 µs
    assert N.allreduce_time(h, 0.0, 8, 1) == pytest.approx(14 * 10e-6)
    assert N.allreduce_time(h, 0.0, 32, 1) == pytest.approx(14 * 10e-6 + 4 * 20e-6)
    assert N.allreduce_time(h, 0.0, 32, 1, n_coll=3) == pytest.approx(3 * (14 * 10e-6 + 4 * 20e-6))


def test_allgather_and_reduce_scatter_are_half_an_allreduce(hw):
    # AG/RS of a 1 GB tensor over 16 ranks on 2 nodes: 7/8·S/100 GB/s + 1/2·S/10 GB/s (one rail)
    t = N.gather_time(hw, 1 * GB, 16, 1)
    assert t == pytest.approx(7 / 8 * 0.01 + 0.5 * 0.1, rel=1e-12)
    # ring latency: n − 1 steps, each at the cross-node α once the ring leaves the node
    h = hw.with_(intra_latency=10e-6, inter_latency=20e-6)
    assert N.gather_time(h, 0.0, 16, 1) == pytest.approx(15 * 20e-6)
    assert N.gather_time(h, 0.0, 8, 1) == pytest.approx(7 * 10e-6)


def test_alltoall_and_p2p(hw):
    # A2A over 16 ranks, 2 nodes: 7/16 of S over NVLink, 8/16 over the NIC
    assert N.alltoall_time(hw, 1 * GB, 16, 1) == pytest.approx(7 / 16 * 0.01 + 8 / 16 * 0.1, rel=1e-12)
    # DeepEP / hybrid-EP (dedup_k = top-k): a token goes once to each *rank* holding any of its k
    # experts, once to each remote node; 8 ranks in one node, k = 8: 8(1 − (7/8)^8) = 5.25 distinct
    # ranks per token instead of 8 copies
    one = N.alltoall_time(hw, 1 * GB, 8, 1)
    assert one == pytest.approx(7 / 8 * 0.01, rel=1e-12)
    hit = 8 * (1 - (7 / 8) ** 8)
    assert N.alltoall_time(hw, 1 * GB, 8, 1, dedup_k=8) == pytest.approx(one * hit / 8, rel=1e-12)
    # a gate that picks k = 8 consecutive of 128 experts (16 per rank): 1 + 7/16 ranks per token
    assert N.alltoall_time(hw, 1 * GB, 8, 1, dedup_k=8, span=1, experts=128) == \
        pytest.approx(one * (1 + 7 / 16) / 8, rel=1e-12)
    # P2P to the neighbour rank vs to the next node
    assert N.p2p_time(hw, 1 * GB, 1) == pytest.approx(0.01)
    assert N.p2p_time(hw, 1 * GB, 8) == pytest.approx(0.1)


def test_rank_order_decides_which_link_an_axis_uses(hw):
    # tp=8 innermost: TP all-reduce stays in the node; dp (stride 8) crosses nodes
    st = N.axis_strides(Plan(tp=8, dp=2, pp=1))
    assert st["tp"] == 1 and st["dp"] == 8
    assert N.members_per_domain(8, st["tp"], 8) == 8 and N.members_per_domain(2, st["dp"], 8) == 1


# ---- compute ----------------------------------------------------------------------------------
def test_gemm_roofline_with_wave_quantization(hw):
    b = 2
    # the math efficiency is set so that the 8192³ reference GEMM runs at gemm_efficiency (= 1 here):
    # 2·8192³/100 TFLOP/s = 2·8192³/(100 TFLOP/s·η) + 3·8192²·2 B / 1 TB/s
    t_ref, t_mem = 2 * 8192 ** 3 / 100e12, 3 * 8192 ** 2 * 2 / 1e12
    eta = K.gemm_math_efficiency(hw, 100e12, b)
    assert eta == pytest.approx(t_ref / (t_ref - t_mem), rel=1e-12)            # 1.0380
    assert K.gemm_time(hw, 8192, 8192, 8192, b, 100e12) == pytest.approx(t_ref, rel=1e-12)
    # calibration's inverse gives back the profile's gemm_efficiency
    assert K.gemm_efficiency_for(eta, 100e12, 1e12, b) == pytest.approx(hw.gemm_efficiency, rel=1e-12)
    # 4096³: 32·32 = 1024 tiles = 8 full waves of 128 SMs; math plus the un-hidden operand traffic
    mem = 3 * 4096 ** 2 * b / 1e12
    assert K.gemm_time(hw, 4096, 4096, 4096, b, 100e12) == pytest.approx(2 * 4096 ** 3 / (100e12 * eta) + mem,
                                                                        rel=1e-12)
    # one more row: 33·32 = 1056 tiles → 9 waves of 128 tiles of 128² outputs
    t = K.gemm_time(hw, 4097, 4096, 4096, b, 100e12)
    mem1 = (4097 * 4096 + 4096 * 4096 + 4097 * 4096) * b / 1e12
    assert t == pytest.approx(2 * 9 * 128 * 128 * 128 * 4096 / (100e12 * eta) + mem1, rel=1e-12)
    # a skinny GEMM pads M = 8 to one 128-row tile (64 tiles, one partial wave) and its weight read
    # (K·N·2 B) dominates: intensity ≈ M, far below the ridge
    M, N_, Kd = 8, 8192, 8192
    skinny = (M * Kd + Kd * N_ + M * N_) * b / 1e12
    assert K.gemm_time(hw, M, N_, Kd, b, 100e12) == pytest.approx(
        2 * 128 * 128 * 128 * Kd / (100e12 * eta) + skinny, rel=1e-12)


def test_batched_gemm_fills_waves_across_the_batch(hw):
    # P·V of 384 heads (s = 2048, d_head = 96): 16 row tiles each → 6,144 tiles = 48 waves, not 384
    eta = K.gemm_math_efficiency(hw, 100e12, 2)
    one = 2 * 128 * 128 * 128 * 2048 / (100e12 * eta)           # one full wave over K = 2048
    mem = 384 * (2048 * 2048 + 2048 * 96 + 2048 * 96) * 2 / 1e12
    assert K.gemm_time(hw, 2048, 96, 2048, 2, 100e12, batch=384) == pytest.approx(48 * one + mem, rel=1e-12)
    assert 384 * (K.gemm_time(hw, 2048, 96, 2048, 2, 100e12) - mem / 384) == pytest.approx(384 * one, rel=1e-12)


def test_gemm_k_overhead_slows_small_k(hw):
    # K₀ = 64: the math of a K = 768 GEMM runs at 768/832 of the rate; K = 8192 at 8192/8256 (the
    # operand traffic is the same)
    h = hw.with_(gemm_k_overhead=64.0)
    for K_ in (768, 8192):
        mem = (4096 * K_ + K_ * 4096 + 4096 * 4096) * 2 / 1e12
        assert K.gemm_time(h, 4096, 4096, K_, 2, 100e12) - mem == pytest.approx(
            (K.gemm_time(hw, 4096, 4096, K_, 2, 100e12) - mem) * (K_ + 64) / K_, rel=1e-12)


def test_gemm_backward_is_dgrad_plus_wgrad(hw):
    f, bwd = K.gemm_fwd_bwd(hw, 4096, 4096, 4096, 2, 100e12)
    assert bwd == pytest.approx(2 * f, rel=1e-12)


def test_memory_bound_kernels(hw):
    h = hw.with_(hbm_efficiency=0.8, kernel_overhead_s=5e-6)
    # 8 GB at 0.8 · 1 TB/s + 3 launches of 5 µs
    assert K.membound_time(h, 8 * GB, 3) == pytest.approx(0.01 + 15e-6, rel=1e-12)


# ---- DP overlap ---------------------------------------------------------------------------------
def test_hidden_tail_formula():
    # no window → all exposed; long window → one layer's share; short window → the excess
    assert S.hidden_tail(10.0, 0.0, 10) == 10.0
    assert S.hidden_tail(10.0, 100.0, 10) == pytest.approx(1.0)
    assert S.hidden_tail(10.0, 5.0, 10) == pytest.approx(10.0 - 5.0 * 0.9)
    # continuous where c = window
    assert S.hidden_tail(10.0, 10.0, 10) == pytest.approx(1.0)
    # the hidden 9 s hold a quarter of the SMs: a compute-bound window is 2.25 s longer; a link-bound
    # one (c − window·0.9 = 5.5 s exposed) has the slack and stays
    assert S.hidden_tail(10.0, 100.0, 10, 0.25) == pytest.approx(1.0 + 0.25 * 9.0)
    assert S.hidden_tail(10.0, 5.0, 10, 0.25) == pytest.approx(10.0 - 5.0 * 0.9)
    assert S.hidden_tail(10.0, 0.0, 10, 0.25) == 10.0


def test_dp_sm_share_is_the_runtime_nccl_ctas_over_the_sms(hw):
    """32 CTAs (NCCL's channels) of 128 SMs; a CPU device's gloo collectives hold none."""
    ctx = _ddp_ctx()
    assert ctx.train.rt.comm.dp_comm_sms == 32
    assert S.dp_sm_share(ctx, hw) == pytest.approx(0.25)
    assert S.dp_sm_share(ctx, hw.with_(host_is_device=True)) == 0.0


def _ddp_ctx(world=16):
    m = get_preset("7b")
    return Ctx(m, TrainingSpec(seq_len=4096, global_batch=world), world)


def test_overlap_hides_a_reduce_shorter_than_backward(hw):
    ctx = _ddp_ctx()
    p = Plan(dp=16, mbs=1).resolved(16)
    dense, expert = Mm.stage_param_counts(ctx, p, 0)
    S_bytes = (dense + expert) * ctx.train.b_G
    L = ctx.model.layers
    total_by_hand = 2 * 7 / 8 * S_bytes / (100 * GB) + 2 * 0.5 * (S_bytes / 8) / (10 * GB)
    s = S.dp_sm_share(ctx, hw)                               # 32 NCCL CTAs of 128 SMs
    ex, tot = S._dp_exposed(ctx, hw, p, 0.0, 1e3, 0)        # backward far longer than the reduce
    assert float(tot) == pytest.approx(total_by_hand, rel=1e-9)
    # only the last layer's share, plus the SMs the hidden rest takes from the backward under it
    assert float(ex) == pytest.approx(total_by_hand / L + s * total_by_hand * (1 - 1 / L), rel=1e-9)
    ex_short, _ = S._dp_exposed(ctx, hw, p, 0.0, total_by_hand / 2, 0)
    assert float(ex_short) == pytest.approx(total_by_hand - total_by_hand / 2 * (1 - 1 / L), rel=1e-9)
    ex_none, _ = S._dp_exposed(ctx, hw, p.with_(dp_overlap=False), 0.0, 1e3, 0)
    assert float(ex_none) == pytest.approx(total_by_hand, rel=1e-9)   # not overlapped: all of it


def test_zero3_without_backward_prefetch_serializes_backward_collectives(hw):
    ctx = _ddp_ctx()
    p = Plan(dp=16, zero=3, mbs=1)
    p = p.resolved(16)
    dense, expert = Mm.stage_param_counts(ctx, p, 0)
    psi = dense + expert
    L = ctx.model.layers
    n_coll = L + 1            # FSDP units: layers + embedding/head (latency-free here)
    ag = N.gather_time(hw, psi * ctx.train.b_P, 16, 1, n_coll)
    rs = N.gather_time(hw, psi * ctx.train.b_G, 16, 1, n_coll)
    t_f, t_b = 1e3, 2e3
    s, h = S.dp_sm_share(ctx, hw), 1 - 1 / L             # SM share of the hidden collectives
    ex_pf, tot = S._dp_exposed(ctx, hw, p, t_f, t_b, 0)
    assert float(tot) == pytest.approx(2 * ag + rs, rel=1e-9)
    assert float(ex_pf) == pytest.approx(ag / L + (ag + rs) / L + s * h * (2 * ag + rs), rel=1e-9)
    ex_np, _ = S._dp_exposed(ctx, hw, p.with_(bwd_prefetch=False), t_f, t_b, 0)
    assert float(ex_np) == pytest.approx(ag / L + s * h * ag + ag + rs, rel=1e-9)
    # a CPU device (compute on the issuing thread): gathers exposed, the reduce-scatter still hides
    ex_cpu, _ = S._dp_exposed(ctx, hw.with_(host_is_device=True), p, t_f, t_b, 0)
    assert float(ex_cpu) == pytest.approx(ag + ag + rs / L, rel=1e-9)


def test_fetch_sync_pairs_each_gather_with_the_sub_module_before_it():
    u = (3 / 12, 1 / 12, 4 / 12, 4 / 12)              # QKV, proj, FC1, FC2 of a plain GPT layer
    # forward F = 12, gather A = 12: pairs (QKV→proj 1−3), (proj→FC1 4−1), (FC1→FC2 4−4), (FC2→QKV' 3−4):
    # only the FC1 gather under the small proj shows, 3 s, although Σ compute = Σ gathers
    fwd, _ = S.fetch_sync_exposed(12.0, 24.0, 12.0, u, 0.0)
    assert float(fwd) == pytest.approx(3.0)
    # gathers twice the compute: every pair exposes A·uᵢ₊₁ − F·uᵢ, summing to A − F
    fwd, _ = S.fetch_sync_exposed(6.0, 12.0, 12.0, (0.25,) * 4, 0.0)
    assert float(fwd) == pytest.approx(6.0)
    # full recompute (B = F + Bw = 12 + 24): the recompute pass repeats the first three pairs (3 s);
    # the last backward module (QKV, 24·3/12 = 6 s) hides the next layer's first gather (3 s)
    _, bwd = S.fetch_sync_exposed(12.0, 36.0, 12.0, u, 1.0)
    assert float(bwd) == pytest.approx(3.0)
    # no recompute (Bw = 24): backward FC2/FC1/proj/QKV hide FC1/proj/QKV/next FC2:
    # 4−8, 1−8, 3−2, 4−6 → 1 s
    _, bwd = S.fetch_sync_exposed(12.0, 24.0, 12.0, u, 0.0)
    assert float(bwd) == pytest.approx(1.0)
    # nothing overlaps: every gather exposed
    fwd, bwd = S.fetch_sync_exposed(12.0, 24.0, 12.0, u, 0.0, overlap=0.0)
    assert (float(fwd), float(bwd)) == pytest.approx((12.0, 12.0))
    # Llama-2 7B (h 4096, no GQA, SwiGLU f 11008): 3h², h², 2fh, fh over 4h² + 3fh
    tot = 4 * 4096 + 3 * 11008
    assert S.module_units(get_preset("7b")) == pytest.approx((3 * 4096 / tot, 4096 / tot, 2 * 11008 / tot,
                                                              11008 / tot), rel=1e-12)


def test_zero3_fetch_sync_exposes_every_reduce_scatter(hw):
    ctx = _ddp_ctx()
    p = Plan(dp=16, zero=3, mbs=1, fetch_sync=True).resolved(16)
    dense, expert = Mm.stage_param_counts(ctx, p, 0)
    psi = dense + expert
    L = ctx.model.layers
    n_coll = 4 * (L + 1)      # one gather per weight-bearing sub-module
    ag = N.gather_time(hw, psi * ctx.train.b_P, 16, 1, n_coll)
    rs = N.gather_time(hw, psi * ctx.train.b_G, 16, 1, n_coll, op="rs")
    u = S.module_units(ctx.model)
    t_f, t_b = 1e3, 2e3       # compute far longer than the gathers: only the first gathers of each pass show
    ex, tot = S._dp_exposed(ctx, hw, p, t_f, t_b, 0)
    assert float(tot) == pytest.approx(2 * ag + rs, rel=1e-9)
    assert float(ex) == pytest.approx(2 * ag / (L + 1) * u[0] + rs, rel=1e-9)
    # the layer-level schedule hides the same reduce-scatter under backward (its per-layer collectives
    # are fewer, so their latency-free time is that of the L + 1 units; the hidden part holds SMs)
    ex_layer, _ = S._dp_exposed(ctx, hw, p.with_(fetch_sync=False), t_f, t_b, 0)
    ag1 = N.gather_time(hw, psi * ctx.train.b_P, 16, 1, L + 1)
    rs1 = N.gather_time(hw, psi * ctx.train.b_G, 16, 1, L + 1, op="rs")
    s, h = S.dp_sm_share(ctx, hw), 1 - 1 / L
    assert float(ex_layer) == pytest.approx(float((2 * ag1 + rs1) * (1 / L + s * h)), rel=1e-9)
    assert float(ex_layer) < float(ex)


def test_breakdown_sums_to_step_and_overlap_is_reported(hw):
    ctx = _ddp_ctx()
    ev = S.evaluate(ctx, hw, Plan(dp=16, zero=3, mbs=1))
    parts = sum(float(ev[k]) for k in S.BREAKDOWN)
    assert parts == pytest.approx(float(ev["step_s"]), rel=1e-12)
    assert float(ev["dp_comm_overlapped"]) == pytest.approx(float(ev["dp_comm_total"] - ev["dp_comm_exposed"]))


def test_optimizer_step_is_memory_bound_and_cpu_adam_under_offload(hw):
    ctx = _ddp_ctx(8)
    p = Plan(dp=8, zero=1, mbs=1)
    dense, expert = Mm.stage_param_counts(ctx, p, 0)
    local = (dense + expert) / 8
    gpu = S._optimizer_time(ctx, hw, p, 0)
    per = S.optimizer_bytes_per_param(ctx.train)
    assert float(gpu) == pytest.approx(local * per / (1000 * GB) + 4 * hw.kernel_overhead_s, rel=1e-9)
    cpu = S._optimizer_time(ctx, hw, p.with_(offload="optimizer"), 0)
    assert float(cpu) == pytest.approx(local / 1e9, rel=1e-9)       # CPU Adam at 1e9 params/s


def test_numpy_broadcast_matches_scalar():
    c = np.array([1.0, 10.0, 100.0])
    w = np.array([[0.0], [50.0]])
    out = S.hidden_tail(c, w, 10)
    assert out.shape == (2, 3)
    for i in range(2):
        for j in range(3):
            assert out[i, j] == pytest.approx(S.hidden_tail(float(c[j]), float(w[i, 0]), 10))


# ---- TP, PP, CP, offload ------------------------------------------------------------------------
def test_tp_collectives_exposed_without_overlap(hw):
    # tp=8 in one node, no SP: 2 all-reduces of b·s·h forward (4 AG-units), none overlapped
    ctx = _ddp_ctx(8)
    p = Plan(tp=8, dp=1, mbs=1, tp_async=False).resolved(8)
    tp_f, tp_b, *_ = S._per_layer_comm(ctx, hw, p)
    bsh = 1 * 4096 * ctx.model.hidden * ctx.train.b_A
    unit = 7 / 8 * bsh / (100 * GB)
    assert float(tp_f) == pytest.approx(4 * unit, rel=1e-12)
    assert float(tp_b) == pytest.approx(4 * unit, rel=1e-12)
    # SP: forward 2 AG + 2 RS, backward 2 RS + 2 AG + 2 re-AG; gloo-like RS at 3× the ring cost
    f_sp, b_sp, *_ = S._per_layer_comm(ctx, hw.with_(rs_cost_factor=3.0), p.with_(sp=True))
    assert float(f_sp) == pytest.approx((2 + 2 * 3) * unit, rel=1e-12)
    assert float(b_sp) == pytest.approx((4 + 2 * 3) * unit, rel=1e-12)


def test_pipeline_p2p_and_offload_terms(hw):
    ctx = _ddp_ctx(16)
    # pp=2 across the two nodes (stride dp·tp = 8): every micro-batch sends one activation each way
    p = Plan(pp=2, dp=8, mbs=1).resolved(16)
    ev = S.evaluate(ctx, hw, p)
    m = ctx.train.global_batch // 8
    X = 1 * 4096 * ctx.model.hidden * ctx.train.b_A
    assert float(ev["pp_comm"]) == pytest.approx(2 * m * X / (10 * GB), rel=1e-12)
    # optimizer offload: host-link bytes at host_bw
    from autoplace.cost import comm as C
    q = Plan(dp=16, zero=1, offload="optimizer", mbs=1).resolved(16)
    ev = S.evaluate(ctx, hw, q)
    assert float(ev["offload"]) == pytest.approx(float(C.offload_bytes_stage(ctx, q, 0)) / (50 * GB), rel=1e-12)


def test_context_parallel_ring_hides_under_attention(hw):
    ctx = _ddp_ctx(16)
    p = Plan(cp=2, dp=8, mbs=1).resolved(16)
    from autoplace.cost import compute as Kc
    L = ctx.model.layers
    slow = hw.with_(intra_bw=5 * GB)                  # the K/V ring outlasts the attention core
    *_, cp_f1, cp_b1, _e1, _e2, _o = S._per_layer_comm(ctx, slow, p)
    lt = Kc.layer_compute_times(ctx, slow, p)
    exposed_f = float(cp_f1) - float(lt["attn_f"])
    exposed_b = float(cp_b1) - float(lt["attn_b"])
    assert exposed_f > 0 and exposed_b > 0
    sts, _, _ = S.stage_times(ctx, slow, p)
    assert float(sts["first"]["cp"]) == pytest.approx(L * (exposed_f + exposed_b), rel=1e-9)
    fast, _, _ = S.stage_times(ctx, hw.with_(intra_bw=1000 * GB), p)
    assert float(fast["first"]["cp"]) == 0.0           # at 1 TB/s it hides completely


def test_overlapped_tp_and_cp_are_reported_and_complete_the_issued_time(hw):
    ctx = _ddp_ctx(16)
    L = ctx.model.layers
    # TP: issued time is the same with and without overlap; overlap moves it from tp_comm to overlapped
    base = Plan(tp=8, dp=2, sp=True, mbs=1, tp_async=False).resolved(16)
    plain = S.evaluate(ctx, hw, base)
    ovl = S.evaluate(ctx, hw, base.with_(tp_overlap=True))
    assert float(plain["tp_comm_overlapped"]) == 0.0
    assert float(ovl["tp_comm_overlapped"]) > 0.0
    assert float(ovl["tp_comm"] + ovl["tp_comm_overlapped"]) == pytest.approx(float(plain["tp_comm"]), rel=1e-9)
    # CP: the whole K/V ring (forward once, backward twice) is hidden under attention at 1 TB/s
    p = Plan(cp=2, dp=8, mbs=1).resolved(16)
    fast = hw.with_(intra_bw=1000 * GB)
    *_, cp_f1, cp_b1, _e1, _e2, _o = S._per_layer_comm(ctx, fast, p)
    ev = S.evaluate(ctx, fast, p)
    m = float(ev["micro_batches"])
    assert float(ev["cp_comm"]) == 0.0
    assert float(ev["cp_comm_overlapped"]) == pytest.approx(m * L * float(cp_f1 + cp_b1), rel=1e-9)


def test_experts_with_a_one_rank_expert_dp_group_are_not_gathered_or_reduced():
    """ep = dp·cp: every rank holds its experts whole (expert-DP group of one; NeMo AutoModel passes
    them to FSDP as ignored_params, Megatron's expert DP group is 1). The DP-family collectives and
    the FSDP gather buffers then carry the dense parameters only; with ep < dp they carry the experts
    too."""
    from autoplace.cost import memory as Mm
    from autoplace.placement.rules import Ctx
    from autoplace.specs.presets import get_preset
    from autoplace.specs.training import TrainingSpec
    moe = get_preset("mixtral-8x7b")
    ctx = Ctx(moe, TrainingSpec(seq_len=4096, global_batch=64), 8)
    whole = Plan(dp=8, ep=8, zero=3, reshard_after_forward=False, mbs=1).resolved(8)
    split = Plan(dp=8, ep=4, zero=3, reshard_after_forward=False, mbs=1).resolved(8)
    dense, expert = Mm.stage_param_counts(ctx, whole, 0)
    assert expert > 0
    assert float(Mm.collective_params_rank(ctx, whole, 0)) == pytest.approx(float(dense))
    d2, e2 = Mm.stage_param_counts(ctx, split, 0)
    assert float(Mm.collective_params_rank(ctx, split, 0)) == pytest.approx(float(d2 + e2))
    # the gathered (held) buffer of zero=3 without resharding: dense parameters only when ep = dp
    t = ctx.train
    held = float(Mm.transient_bytes(ctx, whole, 0)) - float(Mm.logits_bytes(ctx, whole))
    unit = float(Mm.largest_unit_rank(ctx, whole))
    assert held == pytest.approx(float(dense) * t.b_P + unit * (t.b_G + t.b_G_reduce), rel=1e-9)
    assert unit < float(Mm.layer_params_rank(moe, 1, True)) + float(Mm.expert_layer_params_rank(moe, 8, 1))


def test_expert_collectives_run_over_the_expert_dp_group(hw):
    """ZeRO-1 reduce-scatter/all-gather split by parameter group: dense parameters over the dp shard
    group (stride tp·cp = 1 here, 16 ranks on 2 nodes), experts over the expert-DP group — world /
    (etp·ep·pp) = 4 ranks at stride ep = 4 (Megatron `expert_data_parallel_group`), two on each node,
    so the expert collectives cross the NIC. The collective count splits in proportion."""
    moe = get_preset("mixtral-8x7b")
    ctx = Ctx(moe, TrainingSpec(seq_len=4096, global_batch=64), 16)
    p = Plan(dp=16, ep=4, zero=1, mbs=1, dp_overlap=False).resolved(16)
    dense, expert = Mm.stage_param_counts(ctx, p, 0)
    nd, ne = Mm.shard_groups(ctx, p)
    assert (float(nd), float(ne)) == (16.0, 4.0)
    assert float(N.axis_strides(p)["ep"]) * 4 == 4.0
    t = ctx.train
    ex, tot = S._dp_exposed(ctx, hw, p, 0.0, 1.0, 0)
    # by hand, latency-free: gather_time(bytes, n, stride) over NVLink/NIC
    dense_rs = N.gather_time(hw, float(dense) * t.b_G_reduce, 16, 1, 1, op="rs")
    exp_rs = N.gather_time(hw, float(expert) * t.b_G_reduce, 4, 4, 1, op="rs")
    dense_ag = N.gather_time(hw, float(dense) * t.b_P, 16, 1, 1)
    exp_ag = N.gather_time(hw, float(expert) * t.b_P, 4, 4, 1)
    assert float(tot) == pytest.approx(float(dense_rs + exp_rs + dense_ag + exp_ag), rel=1e-6)
    # stride 4 puts two of the four expert-DP ranks on each node: the group pays the NIC, which the same
    # four ranks packed in one node (stride 1) would not
    assert float(exp_ag) > 5 * float(N.gather_time(hw, float(expert) * t.b_P, 4, 1, 1))


def test_recompute_modules_price_the_listed_modules(hw):
    """Megatron-Core --recompute-modules under recompute=selective: core_attn re-runs the attention
    core (the default selective); mla_up_proj re-runs MLA's q/kv up-projection GEMMs and stops keeping
    the per-head Q, K (d_qk) and V (d_v) they make — time and memory by hand, per layer."""
    from autoplace.plan import parse_plan
    m = get_preset("deepseek-v3")
    ctx = Ctx(m, TrainingSpec(seq_len=4096, global_batch=64), 64)
    base = parse_plan("ep=64,zero=1,recompute=selective,mbs=1").resolved(64)
    up = parse_plan("ep=64,zero=1,recompute_modules=mla_up_proj,mbs=1").resolved(64)
    both = parse_plan("ep=64,zero=1,recompute_modules=core_attn+mla_up_proj,mbs=1").resolved(64)
    lt = K.layer_compute_times(ctx, hw, up)
    # the up-projection GEMMs: q_up r_q → H·(d_nope + d_rope), kv_up r_kv → H·(d_nope + d_v), T = 4096 rows
    T, H = 4096, m.heads
    q_up = K.gemm_time(hw, T, H * (m.qk_nope_head_dim + m.qk_rope_head_dim), m.q_lora_rank, ctx.train.b_A,
                       hw.peak("bf16"))
    kv_up = K.gemm_time(hw, T, H * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank, ctx.train.b_A,
                        hw.peak("bf16"))
    assert float(lt["up_f"]) == pytest.approx(float(q_up + kv_up), rel=1e-9)
    L = m.layers
    r_base = float(S.stage_times(ctx, hw, base)[0]["first"]["recompute"])
    r_up = float(S.stage_times(ctx, hw, up)[0]["first"]["recompute"])
    r_both = float(S.stage_times(ctx, hw, both)[0]["first"]["recompute"])
    assert r_base == pytest.approx(L * float(lt["attn_f"] + lt["attn_elem_f"]), rel=1e-9)
    assert r_up == pytest.approx(L * float(lt["up_f"]), rel=1e-9)
    assert r_both == pytest.approx(r_base + r_up, rel=1e-9)
    # memory: flash keeps only the log-sum-exp, so selective = full; mla_up_proj drops Q, K, V
    full, sel, _ = Mm.activation_bytes_per_layer(ctx, base, "all")
    _, sel_up, _ = Mm.activation_bytes_per_layer(ctx, up, "all")
    assert float(sel) == pytest.approx(float(full))
    qkv = T * ctx.train.b_A * H * (2 * m.d_qk + m.d_v)          # 4096 · 2 B · 128 · (2·192 + 128)
    assert qkv == 4096 * 2 * 128 * 512
    assert float(full - sel_up) == pytest.approx(qkv, rel=1e-12)
    # HFU counts the recomputed up-projection forward, MFU does not
    ev = S.evaluate(ctx, hw, up)
    upmacs = m.q_lora_rank * H * 192 + m.kv_lora_rank * H * 256
    extra = ctx.train.tokens_per_step * L * 2.0 * upmacs / float(K.model_flops_per_step(ctx))
    assert float(ev["hfu"] / ev["mfu"]) == pytest.approx(1.0 + extra, rel=1e-9)


def test_recompute_modules_parse_and_rules():
    from autoplace.errors import InputError
    from autoplace.placement.rules import check
    from autoplace.plan import parse_plan
    p = parse_plan("recompute_modules=core_attn+mla_up_proj")
    assert (p.recompute, p.recompute_modules) == ("selective", ("core_attn", "mla_up_proj"))
    assert "rc=selective(core_attn+mla_up_proj)" in p.resolved(8).short()
    with pytest.raises(InputError, match="needs recompute=selective"):
        parse_plan("recompute=full,recompute_modules=core_attn")
    with pytest.raises(InputError, match="does not price yet"):
        parse_plan("recompute_modules=shared_experts")
    with pytest.raises(InputError, match="not a module"):
        parse_plan("recompute_modules=attention")
    dense = Ctx(get_preset("llama3-8b"), TrainingSpec(seq_len=8192, global_batch=8), 8)
    ids = [v.rule for v in check(dense, parse_plan("recompute_modules=mla_up_proj").resolved(8))]
    assert "R2" in ids
    assert "R2" not in [v.rule for v in check(dense, parse_plan("recompute_modules=core_attn").resolved(8))]


def test_recompute_modules_are_a_megatron_core_capability():
    """Only megatron-core (≥ 0.12) names selective-recompute modules; every other runtime refuses a
    plan that lists them, with the reason (RT-recompute-modules)."""
    from autoplace.plan import parse_plan
    from autoplace.runtimes import load_runtime
    from autoplace.runtimes.check import capability_rules
    ctx = Ctx(get_preset("deepseek-v3"), TrainingSpec(seq_len=4096, global_batch=64), 64)
    p = parse_plan("ep=64,zero=1,recompute_modules=mla_up_proj,mbs=1").resolved(64)
    for name, refused in (("megatron-core", False), ("megatron-core-0.11", True), ("torchtitan", True),
                          ("deepspeed", True)):
        rule = next(r for r in capability_rules(load_runtime(name)) if r.id == "RT-recompute-modules")
        assert bool(rule.violated(ctx, p)) is refused, name
        if refused:
            assert "recompute_modules=mla_up_proj" in rule.message(ctx, p)
    plain = parse_plan("ep=64,zero=1,recompute=selective,mbs=1").resolved(64)
    rule = next(r for r in capability_rules(load_runtime("torchtitan")) if r.id == "RT-recompute-modules")
    assert not bool(rule.violated(ctx, plain))


def test_attention_rate_falls_with_small_heads_by_the_softmax_exp_cost():
    """Per score, 4·d̄ matmul FLOPs plus one exponential on the SFUs: t(d̄) = 4·d̄/R_mm + 1/S with R_mm
    fixed by the kernel's stand-alone d = 128 rate (the in-training rate ÷ ATTENTION_IN_TRAINING).
    H100 by hand (cuDNN rate 0.277 × 989 TF, S = 3.9 T exp/s), then against the H200 measurement."""
    import json
    from dataclasses import replace as dc_replace
    from pathlib import Path
    h100 = load_hardware("h100-sxm-80gb")
    llama = get_preset("llama3-8b")
    assert llama.d_qk == llama.d_v == 128
    r128 = 0.277 * 989e12
    assert h100.sfu_exp_per_s == 3.9e12
    assert K.head_dim_factor(h100, llama, r128) == pytest.approx(1.0, rel=1e-12)
    d64 = dc_replace(llama, head_dim=64, heads=64)
    assert d64.d_qk == 64
    t128 = 512 / (r128 / K.ATTENTION_IN_TRAINING)
    t_mm = t128 - 1 / 3.9e12
    want = (256 / (t_mm / 2 + 1 / 3.9e12)) / (512 / t128)
    assert K.head_dim_factor(h100, d64, r128) == pytest.approx(want, rel=1e-12)
    assert K.head_dim_factor(h100, get_preset("deepseek-v3"), r128) > 1.0   # MLA d̄ = 160
    assert K.head_dim_factor(h100.with_(sfu_exp_per_s=0.0), d64, r128) == 1.0
    # the H200 run (benchmarks/gpu_kernels.py): SDPA cuDNN and FA2, d = 64 against d = 128, fwd+bwd
    meas = json.loads((Path(__file__).resolve().parents[1] / "benchmarks/results/h200_kernels.json").read_text())
    h200 = load_hardware("h200")
    for kern in ("cudnn", "flash2"):
        rows = {r["d"]: r["fwd_bwd_tflops"] for r in meas["attention"] if r["kernel"] == kern}
        rate = h200.peak("bf16") * h200.attention_eff(kern)
        assert K.head_dim_factor(h200, d64, rate) == pytest.approx(rows[64] / rows[128], abs=0.05), kern
    # the estimate's attention core carries exactly that factor (same FLOPs: heads × d_head kept)
    ctx128 = Ctx(llama, TrainingSpec(seq_len=8192, global_batch=8), 8)
    ctx64 = Ctx(d64, TrainingSpec(seq_len=8192, global_batch=8), 8)
    from autoplace.plan import parse_plan
    p = parse_plan("zero=1,mbs=1").resolved(8)
    a128 = K.layer_compute_times(ctx128, h100, p)
    a64 = K.layer_compute_times(ctx64, h100, p)
    ov = h100.kernel_overhead_s
    rate = h100.peak("bf16") * h100.attention_eff(ctx128.train.rt.kernels.attention)
    ratio = float(a64["attn_f"] - ov) / float(a128["attn_f"] - ov)
    assert ratio == pytest.approx(1.0 / K.head_dim_factor(h100, d64, rate), rel=1e-9)


def test_sliding_window_attention_pays_its_key_tiles():
    """A flash kernel visits ⌈w/B⌉ + 1 key blocks per query block on a window (B = 128), the causal
    s/(2B) + ½, each plus c = ATTENTION_ROW_TILES of fixed work: the H200 FlexAttention run's window
    share of the causal time, and the estimate's attention time on a half-windowed model."""
    import json
    from dataclasses import replace as dc_replace
    from pathlib import Path
    m = dc_replace(get_preset("llama3-8b"), sliding_window=128, global_every=2)
    t = TrainingSpec(seq_len=4096, global_batch=8)
    useful = 128 - 128 * 128 / (2 * 4096)
    assert m.windowed_share == 0.5
    assert K.keys_per_query(m, t) == pytest.approx(0.5 * useful + 0.5 * 2048)       # FLOPs: the keys attended
    share = (1 + 1 + K.ATTENTION_ROW_TILES) / (16 + 0.5 + K.ATTENTION_ROW_TILES)
    assert K.keys_per_query(m, t, K.ATTENTION_TILE) == pytest.approx(0.5 * 2048 * share + 0.5 * 2048)
    meas = json.loads((Path(__file__).resolve().parents[1] / "benchmarks/results/h200_kernels.json").read_text())
    fx = {r["mask"]: r["fwd_bwd_s"] for r in meas["flex"]}
    assert share == pytest.approx(fx["window128"] / fx["causal"], abs=0.01)
    # a window as long as the sequence is the causal square: nothing added
    long = dc_replace(m, sliding_window=8192)
    assert K.keys_per_query(long, t, 128) == K.keys_per_query(long, t) == 2048


def test_fp8_gemm_writes_a_16_bit_result_and_its_tile_overhead_is_a_time(hw):
    """An FP8 GEMM reads 1-byte operands, writes BF16; K₀ (stated in BF16 K-elements) is a per-tile
    time, so at the 2× FP8 peak it is 2·K₀ FP8 K-elements. By hand on the round profile."""
    h = hw.with_(gemm_k_overhead=64.0, gemm_k_overhead_fp8=0.0, sm_count=1)
    M, N, Kk = 256, 256, 512
    t8 = float(K.gemm_time(h, M, N, Kk, 1, h.peak("fp8"), efficiency=1.0))
    eta = K.gemm_math_efficiency(h, h.peak("fp8"), 1, 1.0)
    tiles = 4
    want = 2.0 * tiles * 128 * 128 * (Kk + 128) / (h.peak("fp8") * eta) + (M * Kk + Kk * N + 2 * M * N) / h.hbm_bw
    assert t8 == pytest.approx(want, rel=1e-12)
    t16 = float(K.gemm_time(h, M, N, Kk, 2, h.peak("bf16"), efficiency=1.0))
    eta16 = K.gemm_math_efficiency(h, h.peak("bf16"), 2, 1.0)
    want16 = 2.0 * tiles * 128 * 128 * (Kk + 64) / (h.peak("bf16") * eta16) + 2 * (M * Kk + Kk * N + M * N) / h.hbm_bw
    assert t16 == pytest.approx(want16, rel=1e-12)


def test_hopper_gemm_rates_against_the_h200_runs():
    """The H200 profile's GEMM terms against two H200 runs of benchmarks/gpu_kernels.py: batched
    8192-row expert shapes and 8192³, BF16 and FP8 (split and fast accumulation), predicted sustained
    rate = sustained_factor × the measured burst rate within 15 % (FP8 with the measured
    gemm_k_overhead_fp8 = 512; the BF16-implied 128 is 34 % fast on Qwen3's K = 768)."""
    import json
    from pathlib import Path
    h200 = load_hardware("h200")
    assert h200.gemm_k_overhead_fp8 == 512
    res = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
    for f in ("h200_kernels.json", "h200_kernels_run2.json"):
        for g in json.loads((res / f).read_text())["gemm"]:
            if g["batch"] == 1 and g["name"] != "square":
                continue
            fl = 2.0 * g["batch"] * g["M"] * g["N"] * g["K"]
            for key, b, peak, eff in (("bf16_tflops", 2, h200.peak("bf16"), None),
                                      ("fp8_tflops", 1, h200.peak("fp8"), h200.gemm_efficiency_fp8),
                                      ("fp8_fast_tflops", 1, h200.peak("fp8"), h200.gemm_efficiency_fp8)):
                if key not in g:
                    continue
                t = float(K.gemm_time(h200, g["M"], g["N"], g["K"], b, peak, batch=g["batch"], efficiency=eff))
                assert fl / t / 1e12 == pytest.approx(h200.sustained_factor * g[key], rel=0.15), (f, g["name"], key)
    q = next(g for g in json.loads((res / "h200_kernels.json").read_text())["gemm"]
             if g["name"] == "qwen3_fc2" and g["batch"] == 8)
    generic = h200.with_(gemm_k_overhead_fp8=0.0)
    t = float(K.gemm_time(generic, q["M"], q["N"], q["K"], 1, h200.peak("fp8"), batch=8,
                          efficiency=h200.gemm_efficiency_fp8))
    assert 2.0 * 8 * q["M"] * q["N"] * q["K"] / t / 1e12 > 1.3 * h200.sustained_factor * q["fp8_tflops"]


def test_layernorm_moe_act_and_mlp_modules_by_hand(hw):
    """Megatron-Core's output-discarding recompute of the two pre-norms (layernorm), the expert
    activation (moe_act) and the dense layers' MLP (mlp): each drops what its forward made and
    re-runs that forward in backward; the rest of the layer is kept as without recompute."""
    from autoplace.cost import memory as Mm
    from autoplace.cost import step as S
    from autoplace.plan import parse_plan
    T = 4096
    # dense Llama 3 8B, bf16, tp 1: layernorm drops 2·h·b_A per token, mlp the FC1 output and FC2 input
    ctx = Ctx(get_preset("llama3-8b"), TrainingSpec(seq_len=T, global_batch=8, attention="flash"), 8)
    m = ctx.model
    none = parse_plan("mbs=1").resolved(8)
    full = float(Mm.activation_bytes_per_layer(ctx, none))
    for mods, dropped in (("layernorm", 2 * m.hidden * 2), ("mlp", 3 * 2 * m.ffn_hidden),
                          ("layernorm+mlp", 2 * m.hidden * 2 + 3 * 2 * m.ffn_hidden)):
        p = parse_plan(f"recompute_modules={mods},mbs=1").resolved(8)
        assert full - float(Mm.activation_bytes_per_layer(ctx, p)) == T * dropped, mods
    lt = K.layer_compute_times(ctx, hw, none)
    ev0 = S.evaluate(ctx, hw, none)
    ev = S.evaluate(ctx, hw, parse_plan("recompute_modules=layernorm+mlp,mbs=1").resolved(8))
    assert float(ev["recompute"]) == pytest.approx(float(ev0["micro_batches"]) * m.layers
                                                   * float(lt["ln_f"] + lt["mlp_f"]), rel=1e-9)
    # the mlp GEMMs count as hardware FLOPs: 2·3·h·f per token and layer
    extra = 8 * T * m.layers * 2.0 * 3 * m.hidden * m.ffn_hidden / float(K.model_flops_per_step(ctx))
    assert float(ev["hfu"] / ev["mfu"]) == pytest.approx(1.0 + extra, rel=1e-9)
    # MoE: moe_act drops the FC2 input of every routed token, top_k·f_expert·b_A
    moe = Ctx(get_preset("qwen3-30b-a3b"), TrainingSpec(seq_len=T, global_batch=8, attention="flash"), 8)
    q = moe.model
    base = parse_plan("ep=8,mbs=1").resolved(8)
    act = parse_plan("ep=8,recompute_modules=moe_act,mbs=1").resolved(8)
    assert float(Mm.activation_bytes_per_layer(moe, base) - Mm.activation_bytes_per_layer(moe, act)) \
        == T * q.top_k * q.f_expert * 2
    lq = K.layer_compute_times(moe, hw, base)
    assert float(lq["moe_act_f"]) == pytest.approx(
        T * q.top_k * 3 * 2 * q.f_expert / (hw.hbm_bw * hw.hbm_efficiency) + hw.kernel_overhead_s, rel=1e-9)


def test_module_rules_name_what_the_model_lacks():
    from autoplace.placement.rules import check
    from autoplace.plan import parse_plan
    dense = Ctx(get_preset("llama3-8b"), TrainingSpec(seq_len=4096, global_batch=8), 8)
    moe = Ctx(get_preset("qwen3-30b-a3b"), TrainingSpec(seq_len=4096, global_batch=8), 8)
    bad = [v for v in check(dense, parse_plan("recompute_modules=moe_act").resolved(8)) if v.rule == "R2"]
    assert bad and "has no MoE layers" in bad[0].message
    bad = [v for v in check(moe, parse_plan("ep=8,recompute_modules=mlp").resolved(8)) if v.rule == "R2"]
    assert bad and "every layer of" in bad[0].message
    assert not [v for v in check(moe, parse_plan("ep=8,recompute_modules=moe_act+layernorm").resolved(8))
                if v.rule == "R2"]
    # DeepSeek-V3's three dense layers take mlp
    ds = Ctx(get_preset("deepseek-v3"), TrainingSpec(seq_len=4096, global_batch=64), 64)
    assert not [v for v in check(ds, parse_plan("ep=64,recompute_modules=mlp+mla_up_proj").resolved(64))
                if v.rule == "R2"]


def test_causal_flash_rate_rises_with_the_keys_per_call(hw):
    """Each query block of a causal flash kernel visits s/2B + ½ key blocks and does c =
    ATTENTION_ROW_TILES blocks of fixed work: e(s) = (s/256)/(s/256 + 0.5 + 4.7), by hand e(4096) =
    16/21.2 and e(32768) = 128/133.2; the profile rate holds at ATTENTION_RATE_SEQ = 5120, and ring
    CP runs s/cp per call. So the forward attention time of a layer at 32k tokens is the causal work
    ratio (32768/5120)² over the rate ratio e(32768)/e(5120), less the launch overhead."""
    assert float(K.attention_seq_efficiency(4096)) == pytest.approx(16 / 21.2, rel=1e-12)
    assert float(K.attention_seq_efficiency(32768)) == pytest.approx(128 / 133.2, rel=1e-12)
    assert K.ATTENTION_RATE_SEQ == 5120
    m = get_preset("llama3-8b")

    def attn_f(seq, cp=1):
        ctx = Ctx(m, TrainingSpec(seq_len=seq, global_batch=8), 8)
        lt = K.layer_compute_times(ctx, hw, Plan(dp=8 // cp, cp=cp, mbs=1).resolved(8))
        return float(lt["attn_f"]) - hw.kernel_overhead_s
    e = K.attention_seq_efficiency
    r = attn_f(32768) / attn_f(5120)
    assert r == pytest.approx((32768 / 5120) ** 2 * float(e(5120) / e(32768)), rel=1e-9)
    # CP 2 at 64k: each call sees 32k keys per query block, so the rate is the 32k rate and the
    # rank's work (half the 64k queries against their causal keys) is 2× the 32k layer's
    assert attn_f(65536, cp=2) / attn_f(32768) == pytest.approx(2.0, rel=1e-9)


def test_triton_flash_kernel_holds_its_rate_at_the_fits_sequence(hw):
    """llm-foundry's benchmarks ran MosaicML's Triton flash kernel (`attn_impl: triton`): the flash2
    rate of the profile, fitted on 16k–65k-token rows, so it holds at 16384, not at 5120. By hand:
    at 16384 tokens the triton layer runs at exactly the flash2 profile rate, and at any s its time
    is the flash2 kernel's × e(16384)/e(5120) = (64/69.2)/(20/25.2)."""
    from autoplace.runtimes import load_runtime
    from autoplace.runtimes.switches import apply_settings
    assert load_runtime("llm-foundry").kernels.attention == "triton"
    assert K.ATTENTION_RATE_SEQ_KERNEL == {"triton": 16384}
    m = get_preset("llama3-8b")

    def attn_f(kernel, seq):
        rt = apply_settings(load_runtime("llm-foundry"), [("kernels.attention", kernel)])
        ctx = Ctx(m, TrainingSpec(seq_len=seq, global_batch=8, runtime=rt), 8)
        lt = K.layer_compute_times(ctx, hw, Plan(dp=8, mbs=1).resolved(8))
        return float(lt["attn_f"]) - hw.kernel_overhead_s
    for seq in (2048, 16384, 65536):
        assert attn_f("triton", seq) / attn_f("flash2", seq) == pytest.approx((64 / 69.2) / (20 / 25.2), rel=1e-9)
    # at 16384 the triton kernel runs at the flash2 rate of the profile (causal: half the s² square; d = 128: head-dim factor 1)
    work = 2.0 * 16384 * 16384 * 0.5 * m.heads * (m.d_qk + m.d_v)
    assert attn_f("triton", 16384) == pytest.approx(work / (hw.peak("bf16") * hw.attention_eff("flash2")), rel=1e-9)
    # a profile can state the kernel's own rate ([attention] triton), which replaces the flash2 fallback
    from dataclasses import replace
    own = replace(hw, attention_kernels={**hw.attention_kernels, "triton": 0.15})
    assert own.attention_eff("triton") == 0.15 and hw.attention_eff("triton") == hw.attention_eff("flash2")


def test_tp_overlap_share_hides_that_share_of_the_tp_collectives(hw):
    """comm.tp_overlap_share h: the overlapped TP collectives are exposed as (1 − h)·c + h·(max(c −
    GEMM, 0) + c/8), so a stage's exposed TP time is linear in h between the collectives as issued
    (h = 0: `tp_total`) and full hiding (h = 1, Transformer Engine userbuffers). torchtitan's async TP
    ships h = 0.48 (its June 2025 async-TP benchmark); Megatron-Core keeps 1."""
    from autoplace.runtimes import load_runtime
    from autoplace.runtimes.switches import apply_settings
    assert load_runtime("torchtitan-compile").comm.tp_overlap_share == 0.48
    assert load_runtime("megatron-core").comm.tp_overlap_share == 1.0
    m = get_preset("llama3-8b")
    p = Plan(dp=1, tp=8, sp=True, tp_overlap=True, mbs=2).resolved(8)

    def tp(h):
        rt = apply_settings(load_runtime("torchtitan-compile"), [("comm.tp_overlap_share", h)])
        st = S.stage_times(Ctx(m, TrainingSpec(seq_len=4096, global_batch=2, runtime=rt), 8), hw, p)[0]["first"]
        return float(st["tp"]), float(st["tp_total"])
    t0, total = tp(0.0)
    t1, _ = tp(1.0)
    th, _ = tp(0.48)
    assert t0 == pytest.approx(total, rel=1e-12) and t1 < 0.5 * t0
    assert th == pytest.approx(0.52 * t0 + 0.48 * t1, rel=1e-12)
