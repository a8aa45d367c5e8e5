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
from autoplace.export.common import DEFAULT_GPUS_PER_NODE, ExportJob, header_lines
from autoplace.export.launcher import Launcher, _a, rule

NAME = "torchrun"
FILES = ("torchrun.sh",)
C10D_PORT = 29400


def _gpn(c) -> int:
    return int(getattr(c.hw, "gpus_per_node", 0) or DEFAULT_GPUS_PER_NODE)


def node_rules(name: str) -> tuple:
    """torchrun / SLURM start the same number of processes on every node."""
    return (rule(name, "nodes", "whole nodes",
                 lambda c, p: _a((c.world < 1) or (c.world > _gpn(c) and c.world % _gpn(c) != 0)),
                 lambda c, p: ("the plan has no GPU count (degrees do not multiply to a world size)" if c.world < 1
                               else f"{c.world} GPUs is not a whole number of {_gpn(c)}-GPU nodes "
                                    "(torchrun starts the same number of processes on every node)")),)


class Torchrun(Launcher):
    """A process launcher: starts whichever training program can run the plan (PAYLOAD=...)."""
    name = NAME
    files = FILES
    runtime = ""
    needs_train = False

    def format_rules(self):
        return node_rules(NAME)

    def write(self, job):
        return _write(job)


LAUNCHER = Torchrun()


def supports(plan, model, train=None, world=None, hw=None) -> list[str]:
    return LAUNCHER.supports(plan, model, train, world, hw)


def emit(doc_or_job) -> dict[str, str]:
    return LAUNCHER.emit(doc_or_job)


def notes(job) -> list[str]:
    return []


def command(job: ExportJob) -> list[str]:
    """The torchrun argv up to (not including) the program."""
    if job.nodes == 1:
        return ["torchrun", "--standalone", "--nnodes", "1", "--nproc-per-node", str(job.nproc_per_node)]
    return ["torchrun", "--nnodes", str(job.nodes), "--nproc-per-node", str(job.nproc_per_node),
            "--rdzv-backend", "c10d", "--rdzv-endpoint", f'"${{RDZV_ENDPOINT:?set RDZV_ENDPOINT=<head-node>:{C10D_PORT}}}"',
            "--rdzv-id", '"${RDZV_ID:-autoplace}"']


def _write(job: ExportJob) -> dict[str, str]:
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
