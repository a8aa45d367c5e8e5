"""torchtitan 0.2.x: the TOML job file and the equivalent `--section.option` overrides.

Files: ``torchtitan_job.toml`` (load with ``--job.config_file``), ``torchtitan_overrides.txt`` (the
same settings as ``--section.option value`` lines, which also work with torchtitan ≥ 0.3 for the
parallelism keys), ``torchtitan_launch.sh`` and, for a model shape that is not one of torchtitan's
llama3 flavors, ``autoplace_torchtitan_flavor.py`` (registers it; imported through
``--experimental.custom_import``).

Version gate: TOML job files exist only up to torchtitan v0.2.2 (2026-02-20). From PR #2386
(2026-02-23, released as 0.3.0) configs are Python functions (``--module … --config …``) and
batch sizes became token counts, so for ≥ 0.3 port these values into a config function; the
overrides file is the part that carries over. Keys follow ``torchtitan/config/job_config.py`` @
v0.2.2; the checks torchtitan runs at start-up (ParallelDims._validate, Trainer batch checks,
pipeline stage split, seq_len divisor) are pre-checked here:

* world = dp_replicate · dp_shard · cp · tp · pp; FSDP2 is applied whenever dp_shard > 1 or cp > 1
  (torchtitan shards over the joint dp_shard × cp mesh); DDP only for pure data parallelism;
* there is no ZeRO-1/2: dense state is either replicated (DDP) or fully sharded (FSDP2);
* TP always applies sequence parallelism in 0.2.x (no switch);
* EP borrows ranks from dp_shard·cp·tp: (dp_shard·cp·tp) % (etp·ep) == 0, ETP ∈ {1, tp};
* pipeline: stages = ceil((L + first_less + last_less) / layers_per_stage); this emitter sets the
  less-layers weights to 0 so every (virtual) stage holds exactly L/(pp·v) layers as the plan does;
  with pp > 1 the whole per-rank batch B/dp is one pipeline step of m micro-batches of size mbs
  (local_batch_size = B/dp, pipeline_parallel_microbatch_size = mbs, no gradient accumulation);
* torch's Interleaved1F1B fixes the micro-batch group size: rounds = max(1, m // pp) and
  G = m / rounds (m must be a multiple of rounds);
* seq_len % (tp · 2 · cp) == 0 (ParallelDims.seq_len_divisor).
"""

from __future__ import annotations

import numpy as np

from autoplace import safe
from autoplace.export.common import ExportJob, as_job, header_lines, recompute_per_stage, virtual_chunks, zero_level
from autoplace.export.launcher import Launcher, _a, lps, recompute_kind, rule, train_is

NAME = "torchtitan"
FILES = ("torchtitan_job.toml", "torchtitan_overrides.txt", "torchtitan_launch.sh",
         "autoplace_torchtitan_flavor.py", "autoplace_torchtitan_job.py")
JOB_MODULE = "autoplace_torchtitan_job"      # torchtitan ≥ 0.3: --module autoplace_torchtitan_job --config autoplace_job
VERSION = "0.2.2"
FLAVOR_MODULE = "autoplace_torchtitan_flavor"
_SCHEDULES = {"1f1b": "1F1B", "gpipe": "GPipe", "interleaved": "Interleaved1F1B"}

# torchtitan 0.2.2 torchtitan/models/llama3/__init__.py llama3_args (the published shapes)
_LLAMA3_FLAVORS = {
    "8B": dict(dim=4096, n_layers=32, n_heads=32, n_kv_heads=8, ffn_dim_multiplier=1.3, multiple_of=1024,
               vocab_size=128256),
    "70B": dict(dim=8192, n_layers=80, n_heads=64, n_kv_heads=8, ffn_dim_multiplier=1.3, multiple_of=4096,
                vocab_size=128256),
    "405B": dict(dim=16384, n_layers=126, n_heads=128, n_kv_heads=8, ffn_dim_multiplier=1.2,
                 multiple_of=4096, vocab_size=128256),
}


def interleaved_group(m: int, pp: int) -> tuple[int, bool]:
    """(G, ok): torch's ScheduleInterleaved1F1B micro-batches per round for m micro-batches."""
    rounds = max(1, m // pp)
    return m // rounds, m % rounds == 0


def _tt_shard_degree(plan) -> int:
    """torchtitan's data_parallel_shard_degree for the plan: the FSDP group under zero=3, else 1 (DDP)."""
    zero, _ = zero_level(plan)
    return plan.dp_shard if zero == 3 else 1


def _shard(p):
    """torchtitan's data_parallel_shard_degree (vectorized): the FSDP group under zero=3, else 1."""
    return np.where(_a(p.zero) == 3, _a(p.dp_shard), 1)


def _fsdp(p):
    return (_a(p.dp_shard) > 1) | (_a(p.cp) > 1)


def _rules() -> tuple:
    """torchtitan's format rules (capabilities: runtimes/torchtitan*.toml, incl. the Interleaved1F1B rounds)."""
    R = lambda rid, title, v, m: rule(NAME, rid, title, v, m)  # noqa: E731
    return (
        R("shape", "a model shape to build",
          lambda c, p: _a(not c.shaped),
          lambda c, p: "a parameter-count-only model (--params) has no shape to build a torchtitan model"),
        R("shard-nothing", "FSDP needs a shard dimension",
          lambda c, p: (_a(p.zero) == 3) & (_a(p.dp_replicate) > 1) & (_a(p.dp_shard) == 1) & (_a(p.cp) == 1),
          lambda c, p: f"zero=3 with dp_replicate={p.dp_replicate} and dp_shard=1 shards nothing: torchtitan "
                       "would run DDP; set dp_replicate=1"),
        R("ep-dispatch", "the token dispatch torchtitan runs: all-to-all or DeepEP",
          lambda c, p: (_a(p.ep) > 1) & _a(train_is(c, lambda t: LAUNCHER.runtime_for(t).kernels.moe_dispatch
                                                     not in ("alltoall", "deepep"))),
          lambda c, p: f"moe_dispatch={LAUNCHER.runtime_for(c.train).kernels.moe_dispatch}: torchtitan's "
                       "expert_parallel_comm_backend is 'standard' (all-to-all) or 'deepep'"),
        R("ep-overlap", "EP all-to-all overlap only under DualPipeV",
          lambda c, p: _a(getattr(p, "ep_overlap", False)).astype(bool),
          lambda c, p: "ep_overlap: torchtitan overlaps the EP all-to-all only inside its DualPipeV schedule "
                       "(pipeline_parallel_expert_parallel_overlap), which autoplace does not plan; drop ep_overlap"),
        R("ep-carve", "EP is carved out of dp_shard·cp·tp",
          lambda c, p: (_a(p.ep) > 1) & ((_shard(p) * _a(p.cp) * _a(p.tp)) % (_a(p.t_exp) * _a(p.ep)) != 0),
          lambda c, p: f"ep={p.ep}, etp={p.t_exp}: torchtitan carves EP out of dp_shard·cp·tp = "
                       f"{int(_shard(p))}·{p.cp}·{p.tp}, which etp·ep does not divide"
                       + (" (zero<3 runs as DDP: dp_shard = 1; use zero=3)" if p.zero < 3 else "")),
        R("offload-fsdp", "CPU offload needs FSDP",
          lambda c, p: (_a(p.off) == 3) & ~((_a(p.zero) == 3) & _fsdp(p)),
          lambda c, p: "offload=params needs FSDP (zero=3 with dp_shard > 1 or cp > 1) in torchtitan"),
        R("reduce-fp32", "FSDP reduces gradients in float32",
          lambda c, p: _a(train_is(c, lambda t: t.grad_reduce_bytes == 2)) & _fsdp(p),
          lambda c, p: "grad_reduce_bytes=2: torchtitan reduces FSDP gradients in float32 only "
                       "(training.mixed_precision_reduce)"),
        R("seq-divisor", "seq_len divisible by tp·2·cp",
          lambda c, p: (_a(p.cp) > 1) & _a(c.train is not None)
          & ((c.train.seq_len if c.train is not None else 0) % (_a(p.tp) * 2 * _a(p.cp)) != 0),
          lambda c, p: f"seq_len={c.train.seq_len} is not divisible by tp·2·cp = {p.tp * 2 * p.cp} "
                       "(torchtitan's seq_len divisor)"),
        R("stages", "layers divisible by pp·vpp",
          lambda c, p: _a(c.shaped and not getattr(p, "layer_split", ())) & (_a(p.pp) > 1)
          & ((c.model.layers if c.shaped else 0) % (_a(p.pp) * _a(p.v)) != 0),
          lambda c, p: f"layers={c.model.layers} not divisible by pp·vpp = {p.pp * p.v}"),
        R("block-period", "layer SAC checkpoints every N-th layer",
          lambda c, p: _block_bad(c, p),
          lambda c, p: f"block recompute of {p.recompute_layers} layers per stage: torchtitan's layer-SAC checkpoints "
                       "every N-th layer, so the count must divide the layers per stage"
                       + ("" if not p.layer_split else " (uneven stages have no single count)")),
    )


def _block_bad(c, p):
    kind, k = recompute_kind(c, p)
    n = lps(c, p)
    return (kind == 3) & ((n >= (1 << 30)) | (n % np.maximum(k, 1) != 0))


class Torchtitan(Launcher):
    name = NAME
    files = FILES
    runtime = "torchtitan"

    def format_rules(self):
        return _rules()

    def notes(self, job):
        return notes(job)

    def write(self, job):
        return _write(job)


LAUNCHER = Torchtitan()


def supports(plan, model, train=None, world=None, hw=None) -> list[str]:
    return LAUNCHER.supports(plan, model, train, world, hw)


def emit(doc_or_job) -> dict[str, str]:
    return LAUNCHER.emit(doc_or_job)


def notes(job) -> list[str]:
    job = as_job(job)
    out = []
    rc = recompute_per_stage(job)
    if rc.kind == "selective":
        out.append("recompute=selective maps to torchtitan's per-op SAC (selective_ac_option='op'), which "
                   "also saves matmul outputs and recomputes the cheap element-wise ops")
    if job.shaped and job.model.is_moe and _moe_spec(job.model, job.train):
        name, flavor = _moe_spec(job.model, job.train)
        out.append(f"{safe.one_line(job.model.name)} runs as torchtitan's registered MoE model '{name}' flavor '{flavor}'")
    elif job.shaped and _family(job.model) != "llama3":
        out.append(f"{safe.one_line(job.model.name)} is not a Llama-style dense model; [model] name is a placeholder — "
                   "register your model with torchtitan and set it")
    elif job.shaped and _flavor(job.model) is None:
        out.append(f"{safe.one_line(job.model.name)} is not a built-in llama3 flavor; {FLAVOR_MODULE}.py registers it "
                   "(--experimental.custom_import)")
    if job.shaped:
        why = v03_refusal(job)
        out.append(f"{JOB_MODULE}.py (torchtitan 0.3) not written: {why}; run the 0.2.2 TOML" if why else
                   f"{JOB_MODULE}.py is the torchtitan 0.3 job module (--module {JOB_MODULE} --config autoplace_job)")
    if not job.plan.dp_overlap:
        out.append("FSDP2 always overlaps its collectives (prefetch); dp_overlap=False is ignored")
    if not job.plan.bwd_prefetch:
        out.append("FSDP2 always prefetches backward all-gathers; bwd_prefetch=False is ignored")
    return out


# ---- model ---------------------------------------------------------------------------------------
def _moe_spec(m, train=None) -> tuple[str, str] | None:
    """(TrainSpec name, flavor) torchtitan registers for this MoE model (the runtime's
    supports.moe_specs), None when it registers none."""
    from autoplace.runtimes.check import moe_spec
    rt = LAUNCHER.runtime_for(train)
    return moe_spec(rt.supports, m) if rt is not None else None


def _family(m) -> str:
    if m.is_moe and not m.states_only:
        spec = _moe_spec(m)
        return spec[0] if spec else "custom_moe"
    llama = (m.norm == "rmsnorm" and m.position == "rope" and m.gated_mlp and not m.attn_bias
             and not m.mlp_bias and not m.tied_embeddings and not m.is_moe
             and not m.qkv_bias and not m.qk_norm
             and (m.head_dim is None or m.head_dim == m.hidden // m.heads))
    return "llama3" if llama else ("custom_moe" if m.is_moe else "custom")


def ffn_hidden(dim: int, multiple_of: int, mult: float | None) -> int:
    """torchtitan llama3 FeedForward width for TransformerModelArgs(dim, multiple_of, ffn_dim_multiplier)."""
    h = int(2 * (4 * dim) / 3)
    if mult is not None:
        h = int(mult * h)
    return multiple_of * ((h + multiple_of - 1) // multiple_of)


def flavor_args(m) -> dict | None:
    """TransformerModelArgs keywords reproducing the model's FFN width exactly (None if impossible)."""
    base = dict(dim=m.hidden, n_layers=m.layers, n_heads=m.heads, n_kv_heads=m.a_kv, vocab_size=m.vocab)
    for mo in (256, 1024, 4096, 128, 64, 512, 2048):
        if ffn_hidden(m.hidden, mo, None) == m.ffn_hidden:
            return {**base, "multiple_of": mo, "ffn_dim_multiplier": None}
    h0 = int(2 * (4 * m.hidden) / 3)
    for mo in (256, 1024, 4096, 128, 64, 1):
        for mult in (round(m.ffn_hidden / h0, 6), round(m.ffn_hidden / h0, 4), round(m.ffn_hidden / h0, 2)):
            if ffn_hidden(m.hidden, mo, mult) == m.ffn_hidden:
                return {**base, "multiple_of": mo, "ffn_dim_multiplier": mult}
    return None


def _flavor(m) -> str | None:
    for name, a in _LLAMA3_FLAVORS.items():
        if (a["dim"], a["n_layers"], a["n_heads"], a["n_kv_heads"], a["vocab_size"]) == \
                (m.hidden, m.layers, m.heads, m.a_kv, m.vocab) and \
                ffn_hidden(a["dim"], a["multiple_of"], a["ffn_dim_multiplier"]) == m.ffn_hidden:
            return name
    return None


# ---- config --------------------------------------------------------------------------------------
def job_config(job: ExportJob) -> dict:
    """The TOML tables as a dict (section → key → value), torchtitan 0.2.2 schema."""
    plan, m, t = job.plan, job.model, job.train
    zero, hold = zero_level(plan)
    family = _family(m)
    flavor = _flavor(m) if family == "llama3" else None
    if m.is_moe and not m.states_only:
        spec = _moe_spec(m, t)
        family, flavor = spec if spec else (family, None)
    model = {"name": family if family != "llama3" else "llama3",
             "flavor": flavor or ("autoplace" if family == "llama3" else safe.slug(m.name, "autoplace")),
             "hf_assets_path": "./assets/hf/tokenizer"}
    if t.precision == "fp8":
        model["converters"] = ["quantize.linear.float8"]
    if plan.pp > 1:
        local = t.global_batch // plan.dp
    else:
        local = plan.mbs
    training = {"local_batch_size": local, "global_batch_size": t.global_batch, "seq_len": t.seq_len,
                "max_norm": 1.0, "steps": 1000, "dataset": "c4",
                "mixed_precision_param": "float32" if t.precision == "fp32" else "bfloat16",
                "mixed_precision_reduce": "float32",
                "enable_cpu_offload": plan.off == 3}
    par = {"data_parallel_replicate_degree": plan.dp_replicate if zero == 3 else plan.dp,
           "data_parallel_shard_degree": _tt_shard_degree(plan),
           "fsdp_reshard_after_forward": "never" if hold else "always",
           "tensor_parallel_degree": plan.tp,
           "enable_async_tensor_parallel": bool(plan.tp_overlap and plan.tp > 1),
           "pipeline_parallel_degree": plan.pp,
           "context_parallel_degree": plan.cp,
           "expert_parallel_degree": plan.ep,
           "expert_tensor_parallel_degree": plan.t_exp if plan.ep > 1 else 1}
    if plan.ep > 1 and LAUNCHER.runtime_for(t).kernels.moe_dispatch == "deepep":
        par["expert_parallel_comm_backend"] = "deepep"
    if plan.pp > 1:
        par["pipeline_parallel_schedule"] = _SCHEDULES[plan.schedule]
        par["pipeline_parallel_microbatch_size"] = plan.mbs
        chunks = virtual_chunks(plan.layer_split, plan.v) if plan.layer_split else []
        n = max(chunks) if chunks else 0
        if chunks and len(chunks) > 2 and all(c == n for c in chunks[1:-1]):
            # equal middle stages, lighter first/last (Llama 3 405B's 7:8…8:7): the per-stage keys,
            # which the overrides file can carry (a list of lists has no CLI form)
            par["pipeline_parallel_layers_per_stage"] = n
            par["pipeline_parallel_first_stage_less_layers"] = n - chunks[0]
            par["pipeline_parallel_last_stage_less_layers"] = n - chunks[-1]
        elif chunks:
            par["module_fqns_per_model_part"] = _fqns(m.layers, chunks)
        else:
            par["pipeline_parallel_layers_per_stage"] = m.layers // (plan.pp * plan.v)
            par["pipeline_parallel_first_stage_less_layers"] = 0
            par["pipeline_parallel_last_stage_less_layers"] = 0
    rc = recompute_per_stage(job)
    kind, k = rc.kind, rc.layers
    ac = {"mode": {"none": "none", "selective": "selective", "full": "full", "block": "selective"}[kind]}
    if kind == "selective":
        ac["selective_ac_option"] = "op"
    elif kind == "block":
        ac["selective_ac_option"] = str(job.layers_per_stage // k)
    cfg = {"job": {"dump_folder": "./outputs", "description": f"autoplace: {job.describe()}"},
           "model": model, "training": training, "parallelism": par, "activation_checkpoint": ac}
    if family == "llama3" and flavor is None:
        cfg["experimental"] = {"custom_import": FLAVOR_MODULE}
    if (plan.tp_overlap and plan.tp > 1) or LAUNCHER.runtime_for(t).kernels.elementwise == "compiled":
        cfg["compile"] = {"enable": True}          # components default: model, loss
    if t.precision == "fp8":
        fp8 = {"recipe_name": _fp8_recipe(job)}
        if zero == 3 and plan.dp_shard > 1:
            fp8.update({"enable_fsdp_float8_all_gather": True, "precompute_float8_dynamic_scale_for_fsdp": True})
        cfg["quantize"] = {"linear": {"float8": fp8}}
    return cfg


def _fqns(layers: int, split: list[int]) -> list[list[str]]:
    out, i = [], 0
    for s, n in enumerate(split):
        part = ["tok_embeddings"] if s == 0 else []
        part += [f"layers.{j}" for j in range(i, i + n)]
        i += n
        if s == len(split) - 1:
            part += ["norm", "output"]
        out.append(part)
    return out


def overrides(cfg: dict) -> list[str]:
    """`--section.key value` lines equivalent to the TOML (nested-list keys have no CLI form)."""
    lines = []

    def walk(prefix, d):
        for k, v in d.items():
            key = f"{prefix}.{k}" if prefix else k
            if isinstance(v, dict):
                walk(key, v)
            elif isinstance(v, bool):
                head, _, leaf = key.rpartition(".")
                lines.append(f"--{key}" if v else f"--{head}.no-{leaf}")
            elif isinstance(v, list):
                if v and isinstance(v[0], list):
                    lines.append(f"# --{key}: a list of lists has no CLI form; load the TOML")
                else:
                    lines.append(f"--{key} " + " ".join(str(x) for x in v))
            else:
                s = str(v)
                lines.append(f"--{key} {_quote(s)}")
    walk("", cfg)
    return lines


def _quote(s: str) -> str:
    return safe.shell_word(s)


def _write(job: ExportJob) -> dict[str, str]:
    import tomli_w
    cfg = job_config(job)
    head = header_lines(job, f"torchtitan {VERSION} TOML job file")
    head += ["# torchtitan 0.2.x schema (torchtitan/config/job_config.py @ v0.2.2). torchtitan >= 0.3 has no",
             "# TOML job files (configs are Python functions since PR #2386): port these values into a",
             "# config function and pass torchtitan_overrides.txt for the parallelism keys.",
             "# Load: torchrun ... -m torchtitan.train --job.config_file torchtitan_job.toml", ""]
    files = {"torchtitan_job.toml": "\n".join(head) + tomli_w.dumps(cfg)}
    ov = overrides(cfg)
    files["torchtitan_overrides.txt"] = "\n".join(
        header_lines(job, "torchtitan --section.option overrides (same settings as torchtitan_job.toml)")
        + ov) + "\n"
    if "experimental" in cfg:
        args = flavor_args(job.model)
        if args is None:
            files[f"{FLAVOR_MODULE}.py"] = _flavor_module(job, None)
        else:
            files[f"{FLAVOR_MODULE}.py"] = _flavor_module(job, args)
    v03 = job_module_v03(job, cfg)
    if v03 is not None:
        files[f"{JOB_MODULE}.py"] = v03
    launch = ["#!/usr/bin/env bash"] + header_lines(job, "torchtitan launch") + [
        "# Same form as torchtitan's run_train.sh: one torchrun per node, c10d rendezvous.",
        "# Validate the config without GPUs first: COMM_MODE=fake_backend NGPU=... ./run_train.sh (torchtitan)",
        "set -euo pipefail",
        'HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"',
        'export PYTHONPATH="$HERE${PYTHONPATH:+:$PYTHONPATH}"',
        'export PYTORCH_ALLOC_CONF="expandable_segments:True"',
    ]
    if job.nodes == 1:
        launch.append(f'exec torchrun --nproc-per-node {job.nproc_per_node} --rdzv-backend c10d '
                      '--rdzv-endpoint localhost:0 --local-ranks-filter 0 --role rank --tee 3 \\')
    else:
        launch += [f'exec torchrun --nnodes {job.nodes} --nproc-per-node {job.nproc_per_node} --rdzv-backend c10d \\',
                   '    --rdzv-endpoint "${RDZV_ENDPOINT:?set RDZV_ENDPOINT=<head-node>:29500}" '
                   '--rdzv-id "${RDZV_ID:-autoplace}" \\']
    launch.append('    -m torchtitan.train --job.config_file "$HERE/torchtitan_job.toml" "$@"')
    files["torchtitan_launch.sh"] = "\n".join(launch) + "\n"
    return files


def _fp8_recipe(job: ExportJob) -> str:
    rt = LAUNCHER.runtime_for(job.train)
    return job.train.fp8_recipe or (rt.precision.fp8_recipes[0] if rt.precision.fp8_recipes else "rowwise")


def v03_refusal(job: ExportJob) -> str | None:
    """Why torchtitan 0.3 cannot run the plan (one line), None when it can: the runtime file's
    `supports.later_*` keys (0.3's model registries, float8 recipes, EP mesh)."""
    m, p, t = job.model, job.plan, job.train
    s = LAUNCHER.runtime_for(t).supports
    ver = s.later_version or "0.3"
    if m.is_moe and not m.states_only:
        from autoplace.runtimes.check import moe_spec
        if moe_spec(type(s)(moe_specs=s.later_moe_specs), m) is None:
            return (f"torchtitan {ver} registers no MoE model with {m.layers} layers, hidden {m.hidden}, "
                    f"{m.num_experts} experts, top-{m.top_k} ({', '.join(e.split(':')[0] + ' ' + e.split(':')[1] for e in s.later_moe_specs)})")
        if s.later_etp == "1" and p.ep > 1 and p.t_exp != 1:
            return f"torchtitan {ver} has no expert tensor parallelism (EP borrows the TP ranks): etp={p.t_exp}; use etp=1"
        if not s.later_cuda_graphs_moe and LAUNCHER.runtime_for(t).kernels.cuda_graphs:
            return (f"cuda_graphs: torchtitan {ver} captures CUDA graphs around MoE token dispatch only without "
                    "CPU synchronisation (not its all-to-all or DeepEP dispatchers); drop cuda_graphs")
    elif _family(m) != "llama3":
        return f"torchtitan {ver} builds Llama-style dense models only (RMSNorm, RoPE, SwiGLU, no biases, untied)"
    if t.precision == "fp8" and _fp8_recipe(job) not in s.later_fp8_recipes:
        return (f"fp8 recipe {_fp8_recipe(job)}: torchtitan {ver}'s Float8LinearConverter has "
                f"{', '.join(s.later_fp8_recipes)} only (--fp8-recipe rowwise)")
    if t.precision not in ("bf16", "fp8", "fp32"):
        return f"precision {t.precision}: torchtitan {ver} trains in bf16 (FSDP mixed precision) with float8 converters"
    return None


_BLOCK_AC = '''

@dataclass(kw_only=True, slots=True)
class _EveryNthConfig(FullAC.Config):
    every: int = 1
    """recompute the transformer blocks whose index is a multiple of `every` (the rest keep activations)"""


class EveryNthBlockAC(FullAC):
    """autoplace recompute=block: full recompute of every `every`-th transformer block
    (torchtitan 0.2.2's layer SAC, selective_ac_option = every)."""

    Config = _EveryNthConfig

    def _wrap_block(self, module, *, base_fqn=None):
        index = int(str(base_fqn).rsplit(".", 1)[-1]) if base_fqn else 0
        return super()._wrap_block(module, base_fqn=base_fqn) if index % self.config.every == 0 else module


_EveryNthConfig._owner = EveryNthBlockAC
'''


def job_module_v03(job: ExportJob, cfg: dict) -> str | None:
    """torchtitan 0.3 (PR #2386: configs are Python functions returning Trainer.Config): a module whose
    `autoplace_job()` starts from torchtitan's own llama3 8B recipe and sets the model (a built-in
    flavor, a Llama-shaped model built with llama3's own layer builder, or a registered MoE model),
    float8 converters, training, parallelism, activation checkpointing (block recompute as a FullAC
    subclass that wraps every N-th block) and compile. None where `v03_refusal` says 0.3 cannot."""
    if v03_refusal(job) is not None:
        return None
    m, plan, t = job.model, job.plan, job.train
    tr, par = cfg["training"], dict(cfg["parallelism"])
    for k in ("enable_async_tensor_parallel", "expert_tensor_parallel_degree", "expert_parallel_comm_backend"):
        par.pop(k, None)
    if plan.tp > 1 and not plan.sp:
        par["enable_sequence_parallel"] = False
    if "module_fqns_per_model_part" in par:       # 0.3 names the output projection lm_head
        par["module_fqns_per_model_part"] = [["lm_head" if x == "output" else x for x in part]
                                             for part in par["module_fqns_per_model_part"]]
    rc = recompute_per_stage(job)
    comp = bool(cfg.get("compile", {}).get("enable", False))
    imports = ["from torchtitan.config import CompileConfig, ParallelismConfig, TrainingConfig",
               "from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC  # noqa: F401",
               "from torchtitan.models.llama3.config_registry import llama3_8b as _recipe"]
    conv = "None"
    if t.precision == "fp8":
        imports.append("from torchtitan.components.quantization import Float8LinearConverter")
        conv = (f"[Float8LinearConverter.Config(recipe_name={_fp8_recipe(job)!r}, filter_fqns=['lm_head'], "
                f"model_compile_enabled={comp!r})]")
    deepep = plan.ep > 1 and LAUNCHER.runtime_for(t).kernels.moe_dispatch == "deepep"
    if m.is_moe and not m.states_only:
        from autoplace.runtimes.check import moe_spec
        s = LAUNCHER.runtime_for(t).supports
        name, flavor = moe_spec(type(s)(moe_specs=s.later_moe_specs), m)
        imports.append(f"from torchtitan.models.{name} import model_registry")
        spec = (f"model_registry({flavor!r}, moe_comm_backend={'deepep' if deepep else 'standard'!r}, "
                f"converters={conv})")
        body = [f"    config.model_spec = {spec}"]
        origin = f"torchtitan.models.{name} flavor {flavor}"
    elif _flavor(m) is not None:
        imports.append("from torchtitan.models.llama3 import model_registry")
        body = [f"    config.model_spec = model_registry({_flavor(m)!r}, converters={conv})"]
        origin = f"torchtitan.models.llama3 flavor {_flavor(m)}"
    else:
        imports += ["from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm",
                    "from torchtitan.models.llama3 import Llama3Model, _build_llama3_layers, model_registry",
                    "from torchtitan.models.utils import validate_converter_order"]
        hd = m.head_dim or m.hidden // m.heads
        conv_lines = (["    validate_converter_order(converters)",
                       "    for c in converters:",
                       "        model = c.build().convert(model)"] if conv != "None" else [])
        body = ["    spec = model_registry('8B')",
                "    model = Llama3Model.Config(",
                f"        dim={m.hidden}, vocab_size={m.vocab},",
                f"        tok_embeddings=Embedding.Config(num_embeddings={m.vocab}, embedding_dim={m.hidden}),",
                f"        norm=RMSNorm.Config(normalized_shape={m.hidden}),",
                f"        lm_head=Linear.Config(in_features={m.hidden}, out_features={m.vocab}),",
                f"        layers=_build_llama3_layers(n_layers={m.layers}, dim={m.hidden}, n_heads={m.heads}, "
                f"n_kv_heads={m.a_kv}, hidden_dim={m.ffn_hidden},",
                f"                                    rope=ComplexRoPE.Config(dim={hd}, max_seq_len={max(t.seq_len, 4096)}, "
                f"theta={float(m.rope_theta or 10000.0)!r}),",
                "                                    attn_backend='flex'),",
                "    )",
                f"    converters = {conv}" if conv != "None" else "",
                *conv_lines,
                "    spec.flavor, spec.model = 'autoplace', model",
                "    config.model_spec = spec"]
        body = [b for b in body if b]
        origin = "llama3's layer builder (_build_llama3_layers) at the model's shape"
    if rc.kind == "block":
        ac = f"EveryNthBlockAC.Config(every={job.layers_per_stage // rc.layers})"
    else:
        ac = {"none": "None", "selective": "SelectiveAC.Config()", "full": "FullAC.Config()"}[rc.kind]
    train_kw = {k: tr[k] for k in ("local_batch_size", "global_batch_size", "seq_len", "max_norm", "steps",
                                   "enable_cpu_offload", "mixed_precision_param", "mixed_precision_reduce")}
    # the runtime's kernels (runtimes/torchtitan*.toml cuda_graphs = false; 0.3 rejects CUDA graphs with PP)
    train_kw["disable_cuda_graphs"] = not LAUNCHER.runtime_for(t).kernels.cuda_graphs or plan.pp > 1
    fmt = lambda d: ",\n        ".join(f"{k}={v!r}" for k, v in d.items())  # noqa: E731
    lines = ['"""torchtitan 0.3 job config — generated by autoplace (autoplace export).', "",
             *[safe.docstring_text(x.lstrip("# ")) for x in header_lines(job, "plan")],
             "",
             "Run: torchrun ... -m torchtitan.train --module autoplace_torchtitan_job --config autoplace_job",
             "(this folder on PYTHONPATH). Starts from torchtitan's own recipe",
             f"torchtitan.models.llama3.config_registry.llama3_8b; model: {origin}.",
             '"""', "",
             *(["from dataclasses import dataclass", ""] if rc.kind == "block" else []),
             *imports,
             *([_BLOCK_AC] if rc.kind == "block" else [""]), "",
             "def autoplace_job():",
             "    config = _recipe()",
             *body,
             f"    config.training = TrainingConfig(\n        {fmt(train_kw)},\n    )",
             f"    config.parallelism = ParallelismConfig(\n        {fmt(par)},\n    )",
             f"    config.activation_checkpoint = {ac}",
             f"    config.compile = CompileConfig(enable={comp!r}, "
             f"enable_async_tensor_parallel={bool(plan.tp_overlap and plan.tp > 1)!r})",
             "    return config", ""]
    return "\n".join(lines)


def _flavor_module(job: ExportJob, args: dict | None) -> str:
    m = job.model
    lines = ['"""Register the autoplace model shape as torchtitan 0.2.x llama3 flavor "autoplace".',
             "",
             f"{safe.docstring_text(m.name)}: {m.layers} layers, hidden {m.hidden}, {m.heads} heads ({m.a_kv} KV), FFN {m.ffn_hidden},",
             f"vocab {m.vocab}. Imported by torchtitan through [experimental] custom_import.",
             '"""', "",
             "from torchtitan.models.llama3 import llama3_args",
             "from torchtitan.models.llama3.model.args import TransformerModelArgs", ""]
    if args is None:
        lines += [f"raise RuntimeError('FFN width {m.ffn_hidden} cannot be written as torchtitan multiple_of / "
                  "ffn_dim_multiplier; edit this file')"]
    else:
        kw = ", ".join(f"{k}={v!r}" for k, v in args.items())
        lines += [f"llama3_args['autoplace'] = TransformerModelArgs({kw})"]
    return "\n".join(lines) + "\n"

