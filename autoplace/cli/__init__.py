"""The `autoplace` command line (typer + rich). No logic of its own: each command module parses
options, calls the library, and renders with autoplace.report. Heavy imports (torch, optuna,
ortools) happen inside the commands that need them, so start-up stays fast."""

from __future__ import annotations

import typer
from typer.core import TyperGroup

try:  # typer ≥ 0.2x vendors click as typer._click; older typer uses click itself
    from typer._click.exceptions import UsageError
except ImportError:  # pragma: no cover
    from click.exceptions import UsageError

from autoplace.errors import EXIT_USAGE


class _Group(TyperGroup):
    """Usage errors (unknown option, missing or malformed value) exit with EXIT_USAGE (64), not
    click's 2, which autoplace uses for "illegal plan" (autoplace.errors.EXIT_CODES)."""

    def make_context(self, *a, **kw):
        try:
            return super().make_context(*a, **kw)
        except UsageError as e:
            _usage(e)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except UsageError as e:
            _usage(e)


def _usage(e) -> None:
    """One line on stderr naming the problem and where help is, then exit EXIT_USAGE."""
    if type(e).__name__ == "NoArgsIsHelpError":      # bare `autoplace` / `autoplace CMD`: show the help
        e.exit_code = EXIT_USAGE
        raise e
    cmd = e.ctx.command_path if getattr(e, "ctx", None) is not None else "autoplace"
    msg = " ".join(e.format_message().split())
    typer.echo(f"error: {msg} (usage: {cmd} --help)", err=True)
    raise SystemExit(EXIT_USAGE)


app = typer.Typer(cls=_Group, add_completion=True, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Plan distributed LLM training: placement, memory, communication, step time, search.")


def _version(value: bool) -> None:
    if value:
        from autoplace._version import __version__
        typer.echo(f"autoplace {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="print the version and exit")) -> None:
    """autoplace: which parallelization trains this model fastest without running out of memory."""


def _register() -> None:
    """Every command, explicitly: each module's `register(app)` adds its command(s)."""
    from autoplace.cli import calibrate, compare, estimate, export, listing, profile, search, sweep, tune, validate
    for mod in (estimate, search, sweep, compare, validate, profile, calibrate, export, tune, listing):
        mod.register(app)


_register()


def main() -> None:
    app()
