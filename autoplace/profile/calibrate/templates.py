"""Multi-node calibration: the torchrun command line per node and a SLURM batch script.

Both run `autoplace.profile.calib_worker` on every node (c10d rendezvous on the head node), then
`autoplace calibrate --fit RAW --out PROFILE` on the node whose rank 0 wrote RAW.
"""

from __future__ import annotations

from autoplace import safe


def torchrun_command_lines(nnodes: int, nproc: int, backend: str, raw_out: str, head: str = "$HEAD_NODE",
                           port: int = 29500, quick: bool = False) -> list[str]:
    q = " --quick" if quick else ""
    backend, raw_out = safe.shell_word(backend), safe.shell_word(raw_out)
    head = head if head == "$HEAD_NODE" else safe.shell_word(head)
    return [f"torchrun --nnodes {nnodes} --nproc-per-node {nproc} --node-rank {i} "
            f"--rdzv-backend c10d --rdzv-endpoint {head}:{port} --rdzv-id autoplace-calib "
            f"-m autoplace.profile.calib_worker --backend {backend} --raw {raw_out}{q}"
            for i in range(nnodes)] + [
        f"autoplace calibrate --fit {raw_out} --out PROFILE.toml   # on the node that wrote {raw_out}"]


def slurm_template(nnodes: int, nproc: int, backend: str, out: str, raw_out: str = "calib_raw.json",
                   partition: str | None = None, time_limit: str = "00:30:00", port: int = 29500,
                   quick: bool = False) -> str:
    part = f"#SBATCH --partition={safe.launcher_name(partition, '--partition')}\n" if partition else ""
    q = " --quick" if quick else ""
    backend = safe.launcher_name(backend, "--backend")
    raw_out, out = safe.shell_word(raw_out), safe.shell_word(out)      # quoted for the shell
    return f"""#!/bin/bash
# autoplace calibration on {int(nnodes)} node(s) × {int(nproc)} GPU(s): micro-benchmarks, then the profile fit.
#SBATCH --job-name=autoplace-calibrate
#SBATCH --nodes={nnodes}
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node={nproc}
#SBATCH --exclusive
#SBATCH --time={time_limit}
{part}#SBATCH --output=autoplace-calibrate-%j.out
set -euo pipefail
HEAD_NODE=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export OMP_NUM_THREADS=${{OMP_NUM_THREADS:-1}}
# one torchrun per node; c10d rendezvous on the first node
srun --kill-on-bad-exit=1 torchrun \\
    --nnodes {nnodes} --nproc-per-node {nproc} \\
    --rdzv-backend c10d --rdzv-endpoint "$HEAD_NODE:{port}" --rdzv-id "$SLURM_JOB_ID" \\
    -m autoplace.profile.calib_worker --backend {backend} --raw {raw_out}{q}
# global rank 0 (on the first node) wrote {safe.comment(raw_out)}; fit the profile there
srun --nodes=1 --ntasks=1 -w "$HEAD_NODE" autoplace calibrate --fit {raw_out} --out {out}
"""
