"""What torchrun.sh and slurm.sbatch start on each node: one 'payload' per launcher that can run
the plan (Megatron-LM's pretrain_gpt.py, torchtitan.train, a DeepSpeed script, accelerate launch or
a plain training script), chosen at run time with PAYLOAD=…"""

from __future__ import annotations

from autoplace.export.common import ExportJob

ORDER = ("megatron", "torchtitan", "deepspeed", "accelerate", "generic")


def available(job: ExportJob) -> list[str]:
    """Payloads whose launcher supports the plan, in preference order (generic always); the stack
    whose runtime the plan was priced under comes first (the script's default PAYLOAD)."""
    from autoplace.export import accelerate, deepspeed, megatron, torchtitan  # the stacks, not the registry
    stacks = {"megatron": megatron, "torchtitan": torchtitan, "deepspeed": deepspeed, "accelerate": accelerate}
    out = [n for n in ORDER[:-1] if not stacks[n].LAUNCHER.refusals(job)]
    rt = getattr(job.train, "runtime", None)
    own = getattr(rt, "launcher", "") if rt is not None and not isinstance(rt, str) else ""
    if isinstance(rt, str):
        from autoplace.runtimes import load_runtime
        own = load_runtime(rt).launcher
    if own in out:      # the stack the plan was priced for is the default payload
        out.remove(own)
        out.insert(0, own)
    return out + ["generic"]


def entry_case(job: ExportJob, names: list[str], *, with_accelerate: bool) -> list[str]:
    """A bash `case` that sets ENTRY=(…) (the program and its arguments after torchrun's flags).

    accelerate brings its own launcher, so its branch sets USE_ACCELERATE=1 instead."""
    lines = [f'PAYLOAD="${{PAYLOAD:-{names[0]}}}"   # one of: {" ".join(names)}',
             "USE_ACCELERATE=0",
             'case "$PAYLOAD" in']
    for n in names:
        if n == "accelerate" and not with_accelerate:
            continue
        lines.append(f"  {n})")
        if n == "megatron":
            lines += [
                '    source "$PLAN_DIR/megatron_env.sh"',
                '    MEGATRON_LM="${MEGATRON_LM:?set MEGATRON_LM to your Megatron-LM checkout}"',
                '    PLAN_ARGS=()',
                '    while read -r line; do [[ -z "$line" || "$line" == \\#* ]] && continue; '
                'read -ra parts <<< "$line"; PLAN_ARGS+=("${parts[@]}"); done < "$PLAN_DIR/megatron_args.txt"',
                f'    read -ra DATA_ARGS <<< "${{DATA_ARGS:---mock-data --tokenizer-type NullTokenizer '
                f'--vocab-size {job.model.vocab - 1}}}"',
                '    read -ra TRAIN_ARGS <<< "${TRAIN_ARGS:---train-iters 1000 --lr 3.0e-4 --min-lr 3.0e-5 '
                '--lr-decay-style cosine --lr-warmup-iters 100 --clip-grad 1.0 --log-interval 10 --eval-iters 0}"',
                '    ENTRY=("$MEGATRON_LM/pretrain_gpt.py" "${PLAN_ARGS[@]}" "${DATA_ARGS[@]}" "${TRAIN_ARGS[@]}")',
                "    ;;"]
        elif n == "torchtitan":
            lines += ['    export PYTHONPATH="$PLAN_DIR${PYTHONPATH:+:$PYTHONPATH}"',
                      '    export PYTORCH_ALLOC_CONF="expandable_segments:True"',
                      '    ENTRY=(-m torchtitan.train --job.config_file "$PLAN_DIR/torchtitan_job.toml")',
                      "    ;;"]
        elif n == "deepspeed":
            lines += ['    ENTRY=("${TRAIN_SCRIPT:-train.py}" --deepspeed --deepspeed_config "$PLAN_DIR/ds_config.json")',
                      "    ;;"]
        elif n == "accelerate":
            lines += ["    USE_ACCELERATE=1",
                      '    ENTRY=("${TRAIN_SCRIPT:-train.py}" --per_device_train_batch_size '
                      f'{job.plan.mbs} --gradient_accumulation_steps {job.micro_batches})',
                      "    ;;"]
        else:
            lines += ['    ENTRY=("${TRAIN_SCRIPT:-train.py}")', "    ;;"]
    lines += ['  *) echo "unknown PAYLOAD=$PAYLOAD (choose: ' + " ".join(
        n for n in names if with_accelerate or n != "accelerate") + ')" >&2; exit 2 ;;', "esac"]
    return lines
