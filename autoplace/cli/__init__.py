"""The `autoplace` command line (typer + rich). No logic of its own: each command module parses
options, calls the library, and renders with autoplace.report. Heavy imports (torch, optuna,
ortools) happen inside the commands that need them, so start-up stays fast."""

from __future__ import annotations

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Plan distributed LLM training: placement, memory, communication, step time, search.")


@app.callback()
def _root() -> None:
    """autoplace: which parallelization trains this model fastest without running out of memory."""


def _register() -> None:
    """Every command, explicitly: each module's `register(app)` adds its command(s)."""
    from autoplace.cli import calibrate, compare, estimate, export, profile, search, sweep, validate
    for mod in (estimate, search, sweep, compare, validate, profile, calibrate, export):
        mod.register(app)


_register()


def main() -> None:
    app()
