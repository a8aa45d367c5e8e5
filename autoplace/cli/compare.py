"""`autoplace compare`: two plans side by side and the sentence on what decides the difference.

`--plan A --plan B` (with --model/--gpus/…) or `--plan-file a.json --plan-file b.json` (each file
carries its own model, cluster and batch), or one of each. Exit codes: 0 compared, 1 bad input,
2 a plan is illegal (its violated rules are listed)."""

from __future__ import annotations

from typing import List, Optional

import typer

from autoplace.cli.common import cli_errors, print_json
from autoplace.cli.visuals import PLOT_HELP, REPORT_HELP, check_outputs, emit

GIB = 2**30


def render(cmp: dict, console) -> None:
    from rich.table import Table
    la, lb = cmp["labels"]
    a, b = cmp["documents"]
    for lab, d, short in ((la, a, cmp["plans"][0]), (lb, b, cmp["plans"][1])):
        console.print(f"[bold]{lab}[/]: {short}  ({d['model']['name']} on {d['hardware']['gpus']} × "
                      f"{d['hardware']['name']}, seq {d['training']['seq_len']}, batch {d['training']['global_batch']})")
    t = Table(title="step-time terms (s, after overlap)", title_justify="left")
    for c in ("term", la, lb, f"{lb} − {la}"):
        t.add_column(c, justify="left" if c == "term" else "right")
    for r in cmp["terms"]:
        if r["a"] == 0 and r["b"] == 0:
            continue
        t.add_row(r["term"], f"{r['a']:.4f}", f"{r['b']:.4f}", f"{r['b'] - r['a']:+.4f}",
                  style="bold" if r["term"] in ("step", cmp["verdict"]["decisive"]) else None)
    console.print(t)
    c = Table(title="communication per rank per step: volume (GB) and exposed time (s)", title_justify="left")
    for col in ("axis", f"{la} GB", f"{lb} GB", f"{la} s", f"{lb} s"):
        c.add_column(col, justify="left" if col == "axis" else "right")
    for r in cmp["communication"]:
        c.add_row(r["axis"], f"{r['a_bytes'] / 1e9:,.3f}", f"{r['b_bytes'] / 1e9:,.3f}",
                  "—" if r["a_s"] is None else f"{r['a_s']:.4f}", "—" if r["b_s"] is None else f"{r['b_s']:.4f}")
    console.print(c)
    m = Table(title=f"memory per stage (GiB); limit {cmp['limit_bytes'][0] / GIB:.2f} | {cmp['limit_bytes'][1] / GIB:.2f}",
              title_justify="left")
    m.add_column("stage", justify="right")
    for lab in (la, lb):
        for k in ("states", "activations", "total"):
            m.add_column(f"{lab} {k}", justify="right")
    rows = cmp["memory"]
    show = rows if len(rows) <= 8 else rows[:3] + rows[-3:]
    for r in show:
        m.add_row(str(r["stage"]), *["" if v is None else f"{v / GIB:.2f}" for v in r["values"]])
    console.print(m)
    if cmp["knobs"]:
        console.print("[dim]knobs that differ: " + "; ".join(f"{k['knob']} {k['a']} vs {k['b']}" for k in cmp["knobs"]) + "[/]")
    console.print("[bold]" + cmp["verdict"]["sentence"] + "[/]")


def register(app: typer.Typer) -> None:
    @app.command()
    @cli_errors
    def compare(
        plan: Optional[List[str]] = typer.Option(None, "--plan", help='a plan, e.g. "tp=8,pp=2,zero=1" (give two, or one with --plan-file)'),
        plan_file: Optional[List[str]] = typer.Option(None, "--plan-file", help="plan.json written by search --emit (repeatable)"),
        label: Optional[List[str]] = typer.Option(None, "--label", help="names for the two plans (default A, B)"),
        model: Optional[str] = typer.Option(None, "--model", "-m", help="preset or HF config.json (for --plan)"),
        gpus: Optional[int] = typer.Option(None, "--gpus", "-n", help="total GPUs (for --plan)"),
        gpus_per_node: Optional[int] = typer.Option(None, "--gpus-per-node"),
        hardware: Optional[str] = typer.Option(None, "--hardware", help="profile name or .toml (for --plan)"),
        gpu_memory: Optional[str] = typer.Option(None, "--gpu-memory", help="override device memory, e.g. 40GiB"),
        seq_len: Optional[int] = typer.Option(None, "--seq-len"),
        global_batch: Optional[int] = typer.Option(None, "--global-batch", help="sequences per step"),
        precision: str = typer.Option("bf16", "--precision"),
        regime: str = typer.Option("zero", "--optimizer-regime"),
        headroom: float = typer.Option(0.0, "--memory-headroom", help="fraction of memory kept free"),
        as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
        plot: Optional[str] = typer.Option(None, "--plot", help=PLOT_HELP),
        report: Optional[str] = typer.Option(None, "--report", help=REPORT_HELP),
    ):
        """Two plans side by side: memory per stage, step-time terms, communication, and what decides it."""
        from autoplace.api import EstimateRequest, resolve_estimate
        from autoplace.api import compare as compare_plans
        from autoplace.errors import InputError
        check_outputs(plot, report)
        plans, files = list(plan or []), list(plan_file or [])
        if len(plans) + len(files) != 2:
            raise InputError(f"compare takes exactly two plans (--plan and/or --plan-file), got {len(plans) + len(files)}")
        labels = list(label or [])
        if labels and len(labels) != 2:
            raise InputError(f"--label: give two names (one per plan), got {len(labels)}")
        labels = labels or ["A", "B"]
        if labels[0] == labels[1]:
            raise InputError("--label: the two names must differ")
        if plans and (model is None or gpus is None):
            raise InputError("--plan needs --model and --gpus (or compare two --plan-file)")
        reqs = [EstimateRequest(model=model, gpus=gpus, plan=text, hardware=hardware, gpu_memory=gpu_memory,
                                gpus_per_node=gpus_per_node, seq_len=seq_len, global_batch=global_batch,
                                precision=precision, regime=regime, headroom=headroom) for text in plans]
        reqs += [EstimateRequest(plan_file=f, headroom=headroom) for f in files]
        cmp = compare_plans(reqs[0], reqs[1], (labels[0], labels[1])).document
        if as_json:
            print_json(cmp)
        else:
            from rich.console import Console
            con = Console()
            if not con.is_terminal:
                con = Console(width=150)
            render(cmp, con)
        if plot or report:
            entries = []
            for r in reqs:
                m, hw, train, p, world, _ = resolve_estimate(r)
                entries.append((m, hw, train, p.resolved(world), world))
            _visuals(cmp, entries, list(cmp["documents"]), labels, plot, report)


def _visuals(cmp, entries, docs, labels, plot, report) -> None:
    def pictures():
        from autoplace.analysis.schedule import timeline
        from autoplace.placement.rules import Ctx
        from autoplace.plots.common import png_bytes
        from autoplace.plots.plan import breakdown_figure, memory_figure, plan_title, timeline_figure
        pics = {"compare_memory.png": png_bytes(memory_figure(docs, labels)),
                "compare_step_breakdown.png": png_bytes(breakdown_figure(docs, labels))}
        for lab, (m, hw, train, p, world), d in zip(labels, entries, docs):
            tl = timeline(Ctx(m, train, world), hw, p)
            pics[f"{_safe(lab)}_pipeline_timeline.png"] = png_bytes(timeline_figure(tl, f"{lab}: " + plan_title(d)))
        return pics

    def sections(pics):
        from autoplace.html_report import compare_sections
        return compare_sections(cmp, pics)

    emit(plot, report, f"autoplace compare — {labels[0]} vs {labels[1]}", pictures, sections)


def _safe(name: str) -> str:
    import re
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name) or "plan"
