"""`autoplace export`: turn a plan file into launcher files.

Exit codes: 0 at least one requested launcher written; 1 bad input (missing/broken plan file,
unknown launcher); 2 the plan violates the composition rules (nothing written); 4 every requested
launcher refused the plan (reasons printed; LauncherRefusedError).
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from autoplace.cli.common import cli_errors, print_json

LAUNCHER_HELP = "megatron, deepspeed, torchtitan, accelerate, torchrun, slurm or all (repeat or comma-separate)"


def render_result(res, console=None) -> None:
    """Rich table: one row per launcher, written files or the refusal reasons."""
    from rich.console import Console
    from rich.table import Table
    console = console or Console()
    table = Table(title=f"autoplace export → {res.out_dir}  ({res.plan})", show_lines=True)
    table.add_column("launcher", style="bold")
    table.add_column("status")
    table.add_column("files / reasons", overflow="fold")
    for name, paths in res.written.items():
        text = "\n".join(Path(p).name for p in paths)
        if res.notes.get(name):
            text += "\n" + "\n".join(f"[dim]note: {n}[/dim]" for n in res.notes[name])
        table.add_row(name, "[green]written[/green]", text)
    for name, reasons in res.refused.items():
        table.add_row(name, "[red]refused[/red]", "\n".join(f"• {r}" for r in reasons))
    if res.plan_file:
        table.add_row("plan file", "[green]written[/green]", Path(res.plan_file).name)
    console.print(table)
    if res.removed:
        console.print(f"[dim]removed stale files: {', '.join(Path(p).name for p in res.removed)}[/dim]")


def register(app: typer.Typer) -> None:
    @app.command("export")
    @cli_errors
    def export(
        plan_file: str = typer.Option(..., "--plan-file", "-p", help="plan.json (from search --emit, or hand-written)"),
        launcher: Optional[List[str]] = typer.Option(None, "--launcher", "-l", help=LAUNCHER_HELP),
        out: str = typer.Option(..., "--out", "-o", help="output folder (created if missing)"),
        as_json: bool = typer.Option(False, "--json", help="machine-readable result"),
    ):
        """Write launcher files (Megatron-LM args, DeepSpeed JSON, torchtitan TOML, accelerate YAML,
        torchrun, SLURM) for a plan file; launchers that cannot express the plan say why."""
        from autoplace.export import LauncherRefusedError, export_all, read_plan_file, resolve_launchers
        from autoplace.export.planfile import plan_document
        names = resolve_launchers(launcher or ["all"])
        model, hw, train, plan, world, predicted = read_plan_file(plan_file)
        doc = plan_document(model, hw, train, plan, world, predicted)
        res = export_all(doc, names, out)
        if as_json:
            print_json(res.to_dict())
        else:
            render_result(res)
        if not res.written:
            err = LauncherRefusedError(", ".join(res.refused), [r for rs in res.refused.values() for r in rs])
            if as_json:
                raise typer.Exit(err.exit_code)
            raise err
