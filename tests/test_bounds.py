"""Bounded exact search (autoplace.search.bounds): the same top k as evaluating every plan.

The bound prunes cells whose lower bound on step time exceeds the k-th best; these tests compare
it with the full exhaustive search (every plan evaluated) on reduced spaces of dense and MoE
models, and check the bound itself plan by plan against `evaluate`.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autoplace.cost.step import evaluate
from autoplace.placement.rules import Ctx
from autoplace.search.bounds import plan_lower_bound
from autoplace.search.driver import default_global_batch, run_search
from autoplace.search.enumerate import enumerate_space
from autoplace.search.exhaustive import run_exhaustive
from autoplace.search.space import Choice, load_space
from autoplace.specs.hardware import load_hardware
from autoplace.specs.presets import get_preset
from autoplace.specs.training import TrainingSpec

GIB = 2**30


def _ctx(name: str, world: int, seq: int = 4096) -> Ctx:
    m = get_preset(name)
    B, _ = default_global_batch(seq, world)
    return Ctx(m, TrainingSpec(seq_len=seq, global_batch=B), world)


def _reduced(moe: bool, draw):
    """A slice of the default space: every group keeps several options, so blocks hold plans the
    bound can rule out and plans it cannot."""
    sp = load_space("default")
    kw = dict(pp=Choice((1, 2, 4)), cp=Choice((1, 2)), mbs=Choice((1, 2, 4)),
              offload=(0, 1) if draw(st.booleans()) else (0,), offload_fraction=(0.5, 1.0))
    if moe:
        kw.update(ep=Choice((1, 2, 4, 8)), tp=Choice((1, 2, 4)))
    return sp.with_(**kw)


def _same(a: dict, b: dict) -> None:
    assert np.array_equal(a["steps"], b["steps"])
    assert a["top"].plans() == b["top"].plans()


@settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_bounded_top_k_equals_full_enumeration(data):
    draw = data.draw
    name = draw(st.sampled_from(["llama3-8b", "13b", "mixtral-8x7b", "qwen3-30b-a3b"]))
    world = draw(st.sampled_from([8, 16, 32]))
    k = draw(st.sampled_from([1, 3, 8]))
    mem = draw(st.sampled_from([40, 80, 141])) * GIB
    headroom = draw(st.sampled_from([0.0, 0.1]))
    ctx = _ctx(name, world)
    hw = load_hardware().with_(memory_bytes=mem)
    sp = _reduced(ctx.model.is_moe, draw)
    full = run_exhaustive(ctx, hw, sp, headroom, top_k=k, workers=1)
    bnd = run_exhaustive(ctx, hw, sp, headroom, top_k=k, workers=1, bounded=True)
    _same(bnd, full)
    assert bnd["stats"]["optimal"] and bnd["stats"]["legal"] == full["stats"]["legal"]
    assert bnd["stats"]["evaluated"] + bnd["stats"]["pruned_by_bound"] == full["stats"]["evaluated"]
    if not len(full["top"]):            # nothing fits: nothing pruned, the closest plan as before
        assert bnd["stats"]["pruned_by_bound"] == 0
        assert bnd["closest"].plans() == full["closest"].plans()


@pytest.mark.parametrize("name,world", [("13b", 64), ("deepseek-v3", 256)])
def test_bound_never_exceeds_the_step_time(name, world):
    """Inequality (1) of autoplace.search.bounds, plan by plan, on every plan of a few blocks."""
    ctx = _ctx(name, world)
    hw = load_hardware()
    en = enumerate_space(ctx, load_space("default"), collapse_block=False)
    specs = en.block_specs(1 << 14)
    checked = 0
    for spec in specs[:: max(1, len(specs) // 6)]:
        g = en.make_block(spec).grid
        with np.errstate(all="ignore"):
            lb = g.full(plan_lower_bound(ctx, hw, g))
            step = g.full(evaluate(ctx, hw, g)["step_s"])
        ok = np.isfinite(step)
        assert np.all(lb[ok] <= step[ok] * (1 + 1e-12))
        assert np.all(lb[ok] > 0)
        checked += int(ok.sum())
    assert checked > 1000


def test_auto_is_bounded_exact_and_prunes():
    ctx = _ctx("13b", 64)
    hw = load_hardware()
    sp = load_space("default")
    r = run_search(ctx, hw, sp, method="auto", top_k=5)
    full = run_exhaustive(ctx, hw, sp, top_k=5)
    s = r["stats"]
    assert s["method"] == "exhaustive" and s["optimal"] is True
    assert s["pruned_by_bound"] > 10 * s["evaluated"]          # the bound does the work
    assert [float(x) for x in full["steps"]] == r["steps"]
    assert full["top"].plans() == r["plans"]


@pytest.mark.parametrize("launcher,runtime,model", [("megatron", "megatron-core", "mixtral-8x7b"),
                                                    ("torchtitan", "torchtitan", "qwen3-30b-a3b")])
def test_bounded_with_runtime_rules_equals_full(launcher, runtime, model):
    """A runtime's capability rules couple option groups: the evaluated plans get the second legality
    pass, and the top k is still the full enumeration's."""
    from autoplace.export.registry import get_launcher
    from autoplace.runtimes import load_runtime, training_spec
    from autoplace.runtimes.check import capability_rules
    from autoplace.search.space import space_for_runtime
    rt = load_runtime(runtime)
    rules = list(get_launcher(launcher).rules(rt))
    have = {r.id for r in rules}
    rules = tuple(rules + [r for r in capability_rules(rt) if r.id not in have])
    hw = load_hardware()
    # torchtitan runs MoE only through its registered train specs (Qwen3 MoE, not Mixtral)
    ctx = Ctx(get_preset(model), training_spec(rt, seq_len=4096, global_batch=256), 32, hw)
    sp = space_for_runtime(rt, base=load_space("default")).with_(pp=Choice((1, 2, 4)), cp=Choice((1, 2)),
                                                                  mbs=Choice((1, 2)))
    en = enumerate_space(ctx, sp, collapse_block=True, extra_rules=rules)
    full = run_exhaustive(ctx, hw, sp, top_k=4, workers=1, enumeration=en)
    en = enumerate_space(ctx, sp, collapse_block=True, extra_rules=rules)
    bnd = run_exhaustive(ctx, hw, sp, top_k=4, workers=1, enumeration=en, bounded=True)
    _same(bnd, full)
    assert len(full["top"]) == 4 and bnd["stats"]["pruned_by_bound"] > 0


def test_nothing_fits_counts_and_closest_as_exhaustive():
    ctx = _ctx("70b", 8)
    hw = load_hardware().with_(memory_bytes=2 * GIB)
    sp = load_space("fsdp")
    full = run_exhaustive(ctx, hw, sp, top_k=3, workers=1)
    bnd = run_exhaustive(ctx, hw, sp, top_k=3, workers=1, bounded=True)
    assert len(bnd["top"]) == 0 and bnd["stats"]["pruned_by_bound"] == 0
    for key in ("legal", "feasible", "evaluated"):
        assert bnd["stats"][key] == full["stats"][key]
    assert bnd["closest"].plans() == full["closest"].plans() and bnd["closest_ratio"] == full["closest_ratio"]


def test_read_proxy_maps_derived_fields_to_their_columns():
    from autoplace.search.batch import COLUMNS
    from autoplace.search.bounds import _Reads
    ctx = _ctx("13b", 8)
    en = enumerate_space(ctx, load_space("default"))
    g = en.make_block(en.block_specs(1 << 12)[0]).grid
    p = _Reads(g)
    _ = p.g_mode, p.dp_shard, p.tp
    assert p.seen == {"zero", "dp", "dp_replicate", "tp"}
    g.mystery = np.zeros(3)                  # an array the map does not know: counts as reading everything
    p = _Reads(g)
    _ = p.mystery
    assert set(COLUMNS) <= p.seen
