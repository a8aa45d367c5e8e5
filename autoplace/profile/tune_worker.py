"""One `autoplace tune` worker: take one waiting trial of the study, run its candidate's proxies, report.

    python -m autoplace.profile.tune_worker --storage URL --study NAME --workdir DIR

The trial runs under `study.optimize(n_trials=1)`, so the RDB storage's heartbeat marks it while it
runs (a worker killed outside Python is failed by the next worker or tune once the grace period has
passed). The proxies run with torchrun (autoplace.profile.launch.run_plans) on this host's ranks;
the trial's value is the anchored step-time prediction of the full-size candidate; its user
attributes hold the proxy measurements, the anchoring terms and the observations the calibration
is fitted to. A proxy that fails, hangs or runs out of memory fails the trial with its error.

Test hook: AUTOPLACE_TUNE_FAULT="kill:I" makes the worker SIGKILL itself mid-trial on candidate I.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import sys
from pathlib import Path


class ProxyFailed(RuntimeError):
    """A proxy run did not end ok (failed, OOM, timeout); the trial is told FAIL with this message."""


def measure_candidate(cfg, index: int, workdir: Path) -> dict:
    """Run the proxies of candidate `index` and compute its anchored prediction."""
    from autoplace.estimate import estimate
    from autoplace.export.planfile import plan_document
    from autoplace.plan import Plan
    from autoplace.profile.launch import run_plans
    from autoplace.profile.proxy import anchored, anchored_device, device_scaled, proxy_of, robust_step_s
    from autoplace.profile.report import executed_plan, measured_peak, train_spec
    from autoplace.specs.hardware import load_hardware
    from autoplace.specs.model import ModelSpec
    model = ModelSpec(**cfg.model)
    hw = load_hardware(cfg.hardware)
    cand = cfg.candidates[index]
    plan = Plan.from_dict(cand["plan"]).resolved(cfg.world)
    s_full = dict(cfg.settings)
    layers = sorted(set(int(x) for x in cfg.proxy_layers))
    proxies, recs, docs, obs, jobs = [], [], [], [], []
    for L in layers:
        pr = proxy_of(model, plan, cfg.world, cfg.proxy_ranks, layers=L, global_batch=int(s_full["global_batch"]))
        s = dict(s_full, global_batch=pr.global_batch)
        tag = f"cand{index}-L{L}-pid{os.getpid()}"
        rec = run_plans(pr.model, [pr.plan], pr.world, backend=cfg.backend, settings=s, equivalence=False,
                        out_jsonl=workdir / f"{tag}.jsonl", workdir=workdir / tag,
                        plan_timeout_s=cfg.plan_timeout_s)[0]
        if rec["status"] != "ok":
            raise ProxyFailed(f"proxy {pr.describe()}: {rec['status']}: {str(rec.get('error'))[-1500:]}")
        pplan = executed_plan(pr.plan.resolved(pr.world))
        tr = train_spec(s, cfg.backend, pr.model)
        docs.append(estimate(pr.model, hw, tr, pplan, pr.world))
        jobs.append((pr.model, tr, pplan, pr.world))
        proxies.append(pr)
        rec["step_s"] = robust_step_s(rec, statistics.median)
        recs.append(rec)
        peak = max((measured_peak(r) or 0) for r in rec["ranks"]) or None
        obs.append({"plan": plan_document(pr.model, hw, tr, pplan, pr.world), "step_s": rec["step_s"],
                    "memory_bytes": peak, "memory_kind": "allocated" if peak else None,
                    "source": f"proxy {pr.describe()}", "framework": "autoplace-runner"})
    full_job = (model, train_spec(s_full, cfg.backend, model), executed_plan(plan), cfg.world)
    full_doc = estimate(model, hw, full_job[1], full_job[2], cfg.world)
    if len(layers) >= 2:
        table = {0: jobs[0], 1: jobs[-1], "full": full_job}

        def doc_of(which, k):
            m_, t_, p_, w_ = table[which]
            return estimate(m_, device_scaled(hw, k), t_, p_, w_)
        a = anchored_device(doc_of, (0, 1), (recs[0]["step_s"], recs[-1]["step_s"]), (layers[0], layers[-1]))
    else:
        a = anchored(full_doc, docs[0], recs[0]["step_s"])
    return {**a, "proxy": proxies[-1].describe(), "observations": obs,
            "proxy_peak_bytes": [o["memory_bytes"] for o in obs]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="autoplace.profile.tune_worker")
    ap.add_argument("--storage", required=True)
    ap.add_argument("--study", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--heartbeat", type=int, default=10)
    ap.add_argument("--grace", type=int, default=None)
    ap.add_argument("--trials", default=None, help="comma-separated trial numbers; array task i runs the i-th "
                    "(SLURM_ARRAY_TASK_ID): concurrent workers never pop the same waiting trial")
    args = ap.parse_args(argv)
    import optuna
    from optuna.trial import TrialState

    from autoplace.profile.tune import config_of, open_study
    study = open_study(args.storage, args.study, args.heartbeat, args.grace)
    optuna.storages.fail_stale_trials(study)
    if not study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
        print("no waiting trial", file=sys.stderr)
        return 0
    cfg = config_of(study)
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    fault = os.environ.get("AUTOPLACE_TUNE_FAULT", "")

    def objective(trial):
        fixed = trial.study._storage.get_trial_system_attrs(trial._trial_id).get("fixed_params")
        if not fixed:                                        # another worker took the last waiting trial
            raise optuna.TrialPruned("no candidate left for this worker")
        i = trial.suggest_categorical("candidate", list(range(len(cfg.candidates))))
        trial.set_user_attr("worker", {"host": socket.gethostname(), "pid": os.getpid(),
                                       "slurm_job": os.environ.get("SLURM_ARRAY_JOB_ID"),
                                       "slurm_task": os.environ.get("SLURM_ARRAY_TASK_ID")})
        if fault == f"kill:{i}":
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            r = measure_candidate(cfg, i, workdir)
        except Exception as e:
            trial.set_user_attr("error", f"{type(e).__name__}: {e}"[-3000:])
            raise
        for k, v in r.items():
            if k not in ("analytic_s", "anchored_s"):
                trial.set_user_attr(k, v)
        trial.set_user_attr("analytic_s", r["analytic_s"])
        print(f"candidate {i}: analytic {r['analytic_s']:.4g} s, anchored {r['anchored_s']:.4g} s", file=sys.stderr)
        return r["anchored_s"]

    if args.trials:
        nums = [int(x) for x in args.trials.split(",")]
        task = int(os.environ.get("SLURM_ARRAY_TASK_ID", "0"))
        if task >= len(nums):
            return 0
        return _run_assigned(study, nums[task], objective)
    study.optimize(objective, n_trials=1, catch=(Exception,))
    return 0


def _run_assigned(study, number: int, objective) -> int:
    """Run waiting trial `number` as `Study.optimize` runs a trial: claim it (WAITING → RUNNING, refused
    if another worker has it), heartbeat while the objective runs, tell COMPLETE or FAIL."""
    import optuna
    from optuna.storages._heartbeat import get_heartbeat_thread
    from optuna.trial import TrialState
    storage = study._storage
    ft = study.get_trials(deepcopy=False)[number]
    if ft.state != TrialState.WAITING or not storage.set_trial_state_values(ft._trial_id, TrialState.RUNNING):
        print(f"trial {number} is taken", file=sys.stderr)
        return 0
    trial = optuna.Trial(study, ft._trial_id)
    try:
        with get_heartbeat_thread(trial._trial_id, storage):
            value = objective(trial)
    except optuna.TrialPruned:
        study.tell(trial, state=TrialState.PRUNED)
        return 0
    except Exception as e:  # noqa: BLE001 - the trial records the error; the worker ends normally
        print(f"trial {number} failed: {e}", file=sys.stderr)
        study.tell(trial, state=TrialState.FAIL)
        return 0
    study.tell(trial, value)
    return 0


if __name__ == "__main__":
    sys.exit(main())
