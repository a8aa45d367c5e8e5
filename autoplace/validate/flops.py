"""FLOP conventions of published training runs (validation README §4), computed from the model shape.

A published TFLOP/s, MFU or HFU number is "FLOPs under the source's own formula ÷ measured time".
To compare a *predicted* step time with it, the harness evaluates the same formula on the record's
model shape and divides by the predicted time — never by autoplace's own FLOP count, which counts
differently (causal masking, norms, logits).

Formulas are per optimizer step (B = global batch in sequences):

  narayanan_eq3      96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h))          (counts the recompute forward)
  korthikanti_model  72·B·L·s·h²·(1 + s/(6h) + V/(12·h·L))          (model FLOPs, no recompute)
  korthikanti_hfu    selective: 72·B·L·s·h²·(1 + s/(3h) + V/(12hL)); full: Eq. 3; none: model
  megatron_core      12·B·s·L·h²·[(1 + G/H + s/h)·q/h + (f/h)·k·(1.5 if gated) + V/(2Lh)]
  six_n              B·(6·N·s + 12·L·d·s²)          (llm-foundry / PaLM-style; N = reported params)
  six_n_hfu          ×4/3 of six_n when activation checkpointing is on (llm-foundry HFU)
  megatron_bridge    Megatron-Bridge flop_utils (26.x): every GEMM of the active weights and the logits
                     ×6, causal attention core at s/2 keys per query (w − w(w−1)/(2s) on windowed
                     layers), MLA / MoE / MTP terms, no router — from the model spec itself
                     (autoplace.cost.compute.model_flops_per_step(causal=True, router=False)), since
                     MoE and MLA shapes do not fit the dense Shape above
  nemo_2502          NeMo 2.0 flops_formulas (25.02 container): the same GEMM terms with the full s²
                     attention square and the router GEMM (model_flops_per_step(causal=False,
                     router=True)); reproduces the dense and Mixtral-8x7B rows' TFLOP/s ÷ tokens/s to 0.03 %
  automodel          NeMo AutoModel "Model TFLOPs/sec/GPU": causal attention, no router, as
                     Megatron-Bridge (Qwen3-30B, Kimi-K2 and Llama-3-70B rows to 0.03 %)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Shape:
    """The quantities the conventions read (from the record's model fields)."""
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn_hidden: int
    vocab: int
    seq_len: int
    gated_mlp: bool = False
    q_width: int | None = None           # heads · head_dim (None → hidden)
    params: float | None = None          # N for the 6N family (reported parameter count)
    top_k: int = 1


def narayanan_eq3(sh: Shape, B: float) -> float:
    l, h, s, V = sh.layers, sh.hidden, sh.seq_len, sh.vocab
    return 96.0 * B * s * l * h * h * (1.0 + s / (6.0 * h) + V / (16.0 * l * h))


def korthikanti_model(sh: Shape, B: float) -> float:
    L, h, s, V = sh.layers, sh.hidden, sh.seq_len, sh.vocab
    return 72.0 * B * L * s * h * h * (1.0 + s / (6.0 * h) + V / (12.0 * h * L))


def korthikanti_hfu(sh: Shape, B: float, recompute: str = "selective") -> float:
    """Hardware FLOPs as Korthikanti et al. count them, by the run's recompute mode."""
    L, h, s, V = sh.layers, sh.hidden, sh.seq_len, sh.vocab
    if recompute == "selective":
        return 72.0 * B * L * s * h * h * (1.0 + s / (3.0 * h) + V / (12.0 * h * L))
    if recompute == "full":
        return narayanan_eq3(sh, B)
    return korthikanti_model(sh, B)


def megatron_core(sh: Shape, B: float) -> float:
    L, h, s, V = sh.layers, sh.hidden, sh.seq_len, sh.vocab
    q = sh.q_width or h
    gated = 1.5 if sh.gated_mlp else 1.0
    return 12.0 * B * s * L * h * h * ((1.0 + sh.kv_heads / sh.heads + s / h) * q / h
                                       + sh.ffn_hidden / h * sh.top_k * gated + V / (2.0 * L * h))


def six_n(sh: Shape, B: float) -> float:
    if sh.params is None:
        raise ValueError("the 6N convention needs a parameter count")
    s = sh.seq_len
    return B * (6.0 * sh.params * s + 12.0 * sh.layers * sh.hidden * s * s)


def six_n_hfu(sh: Shape, B: float, recompute: str = "full") -> float:
    """llm-foundry HFU: factor 4 instead of 3 when activation checkpointing is on."""
    f = six_n(sh, B)
    return f * 4.0 / 3.0 if recompute in ("full", "selective") else f


@dataclass(frozen=True)
class Convention:
    name: str
    label: str
    fn: Callable                      # (Shape, B[, recompute]) -> FLOPs per step
    takes_recompute: bool = False
    from_model: dict | None = None    # keyword arguments of model_flops_per_step: counted on the model spec

    def flops(self, sh: Shape, B: float, recompute: str = "none") -> float:
        return self.fn(sh, B, recompute) if self.takes_recompute else self.fn(sh, B)


CONVENTIONS = {
    "narayanan_eq3": Convention("narayanan_eq3", "Narayanan Eq. 3 (counts recompute)", narayanan_eq3),
    "korthikanti_model": Convention("korthikanti_model", "Korthikanti model FLOPs", korthikanti_model),
    "korthikanti_hfu": Convention("korthikanti_hfu", "Korthikanti hardware FLOPs", korthikanti_hfu, True),
    "megatron_core": Convention("megatron_core", "Megatron-Core num_floating_point_operations",
                                megatron_core),
    "six_n": Convention("six_n", "6N·s + 12·L·d·s² per sequence", six_n),
    "six_n_hfu": Convention("six_n_hfu", "6N-style HFU (×4/3 with activation checkpointing)", six_n_hfu, True),
    "megatron_bridge": Convention("megatron_bridge", "Megatron-Bridge flop_utils (causal attention, no router)",
                                  None, from_model={"causal": True, "router": False}),
    "nemo_2502": Convention("nemo_2502", "NeMo 2.0 flops_formulas (full attention square, router counted)",
                            None, from_model={"causal": False, "router": True}),
    "automodel": Convention("automodel", "NeMo AutoModel model FLOPs (causal attention, no router)",
                            None, from_model={"causal": True, "router": False}),
}


def _squash(text: str) -> str:
    return re.sub(r"[\s·×]+", "", text.lower()).replace("**", "^")


def detect(definition: str | None, metric: str) -> Convention | None:
    """The convention a `*_definition` string describes for `metric` (tflops_per_gpu, mfu, hfu, ...).

    None when the text names no convention we know (the caller then reports that it fell back).
    """
    if not definition:
        return None
    t = _squash(definition)
    hfu = metric == "hfu"
    if ("72*b*l*s*h^2" in t or "72blsh^2" in t or "72*b*l*s*h" in t or "72blsh" in t):
        return CONVENTIONS["korthikanti_hfu" if hfu else "korthikanti_model"]
    if ("96*b*s*l*h^2" in t or "96bslh" in t or "eq.(3)" in t or "eq.3" in t or "eq(3)" in t):
        return CONVENTIONS["narayanan_eq3"]
    if "3*2*n*seq" in t or "2*n*seq" in t or re.search(r"(?<![\d.])6\*?n(?![a-z])", t):
        return CONVENTIONS["six_n_hfu" if hfu else "six_n"]
    if "megatron-bridge" in t:
        return CONVENTIONS["megatron_bridge"]
    if "automodel" in t:
        return CONVENTIONS["automodel"]
    if t.startswith("nemo'modeltflop") or t.startswith("nemo\"modeltflop"):
        return CONVENTIONS["nemo_2502"]
    if "num_floating_point_operations" in t or "12*b*s*l*h^2" in t:
        return CONVENTIONS["megatron_core"]
    return None


def definition_for(measured: dict, metric: str) -> str | None:
    """The definition string that applies to `metric`: its own `<metric>_definition`, else the
    record's tflops/mfu definition (which name the FLOP formula all throughput metrics share)."""
    base = metric.replace("_approx", "").replace("_lower_bound", "")
    for key in (f"{base}_definition", f"{base.split('_')[0]}_definition"):
        if isinstance(measured.get(key), str):
            return measured[key]
    order = ("tflops_definition", "mfu_definition", "hfu_definition", "flops_definition")
    if base in ("mfu", "hfu"):
        order = ("mfu_definition", "hfu_definition", "tflops_definition", "flops_definition")
    for key in order:
        if isinstance(measured.get(key), str):
            return measured[key]
    for k, v in measured.items():
        if k.endswith("_definition") and isinstance(v, str):
            return v
    return None
