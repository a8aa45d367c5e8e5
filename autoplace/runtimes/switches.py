"""Runtime switches: what a run turns on over its stack's file, each with every key it implies.

A training stack's file (`autoplace/runtimes/<name>.toml`) holds its recipe defaults; a run changes a
few of them — CUDA graphs, the MoE token dispatcher, FP8 attention. A *switch* is one such choice
written once here with all the physics it implies, so that `--runtime-set` on the CLI, the record
mapping (a published run's workload knobs) and the exporters (the launcher flags) read the same
fact:

  moe_dispatch  alltoall | allgather | deepep | hybridep
                deepep / hybridep (Megatron `--moe-token-dispatcher-type flex` with backend deepep /
                hybridep; torchtitan `expert_parallel_comm_backend = "deepep"`) write and read the
                expert-ordered buffers themselves (no permute passes) and send a token once per
                remote node (DeepEP `get_dispatch_layout`), holding SMs while they overlap compute:
                DeepEP's normal kernels 24, hybrid-EP 32 (Megatron-Bridge perf recipes).
  cuda_graphs   true | full_iteration | false (also the Megatron `cuda_graph_impl` words: none →
                false, local / transformer_engine → true: per-layer graphs, a dropless MoE's routed
                experts left eager; full_iteration: the whole step captured, experts included)
  fp8_attention true | false (TE `fp8_dot_product_attention`: the attention core in FP8)
  moe_fused_mlp true | false (Megatron-Core ≥ 0.18 `--use-transformer-engine-op-fuser`,
                Megatron-Bridge `use_transformer_engine_op_fuser` / `cutedsl_fused_grouped_mlp`:
                TE's fused grouped MLP adds the expert biases and applies a clamped GLU inside its
                own kernels, so the eager bias and clamp passes go, with expert TP 1)

Any other setting is a raw `section.key=value` over the runtime's exact keys (`kernels.
membound_kernels=10`), type-checked like the file itself. Each applied setting is kept in
`RuntimeSpec.overrides`, so a plan file written under it reproduces it.
"""

from __future__ import annotations

import sys
from dataclasses import fields, replace

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from autoplace.errors import InputError

# switch → value → {"section.key": value} it implies (the dataclass defaults for the plain paths)
_PLAIN = {"kernels.moe_permute_passes": 4.0, "comm.a2a_node_dedup": False, "comm.ep_comm_sms": 0}
_DEEPEP = {"kernels.moe_permute_passes": 0.0, "comm.a2a_node_dedup": True}
SWITCHES: dict[str, dict] = {
    "moe_dispatch": {
        "alltoall": {"kernels.moe_dispatch": "alltoall", **_PLAIN},
        "allgather": {"kernels.moe_dispatch": "allgather", **_PLAIN},
        "deepep": {"kernels.moe_dispatch": "deepep", **_DEEPEP, "comm.ep_comm_sms": 24},
        "hybridep": {"kernels.moe_dispatch": "hybridep", **_DEEPEP, "comm.ep_comm_sms": 32},
    },
    "cuda_graphs": {True: {"kernels.cuda_graphs": True, "kernels.cuda_graph_experts": False},
                    "full_iteration": {"kernels.cuda_graphs": True, "kernels.cuda_graph_experts": True},
                    False: {"kernels.cuda_graphs": False, "kernels.cuda_graph_experts": False}},
    "fp8_attention": {True: {"kernels.fp8_attention": True}, False: {"kernels.fp8_attention": False}},
    "moe_fused_mlp": {True: {"kernels.moe_fused_mlp": True}, False: {"kernels.moe_fused_mlp": False}},
}
_GRAPH_WORDS = {"none": False, "false": False, "off": False, "local": True, "transformer_engine": True,
                "full_iteration": "full_iteration", "true": True, "on": True}


def parse_setting(text: str) -> tuple[str, object]:
    """'key=value' → (key, value); the value read as a TOML literal when it is one, else a string."""
    key, sep, raw = str(text).partition("=")
    key, raw = key.strip(), raw.strip()
    if not sep or not key or not raw:
        raise InputError(f"--runtime-set '{text}': write KEY=VALUE, e.g. cuda_graphs=true, "
                         "moe_dispatch=hybridep or kernels.membound_kernels=10")
    try:
        val = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        val = raw
    return key, val


def _switch_value(name: str, val):
    table = SWITCHES[name]
    if name == "cuda_graphs" and isinstance(val, str):
        if val.lower() not in _GRAPH_WORDS:
            raise InputError(f"--runtime-set cuda_graphs={val}: give true, false or a cuda_graph_impl "
                             f"({', '.join(k for k in _GRAPH_WORDS if '_' in k or k in ('none', 'local'))})")
        val = _GRAPH_WORDS[val.lower()]
    if isinstance(val, str):
        val = val.lower()
    if val not in table:
        raise InputError(f"--runtime-set {name}={val}: choose one of "
                         f"{', '.join(str(k).lower() for k in table)}")
    return val


def apply_settings(rt, settings):
    """`rt` with `settings` applied in order: 'key=value' strings or (key, value) pairs, each a
    switch (SWITCHES) or a raw 'section.key'. Returns a new RuntimeSpec (validated), the settings
    appended to its `overrides`; an unknown key or a bad value is a one-line InputError."""
    from autoplace.runtimes import _coerce
    from autoplace.runtimes.check import validate_runtime
    from autoplace.runtimes.spec import SECTIONS
    items = [parse_setting(s) if isinstance(s, str) else tuple(s) for s in (settings or ())]
    if not items:
        return rt
    out = rt
    for key, val in items:
        if key in SWITCHES:
            val = _switch_value(key, val)
            implied = SWITCHES[key][val]
        elif "." in key:
            implied = {key: val}
        else:
            raise InputError(f"--runtime-set: unknown key '{key}'; switches: {', '.join(SWITCHES)}; "
                             f"or a section.key of [{'], ['.join(SECTIONS)}] (e.g. kernels.membound_kernels)")
        for dotted, v in implied.items():
            sec, _, name = dotted.partition(".")
            if sec not in SECTIONS:
                raise InputError(f"--runtime-set {dotted}: unknown section '{sec}'; valid: {', '.join(SECTIONS)}")
            valid = {f.name: f for f in fields(SECTIONS[sec])}
            if name not in valid:
                raise InputError(f"--runtime-set {dotted}: unknown [{sec}] key '{name}'; valid: {', '.join(valid)}")
            v = _coerce("--runtime-set", sec, valid[name], v)
            out = replace(out, **{sec: replace(getattr(out, sec), **{name: v})})
        out = replace(out, overrides=out.overrides + ((key, val),))
    validate_runtime(out)
    return out


def settings_text(rt) -> list[str]:
    """The overrides of `rt` as 'key=value' strings (what `--runtime-set` takes back)."""
    def show(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        return str(v)
    return [f"{k}={show(v)}" for k, v in getattr(rt, "overrides", ())]
