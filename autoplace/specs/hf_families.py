"""What `hf_config` knows about each Hugging Face `model_type`: how its modeling code builds the decoder,
the defaults of its transformers configuration class, and its pre-training sequence length.

The family is decided by `model_type` (the key transformers itself dispatches on) and the shape by the
config's fields — never by words in the model's name. Per family:

* **Gating** (does the MLP multiply a gate branch in, i.e. 3 matrices?) is fixed by the modeling code,
  whatever the activation: every Llama-style MLP (`gate_proj`, `up_proj`, `down_proj`: Llama, Mistral,
  Mixtral, Qwen2/3 and their MoE, Gemma 1/2/3, Phi-3, DeepSeek-V2/V3, gpt-oss) is gated, so Gemma's
  `gelu_pytorch_tanh` makes a GeGLU and Llama's `silu` a SwiGLU; GPT-2 (`c_fc`, `c_proj`), GPT-NeoX
  (`dense_h_to_4h`, `dense_4h_to_h`), Nemotron (`up_proj`, `down_proj`) and Phi-1/2 (`fc1`, `fc2`) are not.

  ==============  =====  ==========  ===================  =====================================
  model_type      gated  norm        biases               other
  ==============  =====  ==========  ===================  =====================================
  llama           yes    RMSNorm     attention_bias,      head_dim
                                     mlp_bias (off)
  mistral         yes    RMSNorm     none                 sliding_window (v0.1: 4096)
  mixtral         yes    RMSNorm     none                 experts = intermediate_size wide
  qwen2           yes    RMSNorm     Q/K/V (always)
  qwen2_moe       yes    RMSNorm     Q/K/V (qkv_bias)     shared expert + sigmoid gate
  qwen3(_moe)     yes    RMSNorm     attention_bias       per-head q_norm/k_norm
  gemma           yes    RMSNorm     attention_bias       GeGLU, head_dim 256, tied
  gemma2          yes    RMSNorm     attention_bias       GeGLU, 4 norms/layer, windows 1:1
  gemma3_text     yes    RMSNorm     attention_bias       GeGLU, 4 norms/layer, q/k norm, 5:1
  phi3            yes    RMSNorm     none                 fused qkv / gate_up
  phi             no     LayerNorm   all + lm_head bias   1 norm/layer (parallel block)
  nemotron        no     LayerNorm1p attention_bias,      squared ReLU, partial rotary
                                     mlp_bias (off)
  gpt_neox        no     LayerNorm   attention_bias (on)  parallel residual
                                     + MLP always
  gpt2            no     LayerNorm   all                  learned positions, tied
  deepseek_v2/v3  yes    RMSNorm     none                 MLA, shared experts, dense first k
  kimi_k2         yes    RMSNorm     none                 DeepSeek-V3 architecture
  gpt_oss         yes    RMSNorm     attention + experts  clamped SwiGLU, sinks, windows 1:1
                                     + router
  olmo2           yes    RMSNorm     attention_bias       post-norms, q/k norm over all heads
  ==============  =====  ==========  ===================  =====================================

* **Defaults**: transformers writes a config.json field only when it differs from the config class'
  default (nested `text_config`s are diffed against their own class), so an omitted field means the
  class default. `defaults` copies those of `src/transformers/models/<family>/configuration_<family>.py`
  (huggingface/transformers); a field missing from both is an error naming it.
* **Pre-training length** (`ModelSpec.pretrain_seq_len`, the CLI's default --seq-len): the config's
  `rope_scaling`/`rope_parameters.original_max_position_embeddings` when a long-context extension
  recorded it (Llama 3.1, DeepSeek-V2/V3, Kimi K2, gpt-oss, Phi-3 128k), else `pretrain` below with its
  source; 0 where no source gives one (the CLI then takes min(max_position_embeddings, 4096)).
"""

from __future__ import annotations

from dataclasses import dataclass, field

_TF = "huggingface/transformers src/transformers/models/{0}/configuration_{0}.py"

# hidden_act / hidden_activation / activation_function (transformers ACT2FN names) → ModelSpec.activation
ACTIVATIONS = {
    "silu": "silu", "swish": "silu", "swiglu": "silu",
    "gelu": "gelu", "gelu_new": "gelu", "gelu_fast": "gelu", "gelu_pytorch_tanh": "gelu",
    "gelu_python": "gelu", "gelu_accurate": "gelu", "quick_gelu": "gelu", "gelu_10": "gelu",
    "geglu": "gelu",
    "relu2": "relu2", "squared_relu": "relu2", "squared-relu": "relu2",
    "relu": "relu",
}
ACT_KEYS = ("hidden_activation", "hidden_act", "activation_function")

# Refused with the reason: autoplace plans decoder-only language-model training.
ENCODER_ONLY = {
    "bert", "roberta", "xlm-roberta", "xlm_roberta", "xlm-roberta-xl", "deberta", "deberta-v2",
    "electra", "distilbert", "albert", "camembert", "mpnet", "modernbert", "xlm", "ernie", "ernie_m",
    "layoutlm", "layoutlmv2", "layoutlmv3", "longformer", "big_bird", "funnel", "squeezebert",
    "mobilebert", "megatron-bert", "nomic_bert", "esm", "canine", "convbert", "ibert", "luke",
    "rembert", "roc_bert", "roformer", "nezha", "data2vec-text", "xmod", "splinter", "yoso",
    "nystromformer", "mra", "flaubert", "tapas", "markuplm", "bros", "lilt", "jina_bert",
}
ENCODER_DECODER = {
    "t5", "mt5", "umt5", "longt5", "t5gemma", "switch_transformers", "bart", "mbart", "pegasus",
    "pegasus_x", "marian", "led", "blenderbot", "blenderbot-small", "fsmt", "prophetnet",
    "xlm-prophetnet", "m2m_100", "nllb-moe", "plbart", "bigbird_pegasus", "encoder-decoder",
    "whisper", "speech_to_text", "seamless_m4t", "seamless_m4t_v2", "mvp", "opus_mt",
}
ENCODER_ARCH_SUFFIXES = ("ForMaskedLM", "ForPreTraining", "ForNextSentencePrediction")
# Decoders whose module layout autoplace does not count (reading them with Llama names would be wrong).
UNSUPPORTED_DECODERS = {
    "opt": "ReLU 2-matrix MLP and learned positions offset by 2",
    "bloom": "ALiBi attention and an embedding LayerNorm",
    "falcon": "fused multi-query attention layouts of its own",
    "gptj": "a parallel block with one LayerNorm and a biased output head",
    "codegen": "a GPT-J-style parallel block",
    "gpt_bigcode": "multi-query attention with learned positions",
    "gpt_neo": "alternating local/global attention with learned positions",
    "mpt": "ALiBi attention",
    "mamba": "a state-space model, not a transformer",
    "mamba2": "a state-space model, not a transformer",
    "falcon_mamba": "a Mamba state-space model (Falcon-Mamba), not a transformer",
    "rwkv": "a recurrent model, not a transformer",
}
# Hybrid state-space / linear-attention decoders: their Mamba / Mamba-2 / Gated-DeltaNet layers have
# their own cost, memory (a recurrent state, no KV cache) and parallelism rules, which autoplace does
# not model; pricing them as attention layers would be wrong, so they are refused with the reason.
HYBRID_DECODERS = {
    "jamba": "Jamba interleaves Mamba state-space layers with attention (1 attention layer in 8)",
    "granitemoehybrid": "Granite-4.0-H interleaves Mamba-2 state-space layers with attention",
    "falcon_h1": "Falcon-H1 runs Mamba-2 state-space heads in parallel with attention in every layer",
    "qwen3_next": "Qwen3-Next uses Gated-DeltaNet linear attention in 3 of every 4 layers",
    "nemotron_h": "Nemotron-H interleaves Mamba-2 state-space layers with attention",
    "bamba": "Bamba interleaves Mamba-2 state-space layers with attention",
    "zamba": "Zamba is a Mamba backbone with shared attention blocks",
    "zamba2": "Zamba2 is a Mamba-2 backbone with shared attention blocks",
    "lfm2": "LFM2 interleaves short convolutions with attention",
    "recurrent_gemma": "RecurrentGemma uses RG-LRU recurrent layers",
    "minimax": "MiniMax-01 uses lightning (linear) attention in most layers",
    "plamo2": "PLaMo 2 interleaves Mamba state-space layers with attention",
}
# config.json fields that only state-space / linear-attention layers have: an unknown model_type
# carrying one is refused as a hybrid rather than read as a transformer.
HYBRID_FIELDS = ("mamba_d_state", "mamba_d_conv", "mamba_expand", "mamba_n_heads", "ssm_state_size",
                 "state_size", "attn_layer_period", "layers_block_type", "linear_num_value_heads",
                 "linear_key_head_dim", "hybrid_override_pattern", "conv_kernel", "time_step_rank")
# Multimodal wrapper model_type → the model_type its text_config defaults to (the wrapper's
# configuration class builds that sub-config when text_config has no model_type).
TEXT_OF_WRAPPER = {"gemma3": "gemma3_text", "llama4": "llama4_text", "llava": "llama", "llava_next": "llama",
                   "mistral3": "mistral", "paligemma": "gemma", "qwen2_vl": "qwen2",
                   "qwen2_5_vl": "qwen2"}


@dataclass(frozen=True)
class Family:
    """How one model_type's modeling code builds its decoder (see the module table)."""
    defaults: dict                     # config-class defaults for omitted fields (canonical HF keys)
    cite: str                          # the configuration file the defaults come from
    gated: bool = True                 # MLP multiplies a gate branch in (3 matrices)
    norm: str = "rmsnorm"              # "rmsnorm" | "layernorm" (weight + bias)
    names: str = "llama"               # field spelling: "llama" (hidden_size …) | "gpt2" (n_embd …)
    position: str = "rope"
    bias_keys: tuple = ()              # config flags the modeling code honours: attention_bias, mlp_bias
    attn_bias: bool = False            # biases on Q, K, V and O whatever the config says
    mlp_bias: bool = False             # biases on the MLP matrices whatever the config says
    qkv_bias: bool | str = False       # Q/K/V biases, no O bias (True, or the config key that switches it)
    qk_norm: bool | str = False        # per-head Q/K norms (True, or the config key that switches it)
    norms_per_layer: int = 2
    shared_gate: bool = False          # Qwen2-MoE: sigmoid gate Linear(h, 1) on the shared expert
    expert_bias: bool = False          # biases on expert and router matrices (gpt-oss)
    attn_sinks: bool = False           # a learned sink logit per head (gpt-oss)
    windows: str = "all"               # layers a sliding_window applies to without layer_types:
                                       # "all" | "alternate" (i odd → full) | "pattern" | "qwen" | "none"
    pretrain: int | str = 0            # pre-training length, or a rule: "max_pos" (= the config's
                                       # max_position_embeddings), "mistral" (8192 with a sliding
                                       # window, i.e. v0.1), "mixtral" (32768 when that is the
                                       # context), 0 (unknown)
    pretrain_cite: str = ""
    head_bias: bool = False            # an lm_head bias (Phi-1/2; not a ModelSpec field: noted)
    notes: tuple = field(default=())


_LLAMA_D = dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                num_attention_heads=32, num_key_value_heads=None, head_dim=None, hidden_act="silu",
                max_position_embeddings=2048, tie_word_embeddings=False, attention_bias=False,
                mlp_bias=False)
_MISTRAL_D = dict(vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                  num_attention_heads=32, num_key_value_heads=8, head_dim=None, hidden_act="silu",
                  max_position_embeddings=4096 * 32, tie_word_embeddings=False, sliding_window=4096)
_DSV3_D = dict(vocab_size=129280, hidden_size=7168, intermediate_size=18432, moe_intermediate_size=2048,
               num_hidden_layers=61, num_attention_heads=128, num_key_value_heads=128,
               n_shared_experts=1, n_routed_experts=256, kv_lora_rank=512, q_lora_rank=1536,
               qk_rope_head_dim=64, v_head_dim=128, qk_nope_head_dim=128, num_experts_per_tok=8,
               first_k_dense_replace=3, moe_layer_freq=1, hidden_act="silu",
               max_position_embeddings=4096, tie_word_embeddings=False, attention_bias=False,
               num_nextn_predict_layers=0)
_DS_PRE = ("DeepSeek-V3 report §4.2 (4K pre-training, YaRN to 32K/128K after); DeepSeek-V2 §3.1 "
           "likewise; the configs' rope_scaling.original_max_position_embeddings is 4096")
_QWEN_PRE = ("Qwen2 report §3.1, Qwen2.5 report §3.2, Qwen3 report §3.2: the general stage trains at "
             "4,096 tokens, a final long-context stage at 32,768")

FAMILIES: dict[str, Family] = {
    # Llama 1/2/3 base configs set max_position_embeddings to the pre-training context (2048 / 4096 /
    # 8192, Touvron et al. 2023 §2.2, Dubey et al. 2024 §3.4); 3.1+ record it in rope_scaling.
    "llama": Family(_LLAMA_D, _TF.format("llama"), bias_keys=("attention_bias", "mlp_bias"),
                    pretrain="max_pos", pretrain_cite="Llama 2 §2.2 (4k), Llama 3 §3.4.1 (8K)"),
    # v0.1 (the only one with a sliding window) trained at 8k: Mistral-7B-Instruct-v0.2 model card
    # "32k context window (vs 8k context in v0.1)"; later versions: max_position_embeddings.
    "mistral": Family(_MISTRAL_D, _TF.format("mistral"), pretrain="mistral",
                      pretrain_cite="Mistral-7B-Instruct-v0.2 card: 8k in v0.1, 32k after"),
    "mixtral": Family(dict(_MISTRAL_D, sliding_window=None, num_local_experts=8, num_experts_per_tok=2),
                      _TF.format("mixtral"), pretrain="mixtral",
                      pretrain_cite="Jiang et al. 2024 (Mixtral) §2: 8x7B trained with its 32k "
                                    "context; no length published for longer contexts (8x22B)"),
    "qwen2": Family(dict(vocab_size=151936, hidden_size=4096, intermediate_size=22016,
                         num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32,
                         hidden_act="silu", max_position_embeddings=32768, tie_word_embeddings=False,
                         use_sliding_window=False, sliding_window=4096, max_window_layers=28),
                    _TF.format("qwen2"), qkv_bias=True, windows="qwen", pretrain=4096,
                    pretrain_cite=_QWEN_PRE),
    "qwen2_moe": Family(dict(vocab_size=151936, hidden_size=2048, intermediate_size=5632,
                             num_hidden_layers=24, num_attention_heads=16, num_key_value_heads=16,
                             hidden_act="silu", max_position_embeddings=32768,
                             tie_word_embeddings=False, use_sliding_window=False, sliding_window=4096,
                             max_window_layers=28, decoder_sparse_step=1, moe_intermediate_size=1408,
                             shared_expert_intermediate_size=5632, num_experts_per_tok=4,
                             num_experts=60, mlp_only_layers=None, qkv_bias=True),
                        _TF.format("qwen2_moe"), qkv_bias="qkv_bias", shared_gate=True,
                        windows="qwen", pretrain=4096, pretrain_cite=_QWEN_PRE),
    "qwen3": Family(dict(vocab_size=151936, hidden_size=4096, intermediate_size=22016,
                         num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32,
                         head_dim=128, hidden_act="silu", max_position_embeddings=32768,
                         tie_word_embeddings=False, attention_bias=False, use_sliding_window=False,
                         sliding_window=4096, max_window_layers=28),
                    _TF.format("qwen3"), bias_keys=("attention_bias",), qk_norm=True, windows="qwen",
                    pretrain=4096, pretrain_cite=_QWEN_PRE),
    # Qwen3MoeConfig has no head_dim field: the attention takes hidden_size // num_attention_heads.
    "qwen3_moe": Family(dict(vocab_size=151936, hidden_size=2048, intermediate_size=6144,
                             num_hidden_layers=24, num_attention_heads=32, num_key_value_heads=4,
                             head_dim=None, hidden_act="silu", max_position_embeddings=32768,
                             tie_word_embeddings=False, attention_bias=False,
                             use_sliding_window=False, sliding_window=4096, decoder_sparse_step=1,
                             moe_intermediate_size=768, num_experts_per_tok=8, num_experts=128,
                             mlp_only_layers=None, max_window_layers=28),
                        _TF.format("qwen3_moe"), bias_keys=("attention_bias",), qk_norm=True,
                        windows="qwen", pretrain=4096, pretrain_cite=_QWEN_PRE),
    "gemma": Family(dict(vocab_size=256000, hidden_size=3072, intermediate_size=24576,
                         num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=16,
                         head_dim=256, hidden_act="gelu_pytorch_tanh", max_position_embeddings=8192,
                         tie_word_embeddings=True, attention_bias=False),
                    _TF.format("gemma"), bias_keys=("attention_bias",), pretrain="max_pos",
                    pretrain_cite="Gemma report §2: 8192-token context"),
    "gemma2": Family(dict(vocab_size=256000, hidden_size=2304, intermediate_size=9216,
                          num_hidden_layers=26, num_attention_heads=8, num_key_value_heads=4,
                          head_dim=256, hidden_activation="gelu_pytorch_tanh",
                          max_position_embeddings=8192, tie_word_embeddings=True,
                          attention_bias=False, sliding_window=4096, layer_types=None),
                     _TF.format("gemma2"), bias_keys=("attention_bias",), norms_per_layer=4,
                     windows="alternate", pretrain="max_pos",
                     pretrain_cite="Gemma 2 report Table 1: context length 8192"),
    # Gemma3TextConfig; sliding_window_pattern 6 (newer versions: layer_types built from it).
    "gemma3_text": Family(dict(vocab_size=262208, hidden_size=2304, intermediate_size=9216,
                               num_hidden_layers=26, num_attention_heads=8, num_key_value_heads=4,
                               head_dim=256, hidden_activation="gelu_pytorch_tanh",
                               max_position_embeddings=131072, tie_word_embeddings=True,
                               attention_bias=False, sliding_window=4096, sliding_window_pattern=6,
                               layer_types=None),
                          _TF.format("gemma3"), bias_keys=("attention_bias",), qk_norm=True,
                          norms_per_layer=4, windows="pattern", pretrain=32768,
                          pretrain_cite="Gemma 3 report §2.1: pre-trained at 32K, 4B-27B extended "
                                        "to 128K at the end of pre-training"),
    "phi3": Family(dict(vocab_size=32064, hidden_size=3072, intermediate_size=8192,
                        num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=None,
                        hidden_act="silu", max_position_embeddings=4096, tie_word_embeddings=False,
                        sliding_window=None),
                   _TF.format("phi3"), pretrain="max_pos",
                   pretrain_cite="Phi3Config original_max_position_embeddings 4096"),
    "phi": Family(dict(vocab_size=51200, hidden_size=2048, intermediate_size=8192, num_hidden_layers=24,
                       num_attention_heads=32, num_key_value_heads=None, hidden_act="gelu_new",
                       max_position_embeddings=2048, tie_word_embeddings=False, qk_layernorm=False),
                  _TF.format("phi"), gated=False, norm="layernorm", attn_bias=True, mlp_bias=True,
                  qk_norm="qk_layernorm", norms_per_layer=1, head_bias=True, pretrain="max_pos",
                  pretrain_cite="phi-1/phi-2 configs: 2048-token training context"),
    # LayerNorm1p (weight + bias, weight stored offset by 1), squared ReLU, no gate.
    "nemotron": Family(dict(vocab_size=256000, hidden_size=6144, intermediate_size=24576,
                            num_hidden_layers=32, num_attention_heads=48, head_dim=None,
                            num_key_value_heads=None, hidden_act="relu2", max_position_embeddings=4096,
                            tie_word_embeddings=False, attention_bias=False, mlp_bias=False),
                       _TF.format("nemotron"), gated=False, norm="layernorm",
                       bias_keys=("attention_bias", "mlp_bias"), pretrain="max_pos",
                       pretrain_cite="Nemotron-4 15B/340B reports: sequence length 4096"),
    "gpt_neox": Family(dict(vocab_size=50432, hidden_size=6144, num_hidden_layers=44,
                            num_attention_heads=64, intermediate_size=24576, hidden_act="gelu",
                            max_position_embeddings=2048, tie_word_embeddings=False,
                            attention_bias=True),
                       _TF.format("gpt_neox"), gated=False, norm="layernorm",
                       bias_keys=("attention_bias",), mlp_bias=True, pretrain="max_pos",
                       pretrain_cite="GPT-NeoX-20B paper §3: 2048-token sequences"),
    # GPT2Config (n_inner None → 4·n_embd); tie_word_embeddings: PretrainedConfig's True.
    "gpt2": Family(dict(vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12, n_head=12,
                        n_inner=None, activation_function="gelu_new", tie_word_embeddings=True),
                   _TF.format("gpt2"), gated=False, norm="layernorm", names="gpt2", position="learned",
                   attn_bias=True, mlp_bias=True, pretrain="max_pos",
                   pretrain_cite="GPT-2 report §2.3: context 1024"),
    # DeepSeek: the HF config classes; moe_layer_freq and num_nextn_predict_layers come from DeepSeek's
    # own configuration_deepseek.py (remote code), which the published config.json files fill in.
    "deepseek_v3": Family(_DSV3_D, _TF.format("deepseek_v3"), pretrain=4096, pretrain_cite=_DS_PRE),
    "kimi_k2": Family(_DSV3_D, "moonshotai/Kimi-K2 configuration_deepseek.py (DeepseekV3Config, "
                      "auto_map); defaults as " + _TF.format("deepseek_v3"), pretrain=4096,
                      pretrain_cite="Kimi K2 config rope_scaling.original_max_position_embeddings 4096"),
    "deepseek_v2": Family(dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008,
                               num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=None,
                               hidden_act="silu", max_position_embeddings=2048,
                               tie_word_embeddings=False, attention_bias=False,
                               first_k_dense_replace=0, kv_lora_rank=512, q_lora_rank=1536,
                               n_routed_experts=64, n_shared_experts=2, qk_nope_head_dim=128,
                               qk_rope_head_dim=64, v_head_dim=128, num_experts_per_tok=None,
                               moe_intermediate_size=1407, moe_layer_freq=1,
                               num_nextn_predict_layers=0),
                          _TF.format("deepseek_v2"), pretrain=4096, pretrain_cite=_DS_PRE),
    # Attention (Q/K/V/O) biases, expert and router biases, a sink logit per head, clamped SwiGLU
    # (swiglu_limit), sliding window 128 on even layers.
    "gpt_oss": Family(dict(num_hidden_layers=36, num_local_experts=128, vocab_size=201088,
                           hidden_size=2880, intermediate_size=2880, head_dim=64,
                           num_attention_heads=64, num_key_value_heads=8, sliding_window=128,
                           tie_word_embeddings=False, hidden_act="silu",
                           max_position_embeddings=131072, num_experts_per_tok=4, layer_types=None,
                           attention_bias=True),
                      _TF.format("gpt_oss"), bias_keys=("attention_bias",), expert_bias=True,
                      attn_sinks=True, windows="alternate", pretrain=4096,
                      pretrain_cite="gpt-oss config initial_context_length 4096 and "
                                    "rope_scaling.original_max_position_embeddings 4096 (YaRN ×32)"),
}
# Llama 4 (Llama4TextConfig): MoE layers listed by `moe_layers`, else every
# `interleave_moe_layer_step`-th layer (Scout 1: all; Maverick 2: odd layers); dense layers use
# `intermediate_size_mlp`; each MoE layer has top-k routed experts of width `intermediate_size` plus one
# always-on shared expert of the same width (Llama4TextMoe.shared_expert); the Q/K norm is a
# weightless L2 norm (no parameters); 3 of every 4 layers use chunked attention (`attention_chunk_size`)
# with RoPE, every 4th is a global NoPE layer. Parameter counts: Meta's model cards (Scout 17B active /
# 109B total, Maverick 17B / 400B, both with the vision encoder).
_LLAMA4_D = dict(vocab_size=202048, hidden_size=5120, intermediate_size=8192, intermediate_size_mlp=16384,
                 num_hidden_layers=48, num_attention_heads=40, num_key_value_heads=8, head_dim=128,
                 hidden_act="silu", max_position_embeddings=4096 * 32, tie_word_embeddings=False,
                 num_experts_per_tok=1, num_local_experts=16, moe_layers=None, interleave_moe_layer_step=1,
                 use_qk_norm=True, no_rope_layer_interval=4, attention_chunk_size=8192)
FAMILIES["llama4_text"] = Family(_LLAMA4_D, _TF.format("llama4"), pretrain=0,
                                 notes=("llama4",))
# OLMo 2 (Olmo2Config, modeling_olmo2): Llama-shaped (gated SiLU MLP, RoPE, attention_bias) with the
# norms after each block (post_attention_layernorm, post_feedforward_layernorm: still 2 per layer) and
# Q/K RMSNorms over all heads (q_norm num_heads·head_dim, k_norm num_kv_heads·head_dim wide), which
# ModelSpec counts as per-head norms (the source notes the difference). Pre-training at 4096 tokens
# (OLMo 2 report, Team OLMo 2024 §2), the configs' max_position_embeddings.
FAMILIES["olmo2"] = Family(dict(vocab_size=50304, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                                num_attention_heads=32, num_key_value_heads=None, hidden_act="silu",
                                max_position_embeddings=2048, tie_word_embeddings=False, attention_bias=False),
                           _TF.format("olmo2"), bias_keys=("attention_bias",), qk_norm=True, pretrain="max_pos",
                           pretrain_cite="OLMo 2 report §2 (4096-token pre-training)",
                           notes=("qk_norm_all_heads",))

# Unknown model_type: Llama field names and modules, no defaults; PretrainedConfig's tying default.
UNKNOWN = Family(dict(tie_word_embeddings=True), "PretrainedConfig",
                 bias_keys=("attention_bias", "mlp_bias"))
