"""The fit of ATTENTION_RATE_SEQ (autoplace/cost/compute.py): the validation error at each candidate.

    python benchmarks/attention_rate_seq.py [--values 4096 5120 6144 8192]

For each value of the sequence length at which the profiles' [attention] rates hold, it prints the
mean |error| of modern_runs.json and the Megatron-Bridge archive (tokens/s/GPU) and of
public_runs.json (step time), their mean (the fitting criterion), and the runs outside the
project's sets, which are held out of the fit.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from autoplace.cost import compute as K  # noqa: E402
from autoplace.validate import load_records, run  # noqa: E402
from autoplace.validate.targets import modern_targets  # noqa: E402

SHARED = ROOT.parent / "shared" / "validation"
if not SHARED.exists():
    SHARED = Path("/work/shared/validation")
FILES = {"modern": SHARED / "modern_runs.json", "archive": ROOT / "benchmarks" / "bridge_archive_records.json",
         "public": SHARED / "public_runs.json", "outside (held out)": ROOT / "benchmarks" / "unseen_records.json"}


def errors(recs, step: bool) -> float:
    """Mean |error|: of tokens/s/GPU (modern_table.py), or with `step` of the step time each record's
    primary metric implies (public_table.py's "mean |step-time err|")."""
    import benchmarks.intervals as BI
    res, _ = run(recs)
    if not step:
        return modern_targets(res)["tokens_mean"]
    steps = [abs(math.expm1(-x["r"])) * 100 for x in BI.residuals_of(res) if x["kind"] == "step"]
    return sum(steps) / len(steps)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--values", type=int, nargs="*", default=[4096, 5120, 6144, 8192])
    a = ap.parse_args(argv)
    recs = {k: load_records(str(f)) for k, f in FILES.items()}
    shipped = K.ATTENTION_RATE_SEQ
    print("| ATTENTION_RATE_SEQ | modern | archive | public (step) | fit criterion | outside (held out) |")
    print("|---:|---:|---:|---:|---:|---:|")
    try:
        for v in a.values:
            K.ATTENTION_RATE_SEQ = v
            e = {k: errors(r, k == "public") for k, r in recs.items()}
            crit = (e["modern"] + e["archive"] + e["public"]) / 3
            mark = " (shipped)" if v == shipped else ""
            print(f"| {v}{mark} | {e['modern']:.2f} % | {e['archive']:.2f} % | {e['public']:.2f} % | {crit:.2f} % | "
                  f"{e['outside (held out)']:.2f} % |", flush=True)
    finally:
        K.ATTENTION_RATE_SEQ = shipped
    return 0


if __name__ == "__main__":
    sys.exit(main())
