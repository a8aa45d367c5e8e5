"""Launch the plan runner with torchrun and collect results robustly.

`run_plans` writes a job file, starts

    torchrun --standalone --nproc-per-node K -m autoplace.profile.worker --job JOB.json

(multi-node: `--nnodes N --rdzv-backend c10d --rdzv-endpoint HOST:PORT` instead of --standalone),
and watches the worker's progress file. The worker appends each plan's record to `out_jsonl` the
moment it is measured. If torchrun exits non-zero (a crash, an OOM) or a plan runs longer than
`plan_timeout_s` (a hang: the whole process group is killed), the plan in flight is appended as a
failed record with the ranks' errors and the stderr tail, and torchrun is started again for the
plans that remain. Nothing already measured is lost.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from autoplace.io import append_jsonl, read_jsonl
from autoplace.profile.report import build_record
from autoplace.profile.settings import DEFAULTS, selective_policy
from autoplace.safe import alive, descendants, signals_as_exceptions
from autoplace.safe import die_with_parent as _die_with_parent


def worker_env(env: dict | None = None) -> dict:
    """The environment of a torchrun worker: ours, `env` on top, and the package importable from
    the worker whatever its working directory (this checkout first on PYTHONPATH)."""
    penv = dict(os.environ, **(env or {}))
    root = str(Path(__file__).resolve().parents[2])
    penv["PYTHONPATH"] = root + (os.pathsep + penv["PYTHONPATH"] if penv.get("PYTHONPATH") else "")
    return penv


def torchrun_argv(nproc: int, nnodes: int = 1, rdzv_endpoint: str | None = None,
                  node_rank: int | None = None) -> list[str]:
    exe = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or shutil.which("torchrun")
    base = [exe] if exe else [sys.executable, "-m", "torch.distributed.run"]
    if nnodes > 1:
        if not rdzv_endpoint:
            raise ValueError("multi-node torchrun needs a rendezvous endpoint HOST:PORT")
        base += ["--nnodes", str(nnodes), "--rdzv-backend", "c10d", "--rdzv-endpoint", rdzv_endpoint]
        if node_rank is not None:
            base += ["--node-rank", str(node_rank)]
    else:
        base += ["--standalone"]
    return base + ["--nproc-per-node", str(nproc)]


def local_nodes_argv(nproc: int, nnodes: int, host: str = "127.0.0.1") -> list[list[str]]:
    """torchrun command lines of `nnodes` agents on this host, `nproc / nnodes` ranks each, joined by
    a c10d rendezvous at host:PORT (a free port) — what each node of a cluster runs, on one machine."""
    if nproc % nnodes:
        raise ValueError(f"{nproc} ranks do not split over {nnodes} nodes")
    import socket
    with socket.socket() as s:
        s.bind((host, 0))
        port = s.getsockname()[1]
    return [torchrun_argv(nproc // nnodes, nnodes=nnodes, rdzv_endpoint=f"{host}:{port}", node_rank=i)
            + ["--rdzv-id", f"autoplace-{port}"] for i in range(nnodes)]


_KEEP = ("error", "traceback", "exitcode", "signal", "killed", "failed", "exception", "oom", "memory")


def _error_lines(text: str, limit: int = 4000) -> str:
    """The stderr lines that say what went wrong (warnings dropped), last `limit` characters."""
    lines = [ln for ln in text.splitlines()
             if any(k in ln.lower() for k in _KEEP) and "warning" not in ln.lower()]
    out = "\n".join(lines) or text
    return out[-limit:]


def _kill(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    """End torchrun and every worker: SIGTERM to torchrun's process group (torchrun passes it on to its
    workers, which torch elastic starts in sessions of their own), then SIGKILL after `grace_s` to the
    group and to every worker (and its group) still alive."""
    pgid = proc.pid
    workers = descendants(pgid)
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.time() + grace_s
    while time.time() < deadline:
        proc.poll()
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            workers = {w for w in workers if alive(w)}
            if not workers:
                break
        time.sleep(0.05)
    else:
        for g in [pgid, *sorted(workers - {pgid})]:   # torchrun's group first: it must not outlive a worker
            for kill in (os.killpg, os.kill):          # the worker's own group, else the worker
                try:
                    kill(g, signal.SIGKILL)
                    break
                except (ProcessLookupError, PermissionError):
                    pass
    proc.wait()


def _start(argv, errf, penv) -> subprocess.Popen:
    """torchrun in its own session (process group = its pid), killed with us (`_die_with_parent`)."""
    return subprocess.Popen(argv, stdout=errf, stderr=subprocess.STDOUT, env=penv, start_new_session=True,
                            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None)


def run_plans(model, plans, nproc: int, **kw) -> list[dict]:
    """Run every plan on `nproc` local ranks; return their records (also appended to out_jsonl).

    torchrun runs in its own process group, which is ended (SIGTERM, then SIGKILL) on every way out:
    a plan past its timeout, Ctrl-C, SIGTERM or SIGHUP to this process (a `timeout` wrapper, a closed
    terminal), an exception; the planning process dying outright sends torchrun SIGTERM."""
    with signals_as_exceptions():          # SIGTERM / SIGHUP unwind like Ctrl-C: errors.Terminated
        return _run_plans(model, plans, nproc, **kw)


def _run_plans(model, plans, nproc: int, *, backend: str = "gloo", out_jsonl: str | Path,
               settings: dict | None = None, hardware=None, plan_timeout_s: float = 300.0,
               startup_timeout_s: float = 300.0, equivalence: bool = True, tolerance: dict | None = None,
               env: dict | None = None, workdir: str | Path | None = None, verbose: bool = False,
               max_launches: int | None = None, nnodes: int = 1) -> list[dict]:
    """See `run_plans`.

    model: ModelSpec; plans: list of Plan (dp may be 0 → derived from nproc); settings: seq_len,
    global_batch, steps, warmup, seed, lr, adam_eps, sp_impl (see settings.DEFAULTS); nnodes > 1:
    the `nproc` ranks as `nnodes` torchrun agents on this host joined by a c10d rendezvous
    (`local_nodes_argv`), the multi-node launch path on one machine.
    """
    settings = dict(DEFAULTS, **(settings or {}))
    selective_policy(settings)          # a policy the runner does not know fails here, not in a worker
    out_jsonl = Path(out_jsonl)
    out_jsonl.parent.mkdir(parents=True, exist_ok=True)
    plans = [p.resolved(nproc) for p in plans]
    work = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="autoplace-profile-"))
    work.mkdir(parents=True, exist_ok=True)
    hw_ref = None
    if hardware is not None:
        hw_ref = str(getattr(hardware, "source", hardware))
    before = len(read_jsonl(out_jsonl))
    remaining = list(range(len(plans)))
    launches = 0
    records: dict[int, dict] = {}
    while remaining:
        launches += 1
        if max_launches is not None and launches > max_launches:
            break
        tag = f"launch{launches}"
        progress = work / f"{tag}.progress.jsonl"
        job = {"model": asdict(model), "settings": settings, "backend": backend,
               "plans": [{"index": i, "plan": plans[i].to_dict()} for i in remaining],
               "out_jsonl": str(out_jsonl), "progress": str(progress), "hardware": hw_ref,
               "equivalence": equivalence, "tolerance": tolerance,
               "collective_timeout_s": max(60.0, plan_timeout_s)}
        job_path = work / f"{tag}.job.json"
        job_path.write_text(json.dumps(job))
        tail_argv = ["-m", "autoplace.profile.worker", "--job", str(job_path)]
        argvs = ([torchrun_argv(nproc) + tail_argv] if nnodes <= 1
                 else [a + tail_argv for a in local_nodes_argv(nproc, nnodes)])
        stderr_path = work / f"{tag}.stderr.txt"
        penv = worker_env(env)
        penv.setdefault("PYTHONUNBUFFERED", "1")
        with open(stderr_path, "w") as errf:
            others = [_start(a, errf, penv) for a in argvs[1:]]
            proc = _start(argvs[0], errf, penv)
            t_launch = time.time()
            timed_out = None
            try:
                while proc.poll() is None or any(o.poll() is None for o in others):
                    if others and any(o.poll() not in (None, 0) for o in [proc, *others]):
                        # one agent failed: end the others (they would wait on the rendezvous)
                        for o in [proc, *others]:
                            if o.poll() is None:
                                _kill(o, grace_s=5.0)
                        break
                    time.sleep(0.25)
                    events = read_jsonl(progress)
                    started = [e for e in events if e["event"] == "start"]
                    done = {e["index"] for e in events if e["event"] == "done"}
                    current = started[-1] if started and started[-1]["index"] not in done else None
                    now = time.time()
                    if current is not None and now - current["t"] > plan_timeout_s:
                        timed_out = current["index"]
                        for o in [proc, *others]:
                            _kill(o)
                        break
                    if not started and now - t_launch > startup_timeout_s:
                        timed_out = -1
                        for o in [proc, *others]:
                            _kill(o)
                        break
            except BaseException:        # Ctrl-C, SIGTERM, an error: end the whole torchrun group
                for o in [proc, *others]:
                    _kill(o)
                raise
            for o in [proc, *others]:
                _kill(o, grace_s=2.0)      # workers that outlived torchrun (no-op when the group is gone)
        rc = proc.returncode or next((o.returncode for o in others if o.returncode), 0)
        events = read_jsonl(progress)
        done = [e["index"] for e in events if e["event"] == "done"]
        started = [e["index"] for e in events if e["event"] == "start"]
        for rec in read_jsonl(out_jsonl)[before:]:
            if rec.get("index") is not None:
                records[rec["index"]] = rec
        remaining = [i for i in remaining if i not in done]
        if not remaining:
            break
        # the plan in flight failed (or torchrun never started one)
        in_flight = [i for i in started if i not in done]
        failed = in_flight[-1] if in_flight else None
        tail = _error_lines(stderr_path.read_text()) if stderr_path.exists() else ""
        errors = []
        for f in sorted(work.glob(f"{progress.name}.rank*.err")):
            try:
                errors.append(json.loads(f.read_text()))
            except (OSError, json.JSONDecodeError):  # a file cut short by the crash it reports
                pass
            f.unlink()
        if failed is None:
            # nothing started: the launch itself failed; fail every remaining plan with the reason
            status = "timeout" if timed_out == -1 else "failed"
            for i in remaining:
                rec = build_record(model, settings, plans[i], nproc, None, status=status,
                                   error=f"torchrun exited with {rc} before running a plan:\n{tail}",
                                   backend=backend, index=i)
                append_jsonl(out_jsonl, rec)
                records[i] = rec
            remaining = []
            break
        if timed_out is not None and timed_out >= 0:
            status, msg = "timeout", f"plan ran longer than {plan_timeout_s:g} s (hang?); killed"
        else:
            kinds = {e.get("kind") for e in errors}
            status = "oom" if "oom" in kinds else "failed"
            msg = f"torchrun exited with {rc}"
        err = msg + ("\n" + "\n".join(f"[rank {e['rank']}] {e['error']}" for e in errors) if errors else "")
        if not errors:
            err += "\n" + tail
        rec = build_record(model, settings, plans[failed], nproc, None, status=status, error=err,
                           backend=backend, index=failed)
        append_jsonl(out_jsonl, rec)
        records[failed] = rec
        remaining = [i for i in remaining if i != failed]
        if verbose:
            print(f"plan {failed} {status}; relaunching for {len(remaining)} more", file=sys.stderr)
    return [records[i] for i in sorted(records)]
