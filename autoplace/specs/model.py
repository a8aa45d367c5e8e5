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
    rope_theta: float = 10000.0
    """RoPE base θ (HF `rope_theta`; Megatron `--rotary-base`). No effect on counts or cost."""
    activation: str = ""
    """MLP activation: silu, gelu, relu2, relu ('' → silu when gated_mlp, else gelu)."""
    pretrain_seq_len: int = 0
    """Sequence length of the family's pre-training (0 → unknown; the CLI then defaults to
    min(max_seq_len, 4096) and says so)."""
    # A bare parameter count (`--params`): model-states-only analysis, no shape.
    params_override: int | None = None
    largest_unit_override: int | None = None  # Ψ_max for a bare parameter count (DeepSpeed estimators)
    source: str = "preset"

    def __post_init__(self) -> None:
        for f in ("layers", "hidden", "heads", "vocab", "ffn_hidden"):
            v = getattr(self, f)
            if not isinstance(v, int) or v < 1:
                raise InputError(f"model.{f} must be a positive integer, got {v!r}")
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

    # ---- derived shape -------------------------------------------------------------------------
    @property
    def a_kv(self) -> int:
        return self.kv_heads or self.heads

    @property
    def d_head(self) -> int:
        return self.head_dim or self.hidden // self.heads

    @property
    def q_width(self) -> int:
        return self.heads * self.d_head

    @property
    def kv_width(self) -> int:
        return self.a_kv * self.d_head

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

    def attn_params(self) -> int:
        """Q, K, V and output projections (+ biases), GQA-aware."""
        h, q, kv = self.hidden, self.q_width, self.kv_width
        n = h * q + 2 * h * kv + q * h
        if self.attn_bias:
            n += q + 2 * kv + h
        elif self.qkv_bias:
            n += q + 2 * kv
        return n

    def qk_norm_params(self) -> int:
        return 2 * (2 if self.norm == "layernorm" else 1) * self.d_head if self.qk_norm else 0

    def mlp_params(self, width: int | None = None) -> int:
        f = self.ffn_hidden if width is None else width
        h = self.hidden
        if self.gated_mlp:
            n = 3 * h * f
            if self.mlp_bias:
                n += 2 * f + h
        else:
            n = 2 * h * f
            if self.mlp_bias:
                n += f + h
        return n

    def expert_params_per_layer(self) -> int:
        """Routed expert weights of one MoE layer (all experts)."""
        return self.num_experts * self.mlp_params(self.f_expert)

    def moe_dense_params_per_layer(self) -> int:
        """Non-expert weights inside an MoE layer's MLP block: router + shared expert."""
        n = self.hidden * self.num_experts
        if self.shared_expert_ffn_hidden:
            n += self.mlp_params(self.shared_expert_ffn_hidden)
            if self.shared_expert_gate:
                n += self.hidden
        return n

    def layer_dense_params(self, moe_layer: bool = False) -> int:
        """Dense (non-expert) parameters of one transformer layer."""
        mlp = self.moe_dense_params_per_layer() if moe_layer else self.mlp_params()
        return self.attn_params() + self.qk_norm_params() + mlp + 2 * self.norm_params()

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

    def dense_params(self, vocab: int | None = None) -> int:
        """All non-expert parameters (embedding, positions, layers, final norm, output)."""
        return (self.embedding_params(vocab) + self.position_params()
                + self.n_dense_layers * self.layer_dense_params(False)
                + self.n_moe_layers * self.layer_dense_params(True)
                + self.norm_params() + self.output_params(vocab))

    def total_params(self, vocab: int | None = None) -> int:
        if self.params_override is not None:
            return int(self.params_override)
        return self.dense_params(vocab) + self.expert_params()

    def active_params(self) -> int:
        """Parameters touched per token (top-k experts of each MoE layer)."""
        if not self.is_moe:
            return self.total_params()
        per_expert = self.mlp_params(self.f_expert)
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
