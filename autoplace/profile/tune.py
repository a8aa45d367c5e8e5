"""`autoplace tune`: search, measure proxies of a few candidates, re-rank by anchored prediction.

The flow (`tune`):

1. search (autoplace.search.launchers.search) on the full cluster in the runner's precision;
2. pick K candidates that are fast and differ from each other (`pick_candidates`: the fastest, then
   repeatedly the plan among those within `slack` of the fastest that differs most from those
   picked — TP, PP, CP, EP, ZeRO, recompute, micro-batch, VPP, SP), each with a proxy that fits
   the proxy ranks (autoplace.profile.proxy);
3. one Optuna trial per candidate: the study (`open_study`: an RDB URL — SQLite by default,
   PostgreSQL when several hosts work one study — or `journal:PATH`, Optuna's journal file on a
   shared filesystem) holds the candidates (study user attribute `config`) and the trials; the
   tune enqueues a trial per candidate not yet measured (`enqueue_pending`) and an executor runs
   workers (`python -m autoplace.profile.tune_worker`), each taking one waiting trial;
4. re-rank the measured candidates by anchored prediction; fit the calibration (autoplace.profile.
   corrections) to the proxies' measurements.

Failure handling, on the engines' own mechanisms: a worker that raises (a proxy that failed, ran
out of memory or hung past its timeout) tells its trial FAIL with the error in the trial's user
attribute `error`. A worker killed outside Python (SIGKILL, `scancel`, node loss) leaves its trial
RUNNING: the RDB storage's heartbeat (`heartbeat_interval`, `grace_period`) lets the next worker or
tune fail it (`optuna.storages.fail_stale_trials`), and each executor fails at once the trials of
the workers it saw end without reporting (local: the process's exit status; SLURM: the array task
left the queue). A later `tune` on the same storage and study resumes: candidates with a COMPLETE
trial are not run again, others are retried until `max_attempts` trials have failed.
"""

from __future__ import annotations

import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from autoplace.errors import InputError

EXECUTORS = ("local", "slurm")
DIFF_FIELDS = ("tp", "pp", "cp", "ep", "zero", "recompute", "mbs", "vpp", "sp", "dp_replicate")


# ---- storage -----------------------------------------------------------------------------------
def storage_url(storage: str | None, out_dir: Path) -> str:
    """--storage as given (default: sqlite:///OUT/tune.db); a bare postgresql:// URL names the driver
    that is installed (SQLAlchemy 2.1 defaults to psycopg 3; psycopg2 when only it is there)."""
    if not storage:
        return f"sqlite:///{(out_dir / 'tune.db').resolve()}"
    return _driver_url(storage)


def _driver_url(url: str) -> str:
    if url.startswith("postgresql://"):
        import importlib.util
        if importlib.util.find_spec("psycopg") is None and importlib.util.find_spec("psycopg2") is not None:
            return "postgresql+psycopg2://" + url[len("postgresql://"):]
    return url


def open_storage(url: str, heartbeat_s: int = 10, grace_s: int | None = None):
    """Optuna storage for --storage: `journal:PATH`, or an RDB URL (sqlite:///…, postgresql://…)."""
    import warnings

    import optuna
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    if url.startswith("journal:"):
        from optuna.storages.journal import JournalFileBackend
        return optuna.storages.JournalStorage(JournalFileBackend(url[len("journal:"):]))
    if not (url.startswith("sqlite:") or url.startswith("postgresql") or url.startswith("mysql")):
        raise InputError(f"--storage: '{url}' is neither an RDB URL (sqlite:///PATH, postgresql://USER@HOST/DB) "
                         "nor journal:PATH")
    url = _driver_url(url)
    try:
        return optuna.storages.RDBStorage(url, heartbeat_interval=heartbeat_s,
                                          grace_period=grace_s or 3 * heartbeat_s)
    except ModuleNotFoundError as e:
        raise InputError(f"--storage: the database driver is not installed ({e.name}); "
                         "pip install psycopg2-binary for PostgreSQL") from None
    except Exception as e:  # noqa: BLE001 - SQLAlchemy's connection errors: one line for the user
        raise InputError(f"--storage: cannot open '{url}': {str(e).splitlines()[0][:200]}") from None


def open_study(url: str, name: str, heartbeat_s: int = 10, grace_s: int | None = None):
    import optuna
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(storage=open_storage(url, heartbeat_s, grace_s), study_name=name,
                               direction="minimize", load_if_exists=True)


# ---- candidates --------------------------------------------------------------------------------
def _dist(a, b) -> int:
    return sum(getattr(a, f) != getattr(b, f) for f in DIFF_FIELDS)


def proxy_runnable(model, plan, world: int, ranks: int, layers, global_batch: int, backend: str,
                   settings: dict) -> bool:
    """The plan has proxies on `ranks` ranks (TP·CP fit) that the plan runner can run here."""
    from autoplace.profile.capabilities import runner_refusals
    from autoplace.profile.proxy import proxy_of
    for L in layers:
        try:
            pr = proxy_of(model, plan, world, ranks, layers=L, global_batch=global_batch)
        except ValueError:
            return False
        s = dict(settings, global_batch=pr.global_batch)
        if runner_refusals(pr.plan.resolved(pr.world), pr.model, s, backend, world=pr.world):
            return False
    return True


def pick_candidates(ranked: list, k: int, fits, slack: float = 1.5) -> list[int]:
    """Indices into ranked [(plan, step_s)]: the fastest, then the plan within `slack` × the fastest
    step that differs most from those picked (ties: the faster). `fits(plan)`: its proxy can run."""
    ok = [i for i, (p, _s) in enumerate(ranked) if fits(p)]
    if not ok:
        return []
    best = ranked[ok[0]][1]
    pool = [i for i in ok if ranked[i][1] <= slack * best]
    picked = [pool[0]]
    while len(picked) < k and len(picked) < len(pool):
        cand = max((i for i in pool if i not in picked),
                   key=lambda i: (min(_dist(ranked[i][0], ranked[j][0]) for j in picked), -ranked[i][1]))
        picked.append(cand)
    return picked


@dataclass
class TuneConfig:
    """What every worker needs (stored in the study's user attribute `config`)."""
    model: dict
    hardware: str
    world: int
    settings: dict
    backend: str
    proxy_ranks: int
    proxy_layers: list
    candidates: list = field(default_factory=list)     # [{index, plan, short, analytic_s}]
    plan_timeout_s: float = 600.0

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def config_of(study) -> TuneConfig:
    d = study.user_attrs.get("config")
    if d is None:
        raise InputError(f"study '{study.study_name}' holds no tune configuration (not made by autoplace tune)")
    return TuneConfig(**d)


def candidate_of(t) -> int | None:
    """The candidate a trial measures: its parameter, or (a trial that died before asking) the one it
    was enqueued with."""
    i = t.params.get("candidate", (t.system_attrs.get("fixed_params") or {}).get("candidate"))
    return None if i is None else int(i)


def enqueue_pending(study, n_candidates: int, max_attempts: int = 2) -> list[int]:
    """Enqueue one trial per candidate without a COMPLETE, WAITING or RUNNING trial and with fewer than
    `max_attempts` failed ones; the indices enqueued."""
    from optuna.trial import TrialState
    by: dict = {}
    for t in study.get_trials(deepcopy=False):
        i = candidate_of(t)
        if i is not None:
            by.setdefault(i, []).append(t.state)
    out = []
    for i in range(n_candidates):
        st = by.get(i, [])
        if any(s in (TrialState.COMPLETE, TrialState.WAITING, TrialState.RUNNING) for s in st):
            continue
        if sum(s == TrialState.FAIL for s in st) >= max_attempts:
            continue
        study.enqueue_trial({"candidate": i}, user_attrs={"attempt": 1 + sum(s == TrialState.FAIL for s in st)})
        out.append(i)
    return out


def fail_trial(study, number: int, error: str) -> None:
    """Tell a RUNNING trial FAIL with `error` (a worker that died without reporting)."""
    from optuna.trial import TrialState
    t = study.get_trials(deepcopy=False)[number]
    if t.state != TrialState.RUNNING:
        return
    study._storage.set_trial_user_attr(t._trial_id, "error", error)
    study.tell(number, state=TrialState.FAIL, skip_if_finished=True)


def running_of(study, key: str, value) -> list[int]:
    from optuna.trial import TrialState
    return [t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
            if (t.user_attrs.get("worker") or {}).get(key) == value]


# ---- executors ---------------------------------------------------------------------------------
def _worker_argv(url: str, study: str, workdir: Path, heartbeat_s: int, grace_s: int | None,
                 trials: list[int] | None = None) -> list[str]:
    argv = [sys.executable, "-m", "autoplace.profile.tune_worker", "--storage", url, "--study", study,
            "--workdir", str(workdir), "--heartbeat", str(heartbeat_s)]
    if grace_s:
        argv += ["--grace", str(grace_s)]
    if trials:
        argv += ["--trials", ",".join(map(str, trials))]
    return argv


def waiting_numbers(study) -> list[int]:
    from optuna.trial import TrialState
    return [t.number for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING,))]


def run_local(study, url: str, n: int, workdir: Path, *, heartbeat_s: int, grace_s: int | None,
              timeout_s: float, env: dict | None = None, log=None) -> None:
    """Run n workers one after another on this host (each launches torchrun for its proxies)."""
    from autoplace.profile.launch import _kill, worker_env
    for j in range(n):
        argv = _worker_argv(url, study.study_name, workdir, heartbeat_s, grace_s)
        logf = workdir / f"worker-{int(time.time() * 1000)}-{j}.log"
        with open(logf, "w") as lf:
            proc = subprocess.Popen(argv, stdout=lf, stderr=subprocess.STDOUT, env=worker_env(env),
                                    start_new_session=True)
            try:
                proc.wait(timeout=timeout_s)
                why = None if proc.returncode == 0 else _exit_text(proc.returncode)
            except subprocess.TimeoutExpired:
                _kill(proc)
                why = f"worker ran longer than {timeout_s:g} s; killed"
        if why:
            for num in running_of(study, "pid", proc.pid):
                fail_trial(study, num, f"{why} (log {logf.name}): {_tail(logf)}")
            if log:
                log(f"worker {proc.pid}: {why}")


def _exit_text(rc: int) -> str:
    if rc < 0:
        try:
            return f"worker killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"worker killed by signal {-rc}"
    return f"worker exited with {rc}"


def _tail(p: Path, n: int = 600) -> str:
    try:
        return p.read_text(errors="replace")[-n:]
    except OSError:
        return ""


SBATCH = """#!/bin/bash
# autoplace tune: one array task per candidate trial; task i's worker runs the i-th waiting trial (--trials)
# from the study and runs its proxies with torchrun on the node it was given.
#SBATCH --job-name=autoplace-tune
#SBATCH --array=0-{last}
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --output={workdir}/slurm-%A_%a.out
#SBATCH --time={minutes}
{extra}
export PYTHONPATH={pythonpath}
srun {argv}
"""


def sbatch_script(url: str, study: str, n: int, workdir: Path, *, heartbeat_s: int, grace_s: int | None,
                  timeout_s: float, partition: str | None = None, gpus: int = 0,
                  trials: list[int] | None = None) -> str:
    """The job array: task i runs waiting trial trials[i] (each task its own trial: SQLite gives no
    atomic pop of a waiting trial to concurrent workers)."""
    extra = []
    if partition:
        extra.append(f"#SBATCH --partition={partition}")
    if gpus:
        extra.append(f"#SBATCH --gpus-per-node={gpus}")
    from autoplace.profile.launch import worker_env
    return SBATCH.format(last=n - 1, workdir=workdir.resolve(), minutes=max(1, int(timeout_s // 60) + 1),
                         extra="\n".join(extra), pythonpath=shlex.quote(worker_env()["PYTHONPATH"]),
                         argv=" ".join(shlex.quote(a) for a in
                                       _worker_argv(url, study, workdir.resolve(), heartbeat_s, grace_s, trials)))


def run_slurm(study, url: str, n: int, workdir: Path, *, heartbeat_s: int, grace_s: int | None,
              timeout_s: float, partition: str | None = None, gpus: int = 0, log=None) -> str:
    """Submit a job array of n workers with sbatch, wait until it leaves the queue; fail the trials of
    tasks that ended without reporting. Returns the job id."""
    import shutil
    for exe in ("sbatch", "squeue"):
        if not shutil.which(exe):
            raise InputError(f"--executor slurm: '{exe}' is not on PATH (run where SLURM's client commands are)")
    script = workdir / "tune.sbatch"
    trials = waiting_numbers(study)
    n = len(trials)
    from autoplace.io import atomic_write
    atomic_write(script, sbatch_script(url, study.study_name, n, workdir, heartbeat_s=heartbeat_s, grace_s=grace_s,
                                       timeout_s=timeout_s, partition=partition, gpus=gpus, trials=trials))
    r = subprocess.run(["sbatch", "--parsable", str(script)], capture_output=True, text=True)
    if r.returncode != 0:
        raise InputError(f"--executor slurm: sbatch failed: {(r.stderr or r.stdout).strip()[:300]}")
    job = r.stdout.strip().split(";")[0]
    if log:
        log(f"submitted SLURM job array {job} ({n} task(s))")
    deadline = time.time() + timeout_s * n + 120
    while time.time() < deadline:
        q = subprocess.run(["squeue", "-h", "-j", job, "-o", "%i %T"], capture_output=True, text=True)
        if q.returncode == 0 and not q.stdout.strip():
            break
        time.sleep(1.0)
    else:
        subprocess.run(["scancel", job], capture_output=True)
    for num in running_of(study, "slurm_job", job):
        t = study.get_trials(deepcopy=False)[num]
        task = (t.user_attrs.get("worker") or {}).get("slurm_task")
        out = workdir / f"slurm-{job}_{task}.out"
        fail_trial(study, num, f"SLURM task {job}_{task} ended without reporting (killed, timed out or OOM): "
                               f"{_tail(out)}")
    return job


# ---- the tune ----------------------------------------------------------------------------------
def results(study) -> list[dict]:
    """One row per candidate: its best COMPLETE trial's numbers, or its last failure."""
    from optuna.trial import TrialState
    cfg = config_of(study)
    rows = []
    for c in cfg.candidates:
        ts = [t for t in study.get_trials(deepcopy=False) if candidate_of(t) == c["index"]]
        done = [t for t in ts if t.state == TrialState.COMPLETE]
        row = {"index": c["index"], "plan": c["short"], "search_s": c.get("search_s"),
               "analytic_s": c["analytic_s"], "trials": len(ts)}
        if done:
            t = done[-1]
            row.update(status="ok", anchored_s=t.value, **{k: t.user_attrs.get(k) for k in
                                                            ("k", "delta_s", "proxy", "proxy_measured_s",
                                                             "proxy_analytic_s", "proxy_peak_bytes")})
        else:
            failed = [t for t in ts if t.state == TrialState.FAIL]
            row.update(status="failed" if failed else "pending",
                       error=(failed[-1].user_attrs.get("error") if failed else None))
        rows.append(row)
    ok = sorted((r for r in rows if r["status"] == "ok"), key=lambda r: r["anchored_s"])
    for rank, r in enumerate(ok, 1):
        r["anchored_rank"] = rank
    return rows


def observations(study) -> list:
    """The proxies' measurements as calibration observations (their plan documents)."""
    from optuna.trial import TrialState

    from autoplace.profile.corrections import Observation
    out = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        for d in t.user_attrs.get("observations") or []:
            out.append(Observation.from_dict(d))
    return out
