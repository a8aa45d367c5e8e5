"""`autoplace calibrate`: micro-benchmarks under torchrun → a fitted hardware profile TOML; or
`--from-log LOG --plan plan.json` → the cluster calibration file (autoplace.profile.corrections);
`--show FILE` prints what a calibration file changes."""

from __future__ import annotations

from typing import List, Optional

import typer

from autoplace.cli.common import cli_errors


def register(app: typer.Typer) -> None:
    @app.command("calibrate")
    @cli_errors
    def calibrate(
        backend: str = typer.Option("gloo", "--backend", help="gloo (CPU) | nccl (CUDA)"),
        nproc: int = typer.Option(2, "--nproc", help="ranks per node (torchrun --nproc-per-node)"),
        nnodes: int = typer.Option(1, "--nnodes", help="nodes; > 1 writes the SLURM template and commands"),
        out: Optional[str] = typer.Option(None, "--out", help="profile TOML to write (accepted by --hardware); "
                                          "with --from-log: the calibration file (runs already in it are kept)"),
        from_log: List[str] = typer.Option([], "--from-log", help="a Megatron-LM/-Bridge, torchtitan or DeepSpeed "
                                           "training log; repeat with one --plan each"),
        plan_file: List[str] = typer.Option([], "--plan", help="the plan.json the logged run trained (one per --from-log)"),
        log_format: Optional[str] = typer.Option(None, "--log-format", help="megatron | torchtitan | deepspeed "
                                                 "(default: detected)"),
        show: Optional[str] = typer.Option(None, "--show", help="print what a calibration file changes and exit"),
        name: Optional[str] = typer.Option(None, "--name", help="profile name (default: calibrated-…)"),
        quick: bool = typer.Option(False, "--quick", help="fewer shapes/sizes (seconds instead of minutes)"),
        raw: Optional[str] = typer.Option(None, "--raw", help="also keep the raw measurements JSON here"),
        fit: Optional[str] = typer.Option(None, "--fit", help="fit a RAW.json (from a multi-node run) instead"),
        slurm: Optional[str] = typer.Option(None, "--slurm", help="write the sbatch template here"),
        rdzv_endpoint: str = typer.Option("$HEAD_NODE", "--rdzv-endpoint-host", help="head node in the commands"),
        partition: Optional[str] = typer.Option(None, "--partition"),
        timeout: float = typer.Option(1800.0, "--timeout"),
        no_probes: bool = typer.Option(False, "--no-probes", help="micro-benchmarks only: skip the probe "
                                       "training runs that refine kernel overhead, GEMM efficiency, "
                                       "collective latency and step overhead"),
    ):
        """Benchmark GEMMs, attention, memory-bound kernels, collectives (sizes × group sizes), P2P and
        host copies; fit the cost model's hardware parameters; write a profile TOML."""
        from pathlib import Path

        from autoplace._imports import require
        require("torch", "autoplace calibrate")
        from autoplace.errors import InputError
        from autoplace.profile import calibrate as calibration
        if show:
            from autoplace.profile.corrections import describe, load_calibration
            typer.echo("\n".join(describe(load_calibration(show, "--show"))))
            return
        if from_log:
            _from_logs(from_log, plan_file, out, log_format)
            return
        if not out:
            raise InputError("--out is required: the profile TOML to write (or pass --from-log / --show)")
        if backend not in ("gloo", "nccl"):
            raise InputError(f"--backend must be gloo or nccl, got '{backend}'")
        if nproc < 1 or nnodes < 1:
            raise InputError("--nproc and --nnodes must be ≥ 1")
        raw_name = raw or "calib_raw.json"
        if slurm or nnodes > 1:
            path = Path(slurm or "autoplace-calibrate.sbatch")
            from autoplace.io import atomic_write
            atomic_write(path, calibration.slurm_template(nnodes, nproc, backend, out, raw_name, partition,
                                                          quick=quick)).chmod(0o755)
            typer.echo(f"wrote SLURM template {path} (sbatch {path})")
            typer.echo("or run on each node:")
            for line in calibration.torchrun_command_lines(nnodes, nproc, backend, raw_name, rdzv_endpoint, quick=quick):
                typer.echo("  " + line)
            if nnodes > 1 and not fit:
                return
        if fit:
            from autoplace.io import read_json
            prof = calibration.write_profile(read_json(fit, "--fit", "pass the RAW.json a calibration run wrote"), out, name)
        else:
            prof = calibration.calibrate(backend, nproc, out, quick=quick, name=name, raw_out=raw, timeout_s=timeout,
                               probes=not no_probes)
        f = prof["_fit"]
        typer.echo(f"wrote {out}: fp32 {prof['peak_flops'].get('fp32', 0) / 1e9:.1f} GFLOP/s peak "
                   f"(η_gemm {prof['gemm_efficiency']:.2f}), memory {prof['hbm_bw'] / 1e9:.1f} GB/s, "
                   f"kernel {prof['kernel_overhead_s'] * 1e6:.1f} µs, collectives "
                   f"{prof['intra_bw'] / 1e9:.2f} GB/s + {prof['intra_latency'] * 1e6:.0f} µs/step "
                   f"(median fit error {100 * (f['intra'].get('median_rel_err') or 0):.0f}%), reduce-scatter "
                   f"×{prof.get('rs_cost_factor', 1.0):.2f}, overlap {prof.get('comm_overlap', 1.0):.2f}")
        pr = f.get("probes") or {}
        if pr.get("used"):
            typer.echo(f"refined on {len(pr['plans'])} probe runs ({pr['model']}): log-error rms "
                       f"{pr['log_residual_rms_before']:.2f} → {pr['log_residual_rms_after']:.2f}; "
                       + ", ".join(f"{k} {pr['micro'][k]:.3g} → {pr['refined'][k]:.3g}" for k in pr["refined"]))


def _from_logs(logs, plans, out, log_format) -> None:
    """Read each log against its plan file, add the runs to the calibration at `out`, refit, print."""
    from pathlib import Path

    from autoplace.errors import InputError
    from autoplace.export.planfile import read_plan_file
    from autoplace.io import read_json
    from autoplace.profile import corrections as C
    from autoplace.profile.logs import parse_log
    if not out:
        raise InputError("--out is required with --from-log: the calibration file to write (JSON)")
    if len(plans) != len(logs):
        raise InputError(f"--plan: give one plan.json per --from-log ({len(logs)} log(s), {len(plans)} plan(s))")
    obs = []
    if Path(out).exists():
        obs = list(C.load_calibration(out, "--out").observations)
    for log, pf in zip(logs, plans):
        lp = Path(log)
        if not lp.is_file():
            raise InputError(f"--from-log: '{lp}' is not a file")
        model, hw, train, plan, world, _ = read_plan_file(pf)
        doc = read_json(Path(pf) / "plan.json" if Path(pf).is_dir() else pf, "--plan")
        m = parse_log(lp.read_text(errors="replace"), global_batch=train.global_batch, seq_len=train.seq_len,
                      world=world, framework=log_format, where=f"--from-log {lp}")
        typer.echo(f"{lp.name}: {m.framework} log, {len(m.step_s_samples)} interval(s), step {m.step_s:.4g} s"
                   + (f", peak {m.memory_kind} {m.memory_bytes / 2**30:.2f} GiB" if m.memory_bytes else ""))
        obs.append(C.Observation(doc, m.step_s, m.memory_bytes, m.memory_kind, source=lp.name, framework=m.framework))
    cal = C.fit(obs)
    C.save_calibration(cal, out)
    typer.echo("\n".join(C.describe(cal)))
    typer.echo(f"wrote {out} (use: autoplace search/estimate --calibration {out})")
