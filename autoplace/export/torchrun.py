"""A torchrun command for the plan's GPU count (`torchrun.sh`).

Single node (W ≤ GPUs per node): ``torchrun --standalone --nnodes 1 --nproc-per-node W``.
Multi-node: ``torchrun --nnodes N --nproc-per-node G --rdzv-backend c10d --rdzv-endpoint HEAD:29400
--rdzv-id ID`` run once per node (c10d rendezvous; static rendezvous is torchrun's default and needs
a node rank per node). Flags: pytorch/pytorch `torch/distributed/run.py` (shared doc §1e). The
program started is chosen with PAYLOAD (see `autoplace.export.payloads`); OMP_NUM_THREADS is set
explicitly because torchrun sets it to 1 for nproc > 1 when unset.
"""

from __future__ import annotations

from autoplace.export import payloads
from autoplace.export.common import (ExportJob, LauncherRefusedError, as_job, common_refusals,
                                     header_lines, partial_job)

NAME = "torchrun"
FILES = ("torchrun.sh",)
C10D_PORT = 29400


def supports(plan, model, train=None, world=None, hw=None) -> list[str]:
    return _reasons(partial_job(plan, model, train, world, hw))


def _reasons(job: ExportJob) -> list[str]:
    out = common_refusals(job)
    out += grid_reasons(job)
    return out


def grid_reasons(job: ExportJob) -> list[str]:
    if job.world < 1:
        return ["the plan has no GPU count (degrees do not multiply to a world size)"]
    if job.world > job.gpus_per_node and job.world % job.gpus_per_node:
        return [f"{job.world} GPUs is not a whole number of {job.gpus_per_node}-GPU nodes "
                "(torchrun starts the same number of processes on every node)"]
    return []


def notes(job) -> list[str]:
    return []


def command(job: ExportJob) -> list[str]:
    """The torchrun argv up to (not including) the program."""
    if job.nodes == 1:
        return ["torchrun", "--standalone", "--nnodes", "1", "--nproc-per-node", str(job.nproc_per_node)]
    return ["torchrun", "--nnodes", str(job.nodes), "--nproc-per-node", str(job.nproc_per_node),
            "--rdzv-backend", "c10d", "--rdzv-endpoint", f'"${{RDZV_ENDPOINT:?set RDZV_ENDPOINT=<head-node>:{C10D_PORT}}}"',
            "--rdzv-id", '"${RDZV_ID:-autoplace}"']


def emit(doc_or_job) -> dict[str, str]:
    job = as_job(doc_or_job)
    reasons = _reasons(job)
    if reasons:
        raise LauncherRefusedError(NAME, reasons)
    names = [n for n in payloads.available(job) if n != "accelerate"]
    mode = "single node" if job.nodes == 1 else f"{job.nodes} nodes, c10d rendezvous (run on every node)"
    lines = ["#!/usr/bin/env bash"] + header_lines(job, f"torchrun launch — {mode}") + [
        "# PAYLOAD picks the program: " + ", ".join(names) + " (only launchers that can run this plan).",
        "# accelerate has its own launcher: use accelerate_launch.sh.",
        "set -euo pipefail",
        'PLAN_DIR="${PLAN_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)}"',
        'export OMP_NUM_THREADS="${OMP_NUM_THREADS:-8}"',
    ]
    lines += payloads.entry_case(job, names, with_accelerate=False)
    cmd = command(job)
    lines.append("exec " + " ".join(cmd) + ' "${ENTRY[@]}" "$@"')
    return {"torchrun.sh": "\n".join(lines) + "\n"}
