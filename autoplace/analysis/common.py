"""Training spec from command-line style inputs (sequence length, global batch or tokens per step).

Used by every command and by `autoplace.analysis.sweep` (one definition: the sweep builds exactly
the training spec a separate `search` at the same point builds)."""

from __future__ import annotations


def build_training(model, seq_len, global_batch, global_batch_tokens, precision, regime, world):
    from autoplace.errors import InputError
    from autoplace.search.driver import DEFAULT_TOKENS_PER_STEP, default_global_batch
    from autoplace.specs.training import TrainingSpec
    if global_batch is not None and global_batch_tokens is not None:
        raise InputError("give either --global-batch (sequences) or --global-batch-tokens, not both")
    # default: the length the family was pre-trained at (ModelSpec.pretrain_seq_len), else the
    # model's context capped at 4096 (a 128K max_position_embeddings is not a training length)
    s = seq_len or (2048 if model.states_only else model.pretrain_seq_len or min(model.max_seq_len, 4096))
    if s < 1:
        raise InputError(f"--seq-len must be ≥ 1, got {s}")
    if global_batch is not None:
        note = f"global batch {global_batch} sequences × {s} = {global_batch * s:,} tokens per step (--global-batch)"
        B = global_batch
    else:
        tokens = global_batch_tokens if global_batch_tokens is not None else DEFAULT_TOKENS_PER_STEP
        if tokens < 1:
            raise InputError(f"--global-batch-tokens must be ≥ 1, got {tokens}")
        B, note = default_global_batch(s, world, tokens)
    return TrainingSpec(seq_len=s, global_batch=B, precision=precision, regime=regime), note
