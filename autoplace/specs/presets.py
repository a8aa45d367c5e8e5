"""Named model presets with exact public shapes.

Every preset names where its shape comes from in `PRESET_DESCRIPTIONS` (and, shortened, in
`ModelSpec.source`). Two groups:

* Hugging Face checkpoints (Llama-2, Llama-3/3.1, Mixtral, DeepSeek-V3, Kimi K2, Qwen3-MoE, gpt-oss,
  Gemma 2/3): the numbers are those of the published `config.json`, and `total_params()` equals the
  checkpoint's parameter count exactly (e.g. Llama-2-7b 6,738,415,616) or, where only a rounded
  figure is published, rounds to it (DeepSeek-V3 671B, gpt-oss-120b 116.83B); asserted in
  tests/test_model_spec.py and tests/test_hf_config.py. Nemotron-4 comes from its reports' tables.
* Megatron-LM GPT shapes from Narayanan et al. 2021 (SC21) Table 1 and Korthikanti et al. 2022
  Table 3, as transcribed in shared/validation/public_runs.json: learned positions, LayerNorm,
  biases, 4h GeLU MLP, tied embeddings, vocab 51,200 (already padded), seq 2048. For these
  `total_params()` equals the paper's Eq. (2) plus the final LayerNorm.

`pretrain_seq_len` is the length the family was pre-trained at (the CLI's default --seq-len), with
its source in the description; `max_seq_len` is the checkpoint's context (max_position_embeddings).

Naming: `70b` is **Llama-2-70B** (vocab 32,000); Llama-3 sizes carry a `llama3-` prefix
(`llama3-70b`, vocab 128,256 — about 4× the embedding memory).
"""

from __future__ import annotations

import math

from autoplace.errors import InputError
from autoplace.specs.model import ModelSpec


def _llama(key: str, name: str, *, layers: int, hidden: int, heads: int, kv_heads: int,
           ffn: int, vocab: int, max_seq_len: int, where: str, **kw) -> ModelSpec:
    """Llama-style decoder: RoPE, RMSNorm, gated MLP, no biases, untied (unless kw says otherwise)."""
    base = dict(gated_mlp=True, tied_embeddings=False, attn_bias=False, mlp_bias=False, norm="rmsnorm",
                position="rope")
    return ModelSpec(name=name, layers=layers, hidden=hidden, heads=heads, vocab=vocab,
                     ffn_hidden=ffn, kv_heads=kv_heads, max_seq_len=max_seq_len,
                     source=f"preset:{key} ({where})", **{**base, **kw})


def _spec(key: str, name: str, *, where: str, **kw) -> ModelSpec:
    """Any other published shape: the fields are given in full."""
    return ModelSpec(name=name, source=f"preset:{key} ({where})", **kw)


def _gpt(key: str, name: str, *, layers: int, hidden: int, heads: int, where: str,
         vocab: int = 51200, max_seq_len: int = 2048) -> ModelSpec:
    """Megatron/GPT-3-style decoder: learned positions, LayerNorm, biases, 4h GeLU MLP, tied."""
    return ModelSpec(name=name, layers=layers, hidden=hidden, heads=heads, vocab=vocab,
                     ffn_hidden=4 * hidden, kv_heads=None, gated_mlp=False, tied_embeddings=True,
                     attn_bias=True, mlp_bias=True, norm="layernorm", position="learned",
                     max_seq_len=max_seq_len, pretrain_seq_len=max_seq_len,
                     source=f"preset:{key} ({where})")


_SC21 = "Narayanan et al. 2021 (SC21) Table 1"
_KORTH = "Korthikanti et al. 2022 Table 3"

# key → (ModelSpec, description)
_TABLE: dict[str, tuple[ModelSpec, str]] = {}


def _add(key: str, spec: ModelSpec, description: str) -> None:
    _TABLE[key] = (spec, description)


# ---- Llama 2 (HF meta-llama/Llama-2-*-hf config.json; Touvron et al. 2023 Table 1; 4k context §2.2) --
_add("7b", _llama("7b", "Llama-2-7B", layers=32, hidden=4096, heads=32, kv_heads=32, ffn=11008,
                  vocab=32000, max_seq_len=4096, pretrain_seq_len=4096,
                  where="meta-llama/Llama-2-7b-hf config.json"),
     "Llama-2-7B: HF meta-llama/Llama-2-7b-hf config.json; 6,738,415,616 params")
_add("13b", _llama("13b", "Llama-2-13B", layers=40, hidden=5120, heads=40, kv_heads=40, ffn=13824,
                   vocab=32000, max_seq_len=4096, pretrain_seq_len=4096,
                   where="meta-llama/Llama-2-13b-hf config.json"),
     "Llama-2-13B: HF meta-llama/Llama-2-13b-hf config.json; 13,015,864,320 params")
_add("70b", _llama("70b", "Llama-2-70B", layers=80, hidden=8192, heads=64, kv_heads=8, ffn=28672,
                   vocab=32000, max_seq_len=4096, pretrain_seq_len=4096,
                   where="meta-llama/Llama-2-70b-hf config.json"),
     "Llama-2-70B (GQA, 8 KV heads): HF meta-llama/Llama-2-70b-hf config.json; "
     "68,976,648,192 params")

# ---- Llama 3 / 3.1 (HF meta-llama config.json; 8192 = pre-training context, Dubey et al. 2024 §3.4.1:
# "pre-train … with sequences of 8K tokens", extended to 128K at the end) --------------------------
_add("llama3-8b", _llama("llama3-8b", "Llama-3-8B", layers=32, hidden=4096, heads=32, kv_heads=8,
                         ffn=14336, vocab=128256, max_seq_len=8192, pretrain_seq_len=8192,
                         rope_theta=500000.0, where="meta-llama/Meta-Llama-3-8B config.json"),
     "Llama-3(.1)-8B: HF meta-llama/Meta-Llama-3-8B config.json; 8,030,261,248 params")
_add("llama3-70b", _llama("llama3-70b", "Llama-3-70B", layers=80, hidden=8192, heads=64,
                          kv_heads=8, ffn=28672, vocab=128256, max_seq_len=8192,
                          pretrain_seq_len=8192, rope_theta=500000.0, where="meta-llama/Meta-Llama-3-70B config.json"),
     "Llama-3(.1)-70B: HF meta-llama/Meta-Llama-3-70B config.json; 70,553,706,496 params")
_add("llama3-405b", _llama("llama3-405b", "Llama-3.1-405B", layers=126, hidden=16384, heads=128,
                           kv_heads=8, ffn=53248, vocab=128256, max_seq_len=8192,
                           pretrain_seq_len=8192,
                           rope_theta=500000.0, where="meta-llama/Llama-3.1-405B config.json; Dubey et al. 2024 "
                                 "Table 3; 8192 = pre-training context"),
     "Llama-3.1-405B: HF meta-llama/Llama-3.1-405B config.json and Llama 3 paper Table 3; "
     "max_seq_len 8192 is the base pre-training context (config: 131072 after long-context "
     "extension); 405,853,388,800 params")

# ---- Mixtral (HF mistralai/Mixtral-8x7B-v0.1 config.json) ---------------------------------------
_add("mixtral-8x7b", _llama("mixtral-8x7b", "Mixtral-8x7B", layers=32, hidden=4096, heads=32,
                            kv_heads=8, ffn=14336, vocab=32000, max_seq_len=32768,
                            pretrain_seq_len=32768, rope_theta=1e6,
                            where="mistralai/Mixtral-8x7B-v0.1 config.json; Jiang et al. 2024 §2: "
                                  "trained with a 32k context",
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

# ---- MoE checkpoints with published HF configs ---------------------------------------------------
_DS_MLA = dict(q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
               v_head_dim=128)
_add("deepseek-v3", _spec(
    "deepseek-v3", "DeepSeek-V3", layers=61, hidden=7168, heads=128, vocab=129280, ffn_hidden=18432,
    num_experts=256, top_k=8, expert_ffn_hidden=2048, shared_expert_ffn_hidden=2048,
    dense_layer_ids=(0, 1, 2), mtp_layers=1, max_seq_len=163840, pretrain_seq_len=4096, **_DS_MLA,
    where="deepseek-ai/DeepSeek-V3 config.json; DeepSeek-V3 report §4.2: 4K pre-training"),
    "DeepSeek-V3 (MLA, 256 routed experts top-8 + 1 shared, first 3 layers dense, 1 MTP module): HF "
    "deepseek-ai/DeepSeek-V3 config.json; 671,026,404,352 main-model params (report: 671B total, 37B "
    "activated; 37,552,282,624 here with the input embedding) + 11,610,067,968 in the MTP module "
    "(mtp_params; the report's 14B also counts the MTP copies of embedding and head); the router's "
    "e_score_correction_bias is a buffer, not counted; pre-trained at 4K (report §4.2), YaRN to 128K")
_add("kimi-k2", _spec(
    "kimi-k2", "Kimi-K2", layers=61, hidden=7168, heads=64, vocab=163840, ffn_hidden=18432,
    num_experts=384, top_k=8, expert_ffn_hidden=2048, shared_expert_ffn_hidden=2048,
    dense_layer_ids=(0,), max_seq_len=131072, pretrain_seq_len=4096, **_DS_MLA,
    where="moonshotai/Kimi-K2-Instruct config.json (DeepSeek-V3 architecture); rope_scaling "
          "original_max_position_embeddings 4096"),
    "Kimi K2 (DeepSeek-V3 architecture: MLA with 64 heads, 384 routed experts top-8 + 1 shared, first "
    "layer dense, no MTP): HF moonshotai/Kimi-K2-Instruct config.json; 1,026,408,209,408 params "
    "(model card: 1T total, 32B activated; 32,861,477,888 here with the input embedding); 4K "
    "pre-training context (config rope_scaling.original_max_position_embeddings)")
_QWEN3 = ("Qwen3 report §3.2: general stage at 4,096 tokens, long-context stage at 32,768")
_add("qwen3-30b-a3b", _llama(
    "qwen3-30b-a3b", "Qwen3-30B-A3B", layers=48, hidden=2048, heads=32, kv_heads=4, ffn=6144,
    vocab=151936, max_seq_len=40960, head_dim=128, qk_norm=True, num_experts=128, top_k=8,
    expert_ffn_hidden=768, pretrain_seq_len=4096,
    where="Qwen/Qwen3-30B-A3B config.json; " + _QWEN3),
    "Qwen3-30B-A3B (128 experts top-8, no shared expert, per-head q/k RMSNorm): HF Qwen/Qwen3-30B-A3B "
    "config.json; 30,532,122,624 params, 3,353,032,704 active (\"A3B\")")
_add("qwen3-235b-a22b", _llama(
    "qwen3-235b-a22b", "Qwen3-235B-A22B", layers=94, hidden=4096, heads=64, kv_heads=4, ffn=12288,
    vocab=151936, max_seq_len=40960, head_dim=128, qk_norm=True, num_experts=128, top_k=8,
    expert_ffn_hidden=1536, pretrain_seq_len=4096,
    where="Qwen/Qwen3-235B-A22B config.json; " + _QWEN3),
    "Qwen3-235B-A22B (128 experts top-8, no shared expert, per-head q/k RMSNorm): HF "
    "Qwen/Qwen3-235B-A22B config.json; 235,093,634,560 params, 22,190,763,520 active (\"A22B\")")
_YARN32 = 0.1 * math.log(32.0) + 1.0   # YaRN attention factor, factor 32, no mscale (transformers get_mscale)
for _key, _name, _l, _e, _tot, _act in [("gpt-oss-120b", "gpt-oss-120b", 36, 128, "116,829,156,672",
                                          "116.83B total, 5.13B active"),
                                         ("gpt-oss-20b", "gpt-oss-20b", 24, 32, "20,914,757,184",
                                          "20.91B total, 3.61B active")]:
    _add(_key, _llama(
        _key, _name, layers=_l, hidden=2880, heads=64, kv_heads=8, ffn=2880, vocab=201088,
        max_seq_len=131072, head_dim=64, attn_bias=True, num_experts=_e, top_k=4, expert_bias=True,
        glu_limit=7.0, rope_mscale=_YARN32, attn_sinks=True, sliding_window=128, global_every=2, pretrain_seq_len=4096,
        where=f"openai/{_key} config.json; initial_context_length 4096"),
        f"{_name} ({_e} experts top-4 with biases, clamped SwiGLU, attention biases and sinks, 128-token "
        f"windows on every other layer): HF openai/{_key} config.json; {_tot} params (model card: "
        f"{_act}, active without the input embedding); 4096 = the config's initial_context_length "
        "(rope_scaling original_max_position_embeddings; YaRN ×32 to 131072)")
_add("mixtral-8x22b", _llama(
    "mixtral-8x22b", "Mixtral-8x22B", layers=56, hidden=6144, heads=48, kv_heads=8, ffn=16384,
    vocab=32000, max_seq_len=65536, num_experts=8, top_k=2, rope_theta=1e6,
    where="mistralai/Mixtral-8x22B-v0.1 config.json"),
    "Mixtral-8x22B (8 experts, top-2): HF mistralai/Mixtral-8x22B-v0.1 config.json; 140,620,634,112 "
    "params, 39,152,031,744 active (Mistral AI: 141B total, 39B active); 64K context window, "
    "pre-training length not published (pretrain_seq_len 0)")

# ---- Nemotron-4 (NeMo checkpoints; shapes from the reports' tables) ------------------------------
for _key, _name, _l, _h, _a, _where, _desc in [
    ("nemotron4-15b", "Nemotron-4-15B", 32, 6144, 48, "Parmar et al. 2024 (Nemotron-4 15B) Table 1",
     "15,628,775,424 params (report: 3.2B embedding + 12.5B non-embedding)"),
    ("nemotron4-340b", "Nemotron-4-340B", 96, 18432, 96,
     "NVIDIA 2024 (Nemotron-4 340B Technical Report) Table 1",
     "341,029,195,776 params (report: 9.4B embedding + 331.6B non-embedding)")]:
    _add(_key, _spec(
        _key, _name, layers=_l, hidden=_h, heads=_a, kv_heads=8, ffn_hidden=4 * _h, vocab=256000,
        gated_mlp=False, activation="relu2", norm="layernorm", tied_embeddings=False,
        max_seq_len=4096, pretrain_seq_len=4096, where=_where),
        f"{_name} (GQA with 8 KV heads, squared-ReLU 4h MLP without gate, LayerNorm, no biases, "
        f"untied 256K vocabulary, RoPE, sequence 4096): {_where}; {_desc}")

# ---- Gemma 2 / 3 (HF google config.json; GeGLU, 4 norms per layer, tied) -------------------------
_add("gemma2-9b", _llama(
    "gemma2-9b", "Gemma-2-9B", layers=42, hidden=3584, heads=16, kv_heads=8, ffn=14336, vocab=256000,
    max_seq_len=8192, head_dim=256, activation="gelu", tied_embeddings=True, norms_per_layer=4,
    sliding_window=4096, global_every=2, pretrain_seq_len=8192,
    where="google/gemma-2-9b config.json; Gemma 2 report Table 1: context 8192"),
    "Gemma-2-9B (GeGLU, head_dim 256, pre+post norms around attention and MLP, 4096-token windows on "
    "every other layer, tied): HF google/gemma-2-9b config.json; 9,241,705,984 params")
_add("gemma3-27b", _llama(
    "gemma3-27b", "Gemma-3-27B (text)", layers=62, hidden=5376, heads=32, kv_heads=16, ffn=21504,
    vocab=262208, max_seq_len=131072, head_dim=128, activation="gelu", tied_embeddings=True,
    norms_per_layer=4, qk_norm=True, sliding_window=1024, global_every=6, pretrain_seq_len=32768,
    where="google/gemma-3-27b-pt config.json text_config (+ Gemma3TextConfig defaults); Gemma 3 "
          "report §2.1: 32K pre-training"),
    "Gemma-3-27B language model (GeGLU, q/k norms, 4 norms per layer, 1024-token windows with every "
    "6th layer global, tied; the SigLIP vision tower is not counted): HF google/gemma-3-27b-pt "
    "config.json text_config; 27,009,346,304 params (report: 25,600M non-embedding)")

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
    "dsv3": "deepseek-v3", "deepseek-v3-671b": "deepseek-v3", "deepseekv3": "deepseek-v3",
    "kimi-k2-instruct": "kimi-k2", "kimi-k2-base": "kimi-k2", "kimik2": "kimi-k2",
    "qwen3-30b": "qwen3-30b-a3b", "qwen3-235b": "qwen3-235b-a22b",
    "gptoss-120b": "gpt-oss-120b", "gptoss-20b": "gpt-oss-20b",
    "nemotron-4-15b": "nemotron4-15b", "nemotron-4-340b": "nemotron4-340b",
    "mixtral8x22b": "mixtral-8x22b", "gemma-2-9b": "gemma2-9b", "gemma-3-27b": "gemma3-27b",
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
