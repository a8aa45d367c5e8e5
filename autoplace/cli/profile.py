"""`autoplace profile`: run one plan (or several) for real with torchrun and compare with the model.

Records go to `--out DIR/results.jsonl` (default a new `runs/profile-<model>-<N>g-<UTC stamp>/`,
git-ignored), appended as each plan finishes; the launches' job files and logs to `DIR/work/`.
"""

from __future__ import annotations

from typing import List, Optional

import typer

from autoplace.cli.common import check_gpus, cli_errors, print_json, resolve_model
from autoplace.profile.settings import DEFAULTS, SELECTIVE_POLICIES, SP_IMPLS


def register(app: typer.Typer) -> None:
    @app.command("profile")
    @cli_errors
    def profile(
        model: str = typer.Option("llama-tiny", "--model", "-m", help="preset or HF config.json (CPU: llama-tiny)"),
        gpus: int = typer.Option(2, "--gpus", "-n", help="ranks to launch on this node (torchrun --nproc-per-node)"),
        plan: List[str] = typer.Option(..., "--plan", help='plan, e.g. "tp=2,sp=1"; repeat for several'),
        backend: str = typer.Option("gloo", "--backend", help="gloo (CPU) | nccl (CUDA)"),
        steps: int = typer.Option(DEFAULTS["steps"], "--steps", help="timed steps (after the warm-up; +1 instrumented step)"),
        warmup: int = typer.Option(DEFAULTS["warmup"], "--warmup"),
        seq_len: int = typer.Option(DEFAULTS["seq_len"], "--seq-len"),
        global_batch: int = typer.Option(DEFAULTS["global_batch"], "--global-batch", help="sequences per step"),
        seed: int = typer.Option(DEFAULTS["seed"], "--seed"),
        lr: float = typer.Option(DEFAULTS["lr"], "--lr"),
        sp_impl: str = typer.Option(DEFAULTS["sp_impl"], "--sp-impl", help="megatron (save shard, re-gather) | dtensor"),
        selective_policy: Optional[str] = typer.Option(
            None, "--selective-policy",
            help="what recompute=selective runs: attention (Megatron: the attention core) | op-sac "
                 "(torchtitan op-level SAC); default: the torch-native runtime's memory.selective"),
        hardware: Optional[str] = typer.Option("local-cpu", "--hardware",
                                               help="profile for the predicted step time ('' to skip)"),
        out: Optional[str] = typer.Option(None, "--out", help="folder for results.jsonl (appended as plans finish) "
                                          "and the launch logs; default runs/profile-<model>-<N>g-<UTC>/"),
        timeout: float = typer.Option(600.0, "--timeout", help="seconds before a plan counts as hung"),
        no_equivalence: bool = typer.Option(False, "--no-equivalence", help="skip the single-process reference"),
        as_json: bool = typer.Option(False, "--json"),
    ):
        """Train plan(s) for a few steps under torchrun; measured vs predicted state bytes, activations,
        collective bytes per axis and step time; equivalence against a single-process run."""
        from pathlib import Path

        from autoplace._imports import require
        require("torch", "autoplace profile")
        from autoplace.errors import EXIT_REFUSED, InputError
        from autoplace.io import default_run_dir
        from autoplace.plan import parse_plan
        from autoplace.profile.launch import run_plans
        world = check_gpus(gpus)
        if backend not in ("gloo", "nccl"):
            raise InputError(f"--backend must be gloo or nccl, got '{backend}'")
        if sp_impl not in SP_IMPLS:
            raise InputError(f"--sp-impl must be {' or '.join(SP_IMPLS)}, got '{sp_impl}'")
        if selective_policy is not None and selective_policy not in SELECTIVE_POLICIES:
            raise InputError(f"--selective-policy must be {' or '.join(SELECTIVE_POLICIES)}, "
                             f"got '{selective_policy}'")
        m = resolve_model(model, None)
        plans = [parse_plan(p) for p in plan]
        settings = dict(seq_len=seq_len, global_batch=global_batch, steps=steps, warmup=warmup, seed=seed,
                        lr=lr, sp_impl=sp_impl, selective_policy=selective_policy)
        hw = hardware or None
        if hw:
            from autoplace.specs.hardware import resolve_profile_path
            hw = str(resolve_profile_path(hw))
        out_dir = Path(out) if out else default_run_dir("profile", m.name, world)
        if out_dir.exists() and not out_dir.is_dir():
            raise InputError(f"--out: '{out_dir}' is a file; give a folder (results go to DIR/results.jsonl)")
        recs = run_plans(m, plans, world, backend=backend, out_jsonl=out_dir / "results.jsonl", settings=settings,
                         hardware=hw, plan_timeout_s=timeout, equivalence=not no_equivalence,
                         workdir=out_dir / "work")
        if as_json:
            print_json(recs[0] if len(recs) == 1 else recs)
        else:
            typer.echo(render(recs))
            typer.echo(f"records in {out_dir / 'results.jsonl'}")
        if any(r["status"] != "ok" for r in recs):
            raise typer.Exit(EXIT_REFUSED)


def _mib(x):
    return "-" if x is None else f"{x / 2**20:.2f}"


def _peak(m):
    from autoplace.profile.report import measured_peak
    return measured_peak(m)


def _peak_pred(m, p):
    mem = p.get("memory") or {}
    return mem.get("reserved" if m.get("peak_reserved_bytes") else "allocated")


def render(recs) -> str:
    out = []
    for r in recs:
        out.append(f"plan {r['plan_short']}  status={r['status']}  legal={r['legal']}"
                   + (f"  violations={[v['rule'] for v in r['violations']]}" if r["violations"] else ""))
        if r["status"] != "ok":
            out.append("  error: " + str(r["error"]).strip().splitlines()[-1][:300])
            continue
        eq = r.get("equivalence") or {}
        out.append(f"  state bytes exact: {r['state_bytes_exact']}   activation gap: "
                   f"{100 * (r['activation_gap'] or 0):+.2f}%   equivalent: {eq.get('equivalent')} "
                   f"(max |Δ| {eq.get('max_abs_diff', float('nan')):.2e} over {eq.get('steps')} steps)"
                   + (f"   peak gap: {100 * r['peak_memory_gap']:+.2f}%" if r.get("peak_memory_gap") is not None
                      else ""))
        out.append("  rank stage  P/G/O MiB meas | pred            act MiB meas|pred   comm MiB (dp,tp,pp) "
                   "meas | pred        step s meas|pred   peak MiB meas|pred")
        for m, p in zip(r["ranks"], r["predicted"]):
            sb, ps = m["state_bytes"], p["state_bytes"]
            cb, pc = m.get("collective_bytes") or {}, p.get("collective_bytes") or {}
            out.append(
                f"  {m['rank']:>4} {m['stage']:>5}  {_mib(sb['params'])}/{_mib(sb['grads'])}/{_mib(sb['optimizer'])} | "
                f"{_mib(ps['params'])}/{_mib(ps['grads'])}/{_mib(ps['optimizer'])}   "
                f"{_mib(m['activation_bytes'])}|{_mib(p['activation_bytes'])}   "
                f"{','.join(_mib(cb.get(a)) for a in ('dp', 'tp', 'pp'))} | "
                f"{','.join(_mib(pc.get(a)) for a in ('dp', 'tp', 'pp'))}   "
                f"{m['step_s']:.3f}|{(p.get('step_s') or float('nan')):.3f}   "
                f"{_mib(_peak(m))}|{_mib(_peak_pred(m, p))}")
    return "\n".join(out)
