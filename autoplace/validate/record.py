"""Generic readers of validation records (shared/validation schema): ids, text, years, numbers,
ZeRO stages, precision words (with the low-precision recipe they name), recompute words, batch
sizes and the workload-config knobs a record's notes quote. No framework facts live here."""

from __future__ import annotations

import json
import re

GIB = float(2**30)


class Skip(Exception):
    """The record cannot be predicted; the message is the reason reported to the user."""


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


def record_fields_text(rec: dict) -> str:
    """The record's structured fields as text, for deciding which runtime ran it: the source (citation,
    url, locator, table), an explicit `framework` / `runtime` field and the plan's string fields —
    never the free-text `notes`, `arch_notes` or the id, whose words describe how a run compares with
    others (a note that mentions "NeMo" does not make a run a NeMo run)."""
    plan = rec.get("plan") or {}
    return _text(rec.get("source") or {}, rec.get("framework"), rec.get("runtime"),
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
    """(precision, how) from a record's precision string; raises Skip when unsupported.

    Low-precision recipes are named by `parse_recipe`; this gives the GEMM class: fp4 (NVFP4),
    fp8 (FP8 / MXFP8 / Float8 rowwise or tensorwise), bf16, fp16, fp32."""
    if text is None:
        raise Skip("precision not stated (plan.precision is null)")
    s = str(text).lower()
    if re.search(r"\b(int8|int4|mxfp4|fp6|mxfp6)\b", s):
        raise Skip(f"unsupported precision '{text}'")
    if re.search(r"nvfp4|\bfp4\b", s):
        return "fp4", "fp4"
    if re.search(r"fp8|float8|mxfp8", s):
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


RECIPE_WORDS = (  # (pattern, recipe) — the first match wins
    (r"nvfp4", "nvfp4"), (r"mxfp8|mx-?fp8|mxfp8blockscaling", "mxfp8"),
    (r"current[- ]scaling|fp8[-_ ]cs\b|float8currentscaling|tensorwise current", "current"),
    (r"delayed|amax history|delayedscaling", "delayed"),
    (r"blockwise|block[- ]scaling|1x128|128x128|deepseek[- ]style", "blockwise"),
    (r"rowwise", "rowwise"), (r"tensorwise", "tensorwise"),
)


def parse_recipe(text) -> str:
    """The low-precision recipe a precision string names ('' when it names none)."""
    s = str(text or "").lower()
    for pat, name in RECIPE_WORDS:
        if re.search(pat, s):
            return name
    return ""


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


def parse_layer_recompute(text) -> int | None:
    """N of layer-level selective checkpointing, every N-th block checkpointed whole and the others
    not (torchtitan's `selective_ac_option = "N"`), from words such as "every 2nd layer"; None for
    any other mode."""
    m = re.search(r"every\s+(\d+)(?:st|nd|rd|th)?\s+(?:transformer\s+)?(?:layer|block)", str(text or "").lower())
    return int(m.group(1)) if m and int(m.group(1)) >= 1 else None


def parse_recompute_modules(text) -> tuple:
    """Megatron-Core --recompute-modules a selective recompute string lists ("selective: modules
    ['mla_up_proj']"); () when it lists none. Skip for modules the planner does not price."""
    from autoplace.plan import MEGATRON_RECOMPUTE_MODULES, RECOMPUTE_MODULES
    s = str(text or "").lower()
    if "selective" not in s:
        return ()
    mods = tuple(dict.fromkeys(w for w in re.findall(r"[a-z_]+", s) if w in MEGATRON_RECOMPUTE_MODULES))
    bad = [x for x in mods if x not in RECOMPUTE_MODULES]
    if bad:
        raise Skip(f"recompute module(s) {', '.join(bad)} are not modelled by the planner")
    return mods


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




def workload_knobs(rec: dict) -> dict:
    """Framework switches a record's notes quote as JSON after 'workload-config knobs:' (the
    transcriber read them from the workload config at the stated commit), e.g.
    {"cuda_graph_impl": "full_iteration", "moe_flex_dispatcher_backend": "hybridep"}."""
    m = re.search(r"workload-config knobs:\s*(\{.*?\})", str(rec.get("notes") or ""))
    if not m:
        return {}
    try:
        out = json.loads(m.group(1))
    except json.JSONDecodeError:
        return {}
    return out if isinstance(out, dict) else {}
