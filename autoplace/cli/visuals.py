"""`--plot DIR` and `--report FILE.html` for estimate / search / sweep / compare: builds the pictures
(autoplace.plots) and the report (autoplace.html_report) only when asked, writes them atomically and
names the files on stderr."""

from __future__ import annotations

from typing import Callable, Optional

import typer

PLOT_HELP = "write PNG pictures (memory per stage, step-time breakdown, pipeline timeline, …) to DIR"
REPORT_HELP = "write a self-contained HTML report (tables + pictures) to FILE.html"


def check_outputs(plot: Optional[str], report: Optional[str]) -> None:
    from pathlib import Path

    from autoplace.errors import InputError
    if report is not None and Path(report).is_dir():
        raise InputError(f"--report: '{report}' is a folder; give a file name like report.html")
    if plot is not None and Path(plot).exists() and not Path(plot).is_dir():
        raise InputError(f"--plot: '{plot}' is a file; give a folder for the PNG files")


def emit(plot: Optional[str], report: Optional[str], title: str,
         pictures: Callable[[], dict], sections: Callable[[dict], list]) -> list:
    """pictures() → {name: PNG bytes}; sections(pictures) → report sections. Returns the paths written."""
    if not plot and not report:
        return []
    from autoplace.plots import write_pictures
    pics = pictures()
    out = []
    if plot:
        out += write_pictures(pics, plot)
    if report:
        from autoplace.html_report import write_report
        out.append(write_report(report, title, sections(pics)))
    for p in out:
        typer.echo(f"wrote {p}", err=True)
    return out


def plan_pictures(model, hw, train, plan, world, doc, prefix: str = "") -> dict:
    from autoplace.plots.plan import plan_pictures as pp
    return pp(model, hw, train, plan, world, doc, prefix)


def estimate_visuals(model, hw, train, plan, world, doc, plot, report) -> list:
    def sections(pics):
        from autoplace.html_report import plan_sections
        return plan_sections(doc, pics)
    title = f"autoplace estimate — {doc['model']['name']} on {world} × {doc['hardware']['name']}"
    return emit(plot, report, title,
                lambda: plan_pictures(model, hw, train, plan, world, doc) if doc["legal"] else {}, sections)


def search_visuals(model, hw, train, plan, world, docs, stats, families, plot, report) -> list:
    def sections(pics):
        from autoplace.html_report import search_sections
        return search_sections(docs, stats, families, pics)
    title = f"autoplace search — {docs[0]['model']['name']} on {world} × {docs[0]['hardware']['name']}"
    return emit(plot, report, title, lambda: plan_pictures(model, hw, train, plan, world, docs[0]), sections)
