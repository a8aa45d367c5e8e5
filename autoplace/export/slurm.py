"""A SLURM sbatch script for the plan's GPU count (`slurm.sbatch`).

Pattern of torchtitan's `multinode_trainer.slurm` and the PyTorch multi-node examples (shared doc
§1e): one task per node (``--ntasks-per-node=1``, ``--gpus-per-node=G``), head node = first host of
``scontrol show hostnames $SLURM_JOB_NODELIST``, its address from a one-task ``srun hostname
--ip-address``, then one ``srun`` that starts one torchrun per node with ``--nnodes $SLURM_NNODES``,
``--rdzv-backend c10d``, ``--rdzv-id $SLURM_JOB_ID`` and ``--rdzv-endpoint HEAD_IP:29500``. The
accelerate payload runs ``accelerate launch`` per node instead (machine rank = $SLURM_NODEID).
Submit from the export folder (PLAN_DIR defaults to $SLURM_SUBMIT_DIR): ``PAYLOAD=megatron sbatch
slurm.sbatch``.
"""

from __future__ import annotations

from autoplace import safe
from autoplace.export import payloads
from autoplace.export.common import ExportJob, header_lines
from autoplace.export.launcher import Launcher
from autoplace.export.torchrun import node_rules

NAME = "slurm"
FILES = ("slurm.sbatch",)
PORT = 29500
CPUS_PER_GPU = 8


class Slurm(Launcher):
    """A process launcher: one torchrun (or accelerate launch) per node under srun."""
    name = NAME
    files = FILES
    runtime = ""
    needs_train = False

    def format_rules(self):
        return node_rules(NAME)

    def write(self, job):
        return _write(job)


LAUNCHER = Slurm()


def supports(plan, model, train=None, world=None, hw=None) -> list[str]:
    return LAUNCHER.supports(plan, model, train, world, hw)


def emit(doc_or_job) -> dict[str, str]:
    return LAUNCHER.emit(doc_or_job)


def notes(job) -> list[str]:
    return []


def _write(job: ExportJob) -> dict[str, str]:
    names = payloads.available(job)
    name = safe.slug(job.model.name)          # an SBATCH directive value: launcher-safe characters only
    g = job.nproc_per_node
    lines = ["#!/bin/bash",
             f"#SBATCH --job-name=autoplace-{name}",
             f"#SBATCH --nodes={job.nodes}",
             "#SBATCH --ntasks-per-node=1",
             f"#SBATCH --gpus-per-node={g}",
             f"#SBATCH --cpus-per-task={CPUS_PER_GPU * g}",
             "#SBATCH --exclusive",
             "#SBATCH --output=%x-%j.out"]
    lines += header_lines(job, "SLURM batch script")
    lines += [f"# PAYLOAD picks the program: {', '.join(names)} (only launchers that can run this plan).",
              "set -euo pipefail",
              'PLAN_DIR="${PLAN_DIR:-$SLURM_SUBMIT_DIR}"',
              'mapfile -t nodes < <(scontrol show hostnames "$SLURM_JOB_NODELIST")',
              'head_node="${nodes[0]}"',
              'head_node_ip="$(srun --nodes=1 --ntasks=1 -w "$head_node" hostname --ip-address | awk \'{print $1}\')"',
              'export NCCL_DEBUG="${NCCL_DEBUG:-WARN}" PYTHONFAULTHANDLER=1 LOGLEVEL="${LOGLEVEL:-INFO}"',
              f'export OMP_NUM_THREADS="${{OMP_NUM_THREADS:-{CPUS_PER_GPU}}}"']
    lines += payloads.entry_case(job, names, with_accelerate=True)
    lines += [
        'if [[ "$USE_ACCELERATE" == 1 ]]; then',
        "  # accelerate launch per node; \\$SLURM_NODEID is expanded by each task",
        '  srun --kill-on-bad-exit=1 bash -c "accelerate launch --config_file \\"$PLAN_DIR/accelerate_config.yaml\\" '
        f'--num_machines {job.nodes} --num_processes {job.world} --machine_rank \\$SLURM_NODEID '
        f'--main_process_ip $head_node_ip --main_process_port {PORT} ${{ENTRY[*]}}"',
        "else",
        f'  srun --kill-on-bad-exit=1 torchrun --nnodes "$SLURM_NNODES" --nproc-per-node {g} \\',
        f'      --rdzv-id "$SLURM_JOB_ID" --rdzv-backend c10d --rdzv-endpoint "$head_node_ip:{PORT}" \\',
        '      "${ENTRY[@]}"',
        "fi",
    ]
    return {"slurm.sbatch": "\n".join(lines) + "\n"}
