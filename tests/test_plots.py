"""Pipeline schedule timeline (autoplace.analysis.schedule) and the pictures (autoplace.plots).

The timeline is checked against the cost model, not just drawn: its makespan equals the model's
pipeline time `pipeline_s` ((m·v − 1)·max t_i / v + Σ t_i / v) exactly for equal stages and on real
plans, its warm-up depth is the launchers' (1F1B p−i−1, Megatron interleaved 2(p−i−1)+(v−1)·G), and
the micro-batches it holds in flight are the ones the memory model charges (K6)."""

from __future__ import annotations

import io
import math
import struct

import numpy as np
import pytest

from autoplace.analysis.common import build_training
from autoplace.analysis.schedule import schedule_order, simulate, stage_fb, timeline
from autoplace.cost import memory as M
from autoplace.cost.step import evaluate
from autoplace.estimate import estimate
from autoplace.placement.rules import Ctx, check
from autoplace.plan import parse_plan
from autoplace.specs.hardware import load_hardware
from autoplace.specs.presets import get_preset

GIB = 2**30
PNG_SIG = b"\x89PNG\r\n\x1a\n"


def _formula(m, v, ts):
    return (m * v - 1) * max(ts) / v + sum(ts) / v


def _valid(sched, p, m, v, G):
    if sched != "interleaved":
        return True
    G = G or p
    return p >= 2 and m >= p and p <= G <= m and (m % G == 0 or m % G >= p)


@pytest.mark.parametrize("sched", ["1f1b", "gpipe", "interleaved"])
def test_equal_stage_makespan_is_the_model_formula(sched):
    n = 0
    for p in (1, 2, 3, 4, 8):
        for m in (1, 2, 3, 4, 5, 8, 12, 17, 32):
            for v in ((1,) if sched != "interleaved" else (2, 3, 4)):
                for G in ((0,) if sched != "interleaved" else (0, p + 1, m)):
                    if not _valid(sched, p, m, v, G):
                        continue
                    ops = simulate(schedule_order(sched, p, m, v, G), [1.0] * p, [2.5] * p, v)
                    assert len(ops) == 2 * p * m * v
                    assert math.isclose(max(o.end for o in ops), _formula(m, v, [3.5] * p), rel_tol=1e-12), (p, m, v, G)
                    n += 1
    assert n > 20


def _inflight(order_i):
    cur = peak = 0
    for kind, _, _ in order_i:
        cur += 1 if kind == "F" else -1
        peak = max(peak, cur)
    return peak


def test_orders_are_the_launchers_and_hold_what_the_memory_model_charges():
    model = get_preset("13b")
    for text, world in (("tp=8,pp=4,mbs=1", 64), ("tp=8,pp=4,vpp=2,schedule=interleaved,mbs=1", 64),
                        ("tp=8,pp=8,vpp=5,schedule=interleaved,mbs=2", 128), ("tp=8,pp=2,schedule=gpipe,mbs=4", 64)):
        plan = parse_plan(text).resolved(world)
        for B in (64, 96, 512):
            train, _ = build_training(model, 4096, B, None, "bf16", "zero", world)
            ctx = Ctx(model, train, world)
            if check(ctx, plan):
                continue
            m = int(B // (plan.mbs * plan.dp))
            v = plan.vpp if plan.schedule == "interleaved" else 1
            order = schedule_order(plan.schedule, plan.pp, m, v, plan.vpp_group)
            for i in range(plan.pp):
                first_b = next(k for k, op in enumerate(order[i]) if op[0] == "B")
                total = m * v
                warm = {"1f1b": min(plan.pp - i - 1, m), "gpipe": m,
                        "interleaved": min(2 * (plan.pp - i - 1) + (v - 1) * plan.pp, total)}[plan.schedule]
                # warm-up forwards, then the first steady-state forward, then the first backward
                assert first_b == (warm + 1 if total > warm else total), (text, B, i, first_b, warm)
                assert _inflight(order[i]) == int(np.asarray(M.in_flight(ctx, plan, i))), (text, B, i)


def test_interleaved_warm_up_with_m_equal_p_is_megatron_cores():
    # megatron-core (microbatch_group_size_per_vp_stage): no all-forwards special case at m = p
    order = schedule_order("interleaved", 4, 4, 2)
    assert [k for k, _, _ in order[0]] == ["F"] * 8 + ["B"] * 8          # 2·3 + 4 = 10 ≥ m·v = 8
    assert [k for k, _, _ in order[3]][:6] == ["F"] * 5 + ["B"]           # (v−1)·G = 4 warm-up, then 1F1B


@pytest.mark.parametrize("text", ["tp=8,pp=2,zero=1,sp=1,recompute=selective,mbs=1",
                                  "tp=2,pp=4,vpp=5,schedule=interleaved,zero=1,sp=1,mbs=1",
                                  "tp=4,pp=4,schedule=gpipe,recompute=full,mbs=2",
                                  "tp=8,zero=1,sp=1,mbs=2"])
def test_real_plan_makespan_equals_model_pipeline_time(text):
    model, hw, world = get_preset("13b"), load_hardware(), 64
    train, _ = build_training(model, None, None, None, "bf16", "zero", world)
    ctx = Ctx(model, train, world)
    plan = parse_plan(text).resolved(world)
    assert not check(ctx, plan)
    tl = timeline(ctx, hw, plan)
    ev = evaluate(ctx, hw, plan)
    assert math.isclose(tl["pipeline_s"], float(ev["pipeline_s"]), rel_tol=1e-12)
    assert math.isclose(tl["makespan_s"], tl["pipeline_s"], rel_tol=1e-9), (tl["makespan_s"], tl["pipeline_s"])
    # the pipeline time is what the breakdown charges for the stages' work plus the bubble
    b = estimate(model, hw, train, plan, world)["time"]["breakdown_s"]
    work = sum(b[k] for k in ("compute", "recompute", "tp_comm", "cp_comm", "ep_comm", "pp_bubble"))
    assert math.isclose(work, tl["pipeline_s"], rel_tol=1e-9)
    # every stage runs every micro-batch forward and backward once, for its own stage time
    f, bw = stage_fb(ctx, hw, plan)
    for i in range(plan.pp):
        mine = [o for o in tl["ops"] if o.stage == i]
        assert len(mine) == 2 * tl["m"] * tl["v"]
        assert math.isclose(sum(o.end - o.start for o in mine), tl["m"] * (f[i] + bw[i]), rel_tol=1e-9)


def test_uneven_split_stage_times_follow_the_split():
    model, hw, world = get_preset("13b"), load_hardware(), 32
    train, _ = build_training(model, None, 256, None, "bf16", "zero", world)
    ctx = Ctx(model, train, world)
    plan = parse_plan("tp=4,pp=4,mbs=1,layer_split=9:11:11:9").resolved(world)
    assert not check(ctx, plan)
    f, b = stage_fb(ctx, hw, plan)
    assert f[1] == f[2] and f[1] > f[0] * 1.1           # 11 layers vs 9 (+ embedding)
    tl = timeline(ctx, hw, plan)
    assert math.isclose(tl["pipeline_s"], float(evaluate(ctx, hw, plan)["pipeline_s"]), rel_tol=1e-12)
    # unequal stages: the model's (m − 1)·max t_i + Σ t_i is the classic estimate; the real schedule
    # overlaps a little more of the lighter stages' warm-up (here 0.1 %)
    assert tl["makespan_s"] != tl["pipeline_s"]
    assert math.isclose(tl["makespan_s"], tl["pipeline_s"], rel_tol=0.01)


# ---- pictures -----------------------------------------------------------------------------------
def _png_info(data: bytes):
    assert data[:8] == PNG_SIG
    w, h = struct.unpack(">II", data[16:24])
    from PIL import Image
    im = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
    colours = len(np.unique(im.reshape(-1, 3), axis=0))
    ink = float(np.mean(np.any(im < 235, axis=2)))
    return w, h, colours, ink


def _doc(text="tp=8,pp=4,zero=1,sp=1,mbs=1", world=64):
    model, hw = get_preset("13b"), load_hardware()
    train, _ = build_training(model, None, None, None, "bf16", "zero", world)
    plan = parse_plan(text).resolved(world)
    return model, hw, train, plan, world, estimate(model, hw, train, plan, world)


def test_memory_figure_draws_every_term_of_every_stage_and_the_limit():
    from autoplace.plots.plan import memory_figure
    *_, doc = _doc()
    fig = memory_figure([doc])
    ax = fig.axes[0]
    bars = [p for p in ax.patches]
    assert len(bars) == 7 * 4   # params … transient, the allocator reserve, overhead
    tops = {}
    for r in bars:
        x = round(r.get_x() + r.get_width() / 2)
        tops[x] = max(tops.get(x, 0.0), r.get_y() + r.get_height())
    for s in doc["memory"]["per_stage"]:
        assert math.isclose(tops[s["stage"]], s["total"] / GIB, rel_tol=1e-9)
    ys = [ln.get_ydata()[0] for ln in ax.get_lines()]
    assert any(math.isclose(y, doc["memory"]["limit_bytes"] / GIB) for y in ys)


def test_breakdown_figure_bars_add_up_to_the_step():
    from autoplace.plots.plan import breakdown_figure
    *_, doc = _doc()
    fig = breakdown_figure([doc], ["step"])
    width = sum(p.get_width() for p in fig.axes[0].patches)
    assert math.isclose(width, doc["time"]["step_s"], rel_tol=1e-9)


def test_plan_pictures_are_real_pngs_written_atomically(tmp_path):
    from autoplace.plots import write_pictures
    from autoplace.plots.plan import plan_pictures
    model, hw, train, plan, world, doc = _doc("tp=2,pp=4,vpp=5,schedule=interleaved,zero=1,sp=1,mbs=1")
    pics = plan_pictures(model, hw, train, plan, world, doc)
    assert set(pics) == {"memory.png", "step_breakdown.png", "pipeline_timeline.png"}
    paths = write_pictures(pics, tmp_path / "p")
    assert sorted(p.name for p in (tmp_path / "p").iterdir()) == sorted(pics)   # no temp files left
    for p in paths:
        w, h, colours, ink = _png_info(p.read_bytes())
        assert w > 400 and h > 200 and colours > 30 and ink > 0.03, (p.name, w, h, colours, ink)


def test_sweep_pictures_from_a_sweep_document():
    from autoplace.analysis.sweep import pareto_front
    from autoplace.plots.sweep import sweep_pictures
    rows = []
    for g, step in ((64, 40.0), (128, 20.5), (256, 10.6), (512, 5.6)):
        rows.append({"gpus": g, "hardware": "H100", "seq_len": 4096, "global_batch": 1024, "status": "ok",
                     "step_s": step, "tokens_per_step": 4194304, "tokens_per_s": 4194304 / step,
                     "time_to_train_s": 1e12 / (4194304 / step), "gpu_hours": g * 1e12 / (4194304 / step) / 3600,
                     "cost": 3 * g * 1e12 / (4194304 / step) / 3600, "gpu_seconds_per_token": g * step / 4194304,
                     "cost_per_token": 3 * g * step / 4194304 / 3600, "tokens": 1e12, "price_per_gpu_hour": 3.0})
    doc = {"rows": rows, "cost_metric": "cost", "model": "test", "pareto": pareto_front(rows)}
    assert doc["pareto"] == [3, 2, 1, 0]
    pics = sweep_pictures(doc)
    for name, data in pics.items():
        w, h, colours, ink = _png_info(data)
        assert colours > 20 and ink > 0.02, name


def test_plot_and_report_options_on_every_command(tmp_path):
    from typer.testing import CliRunner

    from autoplace.cli import app
    runner = CliRunner()
    plan = ["--plan", "tp=8,pp=2,zero=1,sp=1,mbs=1"]
    cases = {
        "estimate": (["estimate", "--model", "13b", "--gpus", "64", "--global-batch", "128", *plan],
                     {"memory.png", "step_breakdown.png", "pipeline_timeline.png"}),
        "search": (["search", "--model", "7b", "--gpus", "8", "--global-batch", "64", "--space", "megatron"],
                   {"memory.png", "step_breakdown.png", "pipeline_timeline.png"}),
        "sweep": (["sweep", "--model", "7b", "--gpus", "8,16", "--global-batch", "64", "--space", "megatron",
                   "--tokens", "10B", "--deadline", "30d"],
                  {"sweep_curves.png", "pareto.png", "pick_memory.png", "pick_step_breakdown.png",
                   "pick_pipeline_timeline.png"}),
        "compare": (["compare", "--model", "13b", "--gpus", "64", "--global-batch", "128", *plan,
                     "--plan", "tp=4,pp=4,zero=1,mbs=1"],
                    {"compare_memory.png", "compare_step_breakdown.png", "A_pipeline_timeline.png",
                     "B_pipeline_timeline.png"}),
    }
    for name, (args, files) in cases.items():
        out, rep = tmp_path / name, tmp_path / f"{name}.html"
        r = runner.invoke(app, [*args, "--plot", str(out), "--report", str(rep)])
        assert r.exit_code == 0, (name, r.output)
        assert {p.name for p in out.iterdir()} == files, name
        for p in out.iterdir():
            assert p.read_bytes()[:8] == PNG_SIG
        html = rep.read_text()
        assert html.count("data:image/png;base64,") == len(files), name
    bad = runner.invoke(app, ["estimate", "--model", "13b", "--gpus", "8", "--plot", str(tmp_path / "estimate.html")])
    assert bad.exit_code == 1 and "--plot" in bad.output
