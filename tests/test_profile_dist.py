"""Real torch runs (gloo, CPU) of llama-tiny plans: exact state bytes, activations within 5 %,
collective bytes per axis = prediction, equivalence with a single process, negative controls.

Two torchrun launches for the whole module (session scope): 2 ranks × 17 plans and 4 ranks × 9
plans. Each plan trains warm-up 1 + 1 timed + 1 instrumented step (3 Adam steps, the trajectory
compared with the single-process run).
"""

from __future__ import annotations

import pytest

from autoplace.plan import parse_plan
from autoplace.specs.presets import get_preset

pytestmark = pytest.mark.slow

SETTINGS = dict(seq_len=64, global_batch=8, steps=1, warmup=1)

PLANS_2 = [
    "zero=0",                                   # DDP
    "zero=1",                                   # ZeRO-1 (flat-shard Adam)
    "zero=2",                                   # ZeRO-2
    "zero=3",                                   # FSDP2 reshard_after_forward=True
    "zero=3,reshard=0",                         # FSDP2 reshard_after_forward=False (SG-hold)
    "tp=2",                                     # DTensor TP, vocab-parallel embedding + loss
    "tp=2,sp=1",                                # TP + Megatron-style SP
    "tp=2,sp=1,recompute=full",                 # full activation checkpointing
    "tp=2,sp=1,recompute=selective",            # attention-core checkpointing
    "tp=2,recompute=block,recompute_layers=2",  # first 2 layers checkpointed
    "pp=2",                                     # Schedule1F1B
    "pp=2,schedule=gpipe",                      # ScheduleGPipe
    "pp=2,vpp=2",                               # ScheduleInterleaved1F1B
    "pp=2,zero=1",                              # PP × ZeRO-1
    "zero=0,recompute=full",
    "zero=0,omit=dp_grad_reduce",               # negative control: no DP gradient all-reduce
    "tp=2,sp=1,omit=sp_norm_reduce",            # negative control: SP norm grads not reduced
]
PLANS_4 = [
    "zero=3,dp_replicate=2",                    # HSDP (2-D mesh)
    "zero=1,dp_replicate=2",                    # ZeRO-1 with a replicate axis
    "zero=2,dp_replicate=2",
    "tp=2,zero=0",                              # DDP × TP (_pre_dp_module_transform)
    "tp=2,sp=1,zero=1",                         # ZeRO-1 × TP+SP
    "tp=2,zero=3",                              # FSDP2 × TP (2-D DTensors)
    "pp=2,zero=0",                              # PP × DDP
    "pp=2,tp=2,sp=1",                           # 3-D
    "pp=2,zero=3",                              # PP × FSDP2: K1 (prediction is in-step residency)
]
NEGATIVE = {"zero=0,omit=dp_grad_reduce", "tp=2,sp=1,omit=sp_norm_reduce"}


@pytest.fixture(scope="session")
def records(tmp_path_factory):
    from autoplace.profile.launch import run_plans
    model = get_preset("llama-tiny")
    d = tmp_path_factory.mktemp("profile")
    out = {}
    for n, plans in ((2, PLANS_2), (4, PLANS_4)):
        recs = run_plans(model, [parse_plan(p) for p in plans], n, out_jsonl=d / "results.jsonl",
                         settings=SETTINGS, workdir=d / f"w{n}", plan_timeout_s=240)
        assert len(recs) == len(plans)
        for text, rec in zip(plans, recs):
            out[(n, text)] = rec
    out["_jsonl"] = d / "results.jsonl"
    return out


ALL = [(2, p) for p in PLANS_2] + [(4, p) for p in PLANS_4]
LEGAL = [k for k in ALL if k[1] not in NEGATIVE]


def _id(k):
    return f"{k[0]}r:{k[1]}"


@pytest.mark.parametrize("key", ALL, ids=_id)
def test_ran(records, key):
    rec = records[key]
    assert rec["status"] == "ok", rec["error"]
    assert len(rec["ranks"]) == key[0]
    assert rec["schema_version"] and rec["plan"]["tp"] == parse_plan(key[1]).tp


@pytest.mark.parametrize("key", LEGAL, ids=_id)
def test_state_bytes_exact(records, key):
    rec = records[key]
    assert rec["legal"], rec["violations"]
    if rec["plan"]["pp"] > 1 and rec["plan"]["zero"] >= 2:
        # K1: the cost model gives the in-step residency (P, G unsharded during the pipeline
        # schedule); measured at rest (after the step) they are FSDP2 shards — assert that instead
        for m, p in zip(rec["ranks"], rec["predicted"]):
            n = rec["plan"]["dp"]
            assert m["state_bytes"]["optimizer"] == p["state_bytes"]["optimizer"]
            assert m["state_bytes"]["params"] * n == p["state_bytes"]["params"]
        return
    assert rec["state_bytes_exact"], [(m["state_bytes"], p["state_bytes"])
                                      for m, p in zip(rec["ranks"], rec["predicted"])]


@pytest.mark.parametrize("key", LEGAL, ids=_id)
def test_activation_bytes_within_5pct(records, key):
    rec = records[key]
    for m, p in zip(rec["ranks"], rec["predicted"]):
        gap = m["activation_bytes"] / p["activation_bytes"] - 1
        assert abs(gap) <= 0.05, (m["rank"], m["activation_bytes"], p["activation_bytes"])


@pytest.mark.parametrize("key", LEGAL, ids=_id)
def test_collective_bytes_per_axis(records, key):
    rec = records[key]
    plan = rec["plan"]
    for m, p in zip(rec["ranks"], rec["predicted"]):
        for ax in ("dp", "tp", "pp"):
            meas, pred = m["collective_bytes"][ax], p["collective_bytes"][ax]
            if ax == "pp" and plan["tp"] > 1 and not plan["sp"]:
                # the cost model sizes P2P as 1/t (Megatron's scatter/gather of the replicated
                # activation); torch.distributed.pipelining sends the whole tensor
                assert meas == pytest.approx(pred * plan["tp"], rel=1e-9)
                continue
            assert meas == pytest.approx(pred, rel=1e-9, abs=1.0), (ax, m["rank"], m["collectives"])


@pytest.mark.parametrize("key", LEGAL, ids=_id)
def test_equivalent_to_single_process(records, key):
    eq = records[key]["equivalence"]
    assert eq["equivalent"], eq
    assert eq["max_abs_diff"] <= eq["tolerance"]["params_atol"]
    assert eq["steps"] == 3
    assert all(r["equivalence"]["params_compared"] > 0 for r in records[key]["ranks"])


@pytest.mark.parametrize("text,rule_obligation", [("zero=0,omit=dp_grad_reduce", "dp_grad_reduce"),
                                                 ("tp=2,sp=1,omit=sp_norm_reduce", "sp_norm_reduce")])
def test_negative_control_diverges_and_rule_gi_rejects(records, text, rule_obligation):
    rec = records[(2, text)]
    assert rec["status"] == "ok"
    eq = rec["equivalence"]
    assert not eq["equivalent"]
    assert eq["max_abs_diff_params"] > 100 * eq["tolerance"]["params_atol"]
    assert not rec["legal"]
    gi = [v for v in rec["violations"] if v["rule"] == "GI"]
    assert gi and rule_obligation in gi[0]["message"]
    # and the checker agrees directly
    from autoplace.placement.rules import Ctx, check
    from autoplace.profile.report import train_spec
    ctx = Ctx(get_preset("llama-tiny"), train_spec(SETTINGS), 2)
    assert "GI" in {v.rule for v in check(ctx, parse_plan(text).resolved(2))}


def test_results_appended_as_jsonl(records):
    import json
    lines = [json.loads(x) for x in records["_jsonl"].read_text().splitlines() if x.strip()]
    assert len(lines) == len(ALL)
    assert {ln["status"] for ln in lines} == {"ok"}


def test_step_times_reported(records):
    for key in ALL:
        for r in records[key]["ranks"]:
            assert r["step_s"] is not None and r["step_s"] > 0
            assert r["peak_memory_bytes"] is None          # CPU: no device memory stats
