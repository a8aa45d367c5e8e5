"""Record → specs: translate one validation record (shared/validation schema) into the planner's inputs.

Only what the record states is translated; nothing is tuned per record, model or source. The stack
that ran the record is a *runtime* (`autoplace.runtimes.infer.runtime_for_record`: framework, release
and era → one runtime file); every default the record leaves open comes from that runtime — optimizer
regime, gradient-reduce width, distributed optimizer, SP with TP, overlap switches, buckets,
vocabulary padding, attention kernel class, dropout, micro-batch — and is written into
`Mapped.assumptions` with the runtime's name. Switches a record states in its notes (workload-config
knobs: CUDA graphs, the MoE dispatcher, EP all-to-all overlap, FP8 attention, a pipeline layout) are
applied on top. A record that cannot be translated raises `Skip(reason)`.

Readers: autoplace.validate.record; the model: autoplace.validate.model_map; the plan fields:
autoplace.validate.plan_map.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from autoplace.errors import AutoplaceError
from autoplace.plan import Plan, lighter_ends_split
from autoplace.runtimes import load_runtime
from autoplace.runtimes.infer import benchmark_overrides, runtime_for_record
from autoplace.runtimes.switches import apply_settings, settings_text
from autoplace.specs.hardware import HardwareSpec, load_hardware
from autoplace.specs.model import ModelSpec, params_only
from autoplace.specs.training import TrainingSpec, training_spec
from autoplace.validate.model_map import map_model
from autoplace.validate.plan_map import (
    dp_overlap_of,
    expert_degrees,
    offload_of,
    plan_degrees,
    pp_layout_split,
    schedule_of,
    sharding_of,
)
from autoplace.validate.record import (
    GIB,
    Skip,
    as_float,
    as_int,
    citation_year,
    parse_global_batch,
    parse_layer_recompute,
    parse_precision,
    parse_recipe,
    parse_recompute,
    parse_recompute_modules,
    parse_zero,
    record_fields_text,
    record_text,
    source_key,
    table_key,
    workload_knobs,
)

__all__ = ["GIB", "Mapped", "Skip", "as_float", "as_int", "map_shaped", "map_states_only", "parse_precision",
           "parse_recompute", "parse_zero", "source_key", "table_key"]


@dataclass
class Mapped:
    model: ModelSpec
    train: TrainingSpec
    plan: Plan
    hw: HardwareSpec
    world: int
    framework: str                     # the runtime's family (megatron, deepspeed, fsdp, torchtitan, …)
    recompute: str                     # none | selective | full | block (the plan's)
    peak_stated: float | None          # FLOP/s the source divides by (None → profile peak)
    assumptions: list[str] = field(default_factory=list)

    def describe(self) -> dict:
        t = self.train
        return {"framework": self.framework, "runtime": t.rt.name, "runtime_version": t.rt.version, "hardware": self.hw.name,
                "arch": self.hw.arch, "moe": bool(self.model.is_moe), "gpus": self.world,
                "model": self.model.name, "params": self.model.total_params(),
                "plan": self.plan.short() + ("" if self.plan.dp_overlap else ",dp_overlap=0")
                + (",fetch_sync" if self.plan.fetch_sync and self.plan.zero == 3 else "")
                + (",tp_overlap" if self.plan.tp_overlap else "")
                + (",ep_overlap" if getattr(self.plan, "ep_overlap", False) and self.plan.ep > 1 else "")
                + (f",schedule={self.plan.schedule}" if self.plan.pp > 1 else "")
                + (f",layers={':'.join(map(str, self.plan.layer_split))}" if self.plan.layer_split else ""),
                "training": {"precision": t.precision, "fp8_recipe": t.fp8_recipe, "regime": t.regime,
                             "attention": t.attention, "dropout": t.dropout,
                             "seq_len": t.seq_len, "global_batch": t.global_batch,
                             **({"grad_reduce_bytes": t.grad_reduce_bytes} if t.grad_reduce_bytes else {})},
                "assumptions": list(self.assumptions)}


# ---- hardware ---------------------------------------------------------------------------------
def _canon_name(x: str) -> str:
    return re.sub(r"[^a-z0-9]+", "", x.lower())


def map_hardware(rec: dict, assumptions: list, any_ok: bool = False) -> HardwareSpec:
    hwr = rec.get("hardware") or {}
    gpu = hwr.get("gpu")
    if gpu is None or str(gpu).strip().lower() in ("any", "", "none"):
        if any_ok:
            assumptions.append(f"hardware '{gpu}': result is hardware-independent, default profile used")
            return load_hardware()
        raise Skip(f"GPU not stated (hardware.gpu = {gpu!r})")
    try:
        hw = load_hardware(str(gpu))
    except AutoplaceError:
        # common record spellings carry a system in parentheses: "V100-SXM3-32GB (DGX-2)"
        bare = re.sub(r"\(.*?\)", "", str(gpu)).strip()
        try:
            hw = load_hardware(bare) if bare and bare != gpu else None
        except AutoplaceError:
            hw = None
        if hw is None:
            from autoplace.specs.hardware import match_gpu_name
            _, why = match_gpu_name(str(gpu))
            raise Skip(why if why and not why.startswith("unknown") else
                       f"unknown GPU '{gpu}' (no hardware profile or alias)") from None
    if _canon_name(str(gpu)) != _canon_name(hw.name):
        assumptions.append(f"hardware.gpu '{gpu}' → profile {hw.name}")
    gpn = as_int(hwr.get("gpus_per_node"))
    if gpn and gpn != hw.gpus_per_node and not any_ok:
        if hw.scaleup_domain == hw.gpus_per_node:       # the node is the scale-up domain
            hw = hw.with_(gpus_per_node=gpn, scaleup_domain=gpn)
            assumptions.append(f"gpus_per_node {gpn} from the record (profile {hw.name} has a different node)")
        elif gpn == hw.scaleup_domain:                  # an NVL72 rack stated as its 72-GPU domain
            assumptions.append(f"gpus_per_node {gpn} = the {hw.name} NVLink domain; nodes are its "
                               f"{hw.gpus_per_node}-GPU trays")
        else:
            hw = hw.with_(gpus_per_node=gpn)
            assumptions.append(f"gpus_per_node {gpn} from the record (profile {hw.name} has a different node)")
    return hw


# ---- runtime ----------------------------------------------------------------------------------
def _is_gpt_style(rec: dict) -> bool:
    m = rec.get("model") or {}
    t = f"{m.get('name') or ''} {m.get('arch_notes') or ''}".lower()
    return not re.search(r"llama|swiglu|rmsnorm|\brope\b|rotary|\bmpt\b|mpt-|qwen|mixtral|deepseek|moe", t)


def record_runtime(rec: dict, zero: int | None, fsdp: bool, assumptions: list):
    """The RuntimeSpec of the stack the record ran on, with the record's stated switches applied."""
    name, why = runtime_for_record(record_fields_text(rec), citation_year(rec), zero, fsdp, _is_gpt_style(rec))
    rt = load_runtime(name)
    assumptions.append(f"runtime {name}: {why}")
    knobs = workload_knobs(rec)
    # the record's workload knobs as runtime switches (autoplace.runtimes.switches: one place for
    # what each implies, shared with --runtime-set and the exporters)
    sets: list = []
    graphs = str(knobs.get("cuda_graph_impl", "")).lower()
    if graphs in ("full_iteration", "local", "transformer_engine"):
        sets.append(("cuda_graphs", "full_iteration" if graphs == "full_iteration" else True))
    disp = str(knobs.get("moe_flex_dispatcher_backend", "") or knobs.get("moe_token_dispatcher_type", "")).lower()
    text = record_fields_text(rec)
    if disp in ("deepep", "hybridep", "flex") or re.search(r"\bdeepep\b", text):
        # Megatron's flex dispatcher defaults to the DeepEP backend
        sets.append(("moe_dispatch", "hybridep" if disp == "hybridep" else "deepep"))
    if knobs.get("fp8_dot_product_attention") is True:
        sets.append(("fp8_attention", True))
    drop = knobs.get("hidden_dropout", knobs.get("attention_dropout"))
    if drop is not None:
        # Megatron-LM's argument defaults are --hidden-dropout 0.1 --attention-dropout 0.1; a run
        # that leaves them keeps the dropout masks (and their elementwise passes)
        if isinstance(drop, bool) or not isinstance(drop, (int, float)) or not 0 <= drop < 1:
            raise Skip(f"workload knob hidden_dropout / attention_dropout '{drop}': give the probability, "
                       "a number in [0, 1)")
        sets.append(("defaults.attention_dropout", drop > 0))
    if knobs.get("compile_loss") is False and rt.kernels.loss == "compiled" and rt.family != rt.name:
        # the loss left out of torch.compile while the blocks are compiled (torchtitan e8977b007,
        # Dec 2024 – Apr 2025): the loss kernel and its buffers of the family's eager runtime
        eager = load_runtime(rt.family)
        sets += [("kernels.loss", eager.kernels.loss), ("kernels.loss_passes", eager.kernels.loss_passes),
                 ("memory.loss_bytes_per_logit", eager.memory.loss_bytes_per_logit),
                 ("memory.loss_parallel_bytes_per_logit", eager.memory.loss_parallel_bytes_per_logit)]
    if knobs.get("cutedsl_fused_grouped_mlp") is True or knobs.get("use_transformer_engine_op_fuser") is True:
        sets.append(("moe_fused_mlp", True))
    if re.search(r"flexattn|flex attention|flexattention", text):
        sets.append(("kernels.attention", "flex"))
    _, bench_comm, bench_why = benchmark_overrides(text, rt.name)
    if bench_comm:
        sets += [(f"comm.{k}", v) for k, v in bench_comm.items()]
        assumptions.append(bench_why)
    if sets:
        rt = apply_settings(rt, sets)
        assumptions.append("workload switches from the record: " + ", ".join(settings_text(rt)))
    return rt, knobs


# ---- training ---------------------------------------------------------------------------------
def map_training(rec: dict, rt, seq_len: int, global_batch: int, assumptions: list,
                 states_only: bool = False) -> TrainingSpec:
    plan = rec.get("plan") or {}
    ptxt = str(plan.get("precision") or "")
    prec, how = parse_precision(plan.get("precision"))
    if how != prec:
        assumptions.append(how)
    recipe = parse_recipe(ptxt) if prec in ("fp8", "fp4") else ""
    d = rt.defaults
    kw: dict = {}
    regime = d.regime
    if regime.startswith("megatron-"):
        regime = "megatron-fp16" if prec == "fp16" else "megatron-bf16"
    kw["regime"] = regime
    over, _, why = benchmark_overrides(record_fields_text(rec), rt.name)
    if over:
        kw.update(over)
        assumptions.append(why)
    pt = ptxt.lower()
    if rt.family == "fsdp" and "pure" in pt:
        kw["grad_reduce_bytes"] = 2
    elif rt.family == "fsdp" and ("default" in pt or "amp" in pt):
        kw["grad_reduce_bytes"] = 4
    txt = record_text(rec)
    if re.search(r"flash-?attention|flash attention|flash_attn|\bflash\b", txt):
        kw.update(attention="flash", dropout=False)
    elif d.eager_attention:
        assumptions.append(f"{rt.name}: attention materializes the scores (fused softmax), dropout "
                           + ("on" if d.attention_dropout else "off"))
    cf = workload_knobs(rec).get("moe_expert_capacity_factor")
    if isinstance(cf, (int, float)) and not isinstance(cf, bool) and cf > 0:
        kw["moe_capacity_factor"] = float(cf)        # token dropping: the dispatch does not sync
        assumptions.append(f"MoE capacity factor {cf:g} from the record's workload knobs (sync-free dispatch)")
    if prec in ("fp8", "fp4"):
        if recipe and recipe not in rt.precision.fp8_recipes:
            raise Skip(f"precision '{ptxt}': {rt.name} has no '{recipe}' recipe")
        if not recipe:
            assumptions.append(f"low-precision recipe not stated → {rt.name}'s default for the GPU")
    try:
        return training_spec(rt, seq_len=seq_len, global_batch=global_batch, precision=prec,
                             fp8_recipe=recipe, states_only=states_only, **kw)
    except AutoplaceError as e:
        raise Skip(f"training rejected: {e}") from None


# ---- plan -------------------------------------------------------------------------------------
def base_plan(rec: dict, assumptions: list, params_b: float | None = None, moe: bool = False):
    """Plan fields shared by every record type: (plan kwargs, world, zero, fsdp, runtime, knobs)."""
    plan = rec.get("plan") or {}
    dp, tp, pp, cp, world = plan_degrees(rec, assumptions)
    zero_raw = parse_zero(plan.get("zero_stage"))
    if plan.get("zero_stage") is not None and zero_raw is None:
        raise Skip(f"plan.zero_stage '{plan.get('zero_stage')}' not understood")
    zs = str(plan.get("zero_stage") or "").lower()
    fsdp = plan.get("fsdp") is True or any(k in zs for k in ("fsdp", "full_shard", "shard_grad_op", "hybrid_shard"))
    rt, knobs = record_runtime(rec, zero_raw, fsdp, assumptions)
    zero, reshard, note = sharding_of(rec, zero_raw, fsdp, rt, moe)
    if note:
        assumptions.append(note)
    if pp > 1 and zero > rt.supports.max_zero_with_pp and zero_raw is None:
        zero = rt.supports.max_zero_with_pp
    kw = dict(rt.plan_defaults())
    base = Plan()
    diff = {k: v for k, v in kw.items() if getattr(base, k) != v and not (k == "fetch_sync" and zero != 3)}
    if diff:
        assumptions.append(f"{rt.name} switches: " + ", ".join(f"{k}={v}" for k, v in diff.items()))
    kw.update(dp=dp, tp=tp, pp=pp, cp=cp, zero=zero, reshard_after_forward=reshard,
              offload=offload_of(rec, assumptions),
              dp_overlap=dp_overlap_of(rec, params_b, rt.defaults.dp_overlap, assumptions))
    if knobs.get("moe_a2a_overlap") is True:
        kw["ep_overlap"] = True
    gpn = as_int((rec.get("hardware") or {}).get("gpus_per_node"))
    shard = gpn // (tp * cp) if gpn and gpn % (tp * cp) == 0 else 0
    stated = plan.get("dp_replicate") is not None
    rep = as_int(plan.get("dp_replicate")) if stated else None
    if stated:
        # HSDP stated as a degree: shard over dp/rep ranks, replicate the shards rep times
        if rep is None or not (fsdp and zero == 3) or rep < 1 or dp % rep:
            raise Skip(f"plan.dp_replicate {plan.get('dp_replicate')}: give a divisor of plan.dp on an FSDP (zero 3) plan")
        if rep > 1:
            kw["dp_replicate"] = rep
            assumptions.append(f"plan.dp_replicate {rep} → HSDP: shard over {dp // rep} data-parallel ranks, "
                               f"replicate {rep} times")
    elif fsdp and zero == 3 and "hybrid_shard" in record_text(rec) and shard and dp > shard and dp % shard == 0:
        # torch HYBRID_SHARD: shard inside a node, replicate across nodes
        kw["dp_replicate"] = dp // shard
        assumptions.append(f"FSDP HYBRID_SHARD → shard over one node ({shard} data-parallel ranks), "
                           f"dp_replicate={dp // shard}")
    return kw, world, zero, fsdp, rt, knobs


def map_shaped(rec: dict, recompute_override: str | None = None) -> Mapped:
    """A record with a model shape and a full plan (throughput and layer-time records)."""
    assumptions: list[str] = []
    hw = map_hardware(rec, assumptions)
    model = map_model(rec, assumptions)
    m = rec.get("model") or {}
    plan = rec.get("plan") or {}
    seq = as_int(m.get("seq_len"))
    params_b = as_float(m.get("params_billion"))
    kw, world, zero, fsdp, rt, knobs = base_plan(rec, assumptions, params_b, model.is_moe)
    mbs = as_int(plan.get("micro_batch"))
    if plan.get("micro_batch") is None:
        mbs = rt.defaults.micro_batch
        assumptions.append(f"plan.micro_batch null → {mbs} ({rt.name}'s default)")
    if mbs is None or mbs < 1:
        raise Skip(f"plan.micro_batch '{plan.get('micro_batch')}' is not a positive integer")
    gb, gb_note = parse_global_batch(plan.get("global_batch"), seq)
    if gb_note:
        assumptions.append(gb_note)
    if gb is None:
        ga = as_int(plan.get("grad_accum"))
        if ga is None:
            raise Skip("plan.global_batch not stated")
        gb = mbs * kw["dp"] * ga
        assumptions.append(f"global batch = mbs·dp·grad_accum = {gb}")
    train = map_training(rec, rt, seq, gb, assumptions)
    model = _vocab_by_flop_count(rec, model, train, world, assumptions)
    ep, etp = expert_degrees(rec, model, kw["dp"], kw["cp"], kw["tp"], hw, knobs, assumptions, rt)
    kw.update(ep=ep, etp=etp)
    if not model.is_moe:
        kw.pop("ep_overlap", None)
    lbs = re.search(r"(?:\blbs\b|local batch)[^=\n]{0,60}=\s*(\d+)", record_text(rec))
    lbs = int(lbs.group(1)) if lbs else 0
    if rt.defaults.pp_flush_per_local_batch and kw["pp"] > 1 and lbs and gb % (kw["dp"] * lbs) == 0 \
            and gb // (kw["dp"] * lbs) > 1:
        kw["pp_flushes"] = gb // (kw["dp"] * lbs)
        assumptions.append(f"local batch {lbs} per data-parallel rank → {kw['pp_flushes']} pipeline schedules per "
                           f"step ({rt.name} runs one per local batch)")
    rc = recompute_override or parse_recompute(plan.get("recompute"))
    every = None if recompute_override else parse_layer_recompute(plan.get("recompute"))
    if every:
        # torchtitan's layer SAC counts blocks across the model: every N-th one is checkpointed
        rc = "block"
        kw["recompute_layers"] = model.layers // kw.get("pp", 1) // every
        assumptions.append(f"layer-level checkpointing of one block in every {every} → recompute=block, "
                           f"{kw['recompute_layers']} of each stage's blocks checkpointed whole")
    mods = parse_recompute_modules(plan.get("recompute")) if rc == "selective" and not recompute_override else ()
    if mods:
        kw["recompute_modules"] = mods
        assumptions.append(f"selective recompute of the stated modules {'+'.join(mods)} (Megatron --recompute-modules)")
    sched, vpp = schedule_of(rec, kw["pp"], assumptions)
    sp = plan.get("sequence_parallel")
    if sp is None:
        sp = rt.defaults.sequence_parallel and kw["tp"] > 1
        if kw["tp"] > 1:
            assumptions.append(f"plan.sequence_parallel null → {bool(sp)} ({rt.name}'s default with tp > 1)")
    sp = bool(sp) and kw["tp"] > 1
    if rt.defaults.tp_overlap and sp:
        kw["tp_overlap"] = True
    if knobs.get("enable_async_tensor_parallel") is True and sp and rt.supports.tp_overlap:
        # torchtitan's parallelism.enable_async_tensor_parallel: the symmetric-memory collective matmul
        kw["tp_overlap"] = True
        assumptions.append("workload knob enable_async_tensor_parallel → tp_overlap (async TP)")
    pp = kw["pp"]
    layout = knobs.get("pp_layout")
    if layout and pp > 1:
        split = pp_layout_split(str(layout), pp, vpp)
        if split and sum(split) == model.layers:
            kw["layer_split"] = split
            assumptions.append(f"pipeline layout '{layout}' → layers per stage {list(split)}")
    if pp > 1 and "layer_split" not in kw and model.layers % (pp * vpp):
        split = None
        if model.layers % pp:
            split = lighter_ends_split(model.layers, pp)
        if vpp > 1 and (split is None or min(split) < vpp):
            assumptions.append(f"layers={model.layers} not divisible by pp·vpp = {pp * vpp} → 1F1B")
            sched, vpp = "1f1b", 1
        if split is not None:
            kw["layer_split"] = split
            assumptions.append(f"layers={model.layers} not divisible by pp={pp} → layer_split "
                               f"{list(split)} (first/last stages lighter"
                               + (f"; uneven virtual chunks, vpp={vpp})" if vpp > 1 else ")"))
    try:
        p = Plan(sp=sp, recompute=rc or "none", mbs=mbs, schedule=sched, vpp=vpp, **kw)
    except (AutoplaceError, ValueError, TypeError) as e:
        raise Skip(f"plan rejected: {e}") from None
    peak = as_float((rec.get("hardware") or {}).get("peak_tflops_per_gpu_assumed_by_source"))
    return Mapped(model=model, train=train, plan=p, hw=hw, world=world, framework=rt.family,
                  recompute=p.recompute, peak_stated=peak * 1e12 if peak else None,
                  assumptions=assumptions)


def _vocab_by_flop_count(rec: dict, model: ModelSpec, train: TrainingSpec, world: int, assumptions: list) -> ModelSpec:
    """Where the notes override the stated vocabulary (a script's vocab_size) and the record prints
    both TFLOP/s under a convention counted on the model spec and tokens/s, the source's own FLOP
    count per token says which vocabulary the run's model had: keep the override unless only the
    stated vocabulary reproduces that count (within 1 %)."""
    from autoplace.cost.compute import model_flops_per_step
    from autoplace.placement.rules import Ctx
    from autoplace.validate import flops as F
    stated = as_int((rec.get("model") or {}).get("vocab"))
    meas = rec.get("measured") or {}
    tf, tok = as_float(meas.get("tflops_per_gpu")), as_float(meas.get("tokens_per_sec_per_gpu"))
    conv = F.detect(F.definition_for(meas, "tflops_per_gpu"), "tflops_per_gpu")
    if not (stated and stated != model.vocab and tf and tok and conv and conv.from_model is not None):
        return model

    def per_token(m):
        return model_flops_per_step(Ctx(m, train, world), **conv.from_model) / train.tokens_per_step

    target = tf * 1e12 / tok
    alt = replace(model, vocab=stated)
    if abs(per_token(model) / target - 1) > 0.01 >= abs(per_token(alt) / target - 1):
        assumptions.append(f"vocab {model.vocab} → {stated}: the source's TFLOP/s ÷ tokens/s "
                           f"({target / 1e9:.2f} GFLOP/token, {conv.label}) is the count with vocab {stated}")
        return alt
    return model


def largest_layer_from_text(rec: dict) -> float | None:
    """A largest-layer size the record states in words, e.g. 'largest layer 65M' (DeepSpeed estimators)."""
    m = re.search(r"largest layer\s*([\d.]+)\s*([mb])", record_text(rec))
    if not m:
        return None
    return float(m.group(1)) * (1e6 if m.group(2) == "m" else 1e9)


def map_states_only(rec: dict, params: float, regime: str | None = None, any_hw: bool = False) -> Mapped:
    """A model known by its parameter count only (ZeRO max-model-size, DeepSpeed estimator)."""
    assumptions: list[str] = []
    hw = map_hardware(rec, assumptions, any_ok=any_hw)
    kw, world, zero, fsdp, rt, _ = base_plan(rec, assumptions)
    prec, how = parse_precision((rec.get("plan") or {}).get("precision"))
    if how != prec:
        assumptions.append(how)
    reg = regime or rt.defaults.regime
    if reg.startswith("megatron-"):
        reg = "megatron-fp16" if prec == "fp16" else "megatron-bf16"
    train = TrainingSpec(seq_len=1, global_batch=max(kw["dp"], 1), precision=prec, regime=reg,
                         states_only=True, runtime=rt)
    p = Plan(mbs=1, **{k: v for k, v in kw.items() if k != "ep_overlap"})
    psi_max = largest_layer_from_text(rec)
    if psi_max:
        assumptions.append(f"largest layer {psi_max / 1e6:g}M from the record text → Ψ_max")
    return Mapped(model=params_only(params, largest_unit=psi_max), train=train, plan=p, hw=hw, world=world,
                  framework=rt.family, recompute="none", peak_stated=None, assumptions=assumptions)
