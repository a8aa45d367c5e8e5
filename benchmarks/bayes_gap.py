#!/usr/bin/env python
"""How close Optuna (`--method bayes`) gets to the proven optimum in a fixed trial budget.

    .venv/bin/python benchmarks/bayes_gap.py [--model 13b --gpus 64 --trials 200 --seeds 5]

Exhaustive optimum of the default space first, then TPE with and without the analytic seed (the
coarse-space optimum, `search.bayes.analytic_seed`) for each sampler seed; prints the gap in %.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="13b")
    ap.add_argument("--gpus", type=int, default=64)
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--seeds", type=int, default=5)
    a = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    import numpy as np

    from autoplace.cost.step import evaluate
    from autoplace.placement.rules import Ctx
    from autoplace.search.batch import PlanBatch
    from autoplace.search.bayes import analytic_seed, run_bayes
    from autoplace.search.driver import default_global_batch
    from autoplace.search.exhaustive import run_exhaustive
    from autoplace.search.space import load_space
    from autoplace.specs.hardware import load_hardware
    from autoplace.specs.presets import get_preset
    from autoplace.specs.training import TrainingSpec
    hw, sp, m = load_hardware(), load_space("default"), get_preset(a.model)
    B, _ = default_global_batch(m.max_seq_len, a.gpus)
    ctx = Ctx(m, TrainingSpec(seq_len=m.max_seq_len, global_batch=B), a.gpus)
    opt = float(run_exhaustive(ctx, hw, sp, top_k=1)["steps"][0])
    seeds = analytic_seed(ctx, hw, sp)
    s0 = float(np.asarray(evaluate(ctx, hw, PlanBatch.from_plans(seeds[:1]))["step_s"]).reshape(-1)[0])
    print(f"{m.name}, {a.gpus} GPUs, default space: optimum {opt:.4f} s; analytic seed {100 * (s0 / opt - 1):.2f} % off")
    for label, sp_seeds in (("seeded", seeds), ("unseeded", ())):
        t0 = time.time()
        gaps = [100 * (float(run_bayes(ctx, hw, sp, n_trials=a.trials, seed=k, seed_plans=sp_seeds)["steps"][0]) / opt - 1)
                for k in range(a.seeds)]
        print(f"{label:9s} {a.trials} trials, seeds 0–{a.seeds - 1}: gap % "
              + ", ".join(f"{g:.2f}" for g in gaps) + f"  (max {max(gaps):.2f}, {time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
