"""Fast checks of the plan runner's pieces (no torchrun): the decoder, its saved-tensor set, the byte
accounting, records, candidate scaling, launcher command lines."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from autoplace.plan import parse_plan  # noqa: E402
from autoplace.profile import measure  # noqa: E402
from autoplace.profile.model import (  # noqa: E402
    Decoder,
    _RMSNormFn,
    _RoPEFn,
    count_params,
    cross_entropy,
    init_weights,
    make_batch,
    reference_run,
    rope_tables,
)
from autoplace.profile.swiglu import _SwiGLUFn  # noqa: E402
from autoplace.specs.presets import get_preset  # noqa: E402

TINY = get_preset("llama-tiny")


@pytest.mark.parametrize("spec", [
    TINY,
    TINY.with_(tied_embeddings=True),
    TINY.with_(kv_heads=None),
    TINY.with_(norm="layernorm", gated_mlp=False, attn_bias=True, mlp_bias=True, position="learned",
               max_seq_len=64),
], ids=["tiny", "tied", "mha", "gpt-style"])
def test_decoder_parameter_count_equals_model_spec(spec):
    m = Decoder(spec, 32)
    assert count_params(m) == spec.total_params()
    init_weights(m, 0)
    ids, labels = make_batch(spec, 32, 2, 0, 0)
    loss = cross_entropy(m(ids), labels)
    loss.backward()
    assert torch.isfinite(loss)


def test_custom_autograd_functions_gradcheck():
    x = torch.randn(2, 3, 8, dtype=torch.double, requires_grad=True)
    w = torch.randn(8, dtype=torch.double, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, w: _RMSNormFn.apply(x, w, 1e-5), (x, w))
    g = torch.randn(2, 5, dtype=torch.double, requires_grad=True)
    u = torch.randn(2, 5, dtype=torch.double, requires_grad=True)
    assert torch.autograd.gradcheck(_SwiGLUFn.apply, (g, u))
    cos, sin = rope_tables(3, 8)
    q = torch.randn(2, 3, 4, 8, dtype=torch.double, requires_grad=True)
    assert torch.autograd.gradcheck(lambda q: _RoPEFn.apply(q, cos.double(), sin.double()), (q,))


def test_init_is_per_fqn_so_stages_match_the_full_model():
    full = Decoder(TINY, 16)
    init_weights(full, 7)
    stage = Decoder(TINY, 16, layer_ids=[2, 3], first=False, last=True)
    init_weights(stage, 7)
    fp = dict(full.named_parameters())
    for n, p in stage.named_parameters():
        assert torch.equal(p, fp[n]), n


def _activation(plan_text, seq=64, mbs=2, policy="attention", counter=None, grads=None):
    from autoplace.cost.memory import stage_activation_bytes
    from autoplace.placement.rules import Ctx
    from autoplace.profile.parallelize import apply_recompute
    from autoplace.profile.report import train_spec
    plan = parse_plan(plan_text).with_(mbs=mbs).resolved(1)
    m = Decoder(TINY, seq)
    init_weights(m, 0)
    apply_recompute([m], plan, policy)
    ids, labels = make_batch(TINY, seq, mbs, 0, 0)
    c = counter if counter is not None else measure.SavedTensorCounter()
    c.exclude_module_state([m])
    with measure.use_counter(c), c.hooks():
        out = m(ids)
        with measure.region("head"):
            loss = cross_entropy(out, labels)
        loss.backward()
    assert c.total_live == 0                      # every saved tensor was released by backward
    if grads is not None:
        grads.update({n: p.grad for n, p in m.named_parameters()})
    ctx = Ctx(TINY, train_spec({"seq_len": seq, "global_batch": mbs, "selective_policy": policy}), 1)
    return c.report()["peak_by_region"]["body"], float(stage_activation_bytes(ctx, plan, 0))


@pytest.mark.parametrize("rc", ["none", "selective", "full", "block"])
def test_single_process_activation_bytes_match_formula(rc):
    text = f"recompute={rc}" + (",recompute_layers=2" if rc == "block" else "")
    meas, pred = _activation(text)
    assert abs(meas / pred - 1) < 0.05, (meas, pred)
    if rc == "none":
        # the only bytes the formula leaves out: the per-token fp32 rstd of the two RMSNorms
        assert meas - pred == 2 * 4 * 64 * 2 * TINY.layers


class _CachedShapes(measure.SavedTensorCounter):
    """Records the shapes of what op-level SAC keeps, in order."""

    def __init__(self):
        super().__init__()
        self.cached = []

    def note_cached(self, out):
        self.cached.append([tuple(t.shape) for t in measure._tensors(out)])
        super().note_cached(out)


def test_op_sac_keeps_wq_wv_w1_w2_and_sdpa_outputs_and_matches_the_formula():
    """torchtitan's op-level SAC in the runner: per layer the 1st, 3rd, 5th and 7th matmul (wq, wv,
    w1, w2 of wq wk wv wo w1 w3 w2) and the CPU SDPA kernel's output + log-sum-exp are kept, the
    rest recomputed; saved bytes = the cost model's op-sac term exactly; gradients unchanged."""
    seq, mbs = 64, 2
    c = _CachedShapes()
    g_sac, g_ref = {}, {}
    meas, pred = _activation("recompute=selective", seq, mbs, "op-sac", counter=c, grads=g_sac)
    _activation("recompute=none", seq, mbs, grads=g_ref)
    h, f, kv, tok = TINY.hidden, TINY.ffn_hidden, TINY.a_kv * TINY.d_head, seq * mbs
    layer = [[(tok, TINY.heads * TINY.d_head)], [(tok, kv)],
             [(mbs, TINY.heads, seq, TINY.d_head), (mbs, TINY.heads, seq)], [(tok, f)], [(tok, h)]]
    assert c.cached == layer * TINY.layers
    assert meas == pred
    assert all(torch.equal(g_sac[n], g_ref[n]) for n in g_ref)
    # about half of no recompute; the attention-core policy keeps almost everything with flash SDPA
    none, _ = _activation("recompute=none", seq, mbs)
    assert 0.4 < meas / none < 0.6


def test_selective_policy_setting_and_runner_runtime():
    from autoplace.profile.capabilities import runner_refusals
    from autoplace.profile.report import CUDA_RESERVE_FRAC, predict, runner_runtime
    from autoplace.profile.settings import DEFAULTS, selective_policy
    assert selective_policy({}) == "attention"              # torch-native's memory.selective
    assert selective_policy({"selective_policy": "op-sac"}) == "op-sac"
    with pytest.raises(ValueError, match="selective_policy"):
        selective_policy({"selective_policy": "layer"})
    s = dict(DEFAULTS, selective_policy="op-sac")
    assert runner_runtime(s).memory.selective == "op-sac"
    assert runner_runtime(s).memory.reserve_frac == 0.0
    assert runner_runtime(s, "nccl").memory.reserve_frac == CUDA_RESERVE_FRAC
    plan = parse_plan("zero=3,recompute=selective").resolved(2)
    cpu, gpu = predict(TINY, s, plan, 2, 0)["memory"], predict(TINY, s, plan, 2, 0, backend="nccl")["memory"]
    assert cpu["reserved"] == cpu["allocated"] and cpu["allocated"] == pytest.approx(gpu["allocated"], rel=1e-12)  # sums in another order
    assert gpu["reserved"] == pytest.approx(gpu["allocated"] * (1 + CUDA_RESERVE_FRAC))
    assert predict(TINY, DEFAULTS, plan, 2, 0)["activation_bytes"] > predict(TINY, s, plan, 2, 0)["activation_bytes"]
    # op-level SAC with TP is refused (its collectives would be recomputed); without TP it runs
    tp = parse_plan("tp=2,recompute=selective").resolved(2)
    assert "op-level SAC with tp > 1" in runner_refusals(tp, TINY, s, "gloo", world=2)[0]
    assert runner_refusals(tp, TINY, DEFAULTS, "gloo", world=2) == []
    assert runner_refusals(plan, TINY, s, "gloo", world=2) == []
    assert "selective_policy=layer" in runner_refusals(plan, TINY, dict(s, selective_policy="layer"),
                                                       "gloo", world=2)[0]


def test_fsdp_mem_tracker_peak_on_cpu():
    """torch's MemTracker follows CPU storages: a known allocation pattern gives its exact peak."""
    m = torch.nn.Linear(64, 64, bias=False)
    opt = torch.optim.Adam(m.parameters(), foreach=False)
    from autoplace.profile.peak import PeakMemory
    pm = PeakMemory([m], opt, fsdp=False, device="cpu")
    with pm:
        x = torch.randn(32, 64)
        y = m(x)
        big = torch.empty(1000, dtype=torch.float32)
        del big
        y.sum().backward()
        opt.step()
    r = pm.report()
    w = 64 * 64 * 4
    g = r["grouped"]
    assert r["tool"] == "MemTracker" and sum(g.values()) == r["peak_bytes"]
    # the peak is in the optimizer step: weight, its gradient, x and y (32×64 fp32 each), the two
    # Adam moments + the step counter, and the step's temporaries (also counted as optimizer)
    assert (g["params"], g["grads"], g["activations"]) == (w, w, 2 * 32 * 64 * 4)
    assert g["optimizer"] >= 2 * w + 4


def test_byte_union_counts_each_byte_once():
    base = torch.zeros(100)
    u = measure._ByteUnion()
    u.add(base)
    u.add(base[10:20])
    u.add(base.view(10, 10)[:, :5])
    assert u.total() == 400
    v = measure._ByteUnion()
    v.add(base[:10])
    v.add(base[50:60])
    assert v.total() == 80


def test_state_bytes_exclude_adam_step_counter():
    lin = torch.nn.Linear(8, 4, bias=False)
    opt = torch.optim.Adam(lin.parameters())
    lin(torch.randn(2, 8)).sum().backward()
    opt.step()
    sb = measure.state_bytes([lin], [opt])
    assert sb == {"params": 128, "grads": 128, "optimizer": 256}


def test_reference_run_is_deterministic():
    a = reference_run(TINY.with_(layers=1), 16, 2, 2, 3, 1e-3)
    b = reference_run(TINY.with_(layers=1), 16, 2, 2, 3, 1e-3)
    assert a[0] == b[0]
    assert all(torch.equal(a[1][k], b[1][k]) for k in a[1])


def _fake_rank(rank, sb, act, comm):
    return {"rank": rank, "stage": 0, "step_s": 0.1, "state_bytes": sb, "activation_bytes": act,
            "collective_bytes": comm, "losses": [1.0, 0.9],
            "equivalence": {"max_abs_diff_params": 1e-7, "max_abs_diff_loss": 1e-7, "params_compared": 3}}


def test_build_record_flags_exactness_and_equivalence():
    from autoplace.profile.report import build_record, predict
    s = {"seq_len": 64, "global_batch": 8, "steps": 1, "warmup": 1, "seed": 0, "lr": 1e-3}
    plan = parse_plan("zero=3").resolved(2)
    p = predict(TINY, s, plan, 2, 0)
    sb = {k: int(v) for k, v in p["state_bytes"].items()}
    ranks = [_fake_rank(r, sb, p["activation_bytes"], p["collective_bytes"]) for r in range(2)]
    rec = build_record(TINY, s, plan, 2, ranks)
    assert rec["state_bytes_exact"] and rec["legal"] and rec["equivalence"]["equivalent"]
    assert rec["activation_gap"] == 0.0
    ranks[1]["state_bytes"] = dict(sb, grads=sb["grads"] + 4)
    assert not build_record(TINY, s, plan, 2, ranks)["state_bytes_exact"]
    failed = build_record(TINY, s, plan, 2, None, status="timeout", error="hung")
    assert failed["status"] == "timeout" and failed["ranks"] == [] and failed["error"] == "hung"


def test_negative_control_plan_is_rejected_by_rule_gi():
    from autoplace.placement.rules import Ctx, check
    from autoplace.profile.report import train_spec
    ctx = Ctx(TINY, train_spec({"seq_len": 64, "global_batch": 8}), 2)
    assert "GI" in {v.rule for v in check(ctx, parse_plan("omit=dp_grad_reduce").resolved(2))}
    assert "GI" in {v.rule for v in check(ctx, parse_plan("tp=2,sp=1,omit=sp_norm_reduce").resolved(2))}
    assert not check(ctx, parse_plan("tp=2,sp=1").resolved(2))


def test_candidate_scaling():
    from autoplace.profile.candidates import _global_batch, _scale, scale_model
    p = _scale(parse_plan("tp=8,pp=4,vpp=2,zero=1").resolved(64), 2)
    assert (p.tp, p.pp, p.dp) == (1, 2, 1) and p.schedule == "interleaved" and p.vpp == 2
    p = _scale(parse_plan("tp=8,vpp=1,zero=1").resolved(64), 2)
    assert (p.tp, p.pp, p.dp) == (2, 1, 1)
    p = _scale(parse_plan("tp=1,pp=2,dp_replicate=2,zero=3").resolved(64), 4)
    assert (p.pp, p.dp, p.dp_replicate) == (2, 2, 2)
    assert _global_batch([parse_plan("pp=2,mbs=1").resolved(2), parse_plan("mbs=2").resolved(2)]) == 4
    assert scale_model(get_preset("7b"), [p], "gloo", 2).name == TINY.name
    assert scale_model(TINY, [p], "gloo", 2) is TINY


def test_torchrun_argv():
    from autoplace.profile.launch import torchrun_argv
    a = torchrun_argv(4)
    assert "--standalone" in a and a[a.index("--nproc-per-node") + 1] == "4"
    b = torchrun_argv(8, nnodes=2, rdzv_endpoint="node0:29500", node_rank=1)
    assert "--standalone" not in b and "c10d" in b and "node0:29500" in b


def test_slurm_template_and_commands(tmp_path):
    from autoplace.profile.calibrate import slurm_template, torchrun_command_lines
    t = slurm_template(4, 8, "nccl", "prof.toml")
    assert "#SBATCH --nodes=4" in t and "--nproc-per-node 8" in t and "--rdzv-backend c10d" in t
    assert "autoplace.profile.calib_worker" in t and "--fit calib_raw.json --out prof.toml" in t
    lines = torchrun_command_lines(2, 8, "nccl", "raw.json", "head")
    assert len(lines) == 3 and "--node-rank 1" in lines[1] and "head:29500" in lines[0]


def test_select_runnable_skips_what_the_runner_cannot_do_and_duplicates():
    from autoplace.plan import parse_plan
    from autoplace.profile.candidates import select_runnable
    from autoplace.specs.presets import get_preset
    ranked = [parse_plan(t) for t in ("zero=1,offload=optimizer", "cp=2", "zero=1,tp=8", "zero=1,tp=4",
                                      "zero=2", "zero=3")]
    taken, skipped = select_runnable(get_preset("llama-tiny"), ranked, 2, nproc=2, backend="gloo")
    assert taken == [2, 4]                    # tp=8 (run as tp=2 on 2 ranks) and zero=2
    why = dict(skipped)
    assert "offload" in why[0] and "cp > 1" in why[1]
    assert "like a candidate already taken" in why[3]     # tp=4 also runs as tp=2 here


def test_runner_refusals_separate_the_machine_from_the_runner():
    from autoplace.profile.capabilities import (
        TORCH_NATIVE,
        Unsupported,
        capability_refusals,
        check_runnable,
        machine_refusals,
        runner_refusals,
    )
    from autoplace.profile.settings import DEFAULTS
    job = dict(DEFAULTS)
    fsdp_off = parse_plan("zero=3,offload=params").resolved(2)
    # FSDP2 CPUOffloadPolicy: expressible, but only where there is an accelerator to offload from
    assert capability_refusals(fsdp_off, TINY, job) == []
    assert runner_refusals(fsdp_off, TINY, job, "nccl", world=2) == []
    assert machine_refusals(fsdp_off, "gloo", 2) == runner_refusals(fsdp_off, TINY, job, "gloo", world=2)
    assert "CPU device has nothing to offload to" in machine_refusals(fsdp_off, "gloo", 2)[0]
    # optimizer offload is not FSDP2's: refused by the runner on any machine
    opt_off = parse_plan("zero=1,offload=optimizer").resolved(2)
    assert any("params + grads + optimizer" in r for r in capability_refusals(opt_off, TINY, job))
    # cp > 1: CUDA-only kernels (machine) and not implemented (runner); nccl keeps the second
    cp = parse_plan("cp=2").resolved(2)
    assert len(runner_refusals(cp, TINY, job, "gloo", world=2)) == 2
    assert runner_refusals(cp, TINY, job, "nccl", world=2) == ["cp > 1: context parallelism is not "
                                                               "implemented by the plan runner"]
    # the world is checked only when given; MoE and precision are runner switches
    assert machine_refusals(parse_plan("tp=2").resolved(2), "gloo", 4)[0].endswith("≠ 4 ranks")
    moe = TINY.with_(num_experts=4, top_k=2, expert_ffn_hidden=128)
    assert capability_refusals(parse_plan("ep=2").resolved(2), moe, job) == []
    assert capability_refusals(parse_plan("tp=2").resolved(2), moe, job) == \
        ["MoE with tp > 1 (expert tensor parallelism) is not implemented by the plan runner"]
    assert capability_refusals(parse_plan("zero=3,ep=2").resolved(2), moe, job)[0].startswith("MoE with zero=3")
    assert capability_refusals(parse_plan("ep=2").resolved(2), TINY, job) == \
        ["ep=2 on a dense model (num_experts = 0)"]
    assert capability_refusals(parse_plan("zero=0").resolved(2), TINY, dict(job, precision="bf16")) == []
    assert capability_refusals(parse_plan("zero=0").resolved(2), TINY, dict(job, precision="fp16")) == \
        ["the runner trains in bf16/fp32 (precision=fp16)"]
    fp8 = capability_refusals(parse_plan("zero=0").resolved(2), TINY, dict(job, precision="fp8"))
    import importlib.util
    if importlib.util.find_spec("transformer_engine") is None:
        assert fp8 == ["precision=fp8 needs Transformer Engine (transformer_engine is not installed)"]
    assert TORCH_NATIVE.moe and TORCH_NATIVE.offload == {"none", "params"}
    # every reason at once, joined
    with pytest.raises(Unsupported, match=r"kv_heads=2 .*; seq_len 66 not divisible by tp=4$"):
        check_runnable(parse_plan("tp=4,sp=1").resolved(4), TINY, dict(job, seq_len=66), "gloo", world=4)
