"""`autoplace search`: the fastest plan that fits, proven fastest under the model, and why.

`--launcher L` (repeatable) searches exactly what L's exporter accepts; `--runtime R` picks the cost
model's runtime physics (see autoplace.search.launchers). Exit codes (autoplace.errors): 0 found,
1 bad input, 3 no legal plan / nothing fits, 4 every requested launcher refuses (--emit), 64 usage.
Never imports torch / optuna / ortools at module import time (start-up stays fast).
"""

from __future__ import annotations

import time
from typing import List, Optional

import typer

from autoplace.analysis.common import build_training  # noqa: F401  (re-exported: cli.estimate imports it here)
from autoplace.analysis.explain import rle, why_lines
from autoplace.cli.common import RUNTIME_SET_HELP, check_gpus, cli_errors, print_json, resolve_hardware, resolve_model

GIB = 2**30


class _LazyProgress:
    """A rich progress bar on stderr that only appears once the search has run for `delay` s."""

    def __init__(self, label: str, enabled: bool = True, delay: float = 1.0):
        self.t0 = time.perf_counter()
        self.label, self.enabled, self.delay = label, enabled, delay
        self.bar = None
        self.task = None

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        if self.bar is None:
            if time.perf_counter() - self.t0 < self.delay:
                return
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
            self.bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                                TextColumn("{task.completed:,}/{task.total:,}"), TimeElapsedColumn(),
                                console=Console(stderr=True), transient=True)
            self.bar.start()
            self.task = self.bar.add_task(self.label, total=max(total, 1))
        self.bar.update(self.task, completed=done, total=max(total, 1))

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None


def _schedule(p) -> str:
    if p.pp == 1:
        return "-"
    if p.schedule == "interleaved":
        return f"interleaved v{p.vpp}" + (f" G{p.vpp_group}" if p.vpp_group and p.vpp_group != p.pp else "")
    return p.schedule


def _recompute(p) -> str:
    if p.stage_recompute:
        return "per stage [" + rle(p.stage_recompute) + "]" if any(p.stage_recompute) else p.recompute.replace("block", "none")
    if p.recompute == "block":
        return f"block {p.recompute_layers}/stage"
    return p.recompute


def _zero(p) -> str:
    z = str(p.zero)
    if p.zero == 3 and not p.reshard_after_forward:
        z += " hold"
    if p.offload != "none":
        z += f" +off:{p.offload}" + (f"({p.offload_fraction:g})" if p.offload_fraction != 1 else "")
    return z


def _degrees(p) -> str:
    dp = f"{p.dp}" + (f"({p.dp_replicate}×{p.dp_shard})" if p.dp_replicate > 1 else "")
    s = f"dp{dp} tp{p.tp} pp{p.pp}"
    if p.layer_split:
        s += " layers[" + rle(p.layer_split) + "]"
    if p.cp > 1:
        s += f" cp{p.cp}"
    if p.ep > 1:
        s += f" ep{p.ep}" + (f" etp{p.t_exp}" if p.t_exp != p.tp else "") + (" a2a-ovl" if p.ep_overlap else "")
    return s


def _params(n: float) -> str:
    return f"{n / 1e9:.1f} B" if n >= 1e9 else f"{n / 1e6:.1f} M"


def step_str(x: float) -> str:
    """Step time with 4 significant digits (never cut to 0.00x)."""
    return f"{x:.4g}" if x < 1000 else f"{x:,.1f}"


def header_line(model, d0, outcome, space_name) -> str:
    """Model (parameters, MoE active), GPUs, sequence (and where its default came from), batch,
    precision, runtime and launcher(s), space."""
    tr = d0["training"]
    ps = f"{_params(model.total_params())} params"
    if model.is_moe:
        ps += f", {_params(model.active_params())} active"
    tg = outcome.targets
    prec = tr["precision"] + (" (TF32 matmuls)" if tr.get("matmul_dtype") == "tf32" else "")
    if outcome.union:
        via = f" via {', '.join(tg[0].via)}" if tg[0].via else ""
        who = ("each plan priced by the stack that runs it" + via + ": "
               + ", ".join(f"{t.launcher} ({t.runtime.name})" for t in tg))
    elif len(tg) > 1 or tg[0].launcher or tg[0].runtime:
        who = ", ".join(t.label for t in tg)
    else:
        who = "default kernels (idealised physics, what-if; no stack's rules), any launcher"
    hwn = f" ({outcome.hw_note})" if getattr(outcome, "hw_note", "") else ""
    ana = f"\n[yellow]{model.analogy}[/]" if getattr(model, "analogy", "") else ""
    return (f"[bold]{d0['model']['name']}[/] ({ps}) on {d0['hardware']['gpus']:,} × {d0['hardware']['name']}{hwn} · "
            f"{outcome.seq_note} · global batch {tr['global_batch']} · {prec} · {who} · "
            f"space [bold]{space_name}[/]" + ana)


def render(result, docs, train_note, space, explain: bool, console, outcome=None, model=None,
           families=None) -> None:
    from rich.table import Table
    stats = result["stats"]
    d0 = docs[0]
    con = console
    if outcome is not None and model is not None:
        con.print(header_line(model, d0, outcome, space.name))
    else:
        con.print(f"[bold]{d0['model']['name']}[/] on {d0['hardware']['gpus']} × {d0['hardware']['name']} · "
                  f"seq {d0['training']['seq_len']} · global batch {d0['training']['global_batch']} · "
                  f"{d0['training']['precision']} · space [bold]{space.name}[/]")
    t = Table(title=(f"best plan of each family, {len(docs)} families" if families else f"top {len(docs)} plans")
                    + f" (method {stats['method']}"
                    f"{', optimal under the model' if stats.get('optimal') else ', not proven optimal'})", title_justify="left")
    for col, just in (("#", "right"), *((("family", "left"),) if families else ()), ("degrees", "left"), ("zero", "left"), ("sp", "center"),
                      ("recompute", "left"), ("mbs", "right"), ("schedule", "left"), ("step s", "right"),
                      ("tok/s/GPU", "right"), ("MFU", "right"), ("peak/limit GiB", "right"), ("runs on", "left")):
        t.add_column(col, justify=just, no_wrap=col != "runs on", min_width=len(col),
                     overflow="fold" if col == "runs on" else "ellipsis")
    from autoplace.plan import Plan
    shown: dict = {}
    for i, d in enumerate(docs):
        p = Plan.from_dict(d["plan"])
        tm, mem = d["time"], d["memory"]
        cells = (_degrees(p), _zero(p), p.sp, _recompute(p), p.mbs, _schedule(p), p.tp_overlap,
                 step_str(tm["step_s"]))
        deg = _degrees(p)
        if cells in shown:      # prints like an earlier row: show what differs (rank order, overlap …)
            j, dj = shown[cells]
            diff = [f"{k}={v}" for k, v in d["plan"].items() if dj["plan"].get(k) != v]
            deg += f" [dim](≠#{j + 1}: {', '.join(diff[:3]) or 'same plan'})[/]"
        else:
            shown[cells] = (i, d)
        t.add_row(str(i + 1), *((families[i],) if families else ()), deg, _zero(p), "✓" if p.sp else "", _recompute(p), str(p.mbs),
                  _schedule(p) + (" +tp-ovl" if p.tp_overlap else ""), step_str(tm['step_s']),
                  f"{tm['tokens_per_s_per_gpu']:,.0f}", f"{tm['mfu']:.1%}",
                  f"{mem['peak_bytes'] / GIB:.1f}/{mem['limit_bytes'] / GIB:.1f} s{mem['binding_stage']}"
                  + (" near" if mem.get("near_limit") else ""),
                  _runs_on_cell(d),
                  style="bold" if i == 0 else None)
    con.print(t)
    if any(d["memory"].get("near_limit") for d in docs):
        from autoplace.cost import intervals as IV
        why = sorted({IV.borrowed(d["memory"]["interval"]["90"]) for d in docs
                      if d["memory"].get("near_limit") and (d["memory"].get("interval") or {}).get("90")} - {""})
        con.print("[dim]near: fits at the predicted peak but not at its 90 % upper bound (memory.near_limit); "
                  "--confidence 0.9 keeps only plans that fit at it[/]"
                  + "".join(f"\n[dim]  memory bound: {w}[/]" for w in why))
    if families:
        from autoplace.search.families import FAMILIES
        missing = [f for f in FAMILIES if f not in families]
        if missing:
            con.print(f"[dim]no legal plan that fits in famil{'y' if len(missing) == 1 else 'ies'} "
                      f"{', '.join(missing)} (families: README, 'How to read autoplace search')[/]")
    if outcome is not None and outcome.best_per_launcher:
        con.print("[bold]best plan per launcher[/] (each from its own constrained search, under its runtime):")
        for n, v in outcome.best_per_launcher.items():
            if isinstance(v, tuple):
                p, st, tg = v
                con.print(f"  {n:<10} {step_str(st):>8} s  {p.short()}{',ep_overlap' if p.ep_overlap and p.ep > 1 else ''}"
                          f"  [dim]({tg.runtime.name})[/]")
            else:
                con.print(f"  {n:<10} [red]{v}[/]")
    if outcome is not None and getattr(outcome, "robust_note", ""):
        con.print(f"[yellow]{outcome.robust_note}[/]")
    if len(docs) > 1:
        con.print(why_lines(docs[0], docs[1]))
    s = stats
    con.print(f"[dim]{s['candidates']:,} candidates · "
              + (f"{s['legal']:,} legal · " if s.get("legal") is not None else "")
              + (f"{s['feasible']:,} fit · " if s.get("feasible") is not None else "")
              + f"{s['evaluated']:,} evaluated · {s['seconds']:.2f} s · {s['method_reason']}[/]")
    if s.get("space_note"):
        con.print(f"[dim]{s['space_note']}[/]")
    if explain:
        con.print(f"[dim]{train_note}[/]")
        if s["pruned_by_rule"]:
            from autoplace.placement.rules import RULES_BY_ID
            pt = Table(title="plans pruned by rule", title_justify="left")
            pt.add_column("rule")
            pt.add_column("plans", justify="right")
            pt.add_column("meaning")
            titles = {r.id: r.title for tg in (outcome.targets if outcome else ()) for r in tg.rules}
            for rid, n in s["pruned_by_rule"].items():
                pt.add_row(rid, f"{n:,}", RULES_BY_ID[rid].title if rid in RULES_BY_ID else titles.get(rid, ""))
            con.print(pt)
        if "ilp" in s:
            con.print(f"[dim]ILP refinement: {s['ilp']}[/]")
        from autoplace.report import render_estimate
        con.print("[bold]winner in detail[/]")
        render_estimate(docs[0], con)


def _runs_on_cell(d) -> str:
    """The stacks whose own model says the plan fits, each with its step time where it differs from
    the row's (> 0.05 %); 'none' in red when no training stack runs it."""
    stacks = d.get("stacks")
    if stacks is None:
        return ",".join(d.get("runs_on", [])) or "[red]none[/]"
    st = d["time"]["step_s"]
    out = []
    for r in stacks:
        if not r["runs"]:
            continue
        s = r["step_s"]
        out.append(r["launcher"] + (f" {step_str(s)}" if s is not None and abs(s - st) > 5e-4 * st else ""))
    return ", ".join(out) or "[red]no stack[/]"


def _docs(model, hw, train, plans, world, headroom):
    from autoplace.estimate import estimate
    return [estimate(model, hw, train, p, world, headroom) for p in plans]


def register(app: typer.Typer) -> None:
    @app.command()
    @cli_errors
    def search(
        model: Optional[str] = typer.Option(None, "--model", "-m", help="preset (13b, llama3-70b, …) or HF config.json path"),
        gpus: int = typer.Option(..., "--gpus", "-n", help="total GPUs (world size)"),
        gpus_per_node: Optional[int] = typer.Option(None, "--gpus-per-node", help="default: the profile's (8)"),
        hardware: Optional[str] = typer.Option(None, "--hardware", help="profile name or .toml (default H100-SXM-80GB)"),
        calibration: Optional[str] = typer.Option(None, "--calibration", help="a calibration file (autoplace "
                                                  "calibrate --from-log / autoplace tune): its corrections apply"),
        gpu_memory: Optional[str] = typer.Option(None, "--gpu-memory", help="override device memory, e.g. 40GiB"),
        seq_len: Optional[int] = typer.Option(None, "--seq-len", help="default: the runtime's recipe length, else the model's pre-training length"),
        global_batch: Optional[int] = typer.Option(None, "--global-batch", help="sequences per step"),
        global_batch_tokens: Optional[int] = typer.Option(None, "--global-batch-tokens",
                                                          help="tokens per step (default ~4M = 2^22), rounded to legal plans"),
        precision: str = typer.Option("bf16", "--precision"),
        fp8_recipe: Optional[str] = typer.Option(None, "--fp8-recipe", help="FP8/FP4 recipe: current (FP8-CS), delayed, blockwise, mxfp8, nvfp4 (Transformer Engine), tensorwise, rowwise (torchao); default: the runtime's first the GPU runs"),
        regime: Optional[str] = typer.Option(None, "--optimizer-regime", help="bytes/param regime (zero, megatron-bf16, …); default: the runtime's, else zero"),
        space: str = typer.Option("default", "--space", help="search space name (default, megatron, fsdp) or .toml path"),
        runtime: Optional[str] = typer.Option(None, "--runtime", help="runtime physics + capabilities (megatron-core, torchtitan, deepspeed, …; default kernels: megatron-core)"),
        runtime_set: Optional[List[str]] = typer.Option(None, "--runtime-set", help=RUNTIME_SET_HELP),
        method: str = typer.Option("auto", "--method", help="auto | exhaustive | ilp | bayes"),
        top_k: int = typer.Option(5, "--top-k", "-k"),
        headroom: float = typer.Option(0.0, "--memory-headroom", help="fraction of memory kept free"),
        trials: int = typer.Option(200, "--trials", help="Optuna trials (--method bayes)"),
        workers: Optional[int] = typer.Option(None, "--workers", help="processes for exhaustive search (default: all CPUs on large searches)"),
        as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
        explain: bool = typer.Option(False, "--explain", help="pruning by rule, batch choice, winner in detail"),
        emit: Optional[str] = typer.Option(None, "--emit", help="write plan.json and launcher files of the winner to DIR"),
        launcher: Optional[List[str]] = typer.Option(None, "--launcher", "-l", help="search only what these launchers can run (megatron, deepspeed, torchtitan, accelerate, torchrun, slurm; repeat or comma-separate); also the --emit set (default all)"),
        profile_top: Optional[int] = typer.Option(None, "--profile-top", help="measure the top K plans with torch runs"),
        profile_out: Optional[str] = typer.Option(None, "--profile-out", help="--profile-top records go to "
                                                  "DIR/candidates.jsonl (default runs/search-<model>-<N>g-<UTC>/)"),
        diverse: bool = typer.Option(False, "--diverse", help="best plan of each family (DP-only, TP, PP, CP, EP, offload) instead of the top-k"),
        plot: Optional[str] = typer.Option(None, "--plot", help="write PNG pictures of the winner to DIR"),
        report: Optional[str] = typer.Option(None, "--report", help="write a self-contained HTML report to FILE.html"),
        confidence: Optional[float] = typer.Option(None, "--confidence", help="e.g. 0.9: keep plans whose peak memory fits at its upper prediction bound, rank by that quantile of step time (intervals from the published runs)"),
        from_: Optional[str] = typer.Option(None, "--from", metavar="FILE",
                                            help="take the model, sequence length and global batch of a launcher "
                                                 "config you have (see estimate --from)"),
    ):
        """Search the plan space: the fastest plan that fits, the top-k, and why the winner wins."""
        from autoplace.api import ranked_docs, search_document, stats_json
        from autoplace.contract import SCHEMA_VERSION
        from autoplace.errors import InputError, NoFeasiblePlanError
        from autoplace.search import launchers as LS
        from autoplace.search.driver import METHODS
        from autoplace.search.space import load_space
        world = check_gpus(gpus)
        if method not in METHODS:
            raise InputError(f"--method must be one of {', '.join(METHODS)}, got '{method}'")
        if top_k < 1:
            raise InputError(f"--top-k must be ≥ 1, got {top_k}")
        if profile_top is not None and profile_top < 1:
            raise InputError(f"--profile-top must be ≥ 1, got {profile_top}")
        if emit:
            from autoplace.export.exporter import check_out_dir
            check_out_dir(emit, "--emit")
        from autoplace.cli.visuals import check_outputs
        check_outputs(plot, report)
        if from_:       # the model and batch of the user's launcher file; the search picks the rest
            from autoplace.export import from_config
            m, fc, notes = from_config.resolve(from_, model=model, gpus_per_node=gpus_per_node or 8,
                                               default_gpus=world)
            seq_len = seq_len or fc.seq_len
            if global_batch is None and global_batch_tokens is None:
                global_batch = fc.global_batch
            for n in notes:
                typer.echo(f"--from: {n}", err=True)
        else:
            m = resolve_model(model, None, allow_params=False)
        if m.states_only:
            raise InputError("search needs a model shape (--model preset or config.json)")
        hw = resolve_hardware(hardware, gpu_memory, gpus_per_node)
        if calibration:
            from autoplace.profile.corrections import apply_to_hardware
            hw = apply_to_hardware(hw, calibration)
        sp = load_space(space)
        conf = _confidence(confidence, runtime, m, hw, headroom)
        if conf:
            headroom = conf["headroom"]
        prog = _LazyProgress(f"search {m.name} on {world} GPUs")
        k_search = max(top_k, 8 * profile_top) if profile_top else top_k
        try:
            # --profile-top K looks further down the ranking for K plans that run on this machine
            outcome = LS.search(m, hw, world, launchers=launcher, runtime=runtime, seq_len=seq_len,
                                global_batch=global_batch, global_batch_tokens=global_batch_tokens,
                                precision=precision, regime=regime, space=sp, space_explicit=space != "default",
                                method=method, top_k=k_search, headroom=headroom, trials=trials, workers=workers,
                                progress=prog, families=diverse, runtime_set=runtime_set or (),
                                fp8_recipe=fp8_recipe or "")
        except NoFeasiblePlanError as e:
            prog.close()
            res = getattr(e, "result", None)
            if as_json:
                closest = res.get("closest") if res else None
                tr = getattr(e, "train", None)
                doc = {"schema_version": SCHEMA_VERSION, "plans": [], "error": str(e),
                       "closest": _docs(m, hw, tr, [closest], world, headroom)[0] if closest and tr else None}
                if res is not None:
                    doc["stats"] = stats_json(res["stats"], "")
                print_json(doc)
            raise
        finally:
            prog.close()
        from autoplace.cli.common import hardware_note
        outcome.hw_note = hardware_note(hw, gpu_memory, gpus_per_node)
        t0 = outcome.ranked[0][2]
        result = dict(t0.result)
        train, train_note = t0.train, outcome.train_note
        ranked = [p for p, _, _ in outcome.ranked]
        if not diverse:
            result = dict(result, plans=ranked[:top_k], steps=[s_ for _, s_, _ in outcome.ranked][:top_k])
            outcome.ranked = outcome.ranked[:top_k]
        fam_names = None
        if diverse:     # the best plan of each family replaces the top-k (search --diverse)
            fam_names = outcome.families
            outcome.ranked = outcome.ranked
            result = dict(result, plans=[q for q, _, _ in outcome.ranked], steps=[s_ for _, s_, _ in outcome.ranked])
        docs = ranked_docs(m, hw, outcome, world, headroom)
        if conf:
            docs, result = _rank_by_quantile(docs, result, m, hw, conf)
        stats = result["stats"]
        profiled = _profile(m, hw, train, ranked, world, profile_top, seq_len=train.seq_len,
                            out_dir=profile_out) if profile_top else None
        if as_json:
            doc = search_document(m, hw, world, outcome, headroom, len(outcome.ranked), docs=docs)
            if fam_names is not None:
                doc["families"] = fam_names
            if conf:
                doc["confidence"] = {k: v for k, v in conf.items() if k != "headroom"}
            if profiled is not None:
                doc["profiled"] = profiled
            print_json(doc)
        else:
            from rich.console import Console
            con = Console()
            if not con.is_terminal:
                con = Console(width=170)
            render(result, docs, train_note, sp if outcome.union else t0.space, explain, con, outcome=outcome, model=m, families=fam_names)
            if conf:
                con.print(f"[dim]--confidence {conf['q']:g}: peak memory must fit at its {conf['q']:.0%} upper bound "
                          f"(× {conf['memory_factor']:.3f}, class pool {conf['memory_pool']}); ranked by the "
                          f"{conf['q']:.0%} quantile of step time (column 'step s' is that quantile)[/]")
        if emit:
            _emit(m, hw, outcome, result["plans"][0], world, docs[0], emit, launcher, as_json, headroom)
        if plot or report:
            from autoplace.cli.visuals import search_visuals
            search_visuals(m, hw, train, result["plans"][0], world, docs, stats, fam_names, plot, report)


def _confidence(q, runtime, model, hw, headroom) -> dict | None:
    """--confidence q: the memory factor at quantile q of measured/predicted peak memory
    (autoplace.cost.intervals) and the headroom that makes `peak ≤ limit` mean `peak·factor ≤
    capacity·(1 − headroom)`."""
    if q is None:
        return None
    from autoplace.errors import InputError
    if not 0.5 <= q < 1.0:
        raise InputError(f"--confidence must be in [0.5, 1), e.g. 0.9; got {q}")
    from autoplace.cost import intervals as IV
    from autoplace.runtimes import DEFAULT_RUNTIME, load_runtime
    rt = load_runtime(runtime or DEFAULT_RUNTIME).name
    iv = IV.interval("memory", rt, bool(model.is_moe), getattr(hw, "arch", ""), q) or {}
    factor = max(IV.quantile_factor("memory", rt, bool(model.is_moe), getattr(hw, "arch", ""), q), 1.0)
    return {"q": q, "memory_factor": factor, "memory_pool": iv.get("pool") or "none", "memory_n": iv.get("n", 0),
            "headroom": 1.0 - (1.0 - headroom) / factor}


def _rank_by_quantile(docs, result, model, hw, conf):
    """Docs re-ranked by the q quantile of step time (each under its own runtime's class); the
    quantile replaces the point estimate in the docs' time (the point estimate kept as step_point_s)."""
    from autoplace.cost import intervals as IV
    q = conf["q"]
    order = []
    for i, d in enumerate(docs):
        rt = (d.get("search") or {}).get("runtime") or d["training"].get("runtime") or "megatron-core"
        f = IV.quantile_factor("step", rt, bool(model.is_moe), getattr(hw, "arch", ""), q)
        tm = d["time"]
        tm["step_point_s"] = tm["step_s"]
        tm["step_s"] = tm["step_s"] * f
        tm["tokens_per_s_per_gpu"] = tm["tokens_per_s_per_gpu"] / f
        tm["mfu"] = tm["mfu"] / f
        tm["quantile"] = q
        order.append((tm["step_s"], i))
    order.sort()
    idx = [i for _, i in order]
    docs = [docs[i] for i in idx]
    result = dict(result)
    if len(result.get("plans", [])) == len(idx):
        result["plans"] = [result["plans"][i] for i in idx]
        result["steps"] = [docs[k]["time"]["step_s"] for k in range(len(idx))]
    return docs, result


def _emit(model, hw, outcome, plan, world, doc, out_dir, launchers, quiet, headroom=0.0):
    """plan.json of the winner (priced by the stack that runs it) and each requested launcher's files,
    each stack's with the numbers of its own runtime (a stack whose model says the plan does not fit
    is refused with that reason). torchrun / SLURM start a stack: the stacks they can start are
    written with them, so the set is complete on its own."""
    from autoplace.errors import AutoplaceError
    try:
        from autoplace.export import emit_for_search, plan_document, resolve_launchers
    except ImportError as e:
        raise AutoplaceError(f"--emit: the exporter is not available ({e})") from None
    from autoplace.errors import LauncherRefusedError
    from autoplace.estimate import estimate
    from autoplace.export.registry import STACKS
    # `outcome`: the search's Outcome, or a TrainingSpec for a plan priced outside a search
    train = outcome.ranked[0][2].train if hasattr(outcome, "ranked") else outcome
    pdoc = plan_document(model, hw, train, plan, world, predicted=doc.get("time"))
    names = resolve_launchers(tuple(launchers) if launchers else ("all",))
    if any(n not in STACKS for n in names):     # the stacks torchrun.sh / slurm.sbatch can start
        names += [r["launcher"] for r in doc.get("stacks", ()) if r["launcher"] not in names]
    per = {}
    for r in doc.get("stacks", ()):
        n = r["launcher"]
        if n not in names:
            continue
        if not r["runs"]:
            per[n] = [r["why"] or "its runtime's model does not run the plan"]
            continue
        tr = outcome.stack_trains[n][0]
        d = estimate(model, hw, tr, plan, world, headroom)
        per[n] = plan_document(model, hw, tr, plan, world, predicted=d.get("time"))
    res = emit_for_search(pdoc, out_dir, tuple(names), per_launcher=per)
    if not quiet:
        try:
            from autoplace.cli.export import render_result
            render_result(res)
        except ImportError:  # pragma: no cover
            typer.echo(f"wrote {res.out_dir}")
    else:
        typer.echo(f"emitted to {res.out_dir}", err=True)
    if not res.written:           # every requested launcher refused the winner: exit 4, as `export` does
        raise LauncherRefusedError(", ".join(res.refused), [r for rs in res.refused.values() for r in rs])


def _profile(model, hw, train, ranked, world, k, seq_len=128, out_dir=None):
    """Run the first k runnable plans of the ranking for real; the table to stderr, the results
    (JSON-ready) returned, the records in out_dir (default runs/search-<model>-<N>g-<UTC>/)."""
    from autoplace._imports import require
    from autoplace.errors import AutoplaceError
    from autoplace.io import default_run_dir
    require("torch", "--profile-top")
    try:
        from autoplace.profile.candidates import profile_candidates, select_runnable
    except ImportError as e:
        raise AutoplaceError(f"--profile-top: the profiler is not available ({e})") from None
    taken, skipped = select_runnable(model, ranked, k, seq_len=seq_len)
    for i, why in skipped:
        typer.echo(f"--profile-top: skipping #{i + 1} {ranked[i].short()}: {why}", err=True)
    if not taken:
        typer.echo(f"--profile-top: none of the top {len(ranked)} plans runs on this machine", err=True)
        return []
    plans = [ranked[i] for i in taken]
    docs = _docs(model, hw, train, plans, world, 0.0)
    out_dir = out_dir or default_run_dir("search", model.name, world)
    out = profile_candidates(model, plans, hw=hw, train=train, world=world, predicted=docs, out_dir=out_dir)
    typer.echo(f"--profile-top: records in {out_dir}/candidates.jsonl", err=True)
    for r, i in zip(sorted(out, key=lambda r: r["predicted_rank"]), taken):
        r["search_rank"] = i + 1
    typer.echo(str(out), err=True)
    return [{k2: v for k2, v in r.items() if k2 != "record"} for r in out]
