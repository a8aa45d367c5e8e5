"""Runtimes as data: loading (exact keys, valid values) and what a change of runtime changes.

For every shipped runtime the same plan of the same model is costed under it and under the default
(Megatron-Core + TE). A term may differ only when a field that feeds it differs: GEMM math never
changes with the runtime (same precision, no recipe); the attention core changes with the kernel
family; the memory-bound layer work with the elementwise passes; the head with the loss kernel;
memory's model states never, the reserve with `reserve_frac`, the transient with the loss buffer;
selective recompute's activations and time with the policy (Megatron attention vs op-level SAC).
"""

from __future__ import annotations

from dataclasses import fields, replace

import numpy as np
import pytest

from autoplace.cost import compute as K
from autoplace.cost import memory as M
from autoplace.cost import step as S
from autoplace.errors import InputError
from autoplace.placement.rules import Ctx
from autoplace.plan import Plan
from autoplace.runtimes import DEFAULT_RUNTIME, RUNTIMES, load_runtime, runtime_from_dict, training_spec
from autoplace.runtimes.spec import Kernels
from autoplace.specs.hardware import load_hardware
from autoplace.specs.presets import get_preset

HW = load_hardware("h100-sxm-80gb")
MODEL = get_preset("llama3-8b")


def _f(x) -> float:
    return float(np.asarray(x))


def _costs(rt, recompute="none"):
    train = training_spec(rt, seq_len=4096, global_batch=64, regime="zero", grad_reduce_bytes=2,
                          attention="flash", dropout=False)
    ctx = Ctx(MODEL, train, 8)
    plan = Plan(dp=8, zero=1, recompute=recompute, mbs=1, tp_async=True, dp_overlap=True).resolved(8)
    lt = K.layer_compute_times(ctx, HW, plan)
    ht = K.head_compute_times(ctx, HW, plan)
    mem = M.stage_memory(ctx, HW, plan, 0)
    ev = S.evaluate(ctx, HW, plan)
    return {k: _f(v) for k, v in lt.items()}, {k: _f(v) for k, v in ht.items()}, \
        {k: _f(v) for k, v in mem.items()}, {k: _f(v) for k, v in ev.items()}


BASE = load_runtime(DEFAULT_RUNTIME)


def _same(a, b, rel=1e-12) -> bool:
    return a == pytest.approx(b, rel=rel, abs=1e-15)


@pytest.mark.parametrize("name", sorted(RUNTIMES))
def test_runtime_loads_and_names_its_source(name):
    rt = load_runtime(name)
    assert rt.name == name and rt.family and rt.version
    assert rt.source.endswith(f"{name}.toml")
    assert 0 <= rt.memory.reserve_frac < 0.25
    # every runtime that exports has a launcher module of that name
    if rt.launcher:
        import importlib
        importlib.import_module(f"autoplace.export.{rt.launcher}")


@pytest.mark.parametrize("name", sorted(RUNTIMES))
def test_a_change_of_runtime_changes_exactly_the_terms_it_should(name):
    rt = load_runtime(name)
    lt0, ht0, mem0, ev0 = _costs(BASE)
    lt, ht, mem, ev = _costs(rt)
    k0, k = BASE.kernels, rt.kernels
    # GEMM math: the same shapes, dtype and efficiency whatever the stack, unless the stack's own
    # GEMM rate on this architecture differs (Kernels.gemm_rate: its CUDA libraries' kernels)
    assert _same(lt["flops_f"], lt0["flops_f"])
    rate = k.gemm_rate_on(HW.arch) / k0.gemm_rate_on(HW.arch)
    for key in ("gemm_f", "gemm_b", "wgrad_col"):
        if rate == 1.0:
            assert _same(lt[key], lt0[key]), key
        else:
            assert (lt[key] > lt0[key]) == (rate < 1.0) and lt[key] < lt0[key] / rate * (1 + 1e-9), key
    # attention core: the kernel family's efficiency on this GPU and the sequence length its rate
    # holds at (ATTENTION_RATE_SEQ_KERNEL), nothing else
    e, ref = K.attention_seq_efficiency, lambda a: K.ATTENTION_RATE_SEQ_KERNEL.get(a, K.ATTENTION_RATE_SEQ)
    same_attn = HW.attention_eff(k.attention) == HW.attention_eff(k0.attention) and ref(k.attention) == ref(k0.attention)
    assert _same(lt["attn_f"], lt0["attn_f"]) == same_attn
    ko = HW.kernel_overhead_s                                      # the launch is not part of the kernel's rate
    assert (lt["attn_f"] - ko) / (lt0["attn_f"] - ko) == pytest.approx(
        HW.attention_eff(k0.attention) / HW.attention_eff(k.attention)
        * float(e(ref(k.attention)) / e(ref(k0.attention))), rel=1e-9)
    # memory-bound layer work: its passes and launches
    elem_fields = ("rmsnorm_passes", "residual_passes", "act_extra_passes", "rope_passes", "membound_kernels")
    same_elem = all(getattr(k, f) == getattr(k0, f) for f in elem_fields)
    assert _same(lt["elem_f"], lt0["elem_f"]) == same_elem
    assert (lt["elem_f"] > lt0["elem_f"]) == (k.rmsnorm_passes + k.rope_passes + k.act_extra_passes
                                              > k0.rmsnorm_passes + k0.rope_passes + k0.act_extra_passes)
    # the head: the logits GEMM never changes, the loss kernel with its passes
    assert _same(ht["logits_flops_f"], ht0["logits_flops_f"])
    assert _same(ht["logits_f"], ht0["logits_f"]) == (k.loss_passes == k0.loss_passes)
    # memory: model states are the plan's and the regime's, never the runtime's
    for key in ("params", "grads", "optimizer", "activations", "overhead"):
        if key == "activations" and rt.memory.eager_saved:
            # … except what an eager model's code keeps without recompute (memory.eager_saved)
            assert mem[key] > mem0[key]
            continue
        if key == "activations" and rt.memory.attention_kv_expanded:
            # … and GQA's K and V expanded to the 32 query heads before SDPA, which saves them: 32
            # layers × 4,096 tokens × 2 tensors × 2 B × (4,096 − 1,024) elements
            assert mem[key] - mem0[key] == 32 * 4096 * 2 * 2 * (4096 - 1024) == 1_610_612_736
            continue
        assert _same(mem[key], mem0[key]), key
    alloc = mem["total"] - mem["reserve"] - mem["overhead"]
    assert mem["reserve"] == pytest.approx(rt.memory.reserve_frac * alloc, rel=1e-12)
    assert _same(mem["transient"], mem0["transient"]) == \
        (rt.memory.loss_bytes_per_logit == BASE.memory.loss_bytes_per_logit)
    # single-node data parallelism: the rails a runtime's NCCL reaches across nodes cannot matter
    assert _same(ev["dp_comm_total"], ev0["dp_comm_total"]) or rt.defaults.dp_bucket_elements != \
        BASE.defaults.dp_bucket_elements


@pytest.mark.parametrize("name", sorted(RUNTIMES))
def test_selective_recompute_follows_the_runtimes_policy(name):
    rt = load_runtime(name)
    lt, _, mem, ev = _costs(rt, "selective")
    lt_none, _, mem_none, _ = _costs(rt, "none")
    if rt.memory.selective == "op-sac":
        # torchtitan op-level SAC: about half the activations of no recompute (the 2.2×), and
        # every elementwise op plus every second matmul re-run in backward; a compiled block keeps
        # less (not w2's output: on the benchmarks/sac_memory.py block, compiled 37.0 × h without
        # recompute against 13.5 × h under SAC, 2.74×)
        # an eager block that keeps its norms' fp32 copies and silu's output (memory.eager_saved) and
        # the expanded K/V (memory.attention_kv_expanded) without recompute saves 3.6× as much
        # (sac_memory.py: 56.54 / 15.54 × h)
        hi = 3.7 if rt.memory.eager_saved else 2.4 if rt.memory.sac_keeps_unread else 2.8
        assert 2.0 < mem_none["activations"] / mem["activations"] < hi
        per_layer = ev["recompute"] / (MODEL.layers * 8)         # 8 micro-batches
        assert per_layer == pytest.approx(lt["elem_f"] + lt["mm_rc"], rel=1e-9)
        assert 0.25 < lt["mm_rc"] / lt["gemm_f"] < 0.6
    else:
        # Megatron selective with flash attention: the same activations, the attention core re-run
        assert mem["activations"] == pytest.approx(mem_none["activations"], rel=1e-12)
        per_layer = ev["recompute"] / (MODEL.layers * 8)
        assert per_layer == pytest.approx(lt["attn_f"] + lt["attn_elem_f"], rel=1e-9)


def test_eager_torchtitan_is_slower_than_compiled_by_the_elementwise_work():
    eager, compiled = load_runtime("torchtitan"), load_runtime("torchtitan-compile")
    lt_e, _, _, ev_e = _costs(eager)
    lt_c, _, _, ev_c = _costs(compiled)
    ratio = ev_e["step_s"] / ev_c["step_s"]
    assert 1.05 < ratio < 1.25                                   # issue: ~1.16× on the same plan
    assert lt_e["elem_f"] > 2.5 * lt_c["elem_f"]


def test_unknown_keys_and_bad_values_are_one_line_errors(tmp_path):
    import tomllib
    raw = tomllib.loads(open(BASE.source).read())
    bad = dict(raw, typo_key=1)
    with pytest.raises(InputError, match="unknown key 'typo_key'"):
        runtime_from_dict(bad, "x.toml")
    bad = dict(raw, kernels=dict(raw["kernels"], norm_passes=2.0))
    with pytest.raises(InputError, match=r"unknown \[kernels\] key 'norm_passes'"):
        runtime_from_dict(bad, "x.toml")
    bad = dict(raw, kernels=dict(raw["kernels"], attention="magic"))
    with pytest.raises(InputError, match="attention = 'magic'"):
        runtime_from_dict(bad, "x.toml")
    bad = dict(raw, kernels=dict(raw["kernels"], rmsnorm_passes="two"))
    with pytest.raises(InputError, match="rmsnorm_passes must be a number"):
        runtime_from_dict(bad, "x.toml")
    p = tmp_path / "mine.toml"
    p.write_text(open(BASE.source).read().replace('name = "megatron-core"', 'name = "mine"'))
    assert load_runtime(str(p)).name == "mine"
    with pytest.raises(InputError, match="unknown runtime 'nope'"):
        load_runtime("nope")


def test_every_kernels_field_is_read_by_the_cost_model():
    """A Kernels field that no cost function reads would be a fact with no effect: change each
    numeric field of the default runtime and check that some layer or head term moves (gpt-oss for
    the terms only its YaRN RoPE reaches: `rope_unfused_passes`)."""
    moe, oss = get_preset("mixtral-8x7b"), get_preset("gpt-oss-120b")
    for f in fields(Kernels):
        v = getattr(BASE.kernels, f.name)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        extra = {"gemm_rate_archs": (HW.arch,)} if f.name == "gemm_rate" else {}   # a rate on this GPU's arch
        # the fused grouped MLP's dGLU-dbias kernel: block-scaled GEMMs on Blackwell, the op fuser on
        dglu = f.name == "moe_dglu_dbias_factor"
        base = replace(BASE, kernels=replace(BASE.kernels, moe_fused_mlp=True)) if dglu else BASE
        hw, prec = (load_hardware("b200"), {"precision": "fp8", "fp8_recipe": "mxfp8"}) if dglu else (HW, {})
        rt = replace(base, kernels=replace(base.kernels, **{f.name: type(v)(v * 2 + 1)}, **extra))
        out = []
        for model in (MODEL, moe, oss):
            for r in (base, rt):
                t = training_spec(r, seq_len=4096, global_batch=64, regime="zero", **prec)
                ctx = Ctx(model, t, 8)
                p = Plan(dp=8, ep=8 if model.is_moe else 1, mbs=1).resolved(8)
                lt, ht = K.layer_compute_times(ctx, hw, p), K.head_compute_times(ctx, hw, p)
                out.append(sum(_f(v) for kk, v in list(lt.items()) + list(ht.items()) if "flops" not in kk))
        assert any(out[i] != out[i + 1] for i in range(0, len(out), 2)), f.name


def test_fsdp2_copies_cost_their_hbm_passes_on_the_exposed_dp_time():
    """comm.fsdp_copies (torch FSDP2 per-parameter sharding): every all-gather is copied out of the
    collective buffer (2·b_P bytes per parameter) and every reduction copied in at b_G + b_G,reduce,
    on the compute stream. ZeRO-3 with resharding: two gathers and one reduction per micro-batch."""
    tt = load_runtime("torchtitan")
    assert tt.comm.fsdp_copies and not BASE.comm.fsdp_copies
    off = replace(tt, comm=replace(tt.comm, fsdp_copies=False))
    out = {}
    for r in (tt, off):
        t = training_spec(r, seq_len=4096, global_batch=64, regime="zero", grad_reduce_bytes=4)
        ctx = Ctx(MODEL, t, 8)
        p = Plan(dp=8, zero=3, mbs=1).resolved(8)
        out[r.comm.fsdp_copies] = (_f(S.evaluate(ctx, HW, p)["dp_comm_exposed"]), ctx, p, t)
    (on, ctx, p, t), (no, *_) = out[True], out[False]
    dense, expert = M.stage_param_counts(ctx, p, 0)
    units = MODEL.layers + 1
    c_ag = (dense + expert) * t.b_P * 2 / (HW.hbm_bw * HW.hbm_efficiency) + units * HW.kernel_overhead_s
    c_rs = (dense + expert) * (t.b_G + t.b_G_reduce) / (HW.hbm_bw * HW.hbm_efficiency) + units * HW.kernel_overhead_s
    m = 64 / 8
    assert on - no == pytest.approx(m * (2 * c_ag + c_rs), rel=1e-9)
    # Megatron's distributed optimizer gathers into its contiguous buffer: nothing to copy
    assert not load_runtime("megatron-core").comm.fsdp_copies


def test_pipeline_flushes_repeat_fill_and_drain():
    """plan.pp_flushes = f schedules of m/f micro-batches (torch.distributed.pipelining runs one per
    local batch): the pipeline span is f·[(m/f·v − 1)·t_max + t_sum]/v, so with equal stages the
    bubble grows from (p − 1)·t to f·(p − 1)·t."""
    train = training_spec(BASE, seq_len=4096, global_batch=64, regime="zero")
    ctx = Ctx(MODEL, train, 8)
    one = S.evaluate(ctx, HW, Plan(pp=4, dp=2, mbs=1).resolved(8))
    four = S.evaluate(ctx, HW, Plan(pp=4, dp=2, mbs=1, pp_flushes=4).resolved(8))
    assert _f(four["compute"]) == pytest.approx(_f(one["compute"]), rel=1e-12)
    t_mb = _f(one["compute"]) / 32                                 # m = 64 / 2 = 32 micro-batches
    assert _f(one["pp_bubble"]) > 0
    assert _f(four["pp_bubble"]) == pytest.approx(4 * _f(one["pp_bubble"]), rel=0.05)
    assert _f(four["pp_bubble"]) > 3 * 3 * t_mb * 0.8
    assert "pp_flushes=4" in Plan(pp=4, dp=2, mbs=1, pp_flushes=4).resolved(8).short()
    # 32 micro-batches do not split into 5 equal schedules: rule D4 says so
    from autoplace.placement.rules import check
    bad = [v for v in check(ctx, Plan(pp=4, dp=2, mbs=1, pp_flushes=5).resolved(8)) if v.rule == "D4"]
    assert bad and "pp_flushes=5" in bad[0].message


def test_automodel_moe_keeps_parameters_gathered_and_uses_te_attention():
    """NeMo AutoModel: the MoE parallelizer does not reshard after forward
    (MoEParallelizerConfig.reshard_after_forward = False) while dense FSDP2 does; its benchmark
    configs run TE attention (BackendConfig attn: te)."""
    am = load_runtime("nemo-automodel")
    assert am.defaults.reshard_after_forward and am.defaults.moe_reshard_after_forward is False
    assert am.kernels.attention == "cudnn"
    assert am.defaults.pp_flush_per_local_batch and not BASE.defaults.pp_flush_per_local_batch


def test_automodel_keeps_bf16_parameters_and_adam_moments():
    """NeMo AutoModel builds the model in torch_dtype "auto" → bfloat16 (_transformers/auto_model.py
    from_config) and torch.optim.Adam keeps its moments in the parameter dtype: 2 + 2 + 4 B/param
    (regime pure-bf16), where torchtitan's fp32 sharded parameters are the master (2 + 2 + 12)."""
    am, tt = load_runtime("nemo-automodel"), load_runtime("torchtitan")
    assert am.defaults.regime == "pure-bf16" and tt.defaults.regime == "zero"
    plan = Plan(dp=8, zero=3, recompute="full", mbs=1).resolved(8)
    mem = {}
    for rt in (am, tt):
        train = training_spec(rt, seq_len=4096, global_batch=64)
        mem[rt.name] = {k: _f(v) for k, v in M.stage_memory(Ctx(MODEL, train, 8), HW, plan, 0).items()}
    a, t = mem["nemo-automodel"], mem["torchtitan"]
    psi = MODEL.total_params()
    assert a["optimizer"] == pytest.approx(4.0 * psi / 8, rel=1e-9)      # bf16 m, v, sharded over 8
    assert t["optimizer"] == pytest.approx(12.0 * psi / 8, rel=1e-9)     # fp32 master + m + v
    assert a["params"] == pytest.approx(t["params"], rel=1e-12)


def test_torch_pipelining_leaves_the_stage_reduce_scatter_exposed():
    """comm.pp_reduce_exposed (torch.distributed.pipelining's REDUCE_GRAD after a stage's last
    backward, the compute stream ordered past the reduce-scatters): with pp > 1 the sharded
    gradients' reduce-scatter is exposed whole; without pipelining FSDP's backward hooks still hide
    it, and a runtime whose reductions come from backward hooks keeps hiding it under pp."""
    tt = load_runtime("torchtitan")
    assert tt.comm.pp_reduce_exposed and load_runtime("nemo-automodel").comm.pp_reduce_exposed
    assert not BASE.comm.pp_reduce_exposed
    hooks = replace(tt, comm=replace(tt.comm, pp_reduce_exposed=False))
    world, hw = 64, HW
    out = {}
    for r in (tt, hooks):
        t = training_spec(r, seq_len=4096, global_batch=64, regime="zero", grad_reduce_bytes=4)
        ctx = Ctx(MODEL, t, world)
        for pp in (1, 2):
            p = Plan(pp=pp, dp=world // pp, zero=3, reshard_after_forward=False, mbs=1).resolved(world)
            ev = S.evaluate(ctx, hw, p)
            out[r.comm.pp_reduce_exposed, pp] = (_f(ev["dp_comm_exposed"]), ctx, p)
    assert out[True, 1][0] == pytest.approx(out[False, 1][0], rel=1e-12)      # no pipeline: hooks
    exposed, ctx, p = out[True, 2]
    hidden = out[False, 2][0]
    assert exposed > hidden
    # the difference is the reduction's hidden part: c − hidden_tail(c, window) for the K1 reduce
    # (one reduce-scatter per schedule after the last backward), on the binding (first/last) stage
    from autoplace.cost import network as N
    st = N.axis_strides(p)
    nd, _ = M.shard_groups(ctx, p)
    c = max(_f(N.gather_time(hw, M.collective_params_rank(ctx, p, i) * ctx.train.b_G_reduce, nd, st["cp"],
                             M.layers_on_stage(ctx, p, i) + 1.0, op="rs")) for i in (0, 1))
    assert exposed - hidden <= c * (1 + 1e-9)
    assert exposed - hidden >= 0.5 * c


def test_te_grouped_linear_pays_a_launch_per_local_expert():
    """kernels.moe_grouped_gemm_per_expert (TE GroupedLinear → multi_stream_cublas_gemm: one cuBLAS
    call per local expert): the six expert GEMMs of a MoE layer (FC1/FC2 forward, dgrad, wgrad)
    each launch E/ep − 1 more kernels than one batched GEMM; TE's op fuser runs one grouped kernel."""
    assert BASE.kernels.moe_grouped_gemm_per_expert
    moe = get_preset("qwen3-30b-a3b")                               # 128 experts, every layer MoE
    one = replace(BASE, kernels=replace(BASE.kernels, moe_grouped_gemm_per_expert=False))
    fused = replace(BASE, kernels=replace(BASE.kernels, moe_fused_mlp=True))
    fused_one = replace(fused, kernels=replace(fused.kernels, moe_grouped_gemm_per_expert=False))
    out = {}
    for name, r in (("loop", BASE), ("one", one), ("fused", fused), ("fused_one", fused_one)):
        t = training_spec(r, seq_len=4096, global_batch=64, regime="zero")
        p = Plan(dp=8, ep=8, mbs=1).resolved(8)
        out[name] = K.layer_compute_times(Ctx(moe, t, 8), HW, p)
    n_local = moe.num_experts / 8
    ko = HW.kernel_overhead_s
    assert _f(out["loop"]["elem_f"] - out["one"]["elem_f"]) == pytest.approx(2 * (n_local - 1) * ko, rel=1e-9)
    assert _f(out["loop"]["elem_b"] - out["one"]["elem_b"]) == pytest.approx(4 * (n_local - 1) * ko, rel=1e-9)
    assert _f(out["loop"]["gemm_f"]) == _f(out["one"]["gemm_f"])     # the GEMM math is the batched one
    assert _f(out["fused"]["elem_f"]) == _f(out["fused_one"]["elem_f"])


def test_mla_qkv_assembly_counts_and_terms():
    """kernels.mla_qkv: the elements an MLA layer's Q/K/V assembly moves per token (hand counts for
    DeepSeek-V3, h = 128, d_n = 128, d_r = 64, d_v = 128, d_qk = 192) and the exact change of the
    memory-bound layer work between Megatron-Core's fused MLA RoPE and the eager cat/expand/contiguous
    of NeMo AutoModel and torchtitan; a model without MLA is untouched."""
    dsv3 = get_preset("deepseek-v3")
    eager = replace(BASE.kernels, mla_qkv="eager")
    # eager forward: q cat 2·128·192 + k cat 128·(128 + 192) + v copy 2·128·128;
    # backward: q split-cat 2·128·192 + expand-sum 128·64 + kv split-cat 2·128·(128 + 128)
    assert K.mla_assembly_elements(dsv3, eager, 1) == (122880.0, 122880.0, 3.0, 3.0)
    # fused: reads kv 128·(128 + 128), writes K and V 128·(192 + 128), one kernel each way
    assert K.mla_assembly_elements(dsv3, BASE.kernels, 1) == (73728.0, 73728.0, 1.0, 1.0)
    assert K.mla_assembly_elements(dsv3, eager, 2)[0] == 61440.0              # heads split over TP
    assert K.mla_assembly_elements(MODEL, eager, 1) == (0.0, 0.0, 0.0, 0.0)
    assert BASE.kernels.mla_qkv == "fused"
    assert load_runtime("nemo-automodel").kernels.mla_qkv == "eager"
    assert load_runtime("torchtitan").kernels.mla_qkv == "eager"
    p = Plan(dp=8, ep=8, mbs=1).resolved(8)
    out = {}
    for name, model in (("mla", dsv3), ("gqa", MODEL)):
        for kind, r in (("fused", BASE), ("eager", replace(BASE, kernels=eager))):
            t = training_spec(r, seq_len=4096, global_batch=64, regime="zero")
            out[name, kind] = K.layer_compute_times(Ctx(model, t, 8), HW, p)
    T, bA, ko = 4096, 2, HW.kernel_overhead_s
    bw = HW.hbm_bw * HW.hbm_efficiency
    d = (122880.0 - 73728.0) * T * bA
    assert _f(out["mla", "eager"]["elem_f"] - out["mla", "fused"]["elem_f"]) == pytest.approx(d / bw + 2 * ko, rel=1e-9)
    assert _f(out["mla", "eager"]["elem_b"] - out["mla", "fused"]["elem_b"]) == pytest.approx(d / bw + 2 * ko, rel=1e-9)
    for key in ("gemm_f", "gemm_b", "attn_f", "attn_b"):
        assert _f(out["mla", "eager"][key]) == _f(out["mla", "fused"][key])
    for key in out["gqa", "fused"]:
        assert _f(out["gqa", "eager"][key]) == _f(out["gqa", "fused"][key])


def test_automodel_gmm_experts_launch_per_expert():
    """NeMo AutoModel's experts run grouped_gemm's ops.gmm, on SM90 one cuBLAS call per local expert
    over four streams (csrc/grouped_gemm.cu CublasGroupedGemm): the same launch physics as TE's
    GroupedLinear, so the runtime states kernels.moe_grouped_gemm_per_expert."""
    rt = load_runtime("nemo-automodel")
    assert rt.kernels.moe_grouped_gemm and rt.kernels.moe_grouped_gemm_per_expert
    assert not rt.kernels.moe_fused_mlp


def test_grad_accum_bytes_by_runtime():
    """kernels.grad_accum, hand counts. Pipelined FSDP2 (NeMo AutoModel, K1): the first micro-batch's
    bf16 gradient is upcast to the fp32 reduce dtype (2 + 4 B), each later one added into it
    (4 + 2 + 4 B); Megatron-LM 2021's main_grad hook adds every micro-batch (fp16: 2 + 2 + 2 B);
    Megatron-Core's fused wgrad accumulation and per-micro-batch FSDP reductions cost nothing here."""
    llama = get_preset("llama3-8b")
    t = training_spec("nemo-automodel", seq_len=4096, global_batch=64)
    assert (t.b_G, t.b_G_reduce) == (2, 4)
    k1 = Plan(dp=4, pp=2, zero=3, mbs=1).resolved(8)                      # 16 micro-batches, one schedule
    ctx = Ctx(llama, t, 8)
    psi = _f(M.stage_param_counts(ctx, k1, 0)[0])
    assert _f(S.grad_accum_bytes(ctx, k1, 0)) == psi * (15 * (4 + 2 + 4) + (2 + 4))
    two = k1.with_(pp_flushes=2)                                            # two schedules: two upcasts
    assert _f(S.grad_accum_bytes(ctx, two, 0)) == psi * (14 * (4 + 2 + 4) + 2 * (2 + 4))
    assert _f(S.grad_accum_bytes(ctx, Plan(dp=8, zero=3, mbs=1).resolved(8), 0)) == 0.0
    assert _f(S.grad_accum_bytes(ctx, k1.with_(mbs=16), 0)) == 0.0              # one micro-batch: its backward is the last
    t21 = training_spec("megatron-lm-2021", seq_len=2048, global_batch=64, precision="fp16")
    ddp = Plan(dp=8, zero=0, mbs=2).resolved(8)                              # 4 micro-batches
    c21 = Ctx(llama, t21, 8)
    assert _f(S.grad_accum_bytes(c21, ddp, 0)) == _f(M.stage_param_counts(c21, ddp, 0)[0]) * 4 * (2 + 2 + 2)
    assert _f(S.grad_accum_bytes(Ctx(llama, training_spec(BASE, seq_len=2048, global_batch=64), 8), ddp, 0)) == 0.0
    # the stage's backward carries it, spread over the micro-batches
    fused = replace(t.rt, kernels=replace(t.rt.kernels, grad_accum="fused"))
    tf = training_spec(fused, seq_len=4096, global_batch=64)
    a = S.stage_times(ctx, HW, k1)[0]["first"]
    b = S.stage_times(Ctx(llama, tf, 8), HW, k1)[0]["first"]
    extra = _f(S.grad_accum_bytes(ctx, k1, 0)) / (HW.hbm_bw * HW.hbm_efficiency) / 16
    assert _f(a["b"] - b["b"]) == pytest.approx(extra, rel=1e-9)
    assert _f(a["compute"] - b["compute"]) == pytest.approx(extra, rel=1e-9)
    assert _f(a["f"]) == _f(b["f"])


@pytest.mark.parametrize("flag,tag", [("--use-transformer-engine-op-fuser", "core_v0.18.0\ntouch PWNED"),
                                      ("--x; touch PWNED", "core_v0.18.0"),
                                      ("--use-transformer-engine-op-fuser", "main")])
def test_flags_since_reaches_generated_files_only_as_a_flag_and_a_release_tag(flag, tag):
    """supports.flags_since is written into megatron_args.txt and the launch script's header: a
    value that is not a flag and a release tag is refused in one line where the file is read (it
    once reached the version comparison as a traceback)."""
    from pathlib import Path

    import tomllib

    from autoplace.errors import InputError
    raw = tomllib.loads((Path(__file__).resolve().parents[1] / "autoplace/runtimes/megatron-core.toml").read_text())
    raw["supports"]["flags_since"] = {flag: tag}
    with pytest.raises(InputError) as e:
        runtime_from_dict(raw, "evil.toml")
    assert "flags_since" in str(e.value) and "\n" not in str(e.value)


def test_pipeline_without_a_sharded_stage_module_syncs_every_micro_batch():
    """comm.pp_defer_grad_sync: torch pipelining can defer FSDP2's sync only when the stage module is
    an FSDPModule (K1: one reduce-scatter per schedule, P and G unsharded in the step). NeMo AutoModel
    as of Oct 2025 sharded only model.model, so every micro-batch's backward reduce-scatters and
    reshards: by hand, m × (AG + RS) per step instead of one of each, the model states at rest
    instead of the in-step placement, and each of the v virtual stages (its own FSDP root) exposing
    one layer's share of its collectives — a tail window of L/v layers instead of L."""
    new, old = load_runtime("nemo-automodel"), load_runtime("nemo-automodel-2025")
    assert new.comm.pp_defer_grad_sync and not old.comm.pp_defer_grad_sync
    assert old.kernels == new.kernels and old.host == new.host and old.memory == new.memory   # extends
    from autoplace.cost import comm as C
    world, gb = 16, 64
    plan = Plan(pp=2, dp=8, zero=3, reshard_after_forward=False, mbs=1).resolved(world)
    m = gb // 8
    got = {}
    for rt in (new, old):
        t = training_spec(rt, seq_len=4096, global_batch=gb)
        ctx = Ctx(MODEL, t, world)
        intra, _ = C.dp_volumes(ctx, plan, 0)
        params, grads, _ = M.model_state_bytes(ctx, plan, 0)
        got[rt.name] = (_f(intra), _f(params), _f(grads), ctx, t)
    psi = _f(M.stage_param_counts(got["nemo-automodel"][3], plan, 0)[0])
    t = got["nemo-automodel"][4]
    bP = _f(M.param_store_bytes(t))
    one = 7 / 8 * psi * (t.b_P + t.b_G_reduce)                   # ag(ψ·b_P, 8) + rs(ψ·b_G,reduce, 8)
    assert got["nemo-automodel"][0] == pytest.approx(one, rel=1e-12)
    assert got["nemo-automodel-2025"][0] == pytest.approx(m * one, rel=1e-12)
    assert got["nemo-automodel"][1:3] == pytest.approx((bP * psi, t.b_G_reduce * psi), rel=1e-12)
    assert got["nemo-automodel-2025"][1:3] == pytest.approx((bP * psi / 8, t.b_G * psi / 8), rel=1e-12)
    # the exposed tail: every hidden_tail of the DP terms sees L/v layers without K1, L with it
    seen = []
    real = S.hidden_tail

    def spy(c, window, L, sm_share=0.0):
        seen.append(float(np.max(L)))
        return real(c, window, L, sm_share)
    ip = Plan(pp=2, dp=8, zero=3, reshard_after_forward=False, mbs=1, schedule="interleaved",
              vpp=2).resolved(world)
    Li = _f(M.layers_on_stage(got["nemo-automodel"][3], ip, 0))
    S.hidden_tail = spy
    try:
        for name, want in (("nemo-automodel-2025", Li / 2), ("nemo-automodel", Li)):
            seen.clear()
            S._dp_exposed(got[name][3], HW, ip, 1.0, 2.0, 0, want_total=False)
            assert seen and set(seen) == {want}
    finally:
        S.hidden_tail = real


def test_a_runtime_file_extends_a_shipped_runtime(tmp_path):
    """`extends = "<shipped runtime>"`: that document with the file's keys on top, table by table;
    only shipped runtimes, one level deep, each refusal a one-line error."""
    f = tmp_path / "mine.toml"
    f.write_text('extends = "torchtitan"\nname = "mine"\n[comm]\npp_defer_grad_sync = false\n')
    rt, base = load_runtime(str(f)), load_runtime("torchtitan")
    assert rt.name == "mine" and rt.family == base.family and rt.version == base.version
    assert rt.kernels == base.kernels and rt.defaults == base.defaults
    assert rt.comm == replace(base.comm, pp_defer_grad_sync=False)
    for i, bad in enumerate(('extends = "../etc/passwd"\n', "extends = 3\n", 'extends = "mine"\n')):
        g = tmp_path / f"bad{i}.toml"
        g.write_text(bad)
        with pytest.raises(InputError, match="extends must name a built-in runtime") as e:
            load_runtime(str(g))
        assert "\n" not in str(e.value)


def test_automodel_experts_reduce_in_their_own_dtype():
    """defaults.expert_reduce_native: NeMo AutoModel wraps the experts with `fully_shard` on the
    expert-DP mesh and no mixed-precision policy, so their bf16 gradients reduce-scatter in bf16
    while the dense parameters reduce in fp32. By hand, ZeRO-3 holding parameters from forward to
    backward, m micro-batches: the expert reduce-scatters shrink by m·(ne − 1)/ne·ψ_e·(4 − 2) bytes."""
    am = load_runtime("nemo-automodel")
    assert am.defaults.expert_reduce_native and am.defaults.grad_reduce_bytes == 4
    assert not load_runtime("torchtitan").defaults.expert_reduce_native
    off = replace(am, defaults=replace(am.defaults, expert_reduce_native=False))
    from autoplace.cost import comm as C
    moe = get_preset("mixtral-8x7b")
    world, gb = 16, 64
    plan = Plan(dp=16, ep=4, zero=3, reshard_after_forward=False, mbs=1).resolved(world)
    got = {}
    for rt in (am, off):
        t = training_spec(rt, seq_len=4096, global_batch=gb)
        ctx = Ctx(moe, t, world)
        got[rt.defaults.expert_reduce_native] = (_f(C.dp_volumes(ctx, plan, 0)[0]), ctx, t)
    native, ctx, t = got[True]
    assert t.b_G == 2 and t.b_G_reduce == 4 and t.b_G_reduce_expert == 2
    _, psi_e = M.stage_param_counts(ctx, plan, 0)
    _, ne = M.shard_groups(ctx, plan)
    assert _f(ne) == 4
    m = gb // 16
    assert got[False][0] - native == pytest.approx(m * 3 / 4 * _f(psi_e) * (4 - 2), rel=1e-12)


def _sac_block_bytes(mode: int) -> dict:
    """Activation bytes per token and layer, in units of h, of the benchmarks/sac_memory.py block
    (h 1024, 8 heads, 2 KV heads, f 3584, 2 × 2048 tokens, bf16) under the torchtitan runtimes;
    mode 0 no recompute, 1 selective (op-level SAC)."""
    from autoplace.plan import parse_plan
    from autoplace.specs.model import ModelSpec
    blk = ModelSpec(name="sac-block", layers=4, hidden=1024, heads=8, kv_heads=2, ffn_hidden=3584,
                    vocab=32000)
    p = parse_plan("zero=3,mbs=2" + (",recompute=selective" if mode == 1 else ""))
    out = {}
    for name in ("torchtitan", "torchtitan-compile", "torchtitan-2025", "torchtitan-compile-2025"):
        t = training_spec(load_runtime(name), seq_len=2048, global_batch=16, precision="bf16")
        out[name] = float(M.activation_bytes_per_layer(Ctx(blk, t, 8), p, mode)) / (2 * 2048 * 1024)
    return out


def test_a_compiled_sac_block_drops_the_output_no_backward_reads():
    """Op-level SAC keeps the layer input, wq, wv, the SDPA output + LSE, w1 and w2 — 15.53·h bytes
    per token for the benchmark block (h 1024, q 1024, kv 256, f 3584, 8 heads) as eager measures it
    (benchmarks/sac_memory.py, eager 15.54 × h); a compiled block saves what its backward reads, so
    w2's output goes: one bf16 h-tensor less (measured 13.53 × h)."""
    per = _sac_block_bytes(1)
    assert load_runtime("torchtitan").memory.sac_keeps_unread
    assert not load_runtime("torchtitan-compile").memory.sac_keeps_unread
    assert per["torchtitan"] == pytest.approx(15.53125, abs=1e-12)
    assert per["torchtitan-compile"] == pytest.approx(13.53125, abs=1e-12)


def test_eager_torchtitan_without_recompute_counts_what_its_code_saves():
    """Without recompute, the benchmarks/sac_memory.py block (which writes torchtitan's Llama as it
    was until #2259: repeat_kv before SDPA) keeps per token and layer, beyond the fused count of
    34.03 · h, K and V expanded from 2 to 8 heads (2 × 2 × (1024 − 256) = 3 · h,
    `attention_kv_expanded`, the -2025 runtimes), compiled or not: 37.03 · h, measured 37.03
    compiled. The eager code keeps each pre-norm's fp32 input and fp32 product (2 × (8 − 2) · h) and
    silu's output (2 · 3584 = 7 · h) on top (`eager_saved`) — 56.03 · h, against 56.54 measured.
    Today's code passes enable_gqa: the expanded copies go, nothing else moves."""
    per = _sac_block_bytes(0)
    assert per["torchtitan-compile-2025"] == pytest.approx(34.03125 + 3.0, abs=1e-12)
    assert per["torchtitan-2025"] - per["torchtitan-compile-2025"] == pytest.approx(12.0 + 7.0, abs=1e-12)
    assert per["torchtitan-compile"] == pytest.approx(34.03125, abs=1e-12)
    assert per["torchtitan"] == pytest.approx(34.03125 + 12.0 + 7.0, abs=1e-12)
    sac = _sac_block_bytes(1)                                    # op-SAC recomputes the expansion
    assert sac["torchtitan-2025"] == sac["torchtitan"] and sac["torchtitan-compile-2025"] == sac["torchtitan-compile"]
