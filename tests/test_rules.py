"""Every worked verdict of placement_semantics.md §4.6 as a test, plus the contract that an illegal plan
yields EVERY violated rule with a one-line reason (issue 2, item 4).

Verdicts: "legal" → `check` returns nothing; "ill-formed (rule X)" → X is among the violations;
GI / SC violations are negative controls built with `Plan.omit` (an obligation deliberately dropped).
"""

from __future__ import annotations

import pytest

from autoplace.cost import comm as C
from autoplace.cost import memory as M
from autoplace.placement.rules import RULES, RULES_BY_ID, Ctx, check, notes, obligations
from autoplace.plan import Plan, parse_plan
from autoplace.specs.model import ModelSpec
from autoplace.specs.presets import get_preset
from autoplace.specs.training import TrainingSpec


def ids(ctx, plan):
    return [v.rule for v in check(ctx, plan)]


def ctx_for(model, world, seq_len=2048, global_batch=None, **kw):
    model = get_preset(model) if isinstance(model, str) else model
    return Ctx(model, TrainingSpec(seq_len=seq_len, global_batch=global_batch or world, **kw), world)


# ---- legal rows ----------------------------------------------------------------------------------
def test_dp64_zero3_full_shard_legal():
    ctx = ctx_for("7b", 64, seq_len=4096)
    plan = Plan(zero=3, reshard_after_forward=True).resolved(64)
    assert plan.dp == 64
    assert check(ctx, plan) == []


def test_megatron_standard_recipe_legal():
    """t=8 × p=8 × d=16, ZeRO-1 (distributed optimizer), SP, selective recompute."""
    ctx = ctx_for("gpt-175b", 1024, global_batch=1536)
    plan = Plan(tp=8, pp=8, zero=1, sp=True, recompute="selective").resolved(1024)
    assert plan.dp == 16
    assert check(ctx, plan) == []


def test_tp8_pp8_d16_zero3_legal_with_k1_cost():
    ctx = ctx_for("gpt-175b", 1024, global_batch=1536)
    plan = Plan(tp=8, pp=8, zero=3, reshard_after_forward=False).resolved(1024)
    assert check(ctx, plan) == []
    assert "K1" in [n.rule for n in notes(ctx, plan)]
    tr = ctx.train
    for stage in (0, 3, 7):
        dense, expert = M.stage_param_counts(ctx, plan, stage)
        psi = float(dense + expert)
        params, grads, opt = (float(x) for x in M.model_state_bytes(ctx, plan, stage))
        # in-step placement (P full, G full at reduce width, O sharded)
        assert params == pytest.approx(tr.b_P * psi, rel=1e-12)
        assert grads == pytest.approx(tr.b_G_reduce * psi, rel=1e-12)
        assert opt == pytest.approx((tr.b_O + tr.b_M) * psi / 16, rel=1e-12)
        # one AG(P) + one RS(G) per step, independent of the 96 micro-batches
        intra, inter = C.dp_volumes(ctx, plan, stage)
        one_ag_one_rs = 15 / 16 * psi * (tr.b_P + tr.b_G_reduce)
        assert float(intra + inter) == pytest.approx(one_ag_one_rs, rel=1e-12)


def test_expert_state_sharded_over_d_exp_crossing_tp_legal():
    """t = 4, t_exp = 1, e = 2: the expert-DP group (8 ranks) spans dense TP coordinates — legal (C3)."""
    ctx = ctx_for("mixtral-8x7b", 16, seq_len=4096)
    plan = Plan(tp=4, etp=1, ep=2, zero=1).resolved(16)
    assert plan.dp == 4 and plan.t_exp == 1
    assert check(ctx, plan) == []
    n_dense, n_exp = M.shard_groups(ctx, plan)
    assert (float(n_dense), float(n_exp)) == (4.0, 8.0)   # d_exp = W/(t_exp·e·p) = 16/2


def test_gqa_kv4_tp8_legal_with_extra_traffic():
    m = ModelSpec(name="gqa", layers=8, hidden=8192, heads=64, kv_heads=4, vocab=32000, ffn_hidden=28672)
    ctx = ctx_for(m, 8, seq_len=4096)
    plan = Plan(tp=8).resolved(8)
    assert check(ctx, plan) == []
    bsh = 4096 * 8192 * 2
    assert float(C.tp_bytes_per_layer(ctx, plan)) > 8 * 7 / 8 * bsh       # extra QKV AG/RS (T21)


# ---- ill-formed rows -----------------------------------------------------------------------------
def test_sp_with_t1_is_c6():
    ctx = ctx_for("7b", 8, seq_len=4096)
    assert ids(ctx, Plan(sp=True).resolved(8)) == ["C6"]


@pytest.mark.parametrize("axes", ["dp,tp", "tp", "dp,cp,tp", "pp"])
@pytest.mark.parametrize("zero", [1, 2, 3])
def test_zero_over_tp_axis_is_c3(axes, zero):
    ctx = ctx_for("7b", 64, seq_len=4096)
    plan = Plan(tp=8, zero=zero, zero_axes=axes).resolved(64)
    assert ids(ctx, plan) == ["C3"]


def test_rsr_modes_on_dp_axis_is_c4():
    ctx = ctx_for("7b", 8, seq_len=4096)
    plan = parse_plan("dp_modes=R/S/R").resolved(8)
    assert (plan.p_mode, plan.g_mode, plan.o_mode) == (0, 1, 0)
    assert ids(ctx, plan) == ["C4"]


@pytest.mark.parametrize("modes", ["R/R/R", "R/R/S", "R/S/S", "SG-hold/S/S", "SG/S/S"])
def test_lattice_triples_are_legal(modes):
    ctx = ctx_for("7b", 8, seq_len=4096)
    assert ids(ctx, parse_plan(f"dp_modes={modes}").resolved(8)) == []


@pytest.mark.parametrize("modes", ["SG/R/R", "SG/S/R", "SG/R/S", "SG-hold/R/S", "R/S/R"])
def test_off_lattice_triples_are_c4(modes):
    ctx = ctx_for("7b", 8, seq_len=4096)
    assert "C4" in ids(ctx, parse_plan(f"dp_modes={modes}").resolved(8))


def test_t6_with_32_heads_is_d1():
    ctx = ctx_for("7b", 48, seq_len=4096)                 # 32 heads
    found = check(ctx, Plan(tp=6).resolved(48))
    assert "D1" in [v.rule for v in found]
    d1 = next(v for v in found if v.rule == "D1")
    assert "32" in d1.message and "6" in d1.message


def test_p5_with_32_layers_even_split_is_d3():
    ctx = ctx_for("7b", 40, seq_len=4096)                 # 32 layers
    assert ids(ctx, Plan(pp=5).resolved(40)) == ["D3"]
    # an explicit uneven split makes it legal
    assert ids(ctx, Plan(pp=5, layer_split=(7, 7, 6, 6, 6)).resolved(40)) == []


def test_interleaved_with_an_uneven_split_needs_vpp_layers_per_stage():
    ctx = ctx_for("7b", 5, seq_len=4096, global_batch=40)     # 32 layers, m = 40 on 1 DP rank
    even = Plan(pp=5, vpp=2, schedule="interleaved", layer_split=(7, 7, 6, 6, 6)).resolved(5)
    assert ids(ctx, even) == []                           # chunks 4+3, 3+3 …: uneven chunks are fine
    thin = Plan(pp=5, vpp=4, schedule="interleaved", layer_split=(3, 8, 8, 8, 5)).resolved(5)
    d3 = [v for v in check(ctx, thin) if v.rule == "D3"]
    assert d3 and "at least vpp=4 layers" in d3[0].message   # stage 0 has 3 layers for 4 chunks
    # without a split the even rule stands: L/pp = 8 layers, 8 % 3 ≠ 0
    ctx4 = ctx_for("7b", 4, seq_len=4096, global_batch=40)
    assert ids(ctx4, Plan(pp=4, vpp=3, schedule="interleaved").resolved(4)) == ["D3"]


def test_interleaved_p8_m12():
    model = get_preset("gpt-175b")
    ctx = ctx_for(model, 8, global_batch=12)
    default = Plan(pp=8, vpp=2, schedule="interleaved").resolved(8)
    assert default.G == 8
    assert ids(ctx, default) == ["D3"]                    # 12 mod 8 = 4, 0 < 4 < 8
    g12 = default.with_(vpp_group=12)
    assert ids(ctx, g12) == []
    legal_G = [G for G in range(1, 20) if ids(ctx, default.with_(vpp_group=G)) == []]
    assert legal_G == [12]                                # the only legal G
    chunk = model.layers / 16
    assert float(M.in_flight(ctx, g12, 0)) * chunk == 1.5 * model.layers
    # versus 23/16·L at G = p (needs m = 32 to be legal with the default; the count itself is G-driven)
    ctx32 = ctx_for(model, 8, global_batch=32)
    assert float(M.in_flight(ctx32, default, 0)) * chunk == 1.4375 * model.layers


def test_c4_s4098_is_d5():
    ctx = ctx_for("13b", 4, seq_len=4098)
    assert ids(ctx, Plan(cp=4).resolved(4)) == ["D5"]


def test_cp_sp_s4100_c2_t4_is_d5():
    ctx = ctx_for("13b", 8, seq_len=4100)
    found = check(ctx, Plan(cp=2, tp=4, sp=True).resolved(8))
    assert [v.rule for v in found] == ["D5"]
    assert "2050" in found[0].message or "(s/c) % t = 2" in found[0].message


def test_parameter_offload_with_zero2_is_k2():
    ctx = ctx_for("7b", 8, seq_len=4096)
    assert ids(ctx, Plan(zero=2, offload="params").resolved(8)) == ["K2"]
    assert ids(ctx, Plan(zero=3, offload="params").resolved(8)) == []


# ---- GI / SC negative controls -------------------------------------------------------------------
@pytest.mark.parametrize("model,world,plan_kw,obligation,kind", [
    ("7b", 8, dict(tp=8, sp=True), "sp_norm_reduce", "GI"),                # SP without t-axis LN all-reduce
    ("7b", 16, dict(cp=2, zero=1), "cp_grad_reduce", "GI"),               # CP without reducing over c
    ("gpt-175b", 16, dict(pp=2), "tied_embedding_reduce", "GI"),          # tied embeddings across PP
    ("7b", 8, dict(zero=1), "param_allgather", "SC"),                      # ZeRO-1 without AG of updated P
    ("7b", 8, dict(zero=2), "param_allgather", "SC"),                      # ZeRO-2 without AG of updated P
    ("7b", 8, dict(recompute="selective"), "rng_replay", "SC"),            # recompute without RNG replay
    ("7b", 8, dict(recompute="full"), "rng_replay", "SC"),
])
def test_correctness_condition_violations(model, world, plan_kw, obligation, kind):
    ctx = ctx_for(model, world, seq_len=4096, dropout=True)
    plan = Plan(**plan_kw).resolved(world)
    assert check(ctx, plan) == []                         # with the obligation kept: legal
    assert obligation in obligations(ctx, plan)
    assert obligations(ctx, plan)[obligation][0] == kind
    bad = plan.with_(omit=(obligation,))
    found = check(ctx, bad)
    assert [v.rule for v in found] == [kind]
    assert obligation in found[0].message
    # omit parses from the --plan syntax too
    typed = parse_plan(",".join(f"{k}={int(v) if isinstance(v, bool) else v}" for k, v in plan_kw.items())
                       + f",omit={obligation}").resolved(world)
    assert [v.rule for v in check(ctx, typed)] == [kind]


def test_omitting_an_obligation_that_does_not_apply_is_harmless():
    ctx = ctx_for("7b", 8, seq_len=4096)
    plan = Plan(zero=0, omit=("sp_norm_reduce", "cp_grad_reduce", "param_allgather")).resolved(8)
    assert check(ctx, plan) == []


# ---- every violated rule, one line each ----------------------------------------------------------
def _assert_one_line(violations):
    for v in violations:
        assert v.rule in RULES_BY_ID
        assert isinstance(v.message, str) and v.message.strip()
        assert "\n" not in v.message and "\r" not in v.message
        assert v.to_dict() == {"rule": v.rule, "message": v.message}


def test_illegal_plan_lists_every_violated_rule():
    """dp given explicitly (dp·tp·pp = 90 ≠ 64); the derived-dp case is test_degree_product_...."""
    ctx = ctx_for("7b", 64, seq_len=4096, global_batch=64, dropout=True)
    plan = parse_plan("dp=3,tp=6,pp=5,vpp=2,schedule=1f1b,sp=1,mbs=3,ep=2,dp_modes=R/S/R,"
                      "zero_axes=dp:tp:tp,offload=params,recompute=selective,"
                      "omit=sp_norm_reduce:rng_replay").resolved(64)
    found = check(ctx, plan)
    expected = {"C1", "C2", "C3", "C4", "D1", "D2", "D3", "D4", "D5", "D6", "K2", "GI", "SC"}
    assert {v.rule for v in found} == expected
    assert len(found) == len(expected)                    # one entry per rule
    _assert_one_line(found)


def test_second_illegal_plan_c5_c6():
    ctx = ctx_for("7b", 8, seq_len=4096)
    found = check(ctx, parse_plan("sp=1,dp_modes=SG/SG/S").resolved(8))
    assert {v.rule for v in found} == {"C5", "C6"}
    _assert_one_line(found)


def test_check_matches_rule_predicates():
    """`check` reports exactly the illegal rules whose predicate holds (and no advisory rule)."""
    ctx = ctx_for("7b", 64, seq_len=4096, dropout=True)
    for text in ["tp=6", "pp=5", "tp=8,pp=8,zero=3", "dp_modes=R/S/R", "cp=3", "tp=3,pp=7",
                 "sp=1", "offload=params,zero=2", "recompute=block,recompute_layers=40"]:
        try:
            plan = parse_plan(text).resolved(64)
            found = {v.rule for v in check(ctx, plan)}
        except ZeroDivisionError:                          # reported separately (test_cli_estimate)
            continue
        want = {r.id for r in RULES if r.illegal and bool(r.violated(ctx, plan))}
        assert found == want, text
        assert not found & {r.id for r in RULES if not r.illegal}


@pytest.mark.parametrize("text,world,rule", [("tp=3", 64, "C2"), ("cp=3", 64, "C2"), ("tp=7,pp=100", 64, "C2")])
def test_degree_product_not_dividing_world_is_c2_not_a_crash(text, world, rule):
    """Derived dp is 0 when tp·pp·cp does not divide W; C2 must report it (no exception)."""
    ctx = ctx_for("7b", world, seq_len=4096)
    found = check(ctx, parse_plan(text).resolved(world))
    assert rule in [v.rule for v in found]
    _assert_one_line(found)


def test_dense_model_never_reports_d6():
    """D6 is the MoE rule (experts % e, W % (t_exp·e·p)); for a dense model with ep = 1 a degree product
    that misses W is C2's to report — not 'ep=1 on a dense model'."""
    ctx = ctx_for("7b", 64, seq_len=4096)
    found = check(ctx, Plan(dp=3, tp=3).resolved(64))
    assert {v.rule for v in found} == {"C2", "D1", "D2", "D4"}
