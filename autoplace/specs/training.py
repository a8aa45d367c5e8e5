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
from autoplace.specs.regimes import REGIMES  # noqa: E402  (the table lives below the runtimes that name a regime)

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
    moe_capacity_factor: float = 0.0    # MoE expert capacity factor (Megatron --moe-expert-capacity-factor):
                                        # 0 → dropless (the dispatcher syncs device → host per MoE layer)
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
        if self.moe_capacity_factor < 0:
            raise InputError(f"--moe-capacity-factor must be ≥ 0 (0 = dropless), got {self.moe_capacity_factor}")
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
    def b_G_reduce_expert(self) -> int:
        """Reduce width of the experts' gradients (RuntimeSpec defaults.expert_reduce_native)."""
        rt = self.rt if self.runtime is not None else None
        return self.b_G if rt is not None and rt.defaults.expert_reduce_native else self.b_G_reduce

    @property
    def b_A(self) -> int:
        """Activation element width (fp8 training keeps bf16 activations between GEMMs)."""
        return 4 if self.precision == "fp32" else 2

    @property
    def tokens_per_step(self) -> int:
        return self.seq_len * self.global_batch

    def with_(self, **kw) -> "TrainingSpec":
        return replace(self, **kw)


def training_spec(runtime=None, *, seq_len: int, global_batch: int, precision: str = "bf16",
                  fp8_recipe: str = "", **overrides):
    """A TrainingSpec with the runtime's defaults for what the caller leaves out: optimizer regime,
    gradient-reduce width, vocabulary padding, attention kernel class and dropout. Keyword
    `overrides` (e.g. regime="zero") win over the runtime's defaults."""
    from autoplace.runtimes import load_runtime
    rt = load_runtime(runtime)
    d = rt.defaults
    kw = dict(regime=d.regime if precision != "fp32" else "fp32",
              grad_reduce_bytes=d.grad_reduce_bytes or None,
              vocab_divisible_by=d.vocab_divisible_by,
              attention="eager" if d.eager_attention else "flash",
              dropout=d.attention_dropout)
    kw.update({k: v for k, v in overrides.items() if v is not None})
    return TrainingSpec(seq_len=seq_len, global_batch=global_batch, precision=precision,
                        fp8_recipe=fp8_recipe, runtime=rt, **kw)
