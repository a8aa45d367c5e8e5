"""ModelSpec parameter counting, named presets and the HF config.json reader.

Published totals are the exact parameter counts of the public checkpoints (HF safetensors
metadata / model cards: e.g. Llama-2-7b 6,738,415,616; gpt2 124,439,808; gpt-neox-20b
20,554,567,680 from EleutherAI's model card). The HF configs below copy the public config.json
values of each checkpoint (the fields that matter plus a few that must be ignored).
"""

from __future__ import annotations

import json
import os
from dataclasses import fields
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoplace.errors import InputError
from autoplace.specs.hf_config import load_hf_config
from autoplace.specs.model import ModelSpec
from autoplace.specs.presets import PRESET_DESCRIPTIONS, PRESETS, get_preset

_SPEC_FIELDS = {f.name for f in fields(ModelSpec)}


def _lacks(*names: str) -> bool:
    return any(n not in _SPEC_FIELDS for n in names)


# ---- presets: exact published totals -----------------------------------------------------------
PUBLISHED_PRESETS = {
    "7b": 6_738_415_616,            # meta-llama/Llama-2-7b-hf
    "13b": 13_015_864_320,          # meta-llama/Llama-2-13b-hf
    "70b": 68_976_648_192,          # meta-llama/Llama-2-70b-hf
    "llama3-8b": 8_030_261_248,     # meta-llama/Meta-Llama-3-8B
    "llama3-70b": 70_553_706_496,   # meta-llama/Meta-Llama-3-70B
    "llama3-405b": 405_853_388_800,  # meta-llama/Llama-3.1-405B
    "mixtral-8x7b": 46_702_792_704,  # mistralai/Mixtral-8x7B-v0.1
}


@pytest.mark.parametrize("key,expected", sorted(PUBLISHED_PRESETS.items()))
def test_preset_exact_published_params(key, expected):
    assert PRESETS[key].total_params() == expected


def test_llama2_shapes():
    p7, p13, p70 = PRESETS["7b"], PRESETS["13b"], PRESETS["70b"]
    assert (p7.layers, p7.hidden, p7.heads, p7.a_kv, p7.ffn_hidden) == (32, 4096, 32, 32, 11008)
    assert (p13.layers, p13.hidden, p13.heads, p13.a_kv, p13.ffn_hidden) == (40, 5120, 40, 40, 13824)
    assert (p70.layers, p70.hidden, p70.heads, p70.a_kv, p70.ffn_hidden) == (80, 8192, 64, 8, 28672)
    for p in (p7, p13, p70):
        assert p.vocab == 32000 and p.max_seq_len == 4096 and not p.tied_embeddings
        assert p.gated_mlp and p.norm == "rmsnorm" and p.position == "rope"
        assert not (p.attn_bias or p.mlp_bias)


def test_llama3_405b_shape():
    p = PRESETS["llama3-405b"]
    assert (p.layers, p.hidden, p.heads, p.a_kv, p.ffn_hidden, p.vocab, p.max_seq_len) == (
        126, 16384, 128, 8, 53248, 128256, 8192)


def test_mixtral_total_and_active():
    m = PRESETS["mixtral-8x7b"]
    assert m.is_moe and m.num_experts == 8 and m.top_k == 2 and m.max_seq_len == 32768
    per_expert = 3 * 4096 * 14336
    assert m.expert_params() == 32 * 8 * per_expert
    # active = total − the 6 unused experts of each of the 32 layers ("12.9B active")
    assert m.active_params() == m.total_params() - 32 * 6 * per_expert == 12_879_925_248
    assert m.active_params() < m.total_params()


def test_dense_active_equals_total():
    for key in ("7b", "llama3-8b", "gpt-1.7b", "llama-tiny"):
        assert PRESETS[key].active_params() == PRESETS[key].total_params()


def test_gpt3_175b_preset():
    g = PRESETS["gpt3-175b"]
    assert (g.layers, g.hidden, g.heads, g.ffn_hidden, g.vocab, g.max_seq_len) == (
        96, 12288, 96, 49152, 50257, 2048)
    assert g.tied_embeddings and not g.gated_mlp and g.norm == "layernorm"
    assert g.position == "learned" and g.attn_bias and g.mlp_bias
    assert round(g.total_params() / 1e9, 1) == 174.6     # "175B"


def test_llama_tiny_is_small_gqa():
    t = PRESETS["llama-tiny"]
    assert (t.layers, t.hidden, t.heads, t.a_kv, t.vocab, t.max_seq_len) == (4, 256, 8, 2, 2048, 256)
    assert t.ffn_hidden % 8 == 0 and t.gated_mlp and not t.tied_embeddings
    assert 1e6 < t.total_params() < 1e7


# ---- Megatron GPT presets: Narayanan Eq. (2) + final LayerNorm ---------------------------------
MEGATRON_GPT = {  # key → (layers, hidden, heads)
    "gpt-1.7b": (24, 2304, 24), "gpt-3.6b": (30, 3072, 32), "gpt-7.5b": (36, 4096, 32),
    "gpt-18.4b": (40, 6144, 48), "gpt-39.1b": (48, 8192, 64), "gpt-76.1b": (60, 10240, 80),
    "gpt-145.6b": (80, 12288, 96), "gpt-310.1b": (96, 16384, 128),
    "gpt-529.6b": (105, 20480, 128), "gpt-1t": (128, 25600, 160),
    "gpt-22b": (48, 6144, 64), "gpt-175b": (96, 12288, 96), "gpt-530b": (105, 20480, 128),
    "gpt-1t-kr": (128, 25600, 160),
}


def _eq2(l: int, h: int, V: int = 51200, s: int = 2048) -> int:
    p = 12 * l * h * h * (1 + Fraction(13, 12 * h) + Fraction(V + s, 12 * l * h)) + 2 * h
    assert p.denominator == 1
    return int(p)


@pytest.mark.parametrize("key", sorted(MEGATRON_GPT))
def test_megatron_gpt_equals_narayanan_eq2(key):
    g = PRESETS[key]
    l, h, a = MEGATRON_GPT[key]
    assert (g.layers, g.hidden, g.heads, g.ffn_hidden) == (l, h, a, 4 * h)
    assert (g.vocab, g.max_seq_len, g.position, g.norm) == (51200, 2048, "learned", "layernorm")
    assert g.tied_embeddings and g.attn_bias and g.mlp_bias and not g.gated_mlp
    assert g.total_params() == _eq2(l, h)


def test_gpt3_175b_eq2_with_unpadded_vocab():
    assert PRESETS["gpt3-175b"].total_params() == _eq2(96, 12288, V=50257)


def _public_runs() -> list | None:
    here = Path(__file__).resolve().parents[1]
    for p in (os.environ.get("AUTOPLACE_PUBLIC_RUNS"),
              here / "shared" / "validation" / "public_runs.json",
              here.parent / "shared" / "validation" / "public_runs.json",
              "/work/shared/validation/public_runs.json"):
        if p and Path(p).is_file():
            return json.loads(Path(p).read_text())
    return None


def _preset_for_record(m: dict) -> ModelSpec | None:
    for key in MEGATRON_GPT:
        g = PRESETS[key]
        if (g.layers, g.hidden, g.heads, g.vocab) == (m["layers"], m["hidden"], m["heads"],
                                                     m["vocab"]):
            return g
    return None


def test_public_run_records_match_presets():
    recs = _public_runs()
    if recs is None:
        pytest.skip("shared/validation/public_runs.json not found")
    checked = 0
    for r in recs:
        m = r.get("model") or {}
        if not str(r.get("id", "")).startswith(("narayanan2021", "korthikanti2022")):
            continue
        if not isinstance(m.get("params_billion"), (int, float)) or m.get("layers") is None:
            continue
        g = _preset_for_record(m)
        assert g is not None, f"no preset has the shape of record {r['id']}"
        assert (g.ffn_hidden, g.max_seq_len) == (m["ffn_hidden"], m["seq_len"])
        assert g.a_kv == m["kv_heads"]
        billions = g.total_params() / 1e9
        pb = m["params_billion"]
        if r["id"].startswith("narayanan2021"):
            # printed with one decimal (1.7, 3.6, …, 174.6, 1008.0)
            assert round(billions, 1) == pytest.approx(pb), r["id"]
        else:
            # Korthikanti names the models nominally (22B, 175B, 530B, 1T)
            assert billions == pytest.approx(pb, rel=0.01), r["id"]
        checked += 1
    assert checked >= 14


# ---- architectural differences -----------------------------------------------------------------
def test_gqa_and_mqa_shrink_kv_projections_only():
    base = PRESETS["llama3-8b"]
    mha = base.with_(kv_heads=None)
    mqa = base.with_(kv_heads=1)
    h, l, d = base.hidden, base.layers, base.d_head
    assert mha.total_params() - base.total_params() == l * 2 * h * (h - 8 * d)
    assert base.total_params() - mqa.total_params() == l * 2 * h * (8 * d - d)
    assert mqa.total_params() < base.total_params() < mha.total_params()
    assert mqa.kv_width == d and base.kv_width == 8 * d and mha.kv_width == h


def test_swiglu_vs_gelu_mlp():
    g = PRESETS["7b"]
    gelu = g.with_(gated_mlp=False)
    assert g.mlp_params() == 3 * 4096 * 11008
    assert gelu.mlp_params() == 2 * 4096 * 11008
    assert g.total_params() - gelu.total_params() == 32 * 4096 * 11008


def test_tied_vs_untied():
    u = PRESETS["7b"]
    t = u.with_(tied_embeddings=True)
    assert u.total_params() - t.total_params() == 32000 * 4096
    g = PRESETS["gpt-1.7b"]
    assert g.with_(tied_embeddings=False).total_params() - g.total_params() == 51200 * 2304


def test_biases_layernorm_and_positions():
    g = PRESETS["gpt-1.7b"]
    h, l = g.hidden, g.layers
    assert g.total_params() - g.with_(attn_bias=False).total_params() == l * 4 * h
    assert g.total_params() - g.with_(mlp_bias=False).total_params() == l * (4 * h + h)
    assert g.total_params() - g.with_(norm="rmsnorm").total_params() == (2 * l + 1) * h
    assert g.total_params() - g.with_(position="rope").total_params() == 2048 * h


def test_moe_sparse_step_halves_expert_layers():
    m = PRESETS["mixtral-8x7b"]
    half = m.with_(moe_layer_freq=2)
    assert half.n_moe_layers == 16 and half.n_dense_layers == 16
    assert half.total_params() < m.total_params()
    assert half.active_params() <= half.total_params()


def test_deepseek_v3_shape_counts_671b():
    """The MLA + MoE shape of DeepSeek-V3 (HF config) gives 671,026,404,352 main-model parameters."""
    m = ModelSpec(name="dsv3", layers=61, hidden=7168, heads=128, vocab=129280, ffn_hidden=18432,
                  num_experts=256, top_k=8, expert_ffn_hidden=2048, shared_expert_ffn_hidden=2048,
                  dense_layer_ids=(0, 1, 2), q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128,
                  qk_rope_head_dim=64, v_head_dim=128, mtp_layers=1)
    assert m.total_params() == 671_026_404_352 and m.mtp_params() == 11_610_067_968


def test_norms_per_layer_counts_norm_modules():
    g = PRESETS["7b"]
    assert g.norms_per_layer == 2
    assert g.with_(norms_per_layer=4).total_params() - g.total_params() == 32 * 2 * 4096
    lnorm = PRESETS["gpt-1.7b"]
    assert lnorm.with_(norms_per_layer=1).total_params() == lnorm.total_params() - 24 * 2 * 2304


@pytest.mark.parametrize("kw,needle", [
    (dict(q_lora_rank=1536), "model.q_lora_rank is a multi-head latent attention width"),
    (dict(v_head_dim=128), "model.v_head_dim is a multi-head latent attention width"),
    (dict(global_every=2), "model.global_every=2 needs sliding_window > 0"),
    (dict(sliding_window=128, global_every=1), "model.global_every=1"),
    (dict(sliding_window=-1), "model.sliding_window must be a non-negative integer"),
    (dict(norms_per_layer=2.0), "model.norms_per_layer must be a non-negative integer"),
    (dict(pretrain_seq_len=-4096), "model.pretrain_seq_len must be a non-negative integer"),
    (dict(moe_layer_freq=0), "model.moe_layer_freq must be a positive integer"),
])
def test_model_fields_must_fit_each_other(kw, needle):
    with pytest.raises(InputError, match=needle.replace(".", r"\.")) as e:
        PRESETS["7b"].with_(**kw)
    assert e.value.exit_code == 1 and "\n" not in str(e.value)


# ---- hypothesis properties ---------------------------------------------------------------------
_shapes = st.builds(
    lambda l, d, a, g, f, v, gated, tied: ModelSpec(
        name="h", layers=l, hidden=d * a, heads=a, kv_heads=a // g if a % g == 0 else None,
        ffn_hidden=f, vocab=v, gated_mlp=gated, tied_embeddings=tied),
    st.integers(1, 64), st.sampled_from([16, 32, 64, 128]), st.integers(1, 32),
    st.sampled_from([1, 2, 4, 8]), st.integers(1, 20000), st.integers(1, 200000),
    st.booleans(), st.booleans())


@settings(max_examples=200, deadline=None)
@given(spec=_shapes, extra=st.integers(1, 16))
def test_total_params_monotone_and_linear_in_layers(spec, extra):
    more = spec.with_(layers=spec.layers + extra)
    assert more.total_params() > spec.total_params()
    assert more.total_params() - spec.total_params() == extra * spec.layer_dense_params()


@settings(max_examples=200, deadline=None)
@given(spec=_shapes, experts=st.integers(1, 64), data=st.data())
def test_moe_active_between_dense_and_total(spec, experts, data):
    k = data.draw(st.integers(1, experts))
    moe = spec.with_(num_experts=experts, top_k=k)
    assert moe.dense_params() < moe.active_params() <= moe.total_params()
    assert (moe.active_params() == moe.total_params()) == (k == experts)


# ---- get_preset --------------------------------------------------------------------------------
def test_get_preset_case_and_aliases():
    assert get_preset("7B") is PRESETS["7b"]
    assert get_preset("Llama2-13B") is PRESETS["13b"]
    assert get_preset("llama-2-70b") is PRESETS["70b"]
    assert get_preset(" LLAMA3_8B ") is PRESETS["llama3-8b"]
    assert get_preset("Mixtral") is PRESETS["mixtral-8x7b"]
    assert get_preset("GPT-1T") is PRESETS["gpt-1t"]


def test_get_preset_unknown_names_choices():
    with pytest.raises(InputError) as e:
        get_preset("llama9-1b")
    msg = str(e.value)
    assert "--model: unknown preset 'llama9-1b'" in msg
    assert "7b" in msg and "gpt-1t" in msg and "config.json" in msg and "\n" not in msg
    assert e.value.exit_code == 1


def test_every_preset_is_described():
    assert set(PRESET_DESCRIPTIONS) == set(PRESETS)
    for key, spec in PRESETS.items():
        assert PRESET_DESCRIPTIONS[key]
        assert spec.source.startswith(f"preset:{key} (")


# ---- HF config.json reader ---------------------------------------------------------------------
LLAMA2_7B = {
    "_name_or_path": "meta-llama/Llama-2-7b-hf", "architectures": ["LlamaForCausalLM"],
    "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 4096,
    "initializer_range": 0.02, "intermediate_size": 11008, "max_position_embeddings": 4096,
    "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 32, "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": None,
    "tie_word_embeddings": False, "torch_dtype": "float16", "transformers_version": "4.31.0.dev0",
    "use_cache": True, "vocab_size": 32000}
MISTRAL_7B = {
    "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
    "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
    "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mistral",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.34.0.dev0",
    "use_cache": True, "vocab_size": 32000}
QWEN2_7B = {
    "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
    "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 3584, "initializer_range": 0.02,
    "intermediate_size": 18944, "max_position_embeddings": 131072, "max_window_layers": 28,
    "model_type": "qwen2", "num_attention_heads": 28, "num_hidden_layers": 28,
    "num_key_value_heads": 4, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
    "sliding_window": 131072, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.37.2", "use_cache": True, "use_sliding_window": False,
    "vocab_size": 152064}
QWEN3_8B = {
    "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
    "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 12288,
    "max_position_embeddings": 40960, "max_window_layers": 36, "model_type": "qwen3",
    "num_attention_heads": 32, "num_hidden_layers": 36, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000, "sliding_window": None,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
    "use_cache": True, "use_sliding_window": False, "vocab_size": 151936}
QWEN15_MOE_A27B = {
    "architectures": ["Qwen2MoeForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
    "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
    "intermediate_size": 5632, "max_position_embeddings": 8192, "max_window_layers": 21,
    "model_type": "qwen2_moe", "num_attention_heads": 16, "num_hidden_layers": 24,
    "num_key_value_heads": 16, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
    "sliding_window": 32768, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.39.0.dev0", "use_cache": True, "use_sliding_window": False,
    "vocab_size": 151936, "decoder_sparse_step": 1, "moe_intermediate_size": 1408,
    "shared_expert_intermediate_size": 5632, "num_experts_per_tok": 4, "num_experts": 60,
    "norm_topk_prob": False, "output_router_logits": False, "router_aux_loss_coef": 0.001}
QWEN3_30B_A3B = {
    "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151645, "head_dim": 128,
    "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
    "intermediate_size": 6144, "max_position_embeddings": 40960, "max_window_layers": 48,
    "mlp_only_layers": [], "model_type": "qwen3_moe", "moe_intermediate_size": 768,
    "norm_topk_prob": True, "num_attention_heads": 32, "num_experts": 128,
    "num_experts_per_tok": 8, "num_hidden_layers": 48, "num_key_value_heads": 4,
    "output_router_logits": False, "rms_norm_eps": 1e-06, "rope_scaling": None,
    "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001, "sliding_window": None,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
    "use_cache": True, "use_sliding_window": False, "vocab_size": 151936}
MIXTRAL_8X7B = {
    "architectures": ["MixtralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1,
    "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
    "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mixtral",
    "num_attention_heads": 32, "num_experts_per_tok": 2, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "num_local_experts": 8, "output_router_logits": False,
    "rms_norm_eps": 1e-05, "rope_theta": 1e6, "router_aux_loss_coef": 0.02,
    "sliding_window": None, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.36.0.dev0", "use_cache": True, "vocab_size": 32000}
GPT_NEOX_20B = {
    "architectures": ["GPTNeoXForCausalLM"], "bos_token_id": 0, "eos_token_id": 0,
    "hidden_act": "gelu_fast", "hidden_size": 6144, "initializer_range": 0.02,
    "intermediate_size": 24576, "layer_norm_eps": 1e-05, "max_position_embeddings": 2048,
    "model_type": "gpt_neox", "num_attention_heads": 64, "num_hidden_layers": 44,
    "rotary_emb_base": 10000, "rotary_pct": 0.25, "tie_word_embeddings": False,
    "torch_dtype": "float16", "transformers_version": "4.23.0.dev0", "use_cache": True,
    "use_parallel_residual": True, "vocab_size": 50432}
GPT2 = {
    "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
    "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256, "initializer_range": 0.02,
    "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768,
    "n_head": 12, "n_layer": 12, "n_positions": 1024, "resid_pdrop": 0.1,
    "summary_activation": None, "summary_first_dropout": 0.1, "summary_proj_to_labels": True,
    "summary_type": "cls_index", "summary_use_proj": True,
    "task_specific_params": {"text-generation": {"do_sample": True, "max_length": 50}},
    "vocab_size": 50257}
GEMMA_7B = {  # no tie_word_embeddings in the file: GemmaConfig defaults to tied
    "architectures": ["GemmaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 2, "eos_token_id": 1, "head_dim": 256, "hidden_act": "gelu",
    "hidden_size": 3072, "initializer_range": 0.02, "intermediate_size": 24576,
    "max_position_embeddings": 8192, "model_type": "gemma", "num_attention_heads": 16,
    "num_hidden_layers": 28, "num_key_value_heads": 16, "pad_token_id": 0, "rms_norm_eps": 1e-06,
    "rope_scaling": None, "rope_theta": 10000.0, "torch_dtype": "bfloat16",
    "transformers_version": "4.38.0.dev0", "use_cache": True, "vocab_size": 256000}
# transformers v5 spelling of Llama-3.1-8B: `dtype`, `rope_parameters` (absorbs rope_theta)
LLAMA31_8B_V5 = {
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "bos_token_id": 128000,
    "dtype": "bfloat16", "eos_token_id": 128001, "head_dim": 128, "hidden_act": "silu",
    "hidden_size": 4096, "intermediate_size": 14336, "max_position_embeddings": 131072,
    "mlp_bias": False, "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
    "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                        "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                        "original_max_position_embeddings": 8192},
    "tie_word_embeddings": False, "transformers_version": "5.0.0", "use_cache": True,
    "vocab_size": 128256}

_QWEN2_GAP = ("model.py gap: Qwen2 has Q/K/V biases but no output bias; ModelSpec.attn_bias is "
              "all-or-nothing (needs a `qkv_bias` field)")
_QWEN3_GAP = ("model.py gap: Qwen3 has per-head q_norm/k_norm (2·head_dim per layer); ModelSpec "
              "needs a `qk_norm` field")
_QWEN2MOE_GAP = ("model.py gap: Qwen2-MoE Q/K/V-only biases and the shared_expert_gate "
                 "Linear(h, 1) per layer (need `qkv_bias` and `shared_expert_gate` fields)")

HF_CASES = [  # id, config, published total, xfail-if-gap
    ("llama2-7b", LLAMA2_7B, 6_738_415_616, None),
    ("mistral-7b-v0.1", MISTRAL_7B, 7_241_732_096, None),
    ("mixtral-8x7b", MIXTRAL_8X7B, 46_702_792_704, None),
    ("gpt-neox-20b", GPT_NEOX_20B, 20_554_567_680, None),
    ("gpt2", GPT2, 124_439_808, None),
    ("gemma-7b", GEMMA_7B, 8_537_680_896, None),
    ("llama3.1-8b-v5", LLAMA31_8B_V5, 8_030_261_248, None),
    ("qwen2-7b", QWEN2_7B, 7_615_616_512, (_lacks("qkv_bias"), _QWEN2_GAP)),
    ("qwen3-8b", QWEN3_8B, 8_190_735_360, (_lacks("qk_norm"), _QWEN3_GAP)),
    ("qwen1.5-moe-a2.7b", QWEN15_MOE_A27B, 14_315_784_192,
     (_lacks("qkv_bias", "shared_expert_gate"), _QWEN2MOE_GAP)),
    ("qwen3-30b-a3b", QWEN3_30B_A3B, 30_532_122_624, (_lacks("qk_norm"), _QWEN3_GAP)),
]


def _write(tmp_path: Path, cfg, name: str = "model", raw: str | None = None) -> Path:
    d = tmp_path / name
    d.mkdir(parents=True, exist_ok=True)
    f = d / "config.json"
    f.write_text(raw if raw is not None else json.dumps(cfg, indent=2))
    return f


def _param(case):
    cid, cfg, total, gap = case
    marks = [pytest.mark.xfail(gap[0], reason=gap[1], strict=True)] if gap else []
    return pytest.param(cfg, total, id=cid, marks=marks)


@pytest.mark.parametrize("cfg,total", [_param(c) for c in HF_CASES])
def test_hf_config_exact_published_total(tmp_path, cfg, total):
    spec = load_hf_config(_write(tmp_path, cfg))
    assert "approximate" not in spec.source   # exact by structure, not by cancelling errors
    assert spec.total_params() == total


@pytest.mark.parametrize("cfg,total", [pytest.param(c[1], c[2], id=c[0]) for c in HF_CASES])
def test_hf_config_total_within_100ppm(tmp_path, cfg, total):
    """Even where a ModelSpec field is missing the count stays within 100 ppm and says so."""
    spec = load_hf_config(_write(tmp_path, cfg))
    assert spec.total_params() == pytest.approx(total, rel=1e-4)
    if spec.total_params() != total:
        assert "approximate" in spec.source


def test_hf_llama2_shape_matches_preset(tmp_path):
    spec = load_hf_config(_write(tmp_path, LLAMA2_7B, "Llama-2-7b-hf").parent)  # directory
    p = PRESETS["7b"]
    for f in ("layers", "hidden", "heads", "a_kv", "ffn_hidden", "vocab", "max_seq_len",
              "gated_mlp", "tied_embeddings", "attn_bias", "norm", "position"):
        assert getattr(spec, f) == getattr(p, f), f
    assert spec.name == "Llama-2-7b-hf"
    assert spec.source.startswith("hf-config:") and "model_type=llama" in spec.source


def test_hf_mixtral_matches_preset(tmp_path):
    spec = load_hf_config(_write(tmp_path, MIXTRAL_8X7B))
    p = PRESETS["mixtral-8x7b"]
    assert (spec.num_experts, spec.top_k, spec.f_expert, spec.a_kv) == (8, 2, 14336, 8)
    assert spec.total_params() == p.total_params()
    assert spec.active_params() == p.active_params()


def test_hf_qwen3_moe_fields(tmp_path):
    s = load_hf_config(_write(tmp_path, QWEN3_30B_A3B))
    assert (s.num_experts, s.top_k, s.f_expert, s.shared_expert_ffn_hidden) == (128, 8, 768, 0)
    assert (s.d_head, s.q_width, s.a_kv, s.n_moe_layers) == (128, 4096, 4, 48)
    exact = "qk_norm" in _SPEC_FIELDS
    # "A3B": 3,353,032,704 active of 30,532,122,624
    assert s.active_params() == pytest.approx(3_353_032_704, abs=0 if exact else 48 * 256)


def test_hf_qwen3_moe_v5_num_local_experts(tmp_path):
    cfg = {k: v for k, v in QWEN3_30B_A3B.items() if k not in ("num_experts", "torch_dtype")}
    cfg.update(num_local_experts=128, dtype="bfloat16")
    a = load_hf_config(_write(tmp_path, QWEN3_30B_A3B, "a"))
    b = load_hf_config(_write(tmp_path, cfg, "b"))
    assert b.num_experts == 128 and b.total_params() == a.total_params()


def test_hf_qwen2_moe_fields(tmp_path):
    s = load_hf_config(_write(tmp_path, QWEN15_MOE_A27B))
    assert (s.num_experts, s.top_k, s.f_expert, s.shared_expert_ffn_hidden, s.ffn_hidden) == (
        60, 4, 1408, 5632, 5632)
    assert s.n_moe_layers == 24 and s.active_params() < s.total_params()


def test_hf_decoder_sparse_step(tmp_path):
    cfg = dict(QWEN15_MOE_A27B, decoder_sparse_step=2)
    s = load_hf_config(_write(tmp_path, cfg))
    assert s.moe_layer_freq == 2 and s.n_moe_layers == 12 and s.n_dense_layers == 12


def test_hf_mlp_only_layers(tmp_path):
    f = _write(tmp_path, dict(QWEN3_30B_A3B, mlp_only_layers=[0, 47]))
    if "dense_layer_ids" in _SPEC_FIELDS:
        assert load_hf_config(f).n_moe_layers == 46
    else:
        with pytest.raises(InputError, match="mlp_only_layers"):
            load_hf_config(f)


def test_hf_gpt2_defaults(tmp_path):
    s = load_hf_config(_write(tmp_path, GPT2))
    assert (s.layers, s.hidden, s.heads, s.ffn_hidden, s.max_seq_len) == (12, 768, 12, 3072, 1024)
    assert s.tied_embeddings and s.position == "learned" and s.norm == "layernorm"
    assert s.attn_bias and s.mlp_bias and not s.gated_mlp
    explicit = load_hf_config(_write(tmp_path, dict(GPT2, n_inner=None), "b"))
    assert explicit.ffn_hidden == 3072
    wide = load_hf_config(_write(tmp_path, dict(GPT2, n_inner=4096), "c"))
    assert wide.ffn_hidden == 4096


def test_hf_gpt_neox_fields(tmp_path):
    s = load_hf_config(_write(tmp_path, GPT_NEOX_20B))
    assert not s.tied_embeddings and s.position == "rope" and s.norm == "layernorm"
    assert s.attn_bias and s.mlp_bias and not s.gated_mlp and s.a_kv == 64
    no_bias = load_hf_config(_write(tmp_path, dict(GPT_NEOX_20B, attention_bias=False), "b"))
    assert s.total_params() - no_bias.total_params() == 44 * 4 * 6144
    untied_default = {k: v for k, v in GPT_NEOX_20B.items() if k != "tie_word_embeddings"}
    assert not load_hf_config(_write(tmp_path, untied_default, "c")).tied_embeddings


def test_hf_tie_defaults_per_family(tmp_path):
    llama = {k: v for k, v in LLAMA2_7B.items() if k != "tie_word_embeddings"}
    assert not load_hf_config(_write(tmp_path, llama, "llama")).tied_embeddings
    assert load_hf_config(_write(tmp_path, GEMMA_7B, "gemma")).tied_embeddings
    assert load_hf_config(_write(tmp_path, dict(QWEN2_7B, tie_word_embeddings=True),
                                 "qwen")).tied_embeddings


def test_hf_text_config_nesting(tmp_path):
    inner = {k: v for k, v in LLAMA2_7B.items() if k != "_name_or_path"}
    wrapper = {"architectures": ["LlavaForConditionalGeneration"], "model_type": "llava",
               "image_token_index": 32000, "projector_hidden_act": "gelu",
               "vision_config": {"model_type": "clip_vision_model", "hidden_size": 1024,
                                 "num_hidden_layers": 24, "num_attention_heads": 16,
                                 "intermediate_size": 4096},
               "text_config": inner, "dtype": "float16", "transformers_version": "5.0.0"}
    s = load_hf_config(_write(tmp_path, wrapper))
    assert s.total_params() == 6_738_415_616
    assert "text_config of llava" in s.source
    # vocab and tying may sit on the wrapper
    inner2 = {k: v for k, v in inner.items() if k not in ("vocab_size", "tie_word_embeddings")}
    w2 = dict(wrapper, text_config=inner2, vocab_size=32000, tie_word_embeddings=False)
    assert load_hf_config(_write(tmp_path, w2, "b")).total_params() == 6_738_415_616


def test_hf_unknown_model_type_read_llama_like(tmp_path):
    cfg = dict(LLAMA2_7B, model_type="my_llama_variant")
    s = load_hf_config(_write(tmp_path, cfg))
    assert s.total_params() == 6_738_415_616
    assert "my_llama_variant" in s.source and "unknown" in s.source


def test_hf_accepts_a_file_not_named_config_json(tmp_path):
    f = tmp_path / "mistral.json"
    f.write_text(json.dumps(MISTRAL_7B))
    s = load_hf_config(f)
    assert s.total_params() == 7_241_732_096 and s.name == "mistral"


# ---- HF reader errors --------------------------------------------------------------------------
def _err(tmp_path, cfg=None, raw=None) -> str:
    f = _write(tmp_path, cfg, raw=raw)
    with pytest.raises(InputError) as e:
        load_hf_config(f)
    msg = str(e.value)
    assert "\n" not in msg and str(f) in msg and e.value.exit_code == 1
    return msg


def test_err_missing_file(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        load_hf_config(tmp_path / "nope" / "config.json")


def test_err_directory_without_config(tmp_path):
    with pytest.raises(InputError) as e:
        load_hf_config(tmp_path)
    assert "no config.json" in str(e.value) and str(tmp_path) in str(e.value)


def test_err_broken_json_gives_line_and_column(tmp_path):
    msg = _err(tmp_path, raw='{\n  "hidden_size": 4096,\n  "num_hidden_layers": 32,,\n}\n')
    assert "not valid JSON" in msg and "line 3, column" in msg


def test_err_json_not_an_object(tmp_path):
    assert "JSON object" in _err(tmp_path, raw="[1, 2, 3]")


def _no_family(cfg: dict) -> dict:
    """The same fields without model_type: no transformers defaults to fall back on."""
    return {k: v for k, v in cfg.items() if k != "model_type"}


def test_err_missing_heads_names_field(tmp_path):
    cfg = {k: v for k, v in _no_family(LLAMA2_7B).items() if k != "num_attention_heads"}
    msg = _err(tmp_path, cfg)
    assert "missing 'num_attention_heads' (or 'n_head'" in msg and "--params" in msg


def test_missing_field_of_a_known_family_takes_the_transformers_default(tmp_path):
    """LlamaConfig's num_attention_heads default is 32 (configuration_llama.py)."""
    cfg = {k: v for k, v in LLAMA2_7B.items() if k != "num_attention_heads"}
    s = load_hf_config(_write(tmp_path, cfg))
    assert s.heads == 32 and s.total_params() == 6_738_415_616
    assert "transformers defaults (configuration_llama.py): num_attention_heads=32" in s.source


def test_err_missing_gpt2_field_names_gpt2_spelling(tmp_path):
    cfg = {k: v for k, v in _no_family(GPT2).items() if k != "n_layer"}
    assert "missing 'num_hidden_layers' (or 'n_layer'" in _err(tmp_path, cfg)
    gpt2 = load_hf_config(_write(tmp_path, {k: v for k, v in GPT2.items() if k != "n_layer"}, "b"))
    assert gpt2.layers == 12 and "n_layer=12" in gpt2.source       # GPT2Config default


def test_err_missing_intermediate_size(tmp_path):
    cfg = {k: v for k, v in _no_family(MISTRAL_7B).items() if k != "intermediate_size"}
    assert "'intermediate_size'" in _err(tmp_path, cfg)
    s = load_hf_config(_write(tmp_path, {k: v for k, v in MISTRAL_7B.items()
                                         if k != "intermediate_size"}, "b"))
    assert s.ffn_hidden == 14336 and s.total_params() == 7_241_732_096   # MistralConfig default


@pytest.mark.parametrize("field,value", [("hidden_size", 0), ("num_hidden_layers", -2),
                                         ("vocab_size", "32000"), ("num_attention_heads", 32.5),
                                         ("intermediate_size", True)])
def test_err_bad_values(tmp_path, field, value):
    msg = _err(tmp_path, dict(LLAMA2_7B, **{field: value}))
    assert f"'{field}' must be a positive integer" in msg


def test_err_heads_not_divisible_by_kv_heads(tmp_path):
    msg = _err(tmp_path, dict(MISTRAL_7B, num_key_value_heads=5))
    assert "'num_attention_heads'=32" in msg and "'num_key_value_heads'=5" in msg


def test_err_hidden_not_divisible_without_head_dim(tmp_path):
    assert "add 'head_dim'" in _err(tmp_path, dict(LLAMA2_7B, hidden_size=4100))


def test_err_moe_top_k_exceeds_experts(tmp_path):
    assert "'num_experts_per_tok'=9" in _err(tmp_path, dict(MIXTRAL_8X7B, num_experts_per_tok=9))


def test_mla_is_read_not_refused(tmp_path):
    """DeepSeek's multi-head latent attention used to be refused; tests/test_hf_config.py has the
    real configs. A Llama config that also names MLA fields is read as MLA (family from fields)."""
    cfg = dict(LLAMA2_7B, model_type="deepseek_v3", kv_lora_rank=512, q_lora_rank=1536,
               qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, n_routed_experts=None)
    s = load_hf_config(_write(tmp_path, cfg))
    assert s.mla and (s.q_lora_rank, s.kv_lora_rank, s.d_qk, s.d_v) == (1536, 512, 192, 128)
