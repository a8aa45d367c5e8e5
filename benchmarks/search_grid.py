"""Every preset × {8, 64, 1024, 16384} GPUs × {H100, B200} through `autoplace search` (library call,
default space, method auto): each cell ends in a plan or a one-line refusal, never a traceback.

    .venv/bin/python benchmarks/search_grid.py [--presets 7b,13b] [--gpus 8,64] [--hardware b200]

Prints one line per cell (outcome, best step, seconds) and exits 1 if any cell raised anything but a
user-facing AutoplaceError. The CI subset is tests/test_search_grid.py."""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from autoplace.search.grid_check import GPUS, HARDWARE, run_cell  # noqa: E402
from autoplace.specs.presets import PRESETS  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--presets", default=",".join(PRESETS))
    ap.add_argument("--gpus", default=",".join(map(str, GPUS)))
    ap.add_argument("--hardware", default=",".join(HARDWARE))
    a = ap.parse_args(argv)
    crashes = 0
    for hw in a.hardware.split(","):
        for name in a.presets.split(","):
            for g in (int(x) for x in a.gpus.split(",")):
                t0 = time.perf_counter()
                try:
                    outcome, step, msg = run_cell(name, g, hw)
                except Exception:  # noqa: BLE001 — a crash is what this looks for
                    crashes += 1
                    outcome, step, msg = "CRASH", None, traceback.format_exc().splitlines()[-1]
                s = f"{step:.4f} s" if step is not None else msg[:100]
                print(f"{hw:14s} {name:16s} {g:6d}  {outcome:20s} {s}  ({time.perf_counter() - t0:.1f} s)", flush=True)
    print(f"{crashes} crash(es)")
    return 1 if crashes else 0


if __name__ == "__main__":
    sys.exit(main())
