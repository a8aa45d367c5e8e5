"""A worker that crashes, hangs or raises is a failed candidate with its error; the other plans still
run and every measured result is in the JSONL file. Plus `autoplace profile --json` end to end."""

from __future__ import annotations

import json

import pytest

from autoplace.plan import parse_plan
from autoplace.specs.presets import get_preset

pytestmark = pytest.mark.slow


def test_crash_hang_and_error_are_reported_and_the_run_goes_on(tmp_path):
    from autoplace.profile.launch import run_plans
    spec = get_preset("llama-tiny").with_(layers=2)
    plans = [parse_plan("")] * 4 + [parse_plan("tp=3")]
    out = tmp_path / "res.jsonl"
    recs = run_plans(spec, plans, 1, out_jsonl=out, workdir=tmp_path / "w", settings={"steps": 1},
                     plan_timeout_s=15, equivalence=False,
                     env={"AUTOPLACE_PROFILE_FAULT": "crash:1,hang:2"})
    st = [r["status"] for r in recs]
    assert st == ["ok", "failed", "timeout", "ok", "skipped"], [(r["status"], r["error"]) for r in recs]
    assert "exit" in recs[1]["error"] and "15 s" in recs[2]["error"]
    assert "tp" in recs[4]["error"]
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert sorted(r["index"] for r in lines) == [0, 1, 2, 3, 4]
    assert all(r["ranks"] for r in lines if r["status"] == "ok")


def test_worker_exception_is_a_failed_candidate(tmp_path):
    from autoplace.profile.launch import run_plans
    spec = get_preset("llama-tiny").with_(layers=2)
    recs = run_plans(spec, [parse_plan(""), parse_plan("")], 1, out_jsonl=tmp_path / "r.jsonl",
                     workdir=tmp_path / "w", settings={"steps": 1}, equivalence=False,
                     env={"AUTOPLACE_PROFILE_FAULT": "raise:0"})
    assert [r["status"] for r in recs] == ["failed", "ok"]
    assert "injected failure in plan 0" in recs[0]["error"]


def test_cli_profile_json(tmp_path):
    from typer.testing import CliRunner

    from autoplace.cli import app
    out = tmp_path / "run"
    r = CliRunner().invoke(app, ["profile", "--model", "llama-tiny", "--gpus", "2", "--plan", "zero=1",
                                 "--backend", "gloo", "--steps", "1", "--out", str(out), "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    lines = (out / "results.jsonl").read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["plan_short"] == doc["plan_short"]
    assert (out / "work" / "launch1.job.json").exists()
    for k in ("schema_version", "plan", "ranks", "predicted", "state_bytes_exact", "equivalence"):
        assert k in doc
    assert doc["state_bytes_exact"] is True and doc["equivalence"]["equivalent"] is True
    rk = doc["ranks"][0]
    assert set(rk["state_bytes"]) == {"params", "grads", "optimizer"}
    assert {"dp", "tp", "pp"} <= set(rk["collective_bytes"]) and "peak_memory_bytes" in rk
    assert doc["predicted"][0]["step_s"] > 0          # local-cpu profile prediction
    assert len(doc["ranks"]) == 2
