"""Hardware profiles: one GPU type in one cluster design, read from `hardware_profiles/*.toml`.

Units inside the dataclass are SI: bytes, FLOP/s, bytes/s (unidirectional, per GPU), seconds.
TOML files write the same quantities in friendlier units (GB, TFLOP/s, GB/s, µs) and are converted
here; every number in a TOML names its source in a comment next to it.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from autoplace.data import data_dir
from autoplace.errors import InputError

PROFILE_DIR = data_dir("hardware_profiles")
DEFAULT_HARDWARE = "h100-sxm-80gb"


ATTENTION_FALLBACK = {"flash": ("flash2",), "sdpa": ("flash2",), "flash3": ("cudnn", "flash2"),
                      "cudnn": ("flash3", "flash2"), "flex": ("flash2",), "triton": ("flash2",), "flash2": ()}


@dataclass(frozen=True)
class HardwareSpec:
    name: str
    """Profile name as printed."""
    memory_bytes: float
    """Device memory capacity as the runtime reports it (PyTorch total capacity)."""
    peak_flops: dict
    """Dense peak per dtype: {"bf16", "fp16", "fp8", "fp4", "fp32", "tf32"} in FLOP/s (fp32 the
    non-tensor-core rate; tf32 the tensor-core rate FP32 matmuls run at on Ampere and later)."""
    hbm_bw: float
    """Device memory bandwidth, bytes/s."""
    gpus_per_node: int
    """GPUs per node (per compute tray on NVL72 racks)."""
    scaleup_domain: int
    """GPUs sharing the NVLink/fabric domain (NVL72 = 72)."""
    intra_bw: float
    """Achievable per-GPU bus bandwidth inside the scale-up domain, bytes/s."""
    intra_latency: float
    """Per-step latency α inside the domain, s."""
    inter_bw: float
    """Achievable per-GPU bus bandwidth across domains (NIC), bytes/s."""
    inter_latency: float
    """Per-step latency α across domains, s."""
    host_bw: float
    """Host link (PCIe / C2C) per GPU, one direction, bytes/s."""
    host_memory_bytes: float = 0.0
    """Host (CPU) memory per node, bytes: what the node's ranks offload to (ZeRO-Offload / FSDP CPU
    offload) must fit in `HOST_USABLE` of it (cost.memory.host_fits); 0 = unknown, not checked."""
    arch: str = ""
    """GPU architecture: volta, ampere, hopper, blackwell, cdna3, cpu (which low-precision formats exist)."""
    sustained_factor: float = 0.92
    """Share of the burst MAMF a GPU sustains through training (clock throttling under load): the
    GEMM and attention efficiencies below are this × the measured best (documented per profile)."""
    gemm_efficiency: float = 0.8
    """Achievable fraction of the BF16 peak on large GEMMs (sustained_factor × MAMF)."""
    gemm_efficiency_fp8: float = 0.0
    """The same for FP8 GEMMs against the FP8 peak (0 → gemm_efficiency)."""
    gemm_efficiency_fp4: float = 0.0
    """The same for FP4 GEMMs against the FP4 peak (0 → gemm_efficiency_fp8)."""
    gemm_tile: int = 128
    """Tile edge for wave/tile quantization of GEMM dims."""
    gemm_k_overhead: float = 0.0
    """Per-tile prologue/epilogue as extra K-loop elements (small-K GEMMs)."""
    gemm_k_overhead_fp8: float = 0.0
    """The same for FP8 GEMMs in FP8 K-elements, where measured (0 → gemm_k_overhead × the FP8/BF16
    peak ratio: the same per-tile time)."""
    sm_count: int = 108
    """Streaming multiprocessors (CUs): GEMM wave quantization."""
    sfu_exp_per_s: float = 0.0
    """Exponentials per second the special-function units issue (softmax's exp in the attention core,
    one per score, besides its 2·(d_qk + d_v) matmul FLOPs); 0 = the attention rate does not depend
    on the head dim."""
    kernel_overhead_s: float = 5e-6
    """Launch/tail overhead per GEMM or fused kernel, s."""
    attention_efficiency: float = 0.6
    """Fraction of the BF16 peak the FlashAttention-2-class kernel reaches on the causal attention
    core (fwd + bwd); the kernel families of `attention_kernels` refine it."""
    attention_kernels: dict = field(default_factory=dict)
    """Efficiency per attention kernel family on this GPU ({"flash2", "flash3", "cudnn", "flex", "triton"});
    a family not listed falls back along ATTENTION_FALLBACK, finally to attention_efficiency."""
    hbm_efficiency: float = 0.8
    """Achievable fraction of hbm_bw for memory-bound kernels."""
    nic_efficiency: float = 1.0
    """Reserved: multiplier on inter_bw for concurrent groups."""
    gather_rails: float = 1.0
    """NICs one all-gather/reduce-scatter group's cross-node traffic spreads over (≤ members per
    node); 1 = one NIC per GPU's share."""
    rs_cost_factor: float = 1.0
    """Reduce-scatter bandwidth time ÷ an all-gather of the same size (1: NCCL rings; gloo runs RS
    as an all-reduce + copy, ≈ 2)."""
    comm_overlap: float = 1.0
    """Share of a compute window that hides DP collectives (1: NCCL has its own SMs/engines; ≈ 0:
    gloo threads need the ranks' cores)."""
    host_is_device: bool = False
    """CPU "devices": host memory is the device memory, offload frees nothing."""
    cpu_adam_params_per_s: float = 1.0e9
    """Host Adam throughput per GPU's share of cores."""
    cuda_context_bytes: float = 0.0
    """CUDA context + kernel images + library workspaces (outside the caching allocator)."""
    comm_buffer_bytes: float = 0.0
    """Communicator device state besides NCCL's per-channel FIFO buffers (which the plan prices,
    cost.memory.nccl_buffer_bytes): device comm structs, work FIFOs, proxy and NVLS buffers."""
    nccl_channels: float = 32.0
    """NCCL channels per ring communicator (NCCL MAXCHANNELS = 32, run on NVSwitch nodes)."""
    host_op_factor: float = 1.0
    """Host time per op relative to the reference x86 server CPU the runtime files' host costs
    are stated for (the host CPU class: x86 1.0; Grace in its profile)."""
    step_overhead_s: float = 0.0
    """Per-iteration fixed host/launch overhead, s."""
    price_per_gpu_hour: float | None = None
    """Rental price per GPU-hour for sweep cost columns (None: no price; profiles label theirs as
    assumptions, `sweep --price-per-gpu-hour` overrides it)."""
    source: str = field(default="builtin", compare=False)
    """Where the profile was read from (provenance: not part of equality; plan files keep its file name only)."""
    notes: str = ""
    """One line describing the system."""

    @property
    def nodes_per_domain(self) -> int:
        return max(1, self.scaleup_domain // self.gpus_per_node)

    def peak(self, dtype: str) -> float:
        try:
            return float(self.peak_flops[dtype])
        except KeyError:
            raise InputError(f"hardware '{self.name}' has no peak for dtype '{dtype}'; "
                             f"add peak_tflops.{dtype} to its profile") from None

    def gemm_eff(self, dtype: str) -> float:
        """MAMF-anchored GEMM efficiency for the dtype the GEMMs run in."""
        if dtype == "fp4":
            return self.gemm_efficiency_fp4 or self.gemm_efficiency_fp8 or self.gemm_efficiency
        if dtype == "fp8":
            return self.gemm_efficiency_fp8 or self.gemm_efficiency
        return self.gemm_efficiency

    def attention_eff(self, kernel: str) -> float:
        """Efficiency of an attention kernel family on this GPU (fraction of the BF16 peak)."""
        table = self.attention_kernels or {}
        for k in (kernel,) + ATTENTION_FALLBACK.get(kernel, ("flash2",)):
            if k in table:
                return float(table[k])
        return self.attention_efficiency

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
    "sfu_texp_per_s": ("sfu_exp_per_s", 1e12),
    "step_overhead_ms": ("step_overhead_s", 1e-3),
    "cuda_context_gib": ("cuda_context_bytes", 2**30),
    "comm_buffer_gib": ("comm_buffer_bytes", 2**30),
    "cpu_adam_gparams_per_s": ("cpu_adam_params_per_s", 1e9),
    "host_memory_gib": ("host_memory_bytes", 2**30),
}
_FIELDS = {f.name for f in fields(HardwareSpec)}


SECTIONS = ("memory", "peak_tflops", "compute", "network", "overheads", "attention", "pricing")
DOC_SECTIONS = ("calibration", "raw", "software")    # written by `autoplace calibrate`: provenance only
_PEAK_KEYS = ("bf16", "fp16", "fp8", "fp4", "fp32", "tf32")
_ATTN_KEYS = ("flash2", "flash3", "cudnn", "flex", "triton")


def _valid_keys() -> list[str]:
    scalar = {f for f in _FIELDS if f not in ("peak_flops", "attention_kernels", "source")}
    return sorted(scalar | set(_UNITS) - {v[0] for v in _UNITS.values()})


def hardware_from_dict(raw: dict, source: str) -> HardwareSpec:
    """A HardwareSpec from a parsed profile; every key must be known (exact keys, as Calculon's
    from_json): an unknown key is an InputError naming it and the valid keys."""
    src = Path(source).name
    valid = set(_valid_keys())
    flat: dict = {}
    for key, val in raw.items():
        if key in DOC_SECTIONS:
            continue
        if isinstance(val, dict) and key not in ("peak_tflops", "attention"):
            if key not in SECTIONS:
                raise InputError(f"hardware profile {src}: unknown table [{key}]; valid tables: "
                                 f"{', '.join(SECTIONS + DOC_SECTIONS)}")
            for k, v in val.items():
                if k not in valid:
                    raise InputError(f"hardware profile {src}: unknown key '{k}' in [{key}]; valid keys: "
                                     f"{', '.join(sorted(valid))}")
                flat[k] = v
        elif key in ("peak_tflops", "attention"):
            allowed = _PEAK_KEYS if key == "peak_tflops" else _ATTN_KEYS
            if not isinstance(val, dict):
                raise InputError(f"hardware profile {src}: [{key}] must be a table")
            bad = sorted(set(val) - set(allowed))
            if bad:
                raise InputError(f"hardware profile {src}: unknown key '{bad[0]}' in [{key}]; valid keys: "
                                 f"{', '.join(allowed)}")
            flat[key] = val
        elif key not in valid:
            raise InputError(f"hardware profile {src}: unknown key '{key}'; valid keys: {', '.join(sorted(valid))}")
        else:
            flat[key] = val
    from autoplace.safe import number
    kw: dict = {}
    where = f"hardware profile {src}"
    for key, val in flat.items():
        if key == "peak_tflops":
            kw["peak_flops"] = {k: number(v, f"{where}: peak_tflops.{k}") * 1e12 for k, v in val.items()}
        elif key == "attention":
            kw["attention_kernels"] = {k: number(v, f"{where}: attention.{k}") for k, v in val.items()}
        elif key in _UNITS:
            name, mult = _UNITS[key]
            kw[name] = number(val, f"{where}: {key}") * mult
        else:
            kw[key] = val
    kw.setdefault("source", source)
    required = ["name", "memory_bytes", "peak_flops", "hbm_bw", "gpus_per_node", "scaleup_domain",
                "intra_bw", "intra_latency", "inter_bw", "inter_latency", "host_bw"]
    missing = [r for r in required if r not in kw]
    if missing:
        raise InputError(f"hardware profile {src}: missing field(s) {', '.join(missing)}")
    return HardwareSpec(**kw)


# ---- domains: every field's allowed values, checked once where a profile is read ------------------
_BIG = 1e18
_DOMAINS = {   # field → (TOML key as the user writes it, unit divisor, low, high, low exclusive)
    "memory_bytes": ("memory_gib", 2**30, 2**20, 1e15, False),   # ≥ 1 MiB (memory_gb in decimal units is read too)
    "hbm_bw": ("hbm_bw_gbps", 1e9, 1e6, 1e15, False),          # bandwidths ≥ 1 MB/s (a 1e-300 GB/s link overflows the times)
    "intra_bw": ("intra_bw_gbps", 1e9, 1e6, 1e15, False),
    "inter_bw": ("inter_bw_gbps", 1e9, 1e6, 1e15, False),
    "host_bw": ("host_bw_gbps", 1e9, 1e6, 1e15, False),
    "intra_latency": ("intra_latency_us", 1e-6, 0.0, 1.0, False),
    "inter_latency": ("inter_latency_us", 1e-6, 0.0, 1.0, False),
    "sustained_factor": ("sustained_factor", 1.0, 0.0, 1.5, True),
    "gemm_efficiency": ("gemm_efficiency", 1.0, 0.0, 1.0, True),
    "gemm_efficiency_fp8": ("gemm_efficiency_fp8", 1.0, 0.0, 1.0, False),
    "gemm_efficiency_fp4": ("gemm_efficiency_fp4", 1.0, 0.0, 1.0, False),
    "gemm_k_overhead": ("gemm_k_overhead", 1.0, 0.0, 1e6, False),
    "gemm_k_overhead_fp8": ("gemm_k_overhead_fp8", 1.0, 0.0, 1e6, False),
    "sfu_exp_per_s": ("sfu_texp_per_s", 1e12, 0.0, _BIG, False),
    "kernel_overhead_s": ("kernel_overhead_us", 1e-6, 0.0, 1.0, False),
    "attention_efficiency": ("attention_efficiency", 1.0, 0.0, 1.0, True),
    "hbm_efficiency": ("hbm_efficiency", 1.0, 0.0, 1.0, True),
    "nic_efficiency": ("nic_efficiency", 1.0, 0.0, 10.0, True),
    "gather_rails": ("gather_rails", 1.0, 0.0, 1e3, True),
    "rs_cost_factor": ("rs_cost_factor", 1.0, 0.0, 100.0, True),
    "comm_overlap": ("comm_overlap", 1.0, 0.0, 1.0, False),
    "cpu_adam_params_per_s": ("cpu_adam_gparams_per_s", 1e9, 0.0, _BIG, True),
    "cuda_context_bytes": ("cuda_context_gib", 2**30, 0.0, 1e15, False),
    "comm_buffer_bytes": ("comm_buffer_gib", 2**30, 0.0, 1e15, False),
    "nccl_channels": ("nccl_channels", 1.0, 1.0, 64.0, False),
    "host_memory_bytes": ("host_memory_gib", 2**30, 0.0, 1e18, False),
    "step_overhead_s": ("step_overhead_ms", 1e-3, 0.0, 3600.0, False),
}
_INT_DOMAINS = {"gpus_per_node": (1, 1 << 20), "scaleup_domain": (1, 1 << 20), "gemm_tile": (1, 65536),
                "sm_count": (1, 1 << 20)}


def check_hardware(hw: HardwareSpec, where: str | None = None) -> HardwareSpec:
    """`hw` if every field is in its domain (finite; positive or non-negative; bounded), else a one-line
    InputError naming the profile key (in the unit the profile writes it) and the allowed range."""
    from autoplace.safe import MAX_GPUS, check_name, integer, number
    check_name(hw.name, f"{where or 'hardware profile'}: name")
    w = where or f"hardware '{hw.name}'"
    for f, (key, unit, lo, hi, lo_open) in _DOMAINS.items():
        v = getattr(hw, f)
        fix = f"set {key} in {lo / unit:g}..{hi / unit:g}" + (" (exclusive of the low end)" if lo_open else "")
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            number(v, f"{w}: {key}", fix=fix)
        number(v / unit, f"{w}: {key}", lo=lo / unit, hi=hi / unit, lo_open=lo_open, fix=fix)
    for f, (lo, hi) in _INT_DOMAINS.items():
        integer(getattr(hw, f), f"{w}: {f}", lo=lo, hi=min(hi, MAX_GPUS))
    if not isinstance(hw.peak_flops, dict) or not hw.peak_flops:
        raise InputError(f"{w}: peak_tflops must be a table with at least bf16")
    for k, v in hw.peak_flops.items():
        number(v / 1e12 if isinstance(v, (int, float)) and not isinstance(v, bool) else v,
               f"{w}: peak_tflops.{k}", lo=1e-6, hi=1e9, fix="give the dense tensor-core peak in TFLOP/s (≥ 1e-06)")
    if not isinstance(hw.attention_kernels or {}, dict):
        raise InputError(f"{w}: attention must be a table of kernel efficiencies ({', '.join(_ATTN_KEYS)})")
    for k, v in (hw.attention_kernels or {}).items():
        number(v, f"{w}: attention.{k}", lo=0.0, hi=1.0, lo_open=True)
    if hw.price_per_gpu_hour is not None:
        number(hw.price_per_gpu_hour, f"{w}: price_per_gpu_hour", lo=0.0, hi=1e6)
    return hw


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
    "gb300": "gb300-nvl72", "b300-288gb": "b300", "dgx-b300": "b300", "dgx-b200": "b200",
    "h800-sxm-80gb": "h800", "a800-sxm4-80gb": "a800", "h20-96gb": "h20", "gh200-96gb": "gh200",
    "mi325x-256gb": "mi325x", "mi355x-288gb": "mi355x",
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
    for pat, stem in ((r"gb300", "gb300-nvl72"), (r"\bb300", "b300"), (r"gb200", "gb200-nvl72"), (r"\bb200", "b200"),
                      (r"gh200", "gh200"), (r"h200", "h200"), (r"h100", "h100-sxm-80gb"), (r"h800", "h800"),
                      (r"\bh20\b", "h20"), (r"a800", "a800"), (r"mi300x", "mi300x"), (r"mi325x", "mi325x"),
                      (r"mi355x", "mi355x"), (r"v100", "v100-dgx2")):
        if re.search(pat, t):
            if stem == "v100-dgx2" and gb is not None and gb != 32:
                return None, f"'{name}': only the 32 GB V100 (DGX-2) has a profile"
            if stem == "h100-sxm-80gb" and gb in (95, 96) or re.search(r"grand\s*teton", t):
                return "h100-96gb-gt", ""
            if stem == "gh200" and gb is not None and gb != 96:
                return None, f"'{name}': only the 96 GB GH200 has a profile"
            if stem == "h100-sxm-80gb" and gb is not None and gb not in (80, 94):
                return None, f"'{name}': only the 80 GB H100 SXM and the 96 GB Grand Teton H100 have profiles"
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


def override_hardware(hw: HardwareSpec, **overrides) -> HardwareSpec:
    """`hw` with field overrides (None values ignored; an unknown field is an InputError). A
    `gpus_per_node` override moves a node-bounded NVLink domain with it (4 GPUs/node: TP 8 spans two
    domains); a rack-scale domain (NVL72) keeps its size unless the node is larger."""
    ov = {k: v for k, v in overrides.items() if v is not None}
    bad = [k for k in ov if k not in _FIELDS]
    if bad:
        raise InputError(f"hardware override: unknown field(s) {', '.join(bad)}")
    if not ov:
        return hw
    node_bound = hw.scaleup_domain == hw.gpus_per_node     # NVLink ends at the node (DGX/HGX boxes)
    hw = hw.with_(**ov)
    if "gpus_per_node" in ov and "scaleup_domain" not in ov and (
            node_bound or hw.scaleup_domain < hw.gpus_per_node):
        hw = hw.with_(scaleup_domain=hw.gpus_per_node)
    return hw


def load_hardware(name_or_path: str = DEFAULT_HARDWARE, **overrides) -> HardwareSpec:
    path = resolve_profile_path(name_or_path)
    try:
        from autoplace.safe import read_text
        raw = tomllib.loads(read_text(path, "--hardware"))
    except tomllib.TOMLDecodeError as e:
        raise InputError(f"hardware profile {path}: invalid TOML ({e})") from None
    hw = override_hardware(hardware_from_dict(raw, str(path)), **overrides)
    return check_hardware(hw, f"hardware profile {path.name}")


_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?(?:e[+-]?\d+)?)\s*([kmgt]i?b?|b)?\s*$", re.I)
_MULT = {"b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12,
         "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "ki": 2**10, "mi": 2**20,
         "gi": 2**30, "ti": 2**40}


def parse_size(text: str, field_name: str = "--gpu-memory", need_unit: bool = False) -> float:
    """'40GiB' → 42949672960.0, '80GB' → 8e10, '1.5e9' → 1.5e9 (bytes). need_unit: a bare number
    is refused (one line naming the fix) rather than read as bytes."""
    m = _SIZE.match(str(text))
    if not m:
        raise InputError(f"{field_name}: cannot read size '{text}'; write e.g. 40GiB or 80GB")
    if need_unit and not m.group(2):
        raise InputError(f"{field_name} {text}: give a unit, e.g. {m.group(1)}GiB (2^30 bytes) or {m.group(1)}GB "
                         "(10^9 bytes); a bare number is not read as bytes")
    num, unit = float(m.group(1)), (m.group(2) or "b").lower()
    return num * _MULT[unit]
