"""The measured-memory records of the outside-runs file, by hand: the dropout a Megatron-LM run keeps
by default, the pipeline rank a memory line comes from, and which records calibrate the intervals."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest

from autoplace.cost import memory as M
from autoplace.estimate import estimate
from autoplace.placement.rules import Ctx
from autoplace.runtimes import load_runtime
from autoplace.validate import load_records, run
from autoplace.validate.mapping import map_shaped

ROOT = Path(__file__).resolve().parents[1]
UNSEEN = ROOT / "benchmarks" / "unseen_records.json"
GIB = 2**30


def _rec(rid: str) -> dict:
    return next(r for r in load_records(UNSEEN) if r["id"] == rid)


def _without_dropout(rec: dict) -> dict:
    r = copy.deepcopy(rec)
    r["notes"] = r["notes"].replace('"hidden_dropout": 0.1, "attention_dropout": 0.1', '"hidden_dropout": 0.0')
    return r


def test_megatron_default_dropout_keeps_two_residual_masks_per_layer():
    """Megatron-LM's CI memory test leaves --hidden-dropout / --attention-dropout at their argument
    defaults (0.1): the record's knobs switch dropout on, and the allocated peak grows by exactly the
    masks Korthikanti Table 2 counts — two residual masks of 1 B per element, replicated without SP
    (s·b·h per layer), for all 32 layers, plus the embedding dropout mask s·b·h/t on stage 0
    (flash attention stores no attention-probability mask)."""
    rec = _rec("mlm-ci-gpt3-7b-tp4pp1-dp2-h100")
    on, off = map_shaped(rec), map_shaped(_without_dropout(rec))
    assert on.train.dropout is True and off.train.dropout is False
    assert (on.plan.tp, on.plan.sp, on.plan.pp, on.plan.mbs, on.train.seq_len) == (4, 0, 1, 2, 8192)
    s, b, h, L, t = 8192, 2, 4096, 32, 4

    def alloc(mp):
        ctx = Ctx(mp.model, mp.train, mp.world)
        return float(M.allocated_bytes(M.stage_memory(ctx, mp.hw, mp.plan, 0)))
    assert alloc(on) - alloc(off) == 2 * s * b * h * L + s * b * h / t        # 4,311,744,512 B
    bad = copy.deepcopy(rec)
    bad["notes"] = bad["notes"].replace('"hidden_dropout": 0.1', '"hidden_dropout": "0.1"')
    (rb,), _ = run([bad])
    assert rb.skipped == "workload knob hidden_dropout / attention_dropout '0.1': give the probability, a number in [0, 1)"


def test_a_memory_line_from_the_last_rank_is_compared_with_the_last_stage():
    """Megatron writes its memory scalars from the last rank only: a record that says so
    (measured.memory_pp_stage = "last") is compared with the last pipeline stage's allocated bytes,
    not with the binding stage's."""
    rec = _rec("mlm-ci-gpt3-7b-tp1pp4vpp8-dp2-h100")
    (res,), _ = run([rec])
    e = next(x for x in res.entries if x["metric"] == "allocated_memory_gib")
    mp = map_shaped(rec)
    est = estimate(mp.model, mp.hw, mp.train, mp.plan, mp.world)
    last = est["memory"]["per_stage"][-1]["allocated"] / GIB
    assert abs(e["predicted"] - last) < 1e-3
    first = copy.deepcopy(rec)
    first["measured"]["memory_pp_stage"] = "first"
    (r0,), _ = run([first])
    e0 = next(x for x in r0.entries if x["metric"] == "allocated_memory_gib")
    assert abs(e0["predicted"] - est["memory"]["per_stage"][0]["allocated"] / GIB) < 1e-3
    assert e0["predicted"] != e["predicted"]
    assert "memory_pp_stage" not in {x["metric"] for x in res.not_compared}
    bad = copy.deepcopy(rec)
    bad["measured"]["memory_pp_stage"] = 7
    (rb,), _ = run([bad])
    assert rb.skipped == "measured.memory_pp_stage '7': use \"first\", \"last\" or a stage index 0–3"


def test_megatron_ci_memory_records_land_within_four_percent():
    """The four Megatron-LM CI memory tests (7B GPT, TP 4 and interleaved PP 4, H100 and GB200): the
    first measured-memory source of the Megatron path, each within 4 % of torch's peak allocated."""
    recs = [r for r in load_records(UNSEEN) if r["id"].startswith("mlm-ci")]
    assert len(recs) == 4
    results, _ = run(recs)
    for r in results:
        e = next(x for x in r.entries if x["metric"] == "allocated_memory_gib")
        assert r.mapping["runtime"] == "megatron-core" and abs(e["error_pct"]) < 4.0, (r.id, e)


def test_interval_residuals_count_measurements_only():
    """An `analytic_estimate` record (DeepSpeed's memory estimator) is another tool's formula: it
    neither calibrates nor scores an interval, while the measured records beside it do."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import intervals as B
    shared = B.SHARED / "public_runs.json"
    if not shared.exists():
        pytest.skip("shared/validation not present")
    recs = [r for r in load_records(shared) if r.get("record_type") == "analytic_estimate"][:2]
    assert len(recs) == 2
    a, _ = run(recs[:1])
    assert any(e.get("predicted") for e in a[0].entries)          # it is predicted, just not a residual
    measured = [_rec("mlm-ci-gpt3-7b-tp4pp1-dp2-h100")]
    res, _ = run(recs + measured)
    rows = B.residuals_of(res)
    assert {x["id"] for x in rows} == {"mlm-ci-gpt3-7b-tp4pp1-dp2-h100"}
    assert [x["kind"] for x in rows] == ["memory"]


def test_context_parallel_gathers_the_kv_the_attention_kernel_receives():
    """torchtitan's Llama expanded GQA's K and V to the query heads before SDPA (repeat_kv, until
    #2259 of Jan 2026: the -2025 runtimes), so its ring attention gathered 32 heads where
    Megatron-Core's gathers the 8 KV heads: 4× the bytes on the wire and in the layer's working set;
    today's torchtitan passes enable_gqa and gathers 8. The gathered K/V live inside one layer's attention — added
    to a checkpointed layer's recompute working set on a stage without the loss, never to the loss."""
    from autoplace.cost import comm as C
    from autoplace.plan import Plan
    from autoplace.runtimes import training_spec
    from autoplace.specs.presets import get_preset
    model = get_preset("llama3-8b")
    assert (model.heads, model.a_kv, model.d_head) == (32, 8, 128)
    plan = Plan(dp=1, cp=4, pp=2, zero=1, recompute="full", mbs=1).resolved(8)
    want = {"torchtitan-compile-2025": 2 * 32768 * 32 * 128 * 2, "megatron-core": 2 * 32768 * 8 * 128 * 2,
            "torchtitan-compile": 2 * 32768 * 8 * 128 * 2}            # enable_gqa since torchtitan #2259
    for rt, kv in want.items():
        ctx = Ctx(model, training_spec(rt, seq_len=32768, global_batch=8), 8)
        assert float(M.cp_kv_bytes(ctx, plan)) == kv
        assert float(C.cp_bytes_per_layer(ctx, plan)) == 4 * 3 / 4 * kv       # fwd AG, recompute AG, bwd AG + RS
        _, act = M.transient_parts(ctx, plan, 0)
        assert float(act) == float(M.activation_bytes_per_layer(ctx, plan, 0)) + kv
    assert want["torchtitan-compile-2025"] == 4 * want["megatron-core"] == 536_870_912


def test_a_2025_torchtitan_pipeline_keeps_every_micro_batch_logits_on_its_last_stage():
    """torch.distributed.pipelining's last stage keeps each micro-batch's output (the bf16 logits,
    vocabulary-sharded under loss_parallel) until step() ends (torchtitan before #1922;
    `benchmarks/pp_outputs.py`: 8 micro-batches hold 8 logit tensors, peak = max(loss peak + 7,
    16) of them). On the 405B interleaved row (pp 8, 8 micro-batches of 4 × 8,192 tokens, tp 8) the
    last stage holds exactly 7 · 2 · s·b·V/t more at its last loss; stage 0 does not move; today's
    runtime (step(return_outputs=False)) keeps none."""
    from dataclasses import replace
    mp = map_shaped(_rec("torchtitan-405b-512gpu-3d-interleaved"))
    assert mp.train.rt.name == "torchtitan-compile-2025" and mp.train.rt.memory.pp_keeps_step_outputs
    rt_off = replace(mp.train.rt, memory=replace(mp.train.rt.memory, pp_keeps_step_outputs=False))
    on, off = Ctx(mp.model, mp.train, mp.world), Ctx(mp.model, replace(mp.train, runtime=rt_off), mp.world)
    p = mp.plan
    assert (p.pp, p.vpp, p.tp, p.mbs, float(M.schedule_micro_batches(on, p))) == (8, 2, 8, 4, 8.0)
    one = 2 * 8192 * 4 * 128256 / 8                       # bf16 logits of one micro-batch, V/t local
    assert float(M.pp_output_bytes(on, p)) == one == 1_050_673_152
    assert float(M.stage_activation_bytes(on, p, 7) - M.stage_activation_bytes(off, p, 7)) == 7 * one
    assert float(M.stage_activation_bytes(on, p, 0)) == float(M.stage_activation_bytes(off, p, 0))
    # the step's end: m kept + their concatenation = 16 logit tensors, once every activation is freed
    st_on = M.transient_parts(on, p, 7)[1]
    assert float(st_on) == max(float(M.transient_parts(off, p, 7)[1]),
                               16 * one - float(M.stage_activation_bytes(on, p, 7)))
    est = estimate(mp.model, mp.hw, mp.train, p, mp.world)
    assert est["memory"]["binding_stage"] == 7            # the last stage now binds (measured max over GPUs 72.7 GiB)


def test_a_schedule_per_local_batch_holds_only_its_own_micro_batches_in_flight():
    """torchtitan runs one pipeline schedule per local batch (plan.pp_flushes): the schedule drains
    between them, so stage 0 of a 1F1B pipeline holds min(pp, m/f) micro-batches, not min(pp, m)."""
    from dataclasses import replace
    mp = map_shaped(_rec("torchtitan-405b-512gpu-3d-1f1b"))
    ctx, p = Ctx(mp.model, mp.train, mp.world), mp.plan
    assert (p.pp, p.pp_flushes, float(M.micro_batches(p, mp.train.global_batch))) == (8, 1, 8.0)
    assert [float(M.in_flight(ctx, p, i)) for i in (0, 6, 7)] == [8.0, 2.0, 1.0]
    four = replace(p, pp_flushes=4)                      # 4 schedules of 2 micro-batches each
    assert float(M.schedule_micro_batches(ctx, four)) == 2.0
    assert [float(M.in_flight(ctx, four, i)) for i in (0, 6, 7)] == [2.0, 2.0, 1.0]


def test_torch_pipelining_keeps_a_receive_buffer_per_micro_batch_and_direction():
    """PipelineStage allocates one receive buffer per micro-batch for activations (every stage but
    the first) and for gradients (every stage but the last) and keeps them (`benchmarks/
    pp_outputs.py` lists 0/4, 4/4, 4/0 on three CPU ranks with 4 micro-batches). On the 405B 1F1B
    row (8 micro-batches of 4 × 8,192 tokens, TP 8 with SP: a boundary activation is
    2 · 4 · 1,024 · 16,384 B) stage 0 holds 8 gradient buffers, stage 1 one activation buffer beyond
    its 7 in flight plus 8 gradient buffers, the last stage 7 activation buffers beyond its 1."""
    from dataclasses import replace
    mp = map_shaped(_rec("torchtitan-405b-512gpu-3d-1f1b"))
    assert mp.train.rt.memory.pp_recv_buffers
    rt_off = replace(mp.train.rt, memory=replace(mp.train.rt.memory, pp_recv_buffers=False))
    on, off = Ctx(mp.model, mp.train, mp.world), Ctx(mp.model, replace(mp.train, runtime=rt_off), mp.world)
    p = mp.plan
    one = 2 * 4 * (8192 // 8) * 16384
    assert float(M.pp_boundary_bytes(on, p)) == one == 134_217_728
    extra = [float(M.stage_activation_bytes(on, p, i) - M.stage_activation_bytes(off, p, i)) for i in (0, 1, 7)]
    assert extra == [8 * one, 9 * one, 7 * one]
    mc = load_runtime("megatron-core")
    assert not mc.memory.pp_recv_buffers                 # Megatron-Core allocates its p2p tensors per transfer


def test_layer_level_checkpointing_every_nth_block_maps_to_block_recompute():
    """torchtitan's `selective_ac_option = "2"` checkpoints every second block whole and keeps the
    others' activations: a record that says "every 2nd layer" maps to recompute=block with half of
    each stage's blocks checkpointed (never to op-level SAC, which "selective" alone means)."""
    from autoplace.validate.record import parse_layer_recompute, parse_recompute
    assert parse_layer_recompute("selective (layer, every 2nd layer: selective_ac_option '2')") == 2
    assert parse_layer_recompute("checkpoint every 4th transformer block") == 4
    assert parse_layer_recompute("selective (op-level SAC)") is None and parse_layer_recompute(None) is None
    assert parse_recompute("selective (op-level SAC)") == "selective"
    mp = map_shaped(_rec("ttgh950-llama3-debugmodel-8xh100-fsdp"))
    assert (mp.model.layers, mp.plan.recompute, mp.plan.recompute_layers) == (8, "block", 4)
    assert any("one block in every 2" in a for a in mp.assumptions)

