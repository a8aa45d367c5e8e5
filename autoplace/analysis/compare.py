"""`autoplace compare`: two plans side by side — memory per stage, step-time terms, communication
per axis — and the sentence that says what decides the difference (`analysis.explain.verdict`).

Input: two `estimate` documents (the plans may differ in anything, including hardware, GPU count
and batch: plan files carry their own)."""

from __future__ import annotations

from autoplace.analysis.explain import knob_diffs, verdict
from autoplace.contract import SCHEMA_VERSION
from autoplace.errors import IllegalPlanError

AXIS_TERM = {"dp": "dp_comm_exposed", "tp": "tp_comm", "pp": "pp_comm", "cp": "cp_comm", "ep": "ep_comm",
             "offload": "offload"}


def _short(doc: dict) -> str:
    from autoplace.plan import Plan
    return Plan.from_dict(doc["plan"]).short()


def compare_docs(a: dict, b: dict, labels=("A", "B")) -> dict:
    """The comparison document (JSON-ready). Raises IllegalPlanError if a plan is illegal."""
    for doc, lab in ((a, labels[0]), (b, labels[1])):
        if not doc["legal"]:
            raise IllegalPlanError(f"plan {lab} ({_short(doc)}) is illegal: " + "; ".join(
                f"{v['rule']}: {v['message']}" for v in doc["violations"]), doc["violations"])
        if "time" not in doc:
            raise IllegalPlanError(f"plan {lab}: compare needs step times (not --states-only)")
    ta, tb = a["time"]["breakdown_s"], b["time"]["breakdown_s"]
    terms = [{"term": k, "a": ta.get(k, 0.0), "b": tb.get(k, 0.0)} for k in dict.fromkeys([*ta, *tb])]
    terms.append({"term": "step", "a": a["time"]["step_s"], "b": b["time"]["step_s"]})
    ca, cb = a["communication"]["bytes_per_step"], b["communication"]["bytes_per_step"]
    comm = [{"axis": ax, "a_bytes": ca.get(ax, 0.0), "b_bytes": cb.get(ax, 0.0),
             "a_s": ta.get(AXIS_TERM.get(ax)) if AXIS_TERM.get(ax) else None,
             "b_s": tb.get(AXIS_TERM.get(ax)) if AXIS_TERM.get(ax) else None} for ax in dict.fromkeys([*ca, *cb])]
    sa, sb = a["memory"]["per_stage"], b["memory"]["per_stage"]

    def trio(st):
        if st is None:
            return [None, None, None]
        return [st["params"] + st["grads"] + st["optimizer"], st["activations"], st["total"]]

    mem = [{"stage": i, "values": trio(sa[i] if i < len(sa) else None) + trio(sb[i] if i < len(sb) else None)}
           for i in range(max(len(sa), len(sb)))]
    return {
        "schema_version": SCHEMA_VERSION,
        "labels": list(labels),
        "plans": [_short(a), _short(b)],
        "knobs": [{"knob": k, "a": va, "b": vb} for k, va, vb in knob_diffs(a["plan"], b["plan"])],
        "terms": terms,
        "communication": comm,
        "memory": mem,
        "peak_bytes": [a["memory"]["peak_bytes"], b["memory"]["peak_bytes"]],
        "limit_bytes": [a["memory"]["limit_bytes"], b["memory"]["limit_bytes"]],
        "fits": [a["memory"]["fits"], b["memory"]["fits"]],
        "tokens_per_s": [a["time"]["tokens_per_s_per_gpu"] * a["hardware"]["gpus"],
                         b["time"]["tokens_per_s_per_gpu"] * b["hardware"]["gpus"]],
        "verdict": verdict(a, b, *labels),
        "documents": [a, b],
    }
