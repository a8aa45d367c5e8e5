"""Which runtime ran a published record: the one table of frameworks and eras.

`runtime_for_record(text, …)` reads the record's structured fields — the framework its source names
(citation, url, locator, table; `validate.record.record_fields_text`, never the free-text notes), the
container or release it names, the citation year, the ZeRO stage — and returns the runtime file that
describes that stack, with the reason. Nothing here is a per-record factor: every record that names
the same stack and era maps to the same runtime, and the cost model then reads that runtime's
kernels, memory behaviour and defaults.
"""

from __future__ import annotations

import re

# (pattern in the record's text, runtime, why) — checked in order, the first match wins
_NAMED = (
    (r"automodel", "nemo-automodel", "NeMo AutoModel (PyTorch FSDP2 + TE + DeepEP)"),
    (r"megatron-bridge|megatron bridge", "megatron-core", "Megatron-Bridge (Megatron-Core + TE)"),
    (r"torchtitan", "torchtitan", "torchtitan"),
    (r"llm-foundry|llmfoundry|mosaicml|composer", "llm-foundry", "MosaicML llm-foundry / Composer FSDP"),
    (r"\baccelerate\b", "accelerate", "Hugging Face accelerate"),
)


def _nemo_container(text: str) -> tuple[int, int] | None:
    """(year, month) of a 'NeMo 25.02' / '26.06 NeMo container' statement."""
    m = re.search(r"nemo(?: framework)?[^\d]{0,40}?(\d{2})\.(\d{2})", text) or \
        re.search(r"(\d{2})\.(\d{2})\s+nemo", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


# Benchmark-mode settings of NVIDIA's published performance tables, applied on top of the runtime's
# recipe defaults: Megatron-Bridge `perf_recipes/_common.py` `_benchmark_common` / `_perf_precision`
# and NeMo 2.0 `scripts/performance` reduce gradients in BF16 (grad_reduce_in_fp32 = False).
PERF_TABLE = (r"performance summary|performance-summary|perf(?:ormance)? recipes?", {"grad_reduce_bytes": 2},
              "a performance-benchmark table: the perf recipes reduce gradients in BF16 (grad_reduce_in_fp32=False)")


# NeMo AutoModel's benchmark configs route with `fake_balanced_gate`: uniform round-robin over
# consecutive experts, no router GEMM (nemo_automodel/components/moe/layers.py) — a token's experts
# sit on one or two neighbouring ranks, so it crosses to at most one other NVLink domain
AUTOMODEL_TABLE = (r"performance summary|performance-summary|benchmark", {"expert_span": 1},
                   "NeMo AutoModel benchmark configs: fake balanced gate (a token's experts are consecutive)")


# NeMo AutoModel's performance summary: its custom-MoE rows (the "DeepEP" kernel column) were published
# by PR #562 (89e3a9fdd, 2025-10-06) and not re-measured, so they ran the October 2025 MoE parallelizer
# (runtimes/nemo-automodel-2025.toml); rows naming a 26.xx release ran later code
AUTOMODEL_2025 = (r"performance[- ]summary", r"deepep", r"\(2[6-9]\.\d\d\)")


# Megatron-Bridge containers whose stack differs from today's runtime file in a way the tables show:
# (container named in the record's source, runtime, why)
BRIDGE_CONTAINERS = (
    (r"\b26\.06\.01\b", "megatron-core-26.06.01",
     "NeMo 26.06.01 container (Megatron-Bridge 0.5.1): cudnn-frontend's dGLU-dbias kernel regression, #256"),
)


def bridge_container(text: str) -> tuple[str, str]:
    """(runtime, why) for a Megatron-Bridge record: the container its source names, when that
    container's stack has a runtime file of its own (BRIDGE_CONTAINERS), else today's."""
    for pat, name, why in BRIDGE_CONTAINERS:
        if re.search(pat, text):
            return name, why
    return "megatron-core", "Megatron-Bridge (Megatron-Core + TE)"


def automodel_era(text: str) -> tuple[str, str]:
    """(runtime, why) for a NeMo AutoModel record: its performance summary's MoE rows → the Oct 2025
    stack, everything else → today's."""
    table, kern, later = AUTOMODEL_2025
    if re.search(table, text) and re.search(kern, text) and not re.search(later, text):
        return ("nemo-automodel-2025", "NeMo AutoModel performance summary, MoE row (DeepEP): published by "
                "PR #562 (2025-10-06), the Oct 2025 MoE parallelizer (FSDP2 on the inner model only)")
    return "nemo-automodel", "NeMo AutoModel (PyTorch FSDP2 + TE + DeepEP)"


def benchmark_overrides(text: str, runtime: str) -> tuple[dict, dict, str]:
    """(TrainingSpec overrides, runtime [comm] overrides, why) the record's source implies for its
    runtime: the benchmark-mode settings of NVIDIA's published tables."""
    pat, over, why = PERF_TABLE
    if runtime.startswith("megatron-core") and re.search(pat, text):
        return dict(over), {}, why
    pat, comm, why = AUTOMODEL_TABLE
    if runtime.startswith("nemo-automodel") and re.search(pat, text):
        return {}, dict(comm), why
    return {}, {}, ""


# torchtitan #2259 (2026-01-27, first in v0.2.2) passed enable_gqa to SDPA where the Llama code had
# expanded K/V with repeat_kv: a run cited from 2025 or before ran the repeat_kv code
TORCHTITAN_GQA_YEAR = 2026


def torchtitan_era(text: str, year: int | None) -> tuple[str, str]:
    """(runtime, why) for a torchtitan record: compiled or eager (the source says torch.compile), and
    the model code of its year (torchtitan-2025 / torchtitan-compile-2025 before #2259)."""
    compiled = bool(re.search(r"torch\.compile|compile[d]?\b(?! off)", text)) and \
        not re.search(r"no compile|without compile|compile off|eager", text)
    name, why = ("torchtitan-compile", "torchtitan with torch.compile") if compiled else ("torchtitan", "torchtitan")
    if year is not None and year < TORCHTITAN_GQA_YEAR:
        return f"{name}-2025", f"{why}, {year}: repeat_kv before SDPA (before torchtitan #2259, 2026-01)"
    return name, why


def runtime_for_record(text: str, year: int | None, zero: int | None = None, fsdp: bool = False,
                       gpt_style: bool = False) -> tuple[str, str]:
    """(runtime name, why) for a record's lower-cased text, citation year, ZeRO stage, FSDP flag
    and whether its model is a GPT-style (Megatron-era) shape."""
    for pat, name, why in _NAMED:
        if re.search(pat, text):
            if name == "nemo-automodel":
                return automodel_era(text)
            if name == "megatron-core":
                return bridge_container(text)
            if name == "torchtitan":
                return torchtitan_era(text, year)
            return name, why
    nemo = _nemo_container(text) if "nemo" in text else None
    if nemo:
        yy, mm = nemo
        if (yy, mm) < (25, 7):
            return "megatron-core-0.11", f"NeMo {yy:02d}.{mm:02d} container (Megatron-Core 0.11 + TE 2.0)"
        return "megatron-core", f"NeMo {yy:02d}.{mm:02d} container (Megatron-Core + TE)"
    if "nemo" in text:
        return "megatron-core", "NeMo (Megatron-Core + TE)"
    # ZeRO-2/3 outside FSDP, or any ZeRO stage before Megatron-LM had a distributed optimizer (2022),
    # is DeepSpeed's ZeRO (Megatron-DeepSpeed when the source is a Megatron paper)
    z = zero or 0
    if not fsdp and ("deepspeed" in text and z >= 1 or z >= 2 or (z >= 1 and year is not None and year <= 2021)):
        if year is not None and year <= 2021:
            return "deepspeed-2021", f"DeepSpeed ZeRO run from {year}"
        return "deepspeed", "DeepSpeed ZeRO"
    if fsdp:
        if year is not None and year >= 2025:
            return "torchtitan", f"PyTorch FSDP run from {year} (FSDP2, eager)"
        return "llm-foundry", "PyTorch FSDP (FSDP1)"
    if "megatron" in text or (gpt_style and year is not None and year <= 2022):
        how = "" if "megatron" in text else f"framework not named: GPT-style run from {year} → "
        if year is not None and year <= 2021:
            return "megatron-lm-2021", how + f"Megatron-LM {year}"
        if year is not None and year <= 2022:
            return "megatron-lm-2022", how + f"Megatron-LM {year}"
        return "megatron-core", how + "Megatron-Core"
    return "megatron-core", "framework not stated → the default runtime (Megatron-Core + TE)"
