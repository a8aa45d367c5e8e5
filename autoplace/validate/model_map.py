"""Record → ModelSpec: the model a validation record describes, from its fields and arch notes.

What a record states is read literally (layers, hidden, heads, kv_heads, ffn, vocab, seq_len and the
architecture statements of `arch_notes`: MoE experts/top-k/expert width/shared experts/dense first
layers, MLA ranks, head_dim, QK-norm, sliding windows, sinks, MTP, activation). What it leaves
open is decided by the parameter count it states (`params_billion`), not by keywords: among the
readings the statements allow (gated or plain MLP, tied or untied output, GPT-style biases and
learned positions or none), the one whose exact count is closest to the stated count is taken, and
the choice is written into the assumptions. A shape that is not stated at all is a skip.
"""

from __future__ import annotations

import itertools
import re

from autoplace.errors import AutoplaceError
from autoplace.specs.model import ModelSpec
from autoplace.validate.record import Skip, as_float, as_int

_SHAPE = ("layers", "hidden", "heads", "ffn_hidden", "vocab", "seq_len")

_EXPERTS = ("num_experts", "n_experts", "experts", "num_local_experts", "moe_num_experts", "n_routed_experts")
_TOPK = ("top_k", "moe_top_k", "experts_per_token", "num_experts_per_tok", "router_top_k", "k")
_EXPERT_FFN = ("expert_ffn_hidden", "moe_ffn_hidden", "moe_intermediate_size", "expert_hidden")

# Tokenizer vocabularies of model families, for records that leave model.vocab null
# (Brown et al. 2020 §2.1: GPT-3 uses the GPT-2 BPE of 50,257 tokens)
FAMILY_VOCAB = ((r"\bgpt-?3\b", 50257, "GPT-3 uses the GPT-2 BPE tokenizer (50,257 tokens; Brown et al. 2020)"),)

# MLA dimensions of DeepSeek-V3 (DeepSeek-V3 report §4.2), for notes that say "DeepSeek-V3 style"
DSV3_MLA = dict(q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)


def _num(pattern: str, text: str) -> int | None:
    m = re.search(pattern, text)
    return int(m.group(1)) if m else None


def _moe(m: dict, notes: str, assumptions: list) -> dict:
    """MoE fields: the record's fields, else the arch-notes statements ("256 routed experts top-8
    + 1 shared expert, moe_ffn_hidden 2048, first 3 layers dense")."""
    def first(keys):
        return next((as_int(m[k]) for k in keys if as_int(m.get(k)) is not None), None)
    E, k, fe = first(_EXPERTS), first(_TOPK), first(_EXPERT_FFN)
    if E is None:
        E = _num(r"(\d+)\s+(?:routed\s+)?experts?\b", notes) or _num(r"(\d+)\s+routed\b", notes)
    if E is None:
        g = re.search(r"\b(\d+)\s*x\s*\d+(\.\d+)?\s*b\b", notes)        # Mixtral "8x7B"
        if g:
            E = int(g.group(1))
            assumptions.append(f"experts from the name: {E}")
    if not E or E <= 1:
        return {}
    if k is None:
        k = _num(r"top[- ]?(\d+)", notes)
        if k is None:
            k = 2
            assumptions.append("MoE top-k not stated → 2")
    out: dict = {"num_experts": E, "top_k": k}
    if fe is None:
        fe = _num(r"(?:moe_ffn(?:_hidden)?|moe_intermediate_size|expert ffn)\s*(\d+)", notes)
    if fe:
        out["expert_ffn_hidden"] = fe
    n_shared = _num(r"(\d+)\s+shared(?: experts?)?\b", notes)
    if n_shared and not re.search(r"no shared expert", notes):
        out["shared_expert_ffn_hidden"] = n_shared * (fe or as_int(m.get("ffn_hidden")) or 0)
    dense = _num(r"first (\d+) layers? dense", notes) or _num(r"\b(\d+) dense layers?", notes)
    if dense is None and re.search(r"first layer dense", notes):
        dense = 1
    if dense:
        out["dense_layer_ids"] = tuple(range(dense))
    return out


def _attention(notes: str, assumptions: list) -> dict:
    out: dict = {}
    if "mla" in notes:
        dims = dict(q_lora_rank=_num(r"q_lora_rank\s*(\d+)", notes), kv_lora_rank=_num(r"kv_lora_rank\s*(\d+)", notes),
                    qk_nope_head_dim=_num(r"qk_nope\w*\s*(\d+)", notes),
                    qk_rope_head_dim=_num(r"qk_rope\w*\s*(\d+)", notes), v_head_dim=_num(r"v_head\w*\s*(\d+)", notes))
        if all(v is not None for v in dims.values()):
            out.update(dims)
        elif re.search(r"deepseek-?v3 style|deepseek-?v3|kimi", notes):
            out.update(DSV3_MLA)
            assumptions.append("MLA ranks not stated → DeepSeek-V3's (q 1536, kv 512, nope 128, rope 64, v 128): "
                               "the record's model has the DeepSeek-V3 architecture")
        else:
            raise Skip("MLA attention without its ranks (q_lora_rank, kv_lora_rank, qk_nope, qk_rope, v_head)")
    hd = _num(r"head_dim\s*(\d+)", notes)
    if hd:
        out["head_dim"] = hd
    if re.search(r"qk-?norm", notes):
        out["qk_norm"] = True
    w = _num(r"sliding[- ]window\s*\(?(\d+)\)?", notes) or _num(r"(\d+)-token sliding[- ]window", notes)
    if w:
        out["sliding_window"] = w
        if re.search(r"alternating", notes):
            out["global_every"] = 2
    if re.search(r"\bsinks?\b", notes):
        out["attn_sinks"] = True
    if re.search(r"mtp_num_layers\s*=\s*(\d+)", notes) and not re.search(r"w/o mtp|without mtp", notes):
        out["mtp_layers"] = _num(r"mtp_num_layers\s*=\s*(\d+)", notes)
    return out


def _mlp_statements(notes: str) -> dict:
    """What the notes say about the MLP: gating and activation."""
    if re.search(r"squared[- ]relu|relu2|relu\^2", notes):
        return {"gated_mlp": False, "activation": "relu2"}
    if "geglu" in notes:
        return {"gated_mlp": True, "activation": "gelu"}
    if "swiglu" in notes:
        return {"gated_mlp": True, "activation": "silu"}
    if re.search(r"no gating|non-gated|ungated", notes):
        return {"gated_mlp": False}
    if re.search(r"\bgelu\b", notes):
        return {"gated_mlp": False, "activation": "gelu"}
    return {}


def _run_vocab(notes: str) -> int | None:
    """A vocabulary the notes say the run used ('perf script sets model vocab_size=128256')."""
    return _num(r"sets (?:the )?model vocab_size\s*=\s*(\d+)", notes)


def map_model(rec: dict, assumptions: list) -> ModelSpec:
    m = rec.get("model") or {}
    notes = f"{m.get('name') or ''} {m.get('arch_notes') or ''}".lower()
    moe = _moe(m, notes, assumptions)
    vals = {k: as_int(m.get(k)) for k in _SHAPE}
    if vals["ffn_hidden"] is None and moe.get("expert_ffn_hidden"):
        vals["ffn_hidden"] = moe["expert_ffn_hidden"]          # every layer MoE: no dense FFN width
    if vals["vocab"] is None:
        for pat, v, why in FAMILY_VOCAB:
            if re.search(pat, notes):
                vals["vocab"] = v
                assumptions.append(f"model.vocab null → {v} ({why})")
                break
    missing = [k for k in _SHAPE if vals[k] is None]
    if missing:
        raise Skip("model shape not stated: " + ", ".join(f"model.{k}" for k in missing))
    run_vocab = _run_vocab(notes)
    if run_vocab and run_vocab != vals["vocab"]:
        assumptions.append(f"vocab {vals['vocab']} → {run_vocab} (the notes: the run's script sets vocab_size={run_vocab})")
        vals["vocab"] = run_vocab
    kv = as_int(m.get("kv_heads"))
    if kv is None:
        assumptions.append("model.kv_heads null → heads (multi-head attention)")
    base = dict(layers=vals["layers"], hidden=vals["hidden"], heads=vals["heads"], vocab=vals["vocab"],
                ffn_hidden=vals["ffn_hidden"], kv_heads=kv, max_seq_len=vals["seq_len"],
                name=str(m.get("name") or rec.get("id")), source="record")
    base.update(moe)
    base.update(_attention(notes, assumptions))
    _fill_from_preset(base, m, notes, assumptions)
    return _choose(base, notes, as_float(m.get("params_billion")), assumptions)


_FILL = ("expert_ffn_hidden", "shared_expert_ffn_hidden", "dense_layer_ids", "qk_norm",
         "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "head_dim",
         "sliding_window", "global_every", "attn_sinks", "expert_bias", "glu_limit", "rope_mscale", "mtp_layers")


def _fill_from_preset(base: dict, m: dict, notes: str, assumptions: list) -> None:
    """A record whose dims come 'from HF config' of a model autoplace has as a preset takes the
    architecture details its notes leave out from that preset, when the stated shape matches it."""
    from autoplace.specs.presets import PRESETS
    if not re.search(r"hf config|hf [\w/-]+ config|config\.json", notes):
        return
    name = re.sub(r"[\s_]+", "-", str(m.get("name") or "").strip().lower())
    parts = name.split("-")
    pre = None
    for n in range(len(parts), 0, -1):
        key = "-".join(parts[:n])
        if key in PRESETS:
            pre = PRESETS[key]() if callable(PRESETS[key]) else PRESETS[key]
            break
    if pre is None or (pre.layers, pre.hidden, pre.heads) != (base["layers"], base["hidden"], base["heads"]):
        return
    filled = []
    for f in _FILL:
        if f in ("expert_ffn_hidden", "shared_expert_ffn_hidden", "dense_layer_ids") and not base.get("num_experts"):
            continue
        v = getattr(pre, f, None)
        if v and not base.get(f):
            base[f] = v
            filled.append(f)
    if filled:
        assumptions.append(f"not in the notes, from the {key} preset (the HF config the record cites): " + ", ".join(filled))


def _choose(base: dict, notes: str, params_b: float | None, assumptions: list) -> ModelSpec:
    """Pick the reading of the statements whose parameter count is closest to the stated one."""
    stated = _mlp_statements(notes)
    mpt = bool(re.search(r"\bmpt\b|mpt-", notes))
    llama = bool(re.search(r"llama|swiglu|rmsnorm|\brope\b|rotary|gqa|qwen|mixtral|deepseek|kimi|gpt-oss|moe", notes))
    gpt_style = not llama
    gated_opts = (stated["gated_mlp"],) if "gated_mlp" in stated else ((True, False) if params_b else (llama,))
    tie_opts = (True,) if re.search(r"\btied\b", notes) and "untied" not in notes else \
        (False,) if "untied" in notes else ((False, True) if params_b else (gpt_style or mpt,))
    if mpt:
        style = dict(attn_bias=False, mlp_bias=False, norm="layernorm", position="learned")
    elif gpt_style:
        style = dict(attn_bias=True, mlp_bias=True, norm="layernorm", position="learned")
    else:
        style = dict(attn_bias=False, mlp_bias=False, norm="rmsnorm", position="rope")
    if "rmsnorm" in notes:
        style["norm"] = "rmsnorm"
    elif "layernorm" in notes:
        style["norm"] = "layernorm"
    if "alibi" in notes:
        style["position"] = "none"
    elif re.search(r"\brope\b|rotary", notes):
        style["position"] = "rope"
    elif re.search(r"learned pos", notes):
        style["position"] = "learned"
    if re.search(r"no biases?|without bias|bias-?free", notes):
        style.update(attn_bias=False, mlp_bias=False)
    bias_opts = (style["attn_bias"],)      # biases barely move a count: the family's style decides
    cands = []
    for gated, tied, bias in itertools.product(gated_opts, tie_opts, bias_opts):
        kw = {**base, **style, "gated_mlp": gated, "tied_embeddings": tied, "attn_bias": bias, "mlp_bias": bias}
        if "activation" in stated:
            kw["activation"] = stated["activation"]
        if not gated:
            kw["glu_limit"] = 0.0              # a plain-MLP reading has no GLU to clamp
        try:
            spec = ModelSpec(**kw)
        except AutoplaceError as e:
            raise Skip(f"model shape rejected: {e}") from None
        err = abs(spec.total_params() / 1e9 - params_b) / params_b if params_b else 0.0
        cands.append((err, (gated != llama) + (tied != gpt_style) + (bias != style["attn_bias"]), spec))
    cands.sort(key=lambda c: (round(c[0], 3), c[1]))
    err, _, spec = cands[0]
    if len(cands) > 1:
        assumptions.append(
            f"MLP {'gated' if spec.gated_mlp else 'plain'} ({spec.act}), output {'tied' if spec.tied_embeddings else 'untied'}, "
            f"{'biases' if spec.attn_bias else 'no biases'}, {spec.position} positions: the reading whose count "
            f"{spec.total_params() / 1e9:.2f}B is nearest the stated {params_b:g}B ({err:+.1%} off)")
    elif params_b and err > 0.05:
        assumptions.append(f"parameter count {spec.total_params() / 1e9:.2f}B vs the stated {params_b:g}B ({err:.1%})")
    if mpt:
        assumptions.append("MPT: no biases (arch_notes), LayerNorm (MPT's has no bias: planner's LayerNorm counts "
                           "2h/layer more), GeLU 4h, learned positions (reported NumParams grows by seq_len·d_model)")
    return spec
