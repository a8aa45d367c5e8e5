"""Training specification: sequence, batch, precision, optimizer-state regime, kernels.

Byte widths per parameter follow placement_semantics.md §2.2 (ZeRO §3.1; Megatron's distributed
optimizer doc; DeepSpeed estimators). A regime is (b_P, b_G, b_M, b_O):
  b_P  compute copy of the parameters,
  b_G  gradient in the accumulation dtype (placed like G),
  b_M  extra fp32 gradient copy consumed by the optimizer (placed like O: sharded with it),
  b_O  optimizer state incl. fp32 master weights (placed like O).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from autoplace.errors import InputError

# name → (b_P, b_G, b_M, b_O, description)
REGIMES: dict[str, tuple[int, int, int, int, str]] = {
    "zero": (2, 2, 0, 12, "ZeRO convention: 16-bit P and G, fp32 master+m+v (16 B/param; ZeRO §3.1)"),
    "megatron-bf16": (2, 4, 0, 12, "Megatron --bf16: 16-bit P, fp32 main grads, fp32 master+m+v "
                                   "(18 B/param; distributed 6 + 12/d)"),
    "megatron-fp16": (2, 2, 4, 12, "Megatron fp16: 16-bit P and G + fp32 main grad (20 B/param; "
                                   "distributed 4 + 16/d)"),
    "deepspeed": (2, 2, 4, 12, "DeepSpeed ZeRO-2/3 as implemented: fp32 grad partition (2 + 18/N at ZeRO-2)"),
    "fp32": (4, 4, 0, 8, "pure fp32 Adam, no separate master (16 B/param; distributed 8 + 8/d)"),
    "bf16-moments": (2, 2, 0, 8, "bf16 P/G, fp32 master, bf16 moments (12 B/param) [derived]"),
    "pure-bf16": (2, 2, 0, 4, "bf16 everything, no master, bf16 moments (8 B/param) [derived]"),
    "sgd-momentum": (2, 2, 0, 8, "mixed precision SGD + momentum (12 B/param) [derived]"),
    "adam8bit": (2, 2, 0, 6, "fp32 master + 8-bit moments (10 B/param) [derived]"),
}
PRECISIONS = ("bf16", "fp16", "fp8", "fp4", "fp32")   # fp8/fp4: GEMMs in that format (a recipe), activations bf16
ATTENTION = ("flash", "eager")


@dataclass(frozen=True)
class TrainingSpec:
    seq_len: int
    global_batch: int                   # samples (sequences) per optimizer step
    precision: str = "bf16"             # GEMM/activation dtype: bf16 | fp16 | fp8 | fp4 | fp32
    regime: str = "zero"                # optimizer-state byte regime, see REGIMES
    attention: str = "flash"            # flash (no s² tensors stored) | eager (Korthikanti's 5as²b)
    dropout: bool = False               # dropout masks stored (1 B/element, Korthikanti)
    vocab_divisible_by: int = 128       # Megatron --make-vocab-size-divisible-by (pads V to ·t)
    grad_reduce_bytes: int | None = None  # FSDP reduce dtype width (None → b_G); FSDP2+PP accumulates here
    ce_fusion: bool = False             # fused cross-entropy (2 instead of 3 small TP all-reduces)
    states_only: bool = False           # memory = P+G+O only, comm = DP family only (ZeRO accounting)
    fp8_recipe: str = ""                # low-precision recipe when precision is fp8 (autoplace.runtimes.recipes);
                                        # "" → the runtime's first recipe the hardware runs
    runtime: object = None              # RuntimeSpec of the stack that runs the job (None → the default,
                                        # Megatron-Core + TE); its kernels and memory behaviour feed the cost model

    def __post_init__(self) -> None:
        from autoplace.safe import MAX_BATCH, MAX_SEQ_LEN, integer
        integer(self.seq_len, "--seq-len", lo=1, hi=MAX_SEQ_LEN)
        integer(self.global_batch, "--global-batch", lo=1, hi=MAX_BATCH)
        integer(self.vocab_divisible_by, "training.vocab_divisible_by", lo=1, hi=1 << 20)
        if self.precision not in PRECISIONS:
            raise InputError(f"--precision must be one of {', '.join(PRECISIONS)}, got '{self.precision}'")
        if self.regime not in REGIMES:
            raise InputError(f"--optimizer-regime must be one of {', '.join(REGIMES)}, got '{self.regime}'")
        if self.attention not in ATTENTION:
            raise InputError(f"--attention must be flash or eager, got '{self.attention}'")

    @property
    def rt(self):
        """The RuntimeSpec (autoplace.runtimes) this job runs under."""
        from autoplace.runtimes import load_runtime
        return load_runtime(self.runtime)

    @property
    def widths(self) -> tuple[int, int, int, int]:
        bp, bg, bm, bo, _ = REGIMES[self.regime]
        if self.precision == "fp32" and self.regime == "zero":
            return (4, 4, 0, 8)
        if self.regime == "megatron-bf16" and self.grad_reduce_bytes:
            # Megatron's gradient buffer is the reduce buffer: fp32 with grad_reduce_in_fp32, else bf16
            bg = self.grad_reduce_bytes
        return bp, bg, bm, bo

    @property
    def b_P(self) -> int:
        return self.widths[0]

    @property
    def b_G(self) -> int:
        return self.widths[1]

    @property
    def b_M(self) -> int:
        return self.widths[2]

    @property
    def b_O(self) -> int:
        return self.widths[3]

    @property
    def b_G_reduce(self) -> int:
        return self.grad_reduce_bytes or self.b_G

    @property
    def b_A(self) -> int:
        """Activation element width (fp8 training keeps bf16 activations between GEMMs)."""
        return 4 if self.precision == "fp32" else 2

    @property
    def tokens_per_step(self) -> int:
        return self.seq_len * self.global_batch

    def with_(self, **kw) -> "TrainingSpec":
        return replace(self, **kw)
