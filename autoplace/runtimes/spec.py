"""`RuntimeSpec`: one training stack at one version, as data (`autoplace/runtimes/*.toml`).

A runtime is what will *run* a plan — Megatron-Core + Transformer Engine, torchtitan (eager or
compiled), PyTorch FSDP as llm-foundry drives it, DeepSpeed, accelerate, NeMo AutoModel, the
torch-native profile runner — and the one place where what that stack does is written down:

- `Kernels`: how its kernels move data (elementwise fusion, attention kernel, loss kernel, MoE
  dispatch), read by `autoplace.cost.compute` / `cost.step` as numbers, never as names;
- `MemoryBehaviour`: caching-allocator reserve, communication buffers, the activation-checkpointing
  policies it offers, read by `autoplace.cost.memory`;
- `CommBehaviour`: how its collectives use the network (rails a gather reaches, all-to-all efficiency);
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
    rmsnorm_passes: float = 2.0
    """Passes per hidden element of one RMSNorm forward: fused read + write = 2; eager torchtitan /
    HF RMSNorm (x.float(), pow, mean, rsqrt·x, type_as, ·weight) ≈ 18. LayerNorm is one native
    kernel in every stack (2)."""
    residual_passes: float = 3.0
    """Passes per hidden element of one residual add (read two, write one)."""
    act_extra_passes: float = 0.0
    """Passes per FFN-intermediate element beyond the fused gated activation (which reads gate and
    up and writes one: 3; GeLU 2): eager act(gate)·up is two kernels, 2 more."""
    rope_passes: float = 2.0
    """Passes per Q/K element of rotary embedding: fused read + write = 2; torchtitan's complex
    RoPE (float32 view_as_complex, multiply, type_as) ≈ 10."""
    rope_unfused_passes: float = 0.0
    """Passes per Q/K element when the rotary embedding carries a YaRN attention factor
    (`ModelSpec.rope_mscale` ≠ 1) that the runtime's fused RoPE cannot apply, so it falls back to its
    eager RoPE; 0: `rope_passes` hold for every model. Megatron-Core `_apply_rotary_pos_emb_bshd`
    (t·cos, rotate-half's neg and cat, ·sin, add, cat with the pass-through part): 12 forward, ≈ 13
    backward = 3 × 8.5 under the 1 : 2 forward/backward convention."""
    membound_kernels: int = 8
    """Memory-bound kernel launches per layer forward (norms, residual adds, activation, RoPE,
    casts; GEMMs and attention count their own); backward launches two more."""
    attention: str = "flash"
    """Attention kernel family: cudnn (TE/cuDNN fused attention), flash3, flash2, triton (MosaicML's
    Triton flash kernel, llm-foundry `attn_impl: triton`: the flash2 rate, read at the sequence
    length it was fitted at, `cost.compute.ATTENTION_RATE_SEQ_KERNEL`), sdpa (PyTorch SDPA: the
    FlashAttention-2 backend), flex (FlexAttention), eager (materialized softmax). The hardware
    profile gives each family's efficiency on that GPU."""
    loss: str = "fused"
    """Cross-entropy kernel: fused (vocab-parallel fused softmax-CE) or eager (fp32 upcast,
    log_softmax, nll)."""
    loss_passes: float = 3.0
    """fp32 (4-byte) passes per logit of the loss forward after the 16-bit logits are read: fused
    vocab-parallel CE 3 (max, exp-sum, softmax write); eager .float() + log_softmax + nll 5.
    Backward moves (4 + b_A)·loss_passes/3 bytes per logit."""
    moe_dispatch: str = "alltoall"
    """Token dispatch: alltoall (NCCL all-to-all), deepep (DeepEP kernels: NVLink-RDMA forwarding,
    fewer copies), hybridep (Megatron's hybrid-EP flex backend, the same physics on more SMs),
    allgather (tokens all-gathered over EP). Set it with the `moe_dispatch` switch
    (`autoplace.runtimes.switches`), which also sets the permute passes and comm keys it implies."""
    moe_grouped_gemm: bool = True
    """Experts run as one grouped GEMM (TE/cutlass grouped GEMM) rather than a loop of GEMMs."""
    attention_sinks: str = ""
    """The attention kernel family that runs attention with learned sink logits
    (`ModelSpec.attn_sinks`, gpt-oss), when it is not `attention`: Transformer Engine sends
    softmax_type="learnable" past flash-attn to cuDNN's sink-capable fused attention
    (dot_product_attention/utils.py `get_attention_backend`), which the Megatron-Bridge gpt-oss
    runs time at the FlashAttention-2-class rate ("flash2"), not at cuDNN's vanilla rate: on H100,
    B200, B300, GB200 and GB300, BF16 and MXFP8, containers 26.02–26.08, gpt-oss is otherwise
    predicted 18–40 % fast while the sink-free models of the same tables' full-configuration
    recipes are within a few percent (README, held-out Megatron-Bridge archive). '' → `attention`
    for every model."""
    moe_grouped_gemm_per_expert: bool = False
    """The grouped GEMM is a loop of one GEMM launch per local expert spread over a few CUDA
    streams (Transformer Engine `GroupedLinear` → `general_grouped_gemm` →
    `multi_stream_cublas_gemm`, one cuBLAS call per expert on nvte_get_num_compute_streams()
    streams; the MXFP8 grouped GEMM of the Megatron-Core DeepSeek-V3 GB200 report), so each of
    the six expert GEMMs of a layer (FC1, FC2 forward; their dgrad and wgrad) pays a launch per
    local expert; TE's op fuser (`moe_fused_mlp`, expert TP 1) runs one grouped kernel instead."""
    grad_accum: str = "autograd"
    """How the gradients of a step's micro-batches are summed on a rank before their reduction
    (`cost.step.grad_accum_bytes`). fused: the weight-gradient GEMMs accumulate into the gradient
    buffer (Megatron `gradient_accumulation_fusion`, since Feb 2022: no pass of its own). hook: a
    per-parameter hook adds each micro-batch's gradient into the main_grad buffer (Megatron-LM 2021
    LocalDDP `param.main_grad.add_(param.grad.data)`, every micro-batch). autograd: PyTorch keeps the
    first micro-batch's .grad and adds each later one into it (AccumulateGrad; DDP `no_sync`); FSDP2
    without gradient sync — torch pipelining until a stage's last backward — first upcasts it to
    the reduce dtype (`FSDPParam.to_accumulated_grad_if_needed`, `accumulate_unsharded_grad_if_needed`).
    Charged where the accumulated gradient is unsharded (replicated gradients, or pipelined FSDP);
    per-micro-batch reductions accumulate 1/n shards, left out."""
    mla_qkv: str = "fused"
    """How an MLA layer (`ModelSpec.mla`, DeepSeek-V3 / Kimi K2) assembles the per-head Q, K and V
    the attention kernel reads (`compute.mla_assembly_elements`). fused: Megatron-Core's fused MLA
    RoPE — q's RoPE in place on its trailing rope dims, one kernel reads the kv up-projection
    output and the shared k_pe and writes K and V (fusions/fused_mla_yarn_rope_apply.py
    `fused_apply_mla_rope_for_q` / `fused_apply_mla_rope_for_kv`). eager: q = cat(q_nope,
    rope(q_pe)), k = cat(k_nope, k_pe.expand(heads)), and v — a strided slice of the kv output —
    copied contiguous by Transformer Engine (dot_product_attention/utils.py `get_qkv_layout`: k and
    v strides differ → "not_supported" → .contiguous()); backward cats q's split gradients back,
    sums the expanded k_pe gradient over heads, and cats the k_nope and v gradients into the kv
    gradient (NeMo AutoModel `components/models/deepseek_v3/layers.py` MLA.forward, 2025 and 2026;
    torchtitan `models/deepseek_v3/model/model.py` Attention.forward)."""
    moe_token_passes: float = 0.0
    """HBM passes per routed token-slot (× hidden) of the MoE layer's own bookkeeping besides the
    permutes: probability weighting, the combine's accumulation, receive/send buffer staging."""
    moe_permute_passes: float = 4.0
    """HBM passes per routed token-slot (× hidden) of the token permute/unpermute around the
    all-to-all: separate permute and unpermute kernels (each a read + write) 4; DeepEP / hybrid-EP
    kernels write and read the expert-ordered buffers themselves, 0."""
    moe_bias_eager: bool = False
    """An expert output (FC2) bias is added outside the grouped GEMM, one expert at a time in eager
    PyTorch (Megatron-Core `TEGroupedMLP._apply_bias`: split, t + b·p per expert, cat, cast back —
    in the routing probabilities' dtype, fp32 under the flex dispatchers). Off: the bias is fused
    (TE op fuser) or the runtime's cost is not modelled. Only models with `expert_bias`."""
    glu_clamp_eager: bool = False
    """A clamped GLU (`ModelSpec.glu_limit`) clamps the expert FC1 output in eager PyTorch before
    the fused activation: two clamps and a cat forward, their backward and the chunk's cat
    backward, and the clamped copy saved for backward next to the FC1 output (Megatron-Core
    `weighted_bias_quick_geglu_impl` / `weighted_bias_swiglu_impl` with
    activation_func_clamp_value). Off: the clamp is fused into the activation kernel."""
    moe_fused_mlp: bool = False
    """Transformer Engine's op fuser runs the expert MLP (Megatron-Core ≥ 0.18
    `--use-transformer-engine-op-fuser`; the Megatron-Bridge perf recipes' cutedsl fused grouped
    MLP): biases and a clamped GLU inside TE's fused kernels, so `moe_bias_eager` and
    `glu_clamp_eager` lapse — with expert TP 1 only (`TEGroupedMLP._is_fused_impl_supported` falls
    back to the unfused module otherwise). Set it with the `moe_fused_mlp` switch."""
    moe_dglu_dbias_factor: float = 1.0
    """Time of the fused grouped MLP's backward FC2-dgrad + dGLU kernel, as a multiple of the FC2
    dgrad GEMM, when it also reduces the expert-bias gradient (`moe_fused_mlp`, expert TP 1, models
    with `expert_bias`, block-scaled MXFP8/NVFP4 GEMMs on Blackwell: cuDNN frontend's CuTe DSL
    `grouped_gemm_dglu_wrapper_sm100`, generate_dbias). 1 where that kernel runs at GEMM speed.
    cudnn-frontend 1.24–1.25 under CUTLASS DSL 4.5 spilled its dbias reduction to local memory:
    1362.8 µs where the fixed kernel takes 155.6 µs at the issue's shape on a B200 (cudnn-frontend
    issue #256, fix PR #322, 2026-06-23) — 8.76; without dbias it ran at 139 µs either way."""
    sp_collective_copies: bool = False
    """DTensor sequence parallelism (torch.distributed.tensor.parallel with Shard(1) activations, as
    torchtitan and AutoModel lay them out) gathers and reduce-scatters along the sequence dim, and
    functional collectives run on dim 0: `all_gather_single` re-concatenates the gathered chunks
    along dim 1 and `reduce_scatter_single` concatenates its input's chunks before the collective
    (torch `_utils._chunk_or_narrow_cat` / `_maybe_view_chunk_cat`, a view only when the batch
    dim is 1). Eager, with micro-batch > 1, each of a layer's four SP collectives (the QKV and FC1
    inputs gathered, the attention and MLP outputs reduce-scattered), and each of their backward
    counterparts, copies the whole micro-batch's b·s·h activation once more: 8·b·s·h·b_A bytes and
    4 kernels each way (`cost.compute.layer_costs`). Not set for compiled stacks, whose graphs may
    fuse the copy into a neighbour."""
    cuda_graphs: bool = False
    """Whole-iteration or per-layer CUDA graphs: kernel launch overhead removed."""
    cuda_graph_experts: bool = False
    """With `cuda_graphs`, whether the routed experts run inside the captured graphs: Megatron-Core's
    full-iteration graphs (`cuda_graph_impl = "full_iteration"`, sync-free dropless dispatch) capture
    them; per-layer graphs (TE `make_graphed_callables`, scopes attn / moe_router / moe_preprocess)
    leave the dropless routed experts eager, since their shapes change every step, so their kernels
    keep the full launch overhead (Megatron-Core CUDA-graph guide; the DeepSeek-V3 GB200 report).
    Set it with `cuda_graphs=full_iteration`."""
    gemm_rate: float = 1.0
    """The runtime's dense GEMM rate as a share of the profile's (`gemm_efficiency`, anchored on
    the MAMF of a current cuBLAS) on the architectures `gemm_rate_archs` names: a stack whose
    CUDA libraries predate an architecture's native GEMM kernels runs the previous generation's
    kernels on it (llm-foundry's 2023 H100 tables on torch 1.13 / CUDA 11.7: Ampere mma.sync
    kernels on Hopper, without wgmma). A fact of the runtime's software, not of the board: the
    same H100 runs other runtimes at the profile's rate. 1 elsewhere."""
    gemm_rate_archs: tuple = ()
    """Architectures (`HardwareSpec.arch`: "hopper", "blackwell", …) where `gemm_rate` applies."""
    fp8_attention: bool = False
    """The attention core runs in FP8 (cuDNN FP8 fused attention, TE fp8_dot_product_attention)."""

    @property
    def fused_dispatch(self) -> bool:
        """A DeepEP / HybridEP (flex) dispatcher: the routing probabilities it hands the experts are
        FP32, and its fused preprocess replaces the all-to-all dispatcher's bookkeeping ops."""
        return self.moe_dispatch in ("deepep", "hybridep")

    def gemm_rate_on(self, arch: str) -> float:
        """`gemm_rate` on `arch` when it is one of `gemm_rate_archs`, else 1."""
        return self.gemm_rate if arch in self.gemm_rate_archs else 1.0


@dataclass(frozen=True, kw_only=True)
class MemoryBehaviour:
    """How the stack's memory is laid out and what the caching allocator keeps."""

    reserve_frac: float = 0.03
    """Reserved − allocated at peak as a share of the allocated peak (caching-allocator
    fragmentation). Stacks that allocate and free gather buffers every layer (FSDP) fragment more."""
    loss_bytes_per_logit: float = 6.0
    """Transient bytes per logit on the last stage: bf16 logits + fp32 loss buffer (Megatron fused
    vocab-parallel CE 6; eager torch CE: bf16 logits, fp32 copy, fp32 log-softmax, ≈ 10–14)."""
    loss_parallel_bytes_per_logit: float = 0.0
    """Transient bytes per logit when the loss runs vocab-parallel over TP (tp > 1), where it differs
    from `loss_bytes_per_logit` (0: the same). DTensor's `loss_parallel` in eager mode
    (torch.distributed.tensor.parallel.loss): the forward materialises x − max and exp(·) in fp32
    beside the fp32 input (14 B with the bf16 logits); the fused NLL + log-softmax backward holds
    the saved fp32 log-probabilities, a zeroed fp32 gradient, exp(·) and their sum (16 B)."""
    tp_saves_gathered_input: bool = False
    """DTensor tensor parallelism (ColwiseParallel after SequenceParallel, torch.distributed.tensor
    .parallel): a column-parallel linear saves its all-gathered (Replicate) input for backward, the
    whole sequence rather than the rank's SP shard — the QKV and FC1 inputs of a layer and the output
    layer's input. Megatron-Core's SP linears save the shard and all-gather it again in backward."""
    eager_saved: bool = False
    """What the stack's eager model code saves for backward beyond the fused-kernel count, without
    recompute (torchtitan's Llama in eager mode, `benchmarks/sac_memory.py`: 56.5 · h bytes per
    token and layer where the fused count is 34.0, with `attention_kv_expanded`): each pre-norm
    keeps its fp32 input and fp32 normalized product (8 B per element, not the 2 B of a 16-bit
    input: nn.RMSNorm computes in fp32), and SwiGLU keeps silu's output as well as its input (4
    f-wide tensors, not 3)."""
    attention_kv_expanded: bool = False
    """The model code expands GQA's K and V to the query heads before the attention kernel
    (torchtitan's `repeat_kv` ahead of SDPA, until torchtitan #2259 of Jan 2026 passed
    `enable_gqa`). The kernel saves the expanded copies for its backward, eager and compiled alike
    (SDPA is opaque to Inductor: `benchmarks/sac_memory.py` without recompute, compiled 37.0 · h
    where the fused count is 34.0, 3.0 · h being the expanded K and V of its h 1024, 8 heads, 2 KV
    heads), and context parallelism all-gathers them: torch's ring attention (`context_parallel`,
    `_templated_ring_attention`) gathers the K and V that SDPA receives."""
    pp_recv_buffers: bool = False
    """torch.distributed.pipelining allocates a receive buffer for every micro-batch of the schedule
    once and keeps it (PipelineStage `_prepare_forward_infra` / `_prepare_backward_infra`:
    `args_recv_info[chunk]`, `grad_recv_info[chunk]`): m activation buffers on every (virtual)
    stage but the first and m gradient buffers on every one but the last, each one micro-batch's
    boundary activation (`cost.memory.pp_recv_buffer_bytes`; `benchmarks/pp_outputs.py` lists them
    on this CPU). Megatron-Core allocates its p2p tensors per send and receive."""
    pp_keeps_step_outputs: bool = False
    """torch.distributed.pipelining's last stage keeps every micro-batch's output (the logits,
    detached after its backward) in `output_chunks` until the schedule's step ends, and then
    concatenates them into the step's return value (stage.py `forward_one_chunk`,
    schedules.py `_merge_outputs`; pytorch #138504 detaches them, #159251 asked why they are kept,
    #165822 added `step(return_outputs=False)`, which torchtitan passes since #1922, 2025-10-22).
    The last stage then holds (m − 1) 16-bit logit tensors at its last loss and 2·m of them at the
    merge (`cost.memory.pp_kept_output_bytes`); measured on this CPU by `benchmarks/pp_outputs.py`."""
    sac_keeps_unread: bool = True
    """Op-level SAC keeps every listed output, the layer's last matmul (w2) included, though no
    backward op reads it: eager `create_selective_checkpoint_contexts` caches what the policy marks
    MUST_SAVE. False for a compiled block, whose partitioner saves only what the backward reads:
    w2's output feeds the residual add alone (`benchmarks/sac_memory.py`: eager − compiled = one
    16-bit h-tensor per token and layer)."""
    fsdp_prefetch_units: int = 2
    """FSDP all-gather outputs alive in forward (the current unit and the prefetched one)."""
    selective: str = "attention"
    """What `recompute=selective` means in this stack: attention (Megatron selective recompute:
    the attention core's softmax/dropout recomputed, Korthikanti et al. 2022) or op-sac (torchtitan
    op-level SAC: matmul and attention outputs saved — every second matmul output recomputed —
    and every elementwise op recomputed)."""


@dataclass(frozen=True, kw_only=True)
class CommBehaviour:
    """How the stack's collectives use the network (its NCCL version and how it calls it)."""

    gather_rails: int = 0
    """NICs one all-gather/reduce-scatter reaches across nodes (0 → all the hardware's rails,
    `HardwareSpec.gather_rails`); the 2021 stacks reached one (Narayanan 2021 Table 2: ZeRO-3 step
    time flat from 768 to 1,536 GPUs)."""
    a2a_efficiency: float = 1.0
    """Achieved share of the link bandwidth in the EP all-to-all (1: the profile's bus bandwidth)."""
    a2a_node_dedup: bool = False
    """The dispatch sends a token to each remote node once and forwards it to that node's experts
    over NVLink (DeepEP / hybrid-EP), instead of once per routed expert (NCCL all-to-all)."""
    expert_span: int = 0
    """Domains a token's experts span when routing is not random: 1 for benchmark gates that send a
    token to k consecutive experts (NeMo AutoModel `fake_balanced_gate`); 0 = random routing."""
    fsdp_copies: bool = False
    """FSDP2's per-parameter sharding copies every all-gathered unit out of the collective's buffer
    into its parameters (`foreach_all_gather_copy_out`, on the compute stream) and every gradient
    unit into the reduce-scatter buffer, cast to the reduce dtype (`foreach_reduce` chunk_cat):
    2·b_P bytes per parameter per gather and b_G + b_G,reduce per reduction, full unit size
    (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py). FSDP1 and Megatron's
    distributed optimizer gather into flat buffers the parameters are views of: no copies."""
    pp_reduce_exposed: bool = False
    """Under pipeline parallelism the gradient reduction of a stage is issued after its last
    backward and the compute stream waits for it: torch.distributed.pipelining schedules a
    REDUCE_GRAD action after a stage's last backward, which runs FSDP2's post-backward for every
    parameter group and orders the compute stream past each reduce-scatter
    (`_PipelineStageBase.perform_reduce_grad` → `_root_post_backward_final_callback`), so with
    pp > 1 the reduce-scatter does not hide under the backward layer by layer. False: the
    reductions are issued from per-module backward hooks (FSDP/ZeRO/Megatron DDP buckets)."""
    pp_defer_grad_sync: bool = True
    """Under pipeline parallelism FSDP2's gradient sync and resharding wait for a stage's last
    backward (the K1 in-step placement, placement_semantics §K1): torch.distributed.pipelining
    turns them off on the stage module for every other backward, which it can only do when the
    stage module is itself an `FSDPModule` (`_PipelineStageBase.backward_maybe_with_nosync`).
    False: the stack shards only sub-modules of the stage (NeMo AutoModel's MoE parallelizer
    before Nov 2025: `fully_shard(model.model)`, not the outer causal-LM module), so the pipeline
    takes its "non-DP submodule, regular backward" branch and every micro-batch's backward
    reduce-scatters and reshards through FSDP2's own hooks — the per-micro-batch choice of K1's
    general model, each virtual stage waiting for its reductions at its root's post-backward
    callback."""
    tp_overlap_share: float = 1.0
    """Share of the sequence-parallel TP collectives that the stack's TP/GEMM overlap (`tp_overlap`)
    hides under the GEMMs: exposed = (1 − h)·c + h·(max(c − GEMM, 0) + c/8). 1: Transformer Engine's
    userbuffers ring-exchange (Megatron `--tp-comm-overlap`); less where the overlap is partial."""
    ep_comm_sms: int = 0
    """SMs the EP dispatch/combine kernels occupy while they overlap compute (hybrid-EP 32 in the
    Megatron-Bridge perf recipes, DeepEP normal kernels 24; NCCL's copy engines 0)."""
    dp_comm_sms: int = 32
    """SMs a DP-family NCCL collective (all-reduce, reduce-scatter, all-gather) holds while it runs:
    one CTA per channel, up to NCCL's 32 channels (MAXCHANNELS, src/include/device.h; `NCCL_MAX_CTAS`; tuning it
    "affects the communication-computation overlap for NCCL kernels", pytorch PR #97394). The compute
    it overlaps runs on the SMs left meanwhile; 0 where the collectives do not run on the device's SMs
    (gloo on a CPU device)."""


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
    fp8_param_gather: bool = False
    """The parameters themselves are held quantized (TE FP8/MXFP8/NVFP4 primary weights) and the
    distributed optimizer all-gathers them quantized (Megatron `fp8_param_gather`)."""
    fp8_saved_inputs: bool = False
    """GEMM inputs are saved for backward in the quantized format (TE saves its FP8 casts)."""
    fp32_matmul_tf32: bool = True
    """FP32 matmuls run as TF32 on tensor-core GPUs that have it (Ampere and later): NVIDIA's PyTorch
    containers set TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 (NGC PyTorch release notes), which makes cuBLAS
    ignore `torch.backends.cuda.matmul.allow_tf32 = False` (PyTorch's default since 1.12); cuDNN
    convolutions default to TF32 either way. False: true FP32 at the non-tensor peak."""


@dataclass(frozen=True, kw_only=True)
class Defaults:
    """What the stack does when the user is silent."""

    regime: str = "zero"
    """Optimizer-state byte regime (`autoplace.specs.training.REGIMES`)."""
    grad_reduce_bytes: int = 0
    """Data-parallel gradient reduce width in bytes (0 → the regime's gradient width)."""
    zero: int = 0
    """ZeRO stage used by default (Megatron-Core recipes: 1, the distributed optimizer)."""
    dp_bucket_elements: float = 0.0
    """Gradient-bucket size in elements for DDP/ZeRO-1/2 reductions (0 → 64 MiB of gradient);
    ZeRO-3 collectives go per FSDP unit (layer) whatever this says."""
    dp_bucket_elements_per_rank: float = 0.0
    """Elements added to the bucket per data-parallel rank (Megatron: max(40M, 1M·dp))."""
    tp_async: bool = True
    """Backward TP collectives overlap the column-parallel weight-gradient GEMMs."""
    sequence_parallel: bool = False
    """Sequence parallelism switched on whenever tp > 1 (Megatron-Bridge / NeMo recipes)."""
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
    recompute: str = ""
    """Activation recomputation its recipes switch on when a run does not say ("" → none stated:
    the record mapping takes the least recompute that fits)."""
    reshard_after_forward: bool = True
    """FSDP/ZeRO-3 reshards parameters after forward unless a run says otherwise."""
    pp_flush_per_local_batch: bool = False
    """Gradient accumulation repeats the whole pipeline schedule, one per local batch, each with its
    fill and drain (torch.distributed.pipelining `schedule.step` per local batch: torchtitan, NeMo
    AutoModel); False: every micro-batch of the step goes through one schedule (Megatron)."""
    expert_reduce_native: bool = False
    """The experts' own FSDP wrapping has no mixed-precision policy, so their gradients accumulate
    and reduce-scatter in the parameter dtype (b_G), not at `grad_reduce_bytes` (NeMo AutoModel's
    MoE parallelizer: `fully_shard(experts, mesh=ep_shard_mesh, shard_placement_fn=Shard(1))`
    with no `mp_policy`, at 89e3a9fdd and e45812012); False: as the dense parameters."""
    moe_reshard_after_forward: bool | None = None
    """The same for MoE models where the stack shards them by another code path (NeMo AutoModel's
    MoE parallelizer: `MoEParallelizerConfig.reshard_after_forward = False`); None → as dense."""
    ep_policy: str = "node"
    """Expert-parallel degree its recipes use when a run does not state one: node (the largest that
    fits one NVLink node) or data (every data-parallel rank)."""
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
    ep_overlap: bool = False
    """EP all-to-all overlapped with another micro-batch's compute (Megatron-Core ≥ 0.14
    `overlap_moe_expert_parallel_comm`); the plan knob `ep_overlap`."""
    fused_moe_mlp: bool = False
    """TE's fused grouped MLP (bias and clamped GLU inside its kernels; Megatron-Core ≥ 0.18
    `--use-transformer-engine-op-fuser`): what the `moe_fused_mlp` switch needs."""
    moe_specs: tuple = ("*",)
    """MoE models it can build: "*" any (Megatron-Core, DeepSpeed, HF modules), else its registered
    MoE model definitions as "name:flavor:layers:hidden:experts:top_k" (torchtitan: a TrainSpec and
    flavor per model; an MoE model matching none is refused)."""
    flags_since: tuple = ()
    """Launcher flags only later releases parse, as (flag, first release tag) pairs (Megatron-LM
    `--use-transformer-engine-op-fuser`: core_v0.18.0); the export notes name the release a file needs."""
    later_version: str = ""
    """The stack's later release with another config format (torchtitan 0.3.0: Python job modules);
    the exporter writes that release's file too where the `later_*` keys allow the plan."""
    later_moe_specs: tuple = ()
    """MoE model definitions the later release registers (same form as moe_specs)."""
    later_fp8_recipes: tuple = ()
    """FP8 recipes the later release's float8 converter names."""
    later_cuda_graphs_moe: bool = True
    """The later release captures CUDA graphs around an MoE model's token dispatch (torchtitan 0.3:
    only dispatchers without CPU synchronisation, not the standard all-to-all or DeepEP)."""
    later_etp: str = "any"
    """Expert TP in the later release: any, tp-or-1, 1 (torchtitan 0.3: EP borrows the TP ranks)."""
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
    recompute_modules: tuple = ()
    """`Plan.recompute_modules` it can name for selective recompute (Megatron-Core ≥ 0.12
    `--recompute-modules`); () → only its own selective policy (`memory.selective`)."""
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
class Host:
    """Host (CPU) time the stack spends issuing one layer's work (autoplace.cost.host).

    The CPU runs ahead of the GPU while nothing synchronises, so a layer costs max(device, host);
    a device → host synchronisation inside a layer empties the queue and the rest of that layer
    costs max(device, host) again from there. Each value names its source in the runtime file;
    `benchmarks/host_overhead.py` measures them on a lent GPU."""

    fwd_op_us: float = 10.0
    """Host time per forward op issued from Python (module call, ATen dispatch, autograd node,
    cudaLaunchKernel), µs on the reference x86 host (`hw.host_op_factor` scales it)."""
    bwd_op_us: float = 4.0
    """Host time per backward kernel the autograd engine issues (C++ dispatch + launch; a Python
    autograd.Function backward costs `fwd_op_us`), µs."""
    gemm_op_us: float = 0.0
    """Host time per forward GEMM module call (nn.Linear / TE Linear / a grouped-GEMM module), µs;
    0 → fwd_op_us."""
    gemm_bwd_op_us: float = 0.0
    """Host time per GEMM module's backward (TE runs it as a Python autograd.Function), µs;
    0 → bwd_op_us."""
    moe_ops: float = 40.0
    """Ops of one MoE layer's router and token dispatcher per forward beyond its GEMMs and the
    memory-bound passes the kernels count (top-k, histogram, index and split bookkeeping, the
    collectives' calls, un-permute); the backward issues as many."""
    flex_moe_ops: float = 0.0
    """`moe_ops` under a fused dispatcher (`kernels.moe_dispatch` deepep / hybridep), whose one
    preprocess kernel replaces the all-to-all dispatcher's count, split and permute bookkeeping;
    0 → moe_ops."""
    dispatch_ops: float = 0.0
    """Of `moe_ops`, the token dispatch proper — permutation, the all-to-all calls, the local sort
    and the combine: what per-layer CUDA graphs (scope attn, moe_router, moe_preprocess) leave eager;
    0 → moe_ops."""
    flex_dispatch_ops: float = 0.0
    """`dispatch_ops` under a DeepEP / HybridEP dispatcher; 0 → dispatch_ops."""
    expert_gemm_ops: float = 1.0
    """Host ops per local expert per expert GEMM when the grouped GEMM loops over the experts
    (`kernels.moe_grouped_gemm_per_expert`): the GEMM, plus its input quantization under FP8."""
    dropless_sync: bool = True
    """A dropless token dispatcher synchronises device → host once per MoE layer forward (the host
    needs the per-expert token counts to size its buffers and splits); a capacity factor
    (`TrainingSpec.moe_capacity_factor` > 0) or full-iteration CUDA graphs make it sync-free."""
    sync_us: float = 30.0
    """One such synchronisation: the D2H copy's latency, the stream wait and the host work until the
    next launch, µs."""
    step_ops: float = 0.0
    """Host ops per optimizer step outside the layers, issued after the step's last device → host
    synchronisation so the GPU waits for them: zero_grad, the gradient-norm / clipping and optimizer
    multi-tensor launches, the learning-rate scheduler, the loss reduction; each costs `fwd_op_us`."""
    step_syncs: float = 0.0
    """Device → host synchronisations per optimizer step (timer barriers and `cuda.synchronize`,
    `.item()` of the gradient norm or the loss); each drains the queue and costs `sync_us`."""
    step_ms: float = 0.0
    """Further fixed host time per optimizer step (the data loader's next(), logging callbacks),
    ms. The step's fixed cost is (step_ops·fwd_op_us + step_syncs·sync_us)·1e-6 + step_ms·1e-3 s,
    scaled by the host CPU class (`cost.step.overhead_time`)."""


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
    comm: CommBehaviour = field(default_factory=CommBehaviour)
    precision: Precision = field(default_factory=Precision)
    defaults: Defaults = field(default_factory=Defaults)
    supports: Capabilities = field(default_factory=Capabilities)
    host: Host = field(default_factory=Host)
    source: str = "builtin"
    """Where the spec was read from."""
    overrides: tuple = ()
    """Settings applied over the file, in order, as ("section.key" or a switch name, value) pairs
    (`--runtime-set`, a record's workload switches; `autoplace.runtimes.switches`)."""

    def plan_defaults(self) -> dict:
        """Plan fields this stack fixes when the user is silent."""
        d = self.defaults
        out = {"tp_async": d.tp_async, "dp_overlap": d.dp_overlap, "bwd_prefetch": d.bwd_prefetch,
               "fetch_sync": d.fetch_sync, "rank_order": d.rank_order}
        return out

    def describe(self) -> str:
        extra = "; " + ", ".join(f"{k}={_show(v)}" for k, v in self.overrides) if self.overrides else ""
        return f"{self.name} ({self.version}{extra})"


def _show(v) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


SECTIONS = {"kernels": Kernels, "memory": MemoryBehaviour, "comm": CommBehaviour, "precision": Precision,
            "defaults": Defaults, "supports": Capabilities, "host": Host}
TOP_KEYS = tuple(f.name for f in fields(RuntimeSpec) if f.name not in SECTIONS and f.name not in ("source", "overrides"))
