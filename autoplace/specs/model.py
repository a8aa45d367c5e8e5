"""Model specification: transformer shape and exact parameter counts.

A `ModelSpec` is frozen; every derived number (parameter counts per class, per layer, per stage) is a
method of it, so nothing cached can go stale. Counting follows the module structure of Megatron-LM /
Hugging Face decoders: embeddings, optional learned positions, per-layer attention (GQA-aware),
MLP (GeLU 2-matrix or SwiGLU 3-matrix), norms (LayerNorm weight+bias, RMSNorm weight), biases,
MoE experts + router, final norm, and an output projection unless tied.

For Megatron's GPT (learned positions, biases, LayerNorm, 4h GeLU MLP) the count equals Narayanan et al.
2021 Eq. (2): P = 12·l·h²·(1 + 13/(12h) + (V + s)/(12·l·h)) plus the final LayerNorm (2h).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from autoplace.errors import InputError
from autoplace.safe import MAX_WIDTH, short_number


@dataclass(frozen=True)
class ModelSpec:
    name: str
    layers: int
    hidden: int
    heads: int
    vocab: int
    ffn_hidden: int
    kv_heads: int | None = None          # None → heads (MHA); 1 → MQA
    head_dim: int | None = None          # None → hidden // heads
    gated_mlp: bool = True               # SwiGLU (3 matrices) vs GeLU (2 matrices)
    tied_embeddings: bool = False
    attn_bias: bool = False              # biases on QKV and output projection
    mlp_bias: bool = False               # biases on MLP matrices
    norm: str = "rmsnorm"                # "rmsnorm" (weight) | "layernorm" (weight + bias)
    position: str = "rope"               # "rope" (no parameters) | "learned" (max_seq_len × hidden)
    max_seq_len: int = 4096
    pretrain_seq_len: int = 0             # sequence length the family was pre-trained at (Llama 3: 8192), the CLI's
                                          # default --seq-len; 0 → min(max_seq_len, 4096)
    # Mixture of experts (num_experts == 0 → dense model)
    num_experts: int = 0
    top_k: int = 1
    expert_ffn_hidden: int | None = None  # None → ffn_hidden
    moe_layer_freq: int = 1               # every k-th layer is MoE (1 = all layers)
    shared_expert_ffn_hidden: int = 0     # always-on shared expert width (Qwen-MoE / DeepSeek style)
    shared_expert_gate: bool = False      # Qwen2-MoE: sigmoid gate Linear(hidden, 1, bias=False)
    dense_layer_ids: tuple = ()           # 0-based layers kept dense in an MoE model
    qkv_bias: bool = False                # biases on Q, K, V only (Qwen2); attn_bias = Q, K, V and O
    qk_norm: bool = False                 # per-head norm on Q and K (Qwen3): two head_dim-sized norms
    activation: str = ""                  # MLP activation: silu | gelu | relu2 (squared ReLU) | relu; "" →
                                          # silu when gated (SwiGLU), gelu otherwise (GeGLU = gelu + gated)
    # Multi-head latent attention (DeepSeek-V2/V3, Kimi K2): kv_lora_rank > 0 switches it on
    q_lora_rank: int = 0                  # query down-projection rank (0: a full-rank Q projection)
    kv_lora_rank: int = 0                 # compressed K/V latent width
    qk_nope_head_dim: int = 0             # per-head query/key width without rotary
    qk_rope_head_dim: int = 0             # per-head rotary width (the rotary key is shared by all heads)
    v_head_dim: int = 0                   # per-head value width
    sliding_window: int = 0               # local attention window in tokens (0: full attention)
    global_every: int = 0                 # with a window: every k-th layer attends globally (gpt-oss 2,
                                          # Gemma 3 6); 0 → every layer windowed
    attn_sinks: bool = False              # a learned sink logit per head (gpt-oss): `heads` parameters per layer
    expert_bias: bool = False             # biases on expert and router matrices (gpt-oss)
    glu_limit: float = 0.0                # clamped GLU: gate ≤ limit, up in [−limit, limit] before the
                                          # activation (gpt-oss `swiglu_limit` 7.0); 0: no clamp
    mtp_layers: int = 0                   # multi-token-prediction modules (DeepSeek-V3: 1): one more
                                          # transformer layer + projection + norms each, sharing embedding and head
    norms_per_layer: int = 2
    """Norm modules per transformer layer, each `norm_params()` large: 2 in pre-norm decoders (before
    attention and before the MLP); 4 in Gemma 2/3 (pre- and post-norms around both blocks:
    input/post_attention/pre_feedforward/post_feedforward_layernorm); 1 in Phi-2 (one LayerNorm
    feeding the parallel attention and MLP). Q/K norms are `qk_norm`, MLA latent norms are in
    `attn_params`."""
    rope_theta: float = 10000.0
    """RoPE base θ (HF `rope_theta`; Megatron `--rotary-base`). No effect on counts or cost."""
    rope_mscale: float = 1.0
    """YaRN attention factor scaling cos/sin (Peng et al. 2023 §3.4): 0.1·ln(factor) + 1 when the
    config gives no mscale (gpt-oss: factor 32 → 1.347), mscale/mscale_all_dim ratio otherwise
    (DeepSeek-V3, Kimi K2: 1). Not 1: Megatron-Core's fused RoPE (TE) cannot apply it and the
    runtime's unfused RoPE runs (`Kernels.rope_unfused_passes`)."""
    # A bare parameter count (`--params`): model-states-only analysis, no shape.
    params_override: int | None = None
    largest_unit_override: int | None = None  # Ψ_max for a bare parameter count (DeepSpeed estimators)
    source: str = "preset"
    analogy: str = ""
    """Non-empty when the model was read by analogy with another family (an unknown HF model_type
    read with Llama's field names and modules): what was assumed, shown in the search header and
    in --json."""

    def __post_init__(self) -> None:
        from autoplace import safe
        safe.check_name(self.name, "model.name")
        for f, hi in (("layers", safe.MAX_LAYERS), ("hidden", safe.MAX_WIDTH), ("heads", safe.MAX_WIDTH),
                      ("vocab", safe.MAX_VOCAB), ("ffn_hidden", safe.MAX_WIDTH)):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InputError(f"model.{f} must be a positive integer, got {safe.one_line(repr(v), 40)}")
            if v > hi:
                raise InputError(f"model.{f} must be ≤ {hi:,}, got {safe.short_number(v)}; check the config")
        for f in ("kv_heads", "head_dim", "top_k"):
            v = getattr(self, f)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_WIDTH):
                raise InputError(f"model.{f} must be an integer in 0..{MAX_WIDTH:,}, got {v!r}")
        v = self.params_override
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 0 < v <= 10**16):
            raise InputError(f"model.params_override must be a parameter count in 1..1e16, got {v!r}")
        if self.kv_heads is not None and (self.kv_heads < 1 or self.heads % self.kv_heads):
            raise InputError(
                f"model.kv_heads={self.kv_heads} must divide heads={self.heads} (GQA groups)")
        if self.head_dim is None and self.hidden % self.heads:
            raise InputError(
                f"model.hidden={self.hidden} is not divisible by heads={self.heads}; set head_dim")
        if self.norm not in ("rmsnorm", "layernorm"):
            raise InputError(f"model.norm must be 'rmsnorm' or 'layernorm', got {self.norm!r}")
        if self.position not in ("rope", "learned", "none"):
            raise InputError(f"model.position must be 'rope', 'learned' or 'none', got {self.position!r}")
        if any(not 0 <= i < self.layers for i in self.dense_layer_ids):
            raise InputError(f"model.dense_layer_ids must be in 0..{self.layers - 1}")
        if self.num_experts and (self.top_k < 1 or self.top_k > self.num_experts):
            raise InputError(f"model.top_k={self.top_k} must be in 1..num_experts={self.num_experts}")
        if self.activation not in ("", "silu", "gelu", "relu2", "relu"):
            raise InputError(f"model.activation must be silu, gelu, relu2 or relu, got {self.activation!r}")
        if self.kv_lora_rank and not (self.qk_nope_head_dim and self.v_head_dim):
            raise InputError("model: multi-head latent attention (kv_lora_rank > 0) needs qk_nope_head_dim "
                             "and v_head_dim")
        self._check_fields()

    def _check_fields(self) -> None:
        """The newer fields fit each other: counts are whole and non-negative, and no field is set
        that only means something together with another one left unset."""
        for f in ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
                  "sliding_window", "global_every", "mtp_layers", "pretrain_seq_len", "num_experts",
                  "shared_expert_ffn_hidden", "norms_per_layer"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise InputError(f"model.{f} must be a non-negative integer, got {v!r}")
            if v > MAX_WIDTH:
                raise InputError(f"model.{f} must be ≤ {MAX_WIDTH:,}, got {short_number(v)}; check the config")
        if isinstance(self.moe_layer_freq, bool) or not isinstance(self.moe_layer_freq, int) \
                or self.moe_layer_freq < 1:
            raise InputError(f"model.moe_layer_freq must be a positive integer, got {self.moe_layer_freq!r}")
        mla_dims = [f for f in ("q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
                    if getattr(self, f)]
        if mla_dims and not self.kv_lora_rank:
            raise InputError(f"model.{mla_dims[0]} is a multi-head latent attention width; set "
                             "kv_lora_rank > 0 (MLA) or leave it 0")
        if isinstance(self.rope_mscale, bool) or not isinstance(self.rope_mscale, (int, float)) \
                or not self.rope_mscale > 0:
            raise InputError(f"model.rope_mscale must be a positive number (1: no YaRN scale), got {self.rope_mscale!r}")
        if isinstance(self.glu_limit, bool) or not isinstance(self.glu_limit, (int, float)) \
                or not self.glu_limit >= 0:
            raise InputError(f"model.glu_limit must be a non-negative number (0: no clamp), got {self.glu_limit!r}")
        if self.glu_limit and not self.gated_mlp:
            raise InputError(f"model.glu_limit={self.glu_limit} clamps a gated MLP's gate and up "
                             "projections; set gated_mlp=true or glu_limit=0")
        if self.global_every and not self.sliding_window:
            raise InputError(f"model.global_every={self.global_every} needs sliding_window > 0 "
                             "(the window of the other layers)")
        if self.global_every == 1:
            raise InputError("model.global_every=1 would make every layer global; set sliding_window=0 "
                             "instead")

    # ---- derived shape -------------------------------------------------------------------------
    @property
    def a_kv(self) -> int:
        return self.kv_heads or self.heads

    @property
    def d_head(self) -> int:
        return self.head_dim or self.hidden // self.heads

    @property
    def mla(self) -> bool:
        """Multi-head latent attention (DeepSeek-V2/V3)."""
        return self.kv_lora_rank > 0

    @property
    def d_qk(self) -> int:
        """Per-head width of the query·key product (MLA: nope + rope)."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim if self.mla else self.d_head

    @property
    def d_v(self) -> int:
        """Per-head value width."""
        return self.v_head_dim if self.mla else self.d_head

    @property
    def q_width(self) -> int:
        """Query features of all heads (the attention output is heads · d_v)."""
        return self.heads * self.d_qk

    @property
    def kv_width(self) -> int:
        return self.a_kv * self.d_head

    @property
    def act(self) -> str:
        return self.activation or ("silu" if self.gated_mlp else "gelu")

    @property
    def windowed_share(self) -> float:
        """Share of layers whose attention is local (sliding window)."""
        if not self.sliding_window:
            return 0.0
        return 1.0 - 1.0 / self.global_every if self.global_every else 1.0

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def f_expert(self) -> int:
        return self.expert_ffn_hidden or self.ffn_hidden

    @property
    def n_moe_layers(self) -> int:
        if not self.is_moe:
            return 0
        dense = set(self.dense_layer_ids)
        return sum(1 for i in range(self.layers)
                   if i not in dense and (i + 1) % self.moe_layer_freq == 0)

    @property
    def n_dense_layers(self) -> int:
        return self.layers - self.n_moe_layers

    @property
    def states_only(self) -> bool:
        return self.params_override is not None

    # ---- parameter counts (elements) ----------------------------------------------------------
    def norm_params(self) -> int:
        return (2 if self.norm == "layernorm" else 1) * self.hidden

    def attn_linears(self) -> list[tuple[str, int, int, str]]:
        """The attention block's weight matrices in execution order: (name, in, out, tp split).

        split "col" divides the output features over TP, "row" the input features, "dup" keeps the
        matrix whole on every TP rank (MLA down-projections, Megatron `parallel_mode="duplicated"`).
        Standard attention: fused QKV (GQA-aware) and the output projection. MLA (DeepSeek-V3 §2.1):
        q_down h→r_q, q_up r_q→H·(d_nope + d_rope) (or one h→H·d_qk matrix without r_q), kv_down
        h→r_kv + d_rope (the shared rotary key), kv_up r_kv→H·(d_nope + d_v), out H·d_v→h."""
        h, H = self.hidden, self.heads
        if not self.mla:
            return [("qkv", h, self.q_width + 2 * self.kv_width, "col"), ("out", self.q_width, h, "row")]
        qk = self.qk_nope_head_dim + self.qk_rope_head_dim
        q = ([("q_down", h, self.q_lora_rank, "dup"), ("q_up", self.q_lora_rank, H * qk, "col")]
             if self.q_lora_rank else [("q", h, H * qk, "col")])
        return q + [("kv_down", h, self.kv_lora_rank + self.qk_rope_head_dim, "dup"),
                    ("kv_up", self.kv_lora_rank, H * (self.qk_nope_head_dim + self.v_head_dim), "col"),
                    ("out", H * self.v_head_dim, h, "row")]

    def attn_params(self) -> int:
        """Attention weights (+ biases, MLA latent norms, sinks), GQA- and MLA-aware."""
        h, q, kv = self.hidden, self.q_width, self.kv_width
        n = sum(k * o for _, k, o, _ in self.attn_linears())
        if self.mla:
            n += (self.q_lora_rank + self.kv_lora_rank) * (2 if self.norm == "layernorm" else 1)
        elif self.attn_bias:
            n += q + 2 * kv + h
        elif self.qkv_bias:
            n += q + 2 * kv
        if self.attn_sinks:
            n += self.heads
        return n

    def qk_norm_params(self) -> int:
        return 2 * (2 if self.norm == "layernorm" else 1) * self.d_head if self.qk_norm else 0

    def mlp_params(self, width: int | None = None, bias: bool | None = None) -> int:
        f = self.ffn_hidden if width is None else width
        h = self.hidden
        bias = self.mlp_bias if bias is None else bias
        if self.gated_mlp:
            n = 3 * h * f
            if bias:
                n += 2 * f + h
        else:
            n = 2 * h * f
            if bias:
                n += f + h
        return n

    def expert_params_per_layer(self) -> int:
        """Routed expert weights of one MoE layer (all experts)."""
        return self.num_experts * self.mlp_params(self.f_expert, bias=self.expert_bias or self.mlp_bias)

    def moe_dense_params_per_layer(self) -> int:
        """Non-expert weights inside an MoE layer's MLP block: router + shared expert."""
        n = self.hidden * self.num_experts + (self.num_experts if self.expert_bias else 0)
        if self.shared_expert_ffn_hidden:
            n += self.mlp_params(self.shared_expert_ffn_hidden)
            if self.shared_expert_gate:
                n += self.hidden
        return n

    def layer_dense_params(self, moe_layer: bool = False) -> int:
        """Dense (non-expert) parameters of one transformer layer."""
        mlp = self.moe_dense_params_per_layer() if moe_layer else self.mlp_params()
        return self.attn_params() + self.qk_norm_params() + mlp + self.norms_per_layer * self.norm_params()

    def embedding_params(self, vocab: int | None = None) -> int:
        v = self.vocab if vocab is None else vocab
        return v * self.hidden

    def position_params(self) -> int:
        return self.max_seq_len * self.hidden if self.position == "learned" else 0

    def output_params(self, vocab: int | None = None) -> int:
        """Output projection counted once for the model (0 if tied)."""
        return 0 if self.tied_embeddings else self.embedding_params(vocab)

    def expert_params(self) -> int:
        return self.n_moe_layers * self.expert_params_per_layer()

    def mtp_params(self) -> int:
        """Multi-token-prediction modules (DeepSeek-V3 §2.2): per module two input norms, the
        2h→h projection, one transformer layer (MoE when the model is) and a final norm; the
        embedding and output head are shared with the main model (not counted again)."""
        if not self.mtp_layers:
            return 0
        layer = self.layer_dense_params(self.is_moe) + (self.expert_params_per_layer() if self.is_moe else 0)
        return self.mtp_layers * (3 * self.norm_params() + 2 * self.hidden * self.hidden + layer)

    def dense_params(self, vocab: int | None = None) -> int:
        """All non-expert parameters (embedding, positions, layers, final norm, output)."""
        return (self.embedding_params(vocab) + self.position_params()
                + self.n_dense_layers * self.layer_dense_params(False)
                + self.n_moe_layers * self.layer_dense_params(True)
                + self.norm_params() + self.output_params(vocab))

    def total_params(self, vocab: int | None = None) -> int:
        """All parameters of the main model (MTP modules excluded: `mtp_params`)."""
        if self.params_override is not None:
            return int(self.params_override)
        return self.dense_params(vocab) + self.expert_params()

    def active_params(self) -> int:
        """Parameters touched per token (top-k experts of each MoE layer)."""
        if not self.is_moe:
            return self.total_params()
        per_expert = self.mlp_params(self.f_expert, bias=self.expert_bias or self.mlp_bias)
        return self.dense_params() + self.n_moe_layers * self.top_k * per_expert

    def largest_unit_params(self) -> int:
        """Ψ_max: the largest FSDP unit (a layer, or the embedding table)."""
        if self.states_only:
            return int(self.largest_unit_override or 0)
        layer = max(self.layer_dense_params(False) if self.n_dense_layers else 0,
                    (self.layer_dense_params(True) + self.expert_params_per_layer())
                    if self.n_moe_layers else 0)
        return max(layer, self.embedding_params())

    def with_(self, **kw) -> "ModelSpec":
        return replace(self, **kw)


def params_only(count: float, name: str | None = None, largest_unit: float | None = None) -> ModelSpec:
    """A model known only by its parameter count (ZeRO-paper accounting); `largest_unit` = Ψ_max."""
    n = int(round(float(count)))
    if n < 1:
        raise InputError(f"--params must be a positive number, got {count!r}")
    if largest_unit is not None and not 0 <= float(largest_unit) <= n:
        raise InputError(f"--largest-layer must be between 0 and --params, got {largest_unit!r}")
    # A nominal shape keeps the dataclass valid; only params_override is used downstream.
    return ModelSpec(name=name or f"{n / 1e9:g}B-params", layers=1, hidden=1, heads=1, vocab=1,
                     ffn_hidden=1, params_override=n, source="--params",
                     largest_unit_override=int(round(float(largest_unit))) if largest_unit else None)


def padded_vocab(vocab: int, tp: int, divisible_by: int = 128):
    """Megatron pads V up to a multiple of divisible_by·t (`--make-vocab-size-divisible-by`).

    numpy-broadcastable over `tp`.
    """
    import numpy as np
    m = divisible_by * np.asarray(tp)
    return (-(-vocab // m)) * m
