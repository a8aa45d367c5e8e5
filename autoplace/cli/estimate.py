"""`autoplace estimate`: one plan's legality, memory per stage, communication and step time.

Exit codes (autoplace.errors): 0 legal and fits, 1 bad input, 2 illegal plan, 3 the plan does not
fit in memory, 64 usage error."""

from __future__ import annotations

from dataclasses import replace
from typing import List, Optional

import typer

from autoplace.analysis.common import build_training, training_from_config
from autoplace.cli.common import (
    RUNTIME_SET_HELP,
    check_gpus,
    cli_errors,
    print_json,
    resolve_hardware,
    resolve_model,
    resolve_runtime,
)


def register(app: typer.Typer) -> None:
    @app.command()
    @cli_errors
    def estimate(
        model: Optional[str] = typer.Option(None, "--model", "-m", help="preset (13b, llama3-70b, …) or HF config.json path"),
        params: Optional[str] = typer.Option(None, "--params", help="bare parameter count, e.g. 7.5e9 (model states only)"),
        largest_layer: Optional[float] = typer.Option(None, "--largest-layer", help="Ψ_max with --params (DeepSpeed estimator term)"),
        gpus: Optional[int] = typer.Option(None, "--gpus", "-n", help="total GPUs (world size); not needed with --plan-file"),
        gpus_per_node: Optional[int] = typer.Option(None, "--gpus-per-node"),
        hardware: Optional[str] = typer.Option(None, "--hardware", help="profile name or .toml path"),
        calibration: Optional[str] = typer.Option(None, "--calibration", help="a calibration file (autoplace "
                                                  "calibrate --from-log / autoplace tune): its corrections apply"),
        gpu_memory: Optional[str] = typer.Option(None, "--gpu-memory", help="override device memory, e.g. 40GiB"),
        seq_len: Optional[int] = typer.Option(None, "--seq-len"),
        global_batch: Optional[int] = typer.Option(None, "--global-batch", help="sequences per step"),
        precision: Optional[str] = typer.Option(None, "--precision", help="bf16 (default), fp16, fp8, fp4, fp32"),
        fp8_recipe: Optional[str] = typer.Option(None, "--fp8-recipe", help="FP8/FP4 recipe: current (FP8-CS), delayed, blockwise, mxfp8, nvfp4 (Transformer Engine), tensorwise, rowwise (torchao); default: the runtime's first the GPU runs"),
        regime: Optional[str] = typer.Option(None, "--optimizer-regime", help="bytes/param regime (zero, megatron-bf16, …); default: the runtime's, else zero"),
        runtime: Optional[str] = typer.Option(None, "--runtime", help="runtime physics (megatron-core, torchtitan, deepspeed, …)"),
        runtime_set: Optional[List[str]] = typer.Option(None, "--runtime-set", help=RUNTIME_SET_HELP),
        attention: str = typer.Option("flash", "--attention", help="flash | eager"),
        dropout: bool = typer.Option(False, "--dropout/--no-dropout"),
        moe_capacity_factor: float = typer.Option(0.0, "--moe-capacity-factor", help="MoE expert capacity factor (token dropping, sync-free dispatch); 0 = dropless, which syncs device → host once per MoE layer"),
        plan: Optional[str] = typer.Option(None, "--plan", help='e.g. "tp=8,pp=4,zero=1,sp=1,recompute=selective,mbs=1"'),
        plan_file: Optional[str] = typer.Option(None, "--plan-file", help="plan.json written by search --emit"),
        from_: Optional[str] = typer.Option(None, "--from", metavar="FILE",
                                            help="the launcher config you have: Megatron-LM args or launch script, "
                                                 "DeepSpeed .json, torchtitan .toml, accelerate .yaml"),
        states_only: bool = typer.Option(False, "--states-only", help="P+G+O memory and DP traffic only (ZeRO accounting)"),
        headroom: float = typer.Option(0.0, "--memory-headroom", help="fraction of memory kept free"),
        as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
        plot: Optional[str] = typer.Option(None, "--plot", help="write PNG pictures (memory, step time, pipeline timeline) to DIR"),
        report: Optional[str] = typer.Option(None, "--report", help="write a self-contained HTML report to FILE.html"),
    ):
        """Memory per pipeline stage, communication per axis and step time of one plan."""
        from autoplace.estimate import estimate as run
        from autoplace.plan import parse_plan
        if from_:
            from autoplace.errors import InputError
            from autoplace.export import from_config
            if plan or plan_file:
                raise InputError("give one of --from, --plan, --plan-file")
            m, fc, notes = from_config.resolve(from_, model=model, gpus=gpus, gpus_per_node=gpus_per_node or 8)
            world, p = fc.world, fc.plan()
            hw = resolve_hardware(hardware, gpu_memory, gpus_per_node)
            rt = resolve_runtime(runtime, runtime_set) if (runtime or runtime_set) else None
            if runtime_set and runtime is None:
                rt = resolve_runtime(fc.runtime, runtime_set)
            train = training_from_config(fc, m, seq_len=seq_len, global_batch=global_batch, precision=precision,
                                         regime=regime, runtime=rt, fp8_recipe=fp8_recipe or "")
            train = replace(train, attention=attention, dropout=dropout)
            for n in notes:
                typer.echo(f"--from: {n}", err=True)
        elif plan_file:
            from autoplace.errors import InputError
            from autoplace.export.planfile import read_plan_file
            if plan:
                raise InputError("give either --plan or --plan-file, not both")
            if model or params or largest_layer is not None:
                raise InputError("--plan-file fixes the model; drop --model/--params/--largest-layer "
                                 "(or estimate with --model ... --plan ...)")
            m, hw, train, p, world, _ = read_plan_file(plan_file)
            if gpus is not None and gpus != world:
                raise InputError(f"--gpus {gpus} disagrees with the plan file's {world} GPUs; drop --gpus "
                                 "(the plan file fixes the GPU count)")
            # the options given override the file's values
            if hardware:
                hw = resolve_hardware(hardware, gpu_memory, gpus_per_node)
            elif gpu_memory or gpus_per_node is not None:
                from autoplace.resolve import hardware_overrides
                from autoplace.specs.hardware import override_hardware
                hw = override_hardware(hw, **hardware_overrides(gpu_memory, gpus_per_node))
            rebuild = runtime is not None or precision is not None or regime is not None or fp8_recipe is not None
            if rebuild:
                rt = resolve_runtime(runtime, runtime_set) if runtime is not None else (
                    train.runtime if train.runtime is not None else None)
                t2, _ = build_training(m, seq_len or train.seq_len, global_batch or train.global_batch, None,
                                       precision or train.precision, regime if regime is not None else (
                                           None if runtime is not None else train.regime), world, runtime=rt,
                                       fp8_recipe=fp8_recipe if fp8_recipe is not None else (
                                           "" if precision is not None or runtime is not None else train.fp8_recipe))
                train = replace(t2, attention=train.attention, dropout=train.dropout, states_only=train.states_only)
            else:
                if seq_len is not None:
                    if seq_len < 1:
                        raise InputError(f"--seq-len must be ≥ 1, got {seq_len}")
                    train = replace(train, seq_len=seq_len)
                if global_batch is not None:
                    if global_batch < 1:
                        raise InputError(f"--global-batch must be ≥ 1, got {global_batch}")
                    train = replace(train, global_batch=global_batch)
            if runtime_set and runtime is None:
                from autoplace.runtimes.switches import apply_settings
                train = replace(train, runtime=apply_settings(train.rt, runtime_set))
        else:
            from autoplace.errors import InputError
            if gpus is None:
                raise InputError("--gpus is required (the world size), e.g. --gpus 64; or give --plan-file")
            world = check_gpus(gpus)
            m = resolve_model(model, params, largest_layer)
            hw = resolve_hardware(hardware, gpu_memory, gpus_per_node)
            p = parse_plan(plan)
            if global_batch is None and (states_only or m.states_only):
                r = p.resolved(world)     # ZeRO accounting: no gradient accumulation (m = 1)
                global_batch = max(r.dp, 1) * r.mbs
            train, _ = build_training(m, seq_len, global_batch, None, precision or "bf16", regime, world,
                                      runtime=resolve_runtime(runtime, runtime_set), fp8_recipe=fp8_recipe)
            train = replace(train, attention=attention, dropout=dropout, states_only=states_only,
                            moe_capacity_factor=moe_capacity_factor)
        from autoplace.cli.visuals import check_outputs
        check_outputs(plot, report)
        if calibration:
            from autoplace.profile.corrections import apply_to_hardware
            hw = apply_to_hardware(hw, calibration)
        doc = run(m, hw, train, p, world, headroom)
        if as_json:
            print_json(doc)
        else:
            from autoplace.report import render_estimate
            render_estimate(doc)
        if plot or report:
            from autoplace.cli.visuals import estimate_visuals
            estimate_visuals(m, hw, train, p, world, doc, plot, report)
        from autoplace.errors import EXIT_ILLEGAL, EXIT_NO_FEASIBLE
        if not doc["legal"]:
            raise typer.Exit(EXIT_ILLEGAL)
        if not doc["memory"]["fits"] and not doc["training"]["states_only"]:   # --states-only: accounting
            if not as_json:
                typer.echo(f"error: the plan does not fit: peak {doc['memory']['peak_bytes'] / 2**30:.2f} GiB on stage "
                           f"{doc['memory']['binding_stage']} > limit {doc['memory']['limit_bytes'] / 2**30:.2f} GiB",
                           err=True)
            raise typer.Exit(EXIT_NO_FEASIBLE)
