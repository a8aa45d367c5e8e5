"""Hardware profiles: one GPU type in one cluster design, read from `hardware_profiles/*.toml`.

Units inside the dataclass are SI: bytes, FLOP/s, bytes/s (unidirectional, per GPU), seconds.
TOML files write the same quantities in friendlier units (GB, TFLOP/s, GB/s, µs) and are converted
here; every number in a TOML names its source in a comment next to it.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, fields, replace
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from autoplace.data import data_dir
from autoplace.errors import InputError

PROFILE_DIR = data_dir("hardware_profiles")
DEFAULT_HARDWARE = "h100-sxm-80gb"


@dataclass(frozen=True)
class HardwareSpec:
    name: str
    memory_bytes: float                     # device memory (HBM) capacity
    peak_flops: dict                        # dense peak per dtype: {"bf16", "fp16", "fp8", "fp32"}
    hbm_bw: float                           # device memory bandwidth
    gpus_per_node: int
    scaleup_domain: int                     # GPUs sharing the NVLink/fabric domain (NVL72 = 72)
    intra_bw: float                         # achievable per-GPU bus bandwidth inside the scale-up domain
    intra_latency: float                    # per-step latency α inside the domain
    inter_bw: float                         # achievable per-GPU bus bandwidth across domains (NIC)
    inter_latency: float                    # per-step latency α across domains
    host_bw: float                          # host link (PCIe / C2C) per GPU, one direction
    # compute efficiency (fitted per profile, one set for all models)
    gemm_efficiency: float = 0.8            # achievable fraction of peak on large GEMMs
    gemm_tile: int = 128                    # tile edge for wave/tile quantization of GEMM dims
    gemm_k_overhead: float = 0.0            # per-tile prologue/epilogue as extra K-loop elements (small-K GEMMs)
    sm_count: int = 108                     # streaming multiprocessors (CUs): GEMM wave quantization
    kernel_overhead_s: float = 5e-6         # launch/tail overhead per GEMM or fused kernel
    attention_efficiency: float = 0.6       # fraction of peak for the attention core (flash)
    hbm_efficiency: float = 0.8             # achievable fraction of hbm_bw for memory-bound kernels
    nic_efficiency: float = 1.0             # reserved: multiplier on inter_bw for concurrent groups
    gather_rails: float = 1.0               # NICs one all-gather/reduce-scatter group's cross-node traffic
    rs_cost_factor: float = 1.0             # reduce-scatter bandwidth time ÷ an all-gather of the same size
                                            # (1: NCCL rings; gloo runs RS as an all-reduce + copy, ≈ 2)
    comm_overlap: float = 1.0               # share of a compute window that hides DP collectives (1: NCCL has
                                            # its own SMs/engines; ≈ 0: gloo threads need the ranks' cores)
    host_is_device: bool = False            # CPU "devices": host memory is the device memory, offload frees nothing
                                            # spreads over (≤ members per node); 1 = one NIC per GPU's share
    cpu_adam_params_per_s: float = 1.0e9    # host Adam throughput per GPU's share of cores
    # fixed memory overheads
    cuda_context_bytes: float = 0.0
    comm_buffer_bytes: float = 0.0          # NCCL communicator buffers (all groups together)
    allocator_reserve_frac: float = 0.0     # share of memory the caching allocator cannot hand out
    step_overhead_s: float = 0.0            # per-iteration fixed host/launch overhead
    price_per_gpu_hour: float | None = None # rental price (currency units per GPU-hour) for sweep cost columns;
                                            # None: no price (cost shows "—"); profiles label theirs as assumptions
    source: str = "builtin"
    notes: str = ""

    @property
    def nodes_per_domain(self) -> int:
        return max(1, self.scaleup_domain // self.gpus_per_node)

    def peak(self, dtype: str) -> float:
        try:
            return float(self.peak_flops[dtype])
        except KeyError:
            raise InputError(f"hardware '{self.name}' has no peak for dtype '{dtype}'; "
                             f"add peak_tflops.{dtype} to its profile") from None

    @property
    def usable_memory_bytes(self) -> float:
        return self.memory_bytes * (1.0 - self.allocator_reserve_frac)

    @property
    def fixed_overhead_bytes(self) -> float:
        return self.cuda_context_bytes + self.comm_buffer_bytes

    def with_(self, **kw) -> "HardwareSpec":
        return replace(self, **kw)


# ---- TOML reading -----------------------------------------------------------------------------
_UNITS = {  # TOML key → (dataclass field, multiplier)
    "memory_gb": ("memory_bytes", 1e9),
    "memory_gib": ("memory_bytes", 2**30),
    "hbm_bw_gbps": ("hbm_bw", 1e9),
    "intra_bw_gbps": ("intra_bw", 1e9),
    "inter_bw_gbps": ("inter_bw", 1e9),
    "host_bw_gbps": ("host_bw", 1e9),
    "intra_latency_us": ("intra_latency", 1e-6),
    "inter_latency_us": ("inter_latency", 1e-6),
    "kernel_overhead_us": ("kernel_overhead_s", 1e-6),
    "step_overhead_ms": ("step_overhead_s", 1e-3),
    "cuda_context_gib": ("cuda_context_bytes", 2**30),
    "comm_buffer_gib": ("comm_buffer_bytes", 2**30),
    "cpu_adam_gparams_per_s": ("cpu_adam_params_per_s", 1e9),
}
_FIELDS = {f.name for f in fields(HardwareSpec)}


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict) and k not in ("peak_tflops",):
            out.update(_flatten(v, ""))
        else:
            out[k] = v
    return out


def hardware_from_dict(raw: dict, source: str) -> HardwareSpec:
    flat = _flatten({k: v for k, v in raw.items() if k not in ("calibration", "raw", "software")})
    kw: dict = {}
    for key, val in flat.items():
        if key == "peak_tflops":
            kw["peak_flops"] = {k: float(v) * 1e12 for k, v in val.items()}
        elif key in _UNITS:
            name, mult = _UNITS[key]
            kw[name] = float(val) * mult
        elif key in _FIELDS:
            kw[key] = val
        # unknown keys (documentation-only) are ignored
    kw.setdefault("source", source)
    required = ["name", "memory_bytes", "peak_flops", "hbm_bw", "gpus_per_node", "scaleup_domain",
                "intra_bw", "intra_latency", "inter_bw", "inter_latency", "host_bw"]
    missing = [r for r in required if r not in kw]
    if missing:
        raise InputError(f"hardware profile {source}: missing field(s) {', '.join(missing)}")
    try:
        return HardwareSpec(**kw)
    except TypeError as e:  # pragma: no cover - defensive
        raise InputError(f"hardware profile {source}: {e}") from None


def _canon(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


# Common spellings of GPU names (validation records, nvidia-smi) → profile file stem.
ALIASES = {
    "h100": "h100-sxm-80gb", "h100-80gb": "h100-sxm-80gb", "h100-sxm": "h100-sxm-80gb",
    "h100-sxm5-80gb": "h100-sxm-80gb", "nvidia-h100-80gb-hbm3": "h100-sxm-80gb",
    "a100": "a100-80gb", "a100-sxm4-80gb": "a100-80gb", "a100-80gb-sxm": "a100-80gb",
    "nvidia-a100-sxm4-80gb": "a100-80gb", "a100-sxm4-40gb": "a100-40gb",
    "nvidia-a100-sxm4-40gb": "a100-40gb",
    "v100": "v100-dgx2", "v100-sxm3-32gb": "v100-dgx2", "v100-sxm3-32gb-dgx-2": "v100-dgx2",
    "v100-32gb": "v100-dgx2",
    "h200-sxm": "h200", "h200-141gb": "h200", "nvidia-h200": "h200",
    "b200-180gb": "b200", "gb200": "gb200-nvl72", "mi300x-192gb": "mi300x",
    "cpu": "local-cpu",
}


_VENDOR_WORDS = r"nvidia|amd|instinct|tesla|gpu|accelerator|hbm\d?e?|sxm\d?|oam"


def match_gpu_name(name: str) -> tuple[str | None, str]:
    """A profile stem for a free-form GPU name ('NVIDIA H100 80GB HBM3', 'AMD Instinct MI300X',
    'A100-SXM4-40GB (Selene)'), or (None, why not) — e.g. PCIe / NVL boards, whose clocks, power and
    links differ from the SXM profiles, are refused rather than mapped to them."""
    t = re.sub(r"\(.*?\)", " ", name.lower())
    if re.search(r"pcie|\bnvl\b(?!72)|h100\s*nvl", t):
        return None, f"'{name}' is a PCIe/NVL board: no profile (the SXM profiles' power, clocks and NVLink do not apply)"
    t = re.sub(_VENDOR_WORDS, " ", t)
    mem = re.search(r"(\d+)\s*gb", t)
    gb = int(mem.group(1)) if mem else None
    for pat, stem in ((r"gb200", "gb200-nvl72"), (r"\bb200", "b200"), (r"h200", "h200"), (r"h100", "h100-sxm-80gb"),
                      (r"mi300x", "mi300x"), (r"v100", "v100-dgx2")):
        if re.search(pat, t):
            if stem == "v100-dgx2" and gb is not None and gb != 32:
                return None, f"'{name}': only the 32 GB V100 (DGX-2) has a profile"
            if stem == "h100-sxm-80gb" and gb is not None and gb not in (80, 94):
                return None, f"'{name}': only the 80 GB H100 SXM has a profile"
            return stem, ""
    if re.search(r"a100", t):
        if gb == 40:
            return "a100-40gb", ""
        if gb in (80, None):
            return "a100-80gb", ""
    return None, f"unknown GPU '{name}'"


def available_profiles() -> list[str]:
    return sorted(p.stem for p in PROFILE_DIR.glob("*.toml"))


def resolve_profile_path(name_or_path: str) -> Path:
    p = Path(name_or_path)
    if p.is_dir():
        raise InputError(f"--hardware: '{name_or_path}' is a folder; pass a profile name or a .toml file")
    if p.suffix == ".toml" or p.exists():
        if not p.exists():
            raise InputError(f"--hardware: file '{name_or_path}' does not exist")
        return p
    key = _canon(name_or_path)
    key = ALIASES.get(key, key)
    cand = PROFILE_DIR / f"{key}.toml"
    if cand.exists():
        return cand
    stem, why = match_gpu_name(name_or_path)
    if stem and (PROFILE_DIR / f"{stem}.toml").exists():
        return PROFILE_DIR / f"{stem}.toml"
    if why and not why.startswith("unknown"):
        raise InputError(f"--hardware: {why}; pass a calibrated .toml (autoplace calibrate)")
    raise InputError(f"--hardware: unknown GPU profile '{name_or_path}'; "
                     f"choose one of {', '.join(available_profiles())} or pass a .toml path")


def load_hardware(name_or_path: str = DEFAULT_HARDWARE, **overrides) -> HardwareSpec:
    path = resolve_profile_path(name_or_path)
    try:
        raw = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise InputError(f"hardware profile {path}: invalid TOML ({e})") from None
    hw = hardware_from_dict(raw, str(path))
    ov = {k: v for k, v in overrides.items() if v is not None}
    bad = [k for k in ov if k not in _FIELDS]
    if bad:
        raise InputError(f"hardware override: unknown field(s) {', '.join(bad)}")
    if ov:
        hw = hw.with_(**ov)
        if "gpus_per_node" in ov and "scaleup_domain" not in ov and hw.scaleup_domain < hw.gpus_per_node:
            hw = hw.with_(scaleup_domain=hw.gpus_per_node)
    for f in ("intra_bw", "inter_bw", "hbm_bw", "host_bw"):
        if not getattr(hw, f) > 0:
            raise InputError(f"hardware '{hw.name}': {f} must be positive")
    if hw.gpus_per_node < 1 or hw.scaleup_domain < 1 or hw.memory_bytes <= 0:
        raise InputError(f"hardware '{hw.name}': gpus_per_node, scaleup_domain and memory must be positive")
    return hw


_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?(?:e[+-]?\d+)?)\s*([kmgt]i?b?|b)?\s*$", re.I)
_MULT = {"b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12,
         "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "ki": 2**10, "mi": 2**20,
         "gi": 2**30, "ti": 2**40}


def parse_size(text: str, field_name: str = "--gpu-memory") -> float:
    """'40GiB' → 42949672960.0, '80GB' → 8e10, '1.5e9' → 1.5e9 (bytes)."""
    m = _SIZE.match(str(text))
    if not m:
        raise InputError(f"{field_name}: cannot read size '{text}'; write e.g. 40GiB or 80GB")
    num, unit = float(m.group(1)), (m.group(2) or "b").lower()
    return num * _MULT[unit]
