"""Prediction intervals (autoplace.cost.intervals) and the memory the tools read (allocated,
reserved, device), by hand."""

from __future__ import annotations

import math

import pytest

from autoplace.cost import intervals as IV
from autoplace.cost import memory as M
from autoplace.placement.rules import Ctx
from autoplace.plan import parse_plan
from autoplace.specs.hardware import load_hardware
from autoplace.specs.presets import get_preset
from autoplace.specs.training import TrainingSpec

MIB = 2**20
RES = {"megatron-core|dense|hopper": [("A", 0.1), ("A", -0.1), ("B", 0.2)],
       "megatron-core|dense|ampere": [("C", 0.05)],
       "llm-foundry|dense|hopper": [("D", -0.3)]}


def test_spread_shrinks_down_the_hierarchy_by_source_count():
    """σ² = (S·a² + K·σ²_parent)/(S + K) down all → family → family×kind → family×kind×generation
    → class, a the source-weighted mean of |r| (each source weighs 1 in total), K = SHRINK = 2."""
    K = IV.SHRINK
    a_all = (0.1 + 0.2 + 0.05 + 0.3) / 4                                # sources A, B, C, D
    a_meg = (0.1 + 0.2 + 0.05) / 3                                      # A, B, C: the megatron family
    a_hop = (0.1 + 0.2) / 2                                             # A, B: megatron on hopper
    v = a_all ** 2
    v = (3 * a_meg ** 2 + K * v) / (3 + K)                              # family
    v = (3 * a_meg ** 2 + K * v) / (3 + K)                              # family × dense: the same runs
    v = (2 * a_hop ** 2 + K * v) / (2 + K)                              # family × dense × hopper
    v = (2 * a_hop ** 2 + K * v) / (2 + K)                              # the class holds A, B too
    s, deepest = IV.spread(RES, "megatron-core|dense|hopper")
    assert s == pytest.approx(math.sqrt(v), rel=1e-12) and deepest == "megatron-core|dense|hopper"
    # one far-off run moves the mean |r| less than a root mean square would
    assert s < math.sqrt(((0.01 + 0.01) / 2 + 0.04) / 2)
    # leave-one-source-out: B's residual is in neither σ nor the scores
    f = IV.build(RES, "B")
    assert all(src != "B" for src, _ in f["scores"]) and len(f["scores"]) == 4
    v = ((0.1 + 0.05 + 0.3) / 3) ** 2                                   # A, C, D
    v = (2 * 0.075 ** 2 + K * v) / (2 + K)                              # A, C
    v = (2 * 0.075 ** 2 + K * v) / (2 + K)
    v = (1 * 0.1 ** 2 + K * v) / (1 + K)                                # A alone
    v = (1 * 0.1 ** 2 + K * v) / (1 + K)
    assert f["sigma"]["megatron-core|dense|hopper"] == pytest.approx(math.sqrt(v), rel=1e-12)
    # a PyTorch stack on ampere borrows from the PyTorch stacks, not from Megatron on ampere
    assert IV.spread(RES, "llm-foundry|dense|ampere")[1] == "@torch|dense|*"
    assert IV.spread(RES, "llm-foundry|dense|ampere")[0] > IV.spread(RES, "megatron-core|dense|ampere")[0]
    # a class no run has falls back to the deepest level that has runs
    assert IV.spread(RES, "deepspeed|moe|blackwell")[1] == "*"


def test_a_dense_class_never_borrows_from_moe_runs_on_its_gpu():
    """The hierarchy is nested: (family, kind, generation) sits under (family, kind), so a dense
    PyTorch stack on Hopper with no runs of its own borrows from the dense PyTorch runs on Hopper,
    not from MoE runs there (an AutoModel MoE row, E, is no evidence about llm-foundry's GEMMs).
    By hand, with K = SHRINK: all (A, B, C, D, E) → torch (D, E) → torch dense (D) → torch dense
    hopper (D)."""
    K = IV.SHRINK
    res = {**RES, "nemo-automodel|moe|hopper": [("E", 0.02)]}
    v = ((0.1 + 0.2 + 0.05 + 0.3 + 0.02) / 5) ** 2
    v = (2 * ((0.3 + 0.02) / 2) ** 2 + K * v) / (2 + K)
    v = (1 * 0.3 ** 2 + K * v) / (1 + K)
    v = (1 * 0.3 ** 2 + K * v) / (1 + K)
    s, deepest = IV.spread(res, "torchtitan|dense|hopper")
    assert deepest == "@torch|dense|hopper" and s == pytest.approx(math.sqrt(v), rel=1e-12)
    assert "the torch-family dense runs on hopper" in IV.borrowed(
        {"class": "torchtitan|dense|hopper", "pool": deepest, "n": 1})


def test_interval_is_the_scaled_score_quantile():
    """The interval of class c is σ_c·[z_lo, z_hi], z the pooled normalized scores."""
    f = IV.build(RES)
    p = IV.predict(RES, f, "llm-foundry|dense|hopper", 0.8)
    zlo, zhi, exact = IV.bounds(f["scores"], 0.8)
    assert p["lo"] == pytest.approx(p["sigma"] * zlo) and p["hi"] == pytest.approx(p["sigma"] * zhi)
    assert p["lo"] < 0 < p["hi"] and p["exact"] == exact


def test_nccl_buffers_by_hand():
    """Per ring communicator C·(4 MiB + 4.6875 MiB + 0.5 MiB), C = 32; per p2p peer 2·(4 + 0.5) MiB."""
    hw = load_hardware("h100-sxm-80gb")
    tr = TrainingSpec(seq_len=4096, global_batch=64)
    ring = 32 * (4 + 4.6875 + 0.5) * MIB
    ctx = Ctx(get_preset("llama3-8b"), tr, 16)
    p = parse_plan("tp=2,pp=2,mbs=1").resolved(16)                     # tp 2, dp 4, pp 2
    assert float(M.nccl_buffer_bytes(ctx, hw, p)) == pytest.approx(2 * ring + 2 * 2 * 4.5 * MIB)
    parts = M.overhead_parts(ctx, hw, p)
    assert parts["cuda_context"] == 0.75 * 2**30 and parts["comm_other"] == 0.25 * 2**30
    assert float(M.overhead_bytes(ctx, hw, p)) == pytest.approx(sum(parts.values()))
    one = parse_plan("tp=1,pp=1,mbs=1").resolved(1)
    assert float(M.nccl_buffer_bytes(Ctx(get_preset("llama3-8b"), tr, 1), hw, one)) == 0.0
    # MoE: ep 8 all-to-all over 7 peers, plus the expert-DP ring when it has more than one rank
    mctx = Ctx(get_preset("qwen3-30b-a3b"), tr, 16)
    mp = parse_plan("ep=8,mbs=1").resolved(16)                         # dp 16, expert-DP 2
    assert float(M.nccl_buffer_bytes(mctx, hw, mp)) == pytest.approx(2 * ring + 7 * 2 * 4.5 * MIB)


def test_estimate_reports_allocated_reserved_device_and_flags_near_limit():
    import io

    from rich.console import Console

    from autoplace.estimate import estimate
    from autoplace.report import render_estimate
    hw = load_hardware("h100-sxm-80gb")
    doc = estimate(get_preset("llama3-8b"), hw, TrainingSpec(seq_len=4096, global_batch=64),
                   parse_plan("tp=2,zero=1,mbs=1"), 16)
    m = doc["memory"]
    out = m["outside_allocator"]
    st = m["per_stage"][m["binding_stage"]]
    assert st["device"] == pytest.approx(st["reserved"] + out["cuda_context_bytes"] + out["nccl_buffers_bytes"]
                                         + out["comm_other_bytes"], rel=1e-12)
    assert m["device_bytes"] == m["peak_bytes"] and m["allocated_bytes"] < m["reserved_bytes"] < m["device_bytes"]
    # 35 GiB of 79: not near the limit (its 90 % upper bound, 52 GiB, fits); then a headroom that puts
    # the limit between the point and the 90 % upper bound
    lim = m["device_bytes"] * 1.001
    assert m["interval"]["90"]["hi"] > lim                            # memory residuals are ≥ 0.03 %
    near = estimate(get_preset("llama3-8b"), hw, TrainingSpec(seq_len=4096, global_batch=64),
                    parse_plan("tp=2,zero=1,mbs=1"), 16, headroom=1 - lim / hw.memory_bytes)
    assert near["memory"]["fits"] and near["memory"]["near_limit"] and m["near_limit"] is False
    buf = io.StringIO()
    render_estimate(near, Console(file=buf, width=300))
    text = buf.getvalue()
    assert "NEAR THE LIMIT" in text
    assert "allocated" in text and "reserved" in text and "device" in text and "NCCL buffers" in text


def test_search_table_marks_a_plan_near_the_limit():
    import io
    from types import SimpleNamespace

    from rich.console import Console

    from autoplace.cli.search import render
    from autoplace.estimate import estimate
    hw = load_hardware("h100-sxm-80gb")
    args = (get_preset("llama3-8b"), hw, TrainingSpec(seq_len=4096, global_batch=64), parse_plan("tp=2,zero=1,mbs=1"), 16)
    lim = estimate(*args)["memory"]["device_bytes"] * 1.001
    docs = [estimate(*args, headroom=1 - lim / hw.memory_bytes), estimate(*args)]
    assert docs[0]["memory"]["near_limit"] and not docs[1]["memory"]["near_limit"]
    stats = {"method": "grid", "candidates": 2, "evaluated": 2, "seconds": 0.0, "method_reason": "test"}
    for near in (docs, docs[1:]):
        buf = io.StringIO()
        render({"stats": stats}, near, "", SimpleNamespace(name="default"), False, Console(file=buf, width=250))
        rows = [ln for ln in buf.getvalue().splitlines() if " s0" in ln]
        assert [" near" in r for r in rows] == [d["memory"]["near_limit"] for d in near]
        assert ("90 % upper bound" in buf.getvalue()) == (near is docs)


def test_an_interval_read_by_analogy_says_where_it_was_borrowed():
    """A class with no validation run of its own (no Megatron MoE run states its memory) borrows its
    spread from a parent level; the user is told which and on how many runs; an interval of its own
    class says nothing (Megatron dense memory: the Megatron-LM CI memory tests)."""
    assert IV.borrowed({"class": "megatron-core|dense|hopper", "pool": "megatron-core|dense|hopper", "n": 9}) == ""
    assert IV.borrowed({"class": "megatron-core|dense|hopper", "pool": "*", "n": 26}) == (
        "no megatron-core run of this kind in the validation sets: spread borrowed from all validation runs, n = 26")
    assert "the torch-family moe runs on hopper" in IV.borrowed({"class": "torchtitan|moe|hopper", "pool": "@torch|moe|hopper"})
    assert "the torch-family moe runs, n = 7" in IV.borrowed({"class": "torchtitan|moe|hopper", "pool": "@torch|moe|*", "n": 7})
    assert "the megatron-family runs, n" in IV.borrowed({"class": "megatron-core|moe|cdna", "pool": "@megatron|*|*"})
    assert "all validation runs" in IV.borrowed({"class": "deepspeed|dense|cdna", "pool": "*"})
    # what `estimate` ships for Megatron memory today: dense Hopper rests on its own class; MoE
    # borrows, and the memory title says so
    from autoplace.estimate import estimate
    doc = estimate(get_preset("llama3-8b"), load_hardware("h100-sxm-80gb"), TrainingSpec(seq_len=4096, global_batch=64),
                   parse_plan("tp=2,zero=1,mbs=1"), 16)
    miv = doc["memory"]["interval"]["90"]
    assert miv["pool"] == miv["class"] == "megatron-core|dense|hopper" and IV.borrowed(miv) == ""
    doc = estimate(get_preset("mixtral-8x7b"), load_hardware("h100-sxm-80gb"), TrainingSpec(seq_len=4096, global_batch=64),
                   parse_plan("tp=2,ep=4,zero=1,mbs=1"), 64)
    miv = doc["memory"]["interval"]["90"]
    assert miv["pool"] != miv["class"] and IV.borrowed(miv).startswith("no megatron-core run")


def test_coverage_reports_runs_and_sources_apart():
    """benchmarks/intervals.py scores each run leave-one-source-out and reports the share of runs
    covered and the share of sources (each source once). Source A: three runs the model gets
    exactly; source B: one run 10 log-units off. Scored without A, A's runs get B's spread (σ = 10,
    |z| = 1, so ±10) and fall inside; scored without B, B's run gets A's (σ = 0) and falls outside:
    3 of 4 runs, 1 of 2 sources."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import intervals as B
    rows = [{"file": "f", "id": f"a{i}", "source": "A", "kind": "step", "class": "torchtitan|dense|hopper", "r": 0.0}
            for i in range(3)]
    rows.append({"file": "f", "id": "b", "source": "B", "kind": "step", "class": "torchtitan|dense|hopper", "r": 10.0})
    cov = B.coverage(rows, "step", 0.8)
    assert cov["f"] == (0.75, 4, 0.5) and cov["all"] == (0.75, 4, 0.5)
