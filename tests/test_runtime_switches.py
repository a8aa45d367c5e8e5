"""Runtime switches (`autoplace.runtimes.switches`): `--runtime-set`, the record mapping and the
exporters read one definition of CUDA graphs, the MoE token dispatcher and FP8 attention."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_export as base  # noqa: E402

from autoplace.cli import app  # noqa: E402
from autoplace.errors import InputError  # noqa: E402
from autoplace.estimate import estimate  # noqa: E402
from autoplace.export import megatron, torchtitan  # noqa: E402
from autoplace.export.planfile import plan_document, read_plan_file, write_plan_file  # noqa: E402
from autoplace.plan import parse_plan  # noqa: E402
from autoplace.runtimes import load_runtime, training_spec  # noqa: E402
from autoplace.runtimes.switches import SWITCHES, apply_settings, parse_setting, settings_text  # noqa: E402
from autoplace.specs.hardware import load_hardware  # noqa: E402
from autoplace.specs.presets import get_preset  # noqa: E402

runner = CliRunner()


def test_a_switch_sets_every_key_it_implies_and_nothing_else():
    rt = load_runtime("megatron-core")
    hy = apply_settings(rt, ["moe_dispatch=hybridep"])
    assert (hy.kernels.moe_dispatch, hy.kernels.moe_permute_passes, hy.comm.a2a_node_dedup, hy.comm.ep_comm_sms) == \
        ("hybridep", 0.0, True, 32)
    assert replace(hy, kernels=rt.kernels, comm=rt.comm, overrides=()) == rt      # nothing else moved
    back = apply_settings(hy, ["moe_dispatch=alltoall"])
    assert (back.kernels.moe_permute_passes, back.comm.a2a_node_dedup, back.comm.ep_comm_sms) == (4.0, False, 0)
    assert apply_settings(rt, ["cuda_graphs=full_iteration"]).kernels.cuda_graphs is True
    assert apply_settings(rt, ["cuda_graphs=full_iteration"]).kernels.cuda_graph_experts is True
    assert apply_settings(rt, ["cuda_graphs=transformer_engine"]).kernels.cuda_graph_experts is False
    assert apply_settings(rt, ["cuda_graphs=none"]).kernels.cuda_graphs is False
    raw = apply_settings(rt, ["kernels.membound_kernels=10", "comm.dp_comm_sms=16"])
    assert (raw.kernels.membound_kernels, raw.comm.dp_comm_sms) == (10, 16)
    assert settings_text(raw) == ["kernels.membound_kernels=10", "comm.dp_comm_sms=16"]
    assert apply_settings(rt, []) is rt
    assert set(SWITCHES) == {"moe_dispatch", "cuda_graphs", "fp8_attention", "moe_fused_mlp"}
    assert parse_setting("a.b = 1.5") == ("a.b", 1.5) and parse_setting("x=hybridep") == ("x", "hybridep")


@pytest.mark.parametrize("bad,needle", [
    ("nope=1", "unknown key 'nope'"),
    ("kernels.nope=1", "unknown [kernels] key 'nope'"),
    ("nosec.a=1", "unknown section 'nosec'"),
    ("moe_dispatch=nccl", "choose one of alltoall, allgather, deepep, hybridep"),
    ("kernels.membound_kernels=1.5", "must be an integer"),
    ("kernels.attention=magic", "[kernels] attention = 'magic' is not one of"),
    ("cuda_graphs", "write KEY=VALUE"),
])
def test_a_bad_setting_is_a_one_line_error_naming_it(bad, needle):
    with pytest.raises(InputError) as e:
        apply_settings(load_runtime("megatron-core"), [bad])
    assert needle in str(e.value) and "\n" not in str(e.value)


def _moe_step(*sets):
    m = get_preset("qwen3-30b-a3b")
    hw = load_hardware("gb200-nvl72")
    rt = apply_settings(load_runtime("megatron-core"), sets)
    t = training_spec(rt, seq_len=4096, global_batch=512, precision="fp8", fp8_recipe="mxfp8")
    return estimate(m, hw, t, parse_plan("ep=8,zero=1,mbs=4"), 8)


def test_switches_change_the_terms_they_should():
    """hybrid-EP removes the permute passes (compute) and changes the EP traffic; FP8 attention
    changes only compute and the host time the dropless layer's serialised forward exposes (each op
    there costs max(host, device): cost.host); CUDA graphs only the per-kernel launch overhead and
    host time (compute, host and the optimizer's kernels) — memory stays."""
    base_ = _moe_step()
    hy, fa, cg = _moe_step("moe_dispatch=hybridep"), _moe_step("fp8_attention=true"), _moe_step("cuda_graphs=true")
    b = base_["time"]["breakdown_s"]
    assert hy["time"]["breakdown_s"]["compute"] < b["compute"] and hy["time"]["breakdown_s"]["ep_comm"] != b["ep_comm"]
    for doc, moved in ((fa, {"compute", "host"}), (cg, {"compute", "host", "optimizer", "overhead"})):
        d = doc["time"]["breakdown_s"]
        assert d["compute"] < b["compute"]
        for k in set(b) - moved:
            assert d[k] == pytest.approx(b[k], abs=1e-9), k
    for doc in (hy, fa, cg):
        assert doc["memory"]["peak_bytes"] == base_["memory"]["peak_bytes"]
    assert cg["training"]["runtime"] == "megatron-core" and cg["training"]["runtime_set"] == ["cuda_graphs=true"]


def test_runtime_set_on_the_cli_and_through_a_plan_file(tmp_path):
    args = ["estimate", "-m", "qwen3-30b-a3b", "-n", "8", "--hardware", "gb200-nvl72", "--precision", "fp8",
            "--plan", "ep=8,zero=1,mbs=4", "--global-batch", "512", "--seq-len", "4096", "--json"]
    plain = json.loads(runner.invoke(app, args).stdout)
    r = runner.invoke(app, args + ["--runtime-set", "moe_dispatch=hybridep", "--runtime-set", "cuda_graphs=true"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    assert got["training"]["runtime_set"] == ["moe_dispatch=hybridep", "cuda_graphs=true"]
    assert got["time"]["step_s"] < plain["time"]["step_s"]
    bad = runner.invoke(app, args + ["--runtime-set", "moe_dispatch=nccl"])
    assert bad.exit_code == 1 and "moe_dispatch=nccl" in bad.output and "Traceback" not in bad.output
    # the plan file keeps the settings and re-applies them on read
    m, hw = get_preset("qwen3-30b-a3b"), load_hardware("gb200-nvl72")
    rt = apply_settings(load_runtime("megatron-core"), ["moe_dispatch=hybridep", "cuda_graphs=true"])
    t = training_spec(rt, seq_len=4096, global_batch=512, precision="fp8", fp8_recipe="mxfp8")
    doc = plan_document(m, hw, t, parse_plan("ep=8,zero=1,mbs=4"), 8)
    assert doc["training"]["runtime"] == "megatron-core"
    assert doc["training"]["runtime_set"] == ["moe_dispatch=hybridep", "cuda_graphs=true"]
    path = write_plan_file(tmp_path / "plan.json", doc)
    _, _, t2, _, _, _ = read_plan_file(path)
    assert t2.rt.kernels.moe_dispatch == "hybridep" and t2.rt.kernels.cuda_graphs and t2.rt.comm.ep_comm_sms == 32
    r = runner.invoke(app, ["estimate", "--plan-file", str(path), "--json"])
    want = estimate(m, hw, t, parse_plan("ep=8,zero=1,mbs=4"), 8)["time"]["step_s"]
    assert r.exit_code == 0 and json.loads(r.stdout)["time"]["step_s"] == pytest.approx(want, rel=1e-9)
    d = json.loads(Path(path).read_text())
    d["training"]["runtime_set"] = ["cuda_graphs=maybe"]
    (tmp_path / "bad.json").write_text(json.dumps(d))
    r = runner.invoke(app, ["estimate", "--plan-file", str(tmp_path / "bad.json")])
    assert r.exit_code == 1 and "training.runtime" in r.output and "cuda_graphs=maybe" in r.output


def test_search_applies_the_settings_to_each_launchers_runtime():
    r = runner.invoke(app, ["search", "-m", "qwen3-30b-a3b", "-n", "8", "--hardware", "gb200-nvl72", "--precision",
                            "fp8", "--launcher", "megatron", "--launcher", "torchtitan", "--runtime-set",
                            "cuda_graphs=true", "--top-k", "1", "--json"])
    assert r.exit_code == 0, r.output
    s = {x["launcher"]: x for x in json.loads(r.stdout)["searches"]}
    assert s["megatron"]["runtime"] == "megatron-core" and s["torchtitan"]["runtime"] == "torchtitan"
    assert s["megatron"]["runtime_set"] == s["torchtitan"]["runtime_set"] == ["cuda_graphs=true"]


def _job(model, plan, world, *sets, runtime="megatron-core", precision="bf16", recipe=""):
    rt = apply_settings(load_runtime(runtime), sets)
    t = training_spec(rt, seq_len=4096, global_batch=256, precision=precision, fp8_recipe=recipe)
    return base.job_of(get_preset(model), t, plan, world)


def test_megatron_refuses_what_its_flags_cannot_run():
    """EP all-to-all overlap: Megatron-Core's asserts are the megatron-core runtime's capability rule
    (RT-ep-overlap), which the Megatron exporter applies; runtimes without it refuse it outright."""
    ov = _job("mixtral-8x7b", "ep=8,zero=1,mbs=1,ep_overlap=1,recompute=full", 64)
    assert "RT-ep-overlap" in megatron.LAUNCHER.violated(ov)
    nov = _job("mixtral-8x7b", "pp=2,ep=8,zero=1,mbs=1,ep_overlap=1", 64)
    assert "RT-ep-overlap" in megatron.LAUNCHER.violated(nov)          # pp > 1 without VPP
    ok = _job("mixtral-8x7b", "pp=2,vpp=2,ep=8,zero=1,mbs=1,ep_overlap=1", 64)
    assert "RT-ep-overlap" not in megatron.LAUNCHER.violated(ok)
    assert "RT-ep-overlap" not in megatron.LAUNCHER.violated(
        _job("mixtral-8x7b", "ep=8,zero=1,mbs=1,ep_overlap=1,recompute=block,recompute_layers=0", 64))
    old = _job("mixtral-8x7b", "pp=2,vpp=2,ep=8,zero=1,mbs=1,ep_overlap=1", 64, runtime="megatron-core-0.11")
    from autoplace.placement.rules import Ctx
    from autoplace.runtimes.check import capability_rules
    rule = next(r for r in capability_rules(old.train.rt) if r.id == "RT-ep-overlap")
    assert bool(rule.violated(Ctx(old.model, old.train, old.world), old.plan))
    cg = _job("llama3-8b", "tp=2,sp=1,zero=1,recompute=full,mbs=1", 64, "cuda_graphs=true")
    assert "L-megatron-cuda-graphs-recompute" in megatron.LAUNCHER.violated(cg)
    assert "L-megatron-cuda-graphs-recompute" not in megatron.LAUNCHER.violated(
        _job("llama3-8b", "tp=2,sp=1,zero=1,recompute=full,mbs=1", 64))


def test_megatron_writes_the_recipe_and_parameter_copy_it_priced():
    """FP8 on megatron-core: the recipe as --fp8-recipe and, with the distributed optimizer, the
    1-byte parameter copy the memory model holds (--fp8-param-gather); DDP keeps the 16-bit copy in
    memory and writes no such flag; FP4 trains under --bf16 with --fp4-format/--fp4-recipe."""
    t8 = _job("llama3-8b", "tp=2,sp=1,zero=1,mbs=1", 64, precision="fp8", recipe="current")
    text = megatron.emit(t8)["megatron_args.txt"]
    assert "--fp8-recipe tensorwise" in text and "--fp8-param-gather" in text and "--bf16" in text
    ddp = _job("llama3-8b", "tp=2,sp=1,zero=0,mbs=1", 64, precision="fp8", recipe="delayed")
    text = megatron.emit(ddp)["megatron_args.txt"]
    assert "--fp8-recipe delayed" in text and "--fp8-param-gather" not in text
    e1 = estimate(t8.model, t8.hw, t8.train, parse_plan("tp=2,sp=1,zero=1,mbs=1"), 64)
    e0 = estimate(ddp.model, ddp.hw, ddp.train, parse_plan("tp=2,sp=1,zero=0,mbs=1"), 64)
    p1, p0 = e1["memory"]["per_stage"][0]["params"], e0["memory"]["per_stage"][0]["params"]
    n = t8.model.total_params() / 2                          # parameters on a tp = 2 rank (≈)
    assert p1 / n == pytest.approx(2.0, abs=0.1)             # FP8 row + column copies, 1 B each
    assert p0 / n == pytest.approx(4.0, abs=0.1)             # bf16 + the TE weight cache (2 copies)
    b2 = load_hardware("b200")
    t4 = training_spec(load_runtime("megatron-core"), seq_len=4096, global_batch=256, precision="fp4",
                       fp8_recipe="nvfp4")
    text = megatron.emit(base.job_of(get_preset("llama3-8b"), t4, "tp=2,sp=1,zero=1,mbs=1", 64, hw=b2))["megatron_args.txt"]
    assert "--bf16" in text and "--fp4-format e2m1" in text and "--fp4-recipe nvfp4" in text
    assert "--fp4-param-gather" in text and "--fp8-format" not in text


def test_torchtitan_runs_deepep_and_refuses_what_it_has_not():
    dj = _job("qwen3-30b-a3b", "zero=3,ep=8,mbs=1,rank_order=pp-dp-cp-tp", 8, "moe_dispatch=deepep", runtime="torchtitan")
    assert not torchtitan.LAUNCHER.violated(dj)
    assert torchtitan.job_config(dj)["parallelism"]["expert_parallel_comm_backend"] == "deepep"
    assert "expert_parallel_comm_backend" not in torchtitan.job_config(
        _job("qwen3-30b-a3b", "zero=3,ep=8,mbs=1,rank_order=pp-dp-cp-tp", 8, runtime="torchtitan"))["parallelism"]
    hy = _job("qwen3-30b-a3b", "zero=3,ep=8,mbs=1,rank_order=pp-dp-cp-tp", 8, "moe_dispatch=hybridep", runtime="torchtitan")
    assert "L-torchtitan-ep-dispatch" in torchtitan.LAUNCHER.violated(hy)
    ov = _job("qwen3-30b-a3b", "zero=3,ep=8,mbs=1,ep_overlap=1,rank_order=pp-dp-cp-tp", 8, runtime="torchtitan")
    assert "L-torchtitan-ep-overlap" in torchtitan.LAUNCHER.violated(ov)


def test_the_record_mapping_reads_the_same_switches():
    from autoplace.validate import load_records
    from autoplace.validate.mapping import map_shaped
    recs = Path(__file__).resolve().parents[2] / "shared" / "validation" / "modern_runs.json"
    if not recs.exists():
        pytest.skip("modern validation file not available")
    r = next(x for x in load_records(recs) if x["id"] == "mbridge2606-gb300-qwen330ba3b-mxfp8-8gpu-gbs512")
    rt = map_shaped(r).train.rt
    assert settings_text(rt) == ["cuda_graphs=full_iteration", "moe_dispatch=hybridep", "fp8_attention=true",
                                 "moe_fused_mlp=true"]
    assert rt == apply_settings(load_runtime("megatron-core"), settings_text(rt))


def test_search_offers_ep_overlap_where_the_runtime_runs_it():
    """The default space lists ep_overlap; the search keeps it off for ep = 1 (no duplicate dense
    plans) and for runtimes without it (torchtitan), and picks it for MoE under megatron-core,
    where the EP all-to-all hides under compute."""
    from autoplace.search.space import load_space, space_for_runtime
    sp = load_space("default")
    assert dict(sp.extras)["ep_overlap"] == (False, True)
    assert dict(space_for_runtime("torchtitan").extras)["ep_overlap"] == (False,)
    assert dict(space_for_runtime("megatron-core").extras)["ep_overlap"] == (False, True)
    r = runner.invoke(app, ["search", "-m", "qwen3-30b-a3b", "-n", "16", "--precision", "fp8", "--launcher",
                            "megatron", "--top-k", "1", "--json"])
    best = json.loads(r.stdout)["plans"][0]
    assert best["plan"]["ep_overlap"] is True
    # only the first forward and the last backward of the m micro-batches run without a partner
    # (combined 1F1B, pp = 1): with the all-to-all dispatcher (no SMs held) their all-to-all is
    # all that stays exposed, 1/m of the non-overlapped time
    job = _job("qwen3-30b-a3b", "ep=8,zero=1,mbs=1", 16, precision="fp8", recipe="current")
    on = estimate(job.model, job.hw, job.train, job.plan.with_(ep_overlap=True), 16)["time"]
    off = estimate(job.model, job.hw, job.train, job.plan, 16)["time"]
    assert on["micro_batches"] == 256 / 16
    assert on["breakdown_s"]["ep_comm"] == pytest.approx(off["breakdown_s"]["ep_comm"] / on["micro_batches"], rel=1e-9)
    r = runner.invoke(app, ["search", "-m", "qwen3-30b-a3b", "-n", "16", "--precision", "fp8", "--launcher",
                            "torchtitan", "--top-k", "3", "--json"])
    assert all(p["plan"]["ep_overlap"] is False for p in json.loads(r.stdout)["plans"])
    dense = runner.invoke(app, ["search", "-m", "llama3-8b", "-n", "8", "--top-k", "20", "--json"])
    plans = json.loads(dense.stdout)["plans"]
    assert all(p["plan"]["ep_overlap"] is False for p in plans)
    keys = [json.dumps(p["plan"], sort_keys=True) for p in plans]
    assert len(keys) == len(set(keys))


def test_fp8_recipe_on_the_cli():
    """--fp8-recipe picks the recipe the cost model and the exporters use; estimate --json reports
    it; a recipe of the wrong GEMM dtype or an unknown one is a one-line error (exit 1)."""
    args = ["estimate", "-m", "qwen3-30b-a3b", "-n", "8", "--hardware", "gb200-nvl72", "--runtime", "megatron-core",
            "--plan", "ep=8,zero=1,mbs=4", "--global-batch", "512", "--seq-len", "4096", "--json"]
    cs = json.loads(runner.invoke(app, args + ["--precision", "fp8"]).stdout)
    mx = json.loads(runner.invoke(app, args + ["--precision", "fp8", "--fp8-recipe", "mxfp8"]).stdout)
    assert cs["training"]["fp8_recipe"] == "current" and mx["training"]["fp8_recipe"] == "mxfp8"
    assert mx["time"]["step_s"] != cs["time"]["step_s"]
    assert json.loads(runner.invoke(app, args).stdout)["training"]["fp8_recipe"] == ""
    for extra, needle in ((["--precision", "fp8", "--fp8-recipe", "nvfp4"], "give --precision fp4"),
                          (["--precision", "bf16", "--fp8-recipe", "mxfp8"], "needs --precision fp8"),
                          (["--precision", "fp8", "--fp8-recipe", "bogus"], "is not a recipe")):
        r = runner.invoke(app, args + extra)
        assert r.exit_code == 1 and needle in r.output and "Traceback" not in r.output
    # a launcher whose runtime lacks the recipe says so (torchtitan's torchao has no delayed scaling)
    tt = runner.invoke(app, ["search", "-m", "llama3-8b", "-n", "8", "--hardware", "b200", "--precision", "fp8",
                             "--fp8-recipe", "delayed", "--launcher", "torchtitan", "--top-k", "1"])
    assert tt.exit_code != 0 and "fp8 recipe 'delayed': torchtitan implements" in tt.output
    s = runner.invoke(app, ["search", "-m", "llama3-8b", "-n", "8", "--hardware", "b200", "--precision", "fp8",
                            "--fp8-recipe", "mxfp8", "--launcher", "megatron", "--top-k", "1", "--json"])
    assert s.exit_code == 0, s.output
    assert json.loads(s.stdout)["plans"][0]["training"]["fp8_recipe"] == "mxfp8"


def test_the_fused_moe_mlp_is_a_capability_and_a_flag():
    """moe_fused_mlp writes Megatron-Core's TE op fuser flag for the MoE layers it priced; a stack
    without TE's fused grouped MLP (Megatron-Core 0.11) refuses the switch in one line."""
    text = megatron.emit(_job("qwen3-30b-a3b", "ep=8,zero=1,mbs=1", 64, "moe_fused_mlp=true"))["megatron_args.txt"]
    assert "--use-transformer-engine-op-fuser" in text
    plain = megatron.emit(_job("qwen3-30b-a3b", "ep=8,zero=1,mbs=1", 64))["megatron_args.txt"]
    assert "--use-transformer-engine-op-fuser" not in plain
    with pytest.raises(InputError) as e:
        apply_settings(load_runtime("megatron-core-0.11"), ["moe_fused_mlp=true"])
    assert "fused grouped MLP" in str(e.value) and "\n" not in str(e.value)


def test_ep_overlap_leaves_the_unpaired_chunks_exposed():
    """Megatron-Core's combined 1F1B pairs a forward chunk with another micro-batch's backward chunk;
    the warm-up forwards and cool-down backwards run alone: 1 of m without pipelining, and on
    pipeline rank r of the interleaved schedule w = 2(p − r − 1) + (v − 1)·G + 1 of m·v chunks."""
    from autoplace.cost.step import ep_unpaired_share
    assert ep_unpaired_share(parse_plan("ep=8,mbs=1,dp=8"), 40, 0) == pytest.approx(1 / 5)
    p = parse_plan("pp=4,vpp=2,ep=8,mbs=1,dp=2")                  # G = pp = 4; m = 16 / 2 = 8
    assert ep_unpaired_share(p, 16, 0) == pytest.approx((2 * 3 + 1 * 4 + 1) / 16)
    assert ep_unpaired_share(p, 16, 3) == pytest.approx((0 + 4 + 1) / 16)
    assert ep_unpaired_share(p.with_(vpp_group=2), 16, 3) == pytest.approx((0 + 2 + 1) / 16)
    assert ep_unpaired_share(p, 4, 0) == 1.0                       # every chunk in warm-up


def test_per_layer_graphs_leave_the_routed_experts_eager():
    """cuda_graphs=true (TE per-layer graphs) captures attention, router and preprocess, not a
    dropless MoE's routed experts: their eager kernels (TE's per-expert GEMM launches here) keep the
    full per-kernel overhead; cuda_graphs=full_iteration captures them too. The Megatron export
    writes --cuda-graph-impl full_iteration for a dense model and refuses it for MoE."""
    from autoplace.cost import compute as K
    from autoplace.cost import network as N
    from autoplace.placement.rules import Ctx
    from autoplace.specs.hardware import load_hardware
    hw = load_hardware("gb200-nvl72")
    moe = get_preset("qwen3-30b-a3b")
    out = {}
    for val in ("true", "full_iteration"):
        rt = apply_settings(load_runtime("megatron-core"), [f"cuda_graphs={val}"])
        t = training_spec(rt, seq_len=4096, global_batch=64, precision="bf16")
        ctx = Ctx(moe, t, 8)
        out[val] = K.layer_compute_times(ctx, N.hardware_view(ctx, hw), parse_plan("ep=8,mbs=1"))
    n_local = moe.num_experts / 8
    ko = hw.kernel_overhead_s
    extra = ko - ko * N.CUDA_GRAPH_KERNEL_SHARE
    assert float(out["true"]["elem_f"] - out["full_iteration"]["elem_f"]) == pytest.approx(2 * (n_local - 1) * extra, rel=1e-9)
    assert float(out["true"]["elem_b"] - out["full_iteration"]["elem_b"]) == pytest.approx(4 * (n_local - 1) * extra, rel=1e-9)
    dense = _job("llama3-8b", "tp=2,sp=1,zero=1,mbs=1", 64, "cuda_graphs=full_iteration")
    assert not megatron.LAUNCHER.violated(dense)
    text = megatron.emit(dense)["megatron_args.txt"]
    # megatron-core 0.16.1's spelling (0.19 migrates it), with the NaN check off as both assert
    assert "--cuda-graph-impl local" in text and "--cuda-graph-scope full_iteration" in text
    assert "--no-check-for-nan-in-loss-and-grad" in text
    full_rc = _job("llama3-8b", "tp=2,sp=1,zero=1,recompute=full,mbs=1", 64, "cuda_graphs=full_iteration")
    assert "L-megatron-cuda-graphs-recompute" not in megatron.LAUNCHER.violated(full_rc)
    moe_job = _job("qwen3-30b-a3b", "ep=8,zero=1,mbs=1", 8, "cuda_graphs=full_iteration")
    assert "L-megatron-cuda-graphs-full-moe" in megatron.LAUNCHER.violated(moe_job)
