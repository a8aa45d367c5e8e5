"""Input resolvers shared by the command line and the Python API (`autoplace.api`): a model name or
config path → ModelSpec, a hardware name or path (with overrides) → HardwareSpec, the GPU count.
Each raises a one-line InputError naming the option and the fix."""

from __future__ import annotations

import os
from pathlib import Path

from autoplace.errors import InputError


def resolve_model(model: str | None, params: str | None, largest_layer: float | None = None,
                  allow_params: bool = True):
    """--model NAME|config.json|DIR or --params COUNT → ModelSpec."""
    from autoplace.specs.model import params_only
    if params is not None:
        try:
            return params_only(float(params), largest_unit=largest_layer)
        except ValueError:
            raise InputError(f"--params must be a number like 7.5e9, got '{params}'") from None
    if not model:
        raise InputError("give --model NAME (e.g. 13b) or a config.json path"
                         + (", or --params COUNT" if allow_params else ""))
    p = Path(model)
    if p.suffix == ".json" or p.is_dir() or (os.sep in model and p.exists()):
        from autoplace.specs.hf_config import load_hf_config
        return load_hf_config(model)
    from autoplace.specs.presets import get_preset
    return get_preset(model)


def check_hardware_name(hardware: str) -> None:
    """--hardware takes a profile name (or alias) or a .toml path, exactly: a free-form name such as
    'h100xyz' is refused with the closest names, never silently mapped to a profile."""
    import difflib

    from autoplace.specs.hardware import ALIASES, _canon, available_profiles
    p = Path(hardware)
    if p.suffix == ".toml" or p.exists() or os.sep in hardware:
        return
    key = _canon(hardware)
    names = available_profiles()
    if key in names or key in ALIASES:
        return
    close = difflib.get_close_matches(key, names + list(ALIASES), n=2, cutoff=0.5)
    raise InputError(f"--hardware: unknown profile '{hardware}'"
                     + (f" (did you mean {' or '.join(close)}?)" if close else "")
                     + f"; choose one of {', '.join(names)} or pass a .toml path")


def hardware_overrides(gpu_memory: str | None = None, gpus_per_node: int | None = None) -> dict:
    """--gpu-memory (a size with its unit) and --gpus-per-node → HardwareSpec field overrides."""
    from autoplace.specs.hardware import parse_size
    ov = {}
    if gpu_memory:
        ov["memory_bytes"] = parse_size(gpu_memory, "--gpu-memory", need_unit=True)
    if gpus_per_node is not None:
        if gpus_per_node < 1:
            raise InputError(f"--gpus-per-node must be ≥ 1, got {gpus_per_node}")
        ov["gpus_per_node"] = gpus_per_node
    return ov


def resolve_hardware(hardware: str | None, gpu_memory: str | None = None, gpus_per_node: int | None = None):
    from autoplace.specs.hardware import DEFAULT_HARDWARE, load_hardware
    if hardware:
        check_hardware_name(hardware)
    return load_hardware(hardware or DEFAULT_HARDWARE, **hardware_overrides(gpu_memory, gpus_per_node))


def hardware_note(hw, gpu_memory: str | None = None, gpus_per_node: int | None = None) -> str:
    """What the header says about overridden hardware: '' when nothing is overridden."""
    parts = []
    if gpus_per_node is not None:
        parts.append(f"{hw.gpus_per_node} GPUs/node, NVLink domain {hw.scaleup_domain} (--gpus-per-node)")
    if gpu_memory:
        parts.append(f"memory {hw.memory_bytes / 2**30:.1f} GiB (--gpu-memory {gpu_memory})")
    return "; ".join(parts)


def check_gpus(gpus: int) -> int:
    if gpus is None or gpus < 1:
        raise InputError(f"--gpus must be a positive integer, got {gpus}")
    return gpus


def resolve_runtime(runtime, runtime_set):
    """--runtime NAME|PATH plus --runtime-set settings → what build_training/search take: the name
    unchanged without settings, else the RuntimeSpec with them applied (default runtime when
    --runtime is not given; `autoplace.runtimes.switches`)."""
    if not runtime_set:
        return runtime
    from autoplace.runtimes import load_runtime
    from autoplace.runtimes.switches import apply_settings
    return apply_settings(load_runtime(runtime), runtime_set)
