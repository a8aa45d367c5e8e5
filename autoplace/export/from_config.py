"""`--from FILE`: the launcher config a user already has → (model, training, plan, world), through the
same readers the export round-trip tests use (`autoplace.export.readback`).

Read: a Megatron-LM argument list or launch script (`--tensor-model-parallel-size …`), a DeepSpeed
JSON (`train_batch_size`, `zero_optimization`, …; its model from `--model`; batch sizes it leaves out
completed as DeepSpeed does from `--gpus`), a torchtitan 0.2 TOML job
config (`[parallelism]`, `[training]`, `[model]` name + flavor), an accelerate YAML (`distributed_type`,
`fsdp_config`; its model from `--model`, micro-batch and accumulation from a launch script beside it or
the defaults 1 / 1, said in the notes). The runtime is the launcher's (`megatron-core`, `deepspeed`,
`torchtitan`, `accelerate`). Unreadable files, missing facts and contradictions with `--model` /
`--gpus` are one-line InputErrors naming the file and the key.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from autoplace.errors import InputError
from autoplace.export import readback as rb

RUNTIME = {"megatron": "megatron-core", "deepspeed": "deepspeed", "torchtitan": "torchtitan",
           "accelerate": "accelerate"}


@dataclass
class FromConfig:
    """What a launcher file says."""
    launcher: str
    path: str
    quantities: dict
    """The readback quantities (degrees, zero, hold, recompute, offload, mbs, global batch, m)."""
    world: int
    seq_len: int | None = None
    shape: dict = field(default_factory=dict)
    """Model shape keys the file states (layers, hidden, heads, kv_heads, ffn_hidden, vocab)."""
    model_hint: str | None = None
    """A preset the file names (torchtitan [model] name + flavor)."""
    flags: dict = field(default_factory=dict)
    """Megatron-LM: every flag read (to build the model when it matches no preset)."""
    notes: list = field(default_factory=list)

    def plan(self):
        """The Plan the file runs."""
        from autoplace.plan import Plan
        q = self.quantities
        kind, k = q.get("recompute") or ("none", 0)
        vpp = q.get("vpp") or 1
        kw = dict(tp=q.get("tp") or 1, pp=q.get("pp") or 1, cp=q.get("cp") or 1, ep=q.get("ep") or 1,
                  dp=q["dp"], zero=q.get("zero") or 0, sp=bool(q.get("sp")), mbs=q["mbs"],
                  offload=q.get("offload") or "none", recompute=kind)
        if q.get("etp") and q.get("ep", 1) > 1:
            kw["etp"] = q["etp"]
        if q.get("dp_replicate") and (q.get("zero") or 0) > 0:
            kw["dp_replicate"] = q["dp_replicate"]
        if q.get("zero") == 3:
            kw["reshard_after_forward"] = not q.get("hold")
        if kind == "block":
            kw["recompute_layers"] = int(k)
        if q.get("offload_fraction") is not None and kw["offload"] != "none":
            kw["offload_fraction"] = float(q["offload_fraction"])
        if vpp > 1:
            kw.update(vpp=vpp, schedule="interleaved")
            if q.get("G"):
                kw["vpp_group"] = q["G"]
        if q.get("layer_split"):
            kw["layer_split"] = tuple(q["layer_split"])
        return Plan(**kw)

    @property
    def precision(self) -> str | None:
        """The precision the file trains in, when it says (Megatron-LM --bf16 / --fp16 / --fp8-format;
        DeepSpeed bf16 / fp16 sections)."""
        f = self.flags
        if "--fp8-format" in f:
            return "fp8"
        if "--fp16" in f:
            return "fp16"
        if "--bf16" in f:
            return "bf16"
        return self.quantities.get("_precision")

    @property
    def runtime(self) -> str:
        return RUNTIME[self.launcher]

    @property
    def global_batch(self) -> int | None:
        q = self.quantities
        if q.get("global_batch"):
            return int(q["global_batch"])
        if q.get("m") and q.get("mbs") and q.get("dp"):
            return int(q["m"] * q["mbs"] * q["dp"])
        return None


def _err(path, msg: str) -> InputError:
    return InputError(f"--from {path}: {msg}")


def detect(path: Path, text: str) -> str:
    """Which launcher wrote this file."""
    suf = path.suffix.lower()
    if suf == ".json":
        return "deepspeed"
    if suf == ".toml":
        return "torchtitan"
    if suf in (".yaml", ".yml"):
        return "accelerate"
    if "--tensor-model-parallel-size" in text or "--num-layers" in text or "pretrain_gpt" in text:
        return "megatron"
    if "accelerate launch" in text:
        return "accelerate"
    raise _err(path, "not a launcher config autoplace reads (a Megatron-LM argument list or launch script, "
                     "a DeepSpeed .json, a torchtitan .toml, an accelerate .yaml)")


_TORCHRUN_FLAGS = ("--nproc-per-node", "--nproc_per_node", "--nnodes", "--node-rank", "--node_rank",
                   "--master-addr", "--master_addr", "--master-port", "--master_port", "--rdzv-backend",
                   "--rdzv_backend", "--rdzv-endpoint", "--rdzv_endpoint", "--standalone")


def megatron_args(text: str) -> str:
    """The Megatron-LM flags of an argument file or launch script, one `--flag value` per line: lines
    (continuations joined, bash arrays included) are scanned for flags; a value holding a shell
    variable is dropped with its flag, torchrun's own flags are skipped, a later flag overrides."""
    joined = re.sub(r"\\\s*\n", " ", text)
    found: dict[str, list[str]] = {}
    for line in joined.splitlines():
        s = line.strip()
        if not s or s.startswith("#") or "--" not in s:
            continue
        try:
            toks = shlex.split(s, comments=True)
        except ValueError:
            continue
        cur = None
        for t in toks:
            t = t.strip("()")
            if t.startswith("--") and len(t) > 2:
                cur = None if t in _TORCHRUN_FLAGS else t
                if cur:
                    found[cur] = []
            elif cur and t:
                if "$" in t:
                    found.pop(cur, None)
                    cur = None
                else:
                    found[cur].append(t)
    return "\n".join(" ".join([k, *(shlex.quote(v) for v in vs)]) for k, vs in found.items())


def _script_world(text: str) -> int | None:
    """GPUs of a launch script: GPUS_PER_NODE / NPROC_PER_NODE × NUM_NODES / NNODES, when both are numbers."""
    def num(*names):
        for n in names:
            m = re.search(rf"^\s*(?:export\s+)?{n}=(\d+)\b", text, re.M)
            if m:
                return int(m.group(1))
        return None
    g, n = num("GPUS_PER_NODE", "NPROC_PER_NODE", "GPUS"), num("NUM_NODES", "NNODES", "NODES")
    return g * n if g and n else None


def read(path, *, gpus: int | None = None, model=None, gpus_per_node: int = 8,
         default_gpus: int | None = None) -> FromConfig:
    """Read a launcher file (see the module docstring). `gpus`: the user's GPU count, checked against
    the file; `default_gpus`: used only where the file leaves the count open (`search --from`)."""
    p = Path(path)
    if not p.is_file():
        raise _err(p, "no such file")
    text = p.read_text(encoding="utf-8", errors="replace")
    kind = detect(p, text)
    layers = getattr(model, "layers", None)
    try:
        if kind == "megatron":
            side = p.with_name("megatron_args.txt")
            if "megatron_args.txt" in text and side.is_file() and side != p:   # autoplace's own launch script
                text = side.read_text(encoding="utf-8") + "\n" + text
            args = megatron_args(text)
            flags = rb.parse_flags(args)
            sw = _script_world(text)
            if gpus is not None and sw is not None and gpus != sw:
                raise _err(p, f"the file runs {sw} GPUs (GPUs per node × nodes), --gpus says {gpus}; "
                              "drop --gpus or fix the file")
            world = gpus or sw or default_gpus
            if world is None:
                raise _err(p, "a Megatron-LM argument list does not state the GPU count; add --gpus")
            q = rb.read_megatron(args, world)
            shape = _megatron_shape(flags)
            seq = int(flags["--seq-length"]) if "--seq-length" in flags else None
            return FromConfig(kind, str(p), q, world, seq, shape, flags=flags)
        if kind == "deepspeed":
            c = json.loads(text)
            keys = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")
            if not all(c.get(k) is None or type(c.get(k)) is int for k in keys):
                raise _err(p, "train_batch_size, train_micro_batch_size_per_gpu and gradient_accumulation_steps "
                              "must all be integers (autoplace does not read 'auto')")
            notes = []
            if all(c.get(k) is not None for k in keys):
                dp = c[keys[0]] // (c[keys[1]] * c[keys[2]])
                world = gpus or dp
                if not gpus:
                    notes.append(f"GPU count read as the data-parallel degree {dp} (no --gpus)")
            else:
                world = gpus or default_gpus
                left = " and ".join(k for k in keys if c.get(k) is None)
                if world is None:
                    raise _err(p, f"leaves {left} to DeepSpeed, which derives it from the GPU count; add --gpus")
                B, mbs, gas = rb.deepspeed_batch(c, world)
                notes.append(f"{left} completed as DeepSpeed does over {world} data-parallel GPUs: "
                             f"micro-batch {mbs}, gradient accumulation {gas}, global batch {B}")
            q = rb.read_deepspeed(text, world, layers)
            if (c.get("fp16") or {}).get("enabled") is True:
                q["_precision"] = "fp16"
            elif (c.get("bf16") or {}).get("enabled") is True:
                q["_precision"] = "bf16"
            return FromConfig(kind, str(p), q, world, notes=notes)
        if kind == "torchtitan":
            c, notes = _tt_legacy(tomllib.loads(text))
            m = c.get("model", {})
            if layers is None and c.get("parallelism", {}).get("pipeline_parallel_degree", 1) > 1:
                layers = _tt_layers(m)
            text = _tt_explicit(c, gpus or default_gpus, p)
            q = rb.read_torchtitan(text, layers or 1)
            hint = _tt_preset(m)
            return FromConfig(kind, str(p), q, q["world"], c.get("training", {}).get("seq_len"), model_hint=hint,
                              notes=notes)
        launch, notes = _accelerate_launch(p)
        q = rb.read_accelerate(_accelerate_explicit(text), launch, gpus_per_node)
        mp = str((yaml.safe_load(text) or {}).get("mixed_precision", "")).lower()
        if mp in ("bf16", "fp16", "fp8"):
            q["_precision"] = mp
        return FromConfig(kind, str(p), q, q["world"], notes=notes)
    except InputError:
        raise
    except (KeyError, ValueError, TypeError, AssertionError, ZeroDivisionError, StopIteration,
            tomllib.TOMLDecodeError) as e:
        what = {"megatron": "a Megatron-LM argument list", "deepspeed": "a DeepSpeed config",
                "torchtitan": "a torchtitan job config", "accelerate": "an accelerate config"}[kind]
        why = f"missing key {e}" if isinstance(e, KeyError) else (str(e) or type(e).__name__)
        raise _err(p, f"cannot read it as {what}: {why.splitlines()[0]}") from None


# torchtitan 0.1 (2024) kept the degrees in [training] and pipelining in [experimental]; 0.2 moved both to
# [parallelism] (torchtitan/config_manager.py of v0.1.0 → torchtitan/config/job_config.py of v0.2).
_TT01_TRAINING = ("data_parallel_replicate_degree", "data_parallel_shard_degree", "tensor_parallel_degree",
                  "context_parallel_degree")
_TT01_EXPERIMENTAL = ("pipeline_parallel_degree", "pipeline_parallel_schedule", "pipeline_parallel_split_points")


def _tt_legacy(c: dict) -> tuple[dict, list]:
    """A torchtitan 0.1 job config in 0.2 keys, and what was read so. 0.1's
    `experimental.pipeline_parallel_microbatches` left unset means as many micro-batches as pipeline
    stages (`n_microbatches = pipeline_parallel_degree` in 0.1's parallelisms/pipelining.py): the
    micro-batch is then the local batch / pp; 0.2's `pipeline_parallel_microbatch_size` defaults to 1."""
    tr, ex = dict(c.get("training", {})), dict(c.get("experimental", {}))
    moved = [k for k in _TT01_TRAINING if k in tr] + [k for k in _TT01_EXPERIMENTAL if k in ex]
    if not moved and "pipeline_parallel_microbatches" not in ex:
        return c, []
    par = dict(c.get("parallelism", {}))
    for k in _TT01_TRAINING:
        if k in tr:
            par.setdefault(k, tr.pop(k))
    for k in _TT01_EXPERIMENTAL:
        if k in ex:
            par.setdefault(k, ex.pop(k))
    notes = ["read with torchtitan 0.1 key names ([training] degrees, [experimental] pipelining)"]
    pp = int(par.get("pipeline_parallel_degree", 1))
    if pp > 1 and "pipeline_parallel_microbatch_size" not in par:
        n = ex.pop("pipeline_parallel_microbatches", None)
        local = int(tr.get("local_batch_size", tr.get("batch_size", 8)))
        n_micro = int(n) if n else pp
        if n_micro < 1 or local % n_micro:
            raise ValueError(f"local batch {local} is not divisible into {n_micro} pipeline micro-batches")
        par["pipeline_parallel_microbatch_size"] = local // n_micro
        notes.append(f"{n_micro} pipeline micro-batches of {local // n_micro} "
                     + ("(experimental.pipeline_parallel_microbatches)" if n else
                        "(none given: torchtitan 0.1 runs as many micro-batches as pipeline stages)"))
    return {**c, "training": tr, "experimental": ex, "parallelism": par}, notes


def _tt_explicit(c: dict, gpus: int | None, p: Path) -> str:
    """torchtitan's implicit values made explicit, as torchtitan resolves them (config/job_config.py,
    distributed/parallel_dims.py): data_parallel_shard_degree -1 = the GPUs the other degrees leave,
    training.batch_size (0.1 name) = local_batch_size, global_batch_size -1 = local × dp."""
    import tomli_w
    par = dict(c.get("parallelism", {}))
    tr = dict(c.get("training", {}))
    other = 1
    for k, d in (("data_parallel_replicate_degree", 1), ("tensor_parallel_degree", 1),
                 ("pipeline_parallel_degree", 1), ("context_parallel_degree", 1)):
        other *= int(par.get(k, d))
    if int(par.get("data_parallel_shard_degree", -1)) == -1:
        if gpus is None:
            raise _err(p, "parallelism.data_parallel_shard_degree = -1 takes the GPUs left over; add --gpus")
        if gpus % other:
            raise _err(p, f"--gpus {gpus} is not a multiple of replicate·tp·pp·cp = {other}")
        par["data_parallel_shard_degree"] = gpus // other
    if "local_batch_size" not in tr:
        tr["local_batch_size"] = int(tr.get("batch_size", 8))     # torchtitan's default local batch: 8
    dp = int(par.get("data_parallel_replicate_degree", 1)) * int(par["data_parallel_shard_degree"])
    if int(tr.get("global_batch_size", -1)) <= 0:
        tr["global_batch_size"] = tr["local_batch_size"] * dp
    return tomli_w.dumps({**c, "parallelism": par, "training": tr})


def megatron_model(flags: dict, path: str):
    """The ModelSpec Megatron-LM builds from these flags (megatron/training/arguments.py defaults:
    learned absolute positions, LayerNorm, biases, tied embeddings, ffn 4h, or with --swiglu
    int(4h·2/3 / 64)·64; vocab from --vocab-size, else GPT-2's 50,257)."""
    from autoplace.specs.model import ModelSpec
    g = lambda k, d=None: int(flags[k]) if isinstance(flags.get(k), str) and flags[k].isdigit() else d  # noqa: E731
    L, h, a = g("--num-layers"), g("--hidden-size"), g("--num-attention-heads")
    if None in (L, h, a):
        raise _err(path, "the flags do not give --num-layers, --hidden-size and --num-attention-heads; add --model")
    swiglu = "--swiglu" in flags
    ffn = g("--ffn-hidden-size") or (int((4 * h * 2 / 3) / 64) * 64 if swiglu else 4 * h)
    bias = "--disable-bias-linear" not in flags
    seq = g("--max-position-embeddings") or g("--seq-length") or 4096
    return ModelSpec(name=f"Megatron-LM flags ({L} layers, hidden {h})", layers=L, hidden=h, heads=a,
                     vocab=g("--vocab-size", 50257), ffn_hidden=ffn,
                     kv_heads=g("--num-query-groups") if "--group-query-attention" in flags else None,
                     gated_mlp=swiglu, tied_embeddings="--untie-embeddings-and-output-weights" not in flags,
                     attn_bias=bias, mlp_bias=bias,
                     norm="rmsnorm" if flags.get("--normalization") == "RMSNorm" else "layernorm",
                     position="rope" if flags.get("--position-embedding-type") == "rope" else "learned",
                     max_seq_len=seq, pretrain_seq_len=g("--seq-length") or seq, source=f"--from {path}")


def _megatron_shape(flags: dict) -> dict:
    keys = {"--num-layers": "layers", "--hidden-size": "hidden", "--num-attention-heads": "heads",
            "--ffn-hidden-size": "ffn_hidden", "--num-query-groups": "kv_heads"}
    out = {}
    for flag, k in keys.items():
        v = flags.get(flag)
        if isinstance(v, str) and v.isdigit():
            out[k] = int(v)
    if "kv_heads" in out and "--group-query-attention" not in flags:
        out.pop("kv_heads")
    return out


def _tt_flavors() -> dict:
    from autoplace.export.torchtitan import _LLAMA3_FLAVORS
    return _LLAMA3_FLAVORS


def _tt_layers(m: dict) -> int | None:
    a = _tt_flavors().get(str(m.get("flavor")))
    return a["n_layers"] if a and m.get("name") == "llama3" else None


def _tt_preset(m: dict) -> str | None:
    """The preset of a torchtitan llama3 flavor (matched by shape)."""
    a = _tt_flavors().get(str(m.get("flavor")))
    if not a or m.get("name") != "llama3":
        return None
    from autoplace.export.torchtitan import ffn_hidden
    return match_preset({"layers": a["n_layers"], "hidden": a["dim"], "heads": a["n_heads"],
                         "kv_heads": a["n_kv_heads"], "vocab": a["vocab_size"],
                         "ffn_hidden": ffn_hidden(a["dim"], a["multiple_of"], a["ffn_dim_multiplier"])})


def _accelerate_explicit(text: str) -> str:
    """accelerate's implicit values made explicit (accelerate/utils/dataclasses.py): fsdp_version 1
    when absent, one machine."""
    c = yaml.safe_load(text) or {}
    c.setdefault("num_machines", 1)
    if isinstance(c.get("fsdp_config"), dict):
        c["fsdp_config"] = {"fsdp_version": 1, **c["fsdp_config"]}
    return yaml.safe_dump(c)


def _accelerate_launch(p: Path) -> tuple[str, list]:
    """The launch flags beside an accelerate YAML (accelerate_launch.sh), else mbs 1 and no accumulation."""
    for cand in (p.with_name("accelerate_launch.sh"), p.with_suffix(".sh")):
        if cand.is_file():
            return cand.read_text(encoding="utf-8"), [f"micro-batch and accumulation read from {cand.name}"]
    return ("--per_device_train_batch_size 1\n--gradient_accumulation_steps 1",
            ["no launch script beside the YAML: micro-batch 1, gradient accumulation 1"])


def _shape_of(m) -> dict:
    return {"layers": m.layers, "hidden": m.hidden, "heads": m.heads, "kv_heads": m.a_kv,
            "ffn_hidden": m.ffn_hidden, "vocab": m.vocab}


def match_preset(shape: dict) -> str | None:
    """The first preset whose shape has every key of `shape` equal."""
    from autoplace.specs.presets import PRESETS
    for key, m in PRESETS.items():
        if m.states_only:
            continue
        ms = _shape_of(m)
        if all(ms.get(k) == v for k, v in shape.items()):
            return key
    return None


def resolve(path, *, model: str | None = None, gpus: int | None = None, gpus_per_node: int = 8,
            default_gpus: int | None = None):
    """(ModelSpec, FromConfig, notes): the model from --model (checked against the shape the file
    states) or from the file itself (a preset matched by shape; the notes say so)."""
    from autoplace.resolve import resolve_model
    m = resolve_model(model, None) if model else None
    fc = read(path, gpus=gpus, model=m, gpus_per_node=gpus_per_node, default_gpus=default_gpus)
    notes = list(fc.notes)
    if gpus is not None and fc.world != gpus:
        raise _err(fc.path, f"the file runs {fc.world} GPUs, --gpus says {gpus}; drop --gpus or fix the file")
    if m is not None:
        ms = _shape_of(m)
        bad = [f"{k} {v} (file) vs {ms[k]} ({m.name})" for k, v in fc.shape.items() if ms.get(k) != v]
        if bad:
            raise _err(fc.path, f"contradicts --model {model}: {', '.join(bad)}")
        if fc.model_hint and fc.model_hint != _normal(model):
            hm = resolve_model(fc.model_hint, None)
            if _shape_of(hm) != ms:
                raise _err(fc.path, f"names the model {fc.model_hint}, --model says {model}; drop one")
    else:
        key = fc.model_hint or (match_preset(fc.shape) if len(fc.shape) >= 3 else None)
        if key is None and fc.launcher == "megatron":
            m = megatron_model(fc.flags, fc.path)
            notes.append(f"model built from the file's flags: {m.layers} layers, hidden {m.hidden}, "
                         f"{m.heads} heads, ffn {m.ffn_hidden}, vocab {m.vocab:,}"
                         + ("" if "--vocab-size" in fc.flags else " (GPT-2's; --vocab-file is not read)"))
            return m, fc, notes
        if key is None:
            raise _err(fc.path, f"a {fc.launcher} config does not name a model autoplace knows; add --model "
                                f"(a preset or a Hugging Face config.json)")
        m = resolve_model(key, None)
        if not fc.model_hint:
            notes.append(f"model read as the preset {key} (its shape matches the file's)")
    return m, fc, notes


def _normal(name: str) -> str:
    from autoplace.specs.presets import ALIASES, _normalise
    k = _normalise(name)
    return ALIASES.get(k, k)
