"""autoplace: placement-semantics planner for distributed LLM training.

Docstrings cite the specification as `placement_semantics.md §…`: it ships in the package as
`autoplace/docs/placement_semantics.md`.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("autoplace")
except PackageNotFoundError:  # a source checkout on PYTHONPATH, not installed
    __version__ = "0.0.0+unknown"

from autoplace.contract import SCHEMA_VERSION as SCHEMA_VERSION  # noqa: E402  (every JSON document carries it)
