"""`autoplace estimate` against issue 2 ("What it must show") and item 7 (the JSON document, exit codes).

In-process through typer's CliRunner on `autoplace.cli.app`; the bad-input cases are also run through
the installed console script (subprocess), so "no traceback" is checked on the real entry point.
Exit codes: 0 legal plan, 2 illegal plan, 1 bad input.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autoplace.cli import app

runner = CliRunner()
SCRIPT = Path(sys.executable).with_name("autoplace")


def run(*args):
    result = runner.invoke(app, ["estimate", *args])
    # an exception escaping the command would also give exit code 1: never acceptable
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def run_json(*args, code=0):
    r = run(*args, "--json")
    assert r.exit_code == code, (r.exit_code, r.stdout, r.stderr)
    return json.loads(r.stdout)


def states(zero, gpus=64, *extra):
    return run_json("--params", "7.5e9", "--gpus", str(gpus), "--plan", f"zero={zero}", "--states-only", *extra)


# ---- the ZeRO numbers ------------------------------------------------------------------------------
@pytest.mark.parametrize("zero,peak", [(0, 120e9), (1, 31.40625e9), (2, 16.640625e9), (3, 1.875e9)])
def test_issue_zero_peaks_exact(zero, peak):
    doc = states(zero)
    assert doc["legal"] is True
    assert doc["memory"]["peak_bytes"] == peak
    assert [s["total"] for s in doc["memory"]["per_stage"]] == [peak]


def test_issue_zero3_over_ddp_communication_1_5_one_micro_batch():
    """At one micro-batch per step (--global-batch = d) the ratio is exactly 1.5 (ZeRO §7.2)."""
    z3 = states(3, 64, "--global-batch", "64")["communication"]["bytes_per_step"]["dp"]
    ddp = states(0, 64, "--global-batch", "64")["communication"]["bytes_per_step"]["dp"]
    assert z3 / ddp == 1.5


def test_issue_zero3_over_ddp_communication_1_5_default_command():
    """The issue's command as written (no --global-batch): --states-only is the ZeRO paper's accounting,
    which has no gradient accumulation, so the ratio must still be 1.5."""
    z3 = states(3)["communication"]["bytes_per_step"]["dp"]
    ddp = states(0)["communication"]["bytes_per_step"]["dp"]
    assert z3 / ddp == 1.5


@pytest.mark.parametrize("d", [8, 16, 64])
def test_issue_zero3_memory_reduction_equals_d(d):
    assert states(0, d)["memory"]["peak_bytes"] / states(3, d)["memory"]["peak_bytes"] == d


def test_issue_zero3_memory_reduction_8_at_d8():
    assert states(0, 8)["memory"]["peak_bytes"] / states(3, 8)["memory"]["peak_bytes"] == 8.0


# ---- T10 through the CLI ------------------------------------------------------------------------------
@pytest.mark.parametrize("plan,gpus,expected", [
    ("tp=1", 1, 2_868_903_936),
    ("tp=8", 8, 578_813_952),
    ("tp=8,sp=1", 8, 358_612_992),
    ("tp=8,recompute=selective", 8, 327_155_712),
    ("tp=8,sp=1,recompute=selective", 8, 106_954_752),
])
def test_issue_gpt3_activation_bytes_per_layer(plan, gpus, expected):
    # 175B on 1–8 GPUs does not fit: the document is still written, with exit code 3 (no feasible plan)
    doc = run_json("--model", "gpt3-175b", "--gpus", str(gpus), "--seq-len", "2048", "--global-batch", "8",
                   "--attention", "eager", "--dropout", "--plan", plan, code=3)
    assert doc["memory"]["activation_bytes_per_layer"] == expected and doc["memory"]["fits"] is False


# ---- the JSON document (issue 2, item 7) ----------------------------------------------------------
ISSUE_PLAN = "tp=8,pp=4,vpp=2,cp=1,ep=1,zero=1,sp=1,recompute=selective,offload=none,mbs=1,schedule=interleaved"


def test_json_document_keys():
    doc = run_json("--model", "13b", "--gpus", "64", "--plan", ISSUE_PLAN)
    assert {"schema_version", "plan", "legal", "violations", "memory", "communication"} <= set(doc)
    assert isinstance(doc["schema_version"], str)
    plan = doc["plan"]
    for k in ("tp", "pp", "vpp", "cp", "ep", "dp", "zero", "sp", "recompute", "offload", "mbs", "schedule"):
        assert k in plan, k
    assert (plan["tp"], plan["pp"], plan["vpp"], plan["dp"], plan["zero"]) == (8, 4, 2, 2, 1)
    assert plan["sp"] is True and plan["recompute"] == "selective" and plan["schedule"] == "interleaved"
    assert doc["legal"] is True and doc["violations"] == []
    mem = doc["memory"]
    assert {"per_stage", "peak_bytes", "limit_bytes", "fits", "activation_bytes_per_layer"} <= set(mem)
    assert len(mem["per_stage"]) == 4
    for i, s in enumerate(mem["per_stage"]):
        assert set(s) >= {"stage", "params", "grads", "optimizer", "activations", "transient", "overhead", "total"}
        assert s["stage"] == i
        parts = sum(s[k] for k in ("params", "grads", "optimizer", "activations", "transient", "reserve",
                                   "overhead"))
        assert s["total"] == pytest.approx(parts, rel=1e-12)
        # the caching-allocator reserve is the runtime's share of the allocated bytes (megatron-core: 3 %)
        assert s["reserve"] == pytest.approx(0.03 * s["allocated"], rel=1e-12)
        assert s["reserved"] == pytest.approx(s["allocated"] + s["reserve"], rel=1e-12)
    assert mem["peak_bytes"] == max(s["total"] for s in mem["per_stage"])
    assert isinstance(mem["fits"], bool) and mem["fits"] == (mem["peak_bytes"] <= mem["limit_bytes"])
    assert mem["activation_bytes_per_layer"] > 0
    assert set(doc["communication"]["bytes_per_step"]) >= {"dp", "tp", "pp", "cp", "ep", "offload"}
    # first and last stages differ (in-flight micro-batches, embedding, output layer, logits)
    assert mem["per_stage"][0]["total"] != mem["per_stage"][-1]["total"]


def test_json_violations_shape_on_illegal_plan():
    doc = run_json("--model", "7b", "--gpus", "48", "--plan", "tp=6", code=2)
    assert doc["legal"] is False
    assert doc["violations"] and all(set(v) == {"rule", "message"} for v in doc["violations"])
    assert "D1" in [v["rule"] for v in doc["violations"]]


def test_human_output_legal_exit_0():
    r = run("--model", "13b", "--gpus", "64", "--plan", ISSUE_PLAN)
    assert r.exit_code == 0, r.stderr
    assert "memory per rank" in r.stdout


# ---- illegal plans: exit 2, the violated rules listed ----------------------------------------------
@pytest.mark.parametrize("args,rules", [
    (("--model", "7b", "--gpus", "48", "--plan", "tp=6"), {"D1"}),                      # 32 heads
    (("--model", "7b", "--gpus", "64", "--plan", "tp=8,pp=4,dp=3"), {"C2"}),            # 3·8·4 ≠ 64
    (("--model", "7b", "--gpus", "64", "--plan", "tp=3"), {"C2"}),                      # 3 ∤ 64
    (("--model", "7b", "--gpus", "64", "--plan", "tp=8,pp=16"), {"C2"}),                # 128 > 64
])
@pytest.mark.parametrize("as_json", [False, True])
def test_illegal_plan_exit_2_lists_rules(args, rules, as_json):
    r = run(*args, *(["--json"] if as_json else []))
    assert r.exit_code == 2, (r.exit_code, r.stdout, r.stderr)
    if as_json:
        got = {v["rule"] for v in json.loads(r.stdout)["violations"]}
    else:
        got = {tok for tok in r.stdout.replace("│", " ").split() if tok in rules}
        assert "violated rules" in r.stdout
    assert rules <= got


# ---- bad input: exit 1, one line naming the problem, no traceback -------------------------------
def _bad_inputs(tmp: Path):
    missing = tmp / "missing" / "config.json"
    missing.parent.mkdir(parents=True, exist_ok=True)
    # no model_type: a known family would fill hidden_size from its transformers defaults
    missing.write_text(json.dumps({"num_hidden_layers": 2, "num_attention_heads": 8,
                                   "intermediate_size": 1024, "vocab_size": 1000}))
    broken = tmp / "broken" / "config.json"
    broken.parent.mkdir(parents=True, exist_ok=True)
    broken.write_text('{"hidden_size": 4096, "num_hidden_layers": ')
    return {
        "missing-field": ((["--model", str(missing), "--gpus", "8"]), "hidden_size"),
        "broken-json": ((["--model", str(broken), "--gpus", "8"]), "JSON"),
        "unknown-preset": ((["--model", "llama-9000b", "--gpus", "8"]), "llama-9000b"),
        "unknown-hardware": ((["--model", "7b", "--gpus", "8", "--hardware", "tpu-v9"]), "tpu-v9"),
        "gpus-0": ((["--model", "7b", "--gpus", "0"]), "--gpus"),
        "unknown-plan-key": ((["--model", "7b", "--gpus", "8", "--plan", "tp=2,foo=3"]), "foo"),
    }


CASES = ["missing-field", "broken-json", "unknown-preset", "unknown-hardware", "gpus-0", "unknown-plan-key"]


def _assert_one_line_error(code, stdout, stderr, needle):
    assert code == 1, (code, stdout, stderr)
    assert "Traceback" not in stderr and "Traceback" not in stdout
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error:")
    assert needle in lines[0]


@pytest.mark.parametrize("case", CASES)
def test_bad_input_exit_1_in_process(case, tmp_path):
    args, needle = _bad_inputs(tmp_path)[case]
    r = run(*args)
    _assert_one_line_error(r.exit_code, r.stdout, r.stderr, needle)


@pytest.mark.parametrize("case", CASES)
def test_bad_input_exit_1_console_script(case, tmp_path):
    args, needle = _bad_inputs(tmp_path)[case]
    exe = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "autoplace"]
    p = subprocess.run([*exe, "estimate", *args], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "COLUMNS": "200"})
    _assert_one_line_error(p.returncode, p.stdout, p.stderr, needle)


def test_bad_input_is_json_free():
    """A bad input with --json prints nothing on stdout (the error goes to stderr)."""
    r = run("--model", "llama-9000b", "--gpus", "8", "--json")
    assert r.exit_code == 1 and r.stdout.strip() == ""
