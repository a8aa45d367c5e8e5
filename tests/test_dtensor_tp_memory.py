"""DTensor tensor parallelism's memory, counted by hand (`RuntimeSpec.memory`): a column-parallel
linear after SequenceParallel saves its all-gathered input (`tp_saves_gathered_input`), and eager
`loss_parallel` holds 16 B per logit in its fused NLL + log-softmax backward
(`loss_parallel_bytes_per_logit`; torch/distributed/tensor/parallel/loss.py). Megatron-Core's SP
linears save the shard and re-gather, and its fused vocab-parallel CE holds 6 B per logit."""

from __future__ import annotations

from dataclasses import replace

import pytest

from autoplace.cost import memory as M
from autoplace.placement.rules import Ctx
from autoplace.plan import parse_plan
from autoplace.runtimes import load_runtime, training_spec
from autoplace.specs.presets import get_preset

LLAMA = get_preset("llama3-70b")          # h 8192, vocab 128256
S, MBS, TP = 8192, 2, 8


def _ctx(name, **mem):
    rt = load_runtime(name)
    if mem:
        rt = replace(rt, memory=replace(rt.memory, **mem))
    return Ctx(LLAMA, training_spec(rt, seq_len=S, global_batch=64, precision="bf16"), 64)


def test_torchtitan_states_both_facts_and_megatron_neither():
    tt, mc = load_runtime("torchtitan"), load_runtime("megatron-core")
    assert (tt.memory.loss_bytes_per_logit, tt.memory.loss_parallel_bytes_per_logit) == (12.0, 16.0)
    assert tt.memory.tp_saves_gathered_input and load_runtime("torchtitan-compile").memory.tp_saves_gathered_input
    assert not mc.memory.tp_saves_gathered_input and mc.memory.loss_parallel_bytes_per_logit == 0.0


def test_last_stage_logits_and_the_output_layers_gathered_input():
    """torchtitan, tp 8 with SP: 16 B per logit over the rank's vocabulary shard, plus the output
    layer's gathered input beyond its shard, 2·s·b·h·(1 − 1/8); tp 1: the plain eager 12 B."""
    ctx = _ctx("torchtitan")
    p = parse_plan(f"tp={TP},sp=1,zero=3,mbs={MBS}")
    V = float(M.vocab_padded(ctx, p))
    assert V == 128256
    want = 16 * S * MBS * V / TP + 2 * S * MBS * 8192 * (1 - 1 / TP)
    assert float(M.logits_bytes(ctx, p)) == pytest.approx(want, rel=1e-12)
    assert float(M.logits_bytes(ctx, p)) == 4_202_692_608.0 + 234_881_024.0
    one = parse_plan(f"zero=3,mbs={MBS}")
    assert float(M.logits_bytes(ctx, one)) == 12 * S * MBS * 128256
    # without SP nothing is gathered: the logits term alone
    nosp = parse_plan(f"tp={TP},sp=0,zero=3,mbs={MBS}")
    assert float(M.logits_bytes(ctx, nosp)) == 16 * S * MBS * V / TP


def test_the_gathered_qkv_and_fc1_inputs_are_saved_whole():
    """Without recompute, one layer saves the QKV and FC1 inputs at full sequence length under
    DTensor TP with SP: 2·b_A·h·s·b·(1 − 1/t) more than the SP-shard accounting; the
    checkpoint-only (full recompute) and no-SP figures do not move."""
    p = parse_plan(f"tp={TP},sp=1,zero=3,mbs={MBS}")
    on, off = _ctx("torchtitan"), _ctx("torchtitan", tp_saves_gathered_input=False)
    full_on, _, ck_on = (float(x) for x in M.activation_bytes_per_layer(on, p, "all"))
    full_off, _, ck_off = (float(x) for x in M.activation_bytes_per_layer(off, p, "all"))
    assert full_on - full_off == pytest.approx(2 * 2 * 8192 * S * MBS * (1 - 1 / TP), rel=1e-12)
    assert ck_on == ck_off == 2 * 8192 * S * MBS / TP
    nosp = parse_plan(f"tp={TP},sp=0,zero=3,mbs={MBS}")
    assert float(M.activation_bytes_per_layer(on, nosp, 0)) == float(M.activation_bytes_per_layer(off, nosp, 0))


def test_megatron_keeps_the_shard_and_its_fused_loss():
    ctx = _ctx("megatron-core")
    p = parse_plan(f"tp={TP},sp=1,zero=1,mbs={MBS}")
    V = float(M.vocab_padded(ctx, p))
    assert float(M.logits_bytes(ctx, p)) == pytest.approx(6 * S * MBS * V / TP, rel=1e-12)


@pytest.mark.slow
def test_dtensor_sp_saves_what_the_model_says_on_cpu(tmp_path):
    """Measured (CPU, gloo, 2 ranks, torchrun; torch's MemTracker peak): the same TP 2 + SP plans
    run with torch's DTensor layouts (`sp_impl="dtensor"`: PrepareModuleInput → Replicate, the
    linears save the gathered input) and with the runner's Megatron-style SP (saves the shard,
    re-gathers in backward). The peak difference between the two is what
    `tp_saves_gathered_input` predicts: without recompute the QKV, FC1 and output-layer inputs,
    with full recompute only the output layer's."""
    from autoplace.profile.launch import run_plans
    plans = [parse_plan("tp=2,sp=1"), parse_plan("tp=2,sp=1,recompute=full")]
    peak, pred = {}, {}
    for impl in ("dtensor", "megatron"):
        settings = dict(seq_len=256, global_batch=4, steps=1, warmup=1, sp_impl=impl)
        # one relaunch when a worker dies: a gloo worker of the CPU torch build aborted once in CI
        # with "malloc(): unaligned tcache chunk detected" (SIGABRT, its peer then reset), inside
        # torch, not in anything measured here; the values asserted below are exact either way
        for attempt in (1, 2):
            recs = run_plans(get_preset("llama-tiny"), plans, 2, out_jsonl=tmp_path / f"{impl}{attempt}.jsonl",
                             settings=settings, workdir=tmp_path / f"{impl}{attempt}", plan_timeout_s=240)
            if [r["status"] for r in recs] == ["ok", "ok"]:
                break
        assert [r["status"] for r in recs] == ["ok", "ok"], [r["error"] for r in recs]
        for r in recs:
            peak[impl, r["plan_short"]] = r["ranks"][0]["memory_tracker"]["peak_bytes"]
            pred[impl, r["plan_short"]] = r["predicted"][0]["memory"]["reserved"]
    tiny = get_preset("llama-tiny")
    for short in {k for _, k in peak}:
        measured = peak["dtensor", short] - peak["megatron", short]
        predicted = pred["dtensor", short] - pred["megatron", short]
        # fp32, 256 tokens, tp 2: (QKV + FC1 inputs without recompute) + the output layer's input
        per_input = 4 * 256 * tiny.hidden / 2
        assert predicted == per_input * ((2 * tiny.layers if "rc=none" in short else 0) + 1)
        assert measured == pytest.approx(predicted, rel=0.01), (short, measured, predicted)
