"""Options the user gives change the answer or are refused in one line, never silently ignored."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from autoplace.cli import app
from autoplace.estimate import estimate
from autoplace.plan import parse_plan
from autoplace.specs.hardware import load_hardware
from autoplace.specs.presets import get_preset
from autoplace.specs.training import TrainingSpec

runner = CliRunner()


def test_gpus_per_node_sets_a_node_bounded_nvlink_domain():
    """TP 8 over two 4-GPU nodes crosses the inter-node network: slower than inside one 8-GPU node.
    A rack-scale NVLink domain (GB200 NVL72: 4 GPUs per tray, 72 per domain) keeps its size."""
    h8 = load_hardware("h100-sxm-80gb")
    h4 = load_hardware("h100-sxm-80gb", gpus_per_node=4)
    assert (h8.scaleup_domain, h4.gpus_per_node, h4.scaleup_domain) == (8, 4, 4)
    assert load_hardware("gb200-nvl72", gpus_per_node=4).scaleup_domain == 72
    m, tr = get_preset("13b"), TrainingSpec(seq_len=4096, global_batch=64)
    p = parse_plan("tp=8,sp=1,zero=1,mbs=1")
    s8 = estimate(m, h8, tr, p, 16)["time"]
    s4 = estimate(m, h4, tr, p, 16)["time"]
    assert s4["breakdown_s"]["tp_comm"] > 2 * s8["breakdown_s"]["tp_comm"]
    assert s4["step_s"] > s8["step_s"]


def test_search_header_names_overridden_hardware():
    r = runner.invoke(app, ["search", "-m", "llama-tiny", "-n", "8", "--top-k", "1", "--gpus-per-node", "4",
                            "--gpu-memory", "40GiB", "-l", "megatron"])
    assert r.exit_code == 0, r.output
    head = " ".join(r.output.split())
    assert "4 GPUs/node, NVLink domain 4 (--gpus-per-node)" in head
    assert "memory 40.0 GiB (--gpu-memory 40GiB)" in head


def test_size_without_unit_is_refused():
    r = runner.invoke(app, ["estimate", "-m", "7b", "-n", "8", "--plan", "zero=3,mbs=1", "--gpu-memory", "40"])
    assert r.exit_code == 1 and "give a unit, e.g. 40GiB" in r.output and "Traceback" not in r.output


def test_estimate_plan_file_options_override_the_file(tmp_path):
    from autoplace.export import plan_document
    from autoplace.export.planfile import write_plan_file
    from autoplace.runtimes import training_spec
    m, hw = get_preset("7b"), load_hardware("h100-sxm-80gb")
    tr = training_spec("megatron-core", seq_len=4096, global_batch=64)
    f = write_plan_file(tmp_path / "plan.json", plan_document(m, hw, tr, parse_plan("tp=2,sp=1,zero=1,mbs=1"), 16))

    def run(*extra):
        r = runner.invoke(app, ["estimate", "--plan-file", str(f), "--json", *extra])
        assert r.exit_code in (0, 3), r.output
        return json.loads(r.stdout)
    base = run()
    assert (base["training"]["seq_len"], base["training"]["global_batch"]) == (4096, 64)
    assert run("--seq-len", "2048")["training"]["seq_len"] == 2048
    assert run("--global-batch", "32")["training"]["global_batch"] == 32
    b200 = run("--hardware", "b200")
    assert b200["hardware"]["name"] != base["hardware"]["name"] and b200["time"]["step_s"] < base["time"]["step_s"]
    tt = run("--runtime", "torchtitan")
    assert tt["training"]["runtime"] == "torchtitan" and tt["time"]["step_s"] != base["time"]["step_s"]
    assert run("--gpu-memory", "40GiB")["hardware"]["memory_bytes"] == 40 * 2**30
    r = runner.invoke(app, ["estimate", "--plan-file", str(f), "--model", "13b"])
    assert r.exit_code == 1 and "--plan-file fixes the model" in r.output
