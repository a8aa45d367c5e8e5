"""Low-precision GEMM recipes: the physics of each FP8/FP4 scheme, written once.

A recipe is a quantization scheme of a library (Transformer Engine, torchao); a runtime lists the
recipes it implements (`[precision] fp8_recipes`) and `TrainingSpec.fp8_recipe` names the one a job
uses. The cost model reads these numbers (`autoplace.cost.compute`, `cost.memory`, `cost.comm`):

- the GEMM rate: the hardware's `peak(gemm_dtype)` × its efficiency for that dtype;
- the quantization work around every low-precision GEMM: each quantized input is read at the
  activation width (once, or twice when the amax needs its own pass: current scaling) and written
  at `operand_bytes` (+ scales) `copies` times (Hopper FP8 GEMMs are TN-only, so TE also writes a
  transposed copy; MXFP8/NVFP4 need row- and column-wise scaled copies);
- the quantized weight copies a library keeps between forward and backward (`weight_cache`);
- the share of GEMM FLOPs kept in BF16 (`bf16_share`, e.g. NVFP4 keeps the first and last layers).

Sources: NVIDIA Transformer Engine docs "Using FP8 with Transformer Engine" and
`transformer_engine/common/recipe/__init__.py` (DelayedScaling, Float8CurrentScaling,
Float8BlockScaling, MXFP8BlockScaling, NVFP4BlockScaling); OCP MX spec v1.0 (32-element blocks,
E8M0 scales); NVIDIA "Pretraining LLMs with NVFP4" (2025: 16-element blocks, E4M3 scales, 2-D
weight scaling, last layers in BF16); pytorch/ao `torchao/float8` (tensorwise and rowwise
scaling, FSDP float8 all-gather).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class Recipe:
    name: str
    """Key used by `TrainingSpec.fp8_recipe` and runtime files."""
    library: str
    """te (Transformer Engine) or torchao."""
    gemm_dtype: str
    """The hardware peak the GEMMs run at: fp8 or fp4."""
    operand_bytes: float
    """Bytes per quantized element (FP8 1, FP4 0.5)."""
    scale_bytes: float
    """Scale bytes per element (per-tensor 0; MXFP8 1/32; NVFP4 1/16; 1×128 blocks 4/128)."""
    amax_passes: int
    """Extra reads of the source tensor for its amax (current scaling 1; delayed/block recipes 0)."""
    copies: int
    """Quantized copies written per quantized tensor (row-wise + column-wise/transposed: 2)."""
    weight_cache: float
    """Bytes per parameter of quantized weight copies kept from forward to backward (when the
    runtime keeps them): copies × (operand + scale) bytes."""
    quant_kernels: float = 1.0
    """Kernels launched per quantized tensor: one fused cast (delayed scaling keeps its amax history;
    block recipes compute their scales in the cast); FP8 current scaling runs three — the amax
    reduction, the scale from it, the cast (TE `Float8CurrentScalingQuantizer::quantize_impl`:
    nvte_compute_amax, nvte_compute_scale_from_amax, nvte_quantize_v2); NVFP4 adds its global amax
    pass and the Hadamard transform to the cast."""
    transform_passes: float = 0.0
    """Extra read + write passes (at the activation width) over each quantized tensor before the
    cast: NVFP4's 16-point random Hadamard transform of the wgrad operands (1 pass, read + write)."""
    bf16_share: float = 0.0
    """Share of the transformer GEMM FLOPs the recipe keeps in BF16."""
    min_arch: str = "hopper"
    """Oldest GPU architecture with the tensor-core format (hopper, blackwell)."""
    description: str = ""


def _te(name, gemm_dtype, operand, scale, amax, copies, **kw) -> Recipe:
    return Recipe(name=name, library="te", gemm_dtype=gemm_dtype, operand_bytes=operand, scale_bytes=scale,
                  amax_passes=amax, copies=copies, weight_cache=copies * (operand + scale), **kw)


RECIPES: dict[str, Recipe] = {r.name: r for r in (
    _te("delayed", "fp8", 1.0, 0.0, 0, 2,
        description="TE DelayedScaling: per-tensor scale from an amax history, amax fused into the cast"),
    _te("current", "fp8", 1.0, 0.0, 1, 2, quant_kernels=3.0,
        description="TE Float8CurrentScaling (FP8-CS): per-tensor scale from this step's amax (one extra read)"),
    _te("blockwise", "fp8", 1.0, 4.0 / 128, 0, 2,
        description="TE Float8BlockScaling: 1×128 activation / 128×128 weight blocks (DeepSeek-V3 style)"),
    _te("mxfp8", "fp8", 1.0, 1.0 / 32, 0, 2, min_arch="blackwell",
        description="TE MXFP8BlockScaling: E8M0 scale per 32 elements, row- and column-wise copies"),
    _te("nvfp4", "fp4", 0.5, 1.0 / 16, 1, 2, min_arch="blackwell", transform_passes=1.0, quant_kernels=3.0,
        description="TE NVFP4BlockScaling: E4M3 scale per 16 elements under a per-tensor FP32 scale (its amax "
                    "is a pass of its own), 2-D weight "
                    "scaling, random Hadamard transforms on the wgrad inputs; fprop, dgrad and wgrad in FP4 "
                    "(Megatron-Bridge bf16_with_nvfp4_mixed keeps no layer in BF16)"),
    Recipe(name="tensorwise", library="torchao", gemm_dtype="fp8", operand_bytes=1.0, scale_bytes=0.0,
           amax_passes=1, copies=1, weight_cache=0.0,
           description="torchao Float8Linear tensorwise: dynamic per-tensor scaling, casts on every use"),
    Recipe(name="rowwise", library="torchao", gemm_dtype="fp8", operand_bytes=1.0, scale_bytes=4.0 / 4096,
           amax_passes=1, copies=1, weight_cache=0.0,
           description="torchao Float8Linear rowwise: per-row scales, dynamic, casts on every use"),
)}


def check_recipe(precision: str, recipe) -> None:
    """--fp8-recipe: a known recipe (autoplace.runtimes.recipes) of the --precision's GEMM dtype."""
    if not recipe:
        return
    from autoplace.errors import InputError
    r = RECIPES.get(recipe)
    if r is None:
        raise InputError(f"--fp8-recipe '{recipe}' is not a recipe; choose one of {', '.join(RECIPES)}")
    if precision not in ("fp8", "fp4"):
        raise InputError(f"--fp8-recipe {recipe} needs --precision {r.gemm_dtype} (got --precision {precision})")
    if r.gemm_dtype != precision:
        raise InputError(f"--fp8-recipe {recipe} runs {r.gemm_dtype} GEMMs; give --precision {r.gemm_dtype}")
