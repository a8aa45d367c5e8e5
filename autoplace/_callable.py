"""Modules that are also calls: `autoplace.search`, `autoplace.estimate` and `autoplace.export` are
sub-packages (their modules keep their names) and the API functions of the same names, so
`autoplace.search(SearchRequest(...))` and `from autoplace import search` work as a user expects."""

from __future__ import annotations

import sys
import types


class CallableModule(types.ModuleType):
    """A module whose call is `autoplace.api.<its last name>`."""

    def __call__(self, *args, **kwargs):
        import importlib
        return getattr(importlib.import_module("autoplace.api"), self.__name__.rsplit(".", 1)[1])(*args, **kwargs)


def make_callable(module_name: str) -> None:
    sys.modules[module_name].__class__ = CallableModule
