"""`autoplace validate`: record → specs mapping, FLOP conventions, per-metric error arithmetic,
fail-soft skipping, summary statistics and the CLI. Records here are hand-made and tiny; the
expectations never depend on the cost model's current parameters (predictions are recomputed from
the same specs through `estimate`, or checked against closed forms)."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autoplace.cli import app
from autoplace.estimate import estimate
from autoplace.validate import flops as F
from autoplace.validate import load_records, run, validate_records
from autoplace.validate.compare import Result, evaluate_record, layer_times, max_model_params
from autoplace.validate.mapping import map_shaped, map_states_only, parse_precision, parse_recompute
from autoplace.validate.summary import group_summary

PUBLIC = Path(__file__).resolve().parents[2] / "shared" / "validation" / "public_runs.json"
if not PUBLIC.exists():
    PUBLIC = Path("/work/shared/validation/public_runs.json")

GPT_DEF = "Eq.(3) 96*B*s*l*h^2*(1+s/(6h)+V/(16lh)) per iteration; counts the recompute forward pass"
KORTH_DEF = ("model FLOPs 72*B*L*s*h^2*(1+s/(6h)+v/(12hL)) / (time * #GPUs * 312e12); HFU adds the "
             "selective-recompute attention FLOPs (72BLsh^2(1+s/(3h)+v/(12hL)))")
FOUNDRY_DEF = "(3*2*N*seq + 3*4*L*d*seq^2) per sequence * seq/s / (GPUs*peak); HFU uses factor 4 when AC is on"


def gpt_record(**over) -> dict:
    """A tiny Megatron-style GPT throughput record: 4 GPUs, tp=2, dp=2."""
    rec = {
        "id": "testsrc-t1-tiny-4gpu",
        "record_type": "measured_throughput",
        "source": {"citation": "Test et al. 2021, 'A Megatron-LM run'", "table_or_figure": "Table 1"},
        "model": {"name": "GPT-tiny", "layers": 4, "hidden": 1024, "heads": 16, "kv_heads": 16,
                  "ffn_hidden": 4096, "vocab": 51200, "seq_len": 1024, "params_billion": 0.1,
                  "arch_notes": "GPT-style decoder, learned pos-emb, GeLU MLP 4h, LayerNorm"},
        "hardware": {"gpu": "A100-SXM4-80GB", "gpus_total": 4, "gpus_per_node": 8,
                     "peak_tflops_per_gpu_assumed_by_source": 312},
        "plan": {"dp": 2, "tp": 2, "pp": 1, "cp": 1, "ep": 1, "vpp": 1, "sequence_parallel": False,
                 "zero_stage": 0, "fsdp": False, "recompute": "full", "micro_batch": 4,
                 "global_batch": 16, "grad_accum": 2, "precision": "fp16 mixed precision",
                 "pp_schedule": "none"},
        "measured": {"tflops_per_gpu": 100.0, "tflops_definition": GPT_DEF,
                     "iteration_time_s_derived": 1.0, "pct_of_peak": 0.3},
        "inferred_fields": ["measured.iteration_time_s_derived (= Eq.3 FLOPs / (GPUs * TFLOP/s))"],
        "notes": "",
    }
    for path, val in over.items():
        d = rec
        keys = path.split(".")
        for k in keys[:-1]:
            d = d[k]
        d[keys[-1]] = val
    return rec


def mpt_record(**over) -> dict:
    rec = gpt_record(**{"id": "foundrysrc-a100-mpt-tiny"})
    rec["source"] = {"citation": "MosaicML llm-foundry 'MPT Training Benchmarks'",
                     "locator": "commit abc (2024-04-22)", "table_or_figure": "A100 80GB"}
    rec["model"].update(name="MPT-tiny", vocab=50368, params_billion=0.0654,
                        arch_notes="MPT (no biases, FlashAttention); NumParams as reported")
    rec["plan"].update(dp=4, tp=1, zero_stage=3, fsdp=True, recompute="full (activation checkpointing)",
                       micro_batch=2, global_batch=16, precision="amp_bf16 (FSDP mixed_precision=DEFAULT)")
    rec["measured"] = {"mfu": 0.4, "hfu": 0.53, "tflops_per_gpu": 125.0, "tokens_per_sec_per_gpu": 50000.0,
                       "samples_per_sec": 0.0, "mfu_definition": FOUNDRY_DEF}
    rec["notes"] = "FSDP activation CPU offload=False."
    for path, val in over.items():
        d = rec
        keys = path.split(".")
        for k in keys[:-1]:
            d = d[k]
        d[keys[-1]] = val
    return rec


def skipped(rec) -> str | None:
    return evaluate_record(rec).skipped


# ---- fail soft --------------------------------------------------------------------------------
def test_unknown_gpu_is_skipped_with_reason():
    r = skipped(gpt_record(**{"hardware.gpu": "Zork-9000X"}))
    assert r and "unknown GPU 'Zork-9000X'" in r


def test_unsupported_precision_is_skipped():
    r = skipped(gpt_record(**{"plan.precision": "int8 quantized training"}))
    assert r and "unsupported precision" in r


def test_a_recipe_the_runtime_lacks_is_skipped_naming_both():
    # a 2021 Megatron-LM GPT record cannot have run NVFP4: the runtime of its era has no such recipe
    r = skipped(gpt_record(**{"plan.precision": "fp4 (NVFP4)"}))
    assert r and "megatron-lm-2021" in r and "nvfp4" in r


def test_fp8_on_a100_is_skipped_by_the_profile():
    r = skipped(gpt_record(**{"plan.precision": "fp8 (TransformerEngine)"}))
    assert r and "fp8" in r


def test_missing_shape_is_skipped():
    rec = gpt_record(**{"model.hidden": None, "model.layers": None})
    r = skipped(rec)
    assert r and "model shape not stated" in r and "model.hidden" in r and "model.layers" in r


def test_missing_plan_degrees_and_micro_batch_are_skipped():
    rec = gpt_record(**{"plan.tp": None, "plan.pp": None, "plan.dp": None})
    assert "plan degrees not stated" in skipped(rec)
    # a micro-batch the record leaves open is the runtime's default, stated as an assumption
    mp = map_shaped(gpt_record(**{"plan.micro_batch": None}))
    assert mp.plan.mbs == 1 and any("plan.micro_batch null → 1 (megatron-lm-2021" in a for a in mp.assumptions)


def test_illegal_plan_is_skipped_with_rule_ids():
    r = skipped(gpt_record(**{"model.heads": 15, "model.kv_heads": 15, "model.hidden": 1020}))  # 15 % tp=2
    assert r.startswith("illegal plan:") and "D1" in r
    r = skipped(gpt_record(**{"plan.global_batch": 10}))                     # 10 % (4·2)
    assert "D4" in r


def test_garbage_never_crashes():
    bad = [None, 3, "x", {}, {"id": "a"}, {"id": "b", "record_type": "measured_throughput"},
           {"id": "c", "record_type": "who_knows", "measured": {"x": 1}},
           gpt_record(**{"model.layers": "many"}), gpt_record(**{"plan": None}),
           gpt_record(**{"hardware": None}), gpt_record(**{"measured": {"tflops_per_gpu": "fast"}})]
    results, summary = run(bad)
    assert all(r.skipped for r in results)
    assert summary["overall"]["coverage"] == 0.0
    doc = validate_records(bad)
    assert all("skipped" in e and e["skipped"] for e in doc["records"])


def test_unsupported_recompute_mode_is_skipped():
    r = skipped(gpt_record(**{"plan.recompute": "selective + microbatch-level skipping"}))
    assert "not modelled" in r


# ---- mapping ----------------------------------------------------------------------------------
def test_gpt_megatron_mapping():
    mp = map_shaped(gpt_record())
    m, t, p = mp.model, mp.train, mp.plan
    assert (m.position, m.norm, m.gated_mlp, m.tied_embeddings, m.attn_bias, m.mlp_bias) == \
        ("learned", "layernorm", False, True, True, True)
    assert mp.framework == "megatron"
    assert (t.precision, t.regime, t.attention, t.dropout) == ("fp16", "megatron-fp16", "eager", True)
    assert (p.tp, p.dp, p.pp, p.recompute, p.mbs, p.zero) == (2, 2, 1, "full", 4, 0)
    assert mp.world == 4 and mp.peak_stated == 312e12


def test_mpt_fsdp_mapping():
    mp = map_shaped(mpt_record())
    m, t, p = mp.model, mp.train, mp.plan
    assert (m.attn_bias, m.mlp_bias, m.norm, m.gated_mlp, m.tied_embeddings) == \
        (False, False, "layernorm", False, True)
    assert mp.framework == "fsdp"
    assert (t.precision, t.regime, t.attention, t.dropout, t.grad_reduce_bytes, t.vocab_divisible_by) == \
        ("bf16", "zero", "flash", False, 4, 1)
    assert (p.zero, p.reshard_after_forward, p.dp, p.recompute) == (3, True, 4, "full")
    pure = map_shaped(mpt_record(**{"plan.precision": "bf16 (FSDP mixed_precision=PURE)"}))
    assert pure.train.grad_reduce_bytes == 2
    sgo = map_shaped(mpt_record(**{"id": "foundrysrc-mpt-shard_grad_op", "plan.zero_stage": 2}))
    assert (sgo.plan.zero, sgo.plan.reshard_after_forward) == (3, False)


def test_schedule_and_overlap_mapping():
    rec = gpt_record(**{"hardware.gpus_total": 8, "plan.pp": 2, "plan.vpp": 2, "model.layers": 8,
                        "plan.pp_schedule": "interleaved 1F1B"})
    p = map_shaped(rec).plan
    assert (p.schedule, p.vpp, p.pp) == ("interleaved", 2, 2)
    rec["plan"]["vpp"] = None
    mp = map_shaped(rec)          # interleaved stated, vpp not: the least interleaving
    assert (mp.plan.schedule, mp.plan.vpp) == ("interleaved", 2) and any("vpp not stated" in a for a in mp.assumptions)
    assert map_shaped(gpt_record(notes="no overlap of gradient all-reduce with backprop")).plan.dp_overlap is False
    assert map_shaped(gpt_record()).plan.dp_overlap is True
    local = "DDP impl: torch for <=18B, Megatron 'local' for larger."
    assert map_shaped(gpt_record(notes=local, **{"model.params_billion": 39.1})).plan.dp_overlap is False
    assert map_shaped(gpt_record(notes=local, **{"model.params_billion": 7.5})).plan.dp_overlap is True
    assert map_shaped(gpt_record(notes=local, **{"model.params_billion": 18.4})).plan.dp_overlap is True


def test_missing_degree_from_gpu_count_and_tokens_batch():
    mp = map_shaped(gpt_record(**{"plan.dp": None, "plan.global_batch": "16384 tokens"}))
    assert mp.plan.dp == 2 and mp.train.global_batch == 16
    assert any("plan.dp null" in a for a in mp.assumptions)


def test_precision_and_recompute_parsers():
    assert parse_precision("mixed precision (16-bit)")[0] == "fp16"
    assert parse_precision("amp_bf16 (FSDP mixed_precision=DEFAULT)")[0] == "bf16"
    assert parse_precision("fp8 hybrid")[0] == "fp8"
    assert parse_recompute("full (every layer; --checkpoint-activations)") == "full"
    assert parse_recompute("selective (attention core: QK^T, softmax, dropout, attn*V)") == "selective"
    assert parse_recompute("none") == "none" and parse_recompute(None) is None
    assert parse_precision("torch.bfloat16")[0] == "bf16" and parse_precision("float16 AMP")[0] == "fp16"
    from autoplace.validate.mapping import parse_zero
    assert [parse_zero(x) for x in ("none", "DDP", "FULL_SHARD", "SHARD_GRAD_OP", "ZeRO-1 (distributed optimizer)",
                                    2, "stage 3?")] == [0, 0, 3, 2, 1, 2, None]


def test_fsdp_strategy_words_schedules_and_micro_batch_checks():
    # HYBRID_SHARD: shard inside a node (8 GPUs, tp=1), replicate across nodes
    rec = gpt_record(**{"hardware.gpus_total": 32, "plan.dp": 32, "plan.tp": 1, "plan.zero_stage": "HYBRID_SHARD",
                        "plan.global_batch": 256})
    mp = map_shaped(rec)
    assert (mp.plan.zero, mp.plan.dp, mp.plan.dp_replicate, mp.plan.dp_shard) == (3, 32, 4, 8)
    sgo = map_shaped(gpt_record(**{"plan.zero_stage": "FSDP SHARD_GRAD_OP"}))
    assert (sgo.plan.zero, sgo.plan.reshard_after_forward) == (3, False)
    zb = map_shaped(gpt_record(**{"plan.pp": 2, "plan.tp": 1, "plan.pp_schedule": "ZB-V zero bubble"}))
    assert zb.plan.schedule == "1f1b" and any("not modelled" in a for a in zb.assumptions)
    for bad in (0, 1.5, "two"):
        res = evaluate_record(gpt_record(**{"plan.micro_batch": bad}))
        assert res.skipped == f"plan.micro_batch '{bad}' is not a positive integer"


def test_silent_recompute_takes_the_least_that_fits():
    rec = gpt_record(**{"plan.recompute": None})
    res = evaluate_record(rec)
    assert res.skipped is None
    assert any("recompute not stated" in a for a in res.mapping["assumptions"])


def _flash_record(mbs):
    rec = gpt_record(**{"plan.recompute": None, "model.layers": 8, "model.hidden": 4096, "model.heads": 32,
                        "model.kv_heads": 32, "model.ffn_hidden": 16384, "model.seq_len": 4096,
                        "plan.micro_batch": mbs, "plan.global_batch": 4 * mbs, "plan.grad_accum": 2,
                        "plan.precision": "bf16"})
    rec["source"]["citation"] = "Test et al. 2024, 'A Megatron-Core run'"     # flash attention era
    return rec


def test_silent_recompute_bisects_to_the_fewest_recomputed_layers():
    from autoplace.validate.compare import _map_with_recompute
    mp, est = _map_with_recompute(_flash_record(24))
    assert mp.plan.recompute == "block" and est["memory"]["fits"]
    k = mp.plan.recompute_layers
    assert 1 <= k < 8
    fewer = mp.plan.with_(recompute="block", recompute_layers=k - 1) if k > 1 else mp.plan.with_(recompute="none")
    assert not estimate(mp.model, mp.hw, mp.train, fewer, mp.world)["memory"]["fits"]
    assert any(f"whole-layer recompute of {k} layer(s)" in a for a in mp.assumptions)
    # HFU under block recompute counts the recomputed share of layers (6N convention ×4/3 on that share)
    rec = _flash_record(24)
    rec["measured"] = {"hfu": 0.5, "hfu_definition": FOUNDRY_DEF}
    by = {e["metric"]: e for e in evaluate_record(rec).entries}
    from autoplace.validate.compare import _shape
    sh = _shape(mp, rec)
    frac = k / 8
    B = mp.train.global_batch
    flops = frac * F.six_n_hfu(sh, B, "full") + (1 - frac) * F.six_n_hfu(sh, B, "none")
    assert by["hfu"]["predicted"] == pytest.approx(flops / est["time"]["step_s"] / 4 / 312e12, rel=1e-4)


def test_interleaved_without_vpp_is_the_least_interleaving_and_ambiguity_is_1f1b():
    from autoplace.validate.mapping import map_shaped
    base = {"plan.pp": 2, "plan.tp": 1, "plan.dp": 2, "plan.vpp": None, "plan.global_batch": 32}
    mp = map_shaped(gpt_record(**base, **{"plan.pp_schedule": "interleaved 1F1B"}))
    assert (mp.plan.schedule, mp.plan.vpp) == ("interleaved", 2)
    assert any("vpp=2 (the least interleaving)" in a for a in mp.assumptions)
    mp = map_shaped(gpt_record(**base, **{"plan.pp_schedule": "1F1B or interleaved (not stated)"}))
    assert (mp.plan.schedule, mp.plan.vpp) == ("1f1b", 1)
    # 4 layers on 2 stages cannot hold vpp=4 chunks of whole layers → 1F1B
    mp = map_shaped(gpt_record(**{**base, "plan.pp_schedule": "interleaved", "plan.vpp": 4}))
    assert (mp.plan.schedule, mp.plan.vpp) == ("1f1b", 1)


# ---- FLOP conventions (validation README §4) --------------------------------------------------
def test_korthikanti_22b_worked_check():
    """README §3.2: 'the 22B row recomputes to 41.6% MFU against the reported 41.5%'."""
    sh = F.Shape(layers=48, hidden=6144, heads=64, kv_heads=64, ffn_hidden=24576, vocab=51200, seq_len=2048)
    mfu = F.korthikanti_model(sh, 4) / (1.10 * 8 * 312e12)
    assert abs(mfu * 100 - 41.6) < 0.06                 # 41.65% exactly (README: "41.6%", truncated)
    assert abs(mfu * 100 - 41.5) < 0.2                  # against the reported 41.5%
    hfu = F.korthikanti_hfu(sh, 4, "selective") / (1.10 * 8 * 312e12)
    assert abs(hfu - 0.437) < 0.002                                     # Table 5 HFU 43.7%
    assert F.detect(KORTH_DEF, "mfu").name == "korthikanti_model"
    assert F.detect(KORTH_DEF, "hfu").name == "korthikanti_hfu"


def test_megatron_core_reduces_to_korthikanti_for_gpt():
    sh = F.Shape(layers=96, hidden=12288, heads=96, kv_heads=96, ffn_hidden=49152, vocab=51200, seq_len=2048)
    assert math.isclose(F.megatron_core(sh, 64), F.korthikanti_model(sh, 64), rel_tol=1e-12)


def test_narayanan_eq3_against_table1_derived_times():
    """Eq. 3 / (GPUs · TFLOP/s) reproduces every Table 1 row's derived iteration time."""
    if not PUBLIC.exists():
        pytest.skip("public validation file not available")
    rows = [r for r in load_records(PUBLIC) if r["id"].startswith("narayanan2021-t1-")]
    assert len(rows) == 10
    for r in rows:
        m, p, meas = r["model"], r["plan"], r["measured"]
        sh = F.Shape(layers=m["layers"], hidden=m["hidden"], heads=m["heads"], kv_heads=m["kv_heads"],
                     ffn_hidden=m["ffn_hidden"], vocab=m["vocab"], seq_len=m["seq_len"])
        t = F.narayanan_eq3(sh, p["global_batch"]) / (r["hardware"]["gpus_total"] * meas["tflops_per_gpu"] * 1e12)
        assert abs(t / meas["iteration_time_s_derived"] - 1) < 0.006, r["id"]
    assert F.detect(GPT_DEF, "tflops_per_gpu").name == "narayanan_eq3"
    assert F.detect("paper Eq.(3)", "tflops_per_gpu").name == "narayanan_eq3"


def test_llm_foundry_six_n_reproduces_reported_tflops():
    """MPT-70b row: 410 tokens/s/GPU under (6N·s + 12·L·d·s²) per sequence = 166 TFLOP/s, MFU 53.3%."""
    sh = F.Shape(layers=80, hidden=8192, heads=64, kv_heads=64, ffn_hidden=32768, vocab=50368,
                 seq_len=2048, params=64.8624e9)
    per_seq = F.six_n(sh, 1)
    tflops = per_seq * 410.0 / 2048 / 1e12
    assert abs(tflops - 166.0) < 0.6
    assert abs(tflops / 312 - 0.5333) < 0.002
    assert math.isclose(F.six_n_hfu(sh, 1, "full"), per_seq * 4 / 3)
    assert F.six_n_hfu(sh, 1, "none") == per_seq
    assert F.detect(FOUNDRY_DEF, "mfu").name == "six_n"
    assert F.detect(FOUNDRY_DEF, "hfu").name == "six_n_hfu"
    assert F.detect("something nobody defined", "mfu") is None


def test_megatron_bridge_convention_reproduces_each_records_flops_per_token():
    """Megatron-Bridge flop_utils (causal attention core at s/2, exact sliding-window context, no
    router GEMM, MLA and MTP terms): TFLOP/s ÷ tokens/s of every Megatron-Bridge row — dense Llama,
    DeepSeek-V3 (MLA, MTP), Qwen3 and Kimi MoE, gpt-oss (windowed layers) — within 0.3 %."""
    if not MODERN.exists():
        pytest.skip("modern validation file not available")
    from autoplace.cost.compute import model_flops_per_step
    from autoplace.placement.rules import Ctx
    conv = F.detect("Megatron-Bridge 'Model TFLOP/sec/GPU' (model FLOPs)", "tflops_per_gpu")
    assert conv.name == "megatron_bridge" and conv.from_model == {"causal": True, "router": False}
    rows = [r for r in load_records(MODERN) if r["id"].startswith("mbridge2606")]
    assert len(rows) == 21
    for r in rows:
        mp = map_shaped(r)
        per_tok = model_flops_per_step(Ctx(mp.model, mp.train, mp.world), **conv.from_model) / mp.train.tokens_per_step
        meas = r["measured"]["tflops_per_gpu"] * 1e12 / r["measured"]["tokens_per_sec_per_gpu"]
        assert abs(per_tok / meas - 1) < 0.003, (r["id"], per_tok / 1e9, meas / 1e9)
    # hand check, Llama-3.1-405B at s = 8192: 6·(L·(attention + MLP GEMMs) + h·V) + 6·L·(s/2)·2·q_width
    L, h, f, V, s, q, kv = 126, 16384, 53248, 128256, 8192, 16384, 1024
    gemm = L * (h * (q + 2 * kv) + q * h + 3 * h * f) + h * V
    hand = 6 * gemm + 6 * L * (s / 2) * 2 * q
    mp = map_shaped(next(r for r in rows if "llama31405b-fp8-256gpu" in r["id"] and "gb200" in r["id"]))
    got = model_flops_per_step(Ctx(mp.model, mp.train, mp.world), causal=True, router=False) / mp.train.tokens_per_step
    assert got == pytest.approx(hand, rel=1e-9)


def test_nemo_2502_and_automodel_conventions_reproduce_their_rows_flops_per_token():
    """NeMo 25.02 "Model TFLOP/sec/GPU" is flops_formulas' count (full s² attention, router GEMM):
    TFLOP/s ÷ tokens/s of the Llama-3 8B/70B, Nemotron 15B/340B and Mixtral-8x7B rows within 0.1 %;
    the Mixtral-8x22B row (s = 65,536) prints the causal count instead (27 % under the formula).
    AutoModel's count is causal with no router: Qwen3-30B, Kimi-K2, Llama-3-70B within 0.1 %."""
    if not MODERN.exists():
        pytest.skip("modern validation file not available")
    from autoplace.cost.compute import model_flops_per_step
    from autoplace.placement.rules import Ctx
    rows = {r["id"]: r for r in load_records(MODERN)}

    def ratio(rid, conv):
        r = rows[rid]
        mp = map_shaped(r)
        per_tok = model_flops_per_step(Ctx(mp.model, mp.train, mp.world), **conv.from_model) / mp.train.tokens_per_step
        return r["measured"]["tflops_per_gpu"] * 1e12 / r["measured"]["tokens_per_sec_per_gpu"] / per_tok

    nemo = F.detect(rows["nemo2502-dgx-b200-llama3-8b-8gpu"]["measured"]["tflops_definition"], "tflops_per_gpu")
    assert nemo.name == "nemo_2502" and nemo.from_model == {"causal": False, "router": True}
    for rid in ("llama3-8b-8gpu", "llama3-70b-64gpu", "nemotron-15b-64gpu", "nemotron-340b-128gpu",
                "mixtral-8x7b-64gpu"):
        assert abs(ratio("nemo2502-dgx-b200-" + rid, nemo) - 1) < 0.001, rid
    assert ratio("nemo2502-dgx-b200-mixtral-8x22b-256gpu", nemo) == pytest.approx(0.732, abs=0.002)
    auto = F.detect(rows["automodel-h100-bf16-kimik2-256gpu"]["measured"]["tflops_definition"], "tflops_per_gpu")
    assert auto.name == "automodel" and auto.from_model == {"causal": True, "router": False}
    for rid in ("kimik2-256gpu", "qwen3moe30b-8gpu", "llama370b-64gpu"):
        assert abs(ratio("automodel-h100-bf16-" + rid, auto) - 1) < 0.001, rid


def test_a_script_vocab_override_yields_to_the_sources_own_flop_count():
    """gpt-oss-120b rows: the notes say the perf script sets vocab_size=128256, but the printed
    TFLOP/s ÷ tokens/s (32.59 GFLOP/token) is the count with the HF vocabulary 201088 (128256 gives
    31.37): the mapping keeps 201088 and says why."""
    if not MODERN.exists():
        pytest.skip("modern validation file not available")
    r = next(x for x in load_records(MODERN) if x["id"] == "mbridge2606-gb300-gptoss120b-mxfp8-64gpu-gbs1280")
    mp = map_shaped(r)
    assert mp.model.vocab == 201088
    assert any("the source's TFLOP/s ÷ tokens/s" in a for a in mp.assumptions)
    # without the two measured rates there is no evidence: the notes' override stands
    r2 = copy.deepcopy(r)
    del r2["measured"]["tflops_per_gpu"]
    assert map_shaped(r2).model.vocab == 128256


def test_automodel_rows_read_the_stacks_behaviour():
    """AutoModel rows: local batch 8 per rank with GBS 8192 over 256 FSDP ranks → 4 pipeline schedules
    per step; MoE parameters stay gathered from forward to backward; TE attention unless the table
    says FlexAttn (gpt-oss)."""
    if not MODERN.exists():
        pytest.skip("modern validation file not available")
    recs = {r["id"]: r for r in load_records(MODERN) if r["id"].startswith("automodel")}
    ds = map_shaped(recs["automodel-h100-bf16-deepseekv3671b-1024gpu"])
    assert ds.plan.pp_flushes == 4 and ds.plan.zero == 3 and not ds.plan.reshard_after_forward
    # published by PR #562 (2025-10-06): the stage module is not an FSDPModule, so under PP every
    # micro-batch reduce-scatters (runtimes/nemo-automodel-2025.toml)
    assert ds.train.rt.name == "nemo-automodel-2025" and not ds.train.rt.comm.pp_defer_grad_sync
    assert any("PR #562" in a for a in ds.assumptions)
    assert ds.train.rt.kernels.attention == "cudnn"
    assert map_shaped(recs["automodel-h100-bf16-deepseekv3671b-256gpu"]).plan.pp_flushes == 1   # GBS 512 = 64 · 8
    dense = map_shaped(recs["automodel-h100-bf16-llama370b-64gpu"])
    assert dense.plan.reshard_after_forward and dense.plan.pp == 1
    oss = map_shaped(recs["automodel-h100-bf16-gptoss120b-64gpu"])
    assert oss.train.rt.kernels.attention == "flex"


def test_automodel_era_follows_the_printed_row():
    """NeMo AutoModel's performance summary: rows of its custom-MoE path (kernel column "DeepEP") were
    published by PR #562 (2025-10-06) and map to the Oct 2025 runtime; a row naming a 26.xx release
    and rows outside that path (Llama 3, "fsdp2_prefetch") map to today's; the text is the record's
    structured fields (lower-cased), as `record_fields_text` gives it."""
    from autoplace.runtimes.infer import runtime_for_record
    row = ("nvidia nemo automodel performance summary docs/performance-summary.md row as printed: "
           "| deepseek v3 671b | 256 | 512 | 1 | 8 | 1 | 4096 | 1 | 4 | 1 | 64 | 8 | 64 | te + deepep | 8.18 |")
    assert runtime_for_record(row, 2026)[0] == "nemo-automodel-2025"
    assert runtime_for_record(row.replace("deepseek v3 671b", "nemotron v3 super 120b (26.02)"), 2026)[0] \
        == "nemo-automodel"
    assert runtime_for_record(row.replace("te + deepep", "te + fsdp2_prefetch"), 2026)[0] == "nemo-automodel"
    assert runtime_for_record("nemo automodel deepep moe recipe", 2026)[0] == "nemo-automodel"


def test_bridge_container_picks_the_26_06_01_runtime_from_the_source_only():
    """A Megatron-Bridge row from the 26.06.01 container (named in its citation / table) maps to the
    runtime with that container's cudnn-frontend kernel; 26.06 and 26.08 rows, and a 26.06.01 that
    appears only in free text the mapping does not read, keep today's runtime."""
    from autoplace.runtimes.infer import runtime_for_record
    row = ("nvidia nemo megatron-bridge performance summary archive, 26.06.01 nemo container "
           "26.06.01 nemo container, pre-training performance, model: gpt oss 120b table")
    assert runtime_for_record(row, 2026)[0] == "megatron-core-26.06.01"
    for other in ("26.06 nemo container", "26.08 nemo container", "26.06.011 nemo container"):
        assert runtime_for_record(row.replace("26.06.01 nemo container", other), 2026)[0] == "megatron-core"
    rec = {"id": "x", "source": {"citation": "Megatron-Bridge performance summary, 26.06 NeMo container"},
           "notes": "compare the 26.06.01 container"}
    from autoplace.validate.record import record_fields_text
    assert runtime_for_record(record_fields_text(rec), 2026)[0] == "megatron-core"


# ---- per-metric error arithmetic --------------------------------------------------------------
def _predicted_step(rec):
    mp = map_shaped(rec)
    est = estimate(mp.model, mp.hw, mp.train, mp.plan, mp.world, headroom=0.0)
    assert est["legal"]
    return mp, est


def test_throughput_metrics_use_the_record_convention_and_predicted_time():
    rec = gpt_record()
    mp, est = _predicted_step(rec)
    step = est["time"]["step_s"]
    sh = F.Shape(layers=4, hidden=1024, heads=16, kv_heads=16, ffn_hidden=4096, vocab=51200, seq_len=1024)
    eq3 = F.narayanan_eq3(sh, 16)
    res = evaluate_record(rec)
    by = {e["metric"]: e for e in res.entries}
    assert set(by) == {"tflops_per_gpu", "iteration_time_s_derived", "pct_of_peak"}
    pred_tflops = eq3 / step / 4 / 1e12
    assert math.isclose(by["tflops_per_gpu"]["predicted"], pred_tflops, rel_tol=1e-5)
    assert math.isclose(by["tflops_per_gpu"]["error_pct"], (pred_tflops - 100) / 100 * 100, abs_tol=1e-3)
    assert math.isclose(by["tflops_per_gpu"]["time_error_pct"], (100 / pred_tflops - 1) * 100, abs_tol=1e-3)
    assert math.isclose(by["pct_of_peak"]["predicted"], eq3 / step / 4 / 312e12, rel_tol=1e-5)
    t = by["iteration_time_s_derived"]
    assert t["derived"] is True and math.isclose(t["predicted"], step, rel_tol=1e-5)
    assert math.isclose(t["error_pct"], (step - 1.0) * 100, abs_tol=1e-3)
    assert by["tflops_per_gpu"]["convention"] == "narayanan_eq3"
    assert all(e["source"] == "testsrc" and e["id"] == rec["id"] for e in res.entries)


def test_mfu_hfu_tokens_under_the_six_n_convention():
    rec = mpt_record()
    mp, est = _predicted_step(rec)
    step, W = est["time"]["step_s"], 4
    sh = F.Shape(layers=4, hidden=1024, heads=16, kv_heads=16, ffn_hidden=4096, vocab=50368,
                 seq_len=1024, params=0.0654e9)
    f6 = F.six_n(sh, 16)
    by = {e["metric"]: e for e in evaluate_record(rec).entries}
    assert math.isclose(by["mfu"]["predicted"], f6 / step / W / 312e12, rel_tol=1e-5)
    assert math.isclose(by["hfu"]["predicted"], f6 * 4 / 3 / step / W / 312e12, rel_tol=1e-5)
    assert math.isclose(by["tflops_per_gpu"]["predicted"], f6 / step / W / 1e12, rel_tol=1e-5)
    assert math.isclose(by["tokens_per_sec_per_gpu"]["predicted"], 16 * 1024 / step / W, rel_tol=1e-5)
    assert "samples_per_sec" not in by                         # rounded in the source: not compared
    doc = validate_records([rec])
    assert any(n["metric"] == "samples_per_sec" for n in doc["not_compared"])


def test_definition_from_another_record_of_the_same_source():
    a = gpt_record(**{"id": "ksrc-t5-a"})
    a["measured"] = {"iteration_time_s": 1.0, "mfu": 0.4, "mfu_definition": KORTH_DEF}
    b = gpt_record(**{"id": "ksrc-text-b"})
    b["measured"] = {"mfu": 0.4}
    doc = validate_records([a, b])
    eb = [e for e in doc["records"] if e["id"] == "ksrc-text-b"][0]
    assert eb["convention"] == "korthikanti_model" and "convention_from" in eb


def test_peak_memory_metric_units():
    rec = gpt_record()
    rec["measured"] = {"peak_memory_gib": 10.0, "peak_memory_gb": 10.0}
    mp, est = _predicted_step(rec)
    by = {e["metric"]: e for e in evaluate_record(rec).entries}
    # a framework's reported memory is the caching allocator's reserved peak (no CUDA context / NCCL)
    assert math.isclose(by["peak_memory_gib"]["predicted"], est["memory"]["reserved_bytes"] / 2**30, rel_tol=1e-5)
    assert math.isclose(by["peak_memory_gb"]["predicted"], est["memory"]["reserved_bytes"] / 1e9, rel_tol=1e-5)
    assert est["memory"]["reserved_bytes"] < est["memory"]["peak_bytes"]
    assert by["peak_memory_gib"]["compared"] == "reserved"


def test_memory_compared_like_with_like():
    """allocated ↔ max_memory_allocated, reserved ↔ max_memory_reserved, device (nvidia-smi) ↔
    reserved + CUDA context + NCCL buffers; a `peak_` key follows its `_definition`."""
    from autoplace.validate.compare import memory_kind
    rec = gpt_record()
    rec["measured"] = {"allocated_memory_gib": 10.0, "reserved_memory_gb": 10.0, "device_memory_gib": 10.0}
    mp, est = _predicted_step(rec)
    by = {e["metric"]: e for e in evaluate_record(rec).entries}
    m = est["memory"]
    assert by["allocated_memory_gib"]["compared"] == "allocated"
    assert by["allocated_memory_gib"]["predicted"] == pytest.approx(m["allocated_bytes"] / 2**30, rel=1e-5)
    assert by["reserved_memory_gb"]["predicted"] == pytest.approx(m["reserved_bytes"] / 1e9, rel=1e-5)
    assert by["device_memory_gib"]["compared"] == "device"
    assert by["device_memory_gib"]["predicted"] == pytest.approx(m["device_bytes"] / 2**30, rel=1e-5)
    assert m["allocated_bytes"] < m["reserved_bytes"] < m["device_bytes"]
    assert memory_kind("peak_memory_gib", {"peak_memory_gib_definition": "nvidia-smi memory.used"}) == "device"
    assert memory_kind("peak_memory_gib", {"memory_definition": "torch.cuda.max_memory_allocated"}) == "allocated"
    assert memory_kind("peak_memory_gib", {}) == "reserved"


def test_layer_time_record():
    rec = gpt_record(**{"record_type": "measured_layer_time", "plan.dp": 1, "hardware.gpus_total": 2,
                        "plan.global_batch": 4, "plan.recompute": "none"})
    rec["measured"] = {"layer_forward_ms": 1.0, "layer_backward_ms": 2.0, "layer_total_ms": 3.0,
                       "overhead_vs_baseline": None}
    res = evaluate_record(rec)
    by = {e["metric"]: e for e in res.entries}
    f, b = layer_times(map_shaped(rec))
    assert f > 0 and b > f
    assert math.isclose(by["layer_forward_ms"]["predicted"], f * 1e3, rel_tol=1e-5)
    assert math.isclose(by["layer_total_ms"]["predicted"], (f + b) * 1e3, rel_tol=1e-5)
    full = copy.deepcopy(rec)
    full["plan"]["recompute"] = "full"
    f2, b2 = layer_times(map_shaped(full))
    assert math.isclose(f2, f, rel_tol=1e-9) and b2 > b          # recompute is charged to backward


# ---- max model size and analytic model states -------------------------------------------------
def zero_record(mp: int, zero: int) -> dict:
    return {"id": f"zsrc-t2-mp{mp}-z{zero}", "record_type": "measured_max_model_size",
            "source": {"citation": "Z et al. 2020", "table_or_figure": "Table 2"},
            "model": {"name": "GPT-2-like (size varied)", "layers": None, "hidden": None, "heads": None},
            "hardware": {"gpu": "V100-SXM3-32GB (DGX-2)", "gpus_total": 64 * mp, "gpus_per_node": 16},
            "plan": {"dp": 64, "tp": mp, "pp": None, "zero_stage": zero, "precision": "fp16 mixed precision + Adam"},
            "measured": {"max_trainable_params_billion": 1.0},
            "notes": "analytic maxima in the same table: Baseline 2B, Pos 7.6B, Pos+g 14.4B (per paper)."}


@pytest.mark.parametrize("mp,zero", [(1, 0), (4, 0), (1, 1), (16, 1)])
def test_max_model_size_is_the_states_only_closed_form(mp, zero):
    rec = zero_record(mp, zero)
    hw = map_states_only(rec, 1e9, regime="zero").hw
    per_param = 16.0 if zero == 0 else 4.0 + 12.0 / 64
    expect = hw.memory_bytes * mp / per_param
    assert abs(max_model_params(rec) / expect - 1) < 1e-3
    e = evaluate_record(rec).entries[0]
    assert e["metric"] == "max_trainable_params_billion" and e["measured_fits"] is True
    assert e["paper_analytic"] == (2.0 if zero == 0 else 7.6)


def test_analytic_estimate_uses_the_deepspeed_regime():
    rec = {"id": "dssrc-est-1gpu", "record_type": "analytic_estimate",
           "source": {"citation": "HF Transformers DeepSpeed integration docs"},
           "model": {"name": "T0_3B", "params_billion": 2.783},
           "hardware": {"gpu": "any", "gpus_total": 2, "gpus_per_node": 2},
           "plan": {"dp": 2, "zero_stage": 3, "precision": "fp16/bf16 mixed + fp32 Adam"},
           "measured": {"model_states_gb_per_gpu": 23.58, "model_states_gb_per_cpu": 0.74, "zero_init": 1},
           "notes": "offload_param=none, offload_optimizer=none."}
    res = evaluate_record(rec)
    e = res.entries[0]
    mp = map_states_only(rec, 2.783e9, regime="deepspeed", any_hw=True)
    assert (mp.train.regime, mp.train.states_only, mp.plan.zero, mp.plan.dp, mp.plan.offload) == \
        ("deepspeed", True, 3, 2, "none")
    est = estimate(mp.model, mp.hw, mp.train, mp.plan, mp.world, headroom=0.0)
    assert math.isclose(e["predicted"], est["memory"]["peak_bytes"] / 2**30, rel_tol=1e-5)
    assert e["unit"] == "GiB" and math.isclose(e["error_pct"], (e["predicted"] - 23.58) / 23.58 * 100, abs_tol=1e-2)
    assert {n["metric"] for n in res.not_compared} == {"model_states_gb_per_cpu", "zero_init"}
    off = copy.deepcopy(rec)
    off["notes"] = "offload_param=none, offload_optimizer=cpu."
    assert map_states_only(off, 2.783e9, regime="deepspeed", any_hw=True).plan.offload == "grads"
    off["notes"] = "offload_param=cpu, offload_optimizer=cpu."
    assert map_states_only(off, 2.783e9, regime="deepspeed", any_hw=True).plan.offload == "params"
    assert evaluate_record(off).skipped is None


# ---- summary ----------------------------------------------------------------------------------
def _fake(rid, rtype, errs=None, skip=None):
    r = Result({"id": rid, "record_type": rtype})
    if skip:
        r.skipped = skip
    for m, e in (errs or {}).items():
        r.entries.append({"id": rid, "source": "x", "metric": m, "measured": 1.0, "predicted": 1 + e / 100,
                          "error_pct": e, **({"time_error_pct": -e} if m != "layer_total_ms" else {})})
    return r


def test_summary_arithmetic():
    rs = [_fake("x-a", "measured_throughput", {"tflops_per_gpu": 10.0, "iteration_time_s_derived": -4.0}),
          _fake("x-b", "measured_throughput", {"iteration_time_s": -2.0, "mfu": 30.0}),
          _fake("x-c", "measured_throughput", skip="unknown GPU"),
          _fake("x-d", "measured_layer_time", {"layer_total_ms": 6.0})]
    s = group_summary(rs)
    assert (s["records"], s["predicted"], s["skipped"]) == (4, 3, 1)
    assert s["coverage"] == 0.75 and s["throughput_coverage"] == round(2 / 3, 4)
    assert s["count"] == 5 and s["mean_abs_err_pct"] == round((10 + 4 + 2 + 30 + 6) / 5, 3)
    assert s["max_abs_err_pct"] == 30.0
    # primary: tflops for a (over the derived time), iteration time for b (over mfu), layer total for d
    assert s["primary"]["count"] == 3 and s["primary"]["mean_abs_err_pct"] == round((10 + 2 + 6) / 3, 3)
    assert s["step_time"]["count"] == 2 and s["step_time"]["max_abs_err_pct"] == 10.0
    assert s["by_metric"]["mfu"] == {"count": 1, "mean_abs_err_pct": 30.0, "max_abs_err_pct": 30.0}


# ---- CLI --------------------------------------------------------------------------------------
def test_cli_json_and_exit_codes(tmp_path):
    f = tmp_path / "recs.json"
    f.write_text(json.dumps([gpt_record(), gpt_record(**{"id": "testsrc-bad", "hardware.gpu": "Nope-1"})]))
    r = CliRunner().invoke(app, ["validate", "--records", str(f), "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert set(doc) >= {"records", "summary"}
    skipped_rows = [e for e in doc["records"] if "skipped" in e]
    assert skipped_rows == [{"id": "testsrc-bad", "source": "testsrc",
                             "skipped": "unknown GPU 'Nope-1' (no hardware profile or alias)"}]
    compared = [e for e in doc["records"] if "metric" in e]
    assert {"id", "source", "metric", "measured", "predicted", "error_pct"} <= set(compared[0])
    assert doc["summary"]["overall"]["coverage"] == 0.5
    assert "testsrc" in doc["summary"]["by_source"]
    human = CliRunner().invoke(app, ["validate", "--records", str(f)])
    assert human.exit_code == 0 and "summary" in human.output and "Nope-1" in human.output


@pytest.mark.parametrize("content", [None, "{not json", '{"a": 1}'])
def test_cli_unreadable_file_exits_1_with_one_line(tmp_path, content):
    f = tmp_path / "r.json"
    if content is not None:
        f.write_text(content)
    r = CliRunner().invoke(app, ["validate", "--records", str(f)])
    assert r.exit_code == 1
    lines = [l for l in r.output.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: --records")


# ---- the public file --------------------------------------------------------------------------
def test_public_file_runs_without_crashing():
    if not PUBLIC.exists():
        pytest.skip("public validation file not available")
    recs = load_records(PUBLIC)
    results, summary = run(recs)
    assert len(results) == len(recs)
    assert all(r.skipped is None or r.skipped and "internal error" not in r.skipped for r in results)
    assert summary["overall"]["throughput_coverage"] >= 0.95
    ids = {r.id for r in results if r.skipped}
    assert "narayanan2021-text-gpt3-1024gpu" in ids          # no plan in the text


def test_public_set_meets_the_issue_targets():
    """The issue-3 accuracy targets on the public file (the README table prints the same numbers)."""
    if not PUBLIC.exists():
        pytest.skip("public validation file not available")
    from autoplace.validate.targets import public_targets
    results, summary = run(load_records(PUBLIC))
    tg = public_targets(results, summary)
    assert set(tg) == {"korthikanti_t5", "narayanan_t12", "llmfoundry", "throughput_coverage", "zero_t2"}
    failed = {k: v for k, v in tg.items() if not v["met"]}
    assert not failed, failed
    # the 2021 DeepSpeed ZeRO-3 rows run the synchronizing per-sub-module schedule, the others do not
    by = {r.id: r for r in results}
    assert "fetch_sync=True" in " ".join(by["narayanan2021-t2-zero3-530B-1120gpu"].mapping["assumptions"])
    assert not any("fetch_sync" in a for a in by["narayanan2021-t2-ptdp-530B-1120gpu"].mapping["assumptions"])
    from autoplace.cost.memory import memory_limit
    from autoplace.specs.hardware import load_hardware
    m = by["narayanan2021-t2-ptdp-530B-1120gpu"].mapping        # peak / usable memory, reported per record
    limit = float(memory_limit(load_hardware("a100-80gb"), 0.0))
    assert m["memory_utilization"] == pytest.approx(m["peak_memory_gib"] * 2**30 / limit, rel=1e-3)


def test_unseen_source_llama_gqa_on_h100():
    """A record shape the public file does not have: Llama-style GQA model, H100, bf16, flash,
    Megatron-Core FLOP convention, measured MFU + peak memory."""
    rec = gpt_record(**{"id": "newsrc2024-t1-llama-8gpu", "hardware.gpu": "H100-SXM5-80GB",
                        "hardware.gpus_total": 8, "hardware.peak_tflops_per_gpu_assumed_by_source": 989,
                        "plan.dp": 4, "plan.precision": "bf16", "plan.recompute": "selective",
                        "plan.sequence_parallel": True, "plan.global_batch": 32, "plan.micro_batch": 2})
    rec["source"] = {"citation": "New et al. 2024, 'Megatron-Core at scale'", "table_or_figure": "Table 1"}
    rec["model"].update(name="Llama-tiny", kv_heads=4, ffn_hidden=2816,
                        arch_notes="Llama-style: RoPE, RMSNorm, SwiGLU, untied embeddings, no biases")
    rec["measured"] = {"mfu": 0.45, "peak_memory_gib": 40.0,
                       "mfu_definition": "Megatron-Core num_floating_point_operations / (time * GPUs * 989e12)"}
    mp = map_shaped(rec)
    m, t = mp.model, mp.train
    assert (m.gated_mlp, m.norm, m.position, m.tied_embeddings, m.attn_bias, m.a_kv) == \
        (True, "rmsnorm", "rope", False, False, 4)
    assert mp.hw.name.startswith("H100") and (t.precision, t.regime, t.attention) == ("bf16", "megatron-bf16", "flash")
    res = evaluate_record(rec)
    assert res.skipped is None
    by = {e["metric"]: e for e in res.entries}
    assert by["mfu"]["convention"] == "megatron_core" and set(by) == {"mfu", "peak_memory_gib"}
    _, est = _predicted_step(rec)
    sh = F.Shape(layers=4, hidden=1024, heads=16, kv_heads=4, ffn_hidden=2816, vocab=51200, seq_len=1024,
                 gated_mlp=True)
    assert math.isclose(by["mfu"]["predicted"], F.megatron_core(sh, 32) / est["time"]["step_s"] / 8 / 989e12,
                        rel_tol=1e-5)


def test_moe_record_fields_and_free_form_gpu_names_are_read():
    from autoplace.validate import validate_records
    rec = {"id": "moe", "record_type": "measured_throughput",
           "source": {"citation": "synthetic 2024", "table_or_figure": "t"},
           "model": {"name": "Mixtral 8x7B", "layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8,
                     "ffn_hidden": 14336, "vocab": 32000, "seq_len": 4096, "num_experts": 8, "top_k": 2},
           "hardware": {"gpu": "NVIDIA H100 80GB HBM3", "gpus_total": 64, "gpus_per_node": 8},
           "plan": {"dp": 8, "tp": 2, "pp": 4, "cp": 1, "ep": 8, "vpp": 1, "sequence_parallel": True,
                    "zero_stage": 1, "fsdp": False, "recompute": "selective", "micro_batch": 1,
                    "global_batch": 256, "precision": "bf16", "pp_schedule": "1F1B"},
           "measured": {"tflops_per_gpu": 300}}
    pcie = dict(rec, id="pcie", hardware={"gpu": "A100 80GB PCIe", "gpus_total": 64, "gpus_per_node": 8})
    doc = validate_records([rec, pcie])
    got = {r["id"]: r for r in doc["records"]}
    assert got["moe"]["metric"] == "tflops_per_gpu" and got["moe"]["predicted"] > 0
    assert "PCIe/NVL board" in got["pcie"]["skipped"]


def test_layers_not_divisible_by_pp_map_to_a_lighter_ends_split():
    from autoplace.plan import lighter_ends_split
    from autoplace.validate import validate_records
    assert lighter_ends_split(126, 16) == (7,) + (8,) * 14 + (7,)        # Llama 3 405B (paper §3.3.2)
    assert lighter_ends_split(70, 12) == (5,) + (6,) * 10 + (5,)         # BLOOM on 12 stages
    assert sum(lighter_ends_split(10, 4)) == 10 and lighter_ends_split(8, 4) == (2, 2, 2, 2)
    rec = {"id": "bloom", "record_type": "measured_throughput",
           "source": {"citation": "BigScience 2022", "table_or_figure": "t"},
           "model": {"name": "BLOOM 176B", "layers": 70, "hidden": 14336, "heads": 112, "kv_heads": 112,
                     "ffn_hidden": 57344, "vocab": 250880, "seq_len": 2048,
                     "arch_notes": "ALiBi, LayerNorm, GeLU, tied embeddings"},
           "hardware": {"gpu": "A100 80GB", "gpus_total": 384, "gpus_per_node": 8},
           "plan": {"dp": 8, "tp": 4, "pp": 12, "cp": 1, "ep": 1, "vpp": 1, "sequence_parallel": False,
                    "zero_stage": 1, "fsdp": False, "recompute": "full", "micro_batch": 2,
                    "global_batch": 2048, "precision": "bf16", "pp_schedule": "1F1B"},
           "measured": {"tflops_per_gpu": 150}}
    doc = validate_records([rec])
    r = doc["records"][0]
    assert r["metric"] == "tflops_per_gpu" and r["predicted"] > 0
    assert any("layer_split [5, 6" in a for a in doc["mapping"]["bloom"]["assumptions"])


# ---- the 2024–2026 file ----------------------------------------------------------------------------
MODERN = PUBLIC.parent / "modern_runs.json"


def test_modern_set_regression():
    """The 2024–2026 set (issue 11): every record maps and predicts (coverage 100 %), each stack
    reads its runtime, and the tokens/s error does not drift above where the model stands
    (README "Accuracy on 2024–2026 stacks": mean 7.9 %, max 27.3 % — issue 11's ≤ 10 % mean is met,
    its ≤ 25 % max is not; this guards the present, it does not claim the max)."""
    if not MODERN.exists():
        pytest.skip("modern validation file not available")
    from autoplace.validate.targets import modern_targets
    results, _ = run(load_records(MODERN))
    tg = modern_targets(results)
    assert tg["coverage"] == 1.0 and tg["rows"] == tg["records"] == 36
    assert tg["tokens_mean"] <= 8.3, tg["worst"]
    assert tg["tokens_max"] <= 28.5, tg["worst"]
    by = {r.id: r for r in results}
    rt = {rid: r.mapping["runtime"] for rid, r in by.items()}
    assert {v for k, v in rt.items() if k.startswith("mbridge2606")} == {"megatron-core"}
    assert {v for k, v in rt.items() if k.startswith("nemo2502")} == {"megatron-core-0.11"}
    # the performance summary's MoE rows (DeepEP) ran the Oct 2025 code; its Llama 3 row today's
    assert {k for k, v in rt.items() if v == "nemo-automodel-2025"} == {
        k for k in rt if k.startswith("automodel") and "llama" not in k}
    assert rt["automodel-h100-bf16-llama370b-64gpu"] == "nemo-automodel"
    # the dense Llama rows that every stack runs well stay close
    for rid in ("nemo2502-dgx-b200-llama3-8b-8gpu", "mbridge2606-gb200-llama31405b-mxfp8-256gpu-gbs1536",
                "automodel-h100-bf16-llama370b-64gpu"):
        e = next(m for m in by[rid].entries if m["metric"] == "tokens_per_sec_per_gpu")
        assert abs(e["error_pct"]) <= 10.0, (rid, e)


UNSEEN = Path(__file__).resolve().parents[1] / "benchmarks" / "unseen_records.json"
ARCHIVE = Path(__file__).resolve().parents[1] / "benchmarks" / "bridge_archive_records.json"


def test_bridge_archive_maps_every_row_and_reads_its_knobs():
    """The held-out Megatron-Bridge archive (README "Held out"): all 109 rows map and predict; each
    row's knobs come from its notes (partial vs full-iteration graphs, the fused grouped MLP, the
    recompute modules); the rows of full-configuration recipes (26.06.01 / 26.08, footnoted gpt-oss
    regression aside) stay within 8.5 % (the GB200 DeepSeek-V3 row is −8.3 %: the GB200 rows keep the
    known few-percent sustained-clock gap), and the mean tokens/s error stays where it stands (7.3 %)."""
    from autoplace.validate.targets import modern_targets
    recs = load_records(ARCHIVE)
    assert len(recs) == 109 and len({r["id"] for r in recs}) == 109
    assert not {r["id"] for r in recs} & ({r["id"] for r in load_records(MODERN)} if MODERN.exists() else set())
    results, _ = run(recs)
    tg = modern_targets(results)
    assert tg["coverage"] == 1.0 and tg["rows"] == 109
    assert tg["tokens_mean"] <= 7.6, tg["worst"]
    by = {r.id: r for r in results}
    for rid, r in by.items():
        if rid.startswith(("mbridge2608", "mbridge260601")) and "gptoss" not in rid:
            e = next(m for m in r.entries if m["metric"] == "tokens_per_sec_per_gpu")
            assert abs(e["error_pct"]) <= 8.5, (rid, e["error_pct"])
    assert "recompute_modules" not in str(by["mbridge2604-gb200-deepseekv3-mxfp8-256gpu-gbs4096"].skipped or "")
    assert "rc=selective(mlp)" in by["mbridge2604-gb200-deepseekv3-mxfp8-256gpu-gbs4096"].mapping["plan"]


def test_unseen_nemo_rows_are_entered_right_and_all_predicted():
    """The hand-entered NeMo 24.12 (H100) and 25.04 (GB200) rows of the unseen set: every one is
    predicted, and each row's printed TFLOP/s ÷ tokens/s equals NeMo's flops_formulas count on the
    entered model (full attention square, router GEMM) within 0.3 % — the check that the model
    dimensions typed in from the configs are the ones NVIDIA ran."""
    from autoplace.cost.compute import model_flops_per_step
    from autoplace.placement.rules import Ctx
    recs = [r for r in load_records(UNSEEN) if r["id"].startswith(("nemo2412", "nemo2504"))]
    assert len(recs) == 19
    results, _ = run(recs)
    assert all(r.skipped is None and r.primary() is not None for r in results)
    conv = F.detect(recs[0]["measured"]["tflops_definition"], "tflops_per_gpu")
    assert conv.name == "nemo_2502"
    checked = 0
    for r in recs:
        meas = r["measured"]
        if "tflops_per_gpu" not in meas:
            continue
        mp = map_shaped(r)
        per_tok = model_flops_per_step(Ctx(mp.model, mp.train, mp.world), **conv.from_model) / mp.train.tokens_per_step
        tol = 0.011 if "405b" in r["id"] else 0.003        # NeMo's 405B count sits 1.0 % above, as in the 25.02 row
        assert abs(meas["tflops_per_gpu"] * 1e12 / meas["tokens_per_sec_per_gpu"] / per_tok - 1) < tol, r["id"]
        checked += 1
    assert checked == 18


def test_unseen_torchtitan_rows_map_their_stated_plans():
    """The torchtitan benchmark tables (Dec 2024, Tables 1–6) and the Trainy H200 report, hand-entered
    with their memory: every row is predicted; the table titles pick eager vs compile; the
    `enable_async_tensor_parallel` knob (and only it) turns on async TP; the 405B rows keep torchtitan's
    PP defaults as entered (8 micro-batches, 2 stages per rank when looped); each Memory(GiB) is
    compared with the predicted reserved peak."""
    recs = [r for r in load_records(UNSEEN) if r["id"].startswith(("torchtitan-", "trainy-"))]
    assert len(recs) == 20
    results, _ = run(recs)
    by = {r.id: r for r in results}
    assert all(r.skipped is None and r.primary() is not None for r in results)
    assert by["torchtitan-8b-128gpu-fsdp"].mapping["runtime"] == "torchtitan-2025"
    assert by["torchtitan-8b-128gpu-fsdp-compile"].mapping["runtime"] == "torchtitan-compile-2025"
    assert by["trainy-h200-8b-32gpu"].mapping["runtime"] == "torchtitan-compile-2025"
    assert "tp_overlap" in by["torchtitan-70b-256gpu-2d-asynctp"].mapping["plan"]
    assert "tp_overlap" not in by["torchtitan-70b-256gpu-2d"].mapping["plan"]
    assert "vpp=2" in by["torchtitan-405b-512gpu-3d-interleaved"].mapping["plan"]
    assert "mbs=4" in by["torchtitan-405b-512gpu-3d-1f1b"].mapping["plan"]
    for r in results:
        mem = next(e for e in r.entries if e["metric"] == "peak_memory_gib")
        assert mem["predicted"] == pytest.approx(r.mapping["reserved_gib"], rel=1e-4), r.id
    # torchtitan 9dec370 compiled the blocks, not the loss (train.py, e8977b007): the records say
    # `compile_loss: false` and the loss is the eager runtime's (12 B per logit, 5 passes); Trainy's
    # June 2025 torchtitan compiles it (4 B per logit, benchmarks/loss_memory.py)
    loss_kw = "kernels.loss=eager, kernels.loss_passes=5.0, memory.loss_bytes_per_logit=12.0"
    assert any(loss_kw in a for a in by["torchtitan-8b-cp1-s32k"].mapping["assumptions"])
    assert not any("loss_bytes_per_logit" in a for a in by["trainy-h200-8b-32gpu"].mapping["assumptions"])
    assert not any("loss_bytes_per_logit" in a for a in by["torchtitan-8b-128gpu-fsdp"].mapping["assumptions"])
    # by hand: the eager loss holds 8 more bytes per logit (12 against 4), 32,768 tokens × 128,256
    # logits on the rank, and the allocator reserves reserve_frac on top
    from autoplace.runtimes import load_runtime
    rec = copy.deepcopy(next(r for r in recs if r["id"] == "torchtitan-8b-cp1-s32k"))
    rec["notes"] = rec["notes"].replace('"compile_loss": false', '"unused": 0')
    plain = run([rec])[0][0].mapping["reserved_gib"]
    extra = 8 * 32768 * 128256 * (1 + load_runtime("torchtitan-compile").memory.reserve_frac) / 2**30
    assert by["torchtitan-8b-cp1-s32k"].mapping["reserved_gib"] - plain == pytest.approx(extra, rel=1e-3)


def test_a_stated_hsdp_replica_degree_maps_to_dp_replicate():
    """`plan.dp_replicate` states HSDP as a degree: IBM's Llama 2 7B on 128 A100 shards within each
    8-GPU node and replicates across 16 nodes, dp=128(16x8); a degree that does not divide dp, or
    one on a plan that is not FSDP, is a one-line skip naming the field."""
    import copy

    from autoplace.validate.mapping import map_shaped
    from autoplace.validate.record import Skip
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "unseen_records.json"
    rec = next(r for r in load_records(str(path)) if r["id"] == "ibmfsdp-blog-llama2-7b-128xa100-hsdp-bs2-noac")
    mp = map_shaped(rec)
    assert (mp.plan.dp, mp.plan.dp_replicate, mp.plan.zero) == (128, 16, 3)
    assert any("HSDP: shard over 8 data-parallel ranks, replicate 16 times" in a for a in mp.assumptions)
    bad = copy.deepcopy(rec)
    bad["plan"]["dp_replicate"] = 3
    with pytest.raises(Skip, match=r"plan.dp_replicate 3: give a divisor of plan.dp on an FSDP \(zero 3\) plan"):
        map_shaped(bad)
    bad["plan"]["dp_replicate"] = "sixteen"            # not a number: skipped, never silently dropped
    with pytest.raises(Skip, match=r"plan.dp_replicate sixteen: give a divisor of plan.dp"):
        map_shaped(bad)
