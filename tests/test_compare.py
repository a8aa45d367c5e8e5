"""`autoplace compare` (autoplace.analysis.compare / explain): side by side and the decisive term."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from autoplace.analysis.common import build_training
from autoplace.analysis.compare import compare_docs
from autoplace.analysis.explain import verdict, why_lines
from autoplace.cli import app
from autoplace.errors import IllegalPlanError
from autoplace.estimate import estimate
from autoplace.plan import parse_plan
from autoplace.specs.hardware import load_hardware
from autoplace.specs.presets import get_preset

runner = CliRunner()
A = "tp=8,pp=2,zero=1,sp=1,recompute=selective,mbs=1"
B = "tp=2,pp=4,vpp=5,schedule=interleaved,zero=1,sp=1,mbs=1"


def _docs(*plans, world=64, model="13b", hardware="h100-sxm-80gb"):
    m, hw = get_preset(model), load_hardware(hardware)
    train, _ = build_training(m, None, None, None, "bf16", "zero", world)
    return [estimate(m, hw, train, parse_plan(p), world) for p in plans]


def test_side_by_side_values_are_the_estimates():
    a, b = _docs(A, B)
    c = compare_docs(a, b)
    terms = {t["term"]: t for t in c["terms"]}
    assert terms["step"]["a"] == a["time"]["step_s"] and terms["step"]["b"] == b["time"]["step_s"]
    for k, v in a["time"]["breakdown_s"].items():
        assert terms[k]["a"] == v and terms[k]["b"] == b["time"]["breakdown_s"][k]
    assert len(c["memory"]) == 4                           # pp 2 vs 4: rows for the longer pipeline
    assert c["memory"][3]["values"][:3] == [None, None, None]
    assert c["memory"][0]["values"][2] == a["memory"]["per_stage"][0]["total"]
    comm = {r["axis"]: r for r in c["communication"]}
    assert comm["tp"]["a_bytes"] == a["communication"]["bytes_per_step"]["tp"]
    assert comm["tp"]["b_s"] == b["time"]["breakdown_s"]["tp_comm"]
    assert {k["knob"] for k in c["knobs"]} >= {"tp", "pp", "vpp", "schedule", "recompute"}


def test_the_decisive_term_is_the_largest_share_of_the_gap():
    a, b = _docs(A, B)
    v = verdict(a, b)
    fast, slow = (b, a) if b["time"]["step_s"] < a["time"]["step_s"] else (a, b)
    assert v["faster"] == ("B" if fast is b else "A")
    diffs = {k: slow["time"]["breakdown_s"][k] - fast["time"]["breakdown_s"][k] for k in fast["time"]["breakdown_s"]}
    top = max(diffs, key=diffs.get)
    assert v["decisive"] == top == "tp_comm"
    gap = slow["time"]["step_s"] - fast["time"]["step_s"]
    assert math.isclose(v["decisive_share"], diffs[top] / gap, rel_tol=1e-12)
    assert math.isclose(v["speedup"], slow["time"]["step_s"] / fast["time"]["step_s"], rel_tol=1e-12)
    s = v["sentence"]
    assert s.startswith("B is ") and "tensor-parallel" in s and "tp 8 vs 2" in s and "offset by" in s
    # offsets are the terms where the slower plan is faster, largest first
    offs = [o["seconds"] for o in v["offsets"]]
    assert offs == sorted(offs, reverse=True) and v["offsets"][0]["term"] == "pp_comm"


def test_identical_plans_tie_and_different_gpu_counts_compare_throughput():
    a, b = _docs(A, A)
    assert verdict(a, b)["faster"] is None and "tie" in verdict(a, b)["sentence"]
    (c,) = _docs(A, world=128)
    v = verdict(a, c)
    assert v["faster"] == "B" and "more tokens per second" in v["sentence"]


def test_illegal_plan_is_refused():
    a, bad = _docs(A, "tp=3")
    with pytest.raises(IllegalPlanError):
        compare_docs(a, bad)
    r = runner.invoke(app, ["compare", "--model", "13b", "--gpus", "64", "--plan", A, "--plan", "tp=3"])
    assert r.exit_code == 2 and "illegal" in r.output and "Traceback" not in r.output


@pytest.mark.parametrize("args, fragment", [
    (["--plan", A], "exactly two plans"),
    (["--plan", A, "--plan", B, "--plan", A], "exactly two plans"),
    (["--plan", A, "--plan", B, "--label", "x"], "--label"),
])
def test_bad_compare_input(args, fragment):
    r = runner.invoke(app, ["compare", "--model", "13b", "--gpus", "64", *args])
    assert r.exit_code == 1 and fragment in r.output


def test_cli_table_json_and_plan_files(tmp_path):
    r = runner.invoke(app, ["compare", "--model", "13b", "--gpus", "64", "--plan", A, "--plan", B,
                            "--label", "megatron", "--label", "interleaved"])
    assert r.exit_code == 0, r.output
    assert "interleaved is " in r.output and "step-time terms" in r.output and "memory per stage" in r.output
    from autoplace.export import plan_document
    from autoplace.export.planfile import write_plan_file
    m, hw = get_preset("13b"), load_hardware()
    train, _ = build_training(m, None, None, None, "bf16", "zero", 64)
    files = []
    for name, p in (("a", A), ("b", B)):
        f = tmp_path / f"{name}.json"
        write_plan_file(f, plan_document(m, hw, train, parse_plan(p).resolved(64), 64))
        files.append(str(f))
    j = runner.invoke(app, ["compare", "--plan-file", files[0], "--plan-file", files[1], "--json"])
    assert j.exit_code == 0, j.output
    doc = json.loads(j.stdout)
    a, b = _docs(A, B)
    assert doc["terms"][-1] == {"term": "step", "a": a["time"]["step_s"], "b": b["time"]["step_s"]}
    assert doc["verdict"]["decisive"] == "tp_comm"


def test_search_why_lines_unchanged():
    a, b = _docs("tp=2,pp=1,zero=2,sp=1,mbs=4,dp_replicate=2", "tp=2,pp=1,zero=2,sp=1,mbs=8,cp=2,dp_replicate=2")
    text = why_lines(a, b)
    assert text.startswith("[bold]why #1 beats #2[/]") and "cp 1 vs 2" in text and "mbs 4 vs 8" in text
