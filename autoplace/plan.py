"""The `Plan`: one parallelization of one training job — the single source of truth for degrees.

Mesh (placement_semantics.md §1.2): W = dp_replicate · dp_shard · cp · tp · pp (dense), with expert
parallelism carved out of the dense grid: W = d_exp · ep · etp · pp (experts). dp = dp_replicate ·
dp_shard. Micro-batches per step m = B / (mbs · dp) (Narayanan §3.1).

Cost functions never branch on Python strings: they read the integer codes (`rc`, `sched`, `off`,
`zero`, ...) which a `Plan` exposes as scalars and a `PlanBatch` (autoplace.search) as numpy arrays,
so one function evaluates one plan or a million.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace

from autoplace.errors import InputError

RECOMPUTE = ("none", "selective", "full", "block")      # rc codes 0..3
# Megatron-Core --recompute-modules (recompute=selective) the cost model prices; Megatron's others
# (moe, shared_experts) are refused with that reason
RECOMPUTE_MODULES = ("core_attn", "mla_up_proj", "layernorm", "moe_act", "mlp")
MEGATRON_RECOMPUTE_MODULES = RECOMPUTE_MODULES + ("moe", "shared_experts")


def modules_code(mods) -> int:
    """recompute_modules → the `rc_mods` bit mask (bit i: RECOMPUTE_MODULES[i]; 0: none named)."""
    return sum(1 << RECOMPUTE_MODULES.index(x) for x in set(mods or ()))


def modules_of(code: int) -> tuple:
    """The `rc_mods` bit mask → recompute_modules, in RECOMPUTE_MODULES order."""
    return tuple(x for i, x in enumerate(RECOMPUTE_MODULES) if int(code) >> i & 1)


def module_flags(p):
    """(named, core_attn, mla_up_proj) of a Plan or a batch (bool scalars or arrays), from `rc_mods`."""
    import numpy as np
    c = np.asarray(getattr(p, "rc_mods", 0), dtype=np.int64)
    return c > 0, (c & 1) > 0, (c & 2) > 0


def module_on(p, name: str):
    """Whether --recompute-modules lists `name` (a RECOMPUTE_MODULES entry), for a Plan or a batch."""
    import numpy as np
    c = np.asarray(getattr(p, "rc_mods", 0), dtype=np.int64)
    return (c >> RECOMPUTE_MODULES.index(name) & 1) > 0
SCHEDULES = ("1f1b", "interleaved", "gpipe")            # sched codes 0..2
OFFLOAD = ("none", "optimizer", "grads", "params")      # off codes 0..3 (each implies the ones before)
RANK_ORDERS = ("tp-cp-ep-dp-pp", "pp-dp-cp-tp")          # order codes 0 (Megatron), 1 (torchtitan)
MAX_DEGREE = 2**20                                       # keeps every product inside int64

_ALIASES = {
    "dp_shard": "dp_shard", "fsdp": "dp_shard", "n": "dp_shard",
    "dp_replicate": "dp_replicate", "replicate": "dp_replicate", "r": "dp_replicate", "hsdp": "dp_replicate",
    "tp": "tp", "t": "tp", "pp": "pp", "p": "pp", "vpp": "vpp", "v": "vpp", "cp": "cp", "c": "cp",
    "ep": "ep", "e": "ep", "etp": "etp", "dp": "dp", "d": "dp", "zero": "zero", "sp": "sp",
    "recompute": "recompute", "ac": "recompute", "recompute_layers": "recompute_layers",
    "recompute_modules": "recompute_modules", "rc_modules": "recompute_modules", "modules": "recompute_modules",
    "offload": "offload", "offload_fraction": "offload_fraction", "phi": "offload_fraction",
    "mbs": "mbs", "micro_batch": "mbs", "b": "mbs", "schedule": "schedule",
    "vpp_group": "vpp_group", "G": "vpp_group", "g": "vpp_group", "rank_order": "rank_order",
    "order": "rank_order", "reshard": "reshard_after_forward", "pp_flushes": "pp_flushes", "flushes": "pp_flushes",
    "reshard_after_forward": "reshard_after_forward", "tp_overlap": "tp_overlap", "tp_async": "tp_async", "dp_bucket_mb": "dp_bucket_mb", "bucket_mb": "dp_bucket_mb",
    "dp_overlap": "dp_overlap", "ep_overlap": "ep_overlap", "bwd_prefetch": "bwd_prefetch", "fetch_sync": "fetch_sync", "layer_split": "layer_split", "stage_recompute": "stage_recompute",
    "account_embedding": "account_embedding", "account_loss": "account_loss",
    "dp_modes": "dp_modes", "modes": "dp_modes", "zero_axes": "zero_axes", "omit": "omit",
}


@dataclass(frozen=True)
class Plan:
    """One parallelization of one training job: degrees, state placement, schedule, runtime switches.

    Field groups (in declaration order, which is also the order of `to_dict`): degrees (tp … dp,
    dp_replicate), placement (zero, reshard_after_forward, sp, recompute*, offload*), batch and
    schedule (mbs, schedule, vpp_group, rank_order), runtime switches (tp_overlap … dp_bucket_mb),
    non-uniform stages (layer_split, stage_recompute) and expert controls (dp_modes, zero_axes, omit).
    """

    # ---- degrees ---------------------------------------------------------------------------------
    tp: int = 1
    """Tensor-parallel degree t."""
    pp: int = 1
    """Pipeline-parallel degree p (stages)."""
    vpp: int = 1
    """Virtual stages per pipeline rank v (interleaved schedule only)."""
    cp: int = 1
    """Context-parallel degree c (ring attention over sequence chunks)."""
    ep: int = 1
    """Expert-parallel degree (MoE models)."""
    etp: int = 0
    """Expert tensor-parallel size; 0 → tp."""
    dp: int = 0
    """Data-parallel degree d; 0 → derived W / (tp·pp·cp)."""
    dp_replicate: int = 1
    """HSDP replicate degree r; the shard degree is dp_shard n = dp / r."""
    # ---- placement -------------------------------------------------------------------------------
    zero: int = 0
    """0 DDP, 1 optimizer state sharded, 2 + gradients, 3 + parameters (FSDP)."""
    reshard_after_forward: bool = True
    """zero=3: True FULL_SHARD (SG), False SHARD_GRAD_OP (SG-hold: gathered from forward to backward)."""
    sp: bool = False
    """Sequence parallelism over the tp group (Megatron SP; needs tp > 1)."""
    recompute: str = "none"
    """Activation recomputation: none | selective (attention core) | full | block."""
    recompute_layers: int = 0
    """Block recompute: layers per stage fully recomputed."""
    recompute_modules: tuple = ()
    """recompute=selective: the modules recomputed in backward (Megatron-Core `--recompute-modules`):
    `core_attn` (the attention core, Megatron's default), `mla_up_proj` (MLA's q/kv up-projections:
    the per-head Q, K, V are not kept, the latents are), `layernorm` (the two pre-norms: their
    outputs are not kept), `moe_act` (the expert activation: the FC2 input is not kept), `mlp` (the
    dense layers' MLP: only its input is kept). () → the runtime's selective policy."""
    offload: str = "none"
    """Host offload: none | optimizer | grads (+ optimizer) | params (+ grads + optimizer)."""
    offload_fraction: float = 1.0
    """φ: the share of the optimizer state on the host (optimizer offload)."""
    # ---- batch and schedule ----------------------------------------------------------------------
    mbs: int = 1
    """Micro-batch size (sequences); m = B / (mbs · dp) micro-batches per step."""
    schedule: str = "1f1b"
    """Pipeline schedule: 1f1b | interleaved | gpipe."""
    vpp_group: int = 0
    """Interleaved micro-batch group size G; 0 → pp (Megatron's default)."""
    pp_flushes: int = 1
    """Pipeline schedules per optimizer step, each with its own fill and drain: torch.distributed.
    pipelining (torchtitan, NeMo AutoModel) runs one schedule per local batch and accumulates the
    gradients of several; 1 → all m micro-batches through one schedule (Megatron)."""
    rank_order: str = "tp-cp-ep-dp-pp"
    """Rank order: "tp-cp-ep-dp-pp" (Megatron's order string) or "pp-dp-cp-tp" (torchtitan's mesh);
    both nest tp, cp, dp, pp alike and differ in where the expert axes are carved."""
    # ---- runtime switches ------------------------------------------------------------------------
    tp_overlap: bool = False
    """TP communication overlapped with the GEMMs (Megatron tp-comm-overlap; needs SP)."""
    tp_async: bool = True
    """Backward TP collectives overlap the column-parallel wgrad GEMMs (Megatron's async TP
    all-reduce/reduce-scatter, the default since late 2021)."""
    dp_overlap: bool = True
    """DP gradient reduction overlapped with backward (bucketed)."""
    ep_overlap: bool = False
    """EP all-to-all of one micro-batch overlapped with another's compute (Megatron
    --overlap-moe-expert-parallel-comm, Megatron-Bridge moe_a2a_overlap)."""
    bwd_prefetch: bool = True
    """zero=3: backward all-gathers prefetched on their own stream (FSDP backward_prefetch,
    DeepSpeed's trace prefetch); False: issued at each layer's pre-backward hook, queued behind the
    reduce-scatter (FSDP1 NO_PREFETCH)."""
    fetch_sync: bool = False
    """zero=3: every parameter fetch synchronizes the device (DeepSpeed ZeRO-3 of 2021, before the
    coordinator rework of PR #1453; issue #1069): one gather per weight-bearing sub-module, run under
    the sub-module before it; each backward reduce-scatter completes before the next starts."""
    dp_bucket_mb: float = 0.0
    """DP collective granularity in MB (DeepSpeed buckets); 0 → FSDP per-layer units for ZeRO-3 and
    64 MiB gradient buckets otherwise."""
    # ---- non-uniform stages (CP-SAT) -------------------------------------------------------------
    layer_split: tuple = ()
    """Uneven layers per stage; () → even L/pp."""
    account_embedding: bool = False
    """The embedding counts as one layer in the pipeline split (Megatron-Core
    --account-for-embedding-in-pipeline-split): the first (virtual) stage holds one transformer layer
    fewer — none when it holds the embedding alone (`with_pipeline_accounting`)."""
    account_loss: bool = False
    """The output layer and loss count as one layer (--account-for-loss-in-pipeline-split): the last
    (virtual) stage holds one transformer layer fewer."""
    stage_recompute: tuple = ()
    """Per-stage number of fully recomputed layers."""
    # ---- expert controls -------------------------------------------------------------------------
    dp_modes: str = ""
    """Explicit (P/G/O) modes on the shard axis, e.g. "R/S/S"; "" → from zero."""
    zero_axes: str = "dp,cp"
    """Axes the ZeRO/FSDP group spans (Megatron: dp×cp)."""
    omit: tuple = ()
    """Obligations deliberately dropped (negative controls; rules GI/SC reject the plan)."""

    # ---- placement on the data-parallel shard axis (codes: see placement.modes) ---------------
    @property
    def p_mode(self) -> int:
        """0 R, 1 SG, 2 SG-hold."""
        if self.dp_modes:
            return _mode_codes(self.dp_modes)[0]
        return 0 if self.zero < 3 else (1 if self.reshard_after_forward else 2)

    @property
    def g_mode(self) -> int:
        """0 R, 1 S (S-reduced), 2 SG (ill-formed for G, rule C5)."""
        if self.dp_modes:
            return _mode_codes(self.dp_modes)[1]
        return 1 if self.zero >= 2 else 0

    @property
    def o_mode(self) -> int:
        """0 R, 1 S."""
        if self.dp_modes:
            return _mode_codes(self.dp_modes)[2]
        return 1 if self.zero >= 1 else 0

    @property
    def zero_over_model_axis(self) -> bool:
        axes = [a.strip() for a in self.zero_axes.split(",") if a.strip()]
        return any(a in ("tp", "pp") for a in axes)

    @property
    def zero_over_cp(self) -> bool:
        return "cp" in [a.strip() for a in self.zero_axes.split(",")]

    # ---- integer codes read by the cost model (scalars here, arrays in a PlanBatch) ------------
    @property
    def rc(self) -> int:
        return RECOMPUTE.index(self.recompute)

    @property
    def rc_mods(self) -> int:
        """recompute_modules as a bit mask (`modules_code`): a PlanBatch column."""
        return modules_code(self.recompute_modules)

    @property
    def sched(self) -> int:
        return SCHEDULES.index(self.schedule)

    @property
    def off(self) -> int:
        return OFFLOAD.index(self.offload)

    @property
    def order(self) -> int:
        return RANK_ORDERS.index(self.rank_order)

    @property
    def hold(self) -> bool:
        """SG-hold: zero-3 parameters kept gathered from forward through backward."""
        return self.zero == 3 and not self.reshard_after_forward

    @property
    def t_exp(self) -> int:
        return self.etp or self.tp

    @property
    def dp_shard(self) -> int:
        return self.dp // self.dp_replicate if self.dp_replicate else 0

    @property
    def G(self) -> int:
        return self.vpp_group or self.pp

    @property
    def v(self) -> int:
        return self.vpp if self.schedule == "interleaved" else 1

    def with_(self, **kw) -> "Plan":
        return replace(self, **kw)

    def resolved(self, world: int) -> "Plan":
        """Fill dp from the world size when omitted (0 if it does not divide: rule C2 reports it)."""
        if self.dp:
            return self
        denom = self.tp * self.pp * self.cp
        return replace(self, dp=world // denom if denom and world % denom == 0 else 0)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["dp_shard"] = self.dp_shard
        d["etp"] = self.t_exp
        d["vpp_group"] = self.G
        d["layer_split"] = list(self.layer_split)
        d["stage_recompute"] = list(self.stage_recompute)
        d["omit"] = list(self.omit)
        d["recompute_modules"] = list(self.recompute_modules)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Plan":
        names = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        for k in ("layer_split", "stage_recompute", "omit", "recompute_modules"):
            if k in kw:
                kw[k] = tuple(kw[k])
        return cls(**kw)

    def short(self) -> str:
        parts = [f"dp={self.dp}"]
        if self.dp_replicate > 1:
            parts[-1] += f"({self.dp_replicate}x{self.dp_shard})"
        parts += [f"tp={self.tp}", f"pp={self.pp}"]
        if self.v > 1:
            parts.append(f"vpp={self.vpp}")
        if self.cp > 1:
            parts.append(f"cp={self.cp}")
        if self.ep > 1:
            parts.append(f"ep={self.ep}")
        parts.append(f"zero={self.zero}" + ("(hold)" if self.hold else ""))
        if self.sp:
            parts.append("sp")
        parts.append(f"rc={self.recompute}" + (f":{self.recompute_layers}" if self.rc == 3 else "")
                     + (f"({'+'.join(self.recompute_modules)})" if self.rc == 1 and self.recompute_modules else ""))
        if self.off:
            parts.append(f"off={self.offload}")
        parts.append(f"mbs={self.mbs}")
        if self.pp > 1 and self.pp_flushes > 1:
            parts.append(f"pp_flushes={self.pp_flushes}")
        return ",".join(parts)


_BOOL = {"1": True, "true": True, "on": True, "yes": True, "0": False, "false": False, "off": False,
         "no": False}


def _coerce(key: str, val: str):
    f = {f.name: f for f in fields(Plan)}[key]
    typ = f.type
    try:
        if typ == "bool":
            return _BOOL[val.lower()]
        if typ == "int":
            return int(val)
        if typ == "float":
            from autoplace.safe import number
            return number(float(val), f"--plan: {key}", lo=0.0, hi=1.0 if key == "offload_fraction" else 1e6)
        if typ == "tuple" and key == "recompute_modules":
            return _recompute_modules(val)
        if typ == "tuple" and key == "omit":
            return tuple(x for x in val.replace("/", ":").split(":") if x)
        if typ == "tuple":
            return tuple(int(x) for x in val.replace("/", ":").split(":") if x)
    except (KeyError, ValueError):
        raise InputError(f"--plan: '{key}={val}' is not a valid {typ}") from None
    if key == "dp_modes":
        _mode_codes(val)
        return val
    if key == "zero_axes":
        return val.replace(":", ",").replace("/", ",")
    if key == "recompute":
        val = {"sel": "selective", "off": "none", "no": "none", "0": "none"}.get(val, val)
        if val not in RECOMPUTE:
            raise InputError(f"--plan: recompute must be one of {', '.join(RECOMPUTE)}, got '{val}'")
    if key == "schedule":
        val = {"interleaved-1f1b": "interleaved", "interleaved1f1b": "interleaved"}.get(val.lower(), val.lower())
        if val not in SCHEDULES:
            raise InputError(f"--plan: schedule must be one of {', '.join(SCHEDULES)}, got '{val}'")
    if key == "offload":
        val = {"opt": "optimizer", "optim": "optimizer", "param": "params", "cpu": "optimizer"}.get(val, val)
        if val not in OFFLOAD:
            raise InputError(f"--plan: offload must be one of {', '.join(OFFLOAD)}, got '{val}'")
    if key == "rank_order":
        val = {"megatron": "tp-cp-ep-dp-pp", "torchtitan": "pp-dp-cp-tp"}.get(val, val)
        if val not in RANK_ORDERS:
            raise InputError(f"--plan: rank_order must be one of {', '.join(RANK_ORDERS)} "
                             f"(or megatron/torchtitan), got '{val}'")
    return val


def parse_plan(text: str | None) -> Plan:
    """Parse 'tp=8,pp=4,vpp=2,zero=1,sp=1,recompute=selective,mbs=1,schedule=interleaved'.

    Omitted keys take defaults; dp is derived from the GPU count when omitted. A `vpp > 1` without a
    schedule implies the interleaved schedule.
    """
    kw: dict = {}
    given: dict = {}
    for item in (text or "").replace(";", ",").split(","):
        item = item.strip()
        if not item:
            continue
        if "=" not in item:
            raise InputError(f"--plan: '{item}' is not key=value (e.g. tp=8)")
        k, v = (s.strip() for s in item.split("=", 1))
        key = _ALIASES.get(k) or _ALIASES.get(k.lower())
        if key is None:
            raise InputError(f"--plan: unknown key '{k}'; valid keys: "
                             f"{', '.join(sorted(set(_ALIASES.values())))}")
        if key in given:
            raise InputError(f"--plan: '{key}' is given twice ('{given[key]}' and '{item}'); give each key once")
        given[key] = item
        if key == "dp_shard":             # derived (dp / dp_replicate): read it as the HSDP split
            try:
                kw[key] = int(v)
            except ValueError:
                raise InputError(f"--plan: dp_shard must be an integer, got '{v}'") from None
            continue
        kw[key] = _coerce(key, v)
    if "dp_shard" in kw:
        n = kw.pop("dp_shard")
        if n < 1:
            raise InputError(f"--plan: dp_shard must be ≥ 1, got {n}")
        if "dp_replicate" in kw:
            raise InputError("--plan: give dp_replicate or dp_shard, not both (dp = dp_replicate × dp_shard)")
        if not kw.get("dp"):
            raise InputError(f"--plan: dp_shard={n} needs dp (dp_replicate = dp / dp_shard); or give "
                             "dp_replicate, the HSDP replicate degree")
        if kw["dp"] % n:
            raise InputError(f"--plan: dp_shard={n} does not divide dp={kw['dp']}")
        kw["dp_replicate"] = kw["dp"] // n
    if "zero" in kw and kw["zero"] not in (0, 1, 2, 3):
        raise InputError(f"--plan: zero must be 0, 1, 2 or 3, got {kw['zero']}")
    for k in ("tp", "pp", "vpp", "cp", "ep", "mbs", "dp_replicate", "pp_flushes"):
        if k in kw and kw[k] < 1:
            raise InputError(f"--plan: {k} must be ≥ 1, got {kw[k]}")
    for k in ("etp", "dp", "vpp_group", "recompute_layers"):
        if k in kw and kw[k] < 0:
            raise InputError(f"--plan: {k} must be ≥ 0, got {kw[k]}")
    for k in ("tp", "pp", "vpp", "cp", "ep", "etp", "dp", "dp_replicate", "mbs", "vpp_group"):
        if k in kw and kw[k] > MAX_DEGREE:
            raise InputError(f"--plan: {k}={kw[k]} is larger than {MAX_DEGREE}")
    if kw.get("vpp", 1) > 1 and "schedule" not in kw:
        kw["schedule"] = "interleaved"
    if kw.get("recompute_modules"):
        if kw.setdefault("recompute", "selective") != "selective":
            raise InputError(f"--plan: recompute_modules={'+'.join(kw['recompute_modules'])} needs "
                             f"recompute=selective, got recompute={kw['recompute']}")
    return Plan(**kw)


def _recompute_modules(val: str) -> tuple:
    """'core_attn+mla_up_proj' (or ':'-separated) → a tuple of Megatron-Core module names."""
    mods = tuple(dict.fromkeys(x.strip().lower() for x in val.replace(":", "+").replace("/", "+").split("+")
                               if x.strip()))
    for mname in mods:
        if mname in MEGATRON_RECOMPUTE_MODULES and mname not in RECOMPUTE_MODULES:
            raise InputError(f"--plan: recompute_modules '{mname}' is a Megatron-Core module the cost model "
                             f"does not price yet; use {' or '.join(RECOMPUTE_MODULES)}, or recompute=full|block")
        if mname not in RECOMPUTE_MODULES:
            raise InputError(f"--plan: recompute_modules '{mname}' is not a module; valid: "
                             f"{', '.join(RECOMPUTE_MODULES)} (joined with '+')")
    return mods


_PMODES = {"R": 0, "SG": 1, "SG-HOLD": 2, "HOLD": 2}
_GMODES = {"R": 0, "S": 1, "SG": 2}
_OMODES = {"R": 0, "S": 1}


def _mode_codes(text: str) -> tuple[int, int, int]:
    parts = [x.strip().upper() for x in text.replace(":", "/").split("/")]
    if len(parts) != 3:
        raise InputError(f"--plan: dp_modes must be P/G/O, e.g. R/S/S, got '{text}'")
    p, g, o = parts
    try:
        return _PMODES[p], _GMODES[g], _OMODES[o]
    except KeyError:
        raise InputError(f"--plan: dp_modes '{text}': P in R|SG|SG-hold, G in R|S, O in R|S") from None


def with_pipeline_accounting(plan: "Plan", layers: int) -> "Plan":
    """The plan with Megatron-Core's embedding / loss pipeline accounting made explicit as a
    layer_split: L + e + l units (e, l = 1 when the embedding / loss count as a layer) split evenly
    over the pp·v (virtual) stages, the embedding's unit taken off the first and the loss's off the
    last (megatron/core/transformer/transformer_block.py get_num_layers_to_build). Unchanged without
    the flags, with an explicit layer_split, or when pp·v does not divide L + e + l (rule D3 says so)."""
    e, lo = int(bool(plan.account_embedding)), int(bool(plan.account_loss))
    if not (e or lo) or plan.layer_split or plan.pp < 2 or (layers + e + lo) % (plan.pp * plan.v):
        return plan
    per = (layers + e + lo) // plan.pp
    split = [per] * plan.pp
    split[0] -= e
    split[-1] -= lo
    return replace(plan, layer_split=tuple(split))


def lighter_ends_split(layers: int, pp: int) -> tuple:
    """Layers per stage when pp does not divide them: ⌈L/pp⌉ everywhere, the surplus taken off the
    first and last stages in turn (they also hold the embedding and the logits) — Llama 3's 126
    layers on 16 stages become 7, 8 × 14, 7 (Llama 3 paper §3.3.2)."""
    if pp < 2 or layers % pp == 0:
        return (layers // max(pp, 1),) * max(pp, 1)
    base = -(-layers // pp)
    split = [base] * pp
    surplus, k = base * pp - layers, 0
    order = [i for j in range(pp // 2 + 1) for i in (j, pp - 1 - j)]
    while surplus > 0:
        i = order[k % len(order)]
        if split[i] > 1:
            split[i] -= 1
            surplus -= 1
        k += 1
    return tuple(split)


def micro_batches(plan, global_batch):
    """m = B / (b · dp) (D4; broadcastable). Non-divisible batches give a fractional m that rule D4 flags."""
    import numpy as np
    denom = np.asarray(plan.mbs) * np.asarray(plan.dp)
    return global_batch / np.where(denom >= 1, denom, 1)   # dp < 1 is rule C2's to report
