"""Search: space files, the enumerator, the vectorized exhaustive search, CP-SAT, Optuna, the CLI.

Exactness tests compare the vectorized paths with plan-by-plan loops over the scalar functions
(`rules.check`, `estimate`), on small instances where every plan can be visited.
"""

from __future__ import annotations

import itertools
import json
import math
import random

import numpy as np
import pytest

from autoplace.errors import InputError, NoFeasiblePlanError
from autoplace.estimate import estimate
from autoplace.placement.rules import Ctx, Rule, check
from autoplace.plan import Plan
from autoplace.search.batch import PlanBatch
from autoplace.search.enumerate import enumerate_space
from autoplace.search.exhaustive import evaluate_block, run_exhaustive
from autoplace.search.space import Choice, Space, load_space
from autoplace.specs.hardware import load_hardware
from autoplace.specs.model import ModelSpec
from autoplace.specs.presets import get_preset
from autoplace.specs.training import TrainingSpec

GIB = 2**30
TINY8 = ModelSpec(name="tiny-8L", layers=8, hidden=256, heads=8, kv_heads=2, vocab=2048, ffn_hidden=688,
                  max_seq_len=256)


# ---- spaces ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["default", "megatron", "fsdp"])
def test_builtin_spaces_load(name):
    s = load_space(name)
    assert s.name == name and s.description
    d = s.to_dict()
    assert "tp" in d and "zero" in d


def test_megatron_and_fsdp_spaces_are_runtime_cuts():
    """`--space megatron|fsdp` are the default space cut to the megatron-core / llm-foundry runtimes
    (the old TOMLs contradicted the exporters: no Megatron-FSDP, DeepSpeed optimizer offload)."""
    meg, fs = load_space("megatron"), load_space("fsdp")
    assert meg.runtime == "megatron-core" and fs.runtime == "llm-foundry"
    assert set(meg.zero) == {0, 1, 2, 3} and meg.rank_order == (0,) and 2 not in meg.schedule   # Megatron-FSDP in
    assert meg.offload == (0, 1) and meg.reshard_after_forward == (True,)
    assert fs.tp.values == (1,) and fs.pp.values == (1,) and fs.cp.values == (1,)
    assert fs.rank_order == (1,) and set(fs.zero) == {0, 3} and fs.offload == (0, 3)


@pytest.mark.parametrize("text, fragment", [
    ("[knobs]\ntpp = [1]\n", "unknown knob 'tpp'"),
    ("[knobs]\nzero = [4]\n", "zero"),
    ("[knobs]\ntp = { min = 4, max = 2 }\n", "max 2 < min 4"),
    ("[knobs]\nrecompute = ['sometimes']\n", "recompute"),
    ("[knobs]\noffload_fraction = [1.5]\n", "(0, 1]"),
    ("[knobs\n", "invalid TOML"),
    ("colour = 'red'\n", "unknown key 'colour'"),
    ("colour = 'red'\nshade = 1\n", "unknown keys 'colour', 'shade'; valid: name, description, extends"),
    ("[knobs]\ntpp = [1]\nzer = [1]\n", "unknown knobs 'tpp', 'zer'; valid: tp, pp, cp"),
    ("[knobs]\ntp = { min = 1, mx = 8 }\n", "knob 'tp': unknown range key 'mx'; valid: min, max, pow2"),
    ("[knobs]\ntp = { min = 1, step = 2 }\n", "knob 'tp': unknown range key 'step'; valid: min, max, pow2"),
    ("[knobs]\nrecompute_layers = { min = 1, stride = 2 }\n", "valid: min, max, pow2, step"),
    ("[knobs]\nmbs = { max = 8, pow2 = 'yes' }\n", "range pow2 must be true or false"),
    ("[knobs.tp]\nmin = 1\nmax = 8\nevery = 2\n", "range key 'every'"),
    ("knobs = 3\n", "[knobs] must be a table"),
    ("tp = [1]\n[knobs]\ntp = [2]\n", "knob 'tp' is set both at the top level and in [knobs]"),
    ("name = 3\n", "'name' must be a string"),
])
def test_bad_space_files_give_one_line_errors(tmp_path, text, fragment):
    f = tmp_path / "bad.toml"
    f.write_text(text)
    with pytest.raises(InputError) as e:
        load_space(str(f))
    assert fragment in str(e.value) and "\n" not in str(e.value)


def test_space_missing_and_extends(tmp_path):
    with pytest.raises(InputError, match="unknown search space"):
        load_space("nope")
    with pytest.raises(InputError, match="does not exist"):
        load_space(str(tmp_path / "missing.toml"))
    f = tmp_path / "mine.toml"
    f.write_text('extends = "megatron"\n[knobs]\ntp = [1, 2]\ntp_async = [true, false]\n')
    s = load_space(str(f))
    assert s.tp.values == (1, 2) and s.zero == load_space("megatron").zero
    assert dict(s.extras)["tp_async"] == (True, False)


# ---- PlanBatch ---------------------------------------------------------------------------------
def _ctx(model=TINY8, world=8, B=16, seq=256):
    return Ctx(model, TrainingSpec(seq_len=seq, global_batch=B), world)


def test_planbatch_round_trip_and_take():
    ctx = _ctx()
    en = enumerate_space(ctx, load_space("default"))
    b, ok = en.all_plans()
    assert len(b) == en.evaluated and ok.all()
    rng = np.random.default_rng(0)
    idx = rng.choice(len(b), 200, replace=False)
    sub = b.take(idx)
    plans = sub.plans()
    back = PlanBatch.from_plans(plans)
    for c, a in sub.columns().items():
        # from_plans keeps an extra flag that sits at its default on every plan as one scalar
        assert np.array_equal(a, np.broadcast_to(getattr(back, c), np.shape(a))), c
    for i, j in enumerate(idx):
        assert b.plan(int(j)) == plans[i]
    assert b.layer_split == () and b.zero_axes == "dp,cp" and b.zero_over_cp is True


def test_grid_blocks_decode_to_the_same_plans():
    ctx = _ctx()
    en = enumerate_space(ctx, load_space("default"))
    flat, _ = en.all_plans()
    seen = 0
    for blk in en.blocks(500):
        keys = blk.keys()
        fb = blk.grid.flat()
        for j in random.Random(1).sample(range(blk.size), min(4, blk.size)):
            assert fb.plan(j) == flat.plan(int(keys[j])) == blk.grid.take_flat([j]).plan(0)
        seen += blk.size
    assert seen == len(flat)


# ---- enumerator: counts equal a brute-force loop over `check` ----------------------------------
def _brute_candidates(ctx, sp: Space):
    """Independent Python loop over the restricted product (divisor degrees, mbs | B/dp, …)."""
    W, L, B = ctx.world, ctx.model.layers, ctx.train.global_batch
    div = lambda n: [d for d in range(1, n + 1) if n % d == 0]  # noqa: E731
    out = []
    for tp in [v for v in sp.tp.resolve(W) if W % v == 0]:
        for pp in [v for v in sp.pp.resolve(W // tp) if (W // tp) % v == 0]:
            for cp in [v for v in sp.cp.resolve(W // (tp * pp)) if (W // (tp * pp)) % v == 0]:
                dp = W // (tp * pp * cp)
                if B % dp:
                    continue
                misc = [(o, d) for o in sp.rank_order[:1] for d in sp.dp_overlap]
                tpo = [(False, False)] if tp == 1 else [(s, o) for s in sp.sp for o in (sp.tp_overlap if s else (False,))]
                rcs = [(c, 0) for c in sp.recompute if c != 3]
                if 3 in sp.recompute and L % pp == 0:
                    rcs += [(3, r) for r in range(1, L // pp)]
                mbss = [v for v in range(1, B // dp + 1) if (B // dp) % v == 0 and (sp.mbs.hi is None or v <= sp.mbs.hi)
                        and (not sp.mbs.values or v in sp.mbs.values)]
                states = []
                for z in sp.zero:
                    for rs in (sp.reshard_after_forward if z == 3 else (True,)):
                        for r in ([1] if z == 0 else [v for v in div(dp) if not sp.dp_replicate.values or v in sp.dp_replicate.values]):
                            for o in sp.offload:
                                for phi in (sp.offload_fraction if o else (1.0,)):
                                    states.append((z, rs, r, o, phi))
                for mbs in mbss:
                    m = B // (dp * mbs)
                    scheds = [(0, 1, 0)]
                    if pp > 1:
                        scheds = [(s, 1, 0) for s in sp.schedule if s != 1]
                        if 1 in sp.schedule and L % pp == 0:
                            for v in [x for x in range(2, L // pp + 1) if (L // pp) % x == 0 and (sp.vpp.hi is None or x <= sp.vpp.hi)]:
                                Gs = []
                                for g in sp.vpp_group:
                                    G = pp if g == "pp" else (m if g == "m" else g)
                                    if G not in Gs:
                                        Gs.append(G)
                                scheds += [(1, v, G) for G in Gs]
                        if not any(s[0] == 0 for s in scheds) and not scheds:
                            scheds = [(0, 1, 0)]
                    for (o, d), (s_, ov), (rc, rl), (sc, v, G), (z, rs, r, off, phi) in itertools.product(
                            misc, tpo, rcs, scheds, states):
                        out.append(Plan(tp=tp, pp=pp, cp=cp, dp=dp, vpp=v, vpp_group=0 if G in (0, pp) else G,
                                        schedule=("1f1b", "interleaved", "gpipe")[sc], mbs=mbs,
                                        recompute=("none", "selective", "full", "block")[rc], recompute_layers=rl,
                                        sp=s_, tp_overlap=ov, zero=z, reshard_after_forward=rs, dp_replicate=r,
                                        offload=("none", "optimizer", "grads", "params")[off], offload_fraction=phi,
                                        rank_order=("tp-cp-ep-dp-pp", "pp-dp-cp-tp")[o], dp_overlap=d))
    return out


SMALL_SPACE = Space(name="small", tp=Choice((), lo=1, hi=8), pp=Choice((), lo=1, hi=4), cp=Choice((1, 2)),
                    dp_replicate=Choice((1, 2)), zero=(0, 1, 3), reshard_after_forward=(True, False),
                    sp=(False, True), tp_overlap=(False,), recompute=(0, 2, 3),
                    recompute_layers=Choice((), lo=1, divisors=False), offload=(0, 3), offload_fraction=(1.0,),
                    mbs=Choice((), lo=1, hi=2), schedule=(0, 1, 2), vpp=Choice((), lo=2, hi=4),
                    vpp_group=("pp", "m"), rank_order=(0,), dp_overlap=(True,))


@pytest.mark.parametrize("world, B, heads", [(8, 8, 8), (6, 12, 6)])
def test_enumerator_legal_count_equals_check_loop(world, B, heads):
    model = TINY8.with_(heads=heads, kv_heads=heads if heads != 8 else 2, hidden=48 * heads // 6 if heads == 6 else 256)
    ctx = _ctx(model, world, B)
    brute = _brute_candidates(ctx, SMALL_SPACE)
    legal = [p for p in brute if not check(ctx, p)]
    en = enumerate_space(ctx, SMALL_SPACE)
    assert en.candidates == len(brute)
    b, ok = en.all_plans()
    got = {b.plan(i) for i in range(len(b)) if ok[i]}
    assert len(got) == int(ok.sum()) == len(legal)
    assert got == set(legal)
    assert sum(en.pruned_by_rule.values()) + len(legal) == en.candidates
    # the collapsed enumeration (one slot per block-recompute family) reports the same counts
    r = run_exhaustive(ctx, load_hardware(), SMALL_SPACE, collapse_block=True, workers=1)
    assert r["stats"]["legal"] == len(legal) and r["stats"]["candidates"] == len(brute)
    assert sum(r["stats"]["pruned_by_rule"].values()) == len(brute) - len(legal)


def _interleaved_zero3(ctx, p):
    return (np.asarray(p.sched) == 1) & (np.asarray(p.zero) == 3)


# an extra rule that couples two option groups (batch: schedule; state: ZeRO stage)
X1 = Rule("X1", "runtime", "interleaving without ZeRO-3", _interleaved_zero3,
          lambda c, p: "this stack does not interleave ZeRO-3 stages")


def test_pruning_legal_mask_equals_rules_legal_mask_on_flat_and_grid_batches():
    from autoplace.placement import rules as placement_rules
    from autoplace.search.pruning import legal_mask
    rules = placement_rules.RULES
    ctx = _ctx()
    en = enumerate_space(ctx, SMALL_SPACE)
    b, _ = en.all_plans()
    c1, c2 = {}, {}
    assert np.array_equal(legal_mask(ctx, b, rules, c1), placement_rules.legal_mask(ctx, b, c2))
    assert {k: v for k, v in c1.items() if v} == {k: v for k, v in c2.items() if v}
    # an n-D block is decided by broadcasting over its shape, equal to its flattened plans
    for blk in en.blocks(700):
        flat = blk.grid.flat()
        g1, g2 = {}, {}
        got = legal_mask(ctx, blk.grid, rules + [X1], g1)
        assert got.shape == (blk.size,)
        assert np.array_equal(got, legal_mask(ctx, flat, rules + [X1], g2))
        assert g1 == g2


@pytest.mark.parametrize("world, B", [(8, 8), (4, 16)])
def test_extra_rules_prune_exactly_and_are_charged_under_their_id(world, B):
    from autoplace.search.pruning import rules_separable
    ctx = _ctx(TINY8, world, B)
    brute = _brute_candidates(ctx, SMALL_SPACE)
    legal = [p for p in brute if not check(ctx, p) and not bool(X1.violated(ctx, p))]
    en = enumerate_space(ctx, SMALL_SPACE, extra_rules=[X1])
    assert not rules_separable(ctx, en)          # X1 reads two groups: blocks get a second pass
    b, ok = en.all_plans()
    assert {b.plan(i) for i in np.nonzero(ok)[0]} == set(legal)
    assert en.pruned_by_rule["X1"] > 0
    assert sum(en.pruned_by_rule.values()) + len(legal) == en.candidates == len(brute)
    hw = load_hardware()
    r = run_exhaustive(ctx, hw, SMALL_SPACE, collapse_block=True, workers=1, extra_rules=[X1])
    assert r["stats"]["legal"] == len(legal) and r["stats"]["candidates"] == len(brute)
    assert sum(r["stats"]["pruned_by_rule"].values()) == len(brute) - len(legal)
    assert r["stats"]["pruned_by_rule"]["X1"] > 0
    for i in range(len(r["top"])):
        p = r["top"].plan(i)
        assert not check(ctx, p) and not X1.violated(ctx, p)
    # without the rule the same search keeps plans X1 rejects
    base = run_exhaustive(ctx, hw, SMALL_SPACE, collapse_block=True, workers=1)
    assert base["stats"]["legal"] > r["stats"]["legal"] and "X1" not in base["stats"]["pruned_by_rule"]


def test_extra_rule_ids_must_be_new():
    from autoplace.placement.rules import RULES_BY_ID
    with pytest.raises(ValueError, match="C2"):
        enumerate_space(_ctx(), SMALL_SPACE, extra_rules=[RULES_BY_ID["C2"]])


def test_pruned_by_rule_names_the_rules():
    ctx = Ctx(get_preset("13b"), TrainingSpec(seq_len=4096, global_batch=1024), 64)
    en = enumerate_space(ctx, load_space("default"))
    assert en.pruned_by_rule.get("D1", 0) > 0        # 40 heads: tp = 16, 32, 64 rejected
    assert en.pruned_by_rule.get("K2", 0) > 0        # offload without ZeRO


# ---- vectorized evaluation equals estimate() plan by plan --------------------------------------
def test_batch_and_grid_evaluation_equal_estimate_on_random_plans():
    from autoplace.cost.step import evaluate
    hw = load_hardware().with_(memory_bytes=2.3 * GIB)
    for model, world, B, seq in ((TINY8, 8, 16, 256), (get_preset("13b"), 64, 1024, 4096)):
        ctx = _ctx(model, world, B, seq)
        en = enumerate_space(ctx, load_space("default"))
        rng = random.Random(world)
        checked = 0
        for blk in en.blocks(4000):
            ev = evaluate_block(ctx, hw if model is TINY8 else load_hardware(), blk.grid)
            for j in rng.sample(range(blk.size), min(2, blk.size)):
                p = blk.grid.take_flat([j]).plan(0)
                h = hw if model is TINY8 else load_hardware()
                doc = estimate(model, h, ctx.train, p, world)
                assert doc["legal"]
                assert math.isclose(doc["time"]["step_s"], ev["step_s"][j], rel_tol=1e-9)
                assert math.isclose(doc["memory"]["peak_bytes"], ev["peak_bytes"][j], rel_tol=1e-9)
                assert doc["memory"]["fits"] == bool(ev["fits"][j])
                flat = evaluate(ctx, h, PlanBatch.from_plans([p]))
                assert math.isclose(float(flat["step_s"][0]), ev["step_s"][j], rel_tol=1e-12)
                checked += 1
            if checked > 60:
                break
        assert checked >= 20


# ---- exhaustive == naive per-plan loop == CP-SAT sub-problem on random small instances ---------
def _random_instance(seed, max_plans: int = 90):
    for sub in range(50):
        ctx, hw, sp = _random_instance1(seed * 1000 + sub)
        if enumerate_space(ctx, sp).evaluated <= max_plans:
            return ctx, hw, sp
    raise AssertionError("no small instance")  # pragma: no cover


def _random_instance1(seed):
    rng = random.Random(seed)
    world = rng.choice([2, 4, 8])
    B = rng.choice([8, 16])
    mem = rng.uniform(1.62, 1.9) * GIB
    sp = Space(name=f"rand{seed}", tp=Choice((), lo=1, hi=rng.choice([2, 4])), pp=Choice((), lo=1, hi=rng.choice([2, 4])),
               cp=Choice((1,)), dp_replicate=Choice((1, 2)) if rng.random() < 0.5 else Choice((1,)),
               zero=tuple(sorted(rng.sample([0, 1, 2, 3], rng.randint(1, 3)))),
               reshard_after_forward=(True, False), sp=(False, True), tp_overlap=(False,),
               recompute=tuple(sorted(rng.sample([0, 1, 2, 3], rng.randint(1, 3)))),
               recompute_layers=Choice((), lo=1, divisors=False), offload=(0,) if rng.random() < 0.6 else (0, 1),
               offload_fraction=(1.0,), mbs=Choice((), lo=1, hi=rng.choice([1, 2, 4])),
               schedule=(0, 1) if rng.random() < 0.5 else (0,), vpp=Choice((2,)), vpp_group=("pp",),
               rank_order=(0,), dp_overlap=(True,))
    return _ctx(TINY8, world, B), load_hardware().with_(memory_bytes=mem), sp


@pytest.mark.parametrize("seed", range(22))
def test_exhaustive_equals_naive_loop(seed):
    ctx, hw, sp = _random_instance(seed)
    r = run_exhaustive(ctx, hw, sp, top_k=3, collapse_block=True, workers=1)
    r_full = run_exhaustive(ctx, hw, sp, top_k=3, collapse_block=False, workers=1)
    en = enumerate_space(ctx, sp)
    b, ok = en.all_plans()
    best = math.inf
    n_fit = 0
    for i in np.nonzero(ok)[0]:
        doc = estimate(ctx.model, hw, ctx.train, b.plan(int(i)), ctx.world)
        if doc["memory"]["fits"]:
            n_fit += 1
            best = min(best, doc["time"]["step_s"])
    assert r["stats"]["feasible"] == r_full["stats"]["feasible"] == n_fit
    assert r["stats"]["legal"] == r_full["stats"]["legal"] == int(ok.sum())
    if n_fit == 0:
        assert len(r["top"]) == 0 and r["closest"] is not None
        return
    assert math.isclose(r["steps"][0], best, rel_tol=1e-9)
    assert math.isclose(r_full["steps"][0], best, rel_tol=1e-9)
    # the plans themselves are exactly as fast as estimate() says
    doc = estimate(ctx.model, hw, ctx.train, r["top"].plan(0), ctx.world)
    assert math.isclose(doc["time"]["step_s"], best, rel_tol=1e-9) and doc["memory"]["fits"]


def test_results_do_not_depend_on_chunking_or_workers():
    ctx = Ctx(get_preset("13b"), TrainingSpec(seq_len=4096, global_batch=1024), 64)
    hw = load_hardware()
    sp = load_space("megatron")
    a = run_exhaustive(ctx, hw, sp, top_k=5, chunk=1 << 17, workers=1)
    b = run_exhaustive(ctx, hw, sp, top_k=5, chunk=3000, workers=2)
    assert a["top"].plans() == b["top"].plans()
    assert np.array_equal(a["steps"], b["steps"])
    for k in ("candidates", "legal", "feasible", "pruned_by_rule"):
        assert a["stats"][k] == b["stats"][k]


# ---- CP-SAT equals brute force on its sub-problem ----------------------------------------------
def _small_stage_models():
    from autoplace.search.ilp import StageModel, stage_model
    hw = load_hardware().with_(memory_bytes=1.75 * GIB)
    out = []
    for L, p, mbs in ((8, 2, 1), (8, 4, 1), (12, 3, 2), (12, 4, 1), (10, 2, 2)):
        model = TINY8.with_(layers=L)
        ctx = _ctx(model, world=p, B=8)
        plan = Plan(pp=p, dp=1, mbs=mbs, zero=0)
        out.append(stage_model(ctx, hw, plan))
        out.append(stage_model(ctx, hw, plan, equal_middle=True))
        out.append(stage_model(ctx, hw, plan.with_(recompute="full"), recompute=False))
    rng = random.Random(7)
    for _ in range(16):
        p = rng.randint(2, 4)
        L = rng.randint(p, 9)
        a = tuple(rng.randint(0, 500) for _ in range(p))
        b = tuple([rng.randint(50, 200)] * p)
        c = tuple([rng.randint(10, 80)] * p)
        alpha = tuple(rng.randint(100, 400) for _ in range(p))
        beta = tuple(rng.randint(20, 120) for _ in range(p))
        gamma = tuple(-rng.randint(0, x) for x in beta)
        out.append(StageModel(L=L, p=p, m=rng.randint(1, 16), a=a, b=b, c=c, alpha=alpha, beta=beta,
                              gamma=gamma, limit=rng.randint(600, 1200), recompute=rng.random() < 0.7,
                              equal_middle=rng.random() < 0.3))
    return out


def test_cpsat_and_milp_equal_brute_force():
    from autoplace.search.ilp import solve_brute, solve_cpsat, solve_milp
    models = _small_stage_models()
    assert len(models) >= 20
    n_feasible = 0
    for sm in models:
        bf = solve_brute(sm)
        cs = solve_cpsat(sm)
        mi = solve_milp(sm)
        if bf.status == "INFEASIBLE":
            assert cs.status == "INFEASIBLE" and mi.status == "INFEASIBLE"
            continue
        n_feasible += 1
        assert cs.optimal and cs.objective == bf.objective, (sm, cs, bf)
        assert sm.feasible(cs.layer_split, cs.stage_recompute)
        assert mi.objective == bf.objective, (sm, mi, bf)
    assert n_feasible >= 10


def _uneven_70b(global_batch, split, rec):
    """70b on 64 GPUs, tp=8 pp=8: (ctx, hw, StageModel, the plan with an explicit split)."""
    from autoplace.search.ilp import stage_model
    hw = load_hardware()
    ctx = Ctx(get_preset("70b"), TrainingSpec(seq_len=4096, global_batch=global_batch), 64)
    plan = Plan(tp=8, pp=8, dp=1, zero=1, sp=True, mbs=1)
    q = plan.with_(layer_split=split, stage_recompute=rec, recompute="block")
    return ctx, hw, stage_model(ctx, hw, plan), q


def test_stage_model_is_the_cost_model():
    """The ILP's per-stage coefficients reproduce stage_memory for an uneven split."""
    from autoplace.cost import memory
    from autoplace.search.ilp import MIB
    split, rec = (9, 10, 10, 11, 10, 10, 10, 10), (3, 2, 0, 0, 1, 0, 0, 0)
    ctx, hw, sm, q = _uneven_70b(512, split, rec)
    for i in range(8):
        true = float(np.asarray(memory.stage_memory(ctx, hw, q, i)["total"])) / MIB
        assert 0 <= sm.stage_mem(i, split[i], rec[i]) - true < 1 + split[i] + rec[i]   # rounded up per coefficient


def test_evaluate_times_every_stage_of_an_uneven_split():
    """T_pipe of an explicit split with unequal interior stages = (m − 1)·max t_i + Σ t_i, the ILP's
    objective from its per-stage coefficients (µs rounding per stage)."""
    from autoplace.cost.step import evaluate
    from autoplace.search.ilp import US
    split, rec = (8, 12, 8, 11, 9, 10, 12, 10), (2, 0, 3, 0, 1, 0, 0, 0)
    ctx, hw, sm, q = _uneven_70b(64, split, rec)
    ev = evaluate(ctx, hw, q)
    t_pipe = float(ev["step_s"] - ev["pp_comm"] - ev["dp_comm_exposed"] - ev["optimizer"] - ev["offload"]
                   - ev["overhead"])
    tol = (sm.m + 8) * (1 + max(split) + max(rec)) * 0.5 * US     # a, b, c each rounded to 1 µs
    assert t_pipe == pytest.approx(sm.objective(split, rec) * US, abs=tol)
    # the equal-interior reading (one middle stage × 6) would be off by far more than rounding
    t = [sm.stage_time(i, split[i], rec[i]) for i in range(8)]
    wrong = (sm.m - 1) * max(t) + t[0] + t[-1] + 6 * t[1]
    assert abs(wrong * US - t_pipe) > 20 * tol


def test_ilp_refinement_fits_and_is_legal():
    from autoplace.cost.step import evaluate
    from autoplace.search.ilp import refine
    hw = load_hardware()
    ctx = Ctx(get_preset("llama3-405b"), TrainingSpec(seq_len=8192, global_batch=512), 1024)
    # pp = 16 does not divide 126 layers: no uniform plan exists, the ILP finds the uneven split
    plan = Plan(tp=8, pp=16, dp=8, zero=1, sp=True, mbs=1)
    assert [v.rule for v in check(ctx, plan)] == ["D3"]
    q, res, sm = refine(ctx, hw, plan)
    assert res.optimal and sum(q.layer_split) == 126 and len(q.layer_split) == 16
    assert not check(ctx, q)
    assert all(sm.stage_mem(i, q.layer_split[i], q.stage_recompute[i]) <= sm.limit for i in range(16))
    assert bool(np.asarray(evaluate(ctx, hw, q)["fits"]))
    # first and last stage (embedding, logits) get no more layers than the middle ones
    assert q.layer_split[0] <= min(q.layer_split[1:-1]) and q.layer_split[-1] <= min(q.layer_split[1:-1])


# ---- Optuna ------------------------------------------------------------------------------------
def test_bayes_reaches_two_percent_of_optimum_13b_64():
    from autoplace.search.bayes import analytic_seed, run_bayes
    hw = load_hardware()
    ctx = Ctx(get_preset("13b"), TrainingSpec(seq_len=4096, global_batch=1024), 64)
    sp = load_space("default")
    opt = run_exhaustive(ctx, hw, sp, top_k=1)["steps"][0]
    seeds = analytic_seed(ctx, hw, sp)       # coarse-space optimum, not the exhaustive one
    r = run_bayes(ctx, hw, sp, n_trials=200, seed=0, seed_plans=seeds)
    assert r["stats"]["trials"] <= 200
    assert r["steps"][0] <= opt * 1.02
    assert r["steps"][0] >= opt * (1 - 1e-9)          # nothing beats the proven optimum
    t = r["study"].trials[0]
    assert any(k.endswith("memory") for k in t.system_attrs)   # Trial.set_constraint was used
    # TPE alone, without the analytic seed (three sampler seeds): near — the median within 10 %, none
    # past 20 % — but the seed is what guarantees 2 % in 200 trials on a space of 3.4 M legal plans
    best = [run_bayes(ctx, hw, sp, n_trials=200, seed=seed)["steps"][0] for seed in (0, 1, 2)]
    assert all(opt * (1 - 1e-9) <= b <= opt * 1.20 for b in best), best
    assert float(np.median(best)) <= opt * 1.10, best


def test_bayes_decoder_round_trip():
    from autoplace.search.bayes import Decoder
    ctx = Ctx(get_preset("13b"), TrainingSpec(seq_len=4096, global_batch=1024), 64)
    en = enumerate_space(ctx, load_space("default"))
    dec = Decoder(en)
    rng = np.random.default_rng(3)
    for _ in range(50):
        u = {k: dec.choices[k][int(rng.integers(len(dec.choices[k])))] for k in dec.names}
        b = dec.decode(u)
        p = b.plan(0)
        assert not check(ctx, p)                   # legal by construction
        assert dec.decode(dec.encode(p)).plan(0) == p


# ---- driver and CLI ----------------------------------------------------------------------------
def test_default_global_batch():
    from autoplace.search.driver import default_global_batch
    assert default_global_batch(4096, 64)[0] == 1024
    assert default_global_batch(8192, 16384)[0] == 512
    B, note = default_global_batch(2048, 1920)
    assert B % 1920 == 0 and "1920" in note
    assert default_global_batch(4096, 24)[0] % 24 == 0


def test_no_feasible_plan_reports_the_closest():
    from autoplace.search.driver import run_search
    ctx = Ctx(get_preset("70b"), TrainingSpec(seq_len=4096, global_batch=64), 8)
    hw = load_hardware().with_(memory_bytes=2 * GIB)
    with pytest.raises(NoFeasiblePlanError) as e:
        run_search(ctx, hw, load_space("fsdp"), method="exhaustive")
    msg = str(e.value)
    assert "closest" in msg and "over by" in msg and "GiB" in msg and e.value.closest is not None


@pytest.fixture(scope="module")
def runner():
    from typer.testing import CliRunner
    return CliRunner()


def _app():
    from autoplace.cli import app
    return app


def test_cli_json(runner):
    res = runner.invoke(_app(), ["search", "--model", "13b", "--gpus", "64", "--json", "--top-k", "3"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    from autoplace import SCHEMA_VERSION
    assert doc["schema_version"] == SCHEMA_VERSION
    st = doc["stats"]
    for k in ("candidates", "legal", "feasible", "pruned_by_rule", "method", "optimal", "seconds"):
        assert k in st
    assert st["optimal"] is True and st["method"] == "exhaustive"
    assert len(doc["plans"]) == 3
    steps = [p["time"]["step_s"] for p in doc["plans"]]
    assert steps == sorted(steps)
    assert set(doc["plans"][0]) >= {"plan", "memory", "time", "legal"} and doc["plans"][0]["legal"]


def test_cli_table_and_explain(runner):
    res = runner.invoke(_app(), ["search", "--model", "7b", "--gpus", "8", "--space", "megatron", "--explain"])
    assert res.exit_code == 0, res.output
    assert "why #1 beats #2" in res.output and "pruned by rule" in res.output and "global batch" in res.output


@pytest.mark.parametrize("args", [
    ["--method", "magic"], ["--space", "nope"], ["--top-k", "0"], ["--gpus", "0"],
    ["--global-batch", "8", "--global-batch-tokens", "100"], ["--model", "not-a-model"], ["--profile-top", "0"],
])
def test_cli_bad_input_exit_1(runner, args):
    base = {"--model": "13b", "--gpus": "64"}
    argv = ["search"]
    for k, v in base.items():
        if k not in args:
            argv += [k, v]
    res = runner.invoke(_app(), argv + args)
    assert res.exit_code == 1, res.output
    assert "error:" in res.output and "Traceback" not in res.output


def test_cli_no_feasible_exit_3(runner):
    res = runner.invoke(_app(), ["search", "--model", "70b", "--gpus", "8", "--gpu-memory", "2GiB",
                                 "--space", "fsdp", "--global-batch", "64"])
    assert res.exit_code == 3, res.output
    assert "closest" in res.output and "over by" in res.output
    res = runner.invoke(_app(), ["search", "--model", "70b", "--gpus", "8", "--gpu-memory", "2GiB",
                                 "--space", "fsdp", "--global-batch", "64", "--json"])
    assert res.exit_code == 3
    doc = json.loads(res.stdout)
    assert doc["plans"] == [] and doc["closest"]["memory"]["fits"] is False


def test_cli_bad_space_file(runner, tmp_path):
    f = tmp_path / "s.toml"
    f.write_text("[knobs]\nzero = [7]\n")
    res = runner.invoke(_app(), ["search", "--model", "7b", "--gpus", "8", "--space", str(f)])
    assert res.exit_code == 1 and "zero" in res.output


def test_cli_profile_top_writes_into_a_run_folder(runner, tmp_path, monkeypatch):
    """--profile-top records go to runs/search-<model>-<N>g-<UTC>/ under the current directory, or
    to --profile-out DIR (the torch runs themselves: tests/test_profile_*.py)."""
    from autoplace.profile import candidates
    seen = []

    def fake_profile_candidates(model, plans, **kw):
        seen.append(kw["out_dir"])
        return candidates.CandidateResults(
            {"plan": p.to_dict(), "plan_short": p.short(), "status": "ok", "error": None, "predicted_rank": i + 1,
             "measured_rank": i + 1, "predicted_step_s": 1.0, "measured_step_s": 1.0, "rel_error": 0.0}
            for i, p in enumerate(plans))

    monkeypatch.setattr(candidates, "profile_candidates", fake_profile_candidates)
    monkeypatch.chdir(tmp_path)
    argv = ["search", "--model", "llama-tiny", "--gpus", "2", "--profile-top", "1", "--json"]
    res = runner.invoke(_app(), argv)
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["profiled"][0]["search_rank"] == 1
    run = seen[0]
    assert str(run.parent) == "runs"            # relative to the current directory (tmp_path here)
    assert run.name.startswith("search-llama-tiny-2g-") and run.name.endswith("Z")
    res = runner.invoke(_app(), argv + ["--profile-out", str(tmp_path / "mine")])
    assert res.exit_code == 0, res.output
    assert str(seen[1]) == str(tmp_path / "mine")


def test_default_run_dir_is_named_and_unique(tmp_path):
    from autoplace.io import default_run_dir
    a = default_run_dir("profile", "Llama-2-13B (20 layers)", 8, root=tmp_path)
    assert a.parent == tmp_path and a.name.startswith("profile-llama-2-13b-20-layers-8g-")
    a.mkdir()
    b = default_run_dir("profile", "Llama-2-13B (20 layers)", 8, root=tmp_path)
    assert b != a and not b.exists() and b.name.startswith("profile-llama-2-13b-20-layers-8g-")


def test_cli_does_not_import_heavy_modules():
    import subprocess
    import sys
    code = ("import sys, autoplace.cli; "
            "bad=[m for m in ('torch','optuna','ortools') if m in sys.modules]; print(bad); sys.exit(bool(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_uneven_parents_fall_back_to_the_distributed_optimizer():
    """61-layer DeepSeek-V3: no pp divides L, so pipelined plans exist only with an uneven split
    (--method ilp). When the best uniform plans are ZeRO-3 and the runtime refuses ZeRO-2/3 under
    pipelining (megatron-core, RT-zero-pp), the uneven parents take the distributed optimizer instead
    of being dropped — before this the ILP had no parent at all under `--launcher megatron`."""
    from autoplace.runtimes import load_runtime
    from autoplace.runtimes.check import capability_rules
    from autoplace.search.driver import _uneven_parents
    ctx = Ctx(get_preset("deepseek-v3"), TrainingSpec(seq_len=4096, global_batch=1024), 256)
    en = enumerate_space(ctx, load_space("default"))
    rules = capability_rules(load_runtime("megatron-core"))
    tpl = Plan(dp=256, ep=32, zero=3, recompute="block", recompute_layers=46, mbs=4).resolved(256)
    parents = _uneven_parents(ctx, en, [tpl], rules=rules)
    assert parents and all(q.pp > 1 and ctx.model.layers % q.pp for q in parents)
    assert {q.zero for q in parents} == {1}
    assert all([v.rule for v in check(ctx, q, rules)] == ["D3"] for q in parents)


# ---- Megatron-Core --recompute-modules as a searched knob -------------------------------------
def test_recompute_modules_are_enumerated_where_the_model_has_them_and_priced_like_estimate():
    """The default space lists recompute_modules ([], mla_up_proj, core_attn+mla_up_proj,
    layernorm+moe_act, mlp, mla_up_proj+mlp) with selective recompute; a set naming a module the
    model lacks (rule R2) is skipped: a dense standard-attention model keeps [] and mlp, an all-MoE
    model without MLA [] and layernorm+moe_act, DeepSeek-V3 (MLA, MoE and 3 dense layers) every set.
    Every such batch row costs what `estimate` of the same scalar plan says (one cost function), and
    the rows round-trip to plans naming the modules."""
    from autoplace.cost.step import evaluate
    from autoplace.plan import modules_code
    sp = load_space("default")
    sets = (["mla_up_proj"], ["core_attn", "mla_up_proj"], ["layernorm", "moe_act"], ["mlp"], ["mla_up_proj", "mlp"])
    assert set(sp.recompute_modules) == {0} | {modules_code(x) for x in sets}

    def codes(ctx):
        en = enumerate_space(ctx, sp)
        return set(np.unique(en.groups[[g.name for g in en.groups].index("rc")].cols["rc_mods"]).tolist())
    assert codes(_ctx(get_preset("13b"), 64, 1024, 4096)) == {0, modules_code(["mlp"])}
    assert codes(_ctx(get_preset("qwen3-30b-a3b"), 64, 1024, 4096)) == {0, modules_code(["layernorm", "moe_act"])}
    ds = get_preset("deepseek-v3")
    ctx = Ctx(ds, TrainingSpec(seq_len=4096, global_batch=1024), 256)
    en = enumerate_space(ctx, sp)
    rc = en.groups[[g.name for g in en.groups].index("rc")]
    assert set(np.unique(rc.cols["rc_mods"])) == {0} | {modules_code(x) for x in sets}
    assert np.all(rc.cols["rc"][rc.cols["rc_mods"] > 0] == 1)          # modules only with selective
    hw = load_hardware("GB200-NVL72")
    base = Plan(dp=256, ep=32, zero=1, recompute="selective", mbs=1).resolved(256)
    peaks, steps = {}, {}
    for mods in ((), ("mla_up_proj",), ("core_attn", "mla_up_proj")):
        p = Plan(**{**base.__dict__, "recompute_modules": mods}) if mods else base
        doc = estimate(ds, hw, ctx.train, p, 256)
        b = PlanBatch.from_plans([p])
        assert b.rc_mods[0] == modules_code(mods) and b.plan(0).recompute_modules == mods
        ev = evaluate(ctx, hw, b)
        assert math.isclose(float(ev["step_s"][0]), doc["time"]["step_s"], rel_tol=1e-12)
        assert math.isclose(float(ev["peak_bytes"][0]), doc["memory"]["peak_bytes"], rel_tol=1e-12)
        peaks[mods], steps[mods] = doc["memory"]["peak_bytes"], doc["time"]["step_s"]
    # mla_up_proj keeps none of the per-head Q/K/V: 128 heads × (2·192 + 128) bf16 per token and
    # layer less (61 layers, mbs 1 × 4096 tokens in flight under pp = 1; the peak adds the MTP layer
    # and the allocator's reserve on top)
    per_layer = 4096 * 2 * 128 * (2 * 192 + 128)
    drop = peaks[()] - peaks[("mla_up_proj",)]
    assert 61 * per_layer <= drop <= 1.05 * 61 * per_layer
    # under flash, Megatron's default selective (core_attn) re-runs the core and saves nothing: naming
    # mla_up_proj alone drops that re-run and re-runs the (cheaper) up-projections instead
    assert steps[("mla_up_proj",)] < steps[()]
    # adding core_attn to the list re-runs the flash core too: slower, same memory (flash keeps its LSE only)
    assert steps[("core_attn", "mla_up_proj")] > steps[("mla_up_proj",)]
    assert math.isclose(peaks[("core_attn", "mla_up_proj")], peaks[("mla_up_proj",)], rel_tol=1e-12)


def test_recompute_modules_space_cut_and_bad_values(tmp_path):
    from autoplace.search.space import space_for_runtime
    assert space_for_runtime("megatron-core").recompute_modules == load_space("default").recompute_modules
    for rt in ("torchtitan", "deepspeed", "torch-native"):
        assert space_for_runtime(rt).recompute_modules == (0,)
    f = tmp_path / "s.toml"
    f.write_text('name = "x"\n[knobs]\nrecompute_modules = [["mla_up_proj", "moe"]]\n')
    with pytest.raises(InputError, match="recompute_modules.*'moe' is not one of core_attn, mla_up_proj"):
        load_space(str(f))


def test_search_takes_named_recompute_modules_where_they_pay():
    """DeepSeek-V3 on 256 GB200 (B = 1024, seq 4096): the fastest plan that fits names recompute
    modules — mla_up_proj, over the whole default space and when only the MLA sets are offered
    (with the NCCL buffers of the ep = 64 all-to-all priced, layernorm + moe_act no longer frees
    enough) — and the best plan without named modules is slower (the module set frees the
    activation memory that less recompute needs)."""
    from autoplace.plan import modules_code
    from autoplace.search.driver import run_search
    ctx = Ctx(get_preset("deepseek-v3"), TrainingSpec(seq_len=4096, global_batch=1024), 256)
    hw = load_hardware("GB200-NVL72")
    sp = load_space("default").with_(tp=Choice((1,)), cp=Choice((1,)), pp=Choice((1,)), ep=Choice((32, 64)))
    best = run_search(ctx, hw, sp, top_k=1)
    mla = run_search(ctx, hw, sp.with_(recompute_modules=(0, modules_code(["mla_up_proj"]),
                                                          modules_code(["core_attn", "mla_up_proj"]))), top_k=1)
    none = run_search(ctx, hw, sp.with_(recompute_modules=(0,)), top_k=1)
    assert best["plans"][0].recompute_modules == ("mla_up_proj",)
    assert mla["plans"][0].recompute_modules == ("mla_up_proj",)
    assert none["plans"][0].recompute_modules == ()
    assert best["steps"][0] <= mla["steps"][0] < none["steps"][0] * 0.995
