"""Read a Hugging Face `config.json` into a `ModelSpec` (no transformers dependency).

The family table (`hf_families.FAMILIES`, keyed by `model_type`) says how each family's modeling code
builds the decoder — gated MLP or not, norm kind and count, which bias flags it honours — and holds
the defaults of its transformers configuration class. Everything else comes from the config's fields:

* shape: `hidden_size`, `num_hidden_layers`, `num_attention_heads`, `num_key_value_heads` (absent or
  null ⇒ MHA unless the class defaults otherwise), `head_dim`, `intermediate_size`, `vocab_size`,
  `max_position_embeddings`, `tie_word_embeddings` (GPT-2 spelling: `n_embd`, `n_layer`, `n_head`,
  `n_inner`, `n_positions`);
* activation: `hidden_activation` / `hidden_act` / `activation_function` (silu, gelu*, relu2, relu);
  with a gated MLP, gelu is GeGLU (Gemma) and silu SwiGLU;
* MoE: `num_local_experts` / `num_experts` / `n_routed_experts`, `num_experts_per_tok` /
  `experts_per_token`, `moe_intermediate_size` (else `intermediate_size` is the expert width, as in
  Mixtral and gpt-oss), `shared_expert_intermediate_size` or `n_shared_experts` × moe width,
  `decoder_sparse_step` and `mlp_only_layers` (Qwen), `first_k_dense_replace` and `moe_layer_freq`
  (DeepSeek: layer i is MoE when i ≥ k and i % freq == 0);
* multi-head latent attention (DeepSeek-V2/V3, Kimi K2): `q_lora_rank` (null ⇒ a full-rank Q),
  `kv_lora_rank`, `qk_nope_head_dim`, `qk_rope_head_dim`, `v_head_dim`; `num_nextn_predict_layers`
  → `mtp_layers`. DeepSeek-V3's router has no bias parameter; its `e_score_correction_bias` (one float
  per expert and layer) is a buffer moved by the auxiliary-loss-free balancing rule (DeepSeek-V3 §2.1.2),
  not by gradients: it has no gradient or optimizer state and is not counted (58 × 256 floats);
* attention windows: `sliding_window` with `layer_types` (or the family's pattern: Gemma 2 and gpt-oss
  alternate, Gemma 3 `sliding_window_pattern`, Qwen only with `use_sliding_window`) → `sliding_window`,
  `global_every`; gpt-oss's per-head sinks → `attn_sinks`, its expert/router biases → `expert_bias`,
  its `swiglu_limit` → `glu_limit`.

A field the file omits takes the family's transformers default (listed in `source`); a multimodal
wrapper is read through its `text_config` (vision/audio towers are not counted), whose omitted fields
take the text config class' defaults. Encoder-only (BERT, RoBERTa, …) and encoder-decoder (T5, BART, …)
models are refused with the reason, as are decoders whose module layout autoplace does not count.
"""

from __future__ import annotations

from pathlib import Path

from autoplace.errors import InputError
from autoplace.io import read_json
from autoplace.specs import hf_families as F
from autoplace.specs.model import ModelSpec

# canonical field → accepted keys (first = the name shown in messages)
_KEYS = {
    "hidden": ("hidden_size", "n_embd", "d_model"),
    "layers": ("num_hidden_layers", "n_layer", "n_layers", "num_layers"),
    "heads": ("num_attention_heads", "n_head", "n_heads"),
    "kv_heads": ("num_key_value_heads", "n_kv_heads", "num_kv_heads"),
    "head_dim": ("head_dim",),
    "ffn": ("intermediate_size",),
    "vocab": ("vocab_size",),
    "max_pos": ("max_position_embeddings", "n_positions", "n_ctx", "max_seq_len"),
    "experts": ("num_local_experts", "num_experts", "moe_num_experts", "n_routed_experts"),
    "top_k": ("num_experts_per_tok", "experts_per_token", "moe_top_k"),
    "act": F.ACT_KEYS,
    "window_pattern": ("sliding_window_pattern", "_sliding_window_pattern"),
}
_GPT2_KEYS = {
    "hidden": ("n_embd", "hidden_size"),
    "layers": ("n_layer", "num_hidden_layers"),
    "heads": ("n_head", "num_attention_heads"),
    "ffn": ("n_inner", "intermediate_size"),
    "max_pos": ("n_positions", "n_ctx", "max_position_embeddings"),
}
_MISSING = object()


class _Reader:
    """Looks fields up in one config dict, then the wrapper (where allowed), then the family's
    transformers defaults; every complaint names the file and the field."""

    def __init__(self, cfg: dict, where: str, fam: F.Family, outer: dict | None = None):
        self.cfg, self.where, self.fam, self.outer = cfg, where, fam, outer or {}
        self.keys = {**_KEYS, **_GPT2_KEYS} if fam.names == "gpt2" else _KEYS
        self.defaults_used: dict[str, object] = {}
        self.analogy = ""          # set when an unknown model_type is read as another family

    def fail(self, msg: str) -> InputError:
        return InputError(f"{self.where}: {msg}")

    def get(self, what: str, outer_too: bool = False):
        """(key, value): the first accepted key with a value; a key present as null gives None (an
        explicit null is the config's own choice, e.g. `q_lora_rank: null`); absent everywhere → the
        family default, else (None, _MISSING)."""
        keys = self.keys.get(what, (what,))
        for src in (self.cfg, self.outer) if outer_too else (self.cfg,):
            present = [k for k in keys if k in src]
            for k in present:
                if src[k] is not None:
                    return k, src[k]
            if present:
                return present[0], None
        for k in keys:
            if k in self.fam.defaults:
                v = self.fam.defaults[k]
                if v not in (None, False, [], ()):
                    self.defaults_used[k] = v
                return k, v
        return None, _MISSING

    def names(self, what: str) -> str:
        ks = self.keys.get(what, (what,))
        alt = f" (or {', '.join(repr(k) for k in ks[1:3])})" if len(ks) > 1 else ""
        return f"{ks[0]!r}{alt}"

    def pos_int(self, key: str, v, *, zero_ok: bool = False) -> int:
        if isinstance(v, bool) or not isinstance(v, int) or v < (0 if zero_ok else 1):
            kind = "a non-negative" if zero_ok else "a positive"
            raise self.fail(f"{key!r} must be {kind} integer, got {v!r}; fix it or use --params")
        return v

    def req(self, what: str, outer_too: bool = False) -> tuple[str, int]:
        k, v = self.get(what, outer_too)
        if v is _MISSING:
            if self.analogy:
                raise self.fail(f"missing {self.names(what)}, which the reading needs ({self.analogy}); "
                                "add it if the model really is Llama-shaped, else use --params")
            raise self.fail(f"missing {self.names(what)}; add it or use --params")
        return k, self.pos_int(k, v)

    def opt(self, what: str, default: int | None = None, *, outer_too: bool = False,
            zero_ok: bool = False) -> tuple[str | None, int | None]:
        """An optional integer: None/absent → `default`."""
        k, v = self.get(what, outer_too)
        if v is _MISSING or v is None:
            return k, default
        return k, self.pos_int(k, v, zero_ok=zero_ok)

    def flag(self, key: str, default: bool = False, outer_too: bool = False) -> bool:
        k, v = self.get(key, outer_too)
        if v is _MISSING or v is None:
            return default
        if not isinstance(v, bool):
            raise self.fail(f"{k!r} must be true or false, got {v!r}")
        return v


def _config_file(path) -> Path:
    p = Path(path).expanduser()
    if p.is_dir():
        f = p / "config.json"
        if not f.is_file():
            raise InputError(f"{p}: no config.json in this directory; pass the model's config.json "
                             "path, a directory containing one, or use --params")
        return f
    if not p.exists():
        raise InputError(f"{p}: no such file; pass a config.json path (or its directory), "
                         "a preset name, or use --params")
    return p


def _read_json(f: Path) -> dict:
    cfg = read_json(f, "--model", "fix the file or use --params")
    if not isinstance(cfg, dict):
        raise InputError(f"{f}: expected a JSON object at top level, got {type(cfg).__name__}; "
                         "pass a Hugging Face config.json")
    return cfg


def _model_name(f: Path, cfg: dict, model_type: str) -> str:
    """The folder's name, else `_name_or_path`'s last part, else the file stem: as one printable line of
    at most `safe.MAX_NAME` characters (control characters and terminal escapes become spaces)."""
    from autoplace.safe import one_line
    name = ""
    if f.name == "config.json" and f.parent.name not in ("", ".", ".."):
        name = f.parent.name
    else:
        nop = cfg.get("_name_or_path")
        if isinstance(nop, str) and nop.strip():
            name = nop.strip().rstrip("/").split("/")[-1]
    if not name:
        name = f.stem if f.name != "config.json" else (str(model_type) or "hf-model")
    return one_line(name).strip() or "hf-model"


_DECODER_ONLY = ("autoplace plans decoder-only LM training; pass a decoder's config.json, or "
                 "--params COUNT for model states only")


_HYBRID = ("autoplace models attention decoders only and does not price state-space or linear-attention "
           "layers as attention (their cost, recurrent state and parallelism differ); use --params COUNT "
           "for model states only")


def _refuse_non_decoders(cfg: dict, where: str) -> None:
    """Encoder-only and encoder-decoder models (and decoders autoplace cannot count): one line with
    the field that says so and the reason."""
    mt = cfg.get("model_type")
    mt = mt.lower() if isinstance(mt, str) else None
    archs = cfg.get("architectures")
    archs = [a for a in archs if isinstance(a, str)] if isinstance(archs, list) else []
    name = archs[0] if archs else f"model_type {mt!r}"
    if cfg.get("is_encoder_decoder") is True or mt in F.ENCODER_DECODER:
        field = ("'is_encoder_decoder': true" if cfg.get("is_encoder_decoder") is True
                 else f"'model_type': {mt!r}")
        raise InputError(f"{where}: {name} is an encoder-decoder model ({field}); {_DECODER_ONLY}")
    if mt in F.ENCODER_ONLY:
        raise InputError(f"{where}: {name} is an encoder-only model ('model_type': {mt!r}); "
                         f"{_DECODER_ONLY}")
    if mt not in F.FAMILIES:
        enc = [a for a in archs if a.endswith(F.ENCODER_ARCH_SUFFIXES)]
        if enc:
            raise InputError(f"{where}: {enc[0]} is an encoder-only model ('architectures'); "
                             f"{_DECODER_ONLY}")
    if mt in F.HYBRID_DECODERS:
        raise InputError(f"{where}: 'model_type' {mt!r}: {F.HYBRID_DECODERS[mt]}; {_HYBRID}")
    if mt not in F.FAMILIES:
        hy = [k for k in F.HYBRID_FIELDS if k in cfg]
        lt = cfg.get("layer_types") or cfg.get("layers_block_type")
        kinds = sorted({t for t in lt if isinstance(t, str) and any(
            w in t.lower() for w in ("mamba", "linear", "ssm", "conv", "recurrent", "deltanet"))}) \
            if isinstance(lt, list) else []
        if hy or kinds:
            why = f"fields {', '.join(repr(k) for k in hy[:3])}" if hy else f"layer types {', '.join(kinds[:3])}"
            raise InputError(f"{where}: {name} has state-space / linear-attention layers ({why}); {_HYBRID}")
    if mt in F.UNSUPPORTED_DECODERS:
        raise InputError(f"{where}: 'model_type' {mt!r} ({F.UNSUPPORTED_DECODERS[mt]}) is not a "
                         "family autoplace counts; use --params COUNT for model states only")


def _text_part(top: dict, where: str):
    """(config dict to read, wrapper dict, model_type, notes)."""
    notes: list[str] = []
    outer_type = top.get("model_type") if isinstance(top.get("model_type"), str) else None
    if top.get("text_config") is not None:
        tc = top["text_config"]
        if not isinstance(tc, dict):
            raise InputError(f"{where}: 'text_config' must be a JSON object, got {type(tc).__name__}")
        _refuse_non_decoders(tc, where)
        mt = tc.get("model_type") or F.TEXT_OF_WRAPPER.get((outer_type or "").lower())
        notes.append(f"text_config of {outer_type or 'a multimodal wrapper'}; "
                     "vision/audio towers not counted")
        return tc, top, mt, notes
    mt = top.get("model_type")
    if isinstance(mt, str) and mt.lower() in F.TEXT_OF_WRAPPER:
        # a wrapper without text_config: its text model is the wrapper class' default sub-config
        # (Gemma3Config()), or the language fields sit at the top level (Qwen2-VL)
        notes.append(f"{mt} read as its text model {F.TEXT_OF_WRAPPER[mt.lower()]!r}; "
                     "vision/audio towers not counted")
        return top, {}, F.TEXT_OF_WRAPPER[mt.lower()], notes
    return top, {}, mt, notes


def _windows(r: _Reader, layers: int, notes: list) -> dict:
    """sliding_window / global_every from `sliding_window` + `layer_types` (or the family pattern)."""
    fam, cfg = r.fam, r.cfg
    k, sw = r.get("sliding_window")
    if sw is _MISSING or sw is None or fam.windows == "none":
        return {}
    sw = r.pos_int(k, sw, zero_ok=True)
    if fam.windows == "qwen" and not r.flag("use_sliding_window", False):
        return {}
    lt = cfg.get("layer_types")
    if isinstance(lt, list) and lt:
        if len(lt) != layers or not all(isinstance(t, str) for t in lt):
            raise r.fail(f"'layer_types' must list one attention type per layer ({layers}), "
                         f"got {len(lt)} entries")
        full = [i for i, t in enumerate(lt) if "sliding" not in t]
    elif fam.windows == "alternate":
        full = [i for i in range(layers) if (i + 1) % 2 == 0]
    elif fam.windows == "pattern":
        p = r.opt("window_pattern", 6)[1]
        full = [i for i in range(layers) if (i + 1) % p == 0]
    elif fam.windows == "qwen":
        mwl = r.opt("max_window_layers", 28, zero_ok=True)[1]
        full = [i for i in range(min(mwl, layers))]
    else:
        full = []
    if not sw or len(full) == layers:
        return {}
    if not full:
        return {"sliding_window": sw}
    every = full[0] + 1
    if full != [i for i in range(layers) if (i + 1) % every == 0]:
        every = max(2, round(layers / len(full)))
        notes.append(f"{len(full)} of {layers} layers attend globally in an irregular pattern; "
                     f"windows modelled as every {every}-th layer global")
    return {"sliding_window": sw, "global_every": every}


def _pretrain(r: _Reader, max_pos: int, windowed: bool, notes: list) -> int:
    cfg, fam = r.cfg, r.fam
    for key in ("rope_scaling", "rope_parameters"):
        rope = cfg.get(key)
        if isinstance(rope, dict) and isinstance(rope.get("original_max_position_embeddings"), int):
            n = rope["original_max_position_embeddings"]
            notes.append(f"pretrain_seq_len {n} ({key}.original_max_position_embeddings)")
            return n
    if isinstance(cfg.get("original_max_position_embeddings"), int):     # Phi-3 128k
        n = cfg["original_max_position_embeddings"]
        notes.append(f"pretrain_seq_len {n} (original_max_position_embeddings)")
        return n
    p = fam.pretrain
    n = {"max_pos": max_pos, "mistral": 8192 if windowed else 0,
         "mixtral": max_pos if max_pos == 32768 else 0}.get(p, p) if isinstance(p, str) else p
    if n:
        notes.append(f"pretrain_seq_len {n} ({fam.pretrain_cite})")
    return n


def _moe(r: _Reader, layers: int, kw: dict, notes: list) -> None:
    """Experts, top-k, widths, shared expert and the dense/MoE layer pattern."""
    fam = r.fam
    ek, experts = r.opt("experts", zero_ok=True)
    _, ffn = r.opt("ffn")
    _, moe_ffn = r.opt("moe_intermediate_size")
    if "llama4" in fam.notes:
        _llama4_moe(r, layers, kw, notes)
        return
    if not experts:
        if ffn is None:
            r.req("ffn")
        kw["ffn_hidden"] = ffn
        return
    tk, top_k = r.opt("top_k")
    if top_k is None:
        raise r.fail(f"missing 'num_experts_per_tok' for an MoE model ({ek!r}={experts}); "
                     "add it or use --params")
    if top_k > experts:
        raise r.fail(f"{tk!r}={top_k} exceeds {ek!r}={experts}; fix one of them")
    ffn = ffn if ffn is not None else moe_ffn
    if ffn is None:
        raise r.fail("missing 'intermediate_size' (or 'moe_intermediate_size'); add it or use --params")
    shared = r.opt("shared_expert_intermediate_size", 0, zero_ok=True)[1]
    n_shared = r.opt("n_shared_experts", 0, zero_ok=True)[1]       # DeepSeek-MoE style
    if not shared and n_shared and moe_ffn:
        shared = n_shared * moe_ffn
    step = r.opt("decoder_sparse_step", 1)[1]
    _, dense_ids = r.get("mlp_only_layers")
    dense_ids = [] if dense_ids in (None, _MISSING) else dense_ids
    if not isinstance(dense_ids, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) and 0 <= i < layers for i in dense_ids):
        raise r.fail(f"'mlp_only_layers' must be a list of layer indices in 0..{layers - 1}, "
                     f"got {dense_ids!r}")
    first_dense = r.opt("first_k_dense_replace", 0, zero_ok=True)[1]
    freq = r.opt("moe_layer_freq", 1)[1]        # DeepSeek: MoE where layer_idx % freq == 0
    ids = set(dense_ids) | set(range(min(first_dense, layers))) | {
        i for i in range(layers) if i % freq}
    if not any((i + 1) % step == 0 for i in range(layers) if i not in ids):
        raise r.fail(f"no layer is left for the {experts} experts ({ek!r}); fix 'first_k_dense_replace'"
                     " / 'mlp_only_layers' / 'decoder_sparse_step' or drop the experts")
    kw.update(ffn_hidden=ffn, num_experts=experts, top_k=top_k, moe_layer_freq=step,
              expert_ffn_hidden=moe_ffn if moe_ffn and moe_ffn != ffn else None,
              shared_expert_ffn_hidden=shared, dense_layer_ids=tuple(sorted(ids)))
    if shared and fam.shared_gate:
        kw["shared_expert_gate"] = True
    if fam.expert_bias:
        kw["expert_bias"] = True


def _llama4_moe(r: _Reader, layers: int, kw: dict, notes: list) -> None:
    """Llama 4 (transformers modeling_llama4): layer i is MoE when i is in `moe_layers`, which
    defaults to range(step − 1, layers, step) with step = `interleave_moe_layer_step`; MoE layers hold
    `num_local_experts` routed experts and one shared expert, all `intermediate_size` wide; dense
    layers an MLP `intermediate_size_mlp` wide."""
    ek, experts = r.req("experts")
    _, top_k = r.req("top_k")
    _, width = r.req("ffn")
    _, dense_w = r.req("intermediate_size_mlp")
    _, step = r.req("interleave_moe_layer_step")
    _, ids = r.get("moe_layers")
    if ids in (None, _MISSING):
        ids = list(range(step - 1, layers, step))
    if not isinstance(ids, list) or not ids or not all(
            isinstance(i, int) and not isinstance(i, bool) and 0 <= i < layers for i in ids):
        raise r.fail(f"'moe_layers' must be a non-empty list of layer indices in 0..{layers - 1}, got {ids!r}")
    if top_k > experts:
        raise r.fail(f"'num_experts_per_tok'={top_k} exceeds {ek!r}={experts}; fix one of them")
    moe = set(ids)
    kw.update(ffn_hidden=dense_w, num_experts=experts, top_k=top_k, moe_layer_freq=1,
              expert_ffn_hidden=width if width != dense_w else None, shared_expert_ffn_hidden=width,
              dense_layer_ids=tuple(i for i in range(layers) if i not in moe))
    notes.append(f"Llama 4: {len(moe)} of {layers} layers MoE ({experts} experts, top-{top_k}, one shared "
                 f"expert, width {width}), dense layers' MLP {dense_w} wide; Q/K L2 norm has no weights")
    _, chunk = r.opt("attention_chunk_size")
    _, every = r.opt("no_rope_layer_interval", 4)
    if chunk:
        notes.append(f"chunked attention ({chunk}-token chunks on {every - 1} of every {every} layers, "
                     f"every {every}th a global NoPE layer) priced as full causal attention: exact for "
                     f"sequences ≤ {chunk}; above, those layers' attention is overestimated")


def _mla(r: _Reader, kw: dict, hidden: int, heads: int) -> None:
    if r.flag("attention_bias", False):
        raise r.fail("'attention_bias': true with multi-head latent attention is not modelled; "
                     "set it false or use --params")
    q_lora = r.opt("q_lora_rank", 0, zero_ok=True)[1]          # null: a full-rank query projection
    kw.update(q_lora_rank=q_lora, kv_lora_rank=r.req("kv_lora_rank")[1],
              qk_nope_head_dim=r.req("qk_nope_head_dim")[1],
              qk_rope_head_dim=r.opt("qk_rope_head_dim", 0, zero_ok=True)[1],
              v_head_dim=r.req("v_head_dim")[1], kv_heads=None,
              head_dim=None if hidden % heads == 0 else kw["head_dim"])


def _yarn_mscale(cfg: dict) -> float:
    """YaRN attention factor of rope_scaling / rope_parameters (transformers `_compute_yarn_parameters`):
    `attention_factor` if given, else get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)
    when both are given, else get_mscale(factor) = 0.1·ln(factor) + 1; 1 for other rope types."""
    import math

    def get_mscale(scale, m=1.0):
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    def num(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    for key in ("rope_parameters", "rope_scaling"):
        v = cfg.get(key)
        if not isinstance(v, dict) or str(v.get("rope_type") or v.get("type") or "").lower() != "yarn":
            continue
        if num(v.get("attention_factor")) and v["attention_factor"] > 0:
            return float(v["attention_factor"])
        f = v.get("factor")
        if not num(f):
            return 1.0
        if num(v.get("mscale")) and num(v.get("mscale_all_dim")) and v["mscale_all_dim"]:
            return get_mscale(f, v["mscale"]) / get_mscale(f, v["mscale_all_dim"])
        return get_mscale(f)
    return 1.0


def _rope_theta(cfg: dict) -> float | None:
    """rope_theta (transformers v4), rope_parameters.rope_theta (v5), rotary_emb_base (GPT-NeoX)."""
    for key in ("rope_parameters", "rope_scaling"):
        v = cfg.get(key)
        if isinstance(v, dict) and isinstance(v.get("rope_theta"), (int, float)) and not isinstance(v["rope_theta"], bool):
            if v["rope_theta"] > 0:
                return float(v["rope_theta"])
    for v in (cfg.get("rope_theta"), cfg.get("rotary_emb_base")):
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0:
            return float(v)
    return None


def load_hf_config(path) -> ModelSpec:
    """A `ModelSpec` from a Hugging Face config.json (file or directory containing one)."""
    f = _config_file(path)
    top = _read_json(f)
    where = str(f)
    _refuse_non_decoders(top, where)
    cfg, outer, model_type, notes = _text_part(top, where)
    if not isinstance(model_type, (str, type(None))):
        raise InputError(f"{where}: 'model_type' must be a string, got {model_type!r}")
    fam = F.FAMILIES.get((model_type or "").lower())
    analogy = ""
    if fam is None:
        fam = F.UNKNOWN
        analogy = (f"model_type {model_type!r} is unknown: read by analogy with Llama (its field names, "
                   "gated MLP, RMSNorm, RoPE)" if model_type else
                   "no model_type: read by analogy with Llama (its field names, gated MLP, RMSNorm, RoPE)")
        notes.append(analogy)
    r = _Reader(cfg, where, fam, outer)
    r.analogy = analogy

    _, hidden = r.req("hidden")
    _, layers = r.req("layers")
    hk, heads = r.req("heads")
    _, vocab = r.req("vocab", outer_too=True)
    kvk, kv = r.opt("kv_heads")
    if kv is not None and heads % kv:
        raise r.fail(f"{hk!r}={heads} is not divisible by {kvk!r}={kv}; "
                     "fix one of them (GQA needs whole groups)")
    _, head_dim = r.opt("head_dim")
    if head_dim is None and hidden % heads:
        raise r.fail(f"hidden size {hidden} is not divisible by {hk!r}={heads}; add 'head_dim'")
    if head_dim is not None and hidden % heads == 0 and head_dim == hidden // heads:
        head_dim = None
    _, max_pos = r.opt("max_pos", 2048, outer_too=True)

    ak, act = r.get("act")
    activation = ""
    if act not in (None, _MISSING):
        activation = F.ACTIVATIONS.get(str(act).lower()) if isinstance(act, str) else None
        if activation is None:
            raise r.fail(f"{ak!r}={act!r} is not an activation autoplace models (silu, gelu*, relu2, "
                         "relu); fix it or use --params")
    if fam is F.UNKNOWN and activation not in ("", "silu"):
        notes.append(f"MLP taken as gated ({activation}); autoplace cannot tell without the family")

    kw: dict = dict(layers=layers, hidden=hidden, heads=heads, vocab=vocab,
                    kv_heads=kv if kv is not None and kv != heads else None, head_dim=head_dim,
                    max_seq_len=max_pos, gated_mlp=fam.gated, activation=activation, norm=fam.norm,
                    position=fam.position, norms_per_layer=fam.norms_per_layer)
    theta = _rope_theta(cfg)
    if theta:
        kw["rope_theta"] = theta
    ms = _yarn_mscale(cfg)
    if abs(ms - 1.0) > 1e-9:
        kw["rope_mscale"] = ms
        notes.append(f"YaRN attention factor {ms:.4g}")
    if fam.names == "gpt2":
        _, ffn = r.opt("ffn", 4 * hidden)
        kw["ffn_hidden"] = ffn
    else:
        _moe(r, layers, kw, notes)

    kw["attn_bias"] = fam.attn_bias or ("attention_bias" in fam.bias_keys and r.flag("attention_bias"))
    kw["mlp_bias"] = fam.mlp_bias or ("mlp_bias" in fam.bias_keys and r.flag("mlp_bias"))
    qkv = fam.qkv_bias if isinstance(fam.qkv_bias, bool) else r.flag(fam.qkv_bias)
    if qkv and not kw["attn_bias"]:
        kw["qkv_bias"] = True
    kw["qk_norm"] = fam.qk_norm if isinstance(fam.qk_norm, bool) else r.flag(fam.qk_norm)
    if kw["qk_norm"] and "qk_norm_all_heads" in fam.notes:
        d = head_dim or hidden // heads
        short = layers * ((heads + (kv or heads)) * d - 2 * d)
        notes.append(f"approximate: Q/K norms span all heads, counted as per-head norms ({short} parameters short)")
    if fam.attn_sinks:
        kw["attn_sinks"] = True
    _, kv_lora = r.get("kv_lora_rank")
    if kv_lora not in (None, _MISSING, 0):
        _mla(r, kw, hidden, heads)
        kw["mtp_layers"] = r.opt("num_nextn_predict_layers", 0, zero_ok=True)[1]
        if kw["mtp_layers"]:
            notes.append(f"{kw['mtp_layers']} multi-token-prediction module(s) in mtp_params(), "
                         "not in total_params()")
        if cfg.get("topk_method") == "noaux_tc":
            notes.append("router e_score_correction_bias is a buffer (not counted)")
    kw.update(_windows(r, layers, notes))
    kw["tied_embeddings"] = r.flag("tie_word_embeddings", True, outer_too=True)
    kw["pretrain_seq_len"] = _pretrain(r, max_pos, bool(kw.get("sliding_window")), notes)

    if (model_type or "").lower() == "gpt_neox":
        if r.flag("use_parallel_residual", True):
            notes.append("parallel residual")
    if fam.head_bias:
        notes.append(f"approximate: the lm_head bias ({vocab} parameters) is not counted")
    lim = cfg.get("swiglu_limit")
    if lim is not None and fam.gated:
        if isinstance(lim, bool) or not isinstance(lim, (int, float)) or not lim >= 0:
            raise r.fail(f"'swiglu_limit'={lim!r} must be a non-negative number; fix it or drop it")
        kw["glu_limit"] = float(lim)
        notes.append(f"clamped SwiGLU (swiglu_limit {lim})")
    if r.defaults_used:
        cite = fam.cite.rsplit("/", 1)[-1]
        notes.append(f"transformers defaults ({cite}): "
                     + ", ".join(f"{k}={v}" for k, v in r.defaults_used.items()))

    label = model_type or "unknown"
    source = f"hf-config:{f} (model_type={label}" + "".join(f"; {n}" for n in notes) + ")"
    try:
        return ModelSpec(name=_model_name(f, top, model_type or ""), source=source, analogy=analogy, **kw)
    except InputError as e:
        raise InputError(f"{where}: {e}") from None
