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

`--evaluator` measures the vectorized evaluator alone (`autoplace.search.topk.evaluate_block`, what
every search calls on its blocks): plan evaluations per second on one core (OMP/MKL/OpenBLAS
threads 1, no worker processes) over a fixed set of legal plans — the enumeration's blocks of the
default space (every block-recompute layer count materialized), taken evenly through the block list
until `--plans` plans — the fastest of `--repeats` passes (as `timeit` reports), each timed in
process CPU seconds (so time the process spends descheduled does not count), the median of
`--rounds` child processes per checkout, dense (13b/64, llama3-405b/16,384) and MoE
(deepseek-v3/2,048, mixtral-8x7b/1,024). `--before DIR` (a checkout of an earlier revision, e.g.
`git worktree add /tmp/before 1c4d1f4`) measures that code too, in child processes alternating
with this checkout's, and the wall time of the README searches (`autoplace search`, and the
deepseek-v3 sweep 256..4096) for both, so the ratios come from the same machine and the same run:

    .venv/bin/python benchmarks/search_speed.py --evaluator --before /tmp/before

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

EVAL_CASES = (("dense", "13b", 64), ("dense", "llama3-405b", 16384), ("MoE", "deepseek-v3", 2048),
              ("MoE", "mixtral-8x7b", 1024))
CLI_RUNS = (("search", "--model", "13b", "--gpus", "64"), ("search", "--model", "llama3-405b", "--gpus", "16384"),
            ("search", "--model", "deepseek-v3", "--gpus", "2048"), ("search", "--model", "mixtral-8x7b", "--gpus", "1024"),
            ("search", "--model", "qwen3-235b-a22b", "--gpus", "1024"),
            ("search", "--model", "gpt-oss-120b", "--gpus", "512"), ("search", "--model", "kimi-k2", "--gpus", "4096"),
            ("sweep", "--model", "deepseek-v3", "--gpus", "256..4096"))
_ONE = {v: "1" for v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")}


def _rate_child(root: str, name: str, W: int, n_plans: int, repeats: int) -> None:
    """(child process) evaluator rate of the code under `root` on one case: prints 'RATE <plans/s> <plans>'."""
    sys.path.insert(0, root)
    for k in [k for k in sys.modules if k == "autoplace" or k.startswith("autoplace.")]:
        del sys.modules[k]
    from autoplace.placement.rules import Ctx as C
    from autoplace.search.driver import default_global_batch as dgb
    from autoplace.search.enumerate import enumerate_space
    from autoplace.search.space import load_space as ls
    from autoplace.search.topk import evaluate_block, resolved_ctx
    from autoplace.specs.hardware import load_hardware as lh
    from autoplace.specs.presets import get_preset as gp
    from autoplace.specs.training import TrainingSpec as TS
    m = gp(name)
    B, _ = dgb(m.max_seq_len, W)
    ctx = resolved_ctx(C(m, TS(seq_len=m.max_seq_len, global_batch=B), W))
    hw = lh()
    en = enumerate_space(ctx, ls("default"), collapse_block=False)
    specs = en.block_specs(en.chunk)
    grids, tot = [], 0
    for s in specs[::max(1, len(specs) // 64)]:
        g = en.make_block(s).grid
        grids.append(g)
        tot += g.size
        if tot >= n_plans:
            break
    evaluate_block(ctx, hw, grids[0])
    ts = []
    for _ in range(repeats):
        t0 = time.process_time()           # CPU seconds of this single-threaded process: per core
        for g in grids:
            evaluate_block(ctx, hw, g)
        ts.append(time.process_time() - t0)
    print(f"RATE {tot / float(np.min(ts)):.1f} {tot}")


def _child_rate(root: str, name: str, W: int, n_plans: int, repeats: int) -> tuple[float, int]:
    import subprocess
    env = dict(os.environ, **_ONE, PYTHONPATH=root)
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--_rate", f"{root}|{name}|{W}|{n_plans}|{repeats}"],
                         env=env, capture_output=True, text=True, check=True).stdout
    line = [x for x in out.splitlines() if x.startswith("RATE ")][-1].split()
    return float(line[1]), int(line[2])


def _cli_wall(root: str, args: tuple) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the command and its worker processes)."""
    import resource
    import subprocess
    env = dict(os.environ, **_ONE, PYTHONPATH=root)
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "autoplace", *args], env=env, cwd=root, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def evaluator_table(before: str | None, n_plans: int, repeats: int, rounds: int, cli: bool,
                    rates: bool = True, cli_rounds: int | None = None) -> int:
    """The before/after evaluator-rate table (markdown on stdout), alternating the two checkouts."""
    after = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
    roots = [("after", after)] + ([("before", os.path.abspath(before))] if before else [])
    if rates:
        print("| path | case | plans | " + " | ".join(f"{n} evals/s/core" for n, _ in roots)
              + (" | after / before |" if before else " |"))
        print("|---|---|---:|" + "---:|" * len(roots) + ("---:|" if before else ""))
    for path, name, W in EVAL_CASES if rates else ():
        got = {n: [] for n, _ in roots}
        tot = 0
        for _ in range(rounds):
            for n, r in (roots if _ % 2 == 0 else roots[::-1]):
                rate, tot = _child_rate(r, name, W, n_plans, repeats)
                got[n].append(rate)
        med = {n: float(np.median(v)) for n, v in got.items()}
        cells = " | ".join(f"{med[n] / 1e6:.2f} M" for n, _ in roots)
        ratio = f" | {med['after'] / med['before']:.2f}× |" if before else " |"
        print(f"| {path} | {name} / {W:,} GPUs | {tot:,} | {cells}{ratio}", flush=True)
    if cli:
        print()
        # wall seconds (interpreter start included) and CPU seconds (the command and its workers:
        # on a loaded machine the wall time is mostly waiting for a core)
        print("| command | " + " | ".join(f"{n} wall s | {n} CPU s" for n, _ in roots)
              + (" | before / after (CPU) |" if before else " |"))
        print("|---|" + "---:|---:|" * len(roots) + ("---:|" if before else ""))
        for args in CLI_RUNS:
            got = {n: [] for n, _ in roots}
            for _ in range(cli_rounds or rounds):
                for n, r in (roots if _ % 2 == 0 else roots[::-1]):
                    got[n].append(_cli_wall(r, args))
            med = {n: np.median(np.array(v), axis=0) for n, v in got.items()}
            cells = " | ".join(f"{med[n][0]:.2f} | {med[n][1]:.2f}" for n, _ in roots)
            ratio = f" | {med['before'][1] / med['after'][1]:.2f}× |" if before else " |"
            print(f"| `autoplace {' '.join(args)}` | {cells}{ratio}", flush=True)
    return 0


def main(argv=None) -> int:
    if argv is None and len(sys.argv) > 2 and sys.argv[1] == "--_rate":
        root, name, W, n, r = sys.argv[2].split("|")
        _rate_child(root, name, int(W), int(n), int(r))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--evaluator", action="store_true", help="evaluator plans/s on one core (markdown table)")
    ap.add_argument("--before", default=None, help="with --evaluator: checkout of the revision to compare against")
    ap.add_argument("--plans", type=int, default=2_000_000, help="with --evaluator: plans per case")
    ap.add_argument("--repeats", type=int, default=5, help="with --evaluator: timed passes per child (fastest)")
    ap.add_argument("--rounds", type=int, default=3, help="with --evaluator: alternating child runs per checkout (median)")
    ap.add_argument("--no-cli", action="store_true", help="with --evaluator: skip the CLI wall times")
    ap.add_argument("--no-rates", action="store_true", help="with --evaluator: the CLI wall times only")
    ap.add_argument("--cli-rounds", type=int, default=None, help="with --evaluator: runs per CLI command (default --rounds)")
    ap.add_argument("--models", default="7b,13b,70b,llama3-405b")
    ap.add_argument("--gpus", default="8,64,512,4096,16384")
    ap.add_argument("--space", default="default")
    ap.add_argument("--workers", type=int, default=None, help="default: all CPUs on large searches")
    ap.add_argument("--cases", default="", help="model:GPUs pairs, comma-separated (instead of --models × --gpus)")
    ap.add_argument("--bounded", action="store_true", help="also time the bounded exact search (--method auto)")
    a = ap.parse_args(argv)
    if a.evaluator:
        return evaluator_table(a.before, a.plans, a.repeats, a.rounds, not a.no_cli, not a.no_rates, a.cli_rounds)
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
