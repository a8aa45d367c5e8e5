"""Launcher validators run in subprocesses (each launcher's own parser / config classes).

MEGATRON_LM_TAGS: the Megatron-LM releases whose `megatron/training/arguments.py` parses the exported
flags — the tag of the megatron-core that autoplace pins (pyproject `launchers` extra) and the current
release. `.ci/run` checks each out into `.venv-mlm/<tag>`; the tests skip a tag that is absent."""

MEGATRON_LM_TAGS = ("core_v0.16.1", "core_v0.19.0")
