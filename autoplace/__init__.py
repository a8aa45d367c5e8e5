"""autoplace: placement-semantics planner for distributed LLM training.

Docstrings cite the specification as `placement_semantics.md §…`: it ships in the package as
`autoplace/docs/placement_semantics.md`.
"""

__version__ = "0.1.0"
SCHEMA_VERSION = "1.0"
