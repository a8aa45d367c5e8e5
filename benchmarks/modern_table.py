"""Render the 2024–2026 validation set (modern_runs.json) as markdown for the README.

    python benchmarks/modern_table.py [--records ../shared/validation/modern_runs.json] [--worst N]

Prints the issue-11 targets, a per-source summary and one row per record: the runtime the mapping
picked (from the record's framework and release), the plan as mapped, measured and predicted
tokens/s/GPU and their error, and the TFLOP/s error under the source's own FLOP convention. With
`--worst N` (a long held-out file such as benchmarks/bridge_archive_records.json) it prints a
per-model summary and the N rows with the largest tokens/s error instead of every row. Numbers
come from `autoplace.validate` (the same code as `autoplace validate`); nothing adjusts a prediction.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from autoplace.validate import load_records, run  # noqa: E402
from autoplace.validate.targets import modern_targets  # noqa: E402

DEFAULT = ROOT.parent / "shared" / "validation" / "modern_runs.json"


def pct(x) -> str:
    return "–" if x is None else f"{x:+.1f} %"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", default=str(DEFAULT if DEFAULT.exists() else "/work/shared/validation/modern_runs.json"))
    ap.add_argument("--worst", type=int, default=0, help="per-model summary and only the N largest errors")
    args = ap.parse_args(argv)
    records = load_records(args.records)
    results, _ = run(records)
    tg = modern_targets(results)
    print("| target | goal | now | met |\n|---|---|---|---|")
    print(f"| throughput coverage | ≥ 95 % | {tg['coverage']:.0%} ({tg['predicted']}/{tg['records']}) | "
          f"{'yes' if tg['coverage'] >= 0.95 else 'no'} |")
    print(f"| tokens/s/GPU, {tg['rows']} rows | mean ≤ 10 %, max ≤ 25 % | mean {tg['tokens_mean']:.1f} %, "
          f"max {tg['tokens_max']:.1f} % | {'yes' if tg['met'] else 'no'} |")
    print("\n| source | rows | mean \\|err\\| | max \\|err\\| |\n|---|---:|---:|---:|")
    for s, v in tg["by_source"].items():
        print(f"| {s} | {v['rows']} | {v['mean']:.1f} % | {v['max']:.1f} % |")
    rows = results
    if args.worst:
        model_of = {rec.get("id"): (rec.get("model") or {}).get("name", "?") for rec in records}
        err = {r.id: next((x["error_pct"] for x in r.entries if x["metric"] == "tokens_per_sec_per_gpu"), None)
               for r in results if r.skipped is None}
        by: dict = {}
        for rid, e in err.items():
            if e is not None:
                by.setdefault(model_of.get(rid, "?"), []).append(e)
        print("\n| model | rows | mean error (signed) | mean \\|err\\| | max \\|err\\| |\n|---|---:|---:|---:|---:|")
        for name, v in by.items():
            print(f"| {name} | {len(v)} | {sum(v) / len(v):+.1f} % | {sum(map(abs, v)) / len(v):.1f} % | "
                  f"{max(map(abs, v)):.1f} % |")
        worst = sorted((r for r in results if err.get(r.id) is not None), key=lambda r: -abs(err[r.id]))
        rows = worst[:args.worst]
    print("\n| record | runtime | plan as mapped | tok/s/GPU measured | predicted | error | TFLOP/s error |")
    print("|---|---|---|---:|---:|---:|---:|")
    for r in rows:
        if r.skipped is not None:
            print(f"| {r.id} | – | skipped: {r.skipped} | | | | |")
            continue
        e = next((x for x in r.entries if x["metric"] == "tokens_per_sec_per_gpu"), None)
        tf = next((x for x in r.entries if x["metric"] == "tflops_per_gpu"), None)
        mp = r.mapping or {}
        plan = str(mp.get("plan", "")).replace("|", "/")
        print(f"| {r.id} | {mp.get('runtime', '')} | `{plan}` | {e['measured']:,.0f} | {e['predicted']:,.0f} | "
              f"{pct(e['error_pct'])} | {pct(tf['error_pct']) if tf else '–'} |" if e else
              f"| {r.id} | {mp.get('runtime', '')} | `{plan}` | – | – | – | {pct(tf['error_pct']) if tf else '–'} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
