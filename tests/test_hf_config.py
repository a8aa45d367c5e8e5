"""The Hugging Face reader on the families of issue 11: DeepSeek-V2/V3 and Kimi K2 (MLA), gpt-oss,
Qwen3-MoE, Mixtral 8x22B, Gemma 2/3 (GeGLU), Phi-2/3, Nemotron; transformers' defaults for omitted
fields; refusal of encoder-only / encoder-decoder models; presets that match the configs.

Each config below copies the public config.json of the checkpoint (the fields that matter plus a few
that must be ignored; long arrays shortened where they do not count). "Published" figures are those
of the model card / report, at the rounding the publisher used; exact counts are this module's
counting (see the notes where the publisher counts differently, e.g. active parameters without the
input embedding).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autoplace.cli import app
from autoplace.errors import InputError
from autoplace.specs.hf_config import load_hf_config
from autoplace.specs.presets import PRESETS, get_preset

ROOT = Path(__file__).resolve().parents[1]

DSV3 = {"architectures": ["DeepseekV3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "auto_map": {"AutoConfig": "configuration_deepseek.DeepseekV3Config",
                 "AutoModel": "modeling_deepseek.DeepseekV3Model",
                 "AutoModelForCausalLM": "modeling_deepseek.DeepseekV3ForCausalLM"},
    "aux_loss_alpha": 0.001, "bos_token_id": 0, "eos_token_id": 1, "ep_size": 1,
    "first_k_dense_replace": 3, "hidden_act": "silu", "hidden_size": 7168, "initializer_range": 0.02,
    "intermediate_size": 18432, "kv_lora_rank": 512, "max_position_embeddings": 163840,
    "model_type": "deepseek_v3", "moe_intermediate_size": 2048, "moe_layer_freq": 1, "n_group": 8,
    "n_routed_experts": 256, "n_shared_experts": 1, "norm_topk_prob": True, "num_attention_heads": 128,
    "num_experts_per_tok": 8, "num_hidden_layers": 61, "num_key_value_heads": 128,
    "num_nextn_predict_layers": 1, "pretraining_tp": 1, "q_lora_rank": 1536, "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                            "weight_block_size": [128, 128]},
    "rms_norm_eps": 1e-06,
    "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                     "original_max_position_embeddings": 4096, "type": "yarn"},
    "rope_theta": 10000, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "seq_aux": True,
    "tie_word_embeddings": False, "topk_group": 4, "topk_method": "noaux_tc", "torch_dtype": "bfloat16",
    "transformers_version": "4.33.1", "use_cache": True, "v_head_dim": 128, "vocab_size": 129280}
KIMI = dict(DSV3, first_k_dense_replace=1, max_position_embeddings=131072, model_type="kimi_k2",
    n_group=1, n_routed_experts=384, num_attention_heads=64, num_key_value_heads=64,
    num_nextn_predict_layers=0, rope_theta=50000.0, routed_scaling_factor=2.827, topk_group=1,
    bos_token_id=163584, eos_token_id=163585, transformers_version="4.48.3", vocab_size=163840,
    rope_scaling={"beta_fast": 1.0, "beta_slow": 1.0, "factor": 32.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                  "original_max_position_embeddings": 4096, "type": "yarn"})
DSV2_LITE = {"architectures": ["DeepseekV2ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "aux_loss_alpha": 0.001, "bos_token_id": 100000, "eos_token_id": 100001, "first_k_dense_replace": 1,
    "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 10944,
    "kv_lora_rank": 512, "max_position_embeddings": 163840, "model_type": "deepseek_v2",
    "moe_intermediate_size": 1408, "moe_layer_freq": 1, "n_group": 1, "n_routed_experts": 64,
    "n_shared_experts": 2, "norm_topk_prob": False, "num_attention_heads": 16, "num_experts_per_tok": 6,
    "num_hidden_layers": 27, "num_key_value_heads": 16, "pretraining_tp": 1, "q_lora_rank": None,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "rms_norm_eps": 1e-06,
    "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 0.707, "mscale_all_dim": 0.707,
                     "original_max_position_embeddings": 4096, "type": "yarn"},
    "rope_theta": 10000, "routed_scaling_factor": 1.0, "scoring_func": "softmax", "seq_aux": True,
    "tie_word_embeddings": False, "topk_group": 1, "topk_method": "greedy", "torch_dtype": "bfloat16",
    "transformers_version": "4.33.1", "use_cache": True, "v_head_dim": 128, "vocab_size": 102400}
DSV2 = dict(DSV2_LITE, hidden_size=5120, intermediate_size=12288, moe_intermediate_size=1536,
    n_group=8, n_routed_experts=160, num_attention_heads=128, num_hidden_layers=60, num_key_value_heads=128,
    q_lora_rank=1536, routed_scaling_factor=16.0, topk_group=3, topk_method="group_limited_greedy")
_LT = ["sliding_attention", "full_attention"]
GPT_OSS_120B = {"architectures": ["GptOssForCausalLM"], "attention_bias": True, "attention_dropout": 0.0,
    "eos_token_id": 200002, "experts_per_token": 4, "head_dim": 64, "hidden_act": "silu",
    "hidden_size": 2880, "initial_context_length": 4096, "initializer_range": 0.02,
    "intermediate_size": 2880, "layer_types": _LT * 18, "max_position_embeddings": 131072,
    "model_type": "gpt_oss", "num_attention_heads": 64, "num_experts_per_tok": 4, "num_hidden_layers": 36,
    "num_key_value_heads": 8, "num_local_experts": 128, "output_router_logits": False,
    "pad_token_id": 199999,
    "quantization_config": {"modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                                       "model.embed_tokens", "lm_head"], "quant_method": "mxfp4"},
    "rms_norm_eps": 1e-05,
    "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                     "original_max_position_embeddings": 4096, "rope_type": "yarn", "truncate": False},
    "rope_theta": 150000, "router_aux_loss_coef": 0.9, "sliding_window": 128, "swiglu_limit": 7.0,
    "tie_word_embeddings": False, "transformers_version": "4.55.0.dev0", "use_cache": True,
    "vocab_size": 201088}
GPT_OSS_20B = dict(GPT_OSS_120B, layer_types=_LT * 12, num_hidden_layers=24, num_local_experts=32)
QWEN3_235B = {"architectures": ["Qwen3MoeForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151645, "head_dim": 128,
    "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 12288,
    "max_position_embeddings": 40960, "max_window_layers": 94, "mlp_only_layers": [],
    "model_type": "qwen3_moe", "moe_intermediate_size": 1536, "norm_topk_prob": True,
    "num_attention_heads": 64, "num_experts": 128, "num_experts_per_tok": 8, "num_hidden_layers": 94,
    "num_key_value_heads": 4, "output_router_logits": False, "rms_norm_eps": 1e-06, "rope_scaling": None,
    "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001, "sliding_window": None,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
    "use_cache": True, "use_sliding_window": False, "vocab_size": 151936}
MIXTRAL_8X22B = {"architectures": ["MixtralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1,
    "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 6144, "initializer_range": 0.02,
    "intermediate_size": 16384, "max_position_embeddings": 65536, "model_type": "mixtral",
    "num_attention_heads": 48, "num_experts_per_tok": 2, "num_hidden_layers": 56, "num_key_value_heads": 8,
    "num_local_experts": 8, "output_router_logits": False, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0,
    "router_aux_loss_coef": 0.001, "sliding_window": None, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "transformers_version": "4.38.0", "use_cache": True, "vocab_size": 32000}
GEMMA2_9B = {"architectures": ["Gemma2ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "attn_logit_softcapping": 50.0, "bos_token_id": 2, "cache_implementation": "hybrid", "eos_token_id": 1,
    "final_logit_softcapping": 30.0, "head_dim": 256, "hidden_act": "gelu_pytorch_tanh",
    "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 3584, "initializer_range": 0.02,
    "intermediate_size": 14336, "max_position_embeddings": 8192, "model_type": "gemma2",
    "num_attention_heads": 16, "num_hidden_layers": 42, "num_key_value_heads": 8, "pad_token_id": 0,
    "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "sliding_window": 4096,
    "sliding_window_size": 4096, "torch_dtype": "float32", "transformers_version": "4.42.0.dev0",
    "use_cache": True, "vocab_size": 256000}
_SIGLIP = {"hidden_size": 1152, "image_size": 896, "intermediate_size": 4304,
           "model_type": "siglip_vision_model", "num_attention_heads": 16, "num_hidden_layers": 27,
           "patch_size": 14, "vision_use_head": False}
GEMMA3_27B = {"architectures": ["Gemma3ForConditionalGeneration"], "boi_token_index": 255999,
    "eoi_token_index": 256000, "eos_token_id": [1, 106], "image_token_index": 262144,
    "initializer_range": 0.02, "mm_tokens_per_image": 256, "model_type": "gemma3",
    "text_config": {"head_dim": 128, "hidden_size": 5376, "intermediate_size": 21504,
                    "model_type": "gemma3_text", "num_attention_heads": 32, "num_hidden_layers": 62,
                    "num_key_value_heads": 16, "query_pre_attn_scalar": 168,
                    "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "sliding_window": 1024},
    "torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0", "vision_config": _SIGLIP}
GEMMA3_4B = dict(GEMMA3_27B, text_config={"hidden_size": 2560, "intermediate_size": 10240,
    "model_type": "gemma3_text", "num_hidden_layers": 34,
    "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "sliding_window": 1024})
GEMMA3_1B = {"architectures": ["Gemma3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "attn_logit_softcapping": None, "bos_token_id": 2, "cache_implementation": "hybrid", "eos_token_id": 1,
    "final_logit_softcapping": None, "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh",
    "hidden_size": 1152, "initializer_range": 0.02, "intermediate_size": 6912,
    "max_position_embeddings": 32768, "model_type": "gemma3_text", "num_attention_heads": 4,
    "num_hidden_layers": 26, "num_key_value_heads": 1, "pad_token_id": 0, "query_pre_attn_scalar": 256,
    "rms_norm_eps": 1e-06, "rope_local_base_freq": 10000, "rope_scaling": None, "rope_theta": 1000000,
    "sliding_window": 512, "sliding_window_pattern": 6, "torch_dtype": "bfloat16",
    "transformers_version": "4.50.0.dev0", "use_cache": True, "vocab_size": 262144}
PHI3_MINI = {"architectures": ["Phi3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 1, "embd_pdrop": 0.0, "eos_token_id": 32000, "hidden_act": "silu", "hidden_size": 3072,
    "initializer_range": 0.02, "intermediate_size": 8192, "max_position_embeddings": 4096,
    "model_type": "phi3", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
    "original_max_position_embeddings": 4096, "pad_token_id": 32000, "resid_pdrop": 0.0,
    "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 10000.0, "sliding_window": 2047,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.40.2",
    "use_cache": True, "vocab_size": 32064}
PHI2 = {"architectures": ["PhiForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 50256,
    "embd_pdrop": 0.0, "eos_token_id": 50256, "hidden_act": "gelu_new", "hidden_size": 2560,
    "initializer_range": 0.02, "intermediate_size": 10240, "layer_norm_eps": 1e-05,
    "max_position_embeddings": 2048, "model_type": "phi", "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 32, "partial_rotary_factor": 0.4,
    "qk_layernorm": False, "resid_pdrop": 0.1, "rope_scaling": None, "rope_theta": 10000.0,
    "tie_word_embeddings": False, "torch_dtype": "float16", "transformers_version": "4.37.0",
    "use_cache": True, "vocab_size": 51200}
NEMOTRON4_15B = {"architectures": ["NemotronForCausalLM"], "model_type": "nemotron", "num_key_value_heads": 8}
BERT_BASE = {"architectures": ["BertForMaskedLM"], "attention_probs_dropout_prob": 0.1,
    "gradient_checkpointing": False, "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "hidden_size": 768,
    "initializer_range": 0.02, "intermediate_size": 3072, "layer_norm_eps": 1e-12,
    "max_position_embeddings": 512, "model_type": "bert", "num_attention_heads": 12,
    "num_hidden_layers": 12, "pad_token_id": 0, "position_embedding_type": "absolute",
    "transformers_version": "4.6.0.dev0", "type_vocab_size": 2, "use_cache": True, "vocab_size": 30522}
ROBERTA_BASE = dict(BERT_BASE, architectures=["RobertaForMaskedLM"], model_type="roberta",
                    vocab_size=50265, max_position_embeddings=514, type_vocab_size=1, layer_norm_eps=1e-5)
T5_SMALL = {"architectures": ["T5ForConditionalGeneration"], "d_ff": 2048, "d_kv": 64, "d_model": 512,
    "decoder_start_token_id": 0, "dropout_rate": 0.1, "eos_token_id": 1, "initializer_factor": 1.0,
    "is_encoder_decoder": True, "layer_norm_epsilon": 1e-06, "model_type": "t5", "n_positions": 512,
    "num_heads": 8, "num_layers": 6, "output_past": True, "pad_token_id": 0,
    "relative_attention_num_buckets": 32, "vocab_size": 32128}


def _write(tmp_path: Path, cfg, name: str = "model") -> Path:
    d = tmp_path / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg, indent=2))
    return d


def _load(tmp_path, cfg, name="model"):
    return load_hf_config(_write(tmp_path, cfg, name))


def _billions(n: int, digits: int = 0) -> float:
    return round(n / 1e9, digits)


# ---- exact counts per config (and the published figure they round to) --------------------------
EXACT = [  # id, config, total, active
    ("deepseek-v3", DSV3, 671_026_404_352, 37_552_282_624),
    ("kimi-k2", KIMI, 1_026_408_209_408, 32_861_477_888),
    ("deepseek-v2", DSV2, 235_741_434_880, 21_375_800_320),
    ("deepseek-v2-lite", DSV2_LITE, 15_706_484_224, 2_661_150_208),
    ("gpt-oss-120b", GPT_OSS_120B, 116_829_156_672, 5_711_982_912),
    ("gpt-oss-20b", GPT_OSS_20B, 20_914_757_184, 4_187_440_704),
    ("qwen3-235b-a22b", QWEN3_235B, 235_093_634_560, 22_190_763_520),
    ("mixtral-8x22b", MIXTRAL_8X22B, 140_620_634_112, 39_152_031_744),
    ("gemma2-9b", GEMMA2_9B, 9_241_705_984, 9_241_705_984),
    ("gemma3-27b", GEMMA3_27B, 27_009_346_304, 27_009_346_304),
    ("gemma3-4b", GEMMA3_4B, 3_880_263_168, 3_880_263_168),
    ("gemma3-1b", GEMMA3_1B, 999_885_952, 999_885_952),
    ("phi3-mini", PHI3_MINI, 3_821_079_552, 3_821_079_552),
    ("nemotron4-15b", NEMOTRON4_15B, 15_628_775_424, 15_628_775_424),
]


@pytest.mark.parametrize("cfg,total,active", [pytest.param(*c[1:], id=c[0]) for c in EXACT])
def test_exact_total_and_active(tmp_path, cfg, total, active):
    s = _load(tmp_path, cfg)
    assert s.total_params() == total and s.active_params() == active
    assert "approximate" not in s.source


def test_deepseek_v3_published(tmp_path):
    """Report: 671B total, 37B activated (without the input embedding), MTP module extra."""
    s = _load(tmp_path, DSV3)
    assert s.mla and (s.q_lora_rank, s.kv_lora_rank, s.d_qk, s.d_v) == (1536, 512, 192, 128)
    assert (s.num_experts, s.top_k, s.f_expert, s.shared_expert_ffn_hidden, s.ffn_hidden) == (
        256, 8, 2048, 2048, 18432)
    assert s.dense_layer_ids == (0, 1, 2) and s.n_moe_layers == 58 and s.mtp_layers == 1
    assert not s.expert_bias and not s.tied_embeddings and s.act == "silu" and s.gated_mlp
    assert _billions(s.total_params()) == 671
    assert _billions(s.active_params() - s.embedding_params()) == 37
    # the MTP module's own weights (its embedding and head are the main model's): 11.6B; the
    # report's "14B" also counts the checkpoint's copies of embedding and head (2 × 0.93B)
    assert s.mtp_params() == 11_610_067_968
    assert _billions(s.mtp_params() + 2 * s.embedding_params()) == 13
    assert "e_score_correction_bias is a buffer" in s.source and "mtp_params" in s.source
    assert s.pretrain_seq_len == 4096 and s.max_seq_len == 163840


def test_deepseek_v2_published(tmp_path):
    """DeepSeek-V2: 236B total, 21B activated; V2-Lite: 15.7B total, 2.4B activated (q_lora_rank null
    → one full-rank query projection)."""
    v2, lite = _load(tmp_path, DSV2, "v2"), _load(tmp_path, DSV2_LITE, "lite")
    assert _billions(v2.total_params()) == 236
    assert _billions(v2.active_params() - v2.embedding_params()) == 21
    assert lite.q_lora_rank == 0 and [n for n, *_ in lite.attn_linears()][0] == "q"
    assert _billions(lite.total_params(), 1) == 15.7
    assert 2.4e9 <= lite.active_params() - lite.embedding_params() < 2.5e9
    assert lite.dense_layer_ids == (0,) and lite.shared_expert_ffn_hidden == 2 * 1408


def test_kimi_k2_is_deepseek_v3_shaped(tmp_path):
    """Model card: 1T total, 32B activated, 61 layers (1 dense), 384 experts, 64 heads, 160K vocab."""
    s = _load(tmp_path, KIMI)
    assert (s.heads, s.num_experts, s.dense_layer_ids, s.vocab, s.mtp_layers) == (
        64, 384, (0,), 163840, 0)
    assert round(s.total_params() / 1e12) == 1 and int(s.active_params() / 1e9) == 32


def test_deepseek_moe_layer_freq(tmp_path):
    """DeepSeek's pattern: layer i is MoE when i >= first_k_dense_replace and i % moe_layer_freq == 0."""
    s = _load(tmp_path, dict(DSV2_LITE, moe_layer_freq=2, first_k_dense_replace=3))
    moe = [i for i in range(27) if i not in s.dense_layer_ids and (i + 1) % s.moe_layer_freq == 0]
    assert moe == [i for i in range(27) if i >= 3 and i % 2 == 0]


def test_gpt_oss_published(tmp_path):
    """Model card: 120b 116.83B total / 5.13B active, 20b 20.91B / 3.61B (active without the
    input embedding)."""
    for cfg, total, active in ((GPT_OSS_120B, 116.83, 5.13), (GPT_OSS_20B, 20.91, 3.61)):
        s = _load(tmp_path, cfg, str(total))
        assert _billions(s.total_params(), 2) == total
        assert _billions(s.active_params() - s.embedding_params(), 2) == active
        assert s.attn_bias and s.expert_bias and s.attn_sinks and s.gated_mlp and s.act == "silu"
        assert (s.d_head, s.a_kv, s.ffn_hidden, s.f_expert, s.top_k) == (64, 8, 2880, 2880, 4)
        assert (s.sliding_window, s.global_every, s.windowed_share) == (128, 2, 0.5)
        assert s.n_dense_layers == 0 and "swiglu_limit 7.0" in s.source
        assert s.pretrain_seq_len == 4096
        # the clamp and YaRN's attention factor (no mscale keys: 0.1·ln 32 + 1) the runtimes price
        assert s.glu_limit == 7.0 and s.rope_mscale == pytest.approx(1.3465735902799727, abs=1e-12)


def test_yarn_attention_factor_is_read_as_transformers_computes_it(tmp_path):
    """mscale = mscale_all_dim (DeepSeek-V3, Kimi K2) → 1; an explicit attention_factor wins; other
    rope types → 1."""
    assert _load(tmp_path, DSV3, "v3").rope_mscale == 1.0
    assert _load(tmp_path, DSV2_LITE, "lite").rope_mscale == 1.0
    rs = dict(GPT_OSS_20B["rope_scaling"], attention_factor=1.25)
    assert _load(tmp_path, dict(GPT_OSS_20B, rope_scaling=rs), "af").rope_mscale == 1.25
    rs = {"rope_type": "yarn", "factor": 4.0, "mscale": 1.0, "mscale_all_dim": 0.0}
    assert _load(tmp_path, dict(GPT_OSS_20B, rope_scaling=rs), "m").rope_mscale == pytest.approx(0.1 * math.log(4) + 1)
    assert _load(tmp_path, dict(GPT_OSS_20B, rope_scaling={"rope_type": "linear", "factor": 8.0}), "lin").rope_mscale == 1.0
    assert _load(tmp_path, {k: v for k, v in GPT_OSS_20B.items() if k != "swiglu_limit"}, "nolim").glu_limit == 0.0


def test_gpt_oss_windows_from_family_pattern_without_layer_types(tmp_path):
    cfg = {k: v for k, v in GPT_OSS_20B.items() if k != "layer_types"}
    s = _load(tmp_path, cfg)
    assert (s.sliding_window, s.global_every) == (128, 2)


def test_qwen3_moe_published(tmp_path):
    """Qwen3 report: 235B total, 22B activated; q/k norms, no shared expert."""
    s = _load(tmp_path, QWEN3_235B)
    assert s.qk_norm and s.shared_expert_ffn_hidden == 0 and s.n_moe_layers == 94
    assert _billions(s.total_params()) == 235 and _billions(s.active_params()) == 22
    assert s.pretrain_seq_len == 4096 and s.sliding_window == 0


def test_mixtral_8x22b_published(tmp_path):
    """Mistral AI: 141B total, 39B active; no published pre-training length (0)."""
    s = _load(tmp_path, MIXTRAL_8X22B)
    assert _billions(s.total_params()) == 141 and _billions(s.active_params()) == 39
    assert s.pretrain_seq_len == 0


def test_gemma_is_geglu_with_four_norms(tmp_path):
    s = _load(tmp_path, GEMMA2_9B)
    assert s.act == "gelu" and s.gated_mlp and s.activation == "gelu"     # GeGLU, not SwiGLU
    assert s.norms_per_layer == 4 and s.tied_embeddings and s.d_head == 256
    assert (s.sliding_window, s.global_every) == (4096, 2) and s.pretrain_seq_len == 8192
    two_norms = s.with_(norms_per_layer=2)
    assert s.total_params() - two_norms.total_params() == 42 * 2 * 3584


def test_gemma3_text_config_defaults_are_transformers_defaults(tmp_path):
    """gemma-3-4b's text_config leaves heads, KV heads, head_dim and vocab to Gemma3TextConfig;
    Gemma 3 report Table 1: 3,209M non-embedding parameters (27B: 25,600M; 1B: 698M + 302M)."""
    s = _load(tmp_path, GEMMA3_4B)
    assert (s.heads, s.a_kv, s.d_head, s.vocab, s.layers, s.hidden) == (8, 4, 256, 262208, 34, 2560)
    for used in ("num_attention_heads=8", "num_key_value_heads=4", "head_dim=256", "vocab_size=262208"):
        assert used in s.source
    assert "configuration_gemma3.py" in s.source and "text_config of gemma3" in s.source
    assert s.qk_norm and s.norms_per_layer == 4 and s.act == "gelu" and s.gated_mlp
    assert (s.sliding_window, s.global_every) == (1024, 6) and s.pretrain_seq_len == 32768
    assert round((s.total_params() - s.embedding_params()) / 1e6) == 3209
    big = _load(tmp_path, GEMMA3_27B, "27b")
    assert round((big.total_params() - big.embedding_params()) / 1e6) == 25600
    one = _load(tmp_path, GEMMA3_1B, "1b")
    assert round((one.total_params() - one.embedding_params()) / 1e6) == 698
    assert round(one.embedding_params() / 1e6) == 302 and one.global_every == 6


def test_gemma3_wrapper_without_text_config_is_gemma3_text_defaults(tmp_path):
    s = _load(tmp_path, {k: v for k, v in GEMMA3_4B.items() if k != "text_config"})
    assert (s.layers, s.hidden, s.ffn_hidden, s.heads) == (26, 2304, 9216, 8)
    assert "read as its text model 'gemma3_text'" in s.source


def test_phi2_ungated_one_norm_head_bias_noted(tmp_path):
    """phi-2: 2,779,683,840 parameters, 51,200 of them the lm_head bias ModelSpec has no field for."""
    s = _load(tmp_path, PHI2)
    assert not s.gated_mlp and s.act == "gelu" and s.norms_per_layer == 1 and s.norm == "layernorm"
    assert s.attn_bias and s.mlp_bias
    assert s.total_params() == 2_779_683_840 - 51_200 and "approximate: the lm_head bias" in s.source


def test_nemotron_relu2_ungated_layernorm(tmp_path):
    """NemotronConfig's defaults are the Nemotron-4 15B shape (with 8 KV heads, Parmar et al. 2024
    Table 1): 12.5B non-embedding parameters."""
    s = _load(tmp_path, NEMOTRON4_15B)
    assert s.act == "relu2" and not s.gated_mlp and s.norm == "layernorm"
    assert not (s.attn_bias or s.mlp_bias or s.tied_embeddings)
    assert (s.layers, s.hidden, s.heads, s.a_kv, s.ffn_hidden, s.vocab) == (
        32, 6144, 48, 8, 24576, 256000)
    assert _billions(s.total_params() - 2 * s.embedding_params(), 1) == 12.5
    assert "hidden_act=relu2" in s.source and s.pretrain_seq_len == 4096


# ---- family from fields, not keywords -----------------------------------------------------------
LLAMA = {"architectures": ["LlamaForCausalLM"], "hidden_act": "silu", "hidden_size": 4096,
         "intermediate_size": 11008, "max_position_embeddings": 4096, "model_type": "llama",
         "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
         "tie_word_embeddings": False, "vocab_size": 32000}


def test_activation_comes_from_the_field_gating_from_the_modeling_code(tmp_path):
    geglu = _load(tmp_path, dict(LLAMA, hidden_act="gelu_pytorch_tanh"), "a")
    assert geglu.gated_mlp and geglu.act == "gelu"          # a Llama MLP is gated whatever the act
    relu2 = _load(tmp_path, dict(LLAMA, model_type="nemotron"), "b")
    assert not relu2.gated_mlp and relu2.act == "silu" and relu2.activation == "silu"
    assert _load(tmp_path, dict(LLAMA, model_type="gpt_neox", hidden_act="gelu_fast"), "c").act == "gelu"
    with pytest.raises(InputError, match="'hidden_act'='tanh' is not an activation autoplace models"):
        _load(tmp_path, dict(LLAMA, hidden_act="tanh"), "d")


def test_name_words_do_not_pick_the_family(tmp_path):
    """A llama config named like another family stays a llama; the reverse too."""
    a = _load(tmp_path, dict(LLAMA, _name_or_path="google/gemma-7b"), "gemma-7b")
    assert a.norms_per_layer == 2 and not a.tied_embeddings and a.act == "silu"


def test_pretrain_seq_len_rules(tmp_path):
    assert _load(tmp_path, LLAMA, "l2").pretrain_seq_len == 4096               # Llama 2: its context
    l31 = dict(LLAMA, max_position_embeddings=131072,
               rope_scaling={"factor": 8.0, "rope_type": "llama3",
                             "original_max_position_embeddings": 8192})
    assert _load(tmp_path, l31, "l31").pretrain_seq_len == 8192                # before extension
    mistral01 = dict(LLAMA, model_type="mistral", sliding_window=4096, max_position_embeddings=32768)
    m = _load(tmp_path, mistral01, "m01")
    assert m.pretrain_seq_len == 8192 and (m.sliding_window, m.global_every) == (4096, 0)
    assert _load(tmp_path, dict(mistral01, sliding_window=None), "m03").pretrain_seq_len == 0
    unknown = dict(LLAMA, model_type="my_decoder", max_position_embeddings=32768)
    assert _load(tmp_path, unknown, "u").pretrain_seq_len == 0


def test_irregular_layer_types_are_noted(tmp_path):
    lt = ["sliding_attention"] * 24
    lt[3] = lt[10] = lt[20] = "full_attention"
    s = _load(tmp_path, dict(GPT_OSS_20B, layer_types=lt))
    assert s.global_every == 8 and "irregular pattern" in s.source
    with pytest.raises(InputError, match="'layer_types' must list one attention type per layer"):
        _load(tmp_path, dict(GPT_OSS_20B, layer_types=lt[:5]), "short")


def test_explicit_null_is_the_config_s_choice(tmp_path):
    """MistralConfig defaults num_key_value_heads to 8, but an explicit null means MHA."""
    cfg = dict(LLAMA, model_type="mistral", num_key_value_heads=None)
    assert _load(tmp_path, cfg).a_kv == 32
    cfg.pop("num_key_value_heads")
    assert _load(tmp_path, cfg, "b").a_kv == 8


# ---- refusals: one line, the field and the reason -----------------------------------------------
@pytest.mark.parametrize("cfg,needle", [
    (BERT_BASE, "BertForMaskedLM is an encoder-only model ('model_type': 'bert')"),
    (ROBERTA_BASE, "RobertaForMaskedLM is an encoder-only model ('model_type': 'roberta')"),
    (T5_SMALL, "T5ForConditionalGeneration is an encoder-decoder model ('is_encoder_decoder': true)"),
    ({**T5_SMALL, "is_encoder_decoder": None, "architectures": None},
     "model_type 't5' is an encoder-decoder model ('model_type': 't5')"),
    (dict(LLAMA, model_type="my_encoder", architectures=["MyEncoderForMaskedLM"]),
     "MyEncoderForMaskedLM is an encoder-only model ('architectures')"),
    ({"model_type": "llava", "text_config": BERT_BASE}, "BertForMaskedLM is an encoder-only"),
    (dict(LLAMA, model_type="opt"), "'model_type' 'opt' (ReLU 2-matrix MLP"),
])
def test_refused_with_reason(tmp_path, cfg, needle):
    with pytest.raises(InputError) as e:
        _load(tmp_path, cfg)
    msg = str(e.value)
    assert needle in msg and "\n" not in msg and e.value.exit_code == 1
    assert "--params" in msg


@pytest.mark.parametrize("cfg,needle", [(BERT_BASE, "encoder-only"), (T5_SMALL, "encoder-decoder")])
def test_cli_refuses_encoders_in_one_line(tmp_path, cfg, needle):
    d = _write(tmp_path, cfg, "enc")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    p = subprocess.run([sys.executable, "-m", "autoplace", "estimate", "--model", str(d), "--gpus", "8"],
                       capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    assert p.returncode == 1, (p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in p.stderr
    assert "autoplace plans decoder-only LM training" in lines[0]


# ---- the CLI runs every new family ---------------------------------------------------------------
@pytest.mark.parametrize("cfg", [pytest.param(c[1], id=c[0]) for c in EXACT] + [
    pytest.param(PHI2, id="phi-2")])
def test_cli_estimate_runs(tmp_path, cfg):
    r = CliRunner().invoke(app, ["estimate", "--model", str(_write(tmp_path, cfg)), "--gpus", "8",
                                 "--json"])
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    assert r.exit_code in (0, 2, 3), r.output
    doc = json.loads(r.stdout)
    spec = load_hf_config(_write(tmp_path, cfg))
    assert doc["training"]["seq_len"] == (spec.pretrain_seq_len or min(spec.max_seq_len, 4096))


# ---- presets agree with the configs ---------------------------------------------------------------
PRESET_OF = [("deepseek-v3", DSV3), ("kimi-k2", KIMI), ("qwen3-235b-a22b", QWEN3_235B),
             ("gpt-oss-120b", GPT_OSS_120B), ("gpt-oss-20b", GPT_OSS_20B),
             ("mixtral-8x22b", MIXTRAL_8X22B), ("gemma2-9b", GEMMA2_9B), ("gemma3-27b", GEMMA3_27B),
             ("nemotron4-15b", NEMOTRON4_15B)]
_SAME = ("layers", "hidden", "heads", "a_kv", "d_head", "vocab", "ffn_hidden", "gated_mlp", "act",
         "tied_embeddings", "attn_bias", "mlp_bias", "qkv_bias", "qk_norm", "norm", "norms_per_layer",
         "num_experts", "top_k", "f_expert", "shared_expert_ffn_hidden", "dense_layer_ids",
         "q_lora_rank", "kv_lora_rank", "d_qk", "d_v", "sliding_window", "global_every",
         "attn_sinks", "expert_bias", "mtp_layers", "max_seq_len", "pretrain_seq_len")


@pytest.mark.parametrize("key,cfg", PRESET_OF, ids=[k for k, _ in PRESET_OF])
def test_preset_equals_its_config(tmp_path, key, cfg):
    p, s = PRESETS[key], _load(tmp_path, cfg)
    for f in _SAME:
        assert getattr(p, f) == getattr(s, f), f
    assert p.total_params() == s.total_params() and p.active_params() == s.active_params()


NEW_PRESETS = {
    "deepseek-v3": (671_026_404_352, 37_552_282_624), "kimi-k2": (1_026_408_209_408, 32_861_477_888),
    "qwen3-30b-a3b": (30_532_122_624, 3_353_032_704),
    "qwen3-235b-a22b": (235_093_634_560, 22_190_763_520),
    "gpt-oss-120b": (116_829_156_672, 5_711_982_912), "gpt-oss-20b": (20_914_757_184, 4_187_440_704),
    "mixtral-8x22b": (140_620_634_112, 39_152_031_744),
    "nemotron4-15b": (15_628_775_424, 15_628_775_424),
    "nemotron4-340b": (341_029_195_776, 341_029_195_776),
    "gemma2-9b": (9_241_705_984, 9_241_705_984), "gemma3-27b": (27_009_346_304, 27_009_346_304),
}


@pytest.mark.parametrize("key", sorted(NEW_PRESETS))
def test_new_preset_counts(key):
    p = PRESETS[key]
    assert (p.total_params(), p.active_params()) == NEW_PRESETS[key]


def test_nemotron4_340b_report_split():
    """Nemotron-4 340B report: 9.4B embedding and 331.6B non-embedding parameters."""
    p = PRESETS["nemotron4-340b"]
    assert _billions(2 * p.embedding_params(), 1) == 9.4
    assert _billions(p.total_params() - 2 * p.embedding_params(), 1) == 331.6


def test_preset_aliases_and_pretrain_lengths():
    assert get_preset("dsv3") is PRESETS["deepseek-v3"] and get_preset("DeepSeek-V3-671B") is get_preset("dsv3")
    assert get_preset("llama3.1-405b") is PRESETS["llama3-405b"]
    assert get_preset("llama3.1-8b") is PRESETS["llama3-8b"] and get_preset("llama3.1-70b") is PRESETS["llama3-70b"]
    lengths = {k: PRESETS[k].pretrain_seq_len for k in ("7b", "llama3-8b", "llama3-405b", "mixtral-8x7b",
                                                         "gpt3-175b", "deepseek-v3", "gemma3-27b")}
    assert lengths == {"7b": 4096, "llama3-8b": 8192, "llama3-405b": 8192, "mixtral-8x7b": 32768,
                       "gpt3-175b": 2048, "deepseek-v3": 4096, "gemma3-27b": 32768}
    assert PRESETS["gpt3-175b"].vocab == 50257            # GPT-2 BPE, as published (Brown et al.)
