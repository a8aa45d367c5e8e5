"""autoplace: placement-semantics planner for distributed LLM training."""

__version__ = "0.1.0"
SCHEMA_VERSION = "1.0"
