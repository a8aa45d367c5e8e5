"""Default job settings of a profile run (torch-free: the launcher, the CLI and the search read them).

Small on purpose: a CPU run on gloo must finish in seconds. The worker receives these merged with
the caller's overrides (`run_plans(settings=...)`), one JSON object per launch.
"""

from __future__ import annotations

DEFAULTS = dict(seq_len=64, global_batch=8, steps=2, warmup=1, seed=1234, lr=1e-3, adam_eps=1e-4,
                sp_impl="megatron", precision="fp32")
"""seq_len, global_batch (sequences per step), steps (timed, after `warmup`; one instrumented step
follows), seed, lr and adam_eps (Adam), sp_impl ("megatron": SP saves the local shard and re-gathers
in backward; "dtensor": torch's SequenceParallel), precision (the runner trains in fp32)."""

SP_IMPLS = ("megatron", "dtensor")
"""`sp_impl` values the runner implements."""
