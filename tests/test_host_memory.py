"""Offloaded states must fit the node's host memory (hardware profile `host_memory_gib`,
cost.memory.host_fits): by hand, in the estimate, and in the search (which once offered Kimi-K2 on one
H100 with 15 TB of parameters, gradients and optimizer state "offloaded")."""

from __future__ import annotations

import pytest

from autoplace import api
from autoplace.cost import memory as M
from autoplace.errors import NoFeasiblePlanError
from autoplace.specs.hardware import load_hardware

GIB = 2**30


def test_host_bytes_by_hand_zero3_full_offload():
    # 13b, ZeRO-3 with parameters offloaded on 8 GPUs, regime "zero": 2 (bf16 params) + 2 (bf16 grads)
    # + 12 (fp32 master, m, v) bytes per parameter, sharded 8 ways, all on the host
    d = api.estimate(api.EstimateRequest(model="13b", gpus=8, plan="zero=3,offload=params,mbs=1")).document
    n = d["model"]["params"]
    assert n == 13_015_864_320
    assert d["memory"]["host_bytes"] == 16 * n / 8
    # DGX H100: 2 TB = 1,862 GiB per node; 85 % of it over the 8 ranks of the node
    assert d["memory"]["host_limit_bytes"] == pytest.approx(0.85 * 1862 * GIB / 8, rel=1e-12)
    assert d["memory"]["fits"] is True


def test_optimizer_offload_fraction_on_the_host():
    d = api.estimate(api.EstimateRequest(model="13b", gpus=8,
                                         plan="zero=1,offload=optimizer,offload_fraction=0.5,mbs=1")).document
    n = d["model"]["params"]
    assert d["memory"]["host_bytes"] == pytest.approx(0.5 * 12 * n / 8, rel=1e-12)


def test_host_share_follows_the_ranks_on_the_node():
    hw = load_hardware("h100-sxm-80gb")
    assert M.host_limit(hw, 1) == pytest.approx(0.85 * 1862 * GIB)
    assert M.host_limit(hw, 64) == pytest.approx(0.85 * 1862 * GIB / 8)
    assert M.host_limit(load_hardware("gb200-nvl72"), 72) == pytest.approx(0.85 * 894 * GIB / 4)
    assert M.host_limit(load_hardware("local-cpu"), 2) == 0.0          # not stated: not checked


def test_estimate_refuses_a_plan_over_host_memory():
    d = api.estimate(api.EstimateRequest(model="kimi-k2", gpus=1,
                                         plan="zero=3,offload=params,recompute=full,mbs=1")).document
    m = d["memory"]
    assert m["peak_bytes"] <= m["limit_bytes"]           # the GPU side fits …
    assert m["host_bytes"] > m["host_limit_bytes"]       # … 1 T parameters × 16 B do not fit in 2 TB
    assert m["fits"] is False


def test_search_says_host_memory_is_what_binds():
    with pytest.raises(NoFeasiblePlanError) as e:
        api.search(api.SearchRequest(model="kimi-k2", gpus=1, launchers=("deepspeed",)))
    assert "host memory" in str(e.value) and "fits the GPU" in str(e.value)
