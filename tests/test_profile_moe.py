"""Real torch runs (gloo, CPU) of a tiny MoE model with expert parallelism: the exactness checks of the
dense plans (tests/test_profile_dist.py) — state bytes exact, collective bytes per axis = prediction
(the EP all-to-all included), equivalence with a single process in fp32 — for dropless and
capacity-factor token dispatch.

Two launches (session scope): 4 ranks × 4 dropless plans; 2 ranks × 2 plans with capacity factor 1
(copies past an expert's capacity dropped; the single-process reference applies the capacity per
rank micro-batch, as the distributed run does), launched as 2 one-rank "nodes" joined by a c10d
rendezvous on localhost (the multi-node path).
"""

from __future__ import annotations

import pytest

from autoplace.plan import parse_plan
from autoplace.specs.presets import get_preset

pytestmark = pytest.mark.slow

SETTINGS = dict(seq_len=64, global_batch=8, steps=1, warmup=1)
CAPACITY = dict(SETTINGS, moe_capacity_factor=1.0)

PLANS_4 = ["ep=2", "ep=4", "ep=2,recompute=full", "pp=2,ep=2"]       # dropless
PLANS_2 = ["ep=2", "zero=0"]                                           # capacity factor 1 (zero=0: ep=1)


def moe_tiny():
    """llama-tiny with 4 experts of width 128 in both layers, top-2 routing."""
    return get_preset("llama-tiny").with_(layers=2, num_experts=4, top_k=2, expert_ffn_hidden=128,
                                          name="moe-tiny")


@pytest.fixture(scope="session")
def moe_records(tmp_path_factory):
    from autoplace.profile.launch import run_plans
    model = moe_tiny()
    d = tmp_path_factory.mktemp("profile-moe")
    out = {}
    for n, plans, settings, tag, nodes in ((4, PLANS_4, SETTINGS, "dropless", 1),
                                           (2, PLANS_2, CAPACITY, "capacity", 2)):
        recs = run_plans(model, [parse_plan(p) for p in plans], n, out_jsonl=d / "results.jsonl",
                         settings=settings, workdir=d / tag, plan_timeout_s=240, nnodes=nodes)
        assert len(recs) == len(plans)
        for text, rec in zip(plans, recs):
            out[(n, text)] = rec
    return out


ALL = [(4, p) for p in PLANS_4] + [(2, p) for p in PLANS_2]


def _id(k):
    return f"{k[0]}r:{k[1]}"


@pytest.mark.parametrize("key", ALL, ids=_id)
def test_state_bytes_exact(moe_records, key):
    rec = moe_records[key]
    assert rec["status"] == "ok", rec["error"]
    assert rec["legal"], rec["violations"]
    assert rec["state_bytes_exact"], [(m["state_bytes"], p["state_bytes"])
                                      for m, p in zip(rec["ranks"], rec["predicted"])]


@pytest.mark.parametrize("key", ALL, ids=_id)
def test_collective_bytes_per_axis(moe_records, key):
    """dp, tp, pp per rank = prediction; ep: dropless, a rank's all-to-all bytes depend on the routing,
    their mean over each EP group is the prediction exactly; capacity mode: every rank exactly."""
    rec = moe_records[key]
    plan, ranks, preds = rec["plan"], rec["ranks"], rec["predicted"]
    for m, p in zip(ranks, preds):
        for ax in ("dp", "tp", "pp", "cp"):
            assert m["collective_bytes"][ax] == pytest.approx(p["collective_bytes"][ax], rel=1e-9, abs=1.0), \
                (ax, m["rank"], m["collectives"])
    ep = plan["ep"]
    if ep == 1:
        assert all(m["collective_bytes"]["ep"] == 0 == p["collective_bytes"]["ep"] for m, p in zip(ranks, preds))
        return
    assert all(p["collective_bytes"]["ep"] > 0 for p in preds)
    if key in {(2, t) for t in PLANS_2}:
        for m, p in zip(ranks, preds):
            assert m["collective_bytes"]["ep"] == pytest.approx(p["collective_bytes"]["ep"], rel=1e-12)
            assert "ep_meta" not in m["collective_bytes"]           # fixed splits: no count exchange
        assert sum(m["moe_dropped"] for m in ranks) > 0             # cf = 1 drops copies
        return
    # EP groups: consecutive blocks of ep ranks of a data-parallel group (per pipeline stage)
    groups: dict = {}
    for m, p in zip(ranks, preds):
        groups.setdefault((m["pp_rank"], m["dp_rank"] // ep), []).append((m, p))
    assert all(len(g) == ep for g in groups.values())
    for g in groups.values():
        meas = sum(m["collective_bytes"]["ep"] for m, _ in g)
        pred = sum(p["collective_bytes"]["ep"] for _, p in g)
        assert meas == pytest.approx(pred, rel=1e-12), [m["collective_bytes"]["ep"] for m, _ in g]
        assert len({m["collective_bytes"]["ep"] for m, _ in g}) > 1      # routing-dependent splits
        assert all(m["collective_bytes"]["ep_meta"] > 0 for m, _ in g)          # dropless count exchange


@pytest.mark.parametrize("key", ALL, ids=_id)
def test_equivalent_to_single_process(moe_records, key):
    eq = moe_records[key]["equivalence"]
    assert eq["equivalent"], eq
    assert eq["max_abs_diff"] <= eq["tolerance"]["params_atol"]
    assert eq["steps"] == 3
    assert all(r["equivalence"]["params_compared"] > 0 for r in moe_records[key]["ranks"])


def test_full_recompute_repeats_the_all_to_all(moe_records):
    """Full recompute runs dispatch and combine again in backward: 6 all-to-alls per layer, not 4."""
    a = sum(r["collective_bytes"]["ep"] for r in moe_records[(4, "ep=2")]["ranks"])
    b = sum(r["collective_bytes"]["ep"] for r in moe_records[(4, "ep=2,recompute=full")]["ranks"])
    assert b == pytest.approx(1.5 * a, rel=1e-12)



def test_two_node_launch_on_localhost(moe_records):
    """The multi-node launch path: the capacity-factor plans ran as 2 torchrun agents ("nodes") of 1
    rank each, joined by a c10d rendezvous on 127.0.0.1 (the fixture's `nnodes=2`), and passed the
    checks above; here the agents' command lines."""
    from autoplace.profile.launch import local_nodes_argv
    argvs = local_nodes_argv(4, 2)
    for i, a in enumerate(argvs):
        assert a[a.index("--nnodes") + 1] == "2" and a[a.index("--rdzv-backend") + 1] == "c10d"
        assert a[a.index("--node-rank") + 1] == str(i) and a[a.index("--nproc-per-node") + 1] == "2"
        assert a[a.index("--rdzv-endpoint") + 1].startswith("127.0.0.1:") and "--standalone" not in a
    assert len({a[a.index("--rdzv-endpoint") + 1] for a in argvs}) == 1
    with pytest.raises(ValueError, match="do not split"):
        local_nodes_argv(3, 2)
    assert all(moe_records[(2, t)]["status"] == "ok" for t in PLANS_2)
