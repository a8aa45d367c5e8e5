"""Residuals for the prediction intervals, and their coverage measured leave-one-source-out.

    python benchmarks/intervals.py [--records FILE ...] [--write]

For every record of the validation files (default: the shared validation sets, the unseen-run and
the Megatron-Bridge archive files) it takes r = log(measured / predicted) of step time (from the
record's primary throughput or time metric) and of peak memory / model-state memory where measured,
with the record's class (runtime × dense/MoE × hardware generation, autoplace.cost.intervals). It
then scores every record with intervals built from the *other* sources only (leave-one-source-out:
a source is never scored by its own residuals) and prints the coverage at 80 % and 90 % per file and
overall. `--write` stores the residual table in autoplace/cost/intervals.json (the shipped data the
CLI reads; nothing is computed at a CLI call).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from autoplace.cost import intervals as I  # noqa: E402
from autoplace.io import atomic_write  # noqa: E402
from autoplace.validate import load_records, run  # noqa: E402

SHARED = ROOT.parent / "shared" / "validation"
if not SHARED.exists():
    SHARED = Path("/work/shared/validation")
DEFAULT = [SHARED / "modern_runs.json", SHARED / "public_runs.json", ROOT / "benchmarks" / "unseen_records.json",
           ROOT / "benchmarks" / "bridge_archive_records.json"]
STEP_METRICS = ("iteration_time_s", "iteration_time_s_derived", "tokens_per_sec_per_gpu", "tflops_per_gpu",
                "tokens_per_sec_total", "mfu", "aggregate_pflops", "pct_of_peak")
MEM_METRICS = tuple(f"{w}_memory_{u}" for w in ("peak", "device", "reserved", "allocated") for u in ("gib", "gb")) + ("model_states_gb_per_gpu",)


def residuals(files) -> list[dict]:
    """One row per record and kind: {file, id, source, kind, class, r}."""
    out, seen = [], set()
    for f in files:
        res, _ = run(load_records(str(f)))
        out += residuals_of(res, Path(f).name, seen)
    return out


def residuals_of(res, fname: str = "", seen: set | None = None) -> list[dict]:
    """The rows of `residuals` for one file's validation results (a record id already in `seen` is
    skipped: a run in two files counts once). Only measurements count: an `analytic_estimate` record
    (another tool's formula, e.g. DeepSpeed's memory estimator) says nothing about how far a real
    run lands from the prediction, so it neither calibrates nor scores an interval."""
    out, seen = [], (set() if seen is None else seen)
    for r in res:
        if r.skipped is not None or not r.mapping or r.id in seen or r.record_type == "analytic_estimate":
            continue
        seen.add(r.id)
        key = I.class_key(r.mapping.get("runtime", "?"), bool(r.mapping.get("moe")), r.mapping.get("arch", ""))
        by = {e["metric"]: e for e in r.entries}
        step = next((by[m] for m in STEP_METRICS if m in by and by[m].get("time_error_pct") is not None), None)
        if step is not None:
            out.append({"file": fname, "id": r.id, "source": r.source, "kind": "step", "class": key,
                        "r": -math.log1p(step["time_error_pct"] / 100.0)})
        mem = next((by[m] for m in MEM_METRICS if m in by and by[m].get("predicted")), None)
        if mem is not None and mem.get("measured"):
            out.append({"file": fname, "id": r.id, "source": r.source, "kind": "memory", "class": key,
                        "r": math.log(float(mem["measured"]) / float(mem["predicted"]))})
    return out


def table_of(rows, kind) -> dict:
    t: dict = {}
    for x in rows:
        if x["kind"] == kind:
            t.setdefault(x["class"], []).append([x["source"], round(x["r"], 5)])
    return t


def coverage(rows, kind, level) -> dict:
    """Leave-one-source-out coverage per file and overall: every run is scored with the method
    (`autoplace.cost.intervals.build`) fitted on the other sources only — the same code that
    fits the shipped intervals on all of them. {file: (share of runs covered, runs, share of
    sources covered)}: the last weighs each source once (the mean over sources of the share of
    its runs covered), the unit the method treats as exchangeable, so a file one source dominates
    (llm-foundry's 139 of the public file's 171 runs) is not one source's trial counted 139 times."""
    tab = {c: [tuple(x) for x in it] for c, it in table_of(rows, kind).items()}
    fitted: dict = {}
    hit: dict = {}
    for x in rows:
        if x["kind"] != kind:
            continue
        f = fitted.get(x["source"]) or fitted.setdefault(x["source"], I.build(tab, x["source"]))
        p = I.predict(tab, f, x["class"], level)
        for k in (x["file"], "all"):
            hit.setdefault(k, {}).setdefault(x["source"], []).append(p["lo"] <= x["r"] <= p["hi"])
    out = {}
    for k, by in hit.items():
        runs = [h for v in by.values() for h in v]
        out[k] = (sum(runs) / len(runs), len(runs), sum(sum(v) / len(v) for v in by.values()) / len(by))
    return out


def coverage_table(rows) -> str:
    """The markdown table docs/accuracy.md shows (records file × 80 / 90 %, step time and memory;
    each cell the share of runs covered, then the share of sources)."""
    out = ["| kind | records | runs | sources | 80 % interval covers (runs / sources) | 90 % interval covers (runs / sources) |",
           "|---|---|---:|---:|---:|---:|"]
    for kind in ("step", "memory"):
        c80, c90 = coverage(rows, kind, 0.8), coverage(rows, kind, 0.9)
        names = [k for k in c80 if k != "all"] + ["all"]
        for f in names:
            src = len({x["source"] for x in rows if x["kind"] == kind and f in ("all", x["file"])})
            out.append(f"| {'step time' if kind == 'step' else 'peak memory'} | {f} | {c80[f][1]} | {src} | "
                       f"{c80[f][0]:.1%} / {c80[f][2]:.1%} | {c90[f][0]:.1%} / {c90[f][2]:.1%} |")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", nargs="*", default=[str(p) for p in DEFAULT])
    ap.add_argument("--write", action="store_true", help="write autoplace/cost/intervals.json")
    a = ap.parse_args(argv)
    rows = residuals(a.records)
    print(coverage_table(rows))
    if a.write:
        doc = {"meta": {"method": "normalized split-conformal on log(measured/predicted), source-weighted; classes "
                                  "runtime|dense-moe|generation, spread = mean |r| shrunk toward all > family > family×kind > family×generation",
                        "files": [Path(f).name for f in a.records], "records": len({x['id'] for x in rows})},
               "step": table_of(rows, "step"), "memory": table_of(rows, "memory")}
        atomic_write(I.DATA, json.dumps(doc, separators=(",", ":"), sort_keys=True) + "\n")
        print(f"wrote {I.DATA.relative_to(ROOT)} ({I.DATA.stat().st_size:,} bytes)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
