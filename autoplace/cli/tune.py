"""`autoplace tune`: search, run proxies of K candidates, re-rank by anchored prediction, calibrate."""

from __future__ import annotations

from typing import Optional

import typer

from autoplace.cli.common import check_gpus, cli_errors, print_json, resolve_hardware, resolve_model


def register(app: typer.Typer) -> None:
    @app.command("tune")
    @cli_errors
    def tune(
        model: str = typer.Option(..., "--model", "-m", help="preset or HF config.json"),
        gpus: int = typer.Option(..., "--gpus", "-n", help="GPUs of the full job (world size)"),
        hardware: Optional[str] = typer.Option(None, "--hardware", help="profile name or .toml"),
        gpus_per_node: Optional[int] = typer.Option(None, "--gpus-per-node"),
        seq_len: Optional[int] = typer.Option(None, "--seq-len"),
        global_batch: Optional[int] = typer.Option(None, "--global-batch", help="sequences per step"),
        measure: int = typer.Option(3, "--measure", "-k", help="candidates to run proxies of"),
        proxy_ranks: int = typer.Option(2, "--proxy-ranks", help="ranks a proxy runs on (GPUs of one node)"),
        proxy_layers: str = typer.Option("1,2", "--proxy-layers", help="layer counts of the proxies (two: "
                                         "measured per-layer slope and intercept; one: a ratio)"),
        backend: str = typer.Option("gloo", "--backend", help="gloo (CPU) | nccl (CUDA)"),
        steps: int = typer.Option(3, "--steps", help="timed steps of each proxy"),
        executor: str = typer.Option("local", "--executor", help="local (torchrun here) | slurm (sbatch job array)"),
        storage: Optional[str] = typer.Option(None, "--storage", help="Optuna storage: sqlite:///PATH (default "
                                              "OUT/tune.db), postgresql://USER@HOST/DB, or journal:PATH"),
        study_name: Optional[str] = typer.Option(None, "--study", help="study name (default: tune-MODEL-NgGPUs)"),
        out: str = typer.Option("tune-out", "--out", help="folder: calibration.json, results.json, logs"),
        timeout: float = typer.Option(900.0, "--timeout", help="seconds a worker may run (one candidate)"),
        heartbeat: int = typer.Option(10, "--heartbeat", help="seconds between a running trial's heartbeats"),
        grace: Optional[int] = typer.Option(None, "--grace", help="seconds without a heartbeat before a "
                                            "trial counts as dead (default 3 × heartbeat)"),
        max_attempts: int = typer.Option(2, "--max-attempts", help="failed trials after which a candidate "
                                         "is not retried"),
        partition: Optional[str] = typer.Option(None, "--partition", help="SLURM partition"),
        as_json: bool = typer.Option(False, "--json"),
    ):
        """Search, pick K fast and different candidates, run their proxies (few layers of one stage, same
        per-rank shapes, DP shrunk) through an Optuna study, re-rank by the anchored prediction and
        write the cluster calibration. Re-running on the same --storage/--study resumes."""
        import sys
        from pathlib import Path

        from autoplace.errors import InputError
        from autoplace.profile import tune as T
        world = check_gpus(gpus)
        if executor not in T.EXECUTORS:
            raise InputError(f"--executor must be one of {', '.join(T.EXECUTORS)}, got '{executor}'")
        if backend not in ("gloo", "nccl"):
            raise InputError(f"--backend must be gloo or nccl, got '{backend}'")
        if measure < 1 or proxy_ranks < 1:
            raise InputError("--measure and --proxy-ranks must be ≥ 1")
        try:
            layers = sorted({int(x) for x in proxy_layers.split(",") if x.strip()})
        except ValueError:
            raise InputError(f"--proxy-layers: comma-separated layer counts, e.g. 1,2; got '{proxy_layers}'") from None
        if not layers or layers[0] < 1 or len(layers) > 2:
            raise InputError(f"--proxy-layers: one or two positive layer counts, got '{proxy_layers}'")
        out_dir = Path(out)
        out_dir.mkdir(parents=True, exist_ok=True)
        work = out_dir / "work"
        work.mkdir(exist_ok=True)
        m = resolve_model(model, None, allow_params=False)
        hw = resolve_hardware(hardware, None, gpus_per_node)
        url = T.storage_url(storage, out_dir)
        name = study_name or f"tune-{m.name}-{world}g".replace(" ", "_")

        def log(msg):
            print(msg, file=sys.stderr, flush=True)

        study = T.open_study(url, name, heartbeat, grace)
        import optuna
        optuna.storages.fail_stale_trials(study)
        if "config" not in study.user_attrs:
            cfg = _new_config(m, hw, world, seq_len, global_batch, measure, proxy_ranks, layers, backend, steps,
                              timeout, log)
            study.set_user_attr("config", cfg.to_dict())
        else:
            cfg = T.config_of(study)
            if cfg.world != world or cfg.model.get("name") != m.name:
                raise InputError(f"--study {name}: the study tunes {cfg.model.get('name')} on {cfg.world} GPUs; "
                                 "pass another --study for this job")
            log(f"resuming study '{name}' ({len(study.trials)} trial(s) so far)")
        pending = T.enqueue_pending(study, len(cfg.candidates), max_attempts)
        log(f"{len(cfg.candidates)} candidate(s); running {len(pending)}: {pending} with the {executor} executor")
        if pending:
            if executor == "local":
                T.run_local(study, url, len(pending), work, heartbeat_s=heartbeat, grace_s=grace, timeout_s=timeout,
                            log=log)
            else:
                T.run_slurm(study, url, len(pending), work, heartbeat_s=heartbeat, grace_s=grace, timeout_s=timeout,
                            partition=partition, gpus=proxy_ranks if backend == "nccl" else 0, log=log)
        rows = T.results(study)
        doc = {"study": name, "storage": url, "hardware": hw.name, "world": world, "candidates": rows}
        obs = T.observations(study)
        if obs:
            from autoplace.profile import corrections as C
            cal = C.fit(obs)
            C.save_calibration(cal, out_dir / "calibration.json")
            doc["calibration"] = str(out_dir / "calibration.json")
            doc["calibration_lines"] = C.describe(cal)
        import json

        from autoplace.io import atomic_write, to_jsonable
        atomic_write(out_dir / "results.json", json.dumps(to_jsonable(doc), indent=2) + "\n")
        if as_json:
            print_json(doc)
        else:
            typer.echo(render(rows))
            for line in doc.get("calibration_lines", []):
                typer.echo(line)
            typer.echo(f"study '{name}' in {url}; results {out_dir / 'results.json'}")


def _new_config(m, hw, world, seq_len, global_batch, k, proxy_ranks, layers, backend, steps, timeout, log):
    from autoplace.errors import InputError
    from autoplace.profile import tune as T
    from autoplace.profile.report import executed_plan, train_spec
    from autoplace.profile.settings import DEFAULTS
    from autoplace.search import launchers as LS
    log(f"search {m.name} on {world} × {hw.name} (fp32, the runner's precision)")
    outcome = LS.search(m, hw, world, seq_len=seq_len, global_batch=global_batch, precision="fp32",
                        top_k=256)
    train = outcome.ranked[0][2].train
    settings = dict(DEFAULTS, seq_len=int(train.seq_len), global_batch=int(train.global_batch), steps=steps)

    def fits(p):
        return T.proxy_runnable(m, p, world, proxy_ranks, layers, int(train.global_batch), backend, settings)

    ranked = [(p.resolved(world), s) for p, s, _ in outcome.ranked]
    picked = T.pick_candidates(ranked, k, fits)
    if not picked:
        raise InputError(f"no candidate of the search has a proxy the runner can run on {proxy_ranks} "
                         f"{backend} rank(s) (tp·cp too large, or a feature the runner lacks); raise --proxy-ranks")
    from autoplace.estimate import estimate
    cands = []
    for j, i in enumerate(picked):
        p, s = ranked[i]
        d = estimate(m, hw, train_spec(settings, backend, m), executed_plan(p), world)
        cands.append({"index": j, "plan": p.to_dict(), "short": p.short(), "search_s": float(s),
                      "analytic_s": d["time"]["step_s"] if "time" in d else float(s)})
    import dataclasses
    return T.TuneConfig(model=dataclasses.asdict(m), hardware=str(getattr(hw, "source", hw.name)), world=world,
                        settings=settings, backend=backend, proxy_ranks=proxy_ranks, proxy_layers=list(layers),
                        candidates=cands, plan_timeout_s=float(timeout))


def render(rows) -> str:
    head = ("#", "plan", "analytic s", "anchored s", "rank", "status")
    lines = [head]
    for r in rows:
        lines.append((str(r["index"]), r["plan"], f"{r['analytic_s']:.4g}",
                      f"{r['anchored_s']:.4g}" if r.get("anchored_s") is not None else "-",
                      str(r.get("anchored_rank", "-")),
                      r["status"] + (f": {str(r.get('error'))[:70]}" if r.get("error") else "")))
    w = [max(len(x[i]) for x in lines) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w[i]) for i, c in enumerate(row)) for row in lines)
