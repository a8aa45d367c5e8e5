"""Shared CLI plumbing: input resolution, one-line errors with exit codes, atomic writes, JSON."""

from __future__ import annotations

import functools
import json
import sys

import typer

from autoplace.errors import EXIT_INTERRUPTED, AutoplaceError, Terminated
from autoplace.io import atomic_write, to_jsonable  # noqa: F401  (re-exported for the commands)
from autoplace.resolve import (  # noqa: E402,F401  (the CLI's names for the library resolvers)
    check_gpus,
    check_hardware_name,
    hardware_note,
    resolve_hardware,
    resolve_model,
    resolve_runtime,
)


def cli_errors(fn):
    """Check the command's numeric options (`autoplace.safe.check_cli_numbers`), then turn library
    errors into one line on stderr (control characters and terminal escapes removed) and the error's
    exit code — never a traceback. Ctrl-C, SIGTERM and SIGHUP unwind the command (worker pools ended,
    temp files removed) and end it with one line and 128 + the signal number (130, 143, 129)."""
    from autoplace.safe import MAX_PATH, check_cli_numbers, one_line, signals_as_exceptions

    @functools.wraps(fn)
    def wrapper(*a, **kw):
        try:
            with signals_as_exceptions():
                check_cli_numbers(fn.__name__, kw)
                return fn(*a, **kw)
        except KeyboardInterrupt:
            typer.echo(f"error: {fn.__name__} interrupted (Ctrl-C); no file was left half-written",
                       err=True)
            raise typer.Exit(EXIT_INTERRUPTED) from None
        except Terminated as e:
            import signal
            typer.echo(f"error: {fn.__name__} stopped by {signal.Signals(e.signum).name}; no file was left "
                       "half-written", err=True)
            raise typer.Exit(128 + e.signum) from None
        except AutoplaceError as e:
            typer.echo(f"error: {one_line(e, 4000)}", err=True)
            raise typer.Exit(e.exit_code)
        except (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError) as e:
            typer.echo(f"error: {one_line(e.filename, 300)}: {e.strerror}", err=True)
            raise typer.Exit(1)
        except OSError as e:
            if e.errno is None or e.strerror is None:
                raise
            name = one_line(e.filename, 300) if e.filename and len(str(e.filename)) < MAX_PATH else "a path"
            typer.echo(f"error: {name}: {e.strerror}", err=True)
            raise typer.Exit(1)
    return wrapper


def print_json(doc) -> None:
    sys.stdout.write(json.dumps(to_jsonable(doc), indent=2, sort_keys=False) + "\n")


RUNTIME_SET_HELP = ("SWITCH=VALUE over the runtime, repeatable: cuda_graphs=true, moe_dispatch=alltoall|deepep|"
                    "hybridep|allgather, fp8_attention=true, or any section.key=value of its file")


