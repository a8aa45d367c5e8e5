"""Optional dependencies: one helper that imports a module an extra provides, or stops with one line
naming the `pip install` that fixes it (as Optuna's `try_import`). The base install plans; the extras
are `profile` (torch), `bayes` (optuna), `plot` (matplotlib), `docs` (mkdocs) and `test` (all)."""

from __future__ import annotations

import importlib
from types import ModuleType

from autoplace.errors import InputError

EXTRAS = {"torch": "profile", "optuna": "bayes", "matplotlib": "plot", "mkdocs": "docs", "jsonschema": "test"}
"""Top-level module → the extra that installs it."""


class MissingExtraError(InputError, ImportError):
    """An optional dependency is absent: the one line the CLI prints (exit code 1, bad input)."""


def require(module: str, what: str) -> ModuleType:
    """`import module`, or raise MissingExtraError("<what> needs <pkg>: pip install 'autoplace[<extra>]'")."""
    try:
        return importlib.import_module(module)
    except ImportError:
        top = module.split(".")[0]
        extra = EXTRAS.get(top)
        fix = f"pip install 'autoplace[{extra}]'" if extra else f"pip install {top}"
        raise MissingExtraError(f"{what} needs {top}: {fix}") from None
