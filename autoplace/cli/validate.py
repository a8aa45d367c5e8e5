"""`autoplace validate --records FILE [--json]`: predict published runs and compare with what they measured.

Exit 0 whatever the errors are (a validation report is not a failure); exit 1 with a one-line error
when the file cannot be read or is not a list of records.
"""

from __future__ import annotations

import typer

from autoplace.cli.common import cli_errors, print_json

_SHORT = {"iteration_time_s_derived": "t_derived", "iteration_time_s": "t_iter", "tflops_per_gpu": "tflops",
          "tokens_per_sec_per_gpu": "tok/s/gpu", "tokens_per_sec_total": "tok/s", "aggregate_pflops": "PF/s",
          "pct_of_peak": "%peak", "layer_forward_ms": "fwd", "layer_backward_ms": "bwd",
          "layer_total_ms": "total", "max_trainable_params_billion": "max B params",
          "model_states_gb_per_gpu": "states GiB"}


def _fmt(x) -> str:
    if x is None:
        return "–"
    x = float(x)
    if x == 0:
        return "0"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:.2f}"
    return f"{x:.4g}"


def _pct(x) -> str:
    return "–" if x is None else f"{x:+.1f}%"


def render(doc: dict, results) -> None:
    from rich.console import Console
    from rich.table import Table

    con = Console()
    if not con.is_terminal:          # piped output: do not wrap to 80 columns
        con = Console(width=180)
    by_source: dict[str, list] = {}
    for r in results:
        by_source.setdefault(r.source, []).append(r)
    for src, rs in by_source.items():
        t = Table(title=f"{src}", title_justify="left", show_lines=False)
        for col, kw in (("record", {"no_wrap": True}), ("metric", {"no_wrap": True}), ("measured", {"justify": "right"}),
                        ("predicted", {"justify": "right"}), ("error", {"justify": "right"}),
                        ("step-time err", {"justify": "right"}), ("other metrics", {})):
            t.add_column(col, **kw)
        for r in rs:
            if r.skipped is not None:
                t.add_row(r.id, "[dim]skipped[/dim]", "", "", "", "", f"[yellow]{r.skipped}[/yellow]")
                continue
            p = r.primary()
            others = ", ".join(
                f"{_SHORT.get(e['metric'], e['metric'])}{' (derived)' if e.get('derived') else ''} "
                f"{_pct(e['error_pct'])}" for e in r.entries if e is not p)
            name = p["metric"] + (" (derived)" if p.get("derived") else "")
            t.add_row(r.id, name, _fmt(p["measured"]), _fmt(p["predicted"]), _pct(p["error_pct"]),
                      _pct(p.get("time_error_pct")), others)
        con.print(t)
    s = doc["summary"]
    t = Table(title="summary (error = predicted vs measured; step-time error = implied by the primary "
                    "throughput/time metric)", title_justify="left")
    for col in ("source", "records", "coverage", "throughput cov.", "primary metric", "mean |err|",
                "max |err|", "mean |step-time err|", "max |step-time err|"):
        t.add_column(col, justify="left" if col in ("source", "primary metric") else "right")

    def row(name, g, style=""):
        cov = "–" if g["coverage"] is None else f"{g['coverage']:.0%} ({g['predicted']}/{g['records']})"
        tcov = ("–" if g["throughput_coverage"] is None else
                f"{g['throughput_coverage']:.0%} ({g['throughput_predicted']}/{g['throughput_records']})")
        pm = ", ".join(_SHORT.get(m, m) for m in g["primary"].get("metrics", []))
        pr, st = g["primary"], g["step_time"]
        cells = [name, str(g["records"]), cov, tcov, pm,
                 "–" if pr["mean_abs_err_pct"] is None else f"{pr['mean_abs_err_pct']:.1f}%",
                 "–" if pr["max_abs_err_pct"] is None else f"{pr['max_abs_err_pct']:.1f}%",
                 "–" if st["mean_abs_err_pct"] is None else f"{st['mean_abs_err_pct']:.1f}%",
                 "–" if st["max_abs_err_pct"] is None else f"{st['max_abs_err_pct']:.1f}%"]
        t.add_row(*[f"[{style}]{c}[/{style}]" if style else c for c in cells])

    for name, g in s["by_source"].items():
        row(name, g)
    row("overall", s["overall"], "bold")
    con.print(t)


def register(app: typer.Typer) -> None:
    @app.command("validate")
    @cli_errors
    def validate(
        records: str = typer.Option(..., "--records", metavar="FILE",
                                    help="JSON list of validation records (shared/validation schema)"),
        as_json: bool = typer.Option(False, "--json", help="print {records, summary, ...} as JSON"),
    ) -> None:
        """Rebuild published training runs from a record file, predict them and compare each
        measured metric (under the record's own FLOP convention) with the prediction."""
        from autoplace.validate import document, load_records, run

        results, summary = run(load_records(records))
        if as_json:
            print_json(document(results, summary))
            return
        render({"summary": summary}, results)
