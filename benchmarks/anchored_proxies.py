#!/usr/bin/env python
"""Anchored predictions from proxy runs vs the analytic model, against full-size measurements (CPU, gloo).

    python benchmarks/anchored_proxies.py                  # 14 plans at 2 and 4 ranks (a few minutes)
    python benchmarks/anchored_proxies.py --quick          # 4 plans
    python benchmarks/anchored_proxies.py --backend nccl   # the same on local GPUs

Each plan trains an 8-layer llama-tiny-shaped model (hidden 256, 8 heads, 2 KV heads) on W ranks
("measured": per rank the fastest of the timed steps, then the slowest rank — robust to a shared host). Its proxies (autoplace.profile.proxy.proxy_of) train 1 and 3 layers of one
pipeline stage on 2 ranks with the same TP, micro-batch, micro-batch count, sequence and recompute,
DP shrunk (autoplace.profile.proxy.anchored_device: measured per-layer slope and intercept). On CPU a
rank is a share of the cores (4 ranks on 2 cores: half a core each), so a proxy of a plan with more
ranks than cores is pinned to as many cores as its ranks would get in the plan (AUTOPLACE_CPU_SET). The table
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


def run(backend: str, plans: dict, layers: int, proxy_layers: tuple, proxy_ranks: int, steps: int,
        seq_len: int, global_batch: int, hardware: str, work: Path, warmup: int = 2,
        estimator: str = "median", nice: int | None = None, cores: str = "pin") -> list[dict]:
    from autoplace.plan import parse_plan
    from autoplace.profile.launch import run_plans
    from autoplace.profile.proxy import proxy_of, robust_step_s
    from autoplace.specs.presets import get_preset
    model = get_preset("llama-tiny").with_(layers=layers, name=f"llama-tiny-{layers}L")
    base = dict(seq_len=seq_len, steps=steps, warmup=warmup)
    rows = []
    for W, texts in plans.items():
        full = [parse_plan(t).resolved(W) for t in texts]
        s_full = dict(base, global_batch=global_batch)
        print(f"[full] {len(full)} plans on {W} ranks", file=sys.stderr, flush=True)
        prio = {"AUTOPLACE_NICE": str(nice)} if nice is not None else {}
        recs = run_plans(model, full, W, backend=backend, settings=s_full, equivalence=False,
                         out_jsonl=work / f"full{W}.jsonl", workdir=work / f"full{W}", env=prio)
        Ls = tuple(proxy_layers)
        proxies = {L: [proxy_of(model, p, W, proxy_ranks, layers=L, global_batch=global_batch) for p in full]
                   for L in Ls}
        meas_proxy: dict = {}
        for L in Ls:
            by_gb: dict = {}
            for i, pr in enumerate(proxies[L]):
                by_gb.setdefault((pr.world, pr.global_batch), []).append(i)
            for (w, gb), idx in by_gb.items():
                print(f"[proxy] {len(idx)} plans, {L} layer(s) on {w} ranks, batch {gb}", file=sys.stderr, flush=True)
                tag = f"proxy{W}_{L}_{w}_{gb}"
                share = None if cores == "fill" else _cpu_share(backend, w, W)
                with _fillers(backend, w, W, nice) if cores == "fill" else contextlib.nullcontext():
                    prec = run_plans(proxies[L][idx[0]].model, [proxies[L][i].plan for i in idx], w,
                                     backend=backend, settings=dict(base, global_batch=gb), equivalence=False,
                                     out_jsonl=work / f"{tag}.jsonl", workdir=work / tag,
                                     env={**prio, **(share or {})})
                for i, r in zip(idx, prec):
                    meas_proxy[(L, i)] = r
        for i, (t, p, r) in enumerate(zip(texts, full, recs)):
            prs = [proxies[L][i] for L in Ls]
            prr = [meas_proxy.get((L, i)) for L in Ls]
            st = [x["status"] if x else "missing" for x in prr]
            row = {"plan": t, "world": W, "proxy": prs[-1].describe(), "status": r["status"],
                   "proxy_status": "ok" if all(x == "ok" for x in st) else "/".join(st)}
            if r["status"] == "ok" and row["proxy_status"] == "ok":
                row.update(times=_times(r), proxy_times=[_times(x) for x in prr],
                           measured_min_s=robust_step_s(r))
                row.update(measured_s=step_of(row["times"], estimator),
                           proxy_measured_s=[step_of(x, estimator) for x in row["proxy_times"]])
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
            row["measured_s"] = step_of(row["times"], estimator)
            row["proxy_measured_s"] = [step_of(x, estimator) for x in row["proxy_times"]]
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


NOTE = """Why the 10 % mean is not reached on this host (numbers from the saved runs, nothing fitted):

- **The measurement moves more than 10 %.** The same 14 full-size plans measured again 20–40 minutes
  later, same settings and priority (`benchmarks/results/anchored_proxies_w2_layers24.json` at 2
  ranks, `anchored_proxies_fill_w4.json` at 4), differ by 15.8 % mean (0–39 %; DDP at 2 ranks 0.483
  vs 0.379 s, ZeRO-3 1.419 vs 0.860 s). Proxies measured minutes apart from their full plan carry the
  same drift: the second 2-rank run, with 2- and 4-layer proxies, gives 16.3 % anchored, against
  10.3 % for the 2-rank rows above — the ranking of the two proxy choices is within the noise.
- **Oversubscription.** 4 ranks on 2 cores: every blocking collective can wait for a time slice of a
  rank of another group on the same core. A proxy pinned to one core hands the CPU straight to its
  peer, so TP and ZeRO-3 plans at 4 ranks (≈ 100–200 collectives per step) are under-predicted by
  44–57 % (≈ 6–9 ms per collective); busy stand-ins for the plan's other ranks (`--cores fill`) made
  it worse (42.7 % mean at 4 ranks).

At 2 ranks (one rank per core) the anchored mean is about 10 % against about 46 % analytic (table above)."""


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
    return (f"Measured candidates on this CPU (gloo, llama-tiny class, {len(ok)} plans; `{command}`): mean "
            f"|error| of the full-size step {means(ok)} — {per}. The 10 % goal is not reached on a shared "
            "2-core host, where the same run repeated moves by about 16 % "
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
    ap.add_argument("--proxy-ranks", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10, help="timed steps per run")
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--global-batch", type=int, default=8)
    ap.add_argument("--hardware", default="local-cpu")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "anchored_proxies.json"))
    ap.add_argument("--from-json", nargs="+", default=None,
                    help="re-analyse the measurements of saved runs (rows of several files together); no run")
    ap.add_argument("--worlds", default="2,4", help="rank counts of the full-size plans to run")
    ap.add_argument("--cores", choices=("pin", "fill"), default="pin",
                    help="CPU, plans with more ranks than cores: a proxy pinned to its share of the cores "
                         "(pin) or on all cores beside busy processes standing in for the plan's other ranks (fill)")
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
                   estimator=args.estimator, nice=args.nice, cores=args.cores)
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
               f"--proxy-layers {a['proxy_layers']} --nice {a.get('nice')} --cores {a.get('cores', 'pin')} "
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
