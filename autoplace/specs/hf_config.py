"""Read a Hugging Face `config.json` into a `ModelSpec` (no transformers dependency).

Field names follow huggingface/transformers `models/*/configuration_*.py` (see
shared/docs/launchers_and_libraries.md §3.3):

* Llama-style decoders (llama, mistral, qwen2, qwen3, gemma, phi3, and any unknown `model_type`
  that uses the same names): `hidden_size`, `num_hidden_layers`, `num_attention_heads`,
  `num_key_value_heads` (absent ⇒ MHA), `head_dim` (optional), `intermediate_size` (SwiGLU,
  3 matrices), `vocab_size`, `tie_word_embeddings`, `max_position_embeddings`.
* MoE: Mixtral `num_local_experts`; Qwen2-MoE/Qwen3-MoE `num_experts` (transformers v5 maps it to
  `num_local_experts`; both are read), `num_experts_per_tok`, `moe_intermediate_size`,
  `shared_expert_intermediate_size`, `decoder_sparse_step`, `mlp_only_layers`.
* GPT-NeoX: LayerNorm, biases (`attention_bias`, default true; MLP always), GeLU 2-matrix MLP,
  rotary, untied.
* GPT-2: `n_layer`, `n_embd`, `n_head`, `n_inner` (None ⇒ 4·n_embd), `n_positions` (learned
  table), LayerNorm, biases, tied.
* transformers v5: `dtype` / `rope_parameters` are accepted (they do not change parameter counts);
  multimodal wrappers are read through their `text_config` (the vision tower is not counted).

`tie_word_embeddings`, when absent, takes the default of the family's transformers config class
(`PretrainedConfig`'s True for GPT-2 and unknown types, False for Llama/Mistral/Qwen/Mixtral/NeoX;
transformers omits a value from config.json when it equals the base default).

Three architectural details of some families have no `ModelSpec` field yet: Q/K/V-only biases
(Qwen2, Qwen2-MoE), per-head Q/K RMSNorm (Qwen3, Qwen3-MoE) and the Qwen2-MoE shared-expert gate.
They are passed as `qkv_bias`, `qk_norm`, `shared_expert_gate` (and `mlp_only_layers` as
`dense_layer_ids`) as soon as `ModelSpec` has those fields; until then the spec is a close
approximation and `source` says what was left out.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

from autoplace.errors import InputError
from autoplace.io import read_json
from autoplace.specs.model import ModelSpec

_SPEC_FIELDS = {f.name for f in fields(ModelSpec)}


@dataclass(frozen=True)
class _Family:
    kind: str = "llama"              # "llama" | "neox" | "gpt2"
    tie: bool = False                # tie_word_embeddings default of the config class
    max_pos: int = 2048              # max_position_embeddings default of the config class
    bias_keys: tuple = ("attention_bias", "mlp_bias")  # bias flags the modeling code honours
    qkv_bias: bool = False           # Q/K/V biases without an output bias (Qwen2)
    qkv_bias_key: str | None = None  # config key that switches qkv_bias (Qwen2-MoE)
    qk_norm: bool = False            # per-head RMSNorm on Q and K (Qwen3)
    top_k: int | None = None         # num_experts_per_tok default
    shared_gate: bool = False        # sigmoid gate Linear(h, 1) on the shared expert (Qwen2-MoE)


_FAMILIES: dict[str, _Family] = {
    "llama": _Family(max_pos=2048),
    "mistral": _Family(max_pos=4096 * 32, bias_keys=()),
    "mixtral": _Family(max_pos=4096 * 32, bias_keys=(), top_k=2),
    "qwen2": _Family(max_pos=32768, bias_keys=(), qkv_bias=True),
    "qwen3": _Family(max_pos=32768, bias_keys=("attention_bias",), qk_norm=True),
    "qwen2_moe": _Family(max_pos=32768, bias_keys=(), qkv_bias=True, qkv_bias_key="qkv_bias",
                         top_k=4, shared_gate=True),
    "qwen3_moe": _Family(max_pos=32768, bias_keys=("attention_bias",), qk_norm=True, top_k=8),
    "gemma": _Family(tie=True, max_pos=8192, bias_keys=("attention_bias",)),
    "phi3": _Family(max_pos=4096, bias_keys=()),
    "gpt_neox": _Family(kind="neox", max_pos=2048, bias_keys=("attention_bias",)),
    "gpt2": _Family(kind="gpt2", tie=True, max_pos=1024, bias_keys=()),
}
# Unknown model_type: read with Llama names; PretrainedConfig's base default for tying.
_UNKNOWN = _Family(tie=True, max_pos=2048)

# canonical field → accepted keys, in the order shown in error messages
_KEYS = {
    "hidden": ("hidden_size", "n_embd", "d_model"),
    "layers": ("num_hidden_layers", "n_layer", "n_layers", "num_layers"),
    "heads": ("num_attention_heads", "n_head", "n_heads"),
    "kv_heads": ("num_key_value_heads", "n_kv_heads", "num_kv_heads"),
    "ffn": ("intermediate_size",),
    "vocab": ("vocab_size",),
    "max_pos": ("max_position_embeddings", "n_positions", "n_ctx", "max_seq_len"),
    "experts": ("num_local_experts", "num_experts", "moe_num_experts", "n_routed_experts"),
    "top_k": ("num_experts_per_tok", "moe_top_k"),
}
_GPT2_KEYS = {
    "hidden": ("n_embd", "hidden_size"),
    "layers": ("n_layer", "num_hidden_layers"),
    "heads": ("n_head", "num_attention_heads"),
    "ffn": ("n_inner", "intermediate_size"),
    "max_pos": ("n_positions", "n_ctx", "max_position_embeddings"),
}


class _Reader:
    """Looks fields up in one config dict; every complaint names the file and the field."""

    def __init__(self, cfg: dict, where: str, keys: dict, outer: dict | None = None):
        self.cfg, self.where, self.keys, self.outer = cfg, where, keys, outer or {}

    def fail(self, msg: str) -> InputError:
        return InputError(f"{self.where}: {msg}")

    def find(self, what: str, outer_too: bool = False):
        """(key, value) of the first accepted key present with a non-null value."""
        for src in (self.cfg, self.outer) if outer_too else (self.cfg,):
            for k in self.keys[what]:
                if src.get(k) is not None:
                    return k, src[k]
        return None, None

    def names(self, what: str) -> str:
        ks = self.keys[what]
        alt = f" (or {', '.join(repr(k) for k in ks[1:3])})" if len(ks) > 1 else ""
        return f"{ks[0]!r}{alt}"

    def pos_int(self, key: str, v, *, zero_ok: bool = False) -> int:
        if isinstance(v, bool) or not isinstance(v, int) or v < (0 if zero_ok else 1):
            kind = "a non-negative" if zero_ok else "a positive"
            raise self.fail(f"{key!r} must be {kind} integer, got {v!r}; fix it or use --params")
        return v

    def req(self, what: str, outer_too: bool = False) -> tuple[str, int]:
        k, v = self.find(what, outer_too)
        if k is None:
            raise self.fail(f"missing {self.names(what)}; add it or use --params")
        return k, self.pos_int(k, v)

    def opt(self, what: str, default: int | None = None, *, outer_too: bool = False,
            zero_ok: bool = False) -> tuple[str | None, int | None]:
        k, v = self.find(what, outer_too)
        if k is None:
            return None, default
        return k, self.pos_int(k, v, zero_ok=zero_ok)

    def key_int(self, key: str, default: int | None, *, zero_ok: bool = False) -> int | None:
        v = self.cfg.get(key)
        return default if v is None else self.pos_int(key, v, zero_ok=zero_ok)

    def flag(self, key: str, default: bool, outer_too: bool = False) -> bool:
        for src in (self.cfg, self.outer) if outer_too else (self.cfg,):
            if key in src and src[key] is not None:
                v = src[key]
                if not isinstance(v, bool):
                    raise self.fail(f"{key!r} must be true or false, got {v!r}")
                return v
        return default


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
    if f.name == "config.json" and f.parent.name not in ("", ".", ".."):
        return f.parent.name
    nop = cfg.get("_name_or_path")
    if isinstance(nop, str) and nop.strip():
        return nop.strip().rstrip("/").split("/")[-1]
    return f.stem if f.name != "config.json" else (model_type or "hf-model")


def _rope_params(cfg: dict) -> dict:
    for key in ("rope_parameters", "rope_scaling"):      # transformers v5 / v4
        v = cfg.get(key)
        if isinstance(v, dict):
            return v
    return {}


def _rope_theta(cfg: dict) -> float | None:
    """rope_theta (v4), rope_parameters.rope_theta (v5), rotary_emb_base (GPT-NeoX)."""
    for v in (cfg.get("rope_theta"), _rope_params(cfg).get("rope_theta"), cfg.get("rotary_emb_base")):
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0:
            return float(v)
    return None


def _pretrain_len(cfg: dict, max_pos: int) -> int:
    """The pre-training sequence length: `original_max_position_embeddings` of a long-context RoPE
    extension (Llama 3.1's rope_type "llama3": 8192; YaRN), else max_position_embeddings when it is a
    pre-training-sized context (≤ 8192); 0 (unknown) for long-context configs without it (e.g.
    Mistral-Nemo's 1,024,000, Qwen3's 40,960)."""
    orig = _rope_params(cfg).get("original_max_position_embeddings")
    if isinstance(orig, int) and not isinstance(orig, bool) and orig > 0:
        return orig
    return max_pos if max_pos <= 8192 else 0


def _activation(cfg: dict) -> str:
    """hidden_act / activation_function → silu | gelu | relu2 | relu ('' when absent)."""
    a = cfg.get("hidden_act") or cfg.get("activation_function") or ""
    if not isinstance(a, str):
        return ""
    a = a.lower()
    if a in ("silu", "swish"):
        return "silu"
    if a.startswith("gelu"):
        return "gelu"
    if a in ("relu2", "squared_relu", "relu_squared"):
        return "relu2"
    return "relu" if a == "relu" else ""


def load_hf_config(path) -> ModelSpec:
    """A `ModelSpec` from a Hugging Face config.json (file or directory containing one)."""
    f = _config_file(path)
    top = _read_json(f)
    where = str(f)
    notes: list[str] = []

    cfg, outer, outer_type = top, {}, None
    if "text_config" in top and top["text_config"] is not None:
        if not isinstance(top["text_config"], dict):
            raise InputError(f"{where}: 'text_config' must be a JSON object, got "
                             f"{type(top['text_config']).__name__}")
        cfg, outer, outer_type = top["text_config"], top, top.get("model_type")
        notes.append(f"text_config of {outer_type or 'a multimodal wrapper'}; "
                     "vision/audio towers not counted")

    model_type = cfg.get("model_type") or (None if outer_type else top.get("model_type"))
    if not isinstance(model_type, (str, type(None))):
        raise InputError(f"{where}: 'model_type' must be a string, got {model_type!r}")
    fam = _FAMILIES.get((model_type or "").lower())
    if fam is None:
        fam = _UNKNOWN
        notes.append(f"model_type {model_type!r} unknown: read with Llama field names "
                     "(SwiGLU, RMSNorm, RoPE)" if model_type else
                     "no model_type: read with Llama field names (SwiGLU, RMSNorm, RoPE)")

    if cfg.get("kv_lora_rank") is not None or cfg.get("q_lora_rank") is not None:
        raise InputError(f"{where}: model_type {model_type!r} uses multi-head latent attention "
                         "('kv_lora_rank'), which autoplace does not model; use --params")

    r = _Reader(cfg, where, {**_KEYS, **_GPT2_KEYS} if fam.kind == "gpt2" else _KEYS, outer)

    _, hidden = r.req("hidden")
    _, layers = r.req("layers")
    hk, heads = r.req("heads")
    _, vocab = r.req("vocab", outer_too=True)
    kvk, kv = r.opt("kv_heads")
    if kv is not None and heads % kv:
        raise r.fail(f"{hk!r}={heads} is not divisible by {kvk!r}={kv}; "
                     "fix one of them (GQA needs whole groups)")
    head_dim = r.key_int("head_dim", None)
    if head_dim is None and hidden % heads:
        raise r.fail(f"hidden size {hidden} is not divisible by {hk!r}={heads}; add 'head_dim'")
    if head_dim is not None and head_dim == hidden // heads and hidden % heads == 0:
        head_dim = None
    _, max_pos = r.opt("max_pos", fam.max_pos, outer_too=True)

    kw: dict = dict(layers=layers, hidden=hidden, heads=heads, vocab=vocab,
                    kv_heads=kv if kv is not None and kv != heads else None, head_dim=head_dim,
                    max_seq_len=max_pos, pretrain_seq_len=_pretrain_len(cfg, max_pos))
    theta = _rope_theta(cfg)
    if theta:
        kw["rope_theta"] = theta
    act = _activation(cfg)
    if act:
        kw["activation"] = act
    ext: dict = {}   # fields ModelSpec may not have yet

    if fam.kind == "gpt2":
        _, ffn = r.opt("ffn", 4 * hidden)
        kw.update(ffn_hidden=ffn, gated_mlp=False, attn_bias=True, mlp_bias=True,
                  norm="layernorm", position="learned")
    elif fam.kind == "neox":
        _, ffn = r.req("ffn")
        kw.update(ffn_hidden=ffn, gated_mlp=False, mlp_bias=True, norm="layernorm",
                  position="rope", attn_bias=r.flag("attention_bias", True))
        if cfg.get("use_parallel_residual", True):
            notes.append("parallel residual")
    else:
        kw.update(gated_mlp=True, norm="rmsnorm", position="rope",
                  attn_bias=("attention_bias" in fam.bias_keys
                             and r.flag("attention_bias", False)),
                  mlp_bias="mlp_bias" in fam.bias_keys and r.flag("mlp_bias", False))
        qkv = r.flag(fam.qkv_bias_key, fam.qkv_bias) if fam.qkv_bias_key else fam.qkv_bias
        if qkv and not kw["attn_bias"]:
            ext["qkv_bias"] = True
        if fam.qk_norm:
            ext["qk_norm"] = True

        # ---- mixture of experts ----
        ek, experts = r.opt("experts", zero_ok=True)
        if experts:
            tk, top_k = r.opt("top_k", fam.top_k)
            if top_k is None:
                raise r.fail("missing 'num_experts_per_tok' for an MoE model "
                             f"({ek!r}={experts}); add it or use --params")
            if top_k > experts:
                raise r.fail(f"{tk!r}={top_k} exceeds {ek!r}={experts}; fix one of them")
            moe_ffn = r.key_int("moe_intermediate_size", None)
            _, ffn = r.opt("ffn", moe_ffn)
            if ffn is None:
                raise r.fail("missing 'intermediate_size' (or 'moe_intermediate_size'); "
                             "add it or use --params")
            shared = r.key_int("shared_expert_intermediate_size", 0, zero_ok=True)
            n_shared = r.key_int("n_shared_experts", 0, zero_ok=True)   # DeepSeek-MoE style
            if not shared and n_shared and moe_ffn:
                shared = n_shared * moe_ffn
            step = r.key_int("decoder_sparse_step", 1)
            kw.update(ffn_hidden=ffn, num_experts=experts, top_k=top_k, moe_layer_freq=step,
                      expert_ffn_hidden=moe_ffn if moe_ffn and moe_ffn != ffn else None,
                      shared_expert_ffn_hidden=shared)
            if shared and fam.shared_gate:
                ext["shared_expert_gate"] = True
            if r.key_int("moe_layer_freq", 1) != 1:
                raise r.fail("'moe_layer_freq' other than 1 (DeepSeek layer pattern) is not "
                             "modelled; use --params")
            dense_ids = cfg.get("mlp_only_layers") or []
            if not isinstance(dense_ids, list) or not all(
                    isinstance(i, int) and not isinstance(i, bool) and 0 <= i < layers
                    for i in dense_ids):
                raise r.fail(f"'mlp_only_layers' must be a list of layer indices in "
                             f"0..{layers - 1}, got {dense_ids!r}")
            first_dense = r.key_int("first_k_dense_replace", 0, zero_ok=True)
            dense_ids = sorted(set(dense_ids) | set(range(min(first_dense, layers))))
            if dense_ids:
                if "dense_layer_ids" not in _SPEC_FIELDS:
                    raise r.fail(f"dense layers {dense_ids} among the MoE layers "
                                 "('mlp_only_layers' / 'first_k_dense_replace') are not "
                                 "modelled yet; use --params")
                ext["dense_layer_ids"] = tuple(dense_ids)
        else:
            _, ffn = r.req("ffn")
            kw["ffn_hidden"] = ffn

    kw["tied_embeddings"] = r.flag("tie_word_embeddings", fam.tie, outer_too=True)
    if ("tie_word_embeddings" not in cfg and "tie_word_embeddings" not in outer
            and fam is _UNKNOWN):
        notes.append("tie_word_embeddings absent: true (transformers' default)")

    for k, v in ext.items():
        if k in _SPEC_FIELDS:
            kw[k] = v
        elif k == "qkv_bias":    # round up: count the output-projection bias too (+hidden/layer)
            kw["attn_bias"] = True
            notes.append("approximate: ModelSpec has no 'qkv_bias' field, Q/K/V biases counted "
                         "as attn_bias (+hidden per layer)")
        else:
            notes.append(f"approximate: ModelSpec has no {k!r} field")

    label = model_type or "unknown"
    source = f"hf-config:{f} (model_type={label}" + "".join(f"; {n}" for n in notes) + ")"
    try:
        return ModelSpec(name=_model_name(f, top, model_type or ""),
                         source=source, **kw)
    except InputError as e:
        raise InputError(f"{where}: {e}") from None
