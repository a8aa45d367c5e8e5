"""Launcher validators run in subprocesses (each launcher's own parser / config classes).

MEGATRON_LM_TAGS: the Megatron-LM releases whose `megatron/training/arguments.py` parses the exported
flags — the tag of the megatron-core that autoplace pins (pyproject `launchers` extra) and the current
release. `.ci/run` checks each out into `.venv-mlm/<tag>`; the tests skip a tag that is absent."""

MEGATRON_LM_TAGS = ("core_v0.16.1", "core_v0.19.0")


def tt03_pythonpath(tt03, *more) -> str:
    """PYTHONPATH for a torchtitan 0.3 subprocess: the 0.3 target dir (torchtitan, spmd_types,
    torch_checkpointing, torchao for float8 converters: .ci/run), `.venv-tao` beside it where torchao
    was installed apart, then `more`."""
    import os
    from pathlib import Path
    tao = Path(__file__).resolve().parents[2] / ".venv-tao"
    return os.pathsep.join(str(x) for x in (tt03, *([tao] if tao.is_dir() else []), *more))
