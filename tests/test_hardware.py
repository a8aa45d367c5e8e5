"""Hardware profiles (hardware_profiles/*.toml) and their loader (autoplace.specs.hardware)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from autoplace.errors import InputError
from autoplace.specs.hardware import (
    PROFILE_DIR,
    HardwareSpec,
    available_profiles,
    hardware_from_dict,
    load_hardware,
    parse_size,
)

GPU_PROFILES = ["v100-dgx2", "a100-40gb", "a100-80gb", "h100-sxm-80gb", "h200", "b200",
                "gb200-nvl72", "gb300-nvl72", "b300", "mi300x"]
ALL_PROFILES = GPU_PROFILES + ["local-cpu"]

# Dense BF16 peak per profile, from the validation README §5 hardware table (TFLOP/s); several
# accepted spellings where the table gives two (e.g. H100 989.4 / 989, MI300X 1,307 / ~1300).
README_BF16_TFLOPS = {
    "v100-dgx2": (125,),
    "a100-40gb": (312,),
    "a100-80gb": (312,),
    "h100-sxm-80gb": (989.4, 989),
    "h200": (989, 989.4),
    "b200": (2250,),
    "gb200-nvl72": (2500,),
    "gb300-nvl72": (2500,),   # GB300 NVL72 spec: 180 PF dense BF16 per 72 GPUs
    "b300": (2250,),          # HGX B300 spec: 18 PF dense BF16 per 8 GPUs
    "mi300x": (1307, 1300),
}
# Best measured dense BF16 GEMM (MAMF, validation README §5) in TFLOP/s: gemm_efficiency × peak
# must reproduce it.
README_MAMF_TFLOPS = {
    "a100-40gb": 271.2, "a100-80gb": 271.2, "h100-sxm-80gb": 794.5, "h200": 794.5,
    "b200": 1745.0, "gb200-nvl72": 1822.0, "mi300x": 668.4,
}
# Wire bandwidth per GPU, one direction (GB/s): an achievable bus bandwidth must stay below it.
SCALEUP_WIRE_GBPS = {
    "v100-dgx2": 150, "a100-40gb": 300, "a100-80gb": 300, "h100-sxm-80gb": 450, "h200": 450,
    "b200": 900, "gb200-nvl72": 900, "gb300-nvl72": 900, "b300": 900, "mi300x": 448,
}
NIC_LINE_GBPS = {  # per GPU
    "v100-dgx2": 800 / 8 / 16, "a100-40gb": 25, "a100-80gb": 25, "h100-sxm-80gb": 50,
    "h200": 50, "b200": 50, "gb200-nvl72": 50, "gb300-nvl72": 100, "b300": 100, "mi300x": 50,
}
NO_FP8 = {"v100-dgx2", "a100-40gb", "a100-80gb"}

REQUIRED_KEYS = """
name = "Test GPU"
memory_gb = 80
hbm_bw_gbps = 2000
gpus_per_node = 8
scaleup_domain = 8
intra_bw_gbps = 200
intra_latency_us = 3
inter_bw_gbps = 20
inter_latency_us = 8
host_bw_gbps = 25

[peak_tflops]
bf16 = 300
"""


def _write(tmp_path: Path, text: str, name: str = "custom.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


# ---- every shipped profile --------------------------------------------------------------------

def test_expected_profiles_are_shipped():
    assert set(ALL_PROFILES) <= set(available_profiles())


@pytest.mark.parametrize("stem", ALL_PROFILES)
def test_profile_loads_with_physical_values(stem):
    hw = load_hardware(stem)
    assert isinstance(hw, HardwareSpec)
    assert hw.name and isinstance(hw.name, str)
    assert Path(hw.source).resolve() == (PROFILE_DIR / f"{stem}.toml").resolve()
    for field in ("memory_bytes", "hbm_bw", "intra_bw", "inter_bw", "host_bw",
                  "intra_latency", "inter_latency"):
        assert getattr(hw, field) > 0, field
    for dtype in ("bf16", "fp16", "fp32"):
        assert hw.peak(dtype) > 0, dtype
    assert isinstance(hw.gpus_per_node, int) and hw.gpus_per_node >= 1
    assert isinstance(hw.scaleup_domain, int) and hw.scaleup_domain >= hw.gpus_per_node
    assert hw.scaleup_domain % hw.gpus_per_node == 0
    assert isinstance(hw.gemm_tile, int) and hw.gemm_tile >= 1
    for frac in ("gemm_efficiency", "attention_efficiency", "hbm_efficiency"):
        assert 0 < getattr(hw, frac) <= 1, frac
    assert hw.attention_efficiency <= hw.gemm_efficiency
    assert hw.arch in ("volta", "ampere", "hopper", "blackwell", "cdna3", "cpu")
    for kernel in ("flash2", "cudnn", "sdpa", "flex", "flash3"):
        assert 0 < hw.attention_eff(kernel) <= hw.gemm_efficiency, kernel
    assert hw.cpu_adam_params_per_s > 0
    assert 0 <= hw.kernel_overhead_s < 1e-4
    assert 0 <= hw.step_overhead_s < 0.1
    # the fixed overheads leave most of the device usable
    assert hw.fixed_overhead_bytes < 0.1 * hw.memory_bytes
    # latencies are µs-scale, not seconds or ns typed in the wrong unit
    assert 1e-7 < hw.intra_latency < 1e-3 and 1e-7 < hw.inter_latency < 1e-3


@pytest.mark.parametrize("stem", GPU_PROFILES)
def test_gpu_profile_magnitudes(stem):
    hw = load_hardware(stem)
    assert 16 * 2**30 <= hw.memory_bytes <= 300 * 2**30
    assert 500e9 <= hw.hbm_bw <= 10e12
    # the scale-up domain is faster than the NIC, the NIC slower than its line rate
    assert hw.intra_bw > hw.inter_bw
    assert hw.intra_latency <= hw.inter_latency
    assert hw.intra_bw < SCALEUP_WIRE_GBPS[stem] * 1e9
    assert 0.8 * NIC_LINE_GBPS[stem] * 1e9 <= hw.inter_bw < NIC_LINE_GBPS[stem] * 1e9
    assert hw.peak("fp16") == hw.peak("bf16")
    assert hw.peak("fp32") < hw.peak("bf16")


@pytest.mark.parametrize("stem", GPU_PROFILES)
def test_peak_bf16_matches_validation_table(stem):
    peak = load_hardware(stem).peak("bf16")
    assert any(peak == pytest.approx(v * 1e12, rel=1e-3) for v in README_BF16_TFLOPS[stem]), peak


@pytest.mark.parametrize("stem", sorted(README_MAMF_TFLOPS))
def test_gemm_efficiency_reproduces_measured_mamf(stem):
    """Sustained GEMM efficiency = the profile's sustained factor × the measured MAMF ceiling on every GPU
    (one methodology; 0.92 from the A100 fit, 0.75 for the 1,000–1,100 W HGX Blackwell parts, 0.80 for
    GB200 at 1,200 W)."""
    hw = load_hardware(stem)
    assert hw.sustained_factor in (0.92, 0.75, 0.80)
    assert hw.gemm_efficiency / hw.sustained_factor * hw.peak("bf16") == pytest.approx(
        README_MAMF_TFLOPS[stem] * 1e12, rel=0.01)


@pytest.mark.parametrize("stem", GPU_PROFILES)
def test_fp8_only_where_the_chip_has_it(stem):
    hw = load_hardware(stem)
    if stem in NO_FP8:
        assert hw.peak_flops.get("fp8", 0.0) == 0.0
        if "fp8" not in hw.peak_flops:
            with pytest.raises(InputError, match="fp8"):
                hw.peak("fp8")
    else:
        assert hw.peak("fp8") == pytest.approx(2 * hw.peak("bf16"), rel=0.01)


def test_a100_40_and_80_differ_only_in_memory():
    a40, a80 = load_hardware("a100-40gb"), load_hardware("a100-80gb")
    assert a40.memory_bytes < a80.memory_bytes and a40.hbm_bw < a80.hbm_bw
    assert a40.peak_flops == a80.peak_flops
    assert (a40.intra_bw, a40.inter_bw, a40.gpus_per_node) == (a80.intra_bw, a80.inter_bw, a80.gpus_per_node)


def test_gb200_domain_spans_trays():
    hw = load_hardware("gb200-nvl72")
    assert hw.gpus_per_node == 4
    assert hw.scaleup_domain == 72
    assert hw.scaleup_domain > hw.gpus_per_node
    assert hw.nodes_per_domain == 18
    assert hw.host_bw > load_hardware("b200").host_bw   # NVLink-C2C, not PCIe


def test_dgx_scaleup_domains():
    assert load_hardware("v100-dgx2").scaleup_domain == 16
    for stem in ("a100-80gb", "h100-sxm-80gb", "h200", "b200", "mi300x"):
        hw = load_hardware(stem)
        assert hw.gpus_per_node == hw.scaleup_domain == 8 and hw.nodes_per_domain == 1


def test_local_cpu_is_small():
    hw = load_hardware("local-cpu")
    assert hw.gpus_per_node == 2
    assert hw.peak("fp32") < 1e12
    assert hw.memory_bytes < 24e9


_NUMBER_LINE = re.compile(r"^\s*([A-Za-z0-9_]+)\s*=\s*[-+0-9.]")


@pytest.mark.parametrize("stem", ALL_PROFILES)
def test_every_number_names_its_source(stem):
    """Each numeric key carries a comment on its own line or on the line just above it."""
    lines = (PROFILE_DIR / f"{stem}.toml").read_text().splitlines()
    assert lines[0].startswith("#"), "profile must open with a header comment"
    for i, line in enumerate(lines):
        m = _NUMBER_LINE.match(line)
        if not m or "#" in line:
            continue
        above = lines[i - 1].lstrip() if i > 0 else ""
        assert above.startswith("#"), f"{stem}.toml line {i + 1}: '{m.group(1)}' has no source comment"


# ---- name resolution --------------------------------------------------------------------------

@pytest.mark.parametrize("alias,stem", [
    ("A100-SXM4-80GB", "a100-80gb"),
    ("NVIDIA A100-SXM4-80GB", "a100-80gb"),
    ("a100", "a100-80gb"),
    ("A100-SXM4-40GB", "a100-40gb"),
    ("H100", "h100-sxm-80gb"),
    ("NVIDIA H100 80GB HBM3", "h100-sxm-80gb"),
    ("H100_SXM5_80GB", "h100-sxm-80gb"),
    ("V100-SXM3-32GB", "v100-dgx2"),
    ("H200-SXM", "h200"),
    ("B200-180GB", "b200"),
    ("GB200", "gb200-nvl72"),
    ("MI300X-192GB", "mi300x"),
    ("cpu", "local-cpu"),
    ("H100-SXM-80GB", "h100-sxm-80gb"),   # canonicalisation of the stem itself
])
def test_aliases_resolve(alias, stem):
    assert load_hardware(alias) == load_hardware(stem)


@pytest.mark.parametrize("stem", ALL_PROFILES)
def test_display_name_resolves_back(stem):
    hw = load_hardware(stem)
    assert load_hardware(hw.name) == hw


def test_default_profile_exists():
    assert load_hardware().name == load_hardware("h100-sxm-80gb").name


def test_unknown_name_lists_profiles():
    with pytest.raises(InputError) as exc:
        load_hardware("tpu-v9000")
    msg = str(exc.value)
    assert "tpu-v9000" in msg
    for stem in ALL_PROFILES:
        assert stem in msg


# ---- overrides --------------------------------------------------------------------------------

def test_overrides():
    base = load_hardware("h100-sxm-80gb")
    hw = load_hardware("h100-sxm-80gb", memory_bytes=40 * 2**30, gpus_per_node=4)
    assert hw.memory_bytes == 40 * 2**30
    assert hw.gpus_per_node == 4
    # an HGX box's NVLink ends at the node: 4 GPUs/node make 4-GPU domains (TP 8 crosses nodes)
    assert base.scaleup_domain == base.gpus_per_node == 8 and hw.scaleup_domain == 4
    assert hw.peak_flops == base.peak_flops and hw.intra_bw == base.intra_bw


def test_override_gpus_per_node_widens_domain():
    hw = load_hardware("a100-80gb", gpus_per_node=16)
    assert hw.gpus_per_node == 16 and hw.scaleup_domain == 16


def test_rack_scale_domain_kept_under_smaller_nodes():
    base = load_hardware("gb200-nvl72")
    hw = load_hardware("gb200-nvl72", gpus_per_node=2)
    assert hw.gpus_per_node == 2 and hw.scaleup_domain == base.scaleup_domain == 72


def test_none_overrides_are_ignored():
    assert load_hardware("b200", memory_bytes=None, gpus_per_node=None) == load_hardware("b200")


def test_override_memory_must_be_positive():
    with pytest.raises(InputError):
        load_hardware("h100-sxm-80gb", memory_bytes=0)


# ---- files and the TOML reader ----------------------------------------------------------------

def test_path_to_toml(tmp_path):
    p = _write(tmp_path, REQUIRED_KEYS)
    hw = load_hardware(str(p))
    assert hw.name == "Test GPU"
    assert hw.memory_bytes == 80e9
    assert hw.peak("bf16") == 300e12
    assert hw.intra_latency == pytest.approx(3e-6) and hw.inter_bw == 20e9
    assert hw.source == str(p)
    # defaults for the fitted parameters
    assert hw.gemm_efficiency == HardwareSpec.gemm_efficiency


def test_copied_profile_loads_from_path(tmp_path):
    src = PROFILE_DIR / "h200.toml"
    p = _write(tmp_path, src.read_text(), "my-h200.toml")
    a, b = load_hardware(str(p)), load_hardware("h200")
    assert a.with_(source=b.source) == b


def test_grouped_tables_and_units(tmp_path):
    text = """
name = "Grouped"
[memory]
memory_gib = 40
hbm_bw_gbps = 1000
[network]
gpus_per_node = 4
scaleup_domain = 8
intra_bw_gbps = 100
intra_latency_us = 2
inter_bw_gbps = 10
inter_latency_us = 10
host_bw_gbps = 12
[overheads]
kernel_overhead_us = 4
step_overhead_ms = 2
cuda_context_gib = 0.5
comm_buffer_gib = 1
cpu_adam_gparams_per_s = 1.5
[peak_tflops]
bf16 = 100
fp32 = 10
[calibration]
memory_gib = 1        # ignored table
[raw]
intra_bw_gbps = 1     # ignored table
"""
    hw = load_hardware(str(_write(tmp_path, text)))
    assert hw.memory_bytes == 40 * 2**30
    assert hw.intra_bw == 100e9 and hw.nodes_per_domain == 2
    assert hw.kernel_overhead_s == pytest.approx(4e-6)
    assert hw.step_overhead_s == pytest.approx(2e-3)
    assert hw.cuda_context_bytes == 0.5 * 2**30 and hw.comm_buffer_bytes == 2**30
    assert hw.cpu_adam_params_per_s == 1.5e9
    assert hw.peak_flops == {"bf16": 100e12, "fp32": 10e12}


def test_missing_required_field_is_named(tmp_path):
    text = "\n".join(l for l in REQUIRED_KEYS.splitlines() if not l.startswith("intra_bw_gbps"))
    with pytest.raises(InputError, match="intra_bw"):
        load_hardware(str(_write(tmp_path, text)))


def test_missing_peak_is_named():
    raw = {"name": "x", "memory_gb": 1, "hbm_bw_gbps": 1, "gpus_per_node": 1, "scaleup_domain": 1,
           "intra_bw_gbps": 1, "intra_latency_us": 1, "inter_bw_gbps": 1, "inter_latency_us": 1,
           "host_bw_gbps": 1}
    with pytest.raises(InputError, match="peak_flops"):
        hardware_from_dict(raw, "dict")


def test_invalid_toml_raises_input_error(tmp_path):
    with pytest.raises(InputError, match="invalid TOML"):
        load_hardware(str(_write(tmp_path, "name = \n[[[")))


def test_missing_toml_file_raises_input_error(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        load_hardware(str(tmp_path / "nope.toml"))


# ---- sizes ------------------------------------------------------------------------------------

@pytest.mark.parametrize("text,value", [
    ("40GiB", 40 * 2**30),
    ("80GB", 80e9),
    ("80 GB", 80e9),
    ("40gib", 40 * 2**30),
    ("512MiB", 512 * 2**20),
    ("1.5e9", 1.5e9),
    ("96G", 96e9),
    ("1TiB", 2**40),
    ("100", 100.0),
])
def test_parse_size(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["", "GB", "forty GiB", "-1GB", "40 PB"])
def test_parse_size_rejects_garbage(text):
    with pytest.raises(InputError, match="--gpu-memory"):
        parse_size(text)


def test_data_folders_found_in_checkout_env_and_wheel_prefix(tmp_path, monkeypatch):
    import sys

    from autoplace import data
    # source checkout: next to the package
    assert data.data_dir("hardware_profiles").joinpath("h100-sxm-80gb.toml").exists()
    # AUTOPLACE_DATA overrides
    (tmp_path / "search_spaces").mkdir()
    monkeypatch.setenv("AUTOPLACE_DATA", str(tmp_path))
    assert data.data_dir("search_spaces") == tmp_path / "search_spaces"
    # an installed wheel carries them as package data (autoplace/search_spaces, importlib.resources),
    # found before the checkout's folder; sys.prefix plays no part (pip install --target works)
    monkeypatch.delenv("AUTOPLACE_DATA")
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "venv"))
    pkg = Path(data.__file__).resolve().parent
    assert data.candidates("search_spaces") == [pkg / "search_spaces", pkg.parent / "search_spaces"]
    with pytest.raises(ValueError):
        data.candidates("nope")


@pytest.mark.parametrize("name,stem", [
    ("NVIDIA H100", "h100-sxm-80gb"), ("H100 80GB HBM3", "h100-sxm-80gb"), ("AMD Instinct MI300X", "mi300x"),
    ("A100-SXM4-40GB (Selene)", "a100-40gb"), ("NVIDIA A100-SXM4-80GB", "a100-80gb"),
    ("NVIDIA H200 141GB", "h200"), ("GB200 NVL72", "gb200-nvl72"), ("B200", "b200"),
])
def test_free_form_gpu_names_resolve(name, stem):
    from autoplace.specs.hardware import match_gpu_name
    assert match_gpu_name(name) == (stem, "")
    assert load_hardware(name).name == load_hardware(stem).name


@pytest.mark.parametrize("name,fragment", [
    ("NVIDIA A100 80GB PCIe", "PCIe/NVL board"), ("H100 NVL", "PCIe/NVL board"),
    ("Tesla V100-SXM2-16GB", "only the 32 GB V100"),
])
def test_boards_without_a_profile_are_refused_with_the_reason(name, fragment):
    with pytest.raises(InputError, match=fragment):
        load_hardware(name)


def test_negative_kernel_constants_are_refused_by_name(tmp_path):
    """The exp rate and the GEMM tile overheads drive the attention and small-K GEMM terms: a negative
    value would silently speed them up, so it is a one-line InputError naming the TOML key."""
    for key in ("sfu_texp_per_s", "gemm_k_overhead_fp8"):
        with pytest.raises(InputError, match=f"{key} must be ≥ 0"):
            load_hardware(str(_write(tmp_path, f"{key} = -1\n" + REQUIRED_KEYS)))
    assert load_hardware(str(_write(tmp_path, "sfu_texp_per_s = 3.9\n" + REQUIRED_KEYS))).sfu_exp_per_s == 3.9e12


@pytest.mark.parametrize("key,val", [("hbm_bw_gbps", 1e-300), ("inter_bw_gbps", 1e-9), ("memory_gib", 1e-12)])
def test_vanishing_bandwidth_or_memory_is_refused(tmp_path, key, val):
    """A 1e-300 GB/s link overflowed the step-time sums into warnings and inf (fuzz campaign): the
    profile's floors (1 MB/s, 1 MB) refuse it in one line naming the key."""
    text = (Path(PROFILE_DIR) / "h100-sxm-80gb.toml").read_text()
    assert re.search(rf"^{key}\s*=", text, re.M)
    p = tmp_path / "tiny.toml"
    p.write_text(re.sub(rf"^{key}\s*=.*$", f"{key} = {val!r}", text, count=1, flags=re.M))
    with pytest.raises(InputError, match=key):
        load_hardware(str(p))
