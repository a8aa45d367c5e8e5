"""Record → plan fields: the degrees, sharding, overlap, offload, expert and schedule fields of one
validation record, each read from what the record states and, where it is silent, from the runtime
that ran it (stated in the assumptions). The rest of the mapping: autoplace.validate.mapping.
"""

from __future__ import annotations

import math
import re

from autoplace.specs.model import ModelSpec
from autoplace.validate.record import Skip, _text, as_int, record_text


def plan_degrees(rec: dict, assumptions: list) -> tuple[int, int, int, int, int]:
    plan = rec.get("plan") or {}
    hwr = rec.get("hardware") or {}
    world = as_int(hwr.get("gpus_total"))
    cp = as_int(plan.get("cp"))
    if cp is None:
        cp = 1
        if plan.get("cp", None) is None and "cp" in plan:
            assumptions.append("plan.cp null → 1 (no context parallelism)")
    vals = {k: as_int(plan.get(k)) for k in ("dp", "tp", "pp")}
    missing = [k for k, v in vals.items() if v is None]
    known = cp
    for v in vals.values():
        if v is not None:
            known *= v
    if world is None:
        if missing:
            raise Skip("GPU count and plan degrees not stated (" + ", ".join(f"plan.{k}" for k in missing) + ")")
        world = known
    if missing:
        if world % known:
            raise Skip(f"plan degrees do not divide the {world} GPUs")
        rest = world // known
        if len(missing) == 1:
            vals[missing[0]] = rest
            assumptions.append(f"plan.{missing[0]} null → {rest} (= GPUs / other degrees)")
        elif rest == 1:
            for k in missing:
                vals[k] = 1
            assumptions.append(", ".join(f"plan.{k}" for k in missing) + " null → 1 (other degrees use all GPUs)")
        else:
            raise Skip("plan degrees not stated: " + ", ".join(f"plan.{k}" for k in missing))
    return vals["dp"], vals["tp"], vals["pp"], cp, world


def dp_overlap_of(rec: dict, params_b: float | None, default: bool, assumptions: list) -> bool:
    t = re.sub(r"\s+", " ", _text(rec.get("notes"), (rec.get("plan") or {}).get("notes"))).lower()
    if re.search(r"no overlap|without overlap|not overlapped|no (?:gradient[- ]all-?reduce )?overlap", t):
        assumptions.append("notes: gradient all-reduce not overlapped → dp_overlap=False")
        return False
    m = re.search(r"torch for <=\s*([\d.]+)\s*b\b.*?megatron 'local' for larger", t)
    # size labels round down ("18B" is the 18.4B model), so compare the whole billions
    if m and params_b is not None and math.floor(params_b) > float(m.group(1)):
        assumptions.append("notes: Megatron 'local' DDP (all-reduce after backward) → dp_overlap=False")
        return False
    return default


def offload_of(rec: dict, assumptions: list) -> str:
    t = record_text(rec)
    par = re.search(r"offload_param\s*=\s*(cpu|nvme)", t)
    opt = re.search(r"offload_optimizer\s*=\s*(cpu|nvme)", t)
    if par:
        assumptions.append("DeepSpeed offload_param → offload=params (implies optimizer and gradients)")
        return "params"
    if opt:
        assumptions.append("DeepSpeed offload_optimizer → offload=grads (ZeRO-Offload keeps fp32 "
                           "gradients and optimizer on the host)")
        return "grads"
    return "none"


def sharding_of(rec: dict, zero: int | None, fsdp: bool, rt, moe: bool = False) -> tuple[int, bool, str | None]:
    """(zero, reshard_after_forward, note)."""
    if not fsdp:
        if zero is not None:
            return zero, True, None
        return rt.defaults.zero, True, f"plan.zero_stage null → {rt.defaults.zero} ({rt.name}'s default" + (
            ": the distributed optimizer)" if rt.defaults.zero == 1 and rt.family == "megatron" else ")")
    t = record_text(rec)
    if "no_shard" in t:
        return 0, True, "FSDP NO_SHARD → DDP"
    if "shard_grad_op" in t or zero == 2:
        return 3, False, "FSDP SHARD_GRAD_OP → zero=3 without resharding after forward"
    if "full_shard" in t:
        return 3, True, "FSDP FULL_SHARD → zero=3"
    r = rt.defaults.reshard_after_forward
    which = ""
    if moe and rt.defaults.moe_reshard_after_forward is not None:
        r, which = rt.defaults.moe_reshard_after_forward, " for MoE models"
    return 3, r, f"FSDP → zero=3, {'resharding' if r else 'no resharding'} after forward ({rt.name}'s default{which})"


def expert_degrees(rec: dict, model: ModelSpec, dp: int, cp: int, tp: int, hw, knobs: dict,
                    assumptions: list, rt) -> tuple[int, int]:
    """(ep, etp): stated, else for an MoE model the largest expert-parallel degree inside one node
    that divides the experts and dp·cp (stated as an assumption)."""
    plan = rec.get("plan") or {}
    ep = as_int(plan.get("ep"))
    if ep is None:
        ep = 1
        if model.is_moe and plan.get("ep", "") is None:
            cap = (dp * cp) if rt.defaults.ep_policy == "data" else hw.gpus_per_node
            cands = [e for e in range(1, model.num_experts + 1) if model.num_experts % e == 0
                     and (dp * cp) % e == 0 and e <= cap]
            ep = max(cands) if cands else 1
            where = "the data-parallel group" if rt.defaults.ep_policy == "data" else "one node"
            assumptions.append(f"plan.ep null on an MoE model → {ep} ({rt.name}: the largest degree inside {where} "
                               f"that divides the {model.num_experts} experts and dp·cp)")
    etp = as_int(knobs.get("expert_tensor_parallel_size"))
    if etp is None and re.search(r"etp\s*=\s*1|expert tensor parallel\w*\s*=\s*1", record_text(rec)):
        etp = 1
    return ep, (etp or 0)


def pp_layout_split(layout: str, pp: int, vpp: int) -> tuple | None:
    """Transformer layers per physical stage of a Megatron `pipeline_model_parallel_layout` such as
    'Et*4|(t*4|)*14tmL' (E embedding, t a layer, m an MTP layer, L the loss; '|' separates the pp·vpp
    virtual stages; virtual stage j sits on rank j mod pp)."""
    s = layout.replace(" ", "")
    for _ in range(8):
        s2 = re.sub(r"\(([^()]*)\)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), s)
        if s2 == s:
            break
        s = s2
    stages = s.split("|")
    if len(stages) != pp * vpp:
        return None
    per = []
    for st in stages:
        per.append(sum(int(m.group(2) or 1) for m in re.finditer(r"(t)(?:\*(\d+))?", st)))
    return tuple(sum(per[j] for j in range(r, len(per), pp)) for r in range(pp))


def schedule_of(rec: dict, pp: int, assumptions: list) -> tuple[str, int]:
    plan = rec.get("plan") or {}
    vpp = as_int(plan.get("vpp"))
    text = str(plan.get("pp_schedule") or "").lower()
    if pp <= 1:
        return "1f1b", 1
    if "gpipe" in text:
        return "gpipe", 1
    if vpp and vpp > 1:
        return "interleaved", vpp
    m = re.search(r"vp\s*=\s*(\d+)", text)
    if m and int(m.group(1)) > 1:
        return "interleaved", int(m.group(1))
    if text and re.search(r"zero.?bubble|dualpipe|zb-?[hv]|\bzbv?\b", text):
        assumptions.append(f"pp_schedule '{plan.get('pp_schedule')}' is not modelled → 1F1B (its bubble is an "
                           "upper bound)")
        return "1f1b", 1
    if "interleav" in text and re.search(r"\bor\b|not stated|unknown|unclear|\?", text):
        assumptions.append(f"pp_schedule '{plan.get('pp_schedule')}' is ambiguous → 1F1B")
    elif "interleav" in text:
        # interleaving means at least two chunks per stage; take the least (the largest bubble)
        assumptions.append(f"pp_schedule '{plan.get('pp_schedule')}' with vpp not stated → interleaved, "
                           "vpp=2 (the least interleaving)")
        return "interleaved", 2
    elif not text:
        assumptions.append("pp_schedule null → 1F1B")
    return "1f1b", 1
