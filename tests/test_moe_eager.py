"""Megatron-Core's eager work around a gpt-oss-style MoE layer, counted from its code
(`cost.compute.moe_eager_bytes`, `Kernels.rope_unfused_passes`): the FC2 expert bias added per
expert in PyTorch, the GLU clamp before the fused activation, the unfused RoPE a YaRN attention
factor forces — and exactly the terms a change of runtime or the `moe_fused_mlp` switch moves."""

from __future__ import annotations

from dataclasses import replace

import pytest

from autoplace.cost import compute as K
from autoplace.cost import memory as Mm
from autoplace.estimate import estimate
from autoplace.placement.rules import Ctx
from autoplace.plan import parse_plan
from autoplace.runtimes import load_runtime, training_spec
from autoplace.runtimes.switches import apply_settings
from autoplace.specs.hardware import load_hardware
from autoplace.specs.presets import get_preset

OSS = get_preset("gpt-oss-120b")     # hidden 2880, 128 experts × 2880 top-4, biases, swiglu_limit 7
H, K4, F2 = 2880, 4, 2 * 2880


def _kern(name="megatron-core", *sets):
    return apply_settings(load_runtime(name), sets).kernels


def test_expert_bias_and_clamp_bytes_as_counted_from_the_code():
    """Per token of one MoE layer at b_A = 2, 16 local experts. FC2 bias per routed token × hidden
    element: fp32 probabilities (flex dispatchers) 28 B forward (b·p 4, add 2 + 4 + 4, cat 8, cast
    6) and 36 B backward (casts 12, b and p gradients 12 each); 16-bit probabilities (alltoall)
    12 and 12. Clamp per FC1 output element: 8 B forward, 10 B backward."""
    clamp_f, clamp_b = K4 * F2 * 8, K4 * F2 * 10
    fp32 = K.moe_eager_bytes(OSS, _kern("megatron-core", "moe_dispatch=hybridep"), 2.0, 16)
    assert fp32 == (K4 * H * 28 + clamp_f, K4 * H * 36 + clamp_b, 2 * 16 + 2 + 3, 4 * 16 + 2 + 3)
    assert fp32[:2] == (506_880, 645_120)
    bf16 = K.moe_eager_bytes(OSS, _kern("megatron-core"), 2.0, 16)
    assert bf16[:2] == (K4 * H * 12 + clamp_f, K4 * H * 12 + clamp_b) == (322_560, 368_640)


def test_the_fused_mlp_switch_removes_them_with_expert_tp_1_only():
    fused = _kern("megatron-core", "moe_dispatch=hybridep", "moe_fused_mlp=true")
    assert [float(x) for x in K.moe_eager_bytes(OSS, fused, 2.0, 16)] == [0.0, 0.0, 0.0, 0.0]
    # expert TP 2: Megatron-Core falls back to the unfused module (clamp width halves per rank)
    etp2 = K.moe_eager_bytes(OSS, fused, 2.0, 16, etp=2)
    assert [float(x) for x in etp2] == [K4 * H * 28 + K4 * H * 8, K4 * H * 36 + K4 * H * 10, 37.0, 69.0]


@pytest.mark.parametrize("name", ["torchtitan", "torchtitan-compile", "nemo-automodel", "deepspeed",
                                  "llm-foundry", "accelerate", "torch-native"])
def test_other_runtimes_state_no_such_work(name):
    assert [float(x) for x in K.moe_eager_bytes(OSS, _kern(name), 2.0, 16)] == [0.0, 0.0, 0.0, 0.0]


def _layer(model, rt, plan="ep=8,zero=1,mbs=4", world=8):
    t = training_spec(rt, seq_len=4096, global_batch=64, precision="bf16")
    ctx = Ctx(model, t, world)
    p = parse_plan(plan)
    return K.layer_compute_times(ctx, load_hardware("b200"), p), Mm.activation_bytes_per_layer(ctx, p, 0)


def test_a_model_without_expert_bias_or_clamp_is_untouched():
    qwen = get_preset("qwen3-30b-a3b")
    assert not qwen.expert_bias and not qwen.glu_limit and qwen.rope_mscale == 1.0
    rt = load_runtime("megatron-core")
    (a, ma), (b, mb) = _layer(qwen, rt), _layer(qwen, apply_settings(rt, ["moe_fused_mlp=true"]))
    assert float(ma) == float(mb)
    # the op fuser's one grouped kernel replaces TE GroupedLinear's launch per local expert (six
    # expert GEMMs, 128 / 8 = 16 experts): the only term it moves for a model without bias or clamp
    ko = load_hardware("b200").kernel_overhead_s
    kern = ("kern_f", "kern_b", "kern_exp_f", "kern_exp_b")          # launch counts (host ops) move with them
    assert all(float(a[k]) == float(b[k]) for k in a if k not in ("elem_f", "elem_b") + kern)
    assert (float(a["kern_f"] - b["kern_f"]), float(a["kern_b"] - b["kern_b"])) == (2 * 15, 4 * 15)
    assert float(a["elem_f"] - b["elem_f"]) == pytest.approx(2 * 15 * ko, rel=1e-9)
    assert float(a["elem_b"] - b["elem_b"]) == pytest.approx(4 * 15 * ko, rel=1e-9)


def test_fused_mlp_moves_elementwise_time_and_the_clamped_copy_only():
    rt = load_runtime("megatron-core")
    (a, ma), (b, mb) = _layer(OSS, rt), _layer(OSS, apply_settings(rt, ["moe_fused_mlp=true"]))
    moved = {"elem_f", "elem_b", "kern_f", "kern_b", "kern_exp_f", "kern_exp_b"}
    assert all(float(a[k]) == float(b[k]) for k in set(a) - moved)
    assert all(float(a[k]) > float(b[k]) for k in moved)
    hw = load_hardware("b200")
    T = 4 * 4096
    bf, bb, kf, kb = K.moe_eager_bytes(OSS, rt.kernels, 2.0, 128 / 8)
    # … and TE GroupedLinear's launch per local expert (16 − 1 more for each of the six expert GEMMs)
    kf, kb = kf + 2 * 15, kb + 4 * 15
    assert float(a["elem_f"] - b["elem_f"]) == pytest.approx(
        float(K.membound_time(hw, T * bf, kf)), rel=1e-12)
    assert float(a["elem_b"] - b["elem_b"]) == pytest.approx(
        float(K.membound_time(hw, T * bb, kb)), rel=1e-12)
    # the clamp keeps the FC1 output and saves its clamped copy: 2·b_A·f_e per routed token
    assert float(ma - mb) == T * K4 * 2 * 2 * 2880


def test_yarn_attention_factor_takes_megatron_off_its_fused_rope():
    """TE's fused RoPE has no mscale: with gpt-oss's 1.347 Megatron-Core runs the unfused RoPE (8.5
    passes under the 1 : 2 convention, 10 launches); torchtitan's RoPE is the same either way."""
    plain = replace(OSS, rope_mscale=1.0)
    for name, passes in (("megatron-core", 8.5), ("torchtitan", None)):
        rt = load_runtime(name)
        (a, _), (b, _) = _layer(OSS, rt), _layer(plain, rt)
        if passes is None:
            assert float(a["elem_f"]) == float(b["elem_f"]) and float(a["elem_b"]) == float(b["elem_b"])
            continue
        hw = load_hardware("b200")
        T, rot = 4 * 4096, OSS.q_width + OSS.a_kv * OSS.d_head
        extra = (passes - rt.kernels.rope_passes) * T * rot * 2
        assert float(a["elem_f"] - b["elem_f"]) == pytest.approx(extra / (hw.hbm_bw * hw.hbm_efficiency)
                                                                + 10 * hw.kernel_overhead_s, rel=1e-12)
        assert float(a["gemm_f"]) == float(b["gemm_f"]) and float(a["attn_f"]) == float(b["attn_f"])


def test_estimate_prices_them_and_the_megatron_export_writes_the_fuser():
    hw = load_hardware("b200")
    rt = load_runtime("megatron-core")
    m = get_preset("gpt-oss-20b")

    def est(r):
        t = training_spec(r, seq_len=4096, global_batch=64, precision="bf16")
        return estimate(m, hw, t, parse_plan("ep=8,zero=1,mbs=2"), 8)
    eager, fused = est(rt), est(apply_settings(rt, ["moe_fused_mlp=true"]))
    assert fused["time"]["breakdown_s"]["compute"] < eager["time"]["breakdown_s"]["compute"]
    assert fused["memory"]["peak_bytes"] < eager["memory"]["peak_bytes"]
    assert fused["training"]["runtime_set"] == ["moe_fused_mlp=true"]


def test_sink_attention_runs_at_the_runtimes_sink_kernel_rate():
    """kernels.attention_sinks: TE sends learnable-softmax attention (gpt-oss sinks) to cuDNN's
    sink path, priced at the FA2-class rate; the same model without sinks keeps cuDNN's rate, and
    nothing but the attention core moves."""
    rt = load_runtime("megatron-core")
    assert rt.kernels.attention == "cudnn" and rt.kernels.attention_sinks == "flash2"
    hw = load_hardware("b200")
    (a, _), (b, _) = _layer(OSS, rt), _layer(replace(OSS, attn_sinks=False), rt)
    ko = hw.kernel_overhead_s
    ratio = (float(a["attn_f"]) - ko) / (float(b["attn_f"]) - ko)
    # the head-dim factor is the only rate-dependent term besides the efficiency
    hf = K.head_dim_factor(hw, OSS, hw.peak("bf16") * hw.attention_eff("flash2")) / \
        K.head_dim_factor(hw, OSS, hw.peak("bf16") * hw.attention_eff("cudnn"))
    assert ratio == pytest.approx(hw.attention_eff("cudnn") / hw.attention_eff("flash2") / hf, rel=1e-9)
    assert all(float(a[k]) == float(b[k]) for k in a if k not in ("attn_f", "attn_b"))


def _fused_layer(model, name, precision="fp8", hw="b200", plan="ep=8,zero=1,mbs=4"):
    rt = apply_settings(load_runtime(name), ["moe_fused_mlp=true"])
    t = training_spec(rt, seq_len=4096, global_batch=64, precision=precision,
                      fp8_recipe="mxfp8" if precision == "fp8" and hw != "h100" else "")
    ctx = Ctx(model, t, 8)
    h = load_hardware(hw)
    return K.layer_compute_times(ctx, h, parse_plan(plan)), h, t


def test_the_2606_01_dglu_dbias_kernel_slows_fc2_dgrad_of_biased_experts_only():
    """NeMo 26.06.01 (cudnn-frontend 1.24–1.25): the fused grouped MLP's FC2-dgrad + dGLU + dbias
    kernel took 1362.768 µs where the fixed one takes 155.632 µs (cudnn-frontend PR #322): by hand,
    gpt-oss-120b at ep 8 on a B200, MXFP8, T = 4·4096 tokens, top-4 over 128 / 8 = 16 local experts
    → 4,096 rows per expert; FC2 is 2880 × 2880. The backward grows by (8.756 − 1) × the FC2 grouped
    GEMM time, nothing else moves."""
    rt = load_runtime("megatron-core-26.06.01")
    assert rt.kernels.moe_dglu_dbias_factor == pytest.approx(1362.768 / 155.632, abs=5e-4)
    a, hw, t = _fused_layer(OSS, "megatron-core")
    b, _, _ = _fused_layer(OSS, "megatron-core-26.06.01")
    fmt = K.GemmFormat(t, hw)
    assert fmt.recipe.name == "mxfp8"
    fc2 = K.gemm_time(hw, 4096, H, 2880, fmt.bytes, fmt.peak, 16, fmt.eff)
    assert float(b["gemm_b"] - a["gemm_b"]) == pytest.approx((8.756 - 1.0) * float(fc2), rel=1e-12)
    assert all(float(a[k]) == float(b[k]) for k in a if k != "gemm_b")


@pytest.mark.parametrize("model,precision,hw,plan", [
    ("qwen3-30b-a3b", "fp8", "b200", "ep=8,zero=1,mbs=4"),      # experts without biases: dbias off, 139 µs either way
    ("gpt-oss-120b", "bf16", "b200", "ep=8,zero=1,mbs=4"),      # not block-scaled: not that kernel
    ("gpt-oss-120b", "fp8", "h100", "ep=8,zero=1,mbs=4"),       # Hopper: no sm100 kernel
    ("gpt-oss-120b", "fp8", "b200", "tp=2,sp=1,ep=4,etp=2,zero=1,mbs=4"),   # expert TP 2: the unfused module
])
def test_the_dglu_dbias_regression_leaves_other_plans_alone(model, precision, hw, plan):
    m = get_preset(model)
    a, _, _ = _fused_layer(m, "megatron-core", precision, hw, plan)
    b, _, _ = _fused_layer(m, "megatron-core-26.06.01", precision, hw, plan)
    assert all(float(a[k]) == float(b[k]) for k in a)
