"""The hostile-input campaign: random cases from every generator of `tests/fuzzlib.py` (config.json,
hardware TOML, --runtime-set, plan strings, plan.json, CLI numbers, search-space TOML, file types,
names that try to inject commands into emitted files), run through the real CLI in-process; prints
the count per outcome class and every case in a bad class.

    PYTHONPATH=. python benchmarks/fuzz_campaign.py [--per-kind 60] [--seed 0] [--json OUT]

Exit status 1 when any case lands in a bad class (traceback, hang, bad_number, accepted_bad,
not_one_line, wrong_exit, injected).
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import fuzzlib  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-kind", type=int, default=60, help="cases per generator")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kinds", default=",".join(fuzzlib.GENERATORS), help="comma-separated generators")
    ap.add_argument("--json", default=None, help="write the counts and bad cases here")
    a = ap.parse_args(argv)
    rng = random.Random(a.seed)
    counts: dict = collections.defaultdict(collections.Counter)
    bad = []
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="autoplace-fuzz-") as work:
        for kind in a.kinds.split(","):
            gen = fuzzlib.GENERATORS[kind]
            for _ in range(a.per_kind if kind != "injection" else max(3, a.per_kind // 10)):
                out = fuzzlib.run_case(gen(rng), Path(work))
                counts[kind][out.cls] += 1
                if out.cls in fuzzlib.BAD:
                    bad.append({"class": out.cls, "case": out.case.label(), "detail": out.detail})
            print(f"{kind:12s} " + ", ".join(f"{c} {n}" for c, n in sorted(counts[kind].items())),
                  file=sys.stderr, flush=True)
    total = collections.Counter()
    for c in counts.values():
        total.update(c)
    print(f"\n{sum(total.values())} cases in {time.time() - t0:.0f} s")
    for cls in fuzzlib.CLASSES:
        print(f"  {cls:13s} {total.get(cls, 0)}")
    for b in bad[:50]:
        print(f"BAD {b['class']}: {b['case']} -> {b['detail'][:200]}")
    if a.json:
        Path(a.json).write_text(json.dumps({"counts": {k: dict(v) for k, v in counts.items()},
                                            "total": dict(total), "bad": bad}, indent=2))
    return 1 if any(total.get(c) for c in fuzzlib.BAD) else 0


if __name__ == "__main__":
    sys.exit(main())
