"""Record → specs: translate one validation record (shared/validation schema) into the planner's inputs.

Only what the record states is translated; nothing is tuned per record, model or source. Where the
record is silent the rule used is written into `Mapped.assumptions` (and so into the output), e.g.
"precision '16-bit' → fp16" or "recompute not stated → least recompute that fits". A record that
cannot be translated raises `Skip(reason)`; the runner reports it as `{id, skipped: reason}`.

Translation rules (by what the record says, not by which paper it comes from):

- hardware: `hardware.gpu` through `load_hardware` (its alias table); unknown → skip.
- model family from `model.name` / `model.arch_notes`: MPT → no biases (as arch_notes state),
  LayerNorm (the planner's LayerNorm has a bias; MPT's low-precision LayerNorm has none — a 2h/layer
  difference), GeLU 4h, tied embeddings, learned positions (the reported NumParams grows by
  seq_len·d_model with the sequence length: a position table, validation README §3.13);
  keywords (SwiGLU, RMSNorm, RoPE, ALiBi, untied, no bias) override; default GPT-style (learned
  positions, LayerNorm, biases, GeLU 4h non-gated, tied embeddings).
- framework from the record text: FSDP (plan.fsdp or "FSDP" in precision), DeepSpeed (named, with
  ZeRO ≥ 1), Megatron (named, or a GPT-style record from ≤ 2022 with no other framework).
- training: precision from the precision string (fp8 / bf16 / fp16 / fp32; "16-bit" → fp16, which has
  the same tensor-core peak as bf16 on every profile); regime megatron-fp16 / megatron-bf16 (Megatron),
  deepspeed (DeepSpeed), zero with fp32 (DEFAULT) or bf16 (PURE) gradient reduction (FSDP);
  attention flash when the record mentions FlashAttention, eager with dropout for Megatron-era
  (≤ 2022) GPT runs, else flash.
- plan: degrees (a single missing degree from the GPU count), vpp > 1 → interleaved, FSDP FULL_SHARD →
  zero 3, SHARD_GRAD_OP → zero 3 without resharding after forward, recompute full/selective/none,
  DeepSpeed offload_param / offload_optimizer from the notes, dp_overlap = False where the notes say
  the gradient all-reduce was not overlapped (or name Megatron's 'local' DDP, which does not overlap).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from autoplace.errors import AutoplaceError
from autoplace.plan import Plan
from autoplace.specs.hardware import HardwareSpec, load_hardware
from autoplace.specs.model import ModelSpec, params_only
from autoplace.specs.training import TrainingSpec

GIB = float(2**30)


class Skip(Exception):
    """The record cannot be predicted; the message is the reason reported to the user."""


@dataclass
class Mapped:
    model: ModelSpec
    train: TrainingSpec
    plan: Plan
    hw: HardwareSpec
    world: int
    framework: str
    recompute: str                     # none | selective | full (the plan's)
    peak_stated: float | None          # FLOP/s the source divides by (None → profile peak)
    assumptions: list[str] = field(default_factory=list)

    def describe(self) -> dict:
        return {"framework": self.framework, "hardware": self.hw.name, "gpus": self.world,
                "model": self.model.name, "params": self.model.total_params(),
                "plan": self.plan.short() + ("" if self.plan.dp_overlap else ",dp_overlap=0")
                + (",fetch_sync" if self.plan.fetch_sync and self.plan.zero == 3 else "")
                + (f",schedule={self.plan.schedule}" if self.plan.pp > 1 else ""),
                "training": {"precision": self.train.precision, "regime": self.train.regime,
                             "attention": self.train.attention, "dropout": self.train.dropout,
                             "seq_len": self.train.seq_len, "global_batch": self.train.global_batch,
                             **({"grad_reduce_bytes": self.train.grad_reduce_bytes}
                                if self.train.grad_reduce_bytes else {})},
                "assumptions": list(self.assumptions)}


# ---- small readers ----------------------------------------------------------------------------
def source_key(rec: dict) -> str:
    """Short source name: the `<source>` part of the schema's `<source>-<table>-...` id."""
    rid = str(rec.get("id") or "")
    if "-" in rid:
        return rid.split("-", 1)[0]
    cit = str((rec.get("source") or {}).get("citation") or "")
    m = re.match(r"\s*([A-Za-z][\w-]*)", cit)
    y = re.search(r"\b(19|20)\d{2}\b", cit)
    return ((m.group(1).lower() if m else "unknown") + (y.group(0) if y else "")) or "unknown"


def table_key(rec: dict) -> str:
    return str((rec.get("source") or {}).get("table_or_figure") or "")


def _text(*parts) -> str:
    out = []
    for p in parts:
        if isinstance(p, dict):
            out.extend(str(v) for v in p.values() if v is not None)
        elif isinstance(p, (list, tuple)):
            out.extend(str(v) for v in p)
        elif p is not None:
            out.append(str(p))
    return " ".join(out)


def record_text(rec: dict) -> str:
    """What the record states in words (id, source, notes, arch_notes, plan strings) — for framework,
    sharding-strategy and offload statements. `inferred_fields` is left out: it describes how the
    transcriber mapped values (e.g. "FULL_SHARD=3, SHARD_GRAD_OP=2"), not this run."""
    plan = rec.get("plan") or {}
    return _text(rec.get("id"), rec.get("source") or {}, rec.get("notes"),
                 (rec.get("model") or {}).get("arch_notes"), (rec.get("model") or {}).get("name"),
                 plan.get("precision"), plan.get("recompute"), plan.get("pp_schedule"),
                 plan.get("zero_stage") if isinstance(plan.get("zero_stage"), str) else None).lower()


def citation_year(rec: dict) -> int | None:
    src = rec.get("source") or {}
    for key in ("citation", "locator"):
        m = re.search(r"\b(19[89]\d|20\d{2})\b", str(src.get(key) or ""))
        if m:
            return int(m.group(1))
    return None


def as_int(x) -> int | None:
    if x is None or isinstance(x, bool):
        return None
    if isinstance(x, (int, float)):
        return int(x) if float(x).is_integer() else None
    if isinstance(x, str):
        m = re.match(r"\s*(\d+)\s*$", x)
        return int(m.group(1)) if m else None
    return None


def as_float(x) -> float | None:
    if x is None or isinstance(x, bool):
        return None
    if isinstance(x, (int, float)):
        return float(x)
    if isinstance(x, str):
        try:
            return float(x)
        except ValueError:
            return None
    return None


def parse_zero(x) -> int | None:
    if x is None:
        return None
    if isinstance(x, bool):
        return None
    if isinstance(x, (int, float)) and int(x) in (0, 1, 2, 3):
        return int(x)
    s = str(x).lower().replace(" ", "")
    if s in ("none", "no", "off", "disabled", "ddp", "false"):
        return 0
    if "full_shard" in s or "hybrid_shard" in s:      # FSDP sharding strategies
        return 3
    if "shard_grad_op" in s:
        return 2
    if "pos+g+p" in s:
        return 3
    if "pos+g" in s:
        return 2
    if "pos" in s:
        return 1
    m = re.match(r"(?:zero-?)?([0-3])\b", s)
    return int(m.group(1)) if m else None


def parse_precision(text) -> tuple[str, str]:
    """(precision, how) from a record's precision string; raises Skip when unsupported."""
    if text is None:
        raise Skip("precision not stated (plan.precision is null)")
    s = str(text).lower()
    if re.search(r"\b(int8|int4|fp4|nvfp4|mxfp4|mxfp8|fp6)\b", s):
        raise Skip(f"unsupported precision '{text}'")
    if "fp8" in s:
        return "fp8", "fp8"
    s = s.replace("bfloat16", "bf16").replace("float16", "fp16")
    hits = [(s.find(k), k) for k in ("bf16", "fp16") if k in s]
    if hits:
        return min(hits)[1], min(hits)[1]
    if "16-bit" in s or "16 bit" in s or "half" in s or re.search(r"\bamp\b", s):
        return "fp16", "precision '16-bit' → fp16 (same tensor-core peak as bf16 on every profile)"
    if "fp32" in s or "float32" in s or "tf32" in s:
        return "fp32", "fp32"
    raise Skip(f"unsupported precision '{text}'")


def parse_recompute(text) -> str | None:
    """none | selective | full, None when not stated; Skip for modes the planner does not model."""
    if text is None:
        return None
    s = str(text).lower().strip()
    if s in ("", "none", "no", "off", "false", "0") or s.startswith(("none", "no ")):
        return "none"
    if re.search(r"micro-?batch-level|skip|partial|offload|\d+ layers", s):
        raise Skip(f"recompute mode '{text}' is not modelled by the planner")
    if "selective" in s:
        return "selective"
    if "full" in s or "checkpoint" in s or "uniform" in s:
        return "full"
    raise Skip(f"recompute mode '{text}' is not understood")


def parse_global_batch(gb, seq_len) -> tuple[int | None, str | None]:
    """Sequences per step; a string that says tokens is divided by the sequence length."""
    if gb is None:
        return None, None
    if isinstance(gb, (int, float)) and not isinstance(gb, bool):
        return (int(gb) if float(gb).is_integer() else None), None
    s = str(gb).lower().replace(",", "")
    m = re.search(r"([\d.]+)\s*([kmb]?)", s)
    if not m:
        return None, None
    n = float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "b": 1e9}[m.group(2)]
    if "token" in s:
        if not seq_len:
            return None, None
        return int(round(n / seq_len)), f"global batch '{gb}' in tokens ÷ seq_len {seq_len}"
    return int(round(n)), None


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
        else:
            hw = hw.with_(gpus_per_node=gpn)
        assumptions.append(f"gpus_per_node {gpn} from the record (profile {hw.name} has a different node)")
    return hw


# ---- model ------------------------------------------------------------------------------------
_SHAPE = ("layers", "hidden", "heads", "ffn_hidden", "vocab", "seq_len")


def model_family(rec: dict) -> str:
    m = rec.get("model") or {}
    t = f"{m.get('name') or ''} {m.get('arch_notes') or ''}".lower()
    if re.search(r"\bmpt\b|mpt-", t):
        return "mpt"
    if re.search(r"llama|swiglu|rmsnorm|\brope\b|rotary", t):
        return "llama-like"
    return "gpt"


_EXPERTS = ("num_experts", "n_experts", "experts", "num_local_experts", "moe_num_experts", "n_routed_experts")
_TOPK = ("top_k", "moe_top_k", "experts_per_token", "num_experts_per_tok", "router_top_k", "k")
_EXPERT_FFN = ("expert_ffn_hidden", "moe_ffn_hidden", "moe_intermediate_size", "expert_hidden")


def _moe_fields(m: dict, notes: str, assumptions: list) -> dict:
    """Mixture-of-experts fields of a record's model (any of the usual spellings; "8x7B" / "top-2"
    in the name or notes when the fields are absent)."""
    def first(keys):
        return next((as_int(m[k]) for k in keys if as_int(m.get(k)) is not None), None)
    E, k, fe = first(_EXPERTS), first(_TOPK), first(_EXPERT_FFN)
    if E is None:
        g = re.search(r"\b(\d+)\s*x\s*\d+(\.\d+)?\s*b\b", notes)        # Mixtral "8x7B"
        if g:
            E = int(g.group(1))
            assumptions.append(f"experts from the name: {E}")
    if not E or E <= 1:
        return {}
    if k is None:
        g = re.search(r"top[- ]?(\d+)", notes)
        k = int(g.group(1)) if g else 2
        if not g:
            assumptions.append("MoE top-k not stated → 2")
    out = {"num_experts": E, "top_k": k}
    if fe:
        out["expert_ffn_hidden"] = fe
    return out


def map_model(rec: dict, assumptions: list) -> ModelSpec:
    m = rec.get("model") or {}
    missing = [k for k in _SHAPE if as_int(m.get(k)) is None]
    if missing:
        raise Skip("model shape not stated: " + ", ".join(f"model.{k}" for k in missing))
    L, h, a, f, V, s = (as_int(m[k]) for k in _SHAPE)
    kv = as_int(m.get("kv_heads"))
    if kv is None:
        assumptions.append("model.kv_heads null → heads (multi-head attention)")
    notes = f"{m.get('name') or ''} {m.get('arch_notes') or ''}".lower()
    fam = model_family(rec)
    kw = dict(gated_mlp=False, tied_embeddings=True, attn_bias=True, mlp_bias=True, norm="layernorm",
              position="learned")
    if fam == "mpt":
        kw.update(attn_bias=False, mlp_bias=False)
        assumptions.append("MPT: no biases (arch_notes), LayerNorm (MPT's has no bias: planner's "
                           "LayerNorm counts 2h/layer more), GeLU 4h, tied, learned positions "
                           "(reported NumParams grows by seq_len·d_model)")
    elif fam == "llama-like":
        kw.update(gated_mlp=True, tied_embeddings=False, attn_bias=False, mlp_bias=False,
                  norm="rmsnorm", position="rope")
    # explicit keywords override the family defaults
    if re.search(r"swiglu|geglu|gated", notes):
        kw["gated_mlp"] = True
    if re.search(r"gelu|relu", notes) and not re.search(r"swiglu|geglu|gated", notes):
        kw["gated_mlp"] = False
    if "rmsnorm" in notes:
        kw["norm"] = "rmsnorm"
    elif "layernorm" in notes:
        kw["norm"] = "layernorm"
    if "alibi" in notes:
        kw["position"] = "none"
    elif re.search(r"\brope\b|rotary", notes):
        kw["position"] = "rope"
    elif re.search(r"learned pos", notes):
        kw["position"] = "learned"
    if "untied" in notes:
        kw["tied_embeddings"] = False
    if re.search(r"no biases?|without bias|bias-?free", notes):
        kw.update(attn_bias=False, mlp_bias=False)
    if fam == "gpt" and not m.get("arch_notes"):
        assumptions.append("arch_notes null → GPT-style (learned positions, LayerNorm, biases, GeLU, tied)")
    kw.update(_moe_fields(m, notes, assumptions))
    try:
        return ModelSpec(name=str(m.get("name") or rec.get("id")), layers=L, hidden=h, heads=a,
                         vocab=V, ffn_hidden=f, kv_heads=kv, max_seq_len=s, source="record", **kw)
    except AutoplaceError as e:
        raise Skip(f"model shape rejected: {e}") from None


# ---- framework and training -------------------------------------------------------------------
def framework(rec: dict, zero: int | None) -> tuple[str, str | None]:
    t = record_text(rec)
    plan = rec.get("plan") or {}
    if plan.get("fsdp") is True or "fsdp" in str(plan.get("precision") or "").lower():
        return "fsdp", None
    if "deepspeed" in t and (zero or 0) >= 1:
        return "deepspeed", None
    if "megatron" in t:
        return "megatron", None
    y = citation_year(rec)
    if model_family(rec) == "gpt" and y is not None and y <= 2022:
        return "megatron", f"framework not named: GPT-style run from {y} → Megatron conventions"
    return "unknown", None


def map_training(rec: dict, fw: str, seq_len: int, global_batch: int, assumptions: list,
                 states_only: bool = False) -> TrainingSpec:
    plan = rec.get("plan") or {}
    ptxt = str(plan.get("precision") or "")
    prec, how = parse_precision(plan.get("precision"))
    if how != prec:
        assumptions.append(how)
    kw: dict = {}
    if fw == "megatron":
        regime = {"fp16": "megatron-fp16", "bf16": "megatron-bf16"}.get(prec, "megatron-bf16")
    elif fw == "deepspeed":
        regime = "deepspeed"
    elif fw == "fsdp":
        regime = "zero"
        pt = ptxt.lower()
        if "pure" in pt:
            kw["grad_reduce_bytes"] = 2
        elif "default" in pt or "amp" in pt:
            kw["grad_reduce_bytes"] = 4
    else:
        regime = "zero"
    if prec == "fp32":
        regime = "fp32"
    txt = record_text(rec)
    year = citation_year(rec)
    if re.search(r"flash-?attention|flash attention|flash_attn|\bflash\b", txt):
        att, drop = "flash", False
    elif fw == "megatron" and (year is None or year <= 2022):
        att, drop = "eager", True
        assumptions.append("Megatron GPT run (≤ 2022): eager attention, dropout on")
    elif fw == "deepspeed" and "megatron" in txt and (year is None or year <= 2022):
        att, drop = "eager", True
        assumptions.append("Megatron model code (≤ 2022): eager attention, dropout on")
    else:
        att, drop = "flash", False
    if fw != "megatron":
        kw["vocab_divisible_by"] = 1       # only Megatron pads the vocabulary to 128·t
    return TrainingSpec(seq_len=seq_len, global_batch=global_batch, precision=prec, regime=regime,
                        attention=att, dropout=drop, states_only=states_only, **kw)


# ---- plan -------------------------------------------------------------------------------------
def _degrees(rec: dict, assumptions: list) -> tuple[int, int, int, int, int]:
    plan = rec.get("plan") or {}
    hwr = rec.get("hardware") or {}
    world = as_int(hwr.get("gpus_total"))
    cp = as_int(plan.get("cp"))
    if cp is None:
        cp = 1
        if plan.get("cp", None) is None and "cp" in plan:
            assumptions.append("plan.cp null → 1 (no context parallelism)")
    vals = {k: as_int(plan.get(k)) for k in ("dp", "tp", "pp")}
    missing = [k for k, v in vals.items() if v is None]
    known = cp
    for v in vals.values():
        if v is not None:
            known *= v
    if world is None:
        if missing:
            raise Skip("GPU count and plan degrees not stated (" + ", ".join(f"plan.{k}" for k in missing) + ")")
        world = known
    if missing:
        if world % known:
            raise Skip(f"plan degrees do not divide the {world} GPUs")
        rest = world // known
        if len(missing) == 1:
            vals[missing[0]] = rest
            assumptions.append(f"plan.{missing[0]} null → {rest} (= GPUs / other degrees)")
        elif rest == 1:
            for k in missing:
                vals[k] = 1
            assumptions.append(", ".join(f"plan.{k}" for k in missing) + " null → 1 (other degrees use all GPUs)")
        else:
            raise Skip("plan degrees not stated: " + ", ".join(f"plan.{k}" for k in missing))
    return vals["dp"], vals["tp"], vals["pp"], cp, world


def _dp_overlap(rec: dict, params_b: float | None, assumptions: list) -> bool:
    t = re.sub(r"\s+", " ", _text(rec.get("notes"), (rec.get("plan") or {}).get("notes"))).lower()
    if re.search(r"no overlap|without overlap|not overlapped|no (?:gradient[- ]all-?reduce )?overlap", t):
        assumptions.append("notes: gradient all-reduce not overlapped → dp_overlap=False")
        return False
    m = re.search(r"torch for <=\s*([\d.]+)\s*b\b.*?megatron 'local' for larger", t)
    # size labels round down ("18B" is the 18.4B model), so compare the whole billions
    if m and params_b is not None and math.floor(params_b) > float(m.group(1)):
        assumptions.append("notes: Megatron 'local' DDP (all-reduce after backward) → dp_overlap=False")
        return False
    return True


def _offload(rec: dict, assumptions: list) -> str:
    t = record_text(rec)
    par = re.search(r"offload_param\s*=\s*(cpu|nvme)", t)
    opt = re.search(r"offload_optimizer\s*=\s*(cpu|nvme)", t)
    if par:
        assumptions.append("DeepSpeed offload_param → offload=params (implies optimizer and gradients)")
        return "params"
    if opt:
        assumptions.append("DeepSpeed offload_optimizer → offload=grads (ZeRO-Offload keeps fp32 "
                           "gradients and optimizer on the host)")
        return "grads"
    return "none"


def _sharding(rec: dict, zero: int | None, fsdp: bool) -> tuple[int, bool, str | None]:
    """(zero, reshard_after_forward, note)."""
    if not fsdp:
        return (zero or 0), True, (None if zero is not None else "plan.zero_stage null → 0")
    t = record_text(rec)
    if "no_shard" in t:
        return 0, True, "FSDP NO_SHARD → DDP"
    if "shard_grad_op" in t or zero == 2:
        return 3, False, "FSDP SHARD_GRAD_OP → zero=3 without resharding after forward"
    return 3, True, "FSDP FULL_SHARD → zero=3"


def base_plan(rec: dict, assumptions: list, params_b: float | None = None):
    """Plan fields shared by every record type: (plan kwargs, world, zero, fsdp)."""
    plan = rec.get("plan") or {}
    dp, tp, pp, cp, world = _degrees(rec, assumptions)
    ep = as_int(plan.get("ep")) or 1
    zero_raw = parse_zero(plan.get("zero_stage"))
    if plan.get("zero_stage") is not None and zero_raw is None:
        raise Skip(f"plan.zero_stage '{plan.get('zero_stage')}' not understood")
    zs = str(plan.get("zero_stage") or "").lower()
    fsdp = plan.get("fsdp") is True or any(k in zs for k in ("fsdp", "full_shard", "shard_grad_op", "hybrid_shard"))
    zero, reshard, note = _sharding(rec, zero_raw, fsdp)
    if note:
        assumptions.append(note)
    kw = dict(dp=dp, tp=tp, pp=pp, cp=cp, ep=ep, zero=zero, reshard_after_forward=reshard,
              offload=_offload(rec, assumptions),
              dp_overlap=_dp_overlap(rec, params_b, assumptions))
    gpn = as_int((rec.get("hardware") or {}).get("gpus_per_node"))
    shard = gpn // (tp * cp) if gpn and gpn % (tp * cp) == 0 else 0
    if fsdp and zero == 3 and "hybrid_shard" in record_text(rec) and shard and dp > shard and dp % shard == 0:
        # torch HYBRID_SHARD: shard inside a node, replicate across nodes
        kw["dp_replicate"] = dp // shard
        assumptions.append(f"FSDP HYBRID_SHARD → shard over one node ({shard} data-parallel ranks), "
                           f"dp_replicate={dp // shard}")
    y = citation_year(rec)
    if tp > 1 and y is not None and y <= 2021 and framework(rec, zero)[0] == "megatron":
        # Megatron-LM's asynchronous TP all-reduce in backward arrived after the SC21 experiments
        kw["tp_async"] = False
        assumptions.append(f"Megatron-LM run from {y}: backward TP all-reduce not yet asynchronous → tp_async=False")
    if zero == 3 and y is not None and y <= 2021 and framework(rec, zero)[0] == "deepspeed":
        # DeepSpeed ZeRO-3 as released in 2021 (issue #1069; reworked in PR #1453): each parameter fetch ends in
        # a device-wide synchronize, so gathers run one sub-module ahead and reduce-scatters are exposed
        kw["fetch_sync"] = True
        assumptions.append(f"DeepSpeed ZeRO-3 run from {y}: every parameter fetch synchronizes the device "
                           "(gathers one sub-module ahead, reduce-scatters exposed) → fetch_sync=True")
    return kw, world, zero, fsdp


def _schedule(rec: dict, pp: int, assumptions: list) -> tuple[str, int]:
    plan = rec.get("plan") or {}
    vpp = as_int(plan.get("vpp"))
    text = str(plan.get("pp_schedule") or "").lower()
    if pp <= 1:
        return "1f1b", 1
    if "gpipe" in text:
        return "gpipe", 1
    if vpp and vpp > 1:
        return "interleaved", vpp
    if text and re.search(r"zero.?bubble|dualpipe|zb-?[hv]|\bzbv?\b", text):
        assumptions.append(f"pp_schedule '{plan.get('pp_schedule')}' is not modelled → 1F1B (its bubble is an "
                           "upper bound)")
        return "1f1b", 1
    if "interleav" in text and re.search(r"\bor\b|not stated|unknown|unclear|\?", text):
        assumptions.append(f"pp_schedule '{plan.get('pp_schedule')}' is ambiguous → 1F1B")
    elif "interleav" in text:
        # interleaving means at least two chunks per stage; take the least (the largest bubble)
        assumptions.append(f"pp_schedule '{plan.get('pp_schedule')}' with vpp not stated → interleaved, "
                           "vpp=2 (the least interleaving)")
        return "interleaved", 2
    elif not text:
        assumptions.append("pp_schedule null → 1F1B")
    return "1f1b", 1


def map_shaped(rec: dict, recompute_override: str | None = None) -> Mapped:
    """A record with a model shape and a full plan (throughput and layer-time records)."""
    assumptions: list[str] = []
    hw = map_hardware(rec, assumptions)
    model = map_model(rec, assumptions)
    m = rec.get("model") or {}
    plan = rec.get("plan") or {}
    seq = as_int(m.get("seq_len"))
    params_b = as_float(m.get("params_billion"))
    kw, world, zero, fsdp = base_plan(rec, assumptions, params_b)
    fw, fw_note = framework(rec, zero)
    if fw_note:
        assumptions.append(fw_note)
    mbs = as_int(plan.get("micro_batch"))
    if plan.get("micro_batch") is None:
        raise Skip("plan.micro_batch not stated")
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
    train = map_training(rec, fw, seq, gb, assumptions)
    rc = recompute_override or parse_recompute(plan.get("recompute"))
    sched, vpp = _schedule(rec, kw["pp"], assumptions)
    sp = bool(plan.get("sequence_parallel"))
    pp = kw["pp"]
    if pp > 1 and model.layers % (pp * vpp):
        split = None
        if model.layers % pp:
            from autoplace.plan import lighter_ends_split
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
    return Mapped(model=model, train=train, plan=p, hw=hw, world=world, framework=fw,
                  recompute=p.recompute, peak_stated=peak * 1e12 if peak else None,
                  assumptions=assumptions)


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
    kw, world, zero, fsdp = base_plan(rec, assumptions)
    fw, _ = framework(rec, zero)
    prec, how = parse_precision((rec.get("plan") or {}).get("precision"))
    if how != prec:
        assumptions.append(how)
    reg = regime or {"deepspeed": "deepspeed", "megatron": "megatron-fp16" if prec == "fp16"
                     else "megatron-bf16"}.get(fw, "zero")
    train = TrainingSpec(seq_len=1, global_batch=max(kw["dp"], 1), precision=prec, regime=reg,
                         states_only=True)
    p = Plan(mbs=1, **kw)
    psi_max = largest_layer_from_text(rec)
    if psi_max:
        assumptions.append(f"largest layer {psi_max / 1e6:g}M from the record text → Ψ_max")
    return Mapped(model=params_only(params, largest_unit=psi_max), train=train, plan=p, hw=hw, world=world,
                  framework=fw, recompute="none", peak_stated=None, assumptions=assumptions)
