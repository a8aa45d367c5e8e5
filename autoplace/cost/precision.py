"""Low-precision training as the cost model sees it: the GEMM format, the weight copies and the
parameter-gather width, all from the job's recipe (autoplace.runtimes.recipes) and its runtime.

- `GemmFormat(train, hw)`: the peak and MAMF efficiency the transformer GEMMs run at, their operand
  bytes, the recipe's quantization traffic and its BF16 share;
- `param_store_bytes(train)`: bytes per parameter of the compute copy a rank holds — BF16, or with
  Transformer Engine the BF16 copy plus its quantized weight cache, or, when the runtime keeps the
  parameters themselves quantized (`fp8_param_gather`: Megatron-Bridge's FP8/MXFP8/NVFP4 recipes)
  only the quantized row- and column-wise copies;
- `param_gather_bytes(train)`: bytes per parameter a ZeRO/FSDP parameter all-gather moves (the
  quantized width under `fp8_param_gather` or torchao's FP8 all-gather, else the compute copy).
"""

from __future__ import annotations

from autoplace.runtimes.check import _arch_rank
from autoplace.runtimes.recipes import RECIPES


def resolve_recipe(train, hw=None) -> str:
    """The job's FP8/FP4 recipe: the stated one, else the runtime's first recipe of that GEMM
    dtype that this GPU runs (any GPU when `hw` is None)."""
    if train.fp8_recipe:
        return train.fp8_recipe
    for name in train.rt.precision.fp8_recipes:
        r = RECIPES[name]
        if r.gemm_dtype != train.precision:
            continue
        if hw is None or not getattr(hw, "arch", "") or _arch_rank(hw.arch) >= _arch_rank(r.min_arch):
            return name
    return ""


def recipe_of(train, hw=None):
    if train.precision not in ("fp8", "fp4"):
        return None
    name = resolve_recipe(train, hw)
    return RECIPES[name] if name else None


def param_store_bytes(train, hw=None, sharded_optimizer: bool = True) -> float:
    """Bytes per parameter of the compute copy held on a rank (see the module docstring). The
    runtime's low-precision parameter copy (`fp8_param_gather`) needs a sharded optimizer: Megatron
    asserts --fp8-param-gather only with the distributed optimizer or an FSDP path (arguments.py),
    so a replicated optimizer (zero = 0) keeps the 16-bit copy."""
    r = recipe_of(train, hw)
    pr = train.rt.precision
    if r is None:
        return float(train.b_P) + (1.0 if train.precision in ("fp8", "fp4") and pr.fp8_weight_cache else 0.0)
    if pr.fp8_param_gather and sharded_optimizer:
        return r.weight_cache
    return float(train.b_P) + (r.weight_cache if pr.fp8_weight_cache else 0.0)


def param_gather_bytes(train, hw=None) -> float:
    """Bytes per parameter one ZeRO/FSDP parameter all-gather moves."""
    r = recipe_of(train, hw)
    pr = train.rt.precision
    if r is not None and (pr.fp8_param_gather or pr.fp8_allgather):
        return r.operand_bytes + r.scale_bytes
    return float(train.b_P)


def matmul_dtype(train, hw) -> str:
    """The dtype whose peak the job's 16/32-bit matmuls run at: bf16, fp16, or for fp32 jobs TF32
    where the GPU has it (profile `peak_tflops.tf32`) and the runtime lets cuBLAS use it
    (`[precision] fp32_matmul_tf32`: NVIDIA's containers do), else the non-tensor fp32 peak."""
    prec = train.precision
    if prec == "fp32":
        return "tf32" if (train.rt.precision.fp32_matmul_tf32 and "tf32" in hw.peak_flops) else "fp32"
    return "fp16" if prec == "fp16" else "bf16"


class GemmFormat:
    """How the transformer's GEMMs run: dtype of the peak, operand bytes, MAMF efficiency, the
    low-precision recipe (autoplace.runtimes.recipes) and its quantization work."""

    def __init__(self, train, hw):
        from autoplace.runtimes.recipes import RECIPES
        self.recipe = None
        prec = train.precision
        if prec in ("fp8", "fp4"):
            name = resolve_recipe(train, hw)
            self.recipe = RECIPES[name] if name else None
        r = self.recipe
        self.dtype = r.gemm_dtype if r else (prec if prec in ("fp8", "fp4") else matmul_dtype(train, hw))
        self.peak = hw.peak(self.dtype)
        # the runtime's own GEMM rate on this architecture (Kernels.gemm_rate: its CUDA libraries)
        self.eff = hw.gemm_eff(self.dtype) * train.rt.kernels.gemm_rate_on(getattr(hw, "arch", ""))
        self.bytes = (r.operand_bytes + r.scale_bytes) if r else \
            {"fp8": 1.0, "fp4": 0.5}.get(prec, train.b_A)
        self.bf16_share = r.bf16_share if r else 0.0

    def quant_bytes(self, b_a: float) -> float:
        """HBM bytes per quantized element: its amax pass(es) at the activation width and the
        quantized copies written (0 without a recipe)."""
        r = self.recipe
        return ((r.amax_passes + 2 * r.transform_passes) * b_a + r.copies * (r.operand_bytes + r.scale_bytes)) \
            if r else 0.0




