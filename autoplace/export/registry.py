"""The launcher registry: every export format, by `--launcher` name (explicit imports, no strings)."""

from __future__ import annotations

from autoplace.export import accelerate, deepspeed, megatron, slurm, torchrun, torchtitan
from autoplace.export.accelerate import Accelerate
from autoplace.export.deepspeed import DeepSpeed
from autoplace.export.launcher import Launcher
from autoplace.export.megatron import Megatron
from autoplace.export.slurm import Slurm
from autoplace.export.torchrun import Torchrun
from autoplace.export.torchtitan import Torchtitan

LAUNCHERS: dict[str, Launcher] = {
    "megatron": megatron.LAUNCHER,
    "deepspeed": deepspeed.LAUNCHER,
    "torchtitan": torchtitan.LAUNCHER,
    "accelerate": accelerate.LAUNCHER,
    "torchrun": torchrun.LAUNCHER,
    "slurm": slurm.LAUNCHER,
}
"""`--launcher` name → Launcher, in preference order."""

STACKS = tuple(n for n, l in LAUNCHERS.items() if l.runtime)
"""Launchers that are a training stack (have a runtime); torchrun and slurm start any of them."""

__all__ = ["LAUNCHERS", "STACKS", "Launcher", "Megatron", "DeepSpeed", "Torchtitan", "Accelerate", "Torchrun",
           "Slurm", "get_launcher"]


def get_launcher(name: str) -> Launcher:
    """The launcher called `name`; one-line InputError naming the choices otherwise."""
    from autoplace.errors import InputError
    key = str(name).strip().lower()
    if key not in LAUNCHERS:
        raise InputError(f"--launcher: unknown launcher '{name}'; choose from {', '.join(LAUNCHERS)} or all")
    return LAUNCHERS[key]
