"""torchrun entry point: run a list of plans one after another and append each result as it comes.

    torchrun --standalone --nproc-per-node K -m autoplace.profile.worker --job JOB.json

JOB.json (written by autoplace.profile.launch): model (ModelSpec fields), job settings (seq_len,
global_batch, steps, warmup, seed, lr, adam_eps, sp_impl), plans (list of Plan dicts with their
index), out_jsonl, progress (a file the launcher watches), hardware (profile for the step-time
prediction, optional), backend.

Protocol with the launcher (the progress file, one JSON object a line, written by rank 0):
{"event": "start", "index": i, "t": ...} before a plan, {"event": "done", "index": i} after its
record is appended to out_jsonl. A plan that raises `Unsupported` (identically on every rank, before
any collective) is recorded as skipped and the worker goes on. Any other exception: each rank writes
its traceback next to the progress file and exits non-zero — the launcher records the plan as failed
with those errors and relaunches torchrun for the remaining plans (a rank that died mid-collective
leaves the process group unusable, so the worker never tries to continue in-process).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from autoplace.io import append_jsonl


def _inject_fault(idx: int, rank: int) -> None:
    """Test hook: AUTOPLACE_PROFILE_FAULT="crash:1,hang:2,raise:3" makes plan 1 kill rank 0,
    plan 2 hang on rank 0 and plan 3 raise on every rank (failure handling is tested with it)."""
    spec = os.environ.get("AUTOPLACE_PROFILE_FAULT", "")
    for item in filter(None, spec.split(",")):
        kind, _, i = item.partition(":")
        if i and int(i) == idx:
            if kind == "crash" and rank == 0:
                os._exit(9)
            if kind == "hang" and rank == 0:
                time.sleep(10**6)
            if kind == "raise":
                raise RuntimeError(f"injected failure in plan {idx}")


def set_priority(nice: int) -> None:
    """Run this rank at `nice` (timing runs on a shared host). Linux with autogroup scheduling
    (`/proc/sys/kernel/sched_autogroup_enabled`) shares the CPU between sessions first — and torch
    elastic starts every rank in a session of its own — so a process's nice value only orders it within
    its session; the session's weight is `/proc/self/autogroup`'s nice, set here too. Lowering a nice
    value needs privileges: refused silently (the run goes on at the default priority)."""
    import os
    try:
        os.setpriority(os.PRIO_PROCESS, 0, nice)
    except (PermissionError, OSError):
        pass
    try:
        with open("/proc/self/autogroup", "w") as f:
            f.write(str(nice))
    except OSError:
        pass


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="autoplace.profile.worker")
    ap.add_argument("--job", required=True)
    args = ap.parse_args(argv)
    job = json.loads(Path(args.job).read_text())
    nice = os.environ.get("AUTOPLACE_NICE")
    if nice:
        set_priority(int(nice))
    cpus = os.environ.get("AUTOPLACE_CPU_SET")
    if cpus and hasattr(os, "sched_setaffinity"):
        # a CPU proxy of a plan with more ranks than cores: its ranks share as many cores as the plan's
        # ranks would (benchmarks/anchored_proxies.py)
        os.sched_setaffinity(0, {int(c) for c in cpus.split(",")})

    import torch
    import torch.distributed as dist

    from autoplace.plan import Plan
    from autoplace.profile.capabilities import Unsupported
    from autoplace.profile.dist import Runtime
    from autoplace.profile.model import reference_run
    from autoplace.profile.report import build_record
    from autoplace.profile.runner import describe_exception, run_plan
    from autoplace.specs.model import ModelSpec

    spec = ModelSpec(**job["model"])
    settings = job["settings"]
    rt = Runtime(job.get("backend"))
    rt.init(timeout_s=float(job.get("collective_timeout_s", 300)))
    rank = rt.rank
    progress = job["progress"]
    torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", "1"))))

    refs: dict = {}
    cf = float(settings.get("moe_capacity_factor") or 0.0)

    def reference(plan):
        """The single-process run: same model, init seed, data and optimizer, full global batch
        (MoE capacity mode: capacity per block of one rank's micro-batch, so one per mbs)."""
        if not job.get("equivalence", True):
            return None
        key = plan.mbs if cf > 0 and spec.is_moe else None
        if key not in refs:
            total = int(settings["warmup"]) + int(settings["steps"]) + 1
            refs[key] = reference_run(spec, settings["seq_len"], settings["global_batch"], total,
                                      settings["seed"], settings["lr"], settings["adam_eps"],
                                      moe_capacity_factor=cf,
                                      capacity_block=key * int(settings["seq_len"]) if key else None,
                                      precision=settings.get("precision", "fp32"))
        return refs[key]

    for item in job["plans"]:
        idx = item["index"]
        plan = Plan.from_dict(item["plan"])
        if rank == 0:
            append_jsonl(progress, {"event": "start", "index": idx, "t": time.time()})
        dist.barrier()
        t0 = time.time()
        try:
            _inject_fault(idx, rank)
            res = run_plan(plan, spec, settings, rt, reference=reference(plan))
            status, err = "ok", None
        except Unsupported as e:
            res, status, err = None, "skipped", str(e)
        except Exception as e:  # noqa: BLE001 - reported, then the launcher relaunches
            kind = "oom" if "out of memory" in str(e).lower() else "error"
            Path(f"{progress}.rank{rank}.err").write_text(
                json.dumps({"index": idx, "rank": rank, "kind": kind, "error": describe_exception(e)}))
            sys.stderr.write(f"[rank {rank}] plan {idx} failed: {e}\n")
            sys.stderr.flush()
            os._exit(3)
        gathered = [None] * rt.world if rank == 0 else None
        dist.gather_object(res, gathered, dst=0)
        if rank == 0:
            rec = build_record(spec, settings, plan, rt.world, gathered if status == "ok" else None,
                               status=status, error=err, backend=rt.backend,
                               hardware=job.get("hardware"), wall_s=time.time() - t0,
                               index=idx, tolerance=job.get("tolerance"))
            append_jsonl(job["out_jsonl"], rec)
            append_jsonl(progress, {"event": "done", "index": idx, "t": time.time()})
        dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
