"""Pictures of one plan (or a few side by side), from `estimate` documents and the schedule timeline."""

from __future__ import annotations

from autoplace.plots.common import GIB, MEM_COLORS, MEM_TERMS, TERM_COLORS, png_bytes, pyplot


def plan_title(doc: dict) -> str:
    p = doc["plan"]
    return (f"{doc['model']['name']} on {doc['hardware']['gpus']} × {doc['hardware']['name']} — "
            f"dp{p['dp']} tp{p['tp']} pp{p['pp']}" + (f" v{p['vpp']}" if p.get("schedule") == "interleaved" else "")
            + (f" cp{p['cp']}" if p["cp"] > 1 else "") + (f" ep{p['ep']}" if p["ep"] > 1 else "")
            + f" zero{p['zero']} mbs{p['mbs']}")


def memory_figure(docs: list, labels: list | None = None):
    """Stacked bars of the memory terms per pipeline stage, one panel per plan, with the limit."""
    plt = pyplot()
    n = len(docs)
    labels = labels or [None] * n
    fig, axes = plt.subplots(1, n, figsize=(max(6.0, 4.2 + 0.12 * max(len(d["memory"]["per_stage"]) for d in docs)) * (1 if n == 1 else 0.75 * n), 4.2),
                             squeeze=False, sharey=True)
    for ax, doc, lab in zip(axes[0], docs, labels):
        mem = doc["memory"]
        st = mem["per_stage"]
        xs = [s["stage"] for s in st]
        bottom = [0.0] * len(st)
        for term, col in zip(MEM_TERMS, MEM_COLORS):
            vals = [s[term] / GIB for s in st]
            ax.bar(xs, vals, bottom=bottom, color=col, label=term, width=0.8)
            bottom = [b + v for b, v in zip(bottom, vals)]
        lim = mem["limit_bytes"] / GIB
        ax.axhline(lim, color="#d62728", ls="--", lw=1.5, label=f"limit {lim:.1f} GiB")
        b = mem["binding_stage"]
        ax.annotate(f"peak {mem['peak_bytes'] / GIB:.1f} GiB", (b, bottom[b]), textcoords="offset points",
                    xytext=(0, 4), ha="center", fontsize=8)
        ax.set_xlabel("pipeline stage")
        ax.set_title((lab + ": " if lab else "") + ("fits" if mem["fits"] else "DOES NOT FIT"), fontsize=10)
        if len(xs) <= 16:
            ax.set_xticks(xs)
        ax.set_ylim(0, max(lim, max(bottom)) * 1.15)
    axes[0][0].set_ylabel("GiB per GPU")
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.suptitle("memory per stage — " + plan_title(docs[0]) if n == 1 else "memory per stage", fontsize=10)
    return fig


def breakdown_figure(docs: list, labels: list | None = None):
    """Step time as stacked horizontal bars of the breakdown terms (they add up to the step)."""
    plt = pyplot()
    n = len(docs)
    labels = labels or [f"plan {i + 1}" for i in range(n)]
    fig, ax = plt.subplots(figsize=(8.5, 1.4 + 0.7 * n))
    terms = [k for k in TERM_COLORS if any(d["time"]["breakdown_s"].get(k, 0) > 0 for d in docs)]
    seen: set = set()
    for y, doc in enumerate(docs):
        left = 0.0
        for k in terms:
            v = doc["time"]["breakdown_s"].get(k, 0.0)
            if v <= 0:
                continue
            ax.barh(y, v, left=left, color=TERM_COLORS[k], label=None if k in seen else k, height=0.6)
            seen.add(k)
            left += v
        ax.text(left, y, f"  {doc['time']['step_s']:.3f} s", va="center", fontsize=8)
    ax.legend(fontsize=7, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.35 if n == 1 else -0.2))
    ax.set_yticks(range(n))
    ax.set_yticklabels(labels)
    ax.invert_yaxis()
    ax.set_xlabel("seconds per step (after overlap)")
    ax.set_xlim(0, max(d["time"]["step_s"] for d in docs) * 1.18)
    ax.set_title("step-time breakdown" + (" — " + plan_title(docs[0]) if n == 1 else ""), fontsize=10)
    return fig


def _gantt(ax, tl: dict, lo: float, hi: float, labels: bool) -> None:
    cols = {"F": ("#4c72b0", "#8fb0e0"), "B": ("#dd8452", "#f2b98f")}
    groups: dict = {}
    shown = [o for o in tl["ops"] if o.end > lo and o.start < hi]
    for o in shown:
        groups.setdefault((o.stage, o.kind, o.chunk % 2), []).append((o.start, o.end - o.start))
    for (st, kind, par), bars in groups.items():
        ax.broken_barh(bars, (st - 0.4, 0.8), facecolors=cols[kind][par], edgecolor="white",
                       linewidth=0.4 if labels else 0.0)
    if labels:
        for o in shown:
            if (o.end - o.start) > (hi - lo) / 70:
                ax.text((max(o.start, lo) + min(o.end, hi)) / 2, o.stage,
                        str(o.micro) + (f"·{o.chunk}" if tl["v"] > 1 else ""), ha="center", va="center",
                        fontsize=5.5, color="white" if o.kind == "F" else "black", clip_on=True)
    if lo <= tl["pipeline_s"] <= hi * 1.0001:
        ax.axvline(tl["pipeline_s"], color="#d62728", ls="--", lw=1.2)
    ax.set_xlim(lo, hi + (hi - lo) * 0.01)
    p = tl["pp"]
    ax.set_yticks(range(p))
    ax.set_yticklabels([f"stage {i}" for i in range(p)] if p <= 16 else
                       [f"{i}" if i % max(1, p // 8) == 0 else "" for i in range(p)], fontsize=7)
    ax.set_ylim(p - 0.5, -0.5)


def timeline_figure(tl: dict, title: str = ""):
    """Gantt chart of the pipeline schedule: forward / backward of every micro-batch on every stage
    (labels: micro-batch·chunk). Long schedules get two zoomed panels: warm-up and cool-down."""
    plt = pyplot()
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    p, v, m = tl["pp"], tl["v"], tl["m"]
    ops, span = tl["ops"], tl["makespan_s"]
    zoom = len(ops) > 240
    h = 0.35 * p + 1.2
    if zoom:
        fig = plt.figure(figsize=(12, 2 * h + 1.2))
        gs = fig.add_gridspec(2, 2, hspace=0.45, wspace=0.12)
        ax = fig.add_subplot(gs[0, :])
        unit = max(f + b for f, b in zip(tl["stage_f"], tl["stage_b"])) / v
        w = min(span / 2, max(3.0, 0.35 * (p * v + 2 * p)) * unit)
        a1, a2 = fig.add_subplot(gs[1, 0]), fig.add_subplot(gs[1, 1])
        _gantt(ax, tl, 0.0, span, labels=False)
        _gantt(a1, tl, 0.0, w, labels=True)
        _gantt(a2, tl, span - w, span, labels=True)
        a1.set_title("warm-up (first %.3f s)" % w, fontsize=8)
        a2.set_title("cool-down (last %.3f s)" % w, fontsize=8)
        a2.set_yticklabels([])
        a1.set_xlabel("seconds into the step", fontsize=8)
        a2.set_xlabel("seconds into the step", fontsize=8)
    else:
        fig, ax = plt.subplots(figsize=(12, h + 0.6))
        _gantt(ax, tl, 0.0, span, labels=True)
    ax.set_xlabel("seconds into the step (p2p transfers not drawn: the model adds them as pp_comm)", fontsize=8)
    hnd = [Patch(color="#4c72b0", label="forward"), Patch(color="#dd8452", label="backward (+recompute)")]
    if v > 1:
        hnd += [Patch(color="#8fb0e0", label="forward, odd chunk"), Patch(color="#f2b98f", label="backward, odd chunk")]
    hnd.append(Line2D([0], [0], color="#d62728", ls="--", label=f"model pipeline time {tl['pipeline_s']:.3f} s"))
    fig.legend(handles=hnd, fontsize=7, loc="upper center", ncol=5, bbox_to_anchor=(0.5, 0.02 if zoom else 0.0))
    busy0 = sum(o.end - o.start for o in ops if o.stage == 0)
    sched = (tl["schedule"] + (f" v={v}" if v > 1 else "")) if p > 1 else "no pipeline (gradient accumulation)"
    ax.set_title(f"{title + chr(10) if title else ''}{sched}, {m} micro-batches × {p} stages: makespan "
                 f"{span:.3f} s (model {tl['pipeline_s']:.3f} s), stage 0 idle {1 - busy0 / span:.1%}", fontsize=9)
    fig.subplots_adjust(bottom=0.18 if not zoom else 0.1)
    return fig


def plan_pictures(model, hw, train, plan, world: int, doc: dict, prefix: str = "") -> dict:
    """{file name: PNG bytes}: memory per stage, step-time breakdown, pipeline timeline."""
    from autoplace.analysis.schedule import timeline
    from autoplace.placement.rules import Ctx
    pics = {}
    if "memory" in doc:
        pics[f"{prefix}memory.png"] = png_bytes(memory_figure([doc]))
    if "time" in doc:
        pics[f"{prefix}step_breakdown.png"] = png_bytes(breakdown_figure([doc], ["step"]))
        tl = timeline(Ctx(model, train, world), hw, plan)
        pics[f"{prefix}pipeline_timeline.png"] = png_bytes(timeline_figure(tl, plan_title(doc)))
    return pics
