"""Training spec from command-line style inputs (sequence length, global batch or tokens per step).

Used by every command and by `autoplace.analysis.sweep` (one definition: the sweep builds exactly
the training spec a separate `search` at the same point builds)."""

from __future__ import annotations


def build_training(model, seq_len, global_batch, global_batch_tokens, precision, regime, world, runtime=None,
                   fp8_recipe: str = ""):
    """(TrainingSpec, batch note) from the CLI's training options. seq_len None → the model's
    pre-training length (`search.launchers.default_seq_len`); global batch: sequences, or ~tokens
    per step rounded to legal plans (`search.driver.default_global_batch`); runtime (a name or
    RuntimeSpec): its defaults (`runtimes.training_spec`), else the `zero` regime."""
    from autoplace.errors import InputError
    from autoplace.search.driver import DEFAULT_TOKENS_PER_STEP, default_global_batch
    from autoplace.specs.training import TrainingSpec
    if global_batch is not None and global_batch_tokens is not None:
        raise InputError("give either --global-batch (sequences) or --global-batch-tokens, not both")
    if seq_len is not None and seq_len < 1:
        raise InputError(f"--seq-len must be ≥ 1, got {seq_len} (omit it for the model's pre-training length)")
    if global_batch is not None and global_batch < 1:
        raise InputError(f"--global-batch must be ≥ 1, got {global_batch}")
    if seq_len is not None:
        s = seq_len
    else:
        from autoplace.search.launchers import Target, default_seq_len
        s, _ = default_seq_len(model, [Target(None, None)])
    if global_batch is not None:
        note = f"global batch {global_batch} sequences × {s} = {global_batch * s:,} tokens per step (--global-batch)"
        B = global_batch
    else:
        tokens = global_batch_tokens if global_batch_tokens is not None else DEFAULT_TOKENS_PER_STEP
        if tokens < 1:
            raise InputError(f"--global-batch-tokens must be ≥ 1, got {tokens}")
        B, note = default_global_batch(s, world, tokens)
    from autoplace.runtimes.recipes import check_recipe
    check_recipe(precision, fp8_recipe)
    if runtime is not None:
        from autoplace.specs.training import training_spec
        return training_spec(runtime, seq_len=s, global_batch=B, precision=precision, regime=regime,
                             fp8_recipe=fp8_recipe or ""), note
    return TrainingSpec(seq_len=s, global_batch=B, precision=precision, regime=regime or "zero",
                        fp8_recipe=fp8_recipe or ""), note


def training_from_config(fc, model, *, seq_len=None, global_batch=None, precision=None, regime=None,
                         runtime=None, fp8_recipe: str = ""):
    """The TrainingSpec of a launcher file (`autoplace.export.from_config.FromConfig`): its sequence
    length, global batch and precision unless given, under its launcher's runtime unless `runtime`
    (a name or RuntimeSpec) is given."""
    train, _ = build_training(model, seq_len or fc.seq_len, global_batch or fc.global_batch, None,
                              precision or fc.precision or "bf16", regime, fc.world,
                              runtime=runtime or fc.runtime, fp8_recipe=fp8_recipe or "")
    return train
