"""Named strategies as placements (§1.4): each is a partial plan; composing several is merging them."""

from __future__ import annotations

from autoplace.errors import InputError
from autoplace.plan import Plan

STRATEGIES: dict[str, dict] = {
    "single": {},
    "ddp": {"zero": 0},
    "zero1": {"zero": 1},
    "distributed-optimizer": {"zero": 1},
    "zero2": {"zero": 2},
    "zero3": {"zero": 3, "reshard_after_forward": True},
    "fsdp-full-shard": {"zero": 3, "reshard_after_forward": True},
    "fsdp-shard-grad-op": {"zero": 3, "reshard_after_forward": False},
    "hsdp": {"zero": 3, "dp_replicate": 2},
    "tp": {"tp": 2},
    "tp-sp": {"tp": 2, "sp": True},
    "pp-1f1b": {"pp": 2, "schedule": "1f1b"},
    "pp-interleaved": {"pp": 2, "vpp": 2, "schedule": "interleaved"},
    "pp-gpipe": {"pp": 2, "schedule": "gpipe"},
    "cp": {"cp": 2},
    "ep": {"ep": 2},
    "recompute-full": {"recompute": "full"},
    "recompute-selective": {"recompute": "selective"},
    "offload-optimizer": {"offload": "optimizer", "zero": 2},
    "offload-params": {"offload": "params", "zero": 3},
}


def strategy_plan(*names: str, **degrees) -> Plan:
    """Compose named strategies (later names win on conflicts), then apply explicit degrees."""
    kw: dict = {}
    for n in names:
        if n not in STRATEGIES:
            raise InputError(f"unknown strategy '{n}'; choose from {', '.join(STRATEGIES)}")
        kw.update(STRATEGIES[n])
    kw.update(degrees)
    return Plan(**kw)
