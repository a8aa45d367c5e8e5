"""Read launcher files back into plan quantities, independently of the emitters: the round-trip
tests read what the exporters wrote, and `estimate --from` / `search --from` read a user's own files
(`autoplace.export.from_config`) through the same functions.

Each `read_*` returns a dict with (a subset of) the keys of `expected(job)`: degrees, batch sizes
(micro, global, micro-batches per step m = B/(mbs·dp)) and memory knobs (zero, hold, sp, recompute,
offload). A value of None means "this launcher's files do not say" and is not compared.
"""

from __future__ import annotations

import json
import re
import shlex
import sys

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

import yaml

KEYS = ("world", "tp", "pp", "vpp", "G", "cp", "ep", "etp", "dp", "dp_replicate", "zero", "hold", "sp",
        "recompute", "offload", "offload_fraction", "mbs", "global_batch", "m", "layer_split")


# ---- expected values straight from the plan (no emitter code) -------------------------------------
def expected(model, train, plan, world) -> dict:
    p = plan.resolved(world)
    lps = None if model.states_only or p.layer_split or model.layers % p.pp else model.layers // p.pp
    if p.dp_modes:
        pm, gm, om = p.p_mode, p.g_mode, p.o_mode
        zero = 3 if pm else (2 if gm else (1 if om else 0))
        hold = pm == 2
    else:
        zero, hold = p.zero, p.zero == 3 and not p.reshard_after_forward
    kind, k = p.recompute, p.recompute_layers
    if p.stage_recompute:
        kind, k = "block", int(p.stage_recompute[0])
    rc = normal_recompute(kind, k, lps)
    return {"world": world, "tp": p.tp, "pp": p.pp, "vpp": p.vpp if p.schedule == "interleaved" else 1,
            "G": (p.vpp_group or p.pp) if p.schedule == "interleaved" else None,
            "cp": p.cp, "ep": p.ep, "etp": p.etp or p.tp, "dp": p.dp, "dp_replicate": p.dp_replicate,
            "zero": zero, "hold": hold, "sp": bool(p.sp and p.tp > 1), "recompute": rc,
            "offload": p.offload, "offload_fraction": float(p.offload_fraction) if p.offload != "none" else None,
            "mbs": p.mbs, "global_batch": train.global_batch, "m": train.global_batch // (p.mbs * p.dp),
            "layer_split": list(p.layer_split) if p.layer_split and p.pp > 1 else None}


def normal_recompute(kind, k, lps):
    if kind == "selective":
        return ("selective", None)
    if kind == "none" or (kind == "block" and k == 0):
        return ("none", 0)
    if kind == "full" or (lps is not None and k >= lps):
        return ("full", lps)
    return ("block", k)


def compare(got: dict, want: dict) -> dict:
    """{key: (got, want)} for every key the launcher reported that disagrees."""
    out = {}
    for k, v in got.items():
        if v is None or k not in want or want[k] is None:
            continue
        w = want[k]
        if k == "dp_replicate" and want.get("zero") == 0:
            continue          # replication without sharding is just data parallelism
        if isinstance(v, tuple) and isinstance(w, tuple) and v[0] == w[0] and None in (v[1], w[1]):
            continue          # the launcher does not state the layer count (e.g. "checkpoint every layer")
        if isinstance(v, float) or isinstance(w, float):
            if abs(float(v) - float(w)) > 1e-9:
                out[k] = (v, w)
        elif v != w:
            out[k] = (v, w)
    return out


# ---- argparse-style flag list ----------------------------------------------------------------------
def parse_flags(text: str) -> dict:
    """'--a 1\\n--b\\n--c x y' → {'--a': '1', '--b': True, '--c': ['x', 'y']} (comments and blanks skipped)."""
    out: dict = {}
    toks = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        toks += shlex.split(line)
    cur = None
    for t in toks:
        if t.startswith("--"):
            if t in out:
                raise ValueError(f"flag {t} given twice")
            cur = t
            out[t] = True
        else:
            if cur is None:
                raise ValueError(f"value {t!r} before any flag")
            v = out[cur]
            out[cur] = t if v is True else (v + [t] if isinstance(v, list) else [v, t])
    return out


def read_megatron(args_text: str, world: int) -> dict:
    a = parse_flags(args_text)
    i = lambda k, d=None: int(a[k]) if k in a else d   # noqa: E731
    tp, pp, cp = i("--tensor-model-parallel-size", 1), i("--pipeline-model-parallel-size", 1), \
        i("--context-parallel-size", 1)
    L = i("--num-layers")
    split = None
    if "--decoder-first-pipeline-num-layers" in a:
        f, last = i("--decoder-first-pipeline-num-layers"), i("--decoder-last-pipeline-num-layers")
        mid = [(L - f - last) // (pp - 2)] * (pp - 2) if pp > 2 else []
        split = [f, *mid, last]
    if "--pipeline-model-parallel-layout" in a:
        stages = a["--pipeline-model-parallel-layout"].split("|")
        split = []
        for s in stages:
            s = s.replace("E", "").replace("L", "")
            mm = re.fullmatch(r"t\*(\d+)", s)
            split.append(int(mm.group(1)) if mm else s.count("t"))
    vpp = (L // pp) // i("--num-layers-per-virtual-pipeline-stage") \
        if "--num-layers-per-virtual-pipeline-stage" in a else 1
    G = i("--microbatch-group-size-per-virtual-pipeline-stage", pp) if vpp > 1 else None
    dp = world // (tp * pp * cp)
    if "--use-megatron-fsdp" in a:
        zero = {"optim_grads": 2, "optim_grads_params": 3, "optim": 1, "no_shard": 0}[
            a["--data-parallel-sharding-strategy"]]
    else:
        zero = 1 if "--use-distributed-optimizer" in a else 0
    lps = None if split else L // pp
    gran = a.get("--recompute-granularity")
    if gran == "selective":
        rc = ("selective", None)
    elif gran == "full":
        n = i("--recompute-num-layers")
        rc = normal_recompute("full", None, lps) if a["--recompute-method"] == "uniform" and n == 1 \
            else normal_recompute("block", n * vpp, lps)
    else:
        rc = ("none", 0)
    mbs, B = i("--micro-batch-size"), i("--global-batch-size")
    return {"world": world, "tp": tp, "pp": pp, "vpp": vpp, "G": G, "cp": cp,
            "ep": i("--expert-model-parallel-size", 1), "etp": i("--expert-tensor-parallel-size", tp),
            "dp": dp, "dp_replicate": i("--num-distributed-optimizer-instances", 1), "zero": zero,
            "hold": False, "sp": "--sequence-parallel" in a, "recompute": rc,
            "offload": "optimizer" if "--optimizer-cpu-offload" in a else "none",
            "offload_fraction": float(a["--optimizer-offload-fraction"]) if "--optimizer-offload-fraction" in a else None,
            "mbs": mbs, "global_batch": B, "m": B // (mbs * dp), "layer_split": split}


def read_env(text: str) -> dict:
    env = {}
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("export "):
            k, _, v = line[len("export "):].partition("=")
            env[k] = v
        elif line.startswith("unset "):
            env[line.split()[1]] = None
    return env


# ---- DeepSpeed JSON --------------------------------------------------------------------------------
def deepspeed_batch(c: dict, dp: int | None) -> tuple[int, int, int]:
    """(train_batch_size, micro-batch, accumulation steps) as DeepSpeed completes them
    (deepspeed/runtime/config.py `_set_batch_related_parameters`): with all three given, as given;
    otherwise the missing ones from the data-parallel size `dp`: B = mbs·gas·dp, gas = B/(mbs·dp),
    mbs = B/(gas·dp); gas defaults to 1 when only one of B, mbs is given. Raises ValueError when
    neither B nor mbs is given, when `dp` is needed and None, or when the three do not multiply out."""
    B, mbs, gas = (c.get(k) for k in ("train_batch_size", "train_micro_batch_size_per_gpu",
                                       "gradient_accumulation_steps"))
    if B is not None and mbs is not None and gas is not None:
        return B, mbs, gas
    if B is None and mbs is None:
        raise ValueError("give train_batch_size or train_micro_batch_size_per_gpu (DeepSpeed needs one)")
    if dp is None:
        raise ValueError("DeepSpeed completes the batch sizes from the GPU count")
    if B is None:
        gas = gas or 1
        B = mbs * gas * dp
    elif mbs is None:
        gas = gas or 1
        mbs = B // (gas * dp)
    else:
        gas = B // (mbs * dp)
    if not (mbs >= 1 and gas >= 1 and B == mbs * gas * dp):
        raise ValueError(f"train_batch_size {B} is not micro-batch {mbs} × accumulation {gas} × "
                         f"{dp} data-parallel GPUs")
    return B, mbs, gas


def read_deepspeed(text: str, world: int, layers: int | None) -> dict:
    """A DeepSpeed JSON. With all three batch sizes given, dp = B/(mbs·gas) and the rest of `world` is
    pipeline; with some left to DeepSpeed, the JSON alone is data parallel over `world` GPUs."""
    c = json.loads(text)
    full = all(c.get(k) is not None for k in ("train_batch_size", "train_micro_batch_size_per_gpu",
                                               "gradient_accumulation_steps"))
    B, mbs, gas = deepspeed_batch(c, None if full else world)
    assert B % (mbs * gas) == 0
    dp = B // (mbs * gas)
    pp = world // dp
    z = c.get("zero_optimization", {})
    off = "none"
    frac = None
    if z.get("offload_optimizer", {}).get("device") == "cpu":
        off, frac = "grads", float(z["offload_optimizer"].get("ratio", 1.0))
    if z.get("offload_param", {}).get("device") == "cpu":
        off = "params"
    ac = c.get("activation_checkpointing")
    lps = layers // pp if layers and layers % pp == 0 else None
    if ac is None:
        rc = ("none", 0)
    elif ac["number_checkpoints"] is None:
        rc = ("full", None)
    else:
        rc = normal_recompute("block", ac["number_checkpoints"], lps)
    return {"world": world, "tp": 1, "pp": pp, "vpp": 1, "cp": 1, "ep": 1, "dp": dp, "zero": z.get("stage", 0),
            "hold": False, "sp": False, "recompute": rc, "offload": off, "offload_fraction": frac,
            "mbs": mbs, "global_batch": B, "m": gas}


# ---- torchtitan TOML -------------------------------------------------------------------------------
def read_torchtitan(text: str, layers: int) -> dict:
    c = tomllib.loads(text)
    par, tr, ac = c["parallelism"], c["training"], c.get("activation_checkpoint", {})
    r, n = par.get("data_parallel_replicate_degree", 1), par["data_parallel_shard_degree"]
    tp, pp, cp = par.get("tensor_parallel_degree", 1), par.get("pipeline_parallel_degree", 1), \
        par.get("context_parallel_degree", 1)
    assert n >= 1, "emit explicit shard degrees"
    world = r * n * tp * pp * cp
    dp = r * n
    fsdp = n > 1 or cp > 1
    zero = 3 if fsdp else (0 if r > 1 else None)
    split = None
    if "module_fqns_per_model_part" in par:
        split = [sum(1 for x in part if x.startswith("layers.")) for part in par["module_fqns_per_model_part"]]
    vpp = 1
    sched = par.get("pipeline_parallel_schedule", "1F1B")
    if pp > 1 and sched.lower() == "interleaved1f1b":
        lps_v = par["pipeline_parallel_layers_per_stage"]
        assert par.get("pipeline_parallel_first_stage_less_layers") == 0
        vpp = layers // (pp * lps_v)
    local, B = tr["local_batch_size"], tr["global_batch_size"]
    mbs = par.get("pipeline_parallel_microbatch_size", 1) if pp > 1 else local
    assert B % (local * dp) == 0 and local % mbs == 0
    m = (B // (local * dp)) * (local // mbs)
    lps = None if split else layers // pp
    mode = ac.get("mode", "selective")
    opt = ac.get("selective_ac_option", "2")
    if mode == "none":
        rc = ("none", 0)
    elif mode == "full":
        rc = ("full", lps)
    elif opt == "op":
        rc = ("selective", None)
    else:
        rc = normal_recompute("block", lps // int(opt), lps)
    G = None
    if vpp > 1:
        rounds = max(1, m // pp)
        G = m // rounds
    return {"world": world, "tp": tp, "pp": pp, "vpp": vpp, "G": G, "cp": cp,
            "ep": par.get("expert_parallel_degree", 1),
            "etp": par.get("expert_tensor_parallel_degree", 1) if par.get("expert_parallel_degree", 1) > 1 else None,
            "dp": dp, "dp_replicate": r if fsdp else None, "zero": zero,
            "hold": (par.get("fsdp_reshard_after_forward") == "never") if fsdp else None,
            "sp": tp > 1, "recompute": rc, "offload": "params" if tr.get("enable_cpu_offload") else "none",
            "mbs": mbs, "global_batch": B, "m": m, "layer_split": split}


def overrides_dict(text: str) -> dict:
    """`--a.b.c value` lines → {'a.b.c': value} with TOML-like typing (ints, bools, lists)."""
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        toks = shlex.split(line)
        key = toks[0][2:]
        head, _, leaf = key.rpartition(".")
        if len(toks) == 1:
            if leaf.startswith("no-"):
                out[f"{head}.{leaf[3:]}"] = False
            else:
                out[key] = True
            continue
        vals = toks[1:]
        out[key] = vals if len(vals) > 1 or key.endswith(("converters", "components")) else vals[0]
    return out


def as_cli_strings(flat: dict) -> dict:
    """TOML values the way a CLI carries them (strings; bools and lists of strings kept)."""
    return {k: (v if isinstance(v, bool) else [str(x) for x in v] if isinstance(v, list) else str(v))
            for k, v in flat.items()}


def flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else k
        if isinstance(v, dict):
            out.update(flatten(v, key))
        else:
            out[key] = v
    return out




# ---- accelerate YAML + launch script ------------------------------------------------------------------
def read_accelerate(yaml_text: str, launch_text: str, gpus_per_node: int) -> dict:
    c = yaml.safe_load(yaml_text)
    W = c["num_processes"]
    launch = parse_flags(" ".join(line.rstrip("\\") for line in launch_text.splitlines()
                                  if line.strip().startswith("--")))
    mbs = int(launch["--per_device_train_batch_size"])
    gas = int(launch["--gradient_accumulation_steps"])
    if c["distributed_type"] == "MULTI_GPU":
        r, n, tp, cp, zero, hold = W, 1, 1, 1, 0, False
        rc = ("full", None) if "--gradient_checkpointing" in launch else ("none", 0)
        off = "none"
    else:
        fc = c["fsdp_config"]
        pc = c.get("parallelism_config") or {}
        tp, cp = pc.get("parallelism_config_tp_size", 1), pc.get("parallelism_config_cp_size", 1)
        if fc["fsdp_version"] == 1:
            strat = fc["fsdp_sharding_strategy"]
            hold = strat in ("SHARD_GRAD_OP", "HYBRID_SHARD_ZERO2")
            if strat.startswith("HYBRID"):
                r, n = c["num_machines"], gpus_per_node
            else:
                r, n = 1, W
        else:
            hold = not fc["fsdp_reshard_after_forward"]
            r = pc.get("parallelism_config_dp_replicate_size", 1)
            n = pc.get("parallelism_config_dp_shard_size", W // (tp * cp * r))
        zero = 3
        rc = ("full", None) if fc.get("fsdp_activation_checkpointing") else ("none", 0)
        off = "params" if fc.get("fsdp_offload_params") else "none"
    assert r * n * tp * cp == W, (r, n, tp, cp, W)
    dp = r * n
    return {"world": W, "tp": tp, "pp": 1, "cp": cp, "ep": 1, "dp": dp, "dp_replicate": r, "zero": zero,
            "hold": hold, "sp": False, "recompute": rc, "offload": off, "mbs": mbs, "m": gas}


# ---- torchrun / SLURM -----------------------------------------------------------------------------------
def read_torchrun(text: str) -> dict:
    line = next(ln for ln in text.splitlines() if ln.startswith("exec torchrun"))
    nn = int(re.search(r"--nnodes (\d+)", line).group(1))
    g = int(re.search(r"--nproc-per-node (\d+)", line).group(1))
    return {"world": nn * g, "nodes": nn, "standalone": "--standalone" in line,
            "c10d": "--rdzv-backend c10d" in line}


def read_slurm(text: str) -> dict:
    nodes = int(re.search(r"^#SBATCH --nodes=(\d+)$", text, re.M).group(1))
    g = int(re.search(r"^#SBATCH --gpus-per-node=(\d+)$", text, re.M).group(1))
    tpn = int(re.search(r"^#SBATCH --ntasks-per-node=(\d+)$", text, re.M).group(1))
    return {"world": nodes * g, "nodes": nodes, "tasks_per_node": tpn}
