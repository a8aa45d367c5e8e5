"""Named model presets with exact public shapes.

Every preset names where its shape comes from in `PRESET_DESCRIPTIONS` (and, shortened, in
`ModelSpec.source`). Two groups:

* Hugging Face checkpoints (Llama-2, Llama-3/3.1, Mixtral): the numbers are those of the published
  `config.json`, and `total_params()` equals the published parameter count exactly
  (e.g. Llama-2-7b 6,738,415,616; asserted in tests/test_model_spec.py).
* Megatron-LM GPT shapes from Narayanan et al. 2021 (SC21) Table 1 and Korthikanti et al. 2022
  Table 3, as transcribed in shared/validation/public_runs.json: learned positions, LayerNorm,
  biases, 4h GeLU MLP, tied embeddings, vocab 51,200 (already padded), seq 2048. For these
  `total_params()` equals the paper's Eq. (2) plus the final LayerNorm.

Naming: `70b` is **Llama-2-70B** (vocab 32,000); Llama-3 sizes carry a `llama3-` prefix
(`llama3-70b`, vocab 128,256 — about 4× the embedding memory).
"""

from __future__ import annotations

from autoplace.errors import InputError
from autoplace.specs.model import ModelSpec


def _llama(key: str, name: str, *, layers: int, hidden: int, heads: int, kv_heads: int,
           ffn: int, vocab: int, max_seq_len: int, where: str, **kw) -> ModelSpec:
    """Llama-family decoder: RoPE, RMSNorm, SwiGLU, no biases, untied (unless kw says otherwise)."""
    return ModelSpec(name=name, layers=layers, hidden=hidden, heads=heads, vocab=vocab,
                     ffn_hidden=ffn, kv_heads=kv_heads, gated_mlp=True, tied_embeddings=False,
                     attn_bias=False, mlp_bias=False, norm="rmsnorm", position="rope",
                     max_seq_len=max_seq_len, pretrain_seq_len=max_seq_len, source=f"preset:{key} ({where})", **kw)


def _gpt(key: str, name: str, *, layers: int, hidden: int, heads: int, where: str,
         vocab: int = 51200, max_seq_len: int = 2048) -> ModelSpec:
    """Megatron/GPT-3-style decoder: learned positions, LayerNorm, biases, 4h GeLU MLP, tied."""
    return ModelSpec(name=name, layers=layers, hidden=hidden, heads=heads, vocab=vocab,
                     ffn_hidden=4 * hidden, kv_heads=None, gated_mlp=False, tied_embeddings=True,
                     attn_bias=True, mlp_bias=True, norm="layernorm", position="learned",
                     max_seq_len=max_seq_len, pretrain_seq_len=max_seq_len, source=f"preset:{key} ({where})")


_SC21 = "Narayanan et al. 2021 (SC21) Table 1"
_KORTH = "Korthikanti et al. 2022 Table 3"

# key → (ModelSpec, description)
_TABLE: dict[str, tuple[ModelSpec, str]] = {}


def _add(key: str, spec: ModelSpec, description: str) -> None:
    _TABLE[key] = (spec, description)


# ---- Llama 2 (HF meta-llama/Llama-2-*-hf config.json; Touvron et al. 2023 Table 1) ---------------
_add("7b", _llama("7b", "Llama-2-7B", layers=32, hidden=4096, heads=32, kv_heads=32, ffn=11008,
                  vocab=32000, max_seq_len=4096, where="meta-llama/Llama-2-7b-hf config.json"),
     "Llama-2-7B: HF meta-llama/Llama-2-7b-hf config.json; 6,738,415,616 params")
_add("13b", _llama("13b", "Llama-2-13B", layers=40, hidden=5120, heads=40, kv_heads=40, ffn=13824,
                   vocab=32000, max_seq_len=4096, where="meta-llama/Llama-2-13b-hf config.json"),
     "Llama-2-13B: HF meta-llama/Llama-2-13b-hf config.json; 13,015,864,320 params")
_add("70b", _llama("70b", "Llama-2-70B", layers=80, hidden=8192, heads=64, kv_heads=8, ffn=28672,
                   vocab=32000, max_seq_len=4096, where="meta-llama/Llama-2-70b-hf config.json"),
     "Llama-2-70B (GQA, 8 KV heads): HF meta-llama/Llama-2-70b-hf config.json; "
     "68,976,648,192 params")

# ---- Llama 3 / 3.1 (HF meta-llama config.json; max_seq_len = 8192 pre-training context) ---------
_add("llama3-8b", _llama("llama3-8b", "Llama-3-8B", layers=32, hidden=4096, heads=32, kv_heads=8,
                         ffn=14336, vocab=128256, max_seq_len=8192, rope_theta=500000.0,
                         where="meta-llama/Meta-Llama-3-8B config.json"),
     "Llama-3(.1)-8B: HF meta-llama/Meta-Llama-3-8B config.json; 8,030,261,248 params")
_add("llama3-70b", _llama("llama3-70b", "Llama-3-70B", layers=80, hidden=8192, heads=64,
                          kv_heads=8, ffn=28672, vocab=128256, max_seq_len=8192, rope_theta=500000.0,
                          where="meta-llama/Meta-Llama-3-70B config.json"),
     "Llama-3(.1)-70B: HF meta-llama/Meta-Llama-3-70B config.json; 70,553,706,496 params")
_add("llama3-405b", _llama("llama3-405b", "Llama-3.1-405B", layers=126, hidden=16384, heads=128,
                           kv_heads=8, ffn=53248, vocab=128256, max_seq_len=8192, rope_theta=500000.0,
                           where="meta-llama/Llama-3.1-405B config.json; Dubey et al. 2024 "
                                 "Table 3; 8192 = pre-training context"),
     "Llama-3.1-405B: HF meta-llama/Llama-3.1-405B config.json and Llama 3 paper Table 3; "
     "max_seq_len 8192 is the base pre-training context (config: 131072 after long-context "
     "extension); 405,853,388,800 params")

# ---- Mixtral (HF mistralai/Mixtral-8x7B-v0.1 config.json) ---------------------------------------
_add("mixtral-8x7b", _llama("mixtral-8x7b", "Mixtral-8x7B", layers=32, hidden=4096, heads=32,
                            kv_heads=8, ffn=14336, vocab=32000, max_seq_len=32768, rope_theta=1e6,
                            where="mistralai/Mixtral-8x7B-v0.1 config.json; 32k = the paper's "
                                  "training context (Jiang et al. 2024 §2)",
                            num_experts=8, top_k=2),
     "Mixtral-8x7B (8 experts, top-2, every layer MoE): HF mistralai/Mixtral-8x7B-v0.1 "
     "config.json; 46,702,792,704 params total")

# ---- GPT-3 175B as published (Brown et al. 2020 Table 2.1; GPT-2 BPE vocab, unpadded) -----------
_add("gpt3-175b", _gpt("gpt3-175b", "GPT-3-175B", layers=96, hidden=12288, heads=96,
                       vocab=50257, where="Brown et al. 2020 Table 2.1, vocab 50257 unpadded"),
     "GPT-3 175B: Brown et al. 2020 Table 2.1 (96 layers, d_model 12288, 96 heads, n_ctx 2048), "
     "GPT-2 BPE vocab 50,257 (unpadded), tied embeddings, learned positions")

# ---- Megatron-LM SC21 Table 1 (weak-scaling GPT family) ----------------------------------------
for _key, _name, _l, _h, _a in [
    ("gpt-1.7b", "GPT-1.7B", 24, 2304, 24),
    ("gpt-3.6b", "GPT-3.6B", 30, 3072, 32),
    ("gpt-7.5b", "GPT-7.5B", 36, 4096, 32),
    ("gpt-18.4b", "GPT-18.4B", 40, 6144, 48),
    ("gpt-39.1b", "GPT-39.1B", 48, 8192, 64),
    ("gpt-76.1b", "GPT-76.1B", 60, 10240, 80),
    ("gpt-145.6b", "GPT-145.6B", 80, 12288, 96),
    ("gpt-310.1b", "GPT-310.1B", 96, 16384, 128),
    ("gpt-529.6b", "GPT-529.6B", 105, 20480, 128),
    ("gpt-1t", "GPT-1T (1008.0B)", 128, 25600, 160),
]:
    _add(_key, _gpt(_key, _name, layers=_l, hidden=_h, heads=_a, where=_SC21),
         f"{_name}: {_SC21} ({_l} layers, hidden {_h}, {_a} heads), vocab 51,200, seq 2048; "
         "params by the paper's Eq. (2) + final LayerNorm")

# ---- Korthikanti et al. 2022 Table 3 (activation-recomputation paper) ---------------------------
for _key, _name, _l, _h, _a in [
    ("gpt-22b", "GPT-22B", 48, 6144, 64),
    ("gpt-175b", "GPT-3-175B (174.6B, Megatron)", 96, 12288, 96),
    ("gpt-530b", "MT-NLG-style 530B", 105, 20480, 128),
    ("gpt-1t-kr", "GPT-1T (Korthikanti)", 128, 25600, 160),
]:
    _add(_key, _gpt(_key, _name, layers=_l, hidden=_h, heads=_a, where=_KORTH),
         f"{_name}: {_KORTH} ({_l} layers, hidden {_h}, {_a} heads), vocab 51,200, seq 2048"
         + ("; same shape as Narayanan Table 2's 174.6B" if _key == "gpt-175b" else "")
         + ("; same shape as SC21's 529.6B" if _key == "gpt-530b" else "")
         + ("; same shape as SC21's 1T" if _key == "gpt-1t-kr" else ""))

# ---- tiny model for CPU torch runs -------------------------------------------------------------
_add("llama-tiny", _llama("llama-tiny", "Llama-tiny", layers=4, hidden=256, heads=8, kv_heads=2,
                          ffn=688, vocab=2048, max_seq_len=256,
                          where="synthetic Llama-style model for CPU tests"),
     "Llama-style 3.8M-parameter model for CPU torch runs (4 layers, hidden 256, 8 heads, "
     "2 KV heads, SwiGLU 688, vocab 2048); not a published checkpoint")

PRESETS: dict[str, ModelSpec] = {k: v[0] for k, v in _TABLE.items()}
PRESET_DESCRIPTIONS: dict[str, str] = {k: v[1] for k, v in _TABLE.items()}

# Obvious alternative spellings (after normalisation: lower case, '_' and ' ' → '-').
ALIASES: dict[str, str] = {
    **{f"{p}{s}": s for s in ("7b", "13b", "70b")
       for p in ("llama2-", "llama-2-")},
    "llama-3-8b": "llama3-8b", "llama3.1-8b": "llama3-8b",
    "llama-3.1-8b": "llama3-8b", "8b": "llama3-8b",
    "llama-3-70b": "llama3-70b", "llama3.1-70b": "llama3-70b", "llama-3.1-70b": "llama3-70b",
    "70b-l3": "llama3-70b",
    "llama-3-405b": "llama3-405b", "llama3.1-405b": "llama3-405b",
    "llama-3.1-405b": "llama3-405b", "405b": "llama3-405b",
    "mixtral": "mixtral-8x7b", "mixtral8x7b": "mixtral-8x7b",
    "gpt3": "gpt3-175b", "gpt-3": "gpt3-175b", "gpt-3-175b": "gpt3-175b",
    "gpt-174.6b": "gpt-175b", "gpt-1008b": "gpt-1t", "gpt-1008.0b": "gpt-1t",
    "gpt-22.0b": "gpt-22b",
    "tiny": "llama-tiny", "llama2-tiny": "llama-tiny",
}


def _normalise(name: str) -> str:
    return "-".join(str(name).strip().lower().replace("_", "-").split())


def get_preset(name: str) -> ModelSpec:
    """The preset called `name` (case-insensitive; a few aliases such as 'llama2-13b')."""
    key = _normalise(name)
    key = ALIASES.get(key, key)
    try:
        return PRESETS[key]
    except KeyError:
        raise InputError(f"--model: unknown preset {name!r}; choose one of "
                         f"{', '.join(PRESETS)} or pass a config.json path") from None
