"""`RuntimeSpec`: one training stack at one version, as data (`autoplace/runtimes/*.toml`).

A runtime is what will *run* a plan — Megatron-Core + Transformer Engine, torchtitan (eager or
compiled), PyTorch FSDP as llm-foundry drives it, DeepSpeed, accelerate, NeMo AutoModel, the
torch-native profile runner — and the one place where what that stack does is written down:

- `Kernels`: how its kernels move data (elementwise fusion, attention kernel, loss kernel, MoE
  dispatch), read by `autoplace.cost.compute` / `cost.step` as numbers, never as names;
- `MemoryBehaviour`: caching-allocator reserve, communication buffers, the activation-checkpointing
  policies it offers, read by `autoplace.cost.memory`;
- `Precision`: the dtypes and FP8/FP4 recipes it runs and whether it keeps quantized weight copies
  or all-gathers in FP8 (recipe physics: `autoplace.runtimes.recipes`);
- `Defaults`: what the stack does when the user is silent (optimizer-state regime, gradient-reduce
  dtype, distributed optimizer, overlap switches, buckets, vocabulary padding, dropout), read by the
  CLI, the record mapping and the cost model;
- `Capabilities`: which plans it can express, read by the search (a vectorized constraint), the
  exporters (refusals) and the record mapping (`autoplace.runtimes.check`).

Field docs sit under each field (torchtitan `ParallelismConfig` style); every number in a TOML
names its source in a comment next to it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields


@dataclass(frozen=True, kw_only=True)
class Kernels:
    """Kernel behaviour: HBM passes of the memory-bound work and which fused kernels exist.

    Passes count reads + writes of an element at the activation width b_A (2 B in bf16) in one
    forward; backward moves twice the forward's bytes (autograd reads the saved input and the
    incoming gradient and writes the input gradient)."""

    elementwise: str = "fused"
    """fused (hand-written kernels: TE/Apex norms, bias-SwiGLU, fused RoPE), compiled (Inductor
    fusion under torch.compile) or eager (one kernel per PyTorch op)."""
    norm_passes: float = 2.0
    """Passes per hidden element of one RMSNorm/LayerNorm forward: fused read + write = 2; eager
    torchtitan RMSNorm (x.float(), pow, mean, rsqrt·x, type_as, ·weight) ≈ 18."""
    residual_passes: float = 3.0
    """Passes per hidden element of one residual add (read two, write one)."""
    act_passes: float = 3.0
    """Passes per FFN-intermediate element of the activation: fused SwiGLU reads gate and up and
    writes one (3); GeLU 2; eager silu(gate)·up is two kernels (5)."""
    rope_passes: float = 2.0
    """Passes per Q/K element of rotary embedding: fused read + write = 2; torchtitan's complex
    RoPE (float32 view_as_complex, multiply, type_as) ≈ 10."""
    kernels_per_layer: int = 18
    """Kernel launches per layer forward (GEMMs + attention + memory-bound kernels); the launch
    overhead is hidden by CUDA graphs (`cuda_graphs`)."""
    attention: str = "flash"
    """Attention kernel family: cudnn (TE/cuDNN fused attention), flash3, flash2, sdpa (PyTorch
    SDPA: the FlashAttention-2 backend), flex (FlexAttention), eager (materialized softmax). The
    hardware profile gives each family's efficiency on that GPU."""
    loss: str = "fused"
    """Cross-entropy kernel: fused (vocab-parallel fused softmax-CE) or eager (fp32 upcast,
    log_softmax, nll)."""
    loss_passes: float = 4.0
    """HBM passes per logit of the loss forward, in 4-byte units (fp32): fused reads the bf16
    logits once and writes the fp32 softmax (≈ 1.5 + 2); eager upcasts, log_softmax, gathers (≈ 5)."""
    moe_dispatch: str = "alltoall"
    """Token dispatch: alltoall (NCCL all-to-all), deepep (DeepEP / hybrid-EP kernels: NVLink-RDMA
    forwarding, fewer copies), allgather (tokens all-gathered over EP)."""
    moe_grouped_gemm: bool = True
    """Experts run as one grouped GEMM (TE/cutlass grouped GEMM) rather than a loop of GEMMs."""
    cuda_graphs: bool = False
    """Whole-iteration or per-layer CUDA graphs: kernel launch overhead removed."""


@dataclass(frozen=True, kw_only=True)
class MemoryBehaviour:
    """How the stack's memory is laid out and what the caching allocator keeps."""

    reserve_frac: float = 0.03
    """Reserved − allocated at peak as a share of the allocated peak (caching-allocator
    fragmentation). Stacks that allocate and free gather buffers every layer (FSDP) fragment more."""
    loss_bytes_per_logit: float = 6.0
    """Transient bytes per logit on the last stage: bf16 logits + fp32 loss buffer (Megatron fused
    vocab-parallel CE 6; eager torch CE: bf16 logits, fp32 copy, fp32 log-softmax, ≈ 10–14)."""
    fsdp_prefetch_units: int = 2
    """FSDP all-gather outputs alive in forward (the current unit and the prefetched one)."""
    selective: str = "attention"
    """What `recompute=selective` means in this stack: attention (Megatron selective recompute:
    the attention core's softmax/dropout recomputed, Korthikanti et al. 2022) or op-sac (torchtitan
    op-level SAC: matmul and attention outputs saved — every second matmul output recomputed —
    and every elementwise op recomputed)."""


@dataclass(frozen=True, kw_only=True)
class Precision:
    """Dtypes and low-precision recipes the stack runs (recipe physics: autoplace.runtimes.recipes)."""

    dtypes: tuple = ("bf16", "fp16", "fp32")
    """Training precisions (fp8 appears when the stack has an FP8 recipe)."""
    fp8_recipes: tuple = ()
    """Low-precision GEMM recipes it implements (names of `recipes.RECIPES`), default first."""
    fp8_weight_cache: bool = False
    """Keeps quantized copies of the weights between forward and backward (Transformer Engine);
    torchao re-casts every use and keeps none."""
    fp8_allgather: bool = False
    """FSDP all-gathers the parameters already quantized (torchao enable_fsdp_float8_all_gather)."""


@dataclass(frozen=True, kw_only=True)
class Defaults:
    """What the stack does when the user is silent."""

    regime: str = "zero"
    """Optimizer-state byte regime (`autoplace.specs.training.REGIMES`)."""
    grad_reduce_bytes: int = 0
    """Data-parallel gradient reduce width in bytes (0 → the regime's gradient width)."""
    zero: int = 0
    """ZeRO stage used by default (Megatron-Core recipes: 1, the distributed optimizer)."""
    dp_bucket_mb: float = 0.0
    """Gradient bucket size in MB (0 → FSDP per-layer units for ZeRO-3, 64 MiB buckets otherwise)."""
    tp_async: bool = True
    """Backward TP collectives overlap the column-parallel weight-gradient GEMMs."""
    tp_overlap: bool = False
    """TP communication overlapped with GEMMs (TE userbuffers) when the plan has SP."""
    dp_overlap: bool = True
    """Gradient reduction (and ZeRO parameter gathers) overlapped with compute."""
    bwd_prefetch: bool = True
    """ZeRO-3 backward all-gathers prefetched."""
    fetch_sync: bool = False
    """ZeRO-3 parameter fetches synchronize the device (DeepSpeed 2021)."""
    vocab_divisible_by: int = 1
    """Vocabulary padded to a multiple of this × tp (Megatron 128; others 1)."""
    attention_dropout: bool = False
    """Dropout on (attention probabilities and residuals): masks stored, extra kernels."""
    eager_attention: bool = False
    """Attention materializes the s² scores (pre-flash Megatron fused-softmax kernels)."""
    micro_batch: int = 1
    """Micro-batch size the stack's recipes use when none is given."""
    rank_order: str = "tp-cp-ep-dp-pp"
    """Mesh order (Megatron tp-cp-ep-dp-pp; torchtitan pp-dp-cp-tp)."""
    seq_len: int = 0
    """Pre-training sequence length of the stack's recipes (0 → the model family's)."""


@dataclass(frozen=True, kw_only=True)
class Capabilities:
    """Which plans the stack can express; `autoplace.runtimes.check` turns these into rules."""

    zero: tuple = (0, 1, 2, 3)
    """ZeRO stages it runs (torchtitan {0, 3}; Megatron-Core {0, 1, 2, 3} with Megatron-FSDP)."""
    max_zero_with_pp: int = 3
    """Highest ZeRO stage allowed together with pp > 1 (DeepSpeed PipelineEngine: 1)."""
    zero_hold: bool = True
    """ZeRO-3 can keep parameters gathered from forward to backward (SHARD_GRAD_OP / reshard=False)."""
    ddp_with_model_parallel: bool = True
    """zero = 0 may combine with tp/pp/cp > 1 (torchtitan and accelerate apply DDP to pure DP only)."""
    hsdp: bool = True
    """Replicate × shard data-parallel meshes (dp_replicate > 1)."""
    pp: bool = True
    """Pipeline parallelism."""
    tp: bool = True
    """Tensor parallelism."""
    sp: str = "optional"
    """Sequence parallelism with TP: optional, always (torchtitan applies it with every TP), never."""
    tp_overlap: bool = True
    """TP communication overlap with GEMMs (needs SP)."""
    cp: bool = True
    """Ring context parallelism."""
    ep: bool = True
    """Expert parallelism."""
    etp: str = "any"
    """Expert TP: any, tp-or-1 (torchtitan), 1."""
    schedules: tuple = ("1f1b", "interleaved", "gpipe")
    """Pipeline schedules."""
    vpp_group: str = "any"
    """Interleaved micro-batch group size: any, pp (Megatron default), rounds (torch Interleaved1F1B)."""
    uneven_stages: bool = True
    """Pipeline stages of different layer counts."""
    offload: tuple = ("none", "optimizer", "grads", "params")
    """`Plan.offload` values it can express."""
    offload_partial: bool = True
    """A fraction φ < 1 of the optimizer state offloaded."""
    offload_min_zero: int = 1
    """Lowest ZeRO stage its optimizer offload runs with."""
    recompute: tuple = ("none", "selective", "full", "block")
    """`Plan.recompute` kinds it can express."""
    rank_orders: tuple = ("tp-cp-ep-dp-pp", "pp-dp-cp-tp")
    """Mesh orders it builds."""
    fetch_sync: bool = False
    """Runs the 2021 DeepSpeed synchronous ZeRO-3 fetch."""
    stage_recompute: str = "uniform"
    """Per-stage activation recomputation counts: uniform (one count for all stages: Megatron's
    --recompute-num-layers, torchtitan's layer SAC, DeepSpeed's checkpointing) or any."""
    why: tuple = ()
    """Why, per capability rule (TOML table `why = { zero-pp = "…" }`, keys = the `RT-` rule ids
    without the prefix): the source sentence appended to that rule's refusal message."""


@dataclass(frozen=True, kw_only=True)
class RuntimeSpec:
    name: str
    """File stem, e.g. `megatron-core`."""
    family: str
    """megatron, deepspeed, torchtitan, fsdp, accelerate, automodel, torch-native."""
    version: str
    """The release the facts were read from (e.g. `megatron-core 0.16 + TE 2.x`)."""
    description: str = ""
    """One line for `--runtime` help and the estimate header."""
    launcher: str = ""
    """The autoplace.export launcher that writes its files ('' = none)."""
    kernels: Kernels = field(default_factory=Kernels)
    memory: MemoryBehaviour = field(default_factory=MemoryBehaviour)
    precision: Precision = field(default_factory=Precision)
    defaults: Defaults = field(default_factory=Defaults)
    supports: Capabilities = field(default_factory=Capabilities)
    source: str = "builtin"
    """Where the spec was read from."""

    def plan_defaults(self) -> dict:
        """Plan fields this stack fixes when the user is silent."""
        d = self.defaults
        out = {"tp_async": d.tp_async, "dp_overlap": d.dp_overlap, "bwd_prefetch": d.bwd_prefetch,
               "fetch_sync": d.fetch_sync, "rank_order": d.rank_order}
        if d.dp_bucket_mb:
            out["dp_bucket_mb"] = d.dp_bucket_mb
        return out

    def describe(self) -> str:
        return f"{self.name} ({self.version})"


SECTIONS = {"kernels": Kernels, "memory": MemoryBehaviour, "precision": Precision,
            "defaults": Defaults, "supports": Capabilities}
TOP_KEYS = tuple(f.name for f in fields(RuntimeSpec) if f.name not in SECTIONS and f.name != "source")
