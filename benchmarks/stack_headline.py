"""The default search's #1 plan is a training stack's, with that stack's numbers, over every preset
and every Hugging Face config of a directory at 8/64/256/1024 GPUs.

    .venv/bin/python benchmarks/stack_headline.py --configs tests/data/hf_configs
    .venv/bin/python benchmarks/stack_headline.py --models 13b,7b --gpus 8,64 --hardware b200

One row per cell (a config autoplace refuses is one row for all its GPU counts): `ok` (the #1 row is
priced by megatron, deepspeed, torchtitan or accelerate, that stack's own model says it fits, and its
step time and peak memory equal `search --launcher L`'s), `no plan` (no stack runs a plan that fits:
the one-line refusal `search` prints), `refused` (the config is refused with the reason, e.g. a hybrid
state-space model), or `PROBLEM` (what `autoplace.search.grid_check.headline_check` found, or a
traceback). Exits 1 on any problem. CI checks every preset and config once (tests/test_search_stacks.py)."""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from autoplace.search.grid_check import headline_check  # noqa: E402
from autoplace.specs.presets import PRESETS  # noqa: E402


def _models(a) -> list[tuple[str, object]]:
    """(row name, preset name or ModelSpec or the refusal message)."""
    from autoplace.errors import InputError
    from autoplace.specs.hf_config import load_hf_config
    out: list[tuple[str, object]] = [(n, n) for n in a.models.split(",") if n]
    if a.configs:
        for d in sorted(p for p in Path(a.configs).iterdir() if (p / "config.json").is_file()):
            try:
                out.append((d.name, load_hf_config(d)))
            except InputError as e:
                out.append((d.name, e))
    return out


_SHORT = {"megatron": "meg", "deepspeed": "ds", "torchtitan": "tt", "accelerate": "acc"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(PRESETS), help="comma-separated presets ('' for none)")
    ap.add_argument("--configs", default="", help="a directory of <name>/config.json (e.g. tests/data/hf_configs)")
    ap.add_argument("--gpus", default="8,64,256,1024")
    ap.add_argument("--hardware", default="h100-sxm-80gb")
    a = ap.parse_args(argv)
    gpus = [int(x) for x in a.gpus.split(",")]
    counts = {"ok": 0, "no plan": 0, "refused": 0, "PROBLEM": 0}
    t_all = time.perf_counter()
    print("runs on: meg = megatron, ds = deepspeed, tt = torchtitan, acc = accelerate; "
          "step and peak are the #1 stack's (= `search --launcher L` for the same plan)")
    print(f"{'model':38s} {'GPUs':>5s}  {'outcome':8s} {'#1 stack':10s} {'step s':>9s} {'peak GiB':>8s}  "
          f"{'runs on':14s} plan / refusal / problems")
    for name, m in _models(a):
        if isinstance(m, Exception):
            counts["refused"] += len(gpus)
            why = str(m).split(": ", 1)[-1]
            print(f"{name:38s} {'all':>5s}  {'refused':8s} {'-':10s} {'-':>9s} {'-':>8s}  {'-':14s} {why} "
                  f"(exit {m.exit_code})", flush=True)
            continue
        for g in gpus:
            t0 = time.perf_counter()
            try:
                r = headline_check(m, g, a.hardware)
            except Exception:           # a traceback is a problem of the cell, not the end of the run
                r = {"outcome": "problem", "launcher": None, "plan": None, "step_s": None, "peak_gib": None,
                     "runs_on": [], "problems": ["traceback: " + traceback.format_exc().strip().splitlines()[-1]],
                     "message": ""}
            key = "PROBLEM" if r["outcome"] == "problem" else r["outcome"]
            counts[key] += 1
            note = "; ".join(r["problems"]) if r["problems"] else (r["message"] or r["plan"] or "")
            if not r["problems"] and len(note) > 110:       # a refusal names every stack's reason: `search` shows them
                note = note[:110] + "…"
            step = f"{r['step_s']:.3f}" if r["step_s"] is not None else "-"
            peak = f"{r['peak_gib']:.1f}" if r["peak_gib"] is not None else "-"
            on = ",".join(_SHORT.get(n, n) for n in r["runs_on"]) or "-"
            print(f"{name:38s} {g:5d}  {key:8s} {r['launcher'] or '-':10s} {step:>9s} {peak:>8s}  {on:14s} {note}",
                  flush=True)
            print(f"  {name} {g}: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    cells = sum(counts.values())
    print(f"{cells} cells ({a.hardware}): {counts['ok']} ok, {counts['no plan']} no plan (no stack runs a plan that "
          f"fits, said in one line), {counts['refused']} refused with the reason, {counts['PROBLEM']} with problems "
          f"({time.perf_counter() - t_all:.0f} s)")
    return 1 if counts["PROBLEM"] else 0


if __name__ == "__main__":
    sys.exit(main())
