"""Pictures of a sweep: step time, time to train and cost against the GPU count, and the Pareto
front of time to train against cost (GPU-hours when no price is known)."""

from __future__ import annotations

from autoplace.plots.common import png_bytes, pyplot


def _series(rows: list) -> dict:
    """(hardware, seq_len, global_batch) → ok rows sorted by GPUs."""
    out: dict = {}
    for r in rows:
        if r["status"] != "ok":
            continue
        out.setdefault((r["hardware"], r["seq_len"], r["global_batch"]), []).append(r)
    for v in out.values():
        v.sort(key=lambda r: r["gpus"])
    return out


def _label(key, keys) -> str:
    hw, s, b = key
    parts = [hw]
    if len({k[1] for k in keys}) > 1:
        parts.append(f"seq {s}")
    if len({k[2] for k in keys}) > 1:
        parts.append(f"batch {b}")
    return ", ".join(parts)


def curves_figure(sweep: dict):
    """Three panels against GPUs (log2): step time, time to train (tokens/s without --tokens), cost
    (GPU-hours without a price)."""
    plt = pyplot()
    rows = sweep["rows"]
    ser = _series(rows)
    tokens = any(r.get("time_to_train_s") is not None for r in rows if r["status"] == "ok")
    metric = sweep.get("cost_metric", "gpu_hours")
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for key, rs in ser.items():
        lab = _label(key, list(ser))
        g = [r["gpus"] for r in rs]
        axes[0].plot(g, [r["step_s"] for r in rs], "o-", label=lab)
        if tokens:
            axes[1].plot(g, [r["time_to_train_s"] / 86400 for r in rs], "o-", label=lab)
            y = [r["cost"] if metric == "cost" else r["gpu_hours"] for r in rs]
        else:
            axes[1].plot(g, [r["tokens_per_s"] for r in rs], "o-", label=lab)
            y = [(r["cost_per_token"] if metric == "cost" else r["gpu_seconds_per_token"] / 3600) * 1e9 for r in rs]
        axes[2].plot(g, y, "o-", label=lab)
    dl = sweep.get("deadline")
    if dl and tokens:
        axes[1].axhline(dl["deadline_s"] / 86400, color="#d62728", ls="--", lw=1, label="deadline")
        if dl.get("pick") is not None:
            r = rows[dl["pick"]]
            axes[1].plot([r["gpus"]], [r["time_to_train_s"] / 86400], "*", ms=14, color="#d62728", label="pick")
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xlabel("GPUs")
        ax.grid(alpha=0.3, which="both")
    axes[0].set_yscale("log")
    axes[0].set_ylabel("step time (s)")
    if tokens:
        axes[1].set_yscale("log")
        from autoplace.analysis.inputs import fmt_tokens
        n = next(r["tokens"] for r in rows if r["status"] == "ok")
        axes[1].set_ylabel(f"days to train {fmt_tokens(n)} tokens")
        axes[2].set_ylabel("cost" if metric == "cost" else "GPU-hours")
    else:
        axes[1].set_ylabel("tokens / s (cluster)")
        axes[2].set_ylabel(("cost" if metric == "cost" else "GPU-hours") + " per 1B tokens")
    from matplotlib.ticker import FuncFormatter
    axes[2].yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:,.0f}"))
    for ax in axes[:2]:
        ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda y, _: f"{y:g}" if f"{y:g}"[0] in "25" else ""))
    axes[0].legend(fontsize=7)
    axes[1].legend(fontsize=7)
    fig.suptitle(f"sweep: {sweep.get('model', '')}", fontsize=10)
    fig.tight_layout()
    return fig


def pareto_figure(sweep: dict):
    """Every feasible point as time vs cost (per 1B tokens without --tokens); the front joined."""
    plt = pyplot()
    rows = sweep["rows"]
    metric = sweep.get("cost_metric", "gpu_hours")
    tokens = any(r.get("time_to_train_s") is not None for r in rows if r["status"] == "ok")

    def xy(r):
        if tokens:
            return r["time_to_train_s"] / 86400, (r["cost"] if metric == "cost" else r["gpu_hours"])
        return (r["step_s"] / r["tokens_per_step"] * 1e9 / 86400,
                (r["cost_per_token"] if metric == "cost" else r["gpu_seconds_per_token"] / 3600) * 1e9)

    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    ser = _series(rows)
    for key, rs in ser.items():
        pts = [xy(r) for r in rs]
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], label=_label(key, list(ser)), zorder=3)
        for r, (x, y) in zip(rs, pts):
            ax.annotate(str(r["gpus"]), (x, y), textcoords="offset points", xytext=(4, 3), fontsize=7)
    front = [xy(rows[i]) for i in sweep["pareto"]]
    if front:
        ax.plot([p[0] for p in front], [p[1] for p in front], "-", color="#333333", lw=1.2, zorder=2,
                label="Pareto front")
    dl = sweep.get("deadline")
    if dl and tokens:
        ax.axvline(dl["deadline_s"] / 86400, color="#d62728", ls="--", lw=1, label="deadline")
        if dl.get("pick") is not None:
            x, y = xy(rows[dl["pick"]])
            ax.plot([x], [y], "*", ms=16, color="#d62728", zorder=4, label="pick")
    from matplotlib.ticker import FuncFormatter
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:,.0f}"))
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
    ax.xaxis.set_minor_formatter(FuncFormatter(lambda x, _: f"{x:g}" if str(f"{x:g}")[0] in "25" else ""))
    ax.set_xlabel("days to train" + ("" if tokens else " 1B tokens"))
    ax.set_ylabel(("cost" if metric == "cost" else "GPU-hours") + ("" if tokens else " per 1B tokens"))
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    ax.set_title("time vs " + ("cost" if metric == "cost" else "GPU-hours (no price known)")
                 + " — labels: GPUs", fontsize=10)
    return fig


def sweep_pictures(sweep: dict, prefix: str = "") -> dict:
    return {f"{prefix}sweep_curves.png": png_bytes(curves_figure(sweep)),
            f"{prefix}pareto.png": png_bytes(pareto_figure(sweep))}
