"""autoplace: placement-semantics planner for distributed LLM training.

Docstrings cite the specification as `placement_semantics.md §…`: it ships in the package as
`autoplace/docs/placement_semantics.md`.
"""

from autoplace._version import __version__ as __version__
from autoplace.contract import SCHEMA_VERSION as SCHEMA_VERSION  # noqa: E402  (every JSON document carries it)

_API = ("SearchRequest", "EstimateRequest", "SweepRequest", "PlanResult", "SearchResult", "CompareResult",
        "SweepResult", "ExportResult", "search", "estimate", "compare", "sweep", "export")
__all__ = ["SCHEMA_VERSION", "__version__", *_API]
_CALLABLE_MODULES = ("search", "estimate", "export")
"""Sub-packages that are also the API calls: `autoplace.search(SearchRequest(...))` calls
`autoplace.api.search`, `autoplace.search.driver` stays the module (autoplace._callable)."""


def __getattr__(name: str):
    """`autoplace.search(...)`, `autoplace.SearchRequest`, …: the API (`autoplace.api`), imported on
    first use so `import autoplace` and the CLI stay fast."""
    if name in _CALLABLE_MODULES:
        import importlib
        return importlib.import_module(f"autoplace.{name}")
    if name in _API:
        import importlib
        return getattr(importlib.import_module("autoplace.api"), name)
    raise AttributeError(f"module 'autoplace' has no attribute {name!r}")
