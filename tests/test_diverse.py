"""`search --diverse`: the best plan of each family (autoplace.search.families), kept by the
exhaustive engine as it goes, equals a per-family minimum over every legal plan."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from typer.testing import CliRunner

from autoplace.cli import app
from autoplace.cost.step import evaluate
from autoplace.estimate import estimate
from autoplace.placement.rules import Ctx
from autoplace.plan import Plan
from autoplace.search.enumerate import enumerate_space
from autoplace.search.exhaustive import run_exhaustive
from autoplace.search.families import FAMILIES, family_codes, family_of
from autoplace.search.space import Choice, Space, load_space
from autoplace.specs.hardware import load_hardware
from autoplace.specs.model import ModelSpec
from autoplace.specs.presets import get_preset
from autoplace.specs.training import TrainingSpec

GIB = 2**30
TINY = ModelSpec(name="tiny-8L", layers=8, hidden=256, heads=8, kv_heads=2, vocab=2048, ffn_hidden=688,
                 max_seq_len=256)


def test_family_of_follows_the_documented_precedence():
    assert family_of(Plan(dp=8)) == "DP-only"
    assert family_of(Plan(tp=2, zero=3)) == "TP"
    assert family_of(Plan(tp=8, pp=2)) == "PP"
    assert family_of(Plan(tp=2, pp=2, cp=2)) == "CP"
    assert family_of(Plan(ep=4, pp=2)) == "EP"
    assert family_of(Plan(tp=2, pp=2, offload="optimizer")) == "offload"


@pytest.mark.parametrize("mem_gib", [1.7, 2.5])
def test_family_best_equals_brute_force(mem_gib):
    ctx = Ctx(TINY, TrainingSpec(seq_len=256, global_batch=16), 8)
    hw = load_hardware().with_(memory_bytes=mem_gib * GIB)
    sp = Space(name="t", tp=Choice((), lo=1, hi=4), pp=Choice((), lo=1, hi=4), cp=Choice((1, 2)),
               dp_replicate=Choice((1,)), zero=(0, 1, 3), reshard_after_forward=(True,), sp=(False, True),
               tp_overlap=(False,), recompute=(0, 2, 3), recompute_layers=Choice((), lo=1, divisors=False),
               offload=(0, 1), offload_fraction=(1.0,), mbs=Choice((), lo=1, hi=2), schedule=(0, 1),
               vpp=Choice((2,)), vpp_group=("pp",), rank_order=(0,), dp_overlap=(True,))
    en = enumerate_space(ctx, sp)
    b, ok = en.all_plans()
    legal = b.take(np.nonzero(ok)[0])
    with np.errstate(all="ignore"):
        raw = evaluate(ctx, hw, legal)
    ev = {k: np.broadcast_to(np.asarray(raw[k]), (len(legal),)) for k in ("step_s", "fits")}
    fam = family_codes(legal)
    want = {}
    for f in range(len(FAMILIES)):
        sel = np.nonzero((fam == f) & ev["fits"].astype(bool) & np.isfinite(ev["step_s"]))[0]
        if sel.size:
            want[FAMILIES[f]] = float(ev["step_s"][sel].min())
    assert len(want) >= 4
    for collapse in (False, True):
        r = run_exhaustive(ctx, hw, sp, top_k=2, collapse_block=collapse, workers=1, families=True)
        got = r["families"]
        assert set(got) == set(want)
        for name, (step, batch) in got.items():
            assert math.isclose(step, want[name], rel_tol=1e-12), name
            p = batch.plan(0)
            assert family_of(p) == name
            doc = estimate(ctx.model, hw, ctx.train, p, ctx.world)
            assert doc["memory"]["fits"] and math.isclose(doc["time"]["step_s"], step, rel_tol=1e-9)
        # the overall winner is the best of its own family
        top = r["top"].plan(0)
        assert got[family_of(top)][1].plan(0) == top


def test_family_best_does_not_depend_on_workers():
    ctx = Ctx(get_preset("13b"), TrainingSpec(seq_len=4096, global_batch=1024), 64)
    hw, sp = load_hardware(), load_space("default")
    a = run_exhaustive(ctx, hw, sp, top_k=1, chunk=20000, workers=1, families=True)["families"]
    b = run_exhaustive(ctx, hw, sp, top_k=1, workers=2, families=True)["families"]
    assert {k: (s, x.plan(0)) for k, (s, x) in a.items()} == {k: (s, x.plan(0)) for k, (s, x) in b.items()}


def test_search_cli_diverse():
    runner = CliRunner()
    r = runner.invoke(app, ["search", "--model", "13b", "--gpus", "64", "--diverse", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    fams = doc["families"]
    assert len(fams) == len(set(fams)) == len(doc["plans"]) >= 4 and "EP" not in fams   # 13b has no experts
    steps = [d["time"]["step_s"] for d in doc["plans"]]
    assert steps == sorted(steps)
    for name, d in zip(fams, doc["plans"]):
        assert family_of(Plan.from_dict(d["plan"])) == name
    plain = json.loads(runner.invoke(app, ["search", "--model", "13b", "--gpus", "64", "--json"]).stdout)
    assert plain["plans"][0]["plan"] == doc["plans"][0]["plan"]
    t = runner.invoke(app, ["search", "--model", "13b", "--gpus", "64", "--diverse"])
    assert "best plan of each family" in t.output and "no legal plan that fits in family EP" in t.output
    bad = runner.invoke(app, ["search", "--model", "13b", "--gpus", "64", "--diverse", "--method", "bayes"])
    assert bad.exit_code == 1 and "--diverse needs the exhaustive search" in bad.output
