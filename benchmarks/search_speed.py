"""Search speed: exhaustive search time and plan evaluations per second (default space).

    .venv/bin/python benchmarks/search_speed.py [--models 7b,13b,...] [--gpus 8,64,...] [--workers N]
    .venv/bin/python benchmarks/search_speed.py --cases deepseek-v3:2048,mixtral-8x7b:1024 --bounded

Printed table, not a timed test. Per (model, GPU count): candidates of the default space, legal
plans, plans the cost model actually evaluated (block-recompute families count once), wall time
of the whole search (enumeration + rules + evaluation + top-k), evaluations per second and legal
plans decided per second, and the winner. Defaults: H100-SXM-80GB, 8 GPUs/node, the model's
native sequence length, ~4M tokens per step (autoplace.search.driver.default_global_batch).
Target: ≤ 10 s at 16,384 GPUs and ≥ 10⁶ evaluations/s.

`--bounded` also runs the bounded exact search (`autoplace.search.bounds`, what `--method auto`
runs) on the same case: its wall time, the plans it evaluated, the plans it decided per second
(every plan the full search evaluates, over the bounded wall time), and whether its top plan and
step equal the full enumeration's (they must: "same" column). `--cases` lists model:GPUs pairs instead
of the --models × --gpus product.

One warm-up search (7b on 8 GPUs, discarded) runs first, so the first row does not pay for the
process's imports and numpy's first-call setup; the CLI's cold wall time, interpreter start
included, is `time autoplace search --model 13b --gpus 64` (README).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import numpy as np  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from autoplace.placement.rules import Ctx  # noqa: E402
from autoplace.search.driver import default_global_batch  # noqa: E402
from autoplace.search.exhaustive import run_exhaustive  # noqa: E402
from autoplace.search.space import load_space  # noqa: E402
from autoplace.specs.hardware import load_hardware  # noqa: E402
from autoplace.specs.presets import get_preset  # noqa: E402
from autoplace.specs.training import TrainingSpec  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="7b,13b,70b,llama3-405b")
    ap.add_argument("--gpus", default="8,64,512,4096,16384")
    ap.add_argument("--space", default="default")
    ap.add_argument("--workers", type=int, default=None, help="default: all CPUs on large searches")
    ap.add_argument("--cases", default="", help="model:GPUs pairs, comma-separated (instead of --models × --gpus)")
    ap.add_argument("--bounded", action="store_true", help="also time the bounded exact search (--method auto)")
    a = ap.parse_args(argv)
    if a.cases:
        cases = [(c.split(":")[0], int(c.split(":")[1])) for c in a.cases.split(",")]
    else:
        cases = [(n, int(w)) for n in a.models.split(",") for w in a.gpus.split(",")]
    hw = load_hardware()
    space = load_space(a.space)
    t = Table(title=f"exhaustive search speed — space '{space.name}', {hw.name}, {os.cpu_count()} CPUs")
    for c in ("model", "GPUs", "batch", "candidates", "legal", "evaluated", "workers", "seconds",
              "evals/s", "legal/s", "best step s", "winner") + (
              ("bounded s", "bounded evaluated", "decided/s", "speed-up", "same") if a.bounded else ()):
        t.add_column(c, justify="left" if c in ("model", "winner") else "right")
    worst = 0.0
    rates = []
    m0 = get_preset("7b")
    b0, _ = default_global_batch(m0.max_seq_len, 8)
    run_exhaustive(Ctx(m0, TrainingSpec(seq_len=m0.max_seq_len, global_batch=b0), 8), hw, space, top_k=1)
    for name, W in cases:
        m = get_preset(name)
        B, _ = default_global_batch(m.max_seq_len, W)
        ctx = Ctx(m, TrainingSpec(seq_len=m.max_seq_len, global_batch=B), W)
        t0 = time.perf_counter()
        r = run_exhaustive(ctx, hw, space, top_k=1, workers=a.workers)
        secs = time.perf_counter() - t0
        s = r["stats"]
        rate = s["evaluated"] / secs
        rates.append(rate)
        if W == 16384:
            worst = max(worst, secs)
        best = r["top"].plan(0).short() if len(r["top"]) else "(nothing fits)"
        extra = ()
        if a.bounded:
            t1 = time.perf_counter()
            rb = run_exhaustive(ctx, hw, space, top_k=1, bounded=True)
            bsecs = time.perf_counter() - t1
            same = np.array_equal(rb["steps"], r["steps"]) and rb["top"].plans() == r["top"].plans()
            extra = (f"{bsecs:.2f}", f"{rb['stats']['evaluated']:,}", f"{s['evaluated'] / bsecs:,.0f}",
                     f"{secs / bsecs:.1f}×", "yes" if same else "NO")
        t.add_row(name, f"{W:,}", str(B), f"{s['candidates']:,}", f"{s['legal']:,}", f"{s['evaluated']:,}",
                  str(s["workers"]), f"{secs:.2f}", f"{rate:,.0f}", f"{s['legal'] / secs:,.0f}",
                  f"{r['steps'][0]:.3f}" if len(r["top"]) else "-", best, *extra)
        print(f"{name} {W}: {secs:.2f} s", file=sys.stderr, flush=True)
    con = Console(width=220)
    con.print(t)
    con.print(f"max time at 16,384 GPUs: {worst:.2f} s (target ≤ 10 s); evaluations/s: min {min(rates):,.0f}, "
              f"median {sorted(rates)[len(rates) // 2]:,.0f} (target ≥ 1,000,000). "
              "Calculon's llm-optimal-execution: ~130 plans/s on this machine class.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
