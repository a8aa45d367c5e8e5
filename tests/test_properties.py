"""Property tests (hypothesis) for the placement model (issue 2, "What it must show").

1. Memory never increases when a sharding degree increases, everything else fixed.
   Stated per pipeline stage over pairs of *legal* plans, in the forms that are genuinely monotone
   under the spec's accounting (placement_semantics.md §2):

   - dp (the ZeRO/FSDP shard axis): every stage's total is non-increasing when dp grows. Model states
     shrink as 1/n for every sharded state (ZeRO ≥ 1; constant for DDP); the K1 in-step placement keeps
     P and G full but still shards O; activations per micro-batch do not depend on dp, and the number in
     flight min(p − i, m), m, min(2(p−i−1) + (v−1)G + 1, m·v) can only fall as m = B/(b·dp) falls;
     transients (gathered units, buckets, logits, K/V) do not depend on dp.
   - tp (with or without SP): every stage's total is non-increasing. Split weights, their G and O,
     the K/V width max(a_kv/t, 1)·d_h, every ÷t activation term, the stage-0 input term, and the padded
     vocabulary per rank V_pad/t = 128·⌈V/(128t)⌉ are all non-increasing in t; the replicated parts
     (norms, row biases, the 10sbh LN/dropout region without SP) are constant.
   - cp: every stage's total is non-increasing (s/c tokens per rank; model states shrink as well when
     the ZeRO group spans cp). The full-sequence K/V gather buffer appears only when cp > 1 and is
     constant in c, and is smaller than what halving the sequence saves.
   - pp: NOT monotone for the total. Stage 0 keeps Megatron's input ids / embedding-dropout term per
     in-flight micro-batch (grows with p under 1F1B), interleaving holds L·(1 + (p−1)/(p·v)) layers on
     stage 0 (grows with p), and going from p = 1 to p > 1 under ZeRO-2/3 switches to the K1 in-step
     placement (P, G unsharded: T22's 2.25 → 7.5 GB). What is monotone, and tested: the maximum over
     stages of the model states (for ZeRO ≤ 1, or p > 1 on both sides), and under 1F1B / GPipe the
     transformer-layer activations of the binding stage (max_i N_i·L/p = min(p, m)·L/p, non-increasing;
     per stage index it is not: stage 1 holds L/2 layers at p = 2 but 3L/4 at p = 4).
     The counter-examples are pinned as plain tests below.

2. No legal plan has a degree product different from the GPU count (C2).
3. `check`, `estimate` and (for legal plans) `stage_memory` never raise on any plan a user can type
   (random --plan strings built from the parser's keys, with valid and nonsense values), and the memory
   of a legal plan is finite and non-negative.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from autoplace.cost import memory as M
from autoplace.errors import InputError
from autoplace.estimate import estimate
from autoplace.placement.rules import Ctx, check
from autoplace.plan import Plan, parse_plan
from autoplace.specs.hardware import load_hardware
from autoplace.specs.model import params_only
from autoplace.specs.presets import get_preset
from autoplace.specs.training import TrainingSpec

HW = load_hardware("h100-sxm-80gb")
MODELS = ["7b", "13b", "70b", "llama3-8b", "mixtral-8x7b", "gpt-22b", "llama-tiny"]
SETTINGS = settings(max_examples=80, deadline=None,
                    suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])

models = st.sampled_from(MODELS).map(get_preset)
trainings = st.builds(
    TrainingSpec,
    seq_len=st.sampled_from([1024, 2048, 4096]),
    global_batch=st.sampled_from([64, 128, 512]),
    regime=st.sampled_from(["zero", "megatron-bf16", "megatron-fp16", "deepspeed", "fp32"]),
    attention=st.sampled_from(["flash", "eager"]),
    dropout=st.booleans(),
)


@st.composite
def plans(draw, model):
    sched = draw(st.sampled_from(["1f1b", "gpipe", "interleaved"]))
    zero = draw(st.integers(0, 3))
    return Plan(
        tp=draw(st.sampled_from([1, 2, 4, 8])),
        pp=draw(st.sampled_from([1, 2, 4])),
        cp=draw(st.sampled_from([1, 2])),
        dp=draw(st.sampled_from([1, 2, 4, 8])),
        ep=draw(st.sampled_from([1, 2])) if model.is_moe else 1,
        zero=zero,
        reshard_after_forward=draw(st.booleans()),
        sp=draw(st.booleans()),
        recompute=draw(st.sampled_from(["none", "selective", "full"])),
        offload=draw(st.sampled_from(["none", "optimizer"])) if zero >= 1 else "none",
        mbs=draw(st.sampled_from([1, 2])),
        schedule=sched,
        vpp=2 if sched == "interleaved" else 1,
    )


def world_of(p: Plan) -> int:
    return p.dp * p.cp * p.tp * p.pp


def legal(model, train, plan) -> Ctx | None:
    ctx = Ctx(model, train, world_of(plan))
    return ctx if check(ctx, plan) == [] else None


def totals(ctx, plan):
    """Each stage's device memory less NCCL's FIFO buffers: a degree going from 1 to 2 creates a
    communicator and its buffers (priced by hand in tests/test_intervals.py), the rest shrinks."""
    nccl = float(M.nccl_buffer_bytes(ctx, HW, plan))
    return [float(M.stage_memory(ctx, HW, plan, i)["total"]) - nccl for i in range(plan.pp)]


def _le(a, b):
    return a <= b * (1 + 1e-12) + 1e-6


# ---- 1. monotonicity -----------------------------------------------------------------------------
@SETTINGS
@given(data=st.data(), model=models, train=trainings)
def test_memory_non_increasing_in_dp(data, model, train):
    small = data.draw(plans(model))
    big = small.with_(dp=small.dp * 2)
    c_small, c_big = legal(model, train, small), legal(model, train, big)
    assume(c_small is not None and c_big is not None)
    for i, (a, b) in enumerate(zip(totals(c_small, small), totals(c_big, big))):
        assert _le(b, a), (i, small.short(), a, b)


@SETTINGS
@given(data=st.data(), model=models, train=trainings)
def test_model_states_non_increasing_in_dp_states_only(data, model, train):
    """ZeRO accounting (--params, states only): per-rank model states fall for ZeRO ≥ 1 (strictly
    unless the optimizer state is fully offloaded and only P, G — replicated at ZeRO-1 — stay)."""
    p = data.draw(plans(model)).with_(tp=1, pp=1, cp=1, sp=False, ep=1, schedule="1f1b", vpp=1)
    psi = data.draw(st.sampled_from([1e9, 7.5e9, 70e9]))
    tr = train.with_(states_only=True, global_batch=1024)
    ctx_a, ctx_b = Ctx(params_only(psi), tr, p.dp), Ctx(params_only(psi), tr, 2 * p.dp)
    a = float(sum(M.model_state_bytes(ctx_a, p, 0)))
    b = float(sum(M.model_state_bytes(ctx_b, p.with_(dp=2 * p.dp), 0)))
    if p.zero == 0:
        assert a == b
    elif p.offload == "none":
        assert b < a
    else:
        assert _le(b, a)


@SETTINGS
@given(data=st.data(), model=models, train=trainings)
def test_memory_non_increasing_in_tp(data, model, train):
    small = data.draw(plans(model))
    big = small.with_(tp=small.tp * 2)
    c_small, c_big = legal(model, train, small), legal(model, train, big)
    assume(c_small is not None and c_big is not None)
    for i, (a, b) in enumerate(zip(totals(c_small, small), totals(c_big, big))):
        assert _le(b, a), (i, small.short(), a, b)


@SETTINGS
@given(data=st.data(), model=models, train=trainings)
def test_activations_per_layer_non_increasing_in_tp_with_sp(data, model, train):
    p = data.draw(plans(model)).with_(sp=True)
    tp = data.draw(st.sampled_from([2, 4]))
    a = M.activation_bytes_per_layer(Ctx(model, train, 64), p.with_(tp=tp))
    b = M.activation_bytes_per_layer(Ctx(model, train, 64), p.with_(tp=2 * tp))
    assert _le(float(b), float(a))


@SETTINGS
@given(data=st.data(), model=models, train=trainings)
def test_memory_non_increasing_in_cp(data, model, train):
    small = data.draw(plans(model))
    big = small.with_(cp=small.cp * 2)
    c_small, c_big = legal(model, train, small), legal(model, train, big)
    assume(c_small is not None and c_big is not None)
    for i, (a, b) in enumerate(zip(totals(c_small, small), totals(c_big, big))):
        assert _le(b, a), (i, small.short(), a, b)


@SETTINGS
@given(data=st.data(), model=models, train=trainings)
def test_model_states_and_1f1b_layer_activations_non_increasing_in_pp(data, model, train):
    small = data.draw(plans(model))
    assume(small.schedule != "interleaved")
    big = small.with_(pp=small.pp * 2)
    assume(small.zero <= 1 or small.pp > 1)
    c_small, c_big = legal(model, train, small), legal(model, train, big)
    assume(c_small is not None and c_big is not None)

    def states_max(ctx, p):
        return max(float(sum(M.model_state_bytes(ctx, p, i))) for i in range(p.pp))

    assert _le(states_max(c_big, big), states_max(c_small, small))

    def layer_acts(ctx, p, i):
        return float(M.in_flight(ctx, p, i) * M.layers_on_stage(ctx, p, i)
                     * M.activation_bytes_per_layer(ctx, p))

    # per stage *index* it is not monotone (stage 1 holds 1·L/2 layers at p = 2 but 3·L/4 at p = 4);
    # the binding (maximum) stage is
    assert _le(max(layer_acts(c_big, big, i) for i in range(big.pp)),
               max(layer_acts(c_small, small, i) for i in range(small.pp)))


# The documented non-monotone cases (so the property above is not silently widened).
def test_interleaved_stage0_layers_in_flight_grow_with_pp():
    """Interleaved, G = p, m ≥ 2p: stage 0 holds L·(1 + (p−1)/(p·v)) layers — more for larger p."""
    model = get_preset("gpt-175b")
    got = []
    for pp in (2, 4, 8):
        ctx = Ctx(model, TrainingSpec(seq_len=2048, global_batch=64), pp)
        p = Plan(pp=pp, vpp=2, schedule="interleaved").resolved(pp)
        layers = float(M.in_flight(ctx, p, 0) * M.layers_on_stage(ctx, p, 0) / 2)
        assert layers == model.layers * (1 + (pp - 1) / (pp * 2))
        got.append(layers)
    assert got == sorted(got) and got[0] < got[-1]


def test_k1_model_states_grow_from_pp1_to_pp2():
    """T22: ZeRO-3 at p = 1 is (2+4+12)/8 per parameter; under PP (K1) P and G stay unsharded."""
    tr = TrainingSpec(seq_len=2048, global_batch=16, regime="megatron-bf16", states_only=True)
    a = float(sum(M.model_state_bytes(Ctx(params_only(2e9), tr, 8), Plan(zero=3).resolved(8), 0)))
    b = float(sum(M.model_state_bytes(Ctx(params_only(2e9), tr, 16), Plan(zero=3, pp=2).resolved(16), 0)))
    assert b > a


# ---- 2. legal ⇒ degree product = GPU count ---------------------------------------------------------
@SETTINGS
@given(model=models, train=trainings, world=st.sampled_from([1, 2, 6, 8, 12, 16, 24, 32, 64, 96, 128]),
       tp=st.sampled_from([1, 2, 3, 4, 8]), pp=st.sampled_from([1, 2, 3, 4]), cp=st.sampled_from([1, 2, 4]),
       dp=st.integers(1, 130), r=st.sampled_from([1, 2]))
def test_no_legal_plan_with_wrong_degree_product(model, train, world, tp, pp, cp, dp, r):
    plan = Plan(tp=tp, pp=pp, cp=cp, dp=dp, dp_replicate=r)
    found = [v.rule for v in check(Ctx(model, train, world), plan)]
    if not found:
        assert dp * cp * tp * pp == world
    if dp * cp * tp * pp != world:
        assert "C2" in found


@SETTINGS
@given(model=models, train=trainings, world=st.sampled_from([8, 16, 32, 64, 128]),
       tp=st.sampled_from([1, 2, 4, 8]), pp=st.sampled_from([1, 2, 4]), cp=st.sampled_from([1, 2]))
def test_derived_dp_fills_the_world(model, train, world, tp, pp, cp):
    assume(world % (tp * pp * cp) == 0)
    plan = Plan(tp=tp, pp=pp, cp=cp).resolved(world)
    assert plan.dp * cp * tp * pp == world
    if not check(Ctx(model, train, world), plan):
        assert plan.dp * plan.cp * plan.tp * plan.pp == world


# ---- 3. nothing a user can type crashes ------------------------------------------------------------
VALUES = {
    "tp": ["1", "2", "3", "4", "7", "8", "16", "64", "0", "-1", "x"],
    "pp": ["1", "2", "3", "4", "5", "8", "100"],
    "vpp": ["1", "2", "3", "4"],
    "cp": ["1", "2", "3", "4"],
    "ep": ["1", "2", "4", "8", "3"],
    "etp": ["0", "1", "2", "-1"],
    "dp": ["0", "1", "2", "3", "8", "64", "-4"],
    "dp_replicate": ["1", "2", "3"],
    "zero": ["0", "1", "2", "3", "4"],
    "reshard": ["0", "1", "true", "maybe"],
    "sp": ["0", "1", "on", "off"],
    "recompute": ["none", "selective", "full", "block", "sel", "bogus"],
    "recompute_layers": ["0", "1", "4", "-5", "1000"],
    "offload": ["none", "optimizer", "grads", "params", "cpu", "disk"],
    "offload_fraction": ["1", "0.5", "0", "1.5", "nan", "inf"],
    "mbs": ["1", "2", "3", "8", "1000", "0"],
    "schedule": ["1f1b", "interleaved", "gpipe", "zigzag"],
    "vpp_group": ["0", "1", "3", "8", "12", "-3"],
    "rank_order": ["megatron", "torchtitan", "tp-cp-ep-dp-pp", "random"],
    "tp_overlap": ["0", "1"],
    "dp_overlap": ["0", "1"],
    "layer_split": ["", "16:16", "20:12", "1:2", "8:8:8:8", "0:32", "a"],
    "stage_recompute": ["", "0:0", "1:2", "4:4:4:4", "-1:99"],
    "dp_modes": ["R/R/R", "R/S/S", "SG/S/S", "SG-hold/S/S", "R/S/R", "SG/SG/S", "Q/Q", "R/R/R/R"],
    "zero_axes": ["dp", "dp:cp", "dp:tp", "dp:dp", "", "foo"],
    "omit": ["sp_norm_reduce", "cp_grad_reduce", "rng_replay", "param_allgather", "nonsense"],
}


@st.composite
def plan_texts(draw):
    keys = draw(st.lists(st.sampled_from(sorted(VALUES)), min_size=0, max_size=7, unique=True))
    return ",".join(f"{k}={draw(st.sampled_from(VALUES[k]))}" for k in keys)


def _never_crash(model, train, world, text):
    try:
        plan = parse_plan(text)
    except InputError as e:                              # a clean, one-line input error is fine
        assert str(e) and "\n" not in str(e)
        return
    ctx = Ctx(model, train, world)
    found = check(ctx, plan.resolved(world))
    for v in found:
        assert v.message and "\n" not in v.message
    doc = estimate(model, HW, train, plan, world)
    assert doc["legal"] == (not found)
    if not found:
        resolved = plan.resolved(world)
        for i in range(resolved.pp):
            sm = M.stage_memory(ctx, HW, resolved, i)
            for k, val in sm.items():
                val = float(val)
                assert math.isfinite(val) and val >= 0, (text, i, k, val)
        assert math.isfinite(doc["memory"]["peak_bytes"]) and doc["memory"]["peak_bytes"] >= 0


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=st.sampled_from(["7b", "70b", "mixtral-8x7b", "gpt-175b", "llama-tiny"]).map(get_preset),
       train=trainings, world=st.sampled_from([1, 8, 16, 48, 64, 100]), text=plan_texts())
def test_typed_plans_never_crash(model, train, world, text):
    _never_crash(model, train, world, text)


@settings(max_examples=50, deadline=None)
@given(train=trainings, world=st.sampled_from([1, 8, 64]), text=plan_texts(),
       psi=st.sampled_from([1e6, 7.5e9, 1e12]))
def test_typed_plans_never_crash_states_only(train, world, text, psi):
    _never_crash(params_only(psi), train.with_(states_only=True), world, text)


# Each crash class found while writing the properties, pinned as its own example.
@pytest.mark.parametrize("text", [
    "tp=7,pp=100",                       # tp·pp·cp does not divide W: derived dp = 0
    "cp=3",
    "tp=3",
    "pp=2,layer_split=20:12",            # legal uneven split
    "pp=2,layer_split=16:16",
    "pp=2,stage_recompute=0:0",          # legal per-stage recompute
    "pp=4,stage_recompute=1:2",          # wrong length
    "tp=1000000000000000000000",         # a huge degree
    "zero=1,offload=optimizer,offload_fraction=nan",
])
def test_typed_plan_examples_never_crash(text):
    tr = TrainingSpec(seq_len=4096, global_batch=64)
    _never_crash(get_preset("7b"), tr, 64, text)


def test_negative_etp_is_not_a_legal_moe_plan():
    """etp = -1 parses (only tp, pp, vpp, cp, ep, mbs, dp_replicate are checked ≥ 1) and the MoE plan
    passes every rule with negative expert memory."""
    tr = TrainingSpec(seq_len=4096, global_batch=64)
    _never_crash(get_preset("mixtral-8x7b"), tr, 64, "tp=2,pp=2,ep=2,zero=1,etp=-1")
