"""Real torch runs of autoplace plans: the plan runner, exactness checks, calibration.

* `run_plans(model, plans, nproc, ...)` — launch `torchrun ... -m autoplace.profile.worker` and
  collect one record per plan (autoplace.profile.launch);
* `profile_candidates(model, plans, nproc, backend, steps, out_dir)` — the `search --profile-top K`
  hook: measure the top candidates, compare with the prediction, re-rank (autoplace.profile.candidates);
* `autoplace.profile.calibrate` — micro-benchmarks and the fitted hardware profile TOML.

The plan runner, by concern: `settings` (job defaults), `capabilities` (what it can run here),
`dist` (process group and mesh), `parallelize` (TP/SP, recompute, FSDP2), `build` (one rank's
built plan), `runner` (the measured loop), `measure` (byte and collective accounting), `report`
(records and predictions), `worker` (the torchrun entry point).

Importing this package does not import torch; the submodules that run torch do.
"""

from __future__ import annotations


def run_plans(*a, **kw):
    from autoplace.profile.launch import run_plans as _run
    return _run(*a, **kw)


def profile_candidates(*a, **kw):
    from autoplace.profile.candidates import profile_candidates as _pc
    return _pc(*a, **kw)


__all__ = ["run_plans", "profile_candidates"]
