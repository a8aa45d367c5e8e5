"""Why one plan beats another, from two `estimate` documents: the knobs that differ, the step-time
terms that differ, and one sentence naming the term that decides the difference.

`why_lines` is what `autoplace search` prints under its table ("why #1 beats #2"); `verdict` is the
sentence of `autoplace compare`. Both read the same `knob_diffs` / `term_diffs`."""

from __future__ import annotations

GIB = 2**30

PLAN_KEYS = ("dp", "dp_replicate", "tp", "pp", "vpp", "cp", "ep", "zero", "reshard_after_forward", "sp",
             "recompute", "recompute_layers", "offload", "offload_fraction", "mbs", "schedule", "vpp_group",
             "rank_order", "tp_overlap", "layer_split", "stage_recompute")

# the plan knobs each step-time term mostly answers to (for the sentence)
TERM_KNOBS = {
    "compute": ("mbs", "tp", "cp", "pp", "layer_split"),
    "recompute": ("recompute", "recompute_layers", "stage_recompute"),
    "tp_comm": ("tp", "sp", "tp_overlap", "mbs"),
    "dp_comm_exposed": ("dp", "dp_replicate", "zero", "reshard_after_forward", "mbs"),
    "pp_bubble": ("pp", "vpp", "schedule", "mbs", "dp", "layer_split"),
    "pp_comm": ("pp", "vpp", "mbs"),
    "cp_comm": ("cp",),
    "ep_comm": ("ep",),
    "host": ("mbs", "ep", "tp"),
    "optimizer": ("zero", "offload", "dp"),
    "offload": ("offload", "offload_fraction"),
    "overhead": (),
}
TERM_WORDS = {
    "compute": "compute", "recompute": "recomputation", "tp_comm": "exposed tensor-parallel communication",
    "dp_comm_exposed": "exposed data-parallel communication", "pp_bubble": "the pipeline bubble",
    "pp_comm": "pipeline point-to-point communication", "cp_comm": "exposed context-parallel communication",
    "ep_comm": "expert-parallel all-to-all",
    "host": "host time the GPU waits for (kernel launches, the dropless MoE sync)", "optimizer": "the optimizer step", "offload": "host offload traffic",
    "overhead": "fixed per-step overhead",
}


def rle(xs) -> str:
    """[1, 2, 2, 2, 1] → '1,2×3,1' (compact per-stage lists)."""
    out, prev, n = [], None, 0
    for x in list(xs) + [object()]:
        if x == prev:
            n += 1
            continue
        if prev is not None:
            out.append(f"{prev}×{n}" if n > 1 else str(prev))
        prev, n = x, 1
    return ",".join(out)


def _fmt(v) -> str:
    return "[" + rle(v) + "]" if isinstance(v, (list, tuple)) else str(v)


def knob_diffs(pa: dict, pb: dict) -> list[tuple[str, object, object]]:
    """(knob, value in a, value in b) for the plan knobs that differ (vpp only under interleaving)."""
    inter = "interleaved" in (pa.get("schedule"), pb.get("schedule"))
    return [(k, pa[k], pb.get(k)) for k in PLAN_KEYS if k in pa and pa.get(k) != pb.get(k)
            and (inter or k not in ("vpp", "vpp_group"))]


def term_diffs(ta: dict, tb: dict) -> list[tuple[float, str, float, float]]:
    """(a − b, term, a, b) for the breakdown terms that differ, most negative (a's gain) first."""
    terms = []
    for k, va in ta["breakdown_s"].items():
        vb = tb["breakdown_s"].get(k, 0.0)
        if abs(va - vb) > max(1e-4 * tb["step_s"], 1e-7):
            terms.append((va - vb, k, va, vb))
    terms.sort(key=lambda x: x[0])
    return terms


def why_lines(a: dict, b: dict) -> str:
    """Why plan a beats plan b: knobs that differ, then the breakdown terms that differ most."""
    diff = [f"{k} {_fmt(va)} vs {_fmt(vb)}" for k, va, vb in knob_diffs(a["plan"], b["plan"])]
    ta, tb = a["time"], b["time"]
    d = ta["step_s"] - tb["step_s"]
    terms = term_diffs(ta, tb)
    if abs(d) <= 1e-9 * tb["step_s"]:
        head = (f"[bold]#1 and #2 tie[/] at {ta['step_s']:.4f} s under the model (#1 comes first in the "
                f"canonical enumeration order): ")
    else:
        head = (f"[bold]why #1 beats #2[/] ({ta['step_s']:.4f} s vs {tb['step_s']:.4f} s, "
                f"{-d / tb['step_s']:.2%} faster): ")
    out = [head + ("; ".join(diff) if diff else "same knobs")]
    if terms:
        out.append("  " + "; ".join(f"{k} {va:.4f} vs {vb:.4f} s ({dv:+.4f})" for dv, k, va, vb in terms[:5]))
    ma, mb = a["memory"]["peak_bytes"], b["memory"]["peak_bytes"]
    if abs(ma - mb) > 2**26:
        out.append(f"  peak memory {ma / GIB:.1f} vs {mb / GIB:.1f} GiB")
    return "\n".join(out)


def throughput(doc: dict) -> float:
    """Cluster tokens per second of an estimate document."""
    return doc["time"]["tokens_per_s_per_gpu"] * doc["hardware"]["gpus"]


def memory_note(doc: dict, label: str) -> str:
    """'' when the plan fits, else which stage is over and its largest term."""
    mem = doc["memory"]
    if mem["fits"]:
        return ""
    st = mem["per_stage"][mem["binding_stage"]]
    terms = {k: st[k] for k in ("params", "grads", "optimizer", "activations", "transient", "overhead")}
    big = max(terms, key=terms.get)
    return (f"{label} does not fit: stage {st['stage']} needs {st['total'] / GIB:.2f} GiB of "
            f"{mem['limit_bytes'] / GIB:.2f} GiB ({big} {terms[big] / GIB:.2f} GiB is the largest term)")


def verdict(a: dict, b: dict, la: str = "A", lb: str = "B") -> dict:
    """Which plan is faster and what decides it: {faster, slower, speedup, gap_s, decisive,
    decisive_share, offsets, sentence}. Plans are ranked by cluster throughput (tokens/s), which is
    step time when both train the same tokens per step on the same GPUs."""
    ra, rb = throughput(a), throughput(b)
    if ra >= rb:
        fast, slow, lf, ls = a, b, la, lb
    else:
        fast, slow, lf, ls = b, a, lb, la
    tf, ts = fast["time"], slow["time"]
    same_work = (fast["training"]["seq_len"] * fast["training"]["global_batch"]
                 == slow["training"]["seq_len"] * slow["training"]["global_batch"]
                 and fast["hardware"]["gpus"] == slow["hardware"]["gpus"])
    rf, rs = max(ra, rb), min(ra, rb)
    out = {"faster": lf, "slower": ls, "speedup": rf / rs if rs > 0 else float("inf"),
           "gap_s": ts["step_s"] - tf["step_s"], "decisive": None, "decisive_share": None, "offsets": []}
    notes = [n for n in (memory_note(a, la), memory_note(b, lb)) if n]
    if abs(rf - rs) <= 1e-9 * rf:
        out["faster"] = out["slower"] = None
        out["sentence"] = (f"{la} and {lb} tie under the model ({tf['step_s']:.4f} s per step)."
                           + (" " + "; ".join(notes) + "." if notes else ""))
        return out
    if same_work:
        head = (f"{lf} is {rf / rs - 1:.1%} faster than {ls} ({tf['step_s']:.3f} s vs {ts['step_s']:.3f} s "
                f"per step)")
    else:
        head = (f"{lf} trains {rf / rs - 1:.1%} more tokens per second than {ls} ({rf:,.0f} vs {rs:,.0f} tok/s; "
                f"step {tf['step_s']:.3f} s on {fast['hardware']['gpus']} GPUs vs {ts['step_s']:.3f} s on "
                f"{slow['hardware']['gpus']})")
    # slow − fast per term: positive = where the slower plan loses time
    terms = sorted(((vs - vf, k) for vf, k, vs in ((tf["breakdown_s"][k], k, ts["breakdown_s"].get(k, 0.0))
                                                  for k in tf["breakdown_s"])), reverse=True)
    gap = ts["step_s"] - tf["step_s"]
    knobs = {k: (va, vb) for k, va, vb in knob_diffs(fast["plan"], slow["plan"])}
    sentence = head
    if gap > 0 and terms and terms[0][0] > 0:
        dv, k = terms[0]
        share = dv / gap
        out["decisive"], out["decisive_share"] = k, share
        rel = [f"{kn} {_fmt(knobs[kn][1])} vs {_fmt(knobs[kn][0])}" for kn in TERM_KNOBS.get(k, ()) if kn in knobs]
        sentence += (f": {TERM_WORDS.get(k, k)} decides it — {dv:.3f} s more per step on {ls} "
                     f"({ts['breakdown_s'][k]:.3f} vs {tf['breakdown_s'][k]:.3f} s"
                     + (f"; {', '.join(rel)}" if rel else "") + f"), {share:.0%} of the gap")
        offs = sorted((dv2, k2) for dv2, k2 in terms if dv2 < -max(1e-4 * ts["step_s"], 1e-7))
        out["offsets"] = [{"term": k2, "seconds": -dv2} for dv2, k2 in offs]
        if offs:
            sentence += ", partly offset by " + ", ".join(f"{TERM_WORDS.get(k2, k2)} ({-dv2:.3f} s less on {ls})"
                                                          for dv2, k2 in offs[:2])
    elif not same_work:
        sentence += ": the difference is the GPU count and tokens per step, not one step-time term"
    sentence += "."
    if notes:
        sentence += " " + "; ".join(notes) + "."
    out["sentence"] = sentence
    return out


def plan_text(plan) -> str:
    """The plan as a `--plan` string with every knob that differs from the default (paste it into
    estimate / compare): 'dp=128,tp=4,zero=3,sp=1,recompute=block,recompute_layers=14,mbs=4,tp_overlap=1'."""
    from dataclasses import fields

    from autoplace.plan import Plan
    default = Plan()
    out = []
    for f in fields(Plan):
        v = getattr(plan, f.name)
        if v == getattr(default, f.name) or (f.name == "etp" and v == plan.tp) or \
                (f.name == "vpp_group" and v in (0, plan.pp)) or (f.name == "vpp" and plan.schedule != "interleaved"):
            continue
        if isinstance(v, bool):
            v = int(v)
        elif isinstance(v, tuple):
            v = ":".join(str(x) for x in v)
        out.append(f"{f.name}={v:g}" if isinstance(v, float) else f"{f.name}={v}")
    return ",".join(out)
