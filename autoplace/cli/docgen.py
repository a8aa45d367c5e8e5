"""Generated reference pages for the docs site: every command's `--help`, the exit-code table and
`autoplace list`'s catalogues, rendered from the code so the site cannot drift from it.

`mkdocs.yml` loads this file as a hook (`on_page_markdown`): a page holding the marker
`<!-- autoplace:cli -->`, `<!-- autoplace:exit-codes -->` or `<!-- autoplace:lists -->` gets it
replaced by the rendered text.
"""

from __future__ import annotations

import os


def command_help(args: list[str], width: int = 100) -> str:
    """`autoplace ARGS --help` as plain text (typer's rich help, no colour)."""
    from typer.testing import CliRunner

    from autoplace.cli import app
    env = {"COLUMNS": str(width), "NO_COLOR": "1", "TERM": "dumb", "_TYPER_FORCE_DISABLE_TERMINAL": "1"}
    res = CliRunner().invoke(app, [*args, "--help"], env=env, prog_name="autoplace")
    return res.output.rstrip()


def commands() -> list[str]:
    """The top-level command names, in registration order."""
    import typer

    from autoplace.cli import app
    group = typer.main.get_command(app)
    return list(group.commands)


def cli_reference() -> str:
    parts = ["```text", command_help([]), "```"]
    for name in commands():
        parts += ["", f"## autoplace {name}", "", "```text", command_help([name]), "```"]
    return "\n".join(parts)


def exit_codes() -> str:
    from autoplace.errors import EXIT_CODES
    rows = ["| code | meaning |", "|---:|---|"]
    rows += [f"| {code} | {what} |" for code, what in sorted(EXIT_CODES.items())]
    return "\n".join(rows)


def lists() -> str:
    from autoplace import catalog
    parts = []
    for kind in catalog.KINDS:
        parts += [f"## {kind}", "", "| name | description |", "|---|---|"]
        parts += [f"| `{name}` | {desc.replace('|', '/')} |" for name, desc in catalog.entries(kind)]
        parts.append("")
    return "\n".join(parts).rstrip()


_MARKERS = {"<!-- autoplace:cli -->": cli_reference, "<!-- autoplace:exit-codes -->": exit_codes,
            "<!-- autoplace:lists -->": lists}


def on_page_markdown(markdown: str, **_kw) -> str:
    """mkdocs hook."""
    for marker, render in _MARKERS.items():
        if marker in markdown:
            markdown = markdown.replace(marker, render())
    return markdown


os.environ.setdefault("COLUMNS", "100")
