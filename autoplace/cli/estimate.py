"""`autoplace estimate`: one plan's legality, memory per stage, communication and step time.

Exit codes (autoplace.errors): 0 legal and fits, 1 bad input, 2 illegal plan, 3 the plan does not
fit in memory, 64 usage error."""

from __future__ import annotations

from typing import List, Optional

import typer

from autoplace.cli.common import RUNTIME_SET_HELP, cli_errors, print_json


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
        from autoplace.api import EstimateRequest, resolve_estimate
        from autoplace.cli.visuals import check_outputs
        from autoplace.estimate import estimate as run
        req = EstimateRequest(
            model=model, gpus=gpus, plan=plan, plan_file=plan_file, from_file=from_, params=params,
            largest_layer=largest_layer, hardware=hardware, gpu_memory=gpu_memory, gpus_per_node=gpus_per_node,
            calibration=calibration, seq_len=seq_len, global_batch=global_batch, precision=precision,
            fp8_recipe=fp8_recipe, regime=regime, runtime=runtime, runtime_set=tuple(runtime_set or ()),
            attention=attention, dropout=dropout, moe_capacity_factor=moe_capacity_factor,
            states_only=states_only, headroom=headroom)
        m, hw, train, p, world, notes = resolve_estimate(req)
        for n in notes:
            typer.echo(f"--from: {n}", err=True)
        check_outputs(plot, report)
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
            from autoplace.cost.memory import HOST_USABLE
            mem = doc["memory"]
            if not as_json and mem.get("host_limit_bytes") and mem.get("host_bytes", 0) > mem["host_limit_bytes"] \
                    and mem["peak_bytes"] <= mem["limit_bytes"]:
                typer.echo(f"error: the plan does not fit host memory: {mem['host_bytes'] / 2**30:.2f} GiB offloaded "
                           f"per GPU > {mem['host_limit_bytes'] / 2**30:.2f} GiB (the node's host memory × "
                           f"{HOST_USABLE} / its ranks); offload less or use more GPUs", err=True)
            elif not as_json:
                typer.echo(f"error: the plan does not fit: peak {doc['memory']['peak_bytes'] / 2**30:.2f} GiB on stage "
                           f"{doc['memory']['binding_stage']} > limit {doc['memory']['limit_bytes'] / 2**30:.2f} GiB",
                           err=True)
            raise typer.Exit(EXIT_NO_FEASIBLE)
