"""Cost-model physics that the validation sets exercise little: MoE experts under TP + SP, TF32,
host time and the dropless sync — each against a count worked out by hand."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from autoplace.cost import comm as C
from autoplace.cost import compute as K
from autoplace.cost import memory as Mm
from autoplace.placement.rules import Ctx
from autoplace.plan import parse_plan
from autoplace.runtimes import load_runtime
from autoplace.specs.hardware import load_hardware
from autoplace.specs.presets import get_preset
from autoplace.specs.training import TrainingSpec


def _moe_ctx(world=8):
    return Ctx(get_preset("qwen3-30b-a3b"), TrainingSpec(seq_len=4096, global_batch=64), world)


def test_moe_experts_under_tp_sp_see_the_rank_sequence_shard_times_etp():
    """Megatron-Core routes each rank's T/tp sequence shard and the expert-TP group all-gathers after
    the all-to-all: the expert GEMMs run on T·top_k·etp/tp rows, the router on T/tp — the tokens the
    all-to-all (already ÷ SP) carries. FLOPs of one layer forward on one rank, by hand."""
    ctx = _moe_ctx()
    m, hw = ctx.model, load_hardware("h100-sxm-80gb")
    T, h, k, E, fe = 4096, m.hidden, m.top_k, m.num_experts, m.f_expert
    attn_lin = sum(kk * n for _, kk, n, _ in m.attn_linears())
    core = 2.0 * T * K.keys_per_query(m, ctx.train) * m.heads * (m.d_qk + m.d_v)
    for plan, tp, etp in (("tp=1,ep=4,mbs=1", 1, 1), ("tp=2,sp=1,ep=4,etp=1,mbs=1", 2, 1), ("tp=2,sp=1,ep=2,etp=2,mbs=1", 2, 2)):
        p = parse_plan(plan).resolved(8)
        lt = K.layer_compute_times(ctx, hw, p)
        rows = T * k * etp / tp                               # expert GEMM rows on this rank
        hand = 2 * T * attn_lin / tp + 2 * rows * 3 * h * fe / etp + 2 * (T / tp) * E * h + core / tp
        assert float(lt["flops_f"]) == pytest.approx(hand, rel=1e-12), plan
    # tp 1 → 2 with etp 1: the routed-expert work per rank halves (it no longer doubles)
    f1 = K.layer_compute_times(ctx, hw, parse_plan("tp=1,ep=4,mbs=1").resolved(8))["flops_f"]
    f2 = K.layer_compute_times(ctx, hw, parse_plan("tp=2,sp=1,ep=4,etp=1,mbs=1").resolved(8))["flops_f"]
    assert float(f2) < 0.6 * float(f1)
    # the all-to-all carries the same T/tp·top_k tokens: 4 passes · (ep−1)/ep · T/tp · k · h · b_A
    p = parse_plan("tp=2,sp=1,ep=4,etp=1,mbs=1").resolved(8)
    assert float(C.ep_bytes_per_layer(ctx, p)) == 4 * 3 / 4 * (T / 2) * k * h * 2


def test_moe_expert_activations_under_tp_sp_by_hand():
    """Saved expert activations per token: top_k·etp/tp·(3·f_e/etp + h)·b_A (SwiGLU internals and the
    permuted input) plus the router's fp32 probabilities on the local T/tp tokens. etp 1 → 2 at tp 2
    keeps the SwiGLU bytes and doubles the gathered input: + top_k·h·b_A/2 per token."""
    ctx = _moe_ctx()
    m = ctx.model
    T, h, k = 4096, m.hidden, m.top_k
    a1 = float(Mm.activation_bytes_per_layer(ctx, parse_plan("tp=2,sp=1,ep=4,etp=1,mbs=1").resolved(8)))
    a2 = float(Mm.activation_bytes_per_layer(ctx, parse_plan("tp=2,sp=1,ep=2,etp=2,mbs=1").resolved(8)))
    assert a2 - a1 == T * k * h * 2 / 2
    # tp 1 → 2 (SP, etp 1): every per-token term halves except the replicated-free attention heads (÷ tp
    # either way): the whole layer halves exactly
    a0 = float(Mm.activation_bytes_per_layer(ctx, parse_plan("tp=1,ep=4,mbs=1").resolved(8)))
    assert a1 == pytest.approx(a0 / 2, rel=1e-12)


def test_fp32_matmuls_run_as_tf32_on_tensor_core_gpus():
    """NVIDIA's containers run FP32 matmuls as TF32 (TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1): an fp32 job
    on an H100 prices its GEMMs at the dense TF32 peak (494.7 TFLOP/s), not the 67 TFLOP/s non-tensor
    FP32 peak; a runtime without the override, and a GPU without TF32 (V100), use the FP32 peak."""
    h100, v100 = load_hardware("h100-sxm-80gb"), load_hardware("v100-dgx2")
    m = get_preset("llama3-8b")
    tr = TrainingSpec(seq_len=4096, global_batch=8, precision="fp32", regime="fp32")
    assert K.gemm_peak(h100, tr) == 494.7e12
    assert K.gemm_peak(v100, tr) == v100.peak("fp32")
    rt = load_runtime(None)
    off = tr.with_(runtime=replace(rt, precision=replace(rt.precision, fp32_matmul_tf32=False)))
    assert K.gemm_peak(h100, off) == 67.0e12
    # one layer's GEMMs: the qkv GEMM alone, by hand, at the TF32 peak with 4-byte operands
    ctx = Ctx(m, tr, 8)
    p = parse_plan("mbs=1").resolved(8)
    (N, Kd, _), *_ = K.attention_linears_rank(m, 1)
    f, b = K.gemm_fwd_bwd(h100, 4096, N, Kd, 4, 494.7e12)
    f_off, _ = K.gemm_fwd_bwd(h100, 4096, N, Kd, 4, 67.0e12)
    assert float(f_off) > 5 * float(f)
    lt, lt_off = K.layer_compute_times(ctx, h100, p), K.layer_compute_times(Ctx(m, off, 8), h100, p)
    assert float(lt_off["gemm_f"]) > 5 * float(lt["gemm_f"])


def test_host_ops_of_one_moe_layer_and_its_dropless_sync_by_hand():
    """Qwen3-30B-A3B on Megatron-Core + TE, ep 8 → 16 local experts, 4,096 tokens, BF16. Forward
    kernels: the attention GEMMs, the router GEMM, the grouped expert GEMMs as one cuBLAS launch per
    local expert (2 × 16), one cuDNN attention kernel and the runtime's 8 memory-bound passes; the
    backward twice the GEMMs and the attention, the memory-bound passes + 2. A GEMM module call costs
    the runtime's 13.5 µs each way, every other op 13.5 µs forward and 4 µs backward, plus 61
    router/dispatcher ops each way (the fused router's 31 kernels, the all-to-all dispatcher's 30); the dropless dispatcher syncs once per forward (30 µs), a capacity
    factor or full-iteration graphs do not; a Grace host (GB200) issues them 2.75× slower."""
    from autoplace.cost import host as HO
    from autoplace.runtimes.switches import apply_settings
    ctx = Ctx(get_preset("qwen3-30b-a3b"), TrainingSpec(seq_len=4096, global_batch=64), 8)
    m, hw = ctx.model, load_hardware("h100-sxm-80gb")
    p = parse_plan("ep=8,mbs=1").resolved(8)
    lt = K.layer_compute_times(ctx, hw, p)
    n_attn = len(m.attn_linears())
    kern_f = n_attn + 1 + 2 * 16 + 1 + 8
    kern_b = 2 * (n_attn + 1) + 4 * 16 + 2 + 8 + 2
    assert float(lt["kern_f"]) == kern_f and float(lt["kern_b"]) == kern_b
    g = n_attn + 1 + 2                               # GEMM module calls: attention, router, two grouped experts
    assert float(lt["gemm_ops"]) == g
    h_f, h_b, sync, ser = HO.layer_host_times(ctx, hw, lt)
    assert float(h_f) == pytest.approx((kern_f - g + 61) * 13.5e-6 + g * 13.5e-6, rel=1e-12)
    assert float(h_b) == pytest.approx((kern_b - g + 61) * 4e-6 + g * 13.5e-6, rel=1e-12)
    assert sync == pytest.approx(30e-6)
    # the synced forward serialised, per op class max(0, n·h − d): the 16 local experts' 32 launches
    # (two grouped-GEMM modules and 30 further launches, 13.5 µs each) against the experts' GEMMs;
    # the dispatcher's 61 bookkeeping ops (no device time); the other GEMM modules; the attention
    # kernel; the 8 memory-bound passes
    ge = float(lt["gemm_exp_f"])
    by_hand = (max(0.0, 2 * 13.5e-6 + 30 * 13.5e-6 - ge) + 61 * 13.5e-6
               + max(0.0, (n_attn + 1) * 13.5e-6 - (float(lt["gemm_f"]) - ge))
               + max(0.0, 13.5e-6 - float(lt["attn_f"])) + max(0.0, 8 * 13.5e-6 - float(lt["elem_f"])))
    assert float(ser) == pytest.approx(by_hand, rel=1e-12) and float(ser) >= 61 * 13.5e-6 * (1 - 1e-9)
    gh = HO.layer_host_times(ctx, load_hardware("gb200-nvl72"), lt)
    assert float(gh[0]) == pytest.approx(2.75 * float(h_f), rel=1e-12)
    # a capacity factor makes the dispatch sync-free; full-iteration CUDA graphs leave no host ops
    assert HO.layer_host_times(Ctx(m, ctx.train.with_(moe_capacity_factor=1.0), 8), hw, lt)[2] == 0.0
    rt = apply_settings(load_runtime("megatron-core"), ["cuda_graphs=full_iteration"])
    g = HO.layer_host_times(Ctx(m, ctx.train.with_(runtime=rt), 8), hw, lt)
    assert (float(g[0]), float(g[1]), g[2], g[3]) == (0.0, 0.0, 0.0, 0.0)


def test_quantization_launches_and_fused_dispatcher_ops_by_hand():
    """FP8/FP4 GEMMs quantize every GEMM input (forward) and output gradient (backward); TE's current
    scaling launches three kernels per tensor (amax, scale, cast: Float8CurrentScalingQuantizer::
    quantize_impl), MXFP8 one; the grouped experts quantize per local expert (split_quantize). Qwen3-
    30B-A3B at ep 8: the attention modules + 2 × 16 expert inputs, the router stays BF16. A DeepEP /
    HybridEP dispatcher issues 21 router + dispatch ops where the all-to-all dispatcher issues 61."""
    from autoplace.cost import host as HO
    from autoplace.runtimes.switches import apply_settings
    m = get_preset("qwen3-30b-a3b")
    p = parse_plan("ep=8,mbs=1").resolved(8)
    base = TrainingSpec(seq_len=4096, global_batch=64)
    h100, b200 = load_hardware("h100-sxm-80gb"), load_hardware("b200-180gb")
    lt16 = K.layer_compute_times(Ctx(m, base, 8), h100, p)
    n_q = len(m.attn_linears()) + 2 * 16
    for hw, recipe, per in ((h100, "current", 3), (h100, "delayed", 1), (b200, "mxfp8", 1)):
        t = base.with_(precision="fp8", fp8_recipe=recipe)
        lt = K.layer_compute_times(Ctx(m, t, 8), hw, p)
        lt_b = K.layer_compute_times(Ctx(m, base, 8), hw, p)
        assert float(lt["kern_f"]) - float(lt_b["kern_f"]) == per * n_q
        assert float(lt["kern_b"]) - float(lt_b["kern_b"]) == per * n_q
        assert float(lt["kern_exp_f"]) - float(lt_b["kern_exp_f"]) == per * 2 * 16
    ctx = Ctx(m, base, 8)
    h_f = float(HO.layer_host_times(ctx, h100, lt16)[0])
    rt = apply_settings(load_runtime("megatron-core"), ["moe_dispatch=hybridep"])
    h_flex = float(HO.layer_host_times(Ctx(m, base.with_(runtime=rt), 8), h100, lt16)[0])
    assert h_f - h_flex == pytest.approx((61 - 21) * 13.5e-6, rel=1e-12)


def test_host_composition_sync_serialises_the_layer():
    """No sync: the CPU runs ahead, only max(H_f + H_b − D_f − D_b, 0) is exposed. A sync per layer
    forward: each direction costs max(D, H) on its own, plus the sync."""
    from autoplace.cost import host as HO
    x_f, x_b = HO.exposed(1e-3, 2e-3, 3e-3, 0.5e-3, 0.0)
    assert (x_f, x_b) == (0.0, pytest.approx(0.5e-3))
    x_f, x_b = HO.exposed(1e-3, 2e-3, 3e-3, 0.5e-3, 30e-6)
    assert x_f == pytest.approx(2e-3 + 30e-6) and x_b == 0.0
    # the serialised segment's per-op excess counts where it exceeds the segment's max(D, H)
    assert HO.exposed(1e-3, 2e-3, 0.5e-3, 0.5e-3, 30e-6, 0.4e-3)[0] == pytest.approx(0.4e-3 + 30e-6)
    assert HO.exposed(1e-3, 2e-3, 3e-3, 0.5e-3, 30e-6, 0.4e-3)[0] == pytest.approx(2e-3 + 30e-6)
    assert float(HO.serialised_excess([(3e-4, 1e-4), (1e-4, 5e-4), (4e-4, 0.0)])) == pytest.approx(6e-4)
    # the term reaches the step: a host-bound toy (CPU 100× slower) shows it in the breakdown
    from autoplace.cost import step as S
    ctx = Ctx(get_preset("qwen3-30b-a3b"), TrainingSpec(seq_len=1024, global_batch=8), 8)
    hw = load_hardware("h100-sxm-80gb")
    p = parse_plan("ep=8,mbs=1").resolved(8)
    ev, slow = S.evaluate(ctx, hw, p), S.evaluate(ctx, hw.with_(host_op_factor=100.0), p)
    assert float(slow["host"]) > float(ev["host"]) and float(slow["step_s"]) > float(ev["step_s"])
    assert sum(float(slow[k]) for k in S.BREAKDOWN) == pytest.approx(float(slow["step_s"]), rel=1e-12)


def test_export_variant_and_new_gpu_profiles_carry_their_datasheet_numbers():
    """H800 / A800: the H100 / A100 dies with NVLink cut to 400 GB/s; H20: the compute-capped
    Hopper (148 TFLOP/s BF16, 4 TB/s); GH200: 4 per node, NVLink-C2C host link; MI325X / MI355X:
    AMD datasheets, MI300X/MI325X FP8 GEMMs from AMD's max-achievable-FLOPs table."""
    from autoplace.specs.hardware import match_gpu_name
    h100, h800 = load_hardware("h100-sxm-80gb"), load_hardware("h800")
    assert h800.peak_flops == h100.peak_flops and h800.intra_bw < 0.5 * h100.intra_bw
    a800, a100 = load_hardware("a800"), load_hardware("a100-80gb")
    assert a800.peak("bf16") == a100.peak("bf16") and a800.intra_bw == pytest.approx(a100.intra_bw * 2 / 3, rel=0.01)
    h20 = load_hardware("h20")
    assert (h20.peak("bf16"), h20.peak("fp8"), h20.peak("tf32"), h20.hbm_bw) == (148e12, 296e12, 74e12, 4000e9)
    gh = load_hardware("gh200")
    assert (gh.gpus_per_node, gh.host_bw) == (4, 450e9)
    mi3, mi325, mi355 = load_hardware("mi300x"), load_hardware("mi325x"), load_hardware("mi355x")
    assert mi3.gemm_eff("fp8") * mi3.peak("fp8") == pytest.approx(0.92 * 1273e12, rel=0.01)
    assert mi325.gemm_eff("fp8") * mi325.peak("fp8") == pytest.approx(0.92 * 1519e12, rel=0.01)
    assert mi355.peak("bf16") == 2516.6e12 and mi355.memory_bytes > mi325.memory_bytes > mi3.memory_bytes
    assert [match_gpu_name(n)[0] for n in ("NVIDIA H800 80GB HBM3", "NVIDIA H20", "GH200 96GB", "AMD Instinct MI355X")] \
        == ["h800", "h20", "gh200", "mi355x"]


def test_runtime_is_decided_from_structured_fields_not_free_text():
    """A record whose notes compare it with NeMo is not a NeMo run: the runtime comes from the source
    fields (citation, url, table), an explicit framework field, the plan and the year."""
    from autoplace.validate.mapping import record_runtime
    rec = {"id": "nemo-like-fsdp-run",
           "source": {"citation": "A user report, 2025", "url": "https://github.com/pytorch/torchtitan/issues/1"},
           "plan": {"dp": 8, "fsdp": True, "zero_stage": 3},
           "notes": "faster than the NeMo 25.02 container on the same nodes; Megatron-Bridge recipe for comparison"}
    rt, _ = record_runtime(rec, 3, True, [])
    assert rt.name == "torchtitan-2025"                                      # torchtitan's code of 2025 (repeat_kv)
    assert record_runtime(dict(rec, source=dict(rec["source"], citation="A user report, 2026")), 3, True, [])[0].name \
        == "torchtitan"
    plain = dict(rec, source={"citation": "A user report, 2025"})
    assert record_runtime(plain, 3, True, [])[0].name == "torchtitan"       # FSDP in 2025 → FSDP2 (eager)
    assert record_runtime(dict(plain, framework="NeMo 25.02"), 3, True, [])[0].name == "megatron-core-0.11"
    # ZeRO-3 without FSDP is DeepSpeed's, whatever the notes say
    ds = {"id": "z3", "source": {"citation": "Some paper, 2021"}, "plan": {"zero_stage": 3}, "notes": "Megatron codebase"}
    assert record_runtime(ds, 3, False, [])[0].name == "deepspeed-2021"


def test_megatron_embedding_and_loss_pipeline_accounting_by_hand():
    """--account-for-embedding/loss-in-pipeline-split: 30 layers + embedding + loss = 32 units over
    pp 4 → 8 per stage, the first and last stage one transformer layer fewer: 7, 8, 8, 7. With vpp 8
    every virtual stage is one unit, so the embedding and the loss sit in chunks of their own — legal
    (rule D3 relaxed), priced through the stages' layers, exported as Megatron-Core's flags."""
    from autoplace.cost import memory as Mm
    from autoplace.estimate import estimate
    from autoplace.export import megatron as X
    from autoplace.export.common import ExportJob
    from autoplace.placement.rules import check
    from autoplace.plan import with_pipeline_accounting
    m = get_preset("llama3-8b").with_(layers=30)
    tr = TrainingSpec(seq_len=4096, global_batch=64)
    hw = load_hardware("h100-sxm-80gb")
    ctx = Ctx(m, tr, 32)
    plain = parse_plan("tp=1,pp=4,vpp=8,mbs=1").resolved(32)
    acct = parse_plan("tp=1,pp=4,vpp=8,mbs=1,account_embedding=1,account_loss=1").resolved(32)
    assert any(v.rule == "D3" for v in check(ctx, plain))
    full = with_pipeline_accounting(acct, m.layers)
    assert full.layer_split == (7, 8, 8, 7) and not check(ctx, full)
    doc = estimate(m, hw, tr, acct, 32)
    assert doc["legal"] and doc["plan"]["layer_split"] == [7, 8, 8, 7]
    # the first stage holds 7 layers and the embedding: its dense parameters by hand
    dense0, _ = Mm.stage_param_counts(ctx, full, 0)
    dense1, _ = Mm.stage_param_counts(ctx, full, 1)
    assert float(Mm.layers_on_stage(ctx, full, 0)) == 7 and float(Mm.layers_on_stage(ctx, full, 1)) == 8
    assert float(dense0) - 7 / 8 * float(dense1) == pytest.approx(Mm.vocab_padded(ctx, full) * m.hidden, rel=1e-9)
    # L + e + l not divisible by pp·v: one line naming the units
    bad = parse_plan("tp=1,pp=4,vpp=8,mbs=1,account_embedding=1").resolved(32)
    msg = [v.message for v in check(ctx, bad) if v.rule == "D3"]
    assert msg and "31" in msg[0] and "pp·vpp = 32" in msg[0]
    fl = dict(X.flags(ExportJob(m, hw, tr, full, 32)))
    assert "--account-for-embedding-in-pipeline-split" in fl and "--account-for-loss-in-pipeline-split" in fl
    assert fl["--num-virtual-stages-per-pipeline-rank"] == 8
    assert "--num-layers-per-virtual-pipeline-stage" not in fl and "--pipeline-model-parallel-layout" not in fl


def test_split_conformal_interval_by_hand_and_in_the_estimate():
    """Weighted split conformal: residuals weigh 1 / their source's count and the new run adds the
    mean weight beyond the extremes. Source A has 3 residuals (−0.1, 0, 0.1; weight ⅓ each), B one
    (0.3; weight 1): total 2, plus 0.5 for the new run = 2.5. Quantile q is the first residual whose
    cumulative weight reaches q·2.5: q = 0.3 → 0.75 → 0.1 (cumulative 1.0); q = 0.5 → 1.25 → 0.3
    (2.0); q = 0.9 → 2.25 → beyond the residuals: the widest, not exact."""
    from autoplace.cost import intervals as IV
    from autoplace.estimate import estimate
    items = [("A", -0.1), ("A", 0.0), ("A", 0.1), ("B", 0.3)]
    assert IV._weighted(items, 0.9) == (0.3, False)
    assert IV._weighted(items, 0.5) == (0.3, True) and IV._weighted(items, 0.3) == (0.1, True)
    # symmetric: the level-quantile of |r|, sorted 0, 0.1, 0.1 (⅓ each), 0.3 (1). A 40 % interval:
    # target 0.4·2.5 = 1.0, reached at the second 0.1 → [−0.1, 0.1]; 60 %: 1.5 → 0.3 → [−0.3, 0.3]
    assert IV.bounds(items, 0.4) == (-0.1, 0.1, True)
    assert IV.bounds(items, 0.6) == (-0.3, 0.3, True)
    # a shipped estimate carries its intervals around the point prediction, 90 % at least as wide as 80 %
    m = get_preset("llama3-8b")
    doc = estimate(m, load_hardware("h100-sxm-80gb"), TrainingSpec(seq_len=4096, global_batch=64),
                   parse_plan("mbs=1"), 8)
    iv, s = doc["time"]["interval"], doc["time"]["step_s"]
    assert iv["90"]["lo"] <= iv["80"]["lo"] <= s * 1.5 and iv["80"]["hi"] <= iv["90"]["hi"]
    assert iv["80"]["lo"] < s < iv["80"]["hi"]
    assert iv["80"]["class"] == "megatron-core|dense|hopper"
    mem = doc["memory"]
    assert mem["near_limit"] == (mem["fits"] and mem["interval"]["90"]["hi"] > mem["limit_bytes"])


def test_confidence_turns_the_memory_bound_into_headroom():
    """search --confidence q: a plan fits when peak·f_q ≤ capacity·(1 − headroom), i.e. the search's
    headroom becomes 1 − (1 − h)/f_q; f_q is the q quantile of measured/predicted memory (≥ 1)."""
    from autoplace.cli.search import _confidence
    from autoplace.cost import intervals as IV
    m, hw = get_preset("llama3-8b"), load_hardware("h100-sxm-80gb")
    c = _confidence(0.9, None, m, hw, 0.1)
    f = max(IV.quantile_factor("memory", "megatron-core", False, "hopper", 0.9), 1.0)
    assert c["memory_factor"] == f and c["headroom"] == pytest.approx(1 - 0.9 / f)
    assert _confidence(None, None, m, hw, 0.0) is None
    from autoplace.errors import InputError
    with pytest.raises(InputError, match="--confidence"):
        _confidence(1.5, None, m, hw, 0.0)


def test_capacity_factor_from_the_record_and_the_cli_makes_the_dispatch_sync_free():
    """A record's workload knob moe_expert_capacity_factor (token dropping) maps to
    TrainingSpec.moe_capacity_factor: no device → host sync per MoE layer; dropless keeps it."""
    from autoplace.cost import host as HO
    from autoplace.validate.mapping import map_training
    rt = load_runtime("megatron-core")
    rec = {"id": "cf", "source": {"citation": "x, 2026"}, "plan": {"precision": "bf16"},
           "notes": 'workload-config knobs: {"moe_expert_capacity_factor": 1.25}'}
    tr = map_training(rec, rt, 4096, 64, [])
    assert tr.moe_capacity_factor == 1.25
    assert map_training(dict(rec, notes=""), rt, 4096, 64, []).moe_capacity_factor == 0.0
    ctx = Ctx(get_preset("qwen3-30b-a3b"), tr, 8)
    hw = load_hardware("h100-sxm-80gb")
    lt = K.layer_compute_times(ctx, hw, parse_plan("ep=8,mbs=1").resolved(8))
    assert HO.layer_host_times(ctx, hw, lt)[2] == 0.0


def test_fixed_per_step_host_cost_per_runtime_by_hand():
    """The step's fixed host work (`[host]` step_ops · fwd_op_us + step_syncs · sync_us):
    Megatron-Core 100 ops × 13.5 µs + 2 syncs (the interval-time timer's barrier + synchronize, the
    gradient norm's .item()) × 30 µs = 1.41 ms; torchtitan syncs only on its log step (one in
    log_freq = 10): 5 × 13.5 + 0.1 × 30 = 70.5 µs; DeepSpeed 100 × 13.5 + 3 × 30 = 1.44 ms. A Grace
    host (GB200, host_op_factor 2.75) takes 2.75 × 1.41 = 3.8775 ms. The GPU profiles add nothing of their
    own (step_overhead_ms 0: what a calibration finds on a machine), and the term is the step's
    `overhead` line."""
    from autoplace.cost import step as S
    h100, gb200 = load_hardware("h100-sxm-80gb"), load_hardware("gb200-nvl72")
    assert h100.step_overhead_s == 0.0 and gb200.host_op_factor == 2.75
    assert S.step_host_time(load_runtime("megatron-core"), h100) == pytest.approx(1.41e-3, rel=1e-12)
    assert S.step_host_time(load_runtime("torchtitan"), h100) == pytest.approx(70.5e-6, rel=1e-12)
    assert S.step_host_time(load_runtime("deepspeed"), h100) == pytest.approx(1.44e-3, rel=1e-12)
    assert S.step_host_time(load_runtime("megatron-core"), gb200) == pytest.approx(3.8775e-3, rel=1e-12)
    ctx = Ctx(get_preset("llama3-8b"), TrainingSpec(seq_len=2048, global_batch=8), 8)
    ev = S.evaluate(ctx, h100, parse_plan("mbs=1").resolved(8))
    assert float(ev["overhead"]) == pytest.approx(S.step_host_time(ctx.train.rt, h100), rel=1e-12)


def test_runtime_gemm_rate_is_a_fact_of_the_stack_on_one_architecture():
    """llm-foundry's H100 tables ran torch 1.13 (CUDA 11.7: Ampere mma.sync kernels on Hopper):
    its GEMMs run at gemm_rate 0.82 of the H100 profile's MAMF-anchored efficiency — 0.739 × 0.82 =
    0.60598 — while the same stack on an A100 and another stack (torchtitan, Megatron-Core) on the
    same H100 keep the profile's rate. A GEMM-bound layer's GEMM time grows by about 1 / 0.82."""
    from autoplace.cost.precision import GemmFormat
    h100, a100 = load_hardware("h100-sxm-80gb"), load_hardware("a100-80gb")
    lf = load_runtime("llm-foundry")
    assert lf.kernels.gemm_rate == 0.82 and lf.kernels.gemm_rate_archs == ("hopper",)
    tr = TrainingSpec(seq_len=2048, global_batch=8)
    assert GemmFormat(tr.with_(runtime=lf), h100).eff == pytest.approx(0.739 * 0.82, rel=1e-12)
    assert GemmFormat(tr.with_(runtime=lf), a100).eff == pytest.approx(a100.gemm_efficiency, rel=1e-12)
    for name in ("torchtitan", "megatron-core"):
        assert GemmFormat(tr.with_(runtime=load_runtime(name)), h100).eff == pytest.approx(0.739, rel=1e-12)
    m, plan = get_preset("llama3-8b"), parse_plan("mbs=1").resolved(8)
    g_lf = K.layer_compute_times(Ctx(m, tr.with_(runtime=lf), 8), h100, plan)["gemm_f"]
    g_tt = K.layer_compute_times(Ctx(m, tr.with_(runtime=load_runtime("torchtitan")), 8), h100, plan)["gemm_f"]
    assert 1.10 < float(g_lf) / float(g_tt) < 1 / 0.82 + 1e-9


def test_dtensor_sequence_parallel_collectives_copy_the_micro_batch_in_eager_torchtitan():
    """Functional collectives gather and scatter along dim 0; DTensor SP's Shard(1) activations make
    each of a layer's four SP collectives copy the whole micro-batch's b·s·h activation (torch
    `_chunk_or_narrow_cat` / `_maybe_view_chunk_cat`, a view only at micro-batch 1). On the Qwen3
    32B TP 8 row (micro-batch 16 × 4,096 tokens, h 5,120, bf16) each direction of a layer moves
    exactly 8 · 16 · 4,096 · 5,120 · 2 B more, in 4 more kernels; the compiled runtime does not."""
    from autoplace.validate import load_records
    from autoplace.validate.mapping import map_shaped
    recs = load_records(str(Path(__file__).resolve().parents[1] / "benchmarks" / "unseen_records.json"))
    mp = map_shaped(next(r for r in recs if r["id"] == "ttgh1690-qwen3-32b-32xh100-fsdp4-tp8-lbs16"))
    rt = mp.train.rt
    assert rt.name == "torchtitan-2025" and rt.kernels.sp_collective_copies
    off_rt = replace(rt, kernels=replace(rt.kernels, sp_collective_copies=False))
    on = K.layer_compute_times(Ctx(mp.model, mp.train, mp.world), mp.hw, mp.plan)
    off = K.layer_compute_times(Ctx(mp.model, replace(mp.train, runtime=off_rt), mp.world), mp.hw, mp.plan)
    extra = float(K.membound_time(mp.hw, 8 * 16 * 4096 * 5120 * 2, 4))
    assert float(on["elem_f"] - off["elem_f"]) == pytest.approx(extra, rel=1e-12)
    assert float(on["elem_b"] - off["elem_b"]) == pytest.approx(extra, rel=1e-12)
    one = replace(mp.plan, mbs=1)                         # a view, no copy, at micro-batch 1
    assert float(K.layer_compute_times(Ctx(mp.model, mp.train, mp.world), mp.hw, one)["elem_f"]) == \
        float(K.layer_compute_times(Ctx(mp.model, replace(mp.train, runtime=off_rt), mp.world), mp.hw, one)["elem_f"])
    assert not load_runtime("torchtitan-compile").kernels.sp_collective_copies
