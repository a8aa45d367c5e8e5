"""Optimizer byte regimes: bytes per parameter of (parameters, gradients, main gradients, optimizer
state) and where each convention comes from. Below both the training spec and the runtimes that name
a default regime (autoplace.runtimes.check validates those names)."""

from __future__ import annotations

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
