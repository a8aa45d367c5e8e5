"""Default job settings of a profile run (torch-free: the launcher, the CLI and the search read them).

Small on purpose: a CPU run on gloo must finish in seconds. The worker receives these merged with
the caller's overrides (`run_plans(settings=...)`), one JSON object per launch.
"""

from __future__ import annotations

DEFAULTS = dict(seq_len=64, global_batch=8, steps=2, warmup=1, seed=1234, lr=1e-3, adam_eps=1e-4,
                sp_impl="megatron", precision="fp32", selective_policy=None,
                moe_capacity_factor=0.0, moe_gemm=None)
"""seq_len, global_batch (sequences per step), steps (timed, after `warmup`; one instrumented step
follows), seed, lr and adam_eps (Adam), sp_impl ("megatron": SP saves the local shard and re-gathers
in backward; "dtensor": torch's SequenceParallel), precision (the runner trains in fp32),
selective_policy (what recompute=selective runs: "attention" = Megatron's attention-core
recompute, "op-sac" = torchtitan's op-level SAC; None = the `memory.selective` of the runner's
runtime, `RUNNER_RUNTIME`), moe_capacity_factor (0 = dropless token dispatch; cf > 0: each expert
takes ⌈cf·T·k/E⌉ copies per source rank, the rest dropped, buffers padded: `autoplace.profile.moe`),
moe_gemm ("grouped" = torch._grouped_mm, "per-expert" = one GEMM per expert; None = grouped where
torch has it)."""

SP_IMPLS = ("megatron", "dtensor")
"""`sp_impl` values the runner implements."""

SELECTIVE_POLICIES = ("attention", "op-sac")
"""`selective_policy` values the runner implements (`RuntimeSpec.memory.selective` values)."""

RUNNER_RUNTIME = "torch-native"
"""The runtime file (autoplace/runtimes/) that describes this runner."""


def selective_policy(settings) -> str:
    """The selective-recompute policy of a run: the setting, else the runner runtime's."""
    pol = settings.get("selective_policy") if settings else None
    if pol is None:
        from autoplace.runtimes import load_runtime
        pol = load_runtime(RUNNER_RUNTIME).memory.selective
    if pol not in SELECTIVE_POLICIES:
        raise ValueError(f"selective_policy must be one of {', '.join(SELECTIVE_POLICIES)}, got {pol!r}")
    return pol
