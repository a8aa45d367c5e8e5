"""Calibration: run micro-benchmarks under torchrun, fit the hardware-profile parameters, write TOML.

`calibrate(backend, nproc, out)` launches `autoplace.profile.calib_worker` with torchrun, then
`fit_profile(raw)` turns its measurements into the `HardwareSpec` fields the cost model reads:

| field                               | fitted from                                                     |
|-------------------------------------|-----------------------------------------------------------------|
| peak_tflops.{fp32,bf16,fp16}        | the best GEMM throughput measured per dtype                     |
| gemm_efficiency, kernel_overhead_us,| the memory-bound kernels t = bytes/B + t_k, then the GEMMs on   |
| hbm_bw_gbps (hbm_efficiency = 1)    | the additive roofline t = 2MNK/(peak·η_math) + bytes/B + t_k    |
|                                     | t = bytes/B + t_k (the cost model's roofline, same t_k)         |
| attention_efficiency                | causal SDPA fwd+bwd: t = 3.5·F_causal/(peak·η_attn) + 3·t_k     |
| intra_bw_gbps, intra_latency_us     | NNLS fit of AR t = 2(n−1)/n·S/B + 2(n−1)·α and AG/RS             |
|                                     | t = (n−1)/n·S/B + (n−1)·α over sizes and group sizes (in-node)  |
| inter_bw_gbps, inter_latency_us     | the same over groups spanning nodes (= intra on one node)       |
| host_bw_gbps                        | pinned H2D/D2H copies (CUDA) or a large memcpy (CPU)            |
| cpu_adam_gparams_per_s              | torch.optim.Adam step on host parameters                        |
| step_overhead_ms                    | a near-empty train step (tiny forward, backward, Adam)          |
| memory, gpus_per_node, sm_count     | the device (CUDA properties; CPU: RAM ÷ ranks per node)         |

The TOML keeps the raw measurements ([raw]), the fit residuals ([calibration]) and the software
versions ([software]); `load_hardware(path)` ignores those tables.

Modules: `fit` (the fits above, pure numpy/scipy), `probes` (refinement on short training runs),
`write` (the TOML text), `templates` (multi-node torchrun lines and the SLURM script); this
package runs the benchmarks (`run_benchmarks`) and ties the steps together (`calibrate`).
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

from autoplace.io import atomic_write
from autoplace.profile.calibrate.fit import fit_compute, fit_network, fit_profile, fit_rs_factor
from autoplace.profile.calibrate.probes import (
    REFINED,
    hardware_from_fields,
    probe_setup,
    refine_with_probes,
    run_probes,
)
from autoplace.profile.calibrate.templates import slurm_template, torchrun_command_lines
from autoplace.profile.calibrate.write import profile_toml, write_profile

__all__ = ["REFINED", "calibrate", "fit_compute", "fit_network", "fit_profile", "fit_rs_factor",
           "hardware_from_fields", "probe_setup", "profile_toml", "refine_with_probes", "run_benchmarks",
           "run_probes", "slurm_template", "torchrun_command_lines", "write_profile"]


def run_benchmarks(backend: str, nproc: int, raw_out: str | Path, quick: bool = False,
                   timeout_s: float = 1800.0, env: dict | None = None) -> dict:
    """Run the calibration micro-benchmarks under torchrun on this node; the RAW document."""
    from autoplace.profile.launch import torchrun_argv, worker_env
    argv = torchrun_argv(nproc) + ["-m", "autoplace.profile.calib_worker", "--raw", str(raw_out),
                                   "--backend", backend] + (["--quick"] if quick else [])
    penv = worker_env(env)
    with tempfile.TemporaryFile(mode="w+") as log:
        try:
            rc = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, env=penv,
                                timeout=timeout_s).returncode
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"calibration benchmarks ran longer than {timeout_s:g} s") from None
        if rc != 0:
            log.seek(0)
            raise RuntimeError(f"calibration worker failed (exit {rc}):\n{log.read()[-4000:]}")
    return json.loads(Path(raw_out).read_text())


def calibrate(backend: str, nproc: int, out: str | Path, quick: bool = False, name: str | None = None,
              raw_out: str | Path | None = None, timeout_s: float = 1800.0, probes: bool = True) -> dict:
    """Benchmark on this node with torchrun, fit, refine with probe runs (unless probes=False),
    write the profile TOML; returns the fitted fields."""
    work = Path(tempfile.mkdtemp(prefix="autoplace-calib-"))
    raw_path = Path(raw_out) if raw_out else work / "raw.json"
    raw = run_benchmarks(backend, nproc, raw_path, quick=quick, timeout_s=timeout_s)
    prof = fit_profile(raw, name)
    if probes:
        model, settings, plans, recs = run_probes(backend, nproc, work, timeout_s=timeout_s)
        prof, _ = refine_with_probes(prof, model, settings, plans, recs)
    atomic_write(out, profile_toml(prof, raw))
    return prof
