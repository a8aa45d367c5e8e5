"""Megatron-LM (`pretrain_gpt.py`) command-line arguments and the environment the plan needs.

Files: ``megatron_args.txt`` (one ``--flag [value]`` per line: degrees, interleaving, SP/CP/EP,
ZeRO path, overlap, recompute, batch, precision, model shape), ``megatron_env.sh`` (exports such as
CUDA_DEVICE_MAX_CONNECTIONS) and ``megatron_launch.sh`` (torchrun + pretrain_gpt.py reading both).

Flag semantics follow NVIDIA/Megatron-LM `megatron/training/arguments.py` (validate_args) and
megatron-core's `ModelParallelConfig`/`TransformerConfig`, as summarised in
shared/docs/launchers_and_libraries.md §1b:

* data parallelism is derived (dp = W / (tp·pp·cp)); it is never passed;
* interleaving is requested with ``--num-layers-per-virtual-pipeline-stage`` (there is no VPP-size
  flag); the micro-batch group size G goes to ``--microbatch-group-size-per-virtual-pipeline-stage``
  when it differs from Megatron's default G = pp; uneven stage splits use
  ``--decoder-first/last-pipeline-num-layers`` (older releases too) or, when the middle stages are
  uneven as well, ``--pipeline-model-parallel-layout`` (megatron-core ≥ 0.13);
* ZeRO-1 is the distributed optimizer; ZeRO-2/3 use Megatron-FSDP (``--use-megatron-fsdp
  --data-parallel-sharding-strategy optim_grads|optim_grads_params`` plus the flags its user guide
  requires). Megatron-FSDP is chosen over ``--use-torch-fsdp2`` because it covers ZeRO-2 as well as
  ZeRO-3 and composes with TP and EP; the torch-FSDP2 path rejects pp > 1 and ep > 1. HSDP
  (dp_replicate > 1) is ``--num-distributed-optimizer-instances r`` on either path;
* on GPUs before Blackwell, tp > 1 or cp > 1 asserts CUDA_DEVICE_MAX_CONNECTIONS=1, while the FSDP
  paths assert it is not 1 — `megatron_env.sh` sets it per plan;
* what the cost model priced from the runtime is written too (`autoplace.runtimes.switches`): the
  FP8/FP4 recipe (``--fp8-recipe tensorwise|delayed|blockwise|mxfp8``, ``--fp4-format e2m1
  --fp4-recipe nvfp4``) and the 1-byte parameter copy the runtime keeps (``--fp8-param-gather`` /
  ``--fp4-param-gather``, which need the distributed optimizer or Megatron-FSDP), the MoE token
  dispatcher (``--moe-token-dispatcher-type alltoall|allgather`` or ``flex`` with
  ``--moe-flex-dispatcher-backend deepep|hybridep``), EP all-to-all overlap
  (``--overlap-moe-expert-parallel-comm``; its conditions are the runtime's capability rule
  RT-ep-overlap),
  per-layer CUDA graphs (``--cuda-graph-impl transformer_engine``; MoE layers capture attention,
  router and dispatch preprocessing only, ``--cuda-graph-scope attn moe_router moe_preprocess``
  (megatron-core 0.16; later releases call it ``--cuda-graph-modules`` and still read this one),
  since dropless experts are not graph-safe; full recompute needs a full-iteration graph and is
  refused); FP8 attention has no Megatron-LM flag (refused).
"""

from __future__ import annotations

import numpy as np

from autoplace.cost.precision import resolve_recipe
from autoplace.export.common import (
    ExportJob,
    as_job,
    header_lines,
    join_flags,
    recompute_per_stage,
    virtual_chunks,
    zero_level,
)
from autoplace.export.launcher import Launcher, _a, recompute_kind, rule, train_is

NAME = "megatron"
FILES = ("megatron_args.txt", "megatron_env.sh", "megatron_launch.sh")


def _rules() -> tuple:
    """Megatron-LM's format rules (the capability rules come from runtimes/megatron-core.toml)."""
    R = lambda rid, title, v, m: rule(NAME, rid, title, v, m)  # noqa: E731
    return (
        R("shape", "a model shape for the size flags",
          lambda c, p: _a(not c.shaped),
          lambda c, p: "a parameter-count-only model (--params) has no shape for --num-layers/--hidden-size"),
        R("tp-overlap", "--tp-comm-overlap needs --sequence-parallel",
          lambda c, p: _a(p.tp_overlap).astype(bool) & ~(_a(p.sp).astype(bool) & (_a(p.tp) > 1)),
          lambda c, p: "tp_overlap needs sequence parallelism (--tp-comm-overlap asserts --sequence-parallel)"),
        R("moe-sp", "expert parallelism with TP needs SP",
          lambda c, p: (_a(p.ep) > 1) & (_a(p.tp) > 1) & ~_a(p.sp).astype(bool),
          lambda c, p: f"ep={p.ep} with tp={p.tp} needs sequence parallelism in Megatron's MoE layers (sp=1)"),
        R("moe-fp16", "expert parallelism is not supported with fp16",
          lambda c, p: (_a(p.ep) > 1) & _a(train_is(c, lambda t: t.precision == "fp16")),
          lambda c, p: "expert parallelism is not supported with fp16 in Megatron (arguments.py)"),
        R("offload-fsdp", "optimizer CPU offload runs with the distributed optimizer",
          lambda c, p: (_a(p.off) == 1) & (_a(p.zero) >= 2),
          lambda c, p: f"offload=optimizer with zero={p.zero}: Megatron's optimizer CPU offload runs with the "
                       "distributed optimizer (zero=1)"),
        R("qkv-bias", "--add-qkv-bias only with --disable-bias-linear",
          lambda c, p: _a(c.shaped and c.model.qkv_bias and (c.model.attn_bias or c.model.mlp_bias)),
          lambda c, p: "Q/K/V-only biases together with other linear biases: Megatron's --add-qkv-bias applies "
                       "only with --disable-bias-linear"),
        R("bias", "one switch for all linear biases",
          lambda c, p: _a(c.shaped and c.model.attn_bias != c.model.mlp_bias),
          lambda c, p: "attention and MLP biases differ (attn_bias != mlp_bias): Megatron's --disable-bias-linear "
                       "switches all linear biases together"),
        R("activation", "an MLP activation Megatron-LM has a flag for",
          lambda c, p: _a(c.shaped and _activation_flag(c.model) is None),
          lambda c, p: f"{'gated ' if c.model.gated_mlp else ''}{_act(c.model)} MLP: Megatron-LM's flags are GeLU "
                       "(default), --swiglu (gated SiLU) and --squared-relu; no flag for this activation"),
        R("attention", "attention the flags write: full causal (GQA, MLA)",
          lambda c, p: _a(c.shaped and bool(c.model.sliding_window or c.model.attn_sinks)),
          lambda c, p: f"{c.model.name} uses "
                       + " and ".join(x for x in (f"a {c.model.sliding_window}-token sliding window"
                                                  if c.model.sliding_window else "",
                                                  "attention sinks" if c.model.attn_sinks else "") if x)
                       + ": this export writes full causal attention only (run it from the model's "
                         "Megatron-Bridge provider)"),
        R("fp8-recipe", "an FP8 recipe --fp8-recipe names",
          lambda c, p: _a(train_is(c, lambda t: t.precision == "fp8" and resolve_recipe(t, c.hw)
                                   not in FP8_RECIPE_FLAG)),
          lambda c, p: f"FP8 recipe '{resolve_recipe(c.train)}': Megatron's --fp8-recipe takes "
                       f"{', '.join(FP8_RECIPE_FLAG.values())} (autoplace {', '.join(FP8_RECIPE_FLAG)})"),
        R("fp8-attention", "FP8 attention has no Megatron-LM flag",
          lambda c, p: _a(train_is(c, lambda t: t.precision in ("fp8", "fp4") and t.rt.kernels.fp8_attention)),
          lambda c, p: "FP8 attention (runtime fp8_attention=true): Megatron-LM core 0.16.1 … 0.19 has no command-line "
                       "flag for TransformerConfig.fp8_dot_product_attention (its argument factory excludes it); "
                       "drop the fp8_attention switch or set it in a Megatron-Bridge recipe"),
        R("fp8-gather-offload", "--fp8-param-gather with optimizer CPU offload needs the delayed recipe",
          lambda c, p: (_a(p.off) == 1) & (_a(p.zero) >= 1)
          & _a(train_is(c, lambda t: t.precision == "fp8" and t.rt.precision.fp8_param_gather
                        and resolve_recipe(t, c.hw) != "delayed")),
          lambda c, p: f"offload=optimizer with the FP8 parameter copy (--fp8-param-gather) and recipe "
                       f"'{resolve_recipe(c.train, c.hw)}': Megatron-LM asserts --fp8-recipe delayed with optimizer "
                       "CPU offload (arguments.py); use --fp8-recipe delayed or no optimizer offload"),
        R("cuda-graphs-recompute", "per-layer CUDA graphs without full recompute",
          lambda c, p: _a(train_is(c, lambda t: t.rt.kernels.cuda_graphs and not t.rt.kernels.cuda_graph_experts))
          & (recompute_kind(c, p)[0] >= 2),
          lambda c, p: f"per-layer CUDA graphs (runtime cuda_graphs=true) with recompute={p.recompute}: Megatron "
                       "captures full recompute only in a full-iteration graph; use selective or no recompute, "
                       "cuda_graphs=full_iteration (dense models) or cuda_graphs=false"),
        R("cuda-graphs-full-moe", "full-iteration CUDA graphs of a dense model",
          lambda c, p: _a(train_is(c, lambda t: t.rt.kernels.cuda_graphs and t.rt.kernels.cuda_graph_experts))
          & _a(bool(c.shaped and c.model.is_moe)),
          lambda c, p: "cuda_graphs=full_iteration with a MoE model: capturing the routed experts needs "
                       "Megatron-Core's sync-free dropless dispatch (per-rank expert capacity, paged stash), "
                       "which this export does not write; use cuda_graphs=true (per-layer graphs)"),
        R("block-vpp", "block recompute per virtual chunk",
          lambda c, p: _block_vpp_bad(c, p),
          lambda c, p: f"block recompute of {p.recompute_layers} layers per stage with vpp={p.vpp}: Megatron's block "
                       f"method recomputes the first N layers of each of the {p.vpp} virtual chunks; use a "
                       f"multiple of {p.vpp}"),
    )


# autoplace recipe → Megatron's --fp8-recipe (TE recipes; transformer_config.py fp8_recipe)
FP8_RECIPE_FLAG = {"current": "tensorwise", "delayed": "delayed", "blockwise": "blockwise", "mxfp8": "mxfp8"}


def _block_vpp_bad(c, p):
    kind, k = recompute_kind(c, p)
    v = _a(p.v)
    return (kind == 3) & (v > 1) & (k % np.maximum(v, 1) != 0)


def _act(m) -> str:
    return m.activation or ("silu" if m.gated_mlp else "gelu")


def _activation_flag(m):
    """The Megatron-LM flag for the model's MLP activation ('' = the default GeLU; None = no flag)."""
    act = _act(m)
    if m.gated_mlp:
        return "--swiglu" if act == "silu" else None
    return {"gelu": "", "relu2": "--squared-relu"}.get(act)


class Megatron(Launcher):
    name = NAME
    files = FILES
    runtime = "megatron-core"

    def format_rules(self):
        return _rules()

    def notes(self, job):
        return notes(job)

    def write(self, job):
        return _write(job)


LAUNCHER = Megatron()


def supports(plan, model, train=None, world=None, hw=None) -> list[str]:
    return LAUNCHER.supports(plan, model, train, world, hw)


def emit(doc_or_job) -> dict[str, str]:
    return LAUNCHER.emit(doc_or_job)


def flags_need(job) -> dict[str, str]:
    """flag → the first Megatron-LM release that parses it, for the flags this export writes (the
    runtime file's supports.flags_since)."""
    rt = LAUNCHER.runtime_for(job.train)
    since = dict(rt.supports.flags_since) if rt is not None else {}
    words = set(_write(job)["megatron_args.txt"].split()) if since else set()
    return {f: tag for f, tag in since.items() if f in words}


def notes(job) -> list[str]:
    job = as_job(job)
    out = [f"{f} needs Megatron-LM {tag} or later (older parsers reject it)" for f, tag in flags_need(job).items()]
    if job.plan.rank_order != "tp-cp-ep-dp-pp":
        out.append("Megatron orders ranks tp-cp-ep-dp-pp; for dense plans that is the same grid as "
                   "torchtitan's pp-dp-cp-tp order")
    return out


def flags(job: ExportJob) -> list[tuple[str, object]]:
    """The plan as an ordered list of (flag, value) pairs; value None for a bare switch."""
    plan, m, t = job.plan, job.model, job.train
    rt = LAUNCHER.runtime_for(t)
    zero, _ = zero_level(plan)
    f: list[tuple[str, object]] = []
    # ---- degrees --------------------------------------------------------------------------------
    f.append(("--tensor-model-parallel-size", plan.tp))
    f.append(("--pipeline-model-parallel-size", plan.pp))
    if plan.pp > 1:
        acct = _accounting_flags(job)
        if acct or plan.layer_split:
            f += acct or _uneven_split_flags(job)
        if plan.v > 1:
            if not plan.layer_split and not acct:     # with a split the layout sets the virtual stages
                f.append(("--num-layers-per-virtual-pipeline-stage", m.layers // plan.pp // plan.v))
            if plan.G != plan.pp:
                f.append(("--microbatch-group-size-per-virtual-pipeline-stage", plan.G))
    if plan.sp and plan.tp > 1:
        f.append(("--sequence-parallel", None))
    if plan.tp_overlap:
        f.append(("--tp-comm-overlap", None))
    f.append(("--context-parallel-size", plan.cp))
    if m.is_moe:
        f.append(("--num-experts", m.num_experts))
        f.append(("--moe-router-topk", m.top_k))
        f.append(("--moe-ffn-hidden-size", m.f_expert))
        pattern = moe_layer_pattern(m)
        if 0 in pattern:   # explicit list: Megatron's integer form puts MoE on layers i % N == 0
            f.append(("--moe-layer-freq", "[" + ",".join(map(str, pattern)) + "]"))
        if m.shared_expert_ffn_hidden:
            f.append(("--moe-shared-expert-intermediate-size", m.shared_expert_ffn_hidden))
            if m.shared_expert_gate:
                f.append(("--moe-shared-expert-gate", None))
        f.append(("--expert-model-parallel-size", plan.ep))
        f.append(("--expert-tensor-parallel-size", plan.t_exp))
        if plan.ep > 1:
            disp = rt.kernels.moe_dispatch            # the runtime's dispatcher (switch moe_dispatch)
            if disp in ("deepep", "hybridep"):
                f += [("--moe-token-dispatcher-type", "flex"), ("--moe-flex-dispatcher-backend", disp)]
            else:
                f.append(("--moe-token-dispatcher-type", disp))
            if plan.ep_overlap:
                f.append(("--overlap-moe-expert-parallel-comm", None))
        if rt.kernels.moe_grouped_gemm:       # the runtime's expert GEMMs (the cost model reads the same)
            f.append(("--moe-grouped-gemm", None))
        if rt.kernels.moe_fused_mlp:          # switch moe_fused_mlp: TE's fused grouped MLP (MCore ≥ 0.18)
            f.append(("--use-transformer-engine-op-fuser", None))
    # ---- data parallel / ZeRO -------------------------------------------------------------------
    if zero == 1:
        f.append(("--use-distributed-optimizer", None))
    elif zero >= 2:
        f += [("--use-megatron-fsdp", None),
              ("--data-parallel-sharding-strategy", "optim_grads" if zero == 2 else "optim_grads_params"),
              ("--use-distributed-optimizer", None),
              ("--no-gradient-accumulation-fusion", None),
              ("--ckpt-format", "fsdp_dtensor")]
    if zero >= 1 and plan.dp_replicate > 1:
        f.append(("--num-distributed-optimizer-instances", plan.dp_replicate))
    if plan.dp_bucket_mb > 0 and t is not None:
        f.append(("--ddp-bucket-size", int(round(plan.dp_bucket_mb * 1e6 / t.b_G))))
    if plan.dp_overlap:
        f.append(("--overlap-grad-reduce", None))
        if zero >= 1:
            f.append(("--overlap-param-gather", None))
    if plan.off == 1:
        f += [("--optimizer-cpu-offload", None), ("--use-precision-aware-optimizer", None),
              ("--optimizer-offload-fraction", _num(plan.offload_fraction))]
    # ---- recomputation --------------------------------------------------------------------------
    rc = recompute_per_stage(job)
    kind, k = rc.kind, rc.layers
    if kind == "selective":
        f.append(("--recompute-granularity", "selective"))
        if plan.recompute_modules:
            f.append(("--recompute-modules", " ".join(plan.recompute_modules)))
    elif kind == "full":
        f += [("--recompute-granularity", "full"), ("--recompute-method", "uniform"),
              ("--recompute-num-layers", 1)]
    elif kind == "block":
        f += [("--recompute-granularity", "full"), ("--recompute-method", "block"),
              ("--recompute-num-layers", k // plan.v)]
    # ---- batch ----------------------------------------------------------------------------------
    f.append(("--micro-batch-size", plan.mbs))
    if t is not None:
        f.append(("--global-batch-size", t.global_batch))
        f.append(("--seq-length", t.seq_len))
    # ---- precision ------------------------------------------------------------------------------
    prec = t.precision if t is not None else "bf16"
    if prec in ("bf16", "fp8", "fp4"):
        f.append(("--bf16", None))
    elif prec == "fp16":
        f.append(("--fp16", None))
    if prec == "fp8":
        f.append(("--fp8-format", "hybrid"))
        f.append(("--fp8-recipe", FP8_RECIPE_FLAG[resolve_recipe(t, job.hw) or "delayed"]))
    elif prec == "fp4":
        f += [("--fp4-format", "e2m1"), ("--fp4-recipe", "nvfp4")]
    if prec in ("fp8", "fp4") and rt.precision.fp8_param_gather and zero >= 1:
        # the 1-byte parameter copy the cost model holds (cost.precision.param_store_bytes)
        f.append(("--fp8-param-gather" if prec == "fp8" else "--fp4-param-gather", None))
    if rt.kernels.cuda_graphs and rt.kernels.cuda_graph_experts:
        # megatron-core 0.16.x spelling (0.19 migrates it to --cuda-graph-impl full_iteration); both
        # assert the NaN check off for a full-iteration graph (arguments.py)
        f += [("--cuda-graph-impl", "local"), ("--cuda-graph-scope", "full_iteration"),
              ("--no-check-for-nan-in-loss-and-grad", None)]
    elif rt.kernels.cuda_graphs:
        f.append(("--cuda-graph-impl", "transformer_engine"))
        if m.is_moe:
            f.append(("--cuda-graph-scope", "attn moe_router moe_preprocess"))
    if t is not None and t.grad_reduce_bytes == 2 and prec in ("bf16", "fp8"):
        f.append(("--grad-reduce-in-bf16", None))
    # ---- model shape ----------------------------------------------------------------------------
    f.append(("--num-layers", m.layers))
    f.append(("--hidden-size", m.hidden))
    f.append(("--ffn-hidden-size", m.ffn_hidden))
    f.append(("--num-attention-heads", m.heads))
    if m.a_kv != m.heads:
        f += [("--group-query-attention", None), ("--num-query-groups", m.a_kv)]
    if m.head_dim and m.head_dim != m.hidden // m.heads:
        f.append(("--kv-channels", m.head_dim))
    seq = t.seq_len if t is not None else m.max_seq_len
    f.append(("--max-position-embeddings", max(m.max_seq_len, seq)))
    f.append(("--position-embedding-type", {"rope": "rope", "learned": "learned_absolute",
                                             "none": "none"}[m.position]))
    if m.position == "rope":
        f.append(("--rotary-base", int(m.rope_theta)))
    f.append(("--normalization", "RMSNorm" if m.norm == "rmsnorm" else "LayerNorm"))
    act = _activation_flag(m)
    if act:
        f.append((act, None))
    if not m.attn_bias and not m.mlp_bias:
        f.append(("--disable-bias-linear", None))
        if m.qkv_bias:
            f.append(("--add-qkv-bias", None))
    if m.mla:
        # multi-latent attention (Megatron-LM's DeepSeek-V3 flags): --qk-layernorm is the latent
        # RMSNorms there; --qk-head-dim is the non-rotary part of the per-head query/key width
        f.append(("--multi-latent-attention", None))
        if m.q_lora_rank:
            f.append(("--q-lora-rank", m.q_lora_rank))
        f += [("--kv-lora-rank", m.kv_lora_rank), ("--qk-head-dim", m.qk_nope_head_dim),
              ("--qk-pos-emb-head-dim", m.qk_rope_head_dim), ("--v-head-dim", m.v_head_dim)]
    if m.qk_norm or m.mla:
        f.append(("--qk-layernorm", None))
    if m.mtp_layers:
        f.append(("--mtp-num-layers", m.mtp_layers))
    if not m.tied_embeddings:
        f.append(("--untie-embeddings-and-output-weights", None))
    if t is not None:
        f.append(("--make-vocab-size-divisible-by", t.vocab_divisible_by))
        if not t.dropout:
            f += [("--attention-dropout", 0), ("--hidden-dropout", 0)]
    return f


def moe_layer_pattern(m) -> list[int]:
    """1 for an MoE layer, 0 for a dense one (ModelSpec: layer i is MoE iff (i+1) % freq == 0 and
    i is not in dense_layer_ids)."""
    dense = set(m.dense_layer_ids)
    return [0 if i in dense or (i + 1) % m.moe_layer_freq else 1 for i in range(m.layers)]


def _accounting_flags(job: ExportJob) -> list[tuple[str, object]]:
    """Megatron-Core's embedding / loss pipeline accounting when the plan asks for it and its split
    is the one the flags imply (plan.with_pipeline_accounting); [] otherwise."""
    from dataclasses import replace

    from autoplace.plan import with_pipeline_accounting
    p = job.plan
    if not (p.account_embedding or p.account_loss):
        return []
    if p.layer_split and with_pipeline_accounting(replace(p, layer_split=()), job.model.layers).layer_split \
            != tuple(p.layer_split):
        return []
    return ([("--account-for-embedding-in-pipeline-split", None)] if p.account_embedding else []) \
        + ([("--account-for-loss-in-pipeline-split", None)] if p.account_loss else []) \
        + ([("--num-virtual-stages-per-pipeline-rank", p.v)] if p.v > 1 else [])


def _uneven_split_flags(job: ExportJob) -> list[tuple[str, object]]:
    split = [int(x) for x in job.plan.layer_split]
    first, last, mid = split[0], split[-1], split[1:-1]
    v = job.plan.v
    if v == 1 and (not mid or len(set(mid)) == 1):
        return [("--decoder-first-pipeline-num-layers", first), ("--decoder-last-pipeline-num-layers", last)]
    # explicit layout over the pp·v (virtual) stages in layer order: E = embedding, t = transformer
    # layer, m = multi-token-prediction module (on the last stage), L = loss; stages separated by '|'
    chunks = virtual_chunks(split, v)
    stages = [f"t*{n}" if n > 1 else ("t" if n == 1 else "") for n in chunks]
    stages[0] = "E" + stages[0]
    stages[-1] = stages[-1] + "m" * job.model.mtp_layers + "L"
    return [("--pipeline-model-parallel-layout", "|".join(stages))]


def env(job: ExportJob) -> dict[str, str | None]:
    """Environment variables the plan needs (None = must be unset)."""
    plan = job.plan
    zero, _ = zero_level(plan)
    if zero >= 2:
        return {"CUDA_DEVICE_MAX_CONNECTIONS": None}
    if plan.tp > 1 or plan.cp > 1:
        return {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    return {}


def _write(job: ExportJob) -> dict[str, str]:
    plan = job.plan
    zero, _ = zero_level(plan)
    fl = flags(job)
    args_text = join_flags(fl)
    # a flag newer than the oldest release the runtime covers (runtime file supports.flags_since):
    # the file says which Megatron-LM it needs, where a reader of the file looks first
    rt = LAUNCHER.runtime_for(job.train)
    since = dict(rt.supports.flags_since) if rt is not None else {}
    newer = {k: since[k] for k, _ in fl if k in since}
    need = []
    if newer:
        tag = max(newer.values(), key=lambda t: tuple(int(x) for x in t.removeprefix("core_v").split(".")))
        need = [f"# needs Megatron-LM {tag} or later ({', '.join(newer)})"]
        args_text = need[0] + "\n" + args_text
    # env -------------------------------------------------------------------------------------------
    e = env(job)
    env_lines = ["# shellcheck shell=bash"] + header_lines(job, "Megatron-LM environment") + [""]
    why = ("Megatron-FSDP asserts CUDA_DEVICE_MAX_CONNECTIONS != 1 (it needs parallel CUDA streams)"
           if zero >= 2 else
           f"tp={plan.tp}, cp={plan.cp}: Megatron asserts CUDA_DEVICE_MAX_CONNECTIONS=1 on GPUs before "
           "Blackwell so TP/CP communication kernels are issued in order")
    for k, v in e.items():
        env_lines.append(f"# {why}")
        env_lines.append(f"unset {k}" if v is None else f"export {k}={v}")
    if not e:
        env_lines.append("# no environment variables required by this plan")
    # launch ----------------------------------------------------------------------------------------
    vocab = job.model.vocab
    launch = ["#!/usr/bin/env bash"] + header_lines(job, "Megatron-LM launch") + need + [
        "# One copy of this script runs on every node (torchrun static rendezvous, as in Megatron's",
        "# examples). Set MEGATRON_LM to a Megatron-LM checkout; override DATA_ARGS / TRAIN_ARGS for",
        "# a real run (the defaults train on mock data with a null tokenizer of the model's vocab).",
        "set -euo pipefail",
        'HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"',
        'source "$HERE/megatron_env.sh"',
        'MEGATRON_LM="${MEGATRON_LM:?set MEGATRON_LM to your Megatron-LM checkout}"',
        f"NNODES={job.nodes}            # fixed by the plan: {job.world} GPUs",
        f"NPROC_PER_NODE={job.nproc_per_node}",
        'NODE_RANK="${NODE_RANK:-${SLURM_NODEID:-0}}"',
        'MASTER_ADDR="${MASTER_ADDR:-localhost}"',
        'MASTER_PORT="${MASTER_PORT:-29500}"',
        f'DATA_ARGS="${{DATA_ARGS:---mock-data --tokenizer-type NullTokenizer --vocab-size {vocab - 1}}}"',
        'TRAIN_ARGS="${TRAIN_ARGS:---train-iters 1000 --lr 3.0e-4 --min-lr 3.0e-5 --lr-decay-style cosine '
        '--lr-warmup-iters 100 --weight-decay 0.1 --clip-grad 1.0 --adam-beta1 0.9 --adam-beta2 0.95 '
        '--init-method-std 0.02 --log-interval 10 --eval-iters 0}"',
        "# plan flags: one per line in megatron_args.txt (read without glob expansion)",
        "PLAN_ARGS=()",
        'while read -r line; do [[ -z "$line" || "$line" == \\#* ]] && continue; '
        'read -ra parts <<< "$line"; PLAN_ARGS+=("${parts[@]}"); done < "$HERE/megatron_args.txt"',
        "# shellcheck disable=SC2086",
        'exec torchrun --nproc-per-node "$NPROC_PER_NODE" --nnodes "$NNODES" --node-rank "$NODE_RANK" \\',
        '    --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT" \\',
        '    "$MEGATRON_LM/pretrain_gpt.py" "${PLAN_ARGS[@]}" $DATA_ARGS $TRAIN_ARGS "$@"',
    ]
    return {"megatron_args.txt": args_text, "megatron_env.sh": "\n".join(env_lines) + "\n",
            "megatron_launch.sh": "\n".join(launch) + "\n"}


def _num(x: float) -> str:
    return f"{x:g}"
