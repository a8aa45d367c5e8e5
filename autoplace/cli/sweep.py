"""`autoplace sweep`: the best plan at each GPU count (× hardware, sequence length, global batch),
time to train, GPU-hours, cost, the Pareto front, and the cheapest point that meets a deadline.

Exit codes: 0 done (rows where nothing fits say so), 1 bad input."""

from __future__ import annotations

from typing import List, Optional

import typer

from autoplace.cli.common import cli_errors, print_json, resolve_hardware, resolve_model
from autoplace.cli.visuals import PLOT_HELP, REPORT_HELP, check_outputs, emit

GIB = 2**30


def _variants(hardware, gpu_memory, gpus_per_node) -> list:
    from autoplace.analysis.inputs import parse_names
    names = parse_names(hardware)
    mems = parse_names(gpu_memory)
    out = []
    for name in names:
        for mem in mems:
            hw = resolve_hardware(name, mem, gpus_per_node)
            out.append((hw.name + (f" @{mem}" if mem else ""), hw))
    labels = [lab for lab, _ in out]
    if len(set(labels)) != len(labels):
        from autoplace.errors import InputError
        raise InputError("--hardware: the same profile is listed twice")
    return out


def render(doc: dict, console) -> None:
    from rich.table import Table

    from autoplace.analysis.inputs import fmt_duration, fmt_tokens
    rows = doc["rows"]
    multi_hw = len({r["hardware"] for r in rows}) > 1
    multi_s = len({r["seq_len"] for r in rows}) > 1
    multi_b = len({r["global_batch"] for r in rows}) > 1
    tok = doc.get("tokens")
    dl = doc.get("deadline") or {}
    metric = doc["cost_metric"]
    title = (f"{doc['model']} — best plan per point" + (f", {fmt_tokens(tok)} tokens" if tok else "")
             + f" ({doc['stats']['points']} points, {doc['stats']['seconds']:.1f} s)")
    t = Table(title=title, title_justify="left")
    cols = [("GPUs", "right")] + ([("hardware", "left")] if multi_hw else []) + ([("seq", "right")] if multi_s else []) \
        + ([("batch", "right")] if multi_b else []) + [("plan", "left"), ("step s", "right"), ("tok/s", "right"),
                                                       ("MFU", "right"), ("time to train", "right"), ("GPU-h", "right"),
                                                       ("cost", "right"), ("", "left")]
    stacks = any(r.get("stack") for r in rows)
    if stacks:      # the stack that runs each point's plan (and whose runtime priced it)
        cols.insert(cols.index(("plan", "left")) + 1, ("stack", "left"))
    for c, j in cols:
        t.add_column(c, justify=j, no_wrap=(c != "plan"))
    for i, r in enumerate(rows):
        lead = [f"{r['gpus']:,}"] + ([r["hardware"]] if multi_hw else []) + ([str(r["seq_len"])] if multi_s else []) \
            + ([str(r["global_batch"])] if multi_b else [])
        if r["status"] != "ok":
            msg = r.get("over") or r["message"]
            t.add_row(*lead, f"[red]{r['status']}[/]: {msg}", *[""] * (8 if stacks else 7))
            continue
        mark = ("★" if r["pareto"] else "") + (" ← pick" if dl.get("pick") == i else "")
        st = [f"{r.get('stack') or '—'} ({r.get('runtime') or 'default kernels'})"] if stacks else []
        t.add_row(*lead, r["plan_short"], *st, f"{r['step_s']:.3f}", f"{r['tokens_per_s']:,.0f}", f"{r['mfu']:.1%}",
                  fmt_duration(r["time_to_train_s"]), "—" if r["gpu_hours"] is None else f"{r['gpu_hours']:,.0f}",
                  "—" if r["cost"] is None else f"{r['cost']:,.0f}", mark,
                  style="bold" if dl.get("pick") == i else None)
    console.print(t)
    prices = {}
    for r in rows:
        prices.setdefault(r["hardware"], (r["price_per_gpu_hour"], r["price_source"]))
    console.print("[dim]price per GPU-hour: " + "; ".join(
        f"{h} {'—' if p is None else f'{p:g}'}" + (f" ({src})" if src else " (none: give --price-per-gpu-hour)")
        for h, (p, src) in prices.items()) + "[/]")
    console.print(f"[dim]★ Pareto front of time vs {'cost' if metric == 'cost' else 'GPU-hours (no price for every point)'}"
                  "; time to train = tokens / (tokens per step / step time), GPU-h = GPUs × time[/]")
    if dl:
        console.print(("[bold]deadline:[/] " if dl.get("pick") is not None else "[bold red]deadline:[/] ") + dl["reason"])


def register(app: typer.Typer) -> None:
    @app.command()
    @cli_errors
    def sweep(
        model: Optional[str] = typer.Option(None, "--model", "-m", help="preset (70b, llama3-70b, …) or HF config.json path"),
        gpus: str = typer.Option(..., "--gpus", "-n", help="64..4096 (powers of two), 64..4096:x2, 96..768:+96 or 64,128,512"),
        hardware: Optional[List[str]] = typer.Option(None, "--hardware", help="profile(s), repeat or comma-separate: h100-sxm-80gb,b200"),
        gpu_memory: Optional[str] = typer.Option(None, "--gpu-memory", help="override device memory, one or a list: 80GB,40GiB"),
        gpus_per_node: Optional[int] = typer.Option(None, "--gpus-per-node", help="default: the profile's"),
        seq_len: Optional[str] = typer.Option(None, "--seq-len", help="one or a list: 4096,8192 (default: the model's)"),
        global_batch: Optional[str] = typer.Option(None, "--global-batch", help="sequences per step, one or a list"),
        global_batch_tokens: Optional[int] = typer.Option(None, "--global-batch-tokens", help="tokens per step (default ~4M)"),
        precision: str = typer.Option("bf16", "--precision"),
        regime: Optional[str] = typer.Option(None, "--optimizer-regime", help="bytes/param regime; default: each stack's own"),
        runtime: Optional[str] = typer.Option(None, "--runtime", help="price every point under this runtime "
                                              "(default-kernels: the idealised what-if); default: each point's "
                                              "plan priced by the training stack that runs it"),
        space: str = typer.Option("default", "--space", help="search space name or .toml path"),
        method: str = typer.Option("auto", "--method", help="auto | exhaustive | ilp | bayes"),
        headroom: float = typer.Option(0.0, "--memory-headroom", help="fraction of memory kept free"),
        tokens: Optional[str] = typer.Option(None, "--tokens", help="tokens to train: 1T, 300B, 2e12"),
        price: Optional[str] = typer.Option(None, "--price-per-gpu-hour", help="2.5, or per profile: b200=5.5,h100-sxm-80gb=3"),
        deadline: Optional[str] = typer.Option(None, "--deadline", help="30d, 72h: pick the cheapest point that meets it"),
        workers: Optional[int] = typer.Option(None, "--workers", help="processes over points (default: all CPUs)"),
        as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
        plot: Optional[str] = typer.Option(None, "--plot", help=PLOT_HELP),
        report: Optional[str] = typer.Option(None, "--report", help=REPORT_HELP),
    ):
        """Best plan per GPU count (× hardware, seq len, batch): time to train, cost, Pareto front, deadline pick."""
        from autoplace.analysis import inputs as I
        from autoplace.analysis.sweep import SweepConfig, grid, run_sweep
        from autoplace.cli.search import _LazyProgress
        from autoplace.contract import SCHEMA_VERSION
        from autoplace.errors import InputError
        from autoplace.search.driver import METHODS
        from autoplace.search.space import load_space
        check_outputs(plot, report)
        counts = I.parse_gpus(gpus)
        if method not in METHODS:
            raise InputError(f"--method must be one of {', '.join(METHODS)}, got '{method}'")
        if workers is not None and workers < 1:
            raise InputError(f"--workers must be ≥ 1, got {workers}")
        seqs = I.parse_int_list(seq_len, "--seq-len")
        batches = I.parse_int_list(global_batch, "--global-batch")
        if global_batch is not None and global_batch_tokens is not None:
            raise InputError("give either --global-batch (sequences) or --global-batch-tokens, not both")
        n_tok = I.parse_tokens(tokens) if tokens is not None else None
        dl_s = I.parse_duration(deadline) if deadline is not None else None
        prices = I.parse_price(price)
        m = resolve_model(model, None)
        if m.states_only:
            raise InputError("sweep needs a model shape (--model preset or config.json)")
        hws = _variants(hardware, gpu_memory, gpus_per_node)
        _check_price_names(prices, hws)
        sp = load_space(space)
        cfg = SweepConfig(global_batch_tokens=global_batch_tokens, precision=precision, regime=regime, method=method,
                          headroom=headroom, tokens=n_tok, runtime=runtime)
        pts = grid(counts, len(hws), seqs, batches)
        prog = _LazyProgress(f"sweep {m.name}: {len(pts)} points", delay=0.5)
        try:
            res = run_sweep(m, hws, pts, sp, cfg, prices=prices, workers=workers, progress=prog, deadline_s=dl_s)
        finally:
            prog.close()
        doc = {"schema_version": SCHEMA_VERSION, "model": m.name, "tokens": n_tok, "space": sp.name, **res}
        if as_json:
            print_json(doc)
        else:
            from rich.console import Console
            con = Console()
            if not con.is_terminal:
                con = Console(width=180)
            render(doc, con)
        if plot or report:
            _visuals(doc, m, hws, cfg, plot, report)


def _check_price_names(prices: dict, hws: list) -> None:
    import os

    from autoplace.errors import InputError
    known = set()
    for lab, hw in hws:
        known |= {lab.lower(), hw.name.lower(), os.path.splitext(os.path.basename(str(hw.source)))[0].lower()}
    bad = [k for k in prices if k is not None and k.lower() not in known]
    if bad:
        raise InputError(f"--price-per-gpu-hour: '{bad[0]}' names no swept hardware ({', '.join(l for l, _ in hws)})")


def _pick(doc: dict):
    dl = doc.get("deadline") or {}
    if dl.get("pick") is not None:
        return dl["pick"]
    ok = [i for i, r in enumerate(doc["rows"]) if r["status"] == "ok"]
    return min(ok, key=lambda i: doc["rows"][i]["step_s"] / doc["rows"][i]["tokens_per_step"]) if ok else None


def _visuals(doc, model, hws, cfg, plot, report) -> None:
    from autoplace.cli.visuals import plan_pictures

    def pictures():
        from autoplace.analysis.common import build_training
        from autoplace.plan import Plan
        from autoplace.plots.sweep import sweep_pictures
        pics = sweep_pictures(doc)
        i = _pick(doc)
        if i is not None:
            r = doc["rows"][i]
            hw = dict(hws)[r["hardware"]]
            train, _ = build_training(model, r["seq_len"], r["global_batch"], None, cfg.precision, cfg.regime, r["gpus"],
                                      runtime=r.get("runtime"))
            pics.update(plan_pictures(model, hw, train, Plan.from_dict(r["plan"]), r["gpus"], r["estimate"],
                                      prefix="pick_"))
        return pics

    def sections(pics):
        from autoplace.html_report import plan_sections, sweep_sections
        sw = {k: v for k, v in pics.items() if not k.startswith("pick_")}
        out = sweep_sections(doc, sw)
        i = _pick(doc)
        if i is not None:
            r = doc["rows"][i]
            why = "deadline pick" if (doc.get("deadline") or {}).get("pick") == i else "fastest point"
            out += plan_sections(r["estimate"], {k: v for k, v in pics.items() if k.startswith("pick_")},
                                 heading=f"{why}: {r['gpus']} × {r['hardware']}")
        return out

    emit(plot, report, f"autoplace sweep — {doc['model']}", pictures, sections)
