"""Llama 4 read as its modeling code builds it; hybrid state-space / linear-attention models refused
with the reason (never priced as attention); an unknown model_type read by analogy says so (header
and --json) and is refused when a field the analogy needs is absent.

Configs are written from the published config.json files (fields that count; long arrays dropped):
meta-llama/Llama-4-Scout-17B-16E and meta-llama/Llama-4-Maverick-17B-128E (Hugging Face), whose
model cards give 17B active / 109B total (Scout) and 17B active / 400B total (Maverick), totals that
include the vision encoder; ai21labs/AI21-Jamba-1.5-Mini, ibm-granite/granite-4.0-h-small,
tiiuae/Falcon-H1-7B-Base, Qwen/Qwen3-Next-80B-A3B-Instruct, tiiuae/falcon-mamba-7b.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from autoplace.cli import app
from autoplace.errors import InputError
from autoplace.specs.hf_config import load_hf_config

runner = CliRunner()

_L4_TEXT = {"model_type": "llama4_text", "hidden_size": 5120, "intermediate_size": 8192,
            "intermediate_size_mlp": 16384, "num_hidden_layers": 48, "num_attention_heads": 40,
            "num_key_value_heads": 8, "head_dim": 128, "hidden_act": "silu", "vocab_size": 202048,
            "num_experts_per_tok": 1, "attention_chunk_size": 8192, "rope_theta": 500000.0,
            "tie_word_embeddings": False, "rms_norm_eps": 1e-05}
# Llama4VisionConfig of both checkpoints: 34 layers of width 1408, MLP 5632 (non-gated GELU, biases),
# patch 14 on 336 px; adapter MLP 4096 → 4096 → 4096 (pixel-shuffled 1408·4 = 5632 in); projector 4096 → 5120.
_VISION = {"hidden_size": 1408, "intermediate_size": 5632, "num_hidden_layers": 34, "num_attention_heads": 16,
           "image_size": 336, "patch_size": 14, "projector_input_dim": 4096, "projector_output_dim": 4096,
           "vision_output_dim": 4096, "pixel_shuffle_ratio": 0.5}
SCOUT = {"architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4",
         "text_config": dict(_L4_TEXT, num_local_experts=16, interleave_moe_layer_step=1,
                             max_position_embeddings=10485760, use_qk_norm=True,
                             rope_scaling={"factor": 16.0, "high_freq_factor": 1.0, "low_freq_factor": 1.0,
                                           "original_max_position_embeddings": 8192, "rope_type": "llama3"}),
         "vision_config": _VISION}
MAVERICK = {"architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4",
            "text_config": dict(_L4_TEXT, num_local_experts=128, interleave_moe_layer_step=2,
                                max_position_embeddings=1048576, use_qk_norm=False, rope_scaling=None),
            "vision_config": _VISION}


def _vision_params(v: dict) -> int:
    """Llama4VisionModel + Llama4MultiModalProjector parameters (transformers modeling_llama4):
    patch conv (no bias), class embedding, positional embedding, pre/post LayerNorms, per layer
    (q, k, v, o with biases, fc1/fc2 with biases, 2 LayerNorms), the vision adapter MLP (no biases)
    and the projector (no bias)."""
    h, f, L, p = v["hidden_size"], v["intermediate_size"], v["num_hidden_layers"], v["patch_size"]
    n_pos = (v["image_size"] // p) ** 2 + 1
    emb = 3 * p * p * h + h + n_pos * h + 2 * 2 * h
    layer = 4 * (h * h + h) + (h * f + f) + (f * h + h) + 2 * 2 * h
    shuffled = int(h / v["pixel_shuffle_ratio"] ** 2)
    adapter = shuffled * v["projector_input_dim"] + v["projector_input_dim"] * v["projector_output_dim"]
    return emb + L * layer + adapter + v["vision_output_dim"] * 5120


def _write(tmp_path, name, cfg):
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    return d / "config.json"


@pytest.mark.parametrize("cfg,total,active,moe_layers", [(SCOUT, 109e9, 17e9, 48), (MAVERICK, 400e9, 17e9, 24)])
def test_llama4_counts_within_one_percent_of_the_cards(tmp_path, cfg, total, active, moe_layers):
    m = load_hf_config(_write(tmp_path, f"l4-{moe_layers}", cfg))
    assert m.n_moe_layers == moe_layers and m.shared_expert_ffn_hidden == 8192 and m.ffn_hidden == 16384
    assert not m.analogy
    # the cards' totals include the vision encoder, which autoplace does not train-count
    assert abs(m.total_params() + _vision_params(cfg["vision_config"]) - total) / total < 0.01
    assert abs(m.active_params() - active) / active < 0.02
    # hand count of the text decoder: attention 2·h·(40+8)·128, expert/shared 3·h·8192, dense MLP 3·h·16384
    h = 5120
    attn = h * 40 * 128 * 2 + h * 8 * 128 * 2
    ex, dense = 3 * h * 8192, 3 * h * 16384
    E = cfg["text_config"]["num_local_experts"]
    per_moe = attn + (E + 1) * ex + h * E + 2 * h
    per_dense = attn + dense + 2 * h
    want = moe_layers * per_moe + (48 - moe_layers) * per_dense + 2 * 202048 * h + h
    assert m.total_params() == want
    if cfg is MAVERICK:     # MoE on the odd layers (interleave_moe_layer_step 2)
        assert m.dense_layer_ids == tuple(range(0, 48, 2))
    assert "chunked attention" in m.source


HYBRIDS = {
    "jamba": {"model_type": "jamba", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
              "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 65536, "attn_layer_period": 8,
              "attn_layer_offset": 4, "mamba_d_state": 16, "mamba_d_conv": 4, "mamba_expand": 2,
              "num_experts": 16, "num_experts_per_tok": 2},
    "granitemoehybrid": {"model_type": "granitemoehybrid", "hidden_size": 4096, "num_hidden_layers": 40,
                         "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 100352,
                         "mamba_d_state": 128, "mamba_n_heads": 128, "layer_types": ["mamba"] * 9 + ["attention"]},
    "falcon_h1": {"model_type": "falcon_h1", "hidden_size": 3072, "num_hidden_layers": 44, "num_attention_heads": 12,
                  "num_key_value_heads": 2, "vocab_size": 130049, "mamba_d_state": 256, "mamba_n_heads": 24},
    "qwen3_next": {"model_type": "qwen3_next", "hidden_size": 2048, "num_hidden_layers": 48,
                   "num_attention_heads": 16, "num_key_value_heads": 2, "vocab_size": 151936,
                   "linear_num_value_heads": 32, "linear_key_head_dim": 128, "full_attention_interval": 4},
    "falcon_mamba": {"model_type": "falcon_mamba", "hidden_size": 4096, "num_hidden_layers": 64,
                     "vocab_size": 65024, "state_size": 16, "conv_kernel": 4, "expand": 16},
}


@pytest.mark.parametrize("name", sorted(HYBRIDS))
def test_hybrid_state_space_models_are_refused_with_the_reason(tmp_path, name):
    with pytest.raises(InputError) as e:
        load_hf_config(_write(tmp_path, name, HYBRIDS[name]))
    msg = str(e.value)
    assert "\n" not in msg and "num_attention_heads" not in msg.split(";")[-1]
    assert any(w in msg for w in ("state-space", "Mamba", "linear attention", "Gated-DeltaNet"))
    assert "--params" in msg


def test_unknown_hybrid_by_its_fields(tmp_path):
    cfg = {"model_type": "acme_hybrid", "hidden_size": 1024, "num_hidden_layers": 8, "num_attention_heads": 8,
           "intermediate_size": 4096, "vocab_size": 32000, "layer_types": ["mamba2", "attention"] * 4}
    with pytest.raises(InputError, match="state-space / linear-attention layers"):
        load_hf_config(_write(tmp_path, "h", cfg))


def test_unknown_model_type_is_read_by_analogy_and_says_so(tmp_path):
    cfg = {"model_type": "acme", "hidden_size": 1024, "num_hidden_layers": 4, "num_attention_heads": 8,
           "intermediate_size": 2816, "vocab_size": 32000, "max_position_embeddings": 4096}
    f = _write(tmp_path, "acme", cfg)
    m = load_hf_config(f)
    assert "read by analogy with Llama" in m.analogy
    r = runner.invoke(app, ["search", "-m", str(f), "-n", "8", "--top-k", "1", "-l", "megatron"])
    assert r.exit_code == 0, r.output
    assert "read by analogy with Llama" in " ".join(r.output.split())
    r = runner.invoke(app, ["estimate", "-m", str(f), "-n", "8", "--plan", "zero=1,mbs=1", "--json",
                            "--global-batch", "8"])
    assert "read by analogy with Llama" in json.loads(r.stdout)["model"]["analogy"]
    del cfg["intermediate_size"]
    with pytest.raises(InputError, match="missing 'intermediate_size'.*read by analogy with Llama"):
        load_hf_config(_write(tmp_path, "acme2", cfg))
