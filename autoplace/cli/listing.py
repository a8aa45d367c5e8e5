"""`autoplace list hardware|models|runtimes|spaces|launchers [--json]`: what ships, by name."""

from __future__ import annotations

import typer

from autoplace.cli.common import cli_errors, print_json


def register(app: typer.Typer) -> None:
    @app.command("list")
    @cli_errors
    def list_(
        kind: str = typer.Argument(..., metavar="KIND", help="hardware, models, runtimes, spaces or launchers"),
        as_json: bool = typer.Option(False, "--json", help="print {schema_version, kind, items: [{name, description}]}"),
    ) -> None:
        """The names `--hardware`, `--model`, `--runtime`, `--space` and `--launcher` take, with a line each."""
        from autoplace import catalog
        from autoplace.contract import SCHEMA_VERSION

        items = catalog.entries(kind.strip().lower())
        if as_json:
            print_json({"schema_version": SCHEMA_VERSION, "kind": kind,
                        "items": [{"name": n, "description": d} for n, d in items]})
            return
        from rich.console import Console
        from rich.table import Table

        con = Console()
        if not con.is_terminal:
            con = Console(width=160)
        t = Table(title=kind, title_justify="left")
        t.add_column("name", no_wrap=True)
        t.add_column("description")
        for n, d in items:
            t.add_row(n, d)
        con.print(t)
