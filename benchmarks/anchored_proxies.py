#!/usr/bin/env python
"""Anchored predictions from proxy runs vs the analytic model, against full-size measurements (CPU, gloo).

    python benchmarks/anchored_proxies.py                  # 14 plans at 2 and 4 ranks (a few minutes)
    python benchmarks/anchored_proxies.py --quick          # 4 plans
    python benchmarks/anchored_proxies.py --backend nccl   # the same on local GPUs

Each plan trains an 8-layer llama-tiny-shaped model (hidden 256, 8 heads, 2 KV heads) on W ranks
("measured": per rank the median of the timed steps, then the slowest rank), its proxies run right
after it (a shared host drifts over minutes). Its proxies (autoplace.profile.proxy.proxy_of) train 1 and 4 layers of one
pipeline stage on 2 ranks with the same TP, micro-batch, micro-batch count, sequence and recompute,
DP shrunk (autoplace.profile.proxy.anchored_device: measured per-layer slope and intercept). On CPU a
rank is a share of the cores (4 ranks on 2 cores: half a core each), so a proxy of a plan with more
ranks than cores runs as W/w concurrent copies of itself (`--cores copies`, the default): its ranks get
the plan's core share and, unlike busy stand-ins or pinning, the plan's blocking pattern — a rank
waiting in a collective yields its core to a rank of another group, as in the plan. The table
prints the analytic prediction (the profile's numbers, no run), the anchored one (the proxy's
measured per-layer work, the rest analytic) and their errors against the full-size measurement.
Results: --out (default benchmarks/results/anchored_proxies.json).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PLANS = {2: ["zero=0", "zero=1", "zero=3", "tp=2", "tp=2,sp=1", "pp=2", "zero=0,recompute=full",
             "tp=2,recompute=full"],
         4: ["zero=0", "zero=3", "tp=2", "tp=2,sp=1", "pp=2", "tp=2,pp=2"]}
QUICK = {2: ["zero=0", "tp=2"], 4: ["zero=3", "tp=2,pp=2"]}


def _times(rec) -> list[dict] | None:
    """Per rank: the timed steps' wall, CPU and run-queue seconds (kept for re-analysis)."""
    if not rec or rec.get("status") != "ok":
        return None
    return [{"wall": r.get("step_times_s"), "cpu": r.get("step_cpu_s"), "runq": r.get("step_runq_s")}
            for r in rec["ranks"]]


def step_of(times: list[dict], estimator: str = "median") -> float:
    """A run's step time from its ranks' timed steps: per rank the median (or the fastest) step, then
    the slowest rank (the step ends when every rank has finished)."""
    pick = statistics.median if estimator == "median" else min
    return max(pick(r["wall"]) for r in times)


def _steps(row: dict, estimator: str) -> None:
    """measured_s and proxy_measured_s of a row: each run's step (`step_of`), then over the rounds
    (the plan and its proxies repeated back to back) the median."""
    rounds = row.get("rounds") or [[row["times"], *row["proxy_times"]]]
    per = [[step_of(x, estimator) for x in g] for g in rounds]
    row["measured_s"] = statistics.median(g[0] for g in per)
    row["proxy_measured_s"] = [statistics.median(g[j] for g in per) for j in range(1, len(per[0]))]


def run(backend: str, plans: dict, layers: int, proxy_layers: tuple, proxy_ranks: int, steps: int,
        seq_len: int, global_batch: int, hardware: str, work: Path, warmup: int = 2,
        estimator: str = "median", nice: int | None = None, cores: str = "copies", rounds: int = 1) -> list[dict]:
    from autoplace.plan import parse_plan
    from autoplace.profile.launch import run_plans
    from autoplace.profile.proxy import proxy_of, robust_step_s
    from autoplace.specs.presets import get_preset
    model = get_preset("llama-tiny").with_(layers=layers, name=f"llama-tiny-{layers}L")
    base = dict(seq_len=seq_len, steps=steps, warmup=warmup)
    rows = []
    prio = {"AUTOPLACE_NICE": str(nice)} if nice is not None else {}
    Ls = tuple(proxy_layers)

    def measure(m, plan, w, gb, tag, W):
        """One plan on w ranks; on CPU with more plan ranks W than cores, `cores` decides how the
        plan's other ranks are stood in for (copies of this run, busy processes, or pinning)."""
        def launch(c, env=None):
            return run_plans(m, [plan], w, backend=backend, settings=dict(base, global_batch=gb),
                             equivalence=False, out_jsonl=work / f"{tag}_c{c}.jsonl",
                             workdir=work / f"{tag}_c{c}", env={**prio, **(env or {})})[0]
        n_copies = _copies(backend, w, W) if cores == "copies" and w < W else 1
        if n_copies > 1:
            # the plan's other ranks as copies of the proxy itself: the same core share and the
            # same blocking pattern (each copy waits in its own collectives)
            from concurrent.futures import ThreadPoolExecutor
            with ThreadPoolExecutor(n_copies) as ex:
                return _merge(list(ex.map(launch, range(n_copies))))
        share = None if cores in ("fill", "copies") or w == W else _cpu_share(backend, w, W)
        with _fillers(backend, w, W, nice) if cores == "fill" and w < W else contextlib.nullcontext():
            return launch(0, env=share)

    for W, texts in plans.items():
        for t in texts:
            # the full plan and its proxies back to back: a shared host drifts over minutes, so the
            # runs an anchored prediction compares are made as close together as they can be
            p = parse_plan(t).resolved(W)
            prs = [proxy_of(model, p, W, proxy_ranks, layers=L, global_batch=global_batch) for L in Ls]
            print(f"[plan] {t} on {W} ranks, then its proxies ({', '.join(f'{L} layer(s) on {pr.world}' for L, pr in zip(Ls, prs))})",
                  file=sys.stderr, flush=True)
            tag = f"w{W}_{len(rows)}"
            got = []                 # per round: the full run, then its proxies
            for k in range(rounds):
                got.append([measure(model, p, W, global_batch, f"{tag}_r{k}_full", W)]
                           + [measure(pr.model, pr.plan, pr.world, pr.global_batch, f"{tag}_r{k}_L{L}", W)
                              for L, pr in zip(Ls, prs)])
            st = [x["status"] if x else "missing" for g in got for x in g]
            row = {"plan": t, "world": W, "proxy": prs[-1].describe(),
                   "status": "ok" if all(g[0] and g[0]["status"] == "ok" for g in got) else "failed",
                   "proxy_status": "ok" if all(x == "ok" for x in st) else "/".join(st)}
            if row["status"] == "ok" and row["proxy_status"] == "ok":
                row.update(times=_times(got[0][0]), proxy_times=[_times(x) for x in got[0][1:]],
                           rounds=[[_times(x) for x in g] for g in got], measured_min_s=robust_step_s(got[0][0]))
                _steps(row, estimator)
            rows.append(row)
    return analyse(rows, backend, layers, proxy_layers, proxy_ranks, seq_len, global_batch, hardware)


def analyse(rows, backend, layers, proxy_layers, proxy_ranks, seq_len, global_batch, hardware,
            estimator: str | None = None) -> list[dict]:
    """Analytic and anchored predictions for the measured rows (also re-run on a saved JSON)."""
    from autoplace.estimate import estimate
    from autoplace.plan import parse_plan
    from autoplace.profile.proxy import anchored_device, device_scaled, proxy_of
    from autoplace.profile.report import executed_plan, train_spec
    from autoplace.profile.settings import DEFAULTS
    from autoplace.specs.hardware import load_hardware
    from autoplace.specs.presets import get_preset
    hw = load_hardware(hardware)
    model = get_preset("llama-tiny").with_(layers=layers, name=f"llama-tiny-{layers}L")
    base = dict(DEFAULTS, seq_len=seq_len)
    Ls = tuple(proxy_layers)
    for row in rows:
        if "measured_s" not in row:
            continue
        if estimator and row.get("times"):
            _steps(row, estimator)
        W = row["world"]
        p = parse_plan(row["plan"]).resolved(W)
        table = {"full": (model, train_spec(dict(base, global_batch=global_batch), backend, model), executed_plan(p), W)}
        for j, L in enumerate(Ls):
            pr = proxy_of(model, p, W, proxy_ranks, layers=L, global_batch=global_batch)
            table[j] = (pr.model, train_spec(dict(base, global_batch=pr.global_batch), backend, pr.model),
                        executed_plan(pr.plan.resolved(pr.world)), pr.world)

        def doc_of(which, k, table=table):
            m, t, q, w = table[which]
            return estimate(m, device_scaled(hw, k), t, q, w)
        a = anchored_device(doc_of, (0, 1), tuple(row["proxy_measured_s"]), Ls)
        row.update(**a, analytic_err=a["analytic_s"] / row["measured_s"] - 1,
                   anchored_err=a["anchored_s"] / row["measured_s"] - 1)
    return rows


@contextlib.contextmanager
def _fillers(backend: str, w: int, W: int, nice: int | None):
    """On CPU with more plan ranks than cores: the plan's W − w other ranks as busy processes on the
    same cores (at the ranks' priority) while the proxy runs, so the proxy's ranks share the cores as
    the plan's do — and a blocking collective waits for a time slice of a rank that is not its peer,
    as in the plan (pinning the proxy to fewer cores hands the CPU straight to the peer instead)."""
    import os
    import subprocess
    n = os.cpu_count() or 1
    procs = []
    if backend == "gloo" and W > n:
        code = ("import os,sys\nfrom autoplace.profile.worker import set_priority\n"
                f"set_priority({nice if nice is not None else 0})\nwhile True: pass\n")
        for _ in range(W - w):
            procs.append(subprocess.Popen([sys.executable, "-c", code], start_new_session=True,
                                          env=dict(os.environ, PYTHONPATH=str(ROOT))))
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def _copies(backend: str, w: int, W: int) -> int:
    """On CPU with more plan ranks W than cores: W // w concurrent copies of a w-rank proxy."""
    import os
    n = os.cpu_count() or 1
    return max(1, W // w) if backend == "gloo" and W > n else 1


def _merge(recs: list[dict]) -> dict:
    """One record of concurrent proxy copies: ok when every copy is, the ranks of all copies (the
    step then ends with the slowest rank of any copy, as the plan's step ends with its slowest rank)."""
    if any(not r or r.get("status") != "ok" for r in recs):
        return next((r for r in recs if not r or r.get("status") != "ok"), None)
    return dict(recs[0], ranks=[rk for r in recs for rk in r["ranks"]])


def _cpu_share(backend: str, w: int, W: int) -> dict | None:
    """On CPU a rank is a share of the cores: W ranks on n cores get n/W each. A proxy of w ranks is
    pinned to w·n/W cores (at least 1), so that its ranks get the share the plan's ranks get."""
    import os
    n = os.cpu_count() or 1
    if backend != "gloo" or W <= n:
        return None
    k = max(1, (w * n) // W)
    return {"AUTOPLACE_CPU_SET": ",".join(str(c) for c in range(k))}


def table(rows: list[dict]) -> str:
    out = ["| plan | W | proxy | measured s | analytic s (err) | anchored s (err) |", "|---|---:|---|---:|---:|---:|"]
    for r in rows:
        if "measured_s" not in r:
            out.append(f"| {r['plan']} | {r['world']} | {r['proxy']} | {r['status']}/{r['proxy_status']} | - | - |")
            continue
        out.append(f"| {r['plan']} | {r['world']} | {r['proxy']} | {r['measured_s']:.4f} | {r['analytic_s']:.4f} "
                   f"({100 * r['analytic_err']:+.1f} %) | {r['anchored_s']:.4f} ({100 * r['anchored_err']:+.1f} %) |")
    ok = [r for r in rows if "measured_s" in r]
    if ok:
        out.append("")
        out.append(f"{len(ok)} plans: mean |error| analytic {100 * statistics.mean(abs(r['analytic_err']) for r in ok):.1f} %, "
                   f"anchored {100 * statistics.mean(abs(r['anchored_err']) for r in ok):.1f} %")
    return "\n".join(out)


NOTE = """What makes these numbers hold on a shared 2-core host (nothing fitted; the anchored value takes
the proxies' measured per-layer slope and intercept and prices the rest analytically):

- **Copies for oversubscribed plans.** A 4-rank plan on 2 cores is stood in for by two concurrent
  copies of its 2-rank proxy (`--cores copies`): the ranks get the plan's core share, and a rank
  waiting in a collective yields its core to a rank of another group, as in the plan. A proxy
  pinned to one core (`--cores pin`) under-predicted TP and ZeRO-3 plans at 4 ranks by 44–57 %
  (32.4 % mean at 4 ranks); busy stand-ins (`--cores fill`) 42.7 %.
- **Back to back, three rounds.** Each plan and its proxies run one after the other, three times,
  each value the median of its rounds (`--rounds 3`): the host drifts by ≈ 16 % over 20–40
  minutes, which a table of full runs first and proxies later carried into every prediction
  (12.6 % mean with one round back to back, 10.6 % with full runs first)."""


MARK_START, MARK_END = "<!-- anchored-proxies:start -->", "<!-- anchored-proxies:end -->"
"""The generated region of the docs page (`--docs`)."""


def section(rows: list[dict], command: str, note: str = "") -> str:
    """The markdown section (README / docs page): the command, the table, the mean errors."""
    ok = [r for r in rows if "measured_s" in r]
    worlds = sorted({r["world"] for r in rows})
    head = (f"{len(ok)} plans of an 8-layer llama-tiny-shaped model (hidden 256, 8 heads, 2 KV heads; fp32, "
            f"gloo, CPU) at {' and '.join(map(str, worlds))} ranks: the full-size step measured, the analytic "
            "prediction, and the prediction anchored on proxy runs with fewer layers and smaller DP. "
            f"Regenerate with\n\n    {command}\n")
    return "\n".join([head, table(rows), *([""] + [note] if note else [])]) + "\n"


def summary(rows: list[dict], command: str) -> str:
    """The README's lines: mean |error| of the analytic and the anchored prediction, all and per rank count."""
    ok = [r for r in rows if "measured_s" in r]

    def means(rs):
        a = sum(abs(r["analytic_s"] / r["measured_s"] - 1) for r in rs) / len(rs)
        b = sum(abs(r["anchored_s"] / r["measured_s"] - 1) for r in rs) / len(rs)
        return f"{100 * b:.1f} % anchored vs {100 * a:.1f} % analytic"

    per = "; ".join(f"{w} ranks ({sum(r['world'] == w for r in ok)} plans): "
                    + means([r for r in ok if r["world"] == w]) for w in sorted({r["world"] for r in ok}))
    b = sum(abs(r["anchored_s"] / r["measured_s"] - 1) for r in ok) / len(ok)
    goal = ("Within the 10 % goal" if b <= 0.10 else
            "The 10 % goal is not reached on this shared 2-core host, where the same run repeated moves by about 16 %")
    return (f"Measured candidates on this CPU (gloo, llama-tiny class, {len(ok)} plans; `{command}`): mean "
            f"|error| of the full-size step {means(ok)} — {per}. {goal} "
            "([details](autoplace/docs/measured_candidates.md)).\n")


def write_docs(page: Path, text: str) -> None:
    """Replace the generated region of `page` (between MARK_START and MARK_END) with `text`."""
    from autoplace.io import atomic_write
    doc = page.read_text()
    a, b = doc.index(MARK_START) + len(MARK_START), doc.index(MARK_END)
    atomic_write(page, doc[:a] + "\n" + text + doc[b:])


def _layers(v) -> tuple:
    """The proxies' layer counts: "1,4" (older result files: the second count alone, the first 1)."""
    return (1, v) if isinstance(v, int) else tuple(int(x) for x in str(v).split(","))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="gloo")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--proxy-layers", default="1,4", help="the two proxies' layer counts")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps before the timed ones")
    ap.add_argument("--nice", type=int, default=None,
                    help="run every rank at this nice value, its session (autogroup) too: on a shared host "
                         "other sessions then take less of the timed steps (negative values need root)")
    ap.add_argument("--estimator", choices=("median", "min"), default="median",
                    help="per rank the median (or fastest) timed step, then the slowest rank")
    ap.add_argument("--rounds", type=int, default=3,
                    help="each plan and its proxies measured this many times back to back; the median round")
    ap.add_argument("--proxy-ranks", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10, help="timed steps per run")
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--global-batch", type=int, default=8)
    ap.add_argument("--hardware", default="local-cpu")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "anchored_proxies.json"))
    ap.add_argument("--from-json", nargs="+", default=None,
                    help="re-analyse the measurements of saved runs (rows of several files together); no run")
    ap.add_argument("--worlds", default="2,4", help="rank counts of the full-size plans to run")
    ap.add_argument("--cores", choices=("pin", "fill", "copies"), default="copies",
                    help="CPU, plans with more ranks than cores: a proxy pinned to its share of the cores "
                         "(pin), on all cores beside busy processes standing in for the plan's other ranks (fill), "
                         "or as W/w concurrent copies of itself (copies)")
    ap.add_argument("--markdown", default=None, help="also write the section (command, table, means) here")
    ap.add_argument("--readme", action="store_true",
                    help="also replace the generated region of README.md (the mean errors, one paragraph)")
    ap.add_argument("--docs", action="store_true",
                    help="also replace the generated region of autoplace/docs/measured_candidates.md")
    args = ap.parse_args(argv)
    if args.from_json:
        rows = []
        for f in args.from_json:
            doc = json.loads(Path(f).read_text())
            a = doc["args"]
            keep = [r for r in doc["rows"] if str(r["world"]) in args.worlds.split(",")]
            rows += analyse(keep, a["backend"], a["layers"], _layers(a["proxy_layers"]), a["proxy_ranks"],
                            a["seq_len"], a["global_batch"], a["hardware"], estimator=args.estimator)
        _emit(rows, args, argv)
        return 0
    worlds = {int(w) for w in args.worlds.split(",")}
    with tempfile.TemporaryDirectory(prefix="anchored-") as tmp:
        plans = {w: ts for w, ts in (QUICK if args.quick else PLANS).items() if w in worlds}
        rows = run(args.backend, plans, args.layers, _layers(args.proxy_layers), args.proxy_ranks,
                   args.steps, args.seq_len, args.global_batch, args.hardware, Path(tmp), warmup=args.warmup,
                   estimator=args.estimator, nice=args.nice, cores=args.cores, rounds=args.rounds)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"args": vars(args), "rows": rows}, indent=1) + "\n")
    _emit(rows, args, argv)
    return 0


def _emit(rows, args, argv) -> None:
    print(table(rows))
    if not (args.markdown or args.docs or args.readme):
        return
    if args.from_json:     # the command that measured the first file
        a = json.loads(Path(args.from_json[0]).read_text())["args"]
        cmd = (f"python benchmarks/anchored_proxies.py --steps {a['steps']} --warmup {a.get('warmup', 1)} "
               f"--proxy-layers {a['proxy_layers']} --nice {a.get('nice')} --cores {a.get('cores', 'pin')} --rounds {a.get('rounds', 1)} "
               f"--worlds {a['worlds']} --docs")
    else:
        cmd = "python benchmarks/anchored_proxies.py " + " ".join(argv if argv is not None else sys.argv[1:])
    text = section(rows, cmd.strip(), NOTE)
    if args.markdown:
        Path(args.markdown).write_text(text)
    if args.docs:
        write_docs(ROOT / "autoplace" / "docs" / "measured_candidates.md", text)
    if args.readme:
        write_docs(ROOT / "README.md", summary(rows, cmd.strip().replace(" --docs", "")))


if __name__ == "__main__":
    sys.exit(main())
