"""The default search's #1 plan is a training stack's, with that stack's numbers, over every preset
(and the HF configs under tests/data/hf_configs, if any) at 8/64/256/1024 GPUs.

    .venv/bin/python benchmarks/stack_headline.py [--models 13b,7b] [--gpus 8,64] [--hardware b200]

One line per cell: OK, or the problems `autoplace.search.grid_check.headline_problems` finds (the
#1 row not run by a stack, or its step/memory differing from `search --launcher L`). Exits 1 on any
problem. CI checks a few cells (tests/test_search_stacks.py)."""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from autoplace.search.grid_check import headline_problems  # noqa: E402
from autoplace.specs.presets import PRESETS  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(n for n in PRESETS if n != "llama-tiny"))
    ap.add_argument("--gpus", default="8,64,256,1024")
    ap.add_argument("--hardware", default="h100-sxm-80gb")
    a = ap.parse_args(argv)
    bad = 0
    for name in a.models.split(","):
        for g in (int(x) for x in a.gpus.split(",")):
            t0 = time.perf_counter()
            probs = headline_problems(name, g, a.hardware)
            bad += bool(probs)
            print(f"{name:16s} {g:5d}  {'OK' if not probs else '; '.join(probs)}  ({time.perf_counter() - t0:.1f} s)",
                  flush=True)
    print(f"{bad} cell(s) with problems")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
