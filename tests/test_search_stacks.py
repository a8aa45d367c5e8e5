"""The headline plan is one a real training stack runs, priced as that stack runs it.

The default search is one constrained search per training stack (megatron, deepspeed, torchtitan,
accelerate), each under its own runtime and memory model; the #1 row's step time and peak memory are
exactly those of `search --launcher L` for the stack L that priced it, and its "runs on" lists only
stacks whose own model says it fits. The whole grid (presets × 8/64/256/1024 GPUs) is
`benchmarks/stack_headline.py`; CI checks a few cells."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from autoplace.cli import app

runner = CliRunner()
STACK_NAMES = ("megatron", "deepspeed", "torchtitan", "accelerate")


def _json(args):
    r = runner.invoke(app, args + ["--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


@pytest.mark.parametrize("model,gpus,hw", [("llama-tiny", 8, "h100-sxm-80gb"), ("qwen3-30b-a3b", 8, "b200")])
def test_headline_is_a_stack_plan_with_that_stacks_numbers(model, gpus, hw):
    base = ["search", "-m", model, "-n", str(gpus), "--hardware", hw, "--top-k", "2"]
    d = _json(base)
    top = d["plans"][0]
    L = top["search"]["launcher"]
    assert L in STACK_NAMES and top["runs_on"] and L in top["runs_on"]
    assert set(top["runs_on"]) <= set(STACK_NAMES)          # torchrun / slurm are not stacks
    own = _json(base[:-2] + ["--top-k", "1", "--launcher", L])["plans"][0]
    assert own["plan"] == top["plan"]
    assert own["time"]["step_s"] == top["time"]["step_s"]
    assert own["memory"]["peak_bytes"] == top["memory"]["peak_bytes"]
    rows = {r["launcher"]: r for r in top["stacks"]}
    assert rows[L]["step_s"] == top["time"]["step_s"] and rows[L]["peak_bytes"] == top["memory"]["peak_bytes"]
    for r in top["stacks"]:     # "runs on" = the stacks whose own model says the plan fits
        assert r["runs"] == (r["launcher"] in top["runs_on"])
        if r["runs"]:
            assert r["peak_bytes"] <= r["limit_bytes"]
    # every search of the default is a real stack's, under its own runtime
    assert {(s["launcher"], s["runtime"]) for s in d["searches"]} == {
        ("megatron", "megatron-core"), ("deepspeed", "deepspeed"), ("torchtitan", "torchtitan"),
        ("accelerate", "accelerate")}


def test_idealised_physics_stays_an_explicit_runtime():
    d = _json(["search", "-m", "llama-tiny", "-n", "8", "--top-k", "1", "--runtime", "default-kernels"])
    assert d["searches"] == [{"launcher": None, "runtime": None, "runtime_set": [], "rules": [],
                              "stats": d["searches"][0]["stats"], "error": None}]
    r = runner.invoke(app, ["search", "-m", "llama-tiny", "-n", "8", "--runtime", "default-kernels", "-l", "megatron"])
    assert r.exit_code == 1 and "idealised physics" in r.output and "Traceback" not in r.output


def test_emit_writes_each_stack_with_its_own_numbers(tmp_path):
    """--emit: plan.json carries the winner's stack numbers; each stack's files carry its own
    runtime's (or the stack is refused with the reason its model gives); -l torchrun alone writes
    the stack files its script starts."""
    out = tmp_path / "e"
    r = runner.invoke(app, ["search", "-m", "llama-tiny", "-n", "8", "--top-k", "1", "--emit", str(out),
                            "-l", "torchrun"])
    assert r.exit_code == 0, r.output
    man = json.loads((out / "export_manifest.json").read_text())
    assert "torchrun" in man["written"]
    stacks = [n for n in man["written"] if n in STACK_NAMES]
    assert stacks, man
    text = (out / "torchrun.sh").read_text()
    for n, f in (("megatron", "megatron_env.sh"), ("deepspeed", "ds_config.json"),
                 ("torchtitan", "torchtitan_job.toml")):
        if f in text and f'  {n})' in text:
            assert (out / f).exists() or n in man["refused"], (n, f)


# A CI subset of benchmarks/stack_headline.py (presets and the 20 real configs × 8/64/256/1024 H100):
# dense and MoE, small and large, a real Hugging Face config, and a #1 priced by each stack the full
# grid puts first (the launcher named is the one the grid's row gives; a change is worth a look).
_HF = "tests/data/hf_configs/"
HEADLINE_CELLS = [("llama3-8b", 64, "megatron"), (_HF + "google__gemma-2-27b", 8, "deepspeed"),
                  ("gemma3-27b", 8, "torchtitan"), ("gpt-oss-20b", 8, "torchtitan"),
                  (_HF + "Qwen__Qwen3-30B-A3B", 8, "megatron")]


@pytest.mark.parametrize("model,gpus,launcher", HEADLINE_CELLS)
def test_headline_cell_runs_on_its_stack_with_that_stacks_numbers(model, gpus, launcher):
    """`grid_check.headline_check`: the #1 plan is priced by a training stack whose own model says it
    fits, and `search --launcher L` picks the same plan with the same step time and peak memory."""
    from autoplace.search.grid_check import headline_check
    from autoplace.specs.hf_config import load_hf_config
    m = load_hf_config(model) if model.startswith(_HF) else model
    r = headline_check(m, gpus)
    assert r["outcome"] == "ok" and r["problems"] == [], r
    assert r["launcher"] == launcher and launcher in r["runs_on"]
    assert set(r["runs_on"]) <= set(STACK_NAMES) and r["step_s"] > 0 and 0 < r["peak_gib"] < 80


def test_headline_check_reports_a_refusal_as_no_plan():
    """A cell where no stack fits any plan is the one-line refusal `search` prints, not a problem."""
    from autoplace.search.grid_check import headline_check
    r = headline_check("gpt-1t", 1)
    assert r["outcome"] == "no plan" and r["problems"] == [] and "\n" not in r["message"]
    assert "no training stack runs a plan that fits" in r["message"] or "no feasible plan" in r["message"]


def test_robust_choice_prefers_the_simpler_plan_inside_the_band():
    """Within 0.5 % of the fastest, fewer complications first (TP inside the NVLink domain, no CP
    below 16K tokens, fewer parallel dimensions); the note says so; outside the band, step order."""
    from autoplace.plan import parse_plan
    from autoplace.search.launchers import prefer_simple, simplicity
    from autoplace.specs.hardware import load_hardware
    hw = load_hardware("h100-sxm-80gb")
    fast = parse_plan("tp=16,sp=1,zero=1,mbs=1")          # TP across two 8-GPU NVLink domains
    cp = parse_plan("tp=2,cp=4,sp=1,zero=1,mbs=1")        # CP at 4K
    plain = parse_plan("tp=8,sp=1,zero=1,mbs=1")
    slow = parse_plan("zero=3,mbs=1")
    assert simplicity(fast, hw, 4096) == (1, 0, 1) and simplicity(cp, hw, 4096) == (0, 1, 2)
    assert simplicity(cp, hw, 32768) == (0, 0, 2) and simplicity(plain, hw, 4096) == (0, 0, 1)
    ranked = [(fast, 1.000, None, None), (cp, 1.001, None, None), (plain, 1.004, None, None),
              (slow, 1.006, None, None)]
    out, note = prefer_simple(ranked, hw, 4096)
    assert [r[0] for r in out] == [plain, cp, fast, slow]
    assert "within 0.5%" in note and "+0.40%" in note and "no TP across the NVLink domain" in note
    out, note = prefer_simple([(fast, 1.0, None, None), (plain, 1.006, None, None)], hw, 4096)
    assert [r[0] for r in out] == [fast, plain] and note == ""
